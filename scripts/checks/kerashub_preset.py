"""KerasHub's own ``ImageClassifier.from_preset`` on a preset of this package:
20 Fashion-MNIST test pictures written as PNGs by PIL, read back as raw
pixels, classified by KerasHub, against the published name's answers.

    python scripts/checks/kerashub_preset.py
"""

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import keras_gresnet  # noqa: E402  (registers the zoo's KerasHub classes)
from keras_gresnet import zoo  # noqa: E402
from keras_gresnet.data import load  # noqa: E402

NAME = "gresnet_cifar5_fashion_mnist"


def main():
    x, y = load("fashion_mnist", "test")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(20):
            Image.fromarray(x[i].reshape(28, 28)).save(f"{tmp}/{i:02d}.png")
        pictures = np.stack([np.asarray(Image.open(f"{tmp}/{i:02d}.png"))[..., None]
                             for i in range(20)])
        preset = zoo.weights_preset(NAME, f"{tmp}/preset")
        print("preset files:", ", ".join(sorted(os.listdir(preset))))
        task = keras_hub.models.ImageClassifier.from_preset(str(preset))
        probabilities = task.predict(pictures, verbose=0)
        ours = zoo.resolve(NAME).model
        expected = ours.predict(keras_gresnet.preprocess_input(pictures, NAME), verbose=0)
        print(f"{type(task).__name__}: {int((probabilities.argmax(1) == y[:20]).sum())} / 20 "
              f"right; same top-1 as {NAME}: "
              f"{int((probabilities.argmax(1) == expected.argmax(1)).sum())} / 20; largest "
              f"probability difference {float(np.abs(probabilities - expected).max())}")
        back = zoo.from_preset(preset)
        difference = max(float(np.abs(a - b).max())
                         for a, b in zip(back.get_weights(), ours.get_weights()))
        print(f"zoo.from_preset: {type(back).__name__} {back.builder}, largest weight "
              f"difference {difference}, classes {back.card.get('class_names', [])[:3]}...")
        backbone = keras_hub.models.Backbone.from_preset(str(preset))
        print(f"keras_hub.models.Backbone.from_preset: {type(backbone).__name__}, "
              f"output {backbone.output.shape}")


if __name__ == "__main__":
    main()
