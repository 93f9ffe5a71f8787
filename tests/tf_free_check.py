"""Run by tests/test_backends.py in a fresh process, and by CI in a venv
without TensorFlow: what works without TensorFlow, on JAX (or
``KERAS_BACKEND``). TensorFlow and tensorflow_datasets are made unimportable
first, so the check means the same where they are installed. Imports the
package, builds a model, loads published weights, reads the gates, prunes,
fine-tunes from numpy arrays, and trains from the command line on an
in-memory dataset (Fashion-MNIST) and on CIFAR files from ``--data-dir``;
prints what it measured as JSON."""

import json
import os
import sys

for _name in ("tensorflow", "tensorflow_datasets"):
    sys.modules[_name] = None  # `import tensorflow` now raises ImportError
os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402

from keras_gresnet import analysis, cli, data, finetune, training, zoo  # noqa: E402
from keras_gresnet.data import synthetic  # noqa: E402

out = sys.argv[1]
report = dict(backend=keras.backend.backend())

published = zoo.gresnet_mlp(depth=2, weights="fashion_mnist")
images, labels = data.load("fashion_mnist", "test")
x = images[:2000].astype("float32") / 255
y = labels[:2000]
published.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
report["published_error_percent"] = 100 * (1 - published.evaluate(x, y, verbose=0)[1])
report["gates"] = analysis.gate_values(published)
pruned = analysis.prune(published, [0])
report["pruned_blocks"] = len(analysis.residual_blocks(pruned))

tuned, history = finetune.finetune(published, (x[:256], y[:256] % 5), classes=5,
                                   head_epochs=1, full_epochs=1)
report["finetuned_classes"] = int(tuned.output.shape[-1])
report["finetune_loss"] = history["full"]["loss"]

code = cli.main(["train", "gresnet_mlp", "--depth", "2", "--dataset", "fashion_mnist",
                 "--epochs", "1", "--max-train-examples", "1024", "--max-test-examples", "256",
                 "--out", f"{out}/mlp"])
report["mlp_exit"] = code
report["mlp_results"] = training.read_results(f"{out}/mlp")
synthetic.write_synthetic("cifar10", f"{out}/cifar", 96, 32, seed=1)
code = cli.main(["train", "gresnet_cifar", "--n", "1", "--dataset", "cifar10",
                 "--data-dir", f"{out}/cifar", "--epochs", "2", "--batch-size", "16",
                 "--out", f"{out}/cifar_run"])
report["cifar_exit"] = code
report["cifar_config"] = json.loads(open(f"{out}/cifar_run/config.json").read())
report["tensorflow_imported"] = sys.modules.get("tensorflow") is not None
print(json.dumps(report, default=float))
