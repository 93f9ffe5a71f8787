"""The published grey conv net adapted to 3 channels (timm's
``adapt_input_conv``, :mod:`keras_gresnet.weights.adapt`) on the first 20
Fashion-MNIST test pictures saved as RGB PNGs by PIL: how many it gets
right, and whether it predicts what the grey net predicts on the grey
pictures (docs/weights.md quotes the figures).

    python scripts/checks/grey_as_rgb.py OUT_FOLDER
"""
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from keras_gresnet import data, zoo

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
images, labels = data.load("fashion_mnist", "test")
images, labels = np.asarray(images[:20]), np.asarray(labels[:20])
for i, picture in enumerate(images):  # real grey pictures, converted by PIL to RGB
    Image.fromarray(picture.reshape(28, 28).astype("uint8"), "L").convert("RGB").save(
        out / f"{i:02d}.png")
rgb = np.stack([np.asarray(Image.open(out / f"{i:02d}.png")) for i in range(20)])
grey = np.stack([np.asarray(Image.open(out / f"{i:02d}.png").convert("L"))
                 for i in range(20)])[..., None]
print("PNG mode:", Image.open(out / "00.png").mode, "array", rgb.shape, rgb.dtype,
      "R=G=B:", bool((rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()))

net3 = zoo.gresnet_cifar(n=5, weights="fashion_mnist", input_shape=(28, 28, 3))
net1 = zoo.gresnet_cifar(n=5, weights="fashion_mnist")
print("card source:", net3.card["source"])
print("card preprocessing:", net3.card["preprocessing"])
p3 = np.asarray(net3.predict(zoo.preprocess_input(rgb.astype("float32"), net3), verbose=0))
p1 = np.asarray(net1.predict(zoo.preprocess_input(grey.astype("float32"), net1), verbose=0))
# the same with the normalisation inside the models (raw 0-255 pixels in)
raw3 = zoo.gresnet_cifar(n=5, weights="fashion_mnist", input_shape=(28, 28, 3),
                         include_preprocessing=True)
r3 = np.asarray(raw3.predict(rgb.astype("float32"), verbose=0))
names = net3.card["class_names"]
print("labels     :", labels.tolist())
print("RGB adapted:", p3.argmax(-1).tolist())
print("grey net   :", p1.argmax(-1).tolist())
print(f"RGB adapted correct: {(p3.argmax(-1) == labels).sum()}/20; grey net correct: "
      f"{(p1.argmax(-1) == labels).sum()}/20; same predictions: "
      f"{(p3.argmax(-1) == p1.argmax(-1)).sum()}/20; raw-pixel RGB model same: "
      f"{(r3.argmax(-1) == p1.argmax(-1)).sum()}/20")
print(f"max |p_rgb - p_grey| = {np.abs(p3 - p1).max():.3g}; raw-pixel model: "
      f"{np.abs(r3 - p1).max():.3g}")
wrong = np.flatnonzero(p3.argmax(-1) != labels)
for i in wrong:
    print(f"  wrong: picture {i:02d} is {names[labels[i]]!r}, predicted {names[p3[i].argmax()]!r}")
