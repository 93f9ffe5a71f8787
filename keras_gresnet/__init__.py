"""keras-gresnet: gated (GResNet) and pre-activation residual networks for Keras 3.

Submodules load on first use (``keras_gresnet.zoo``, ``keras_gresnet.layers``...),
so ``import keras_gresnet`` and the command line start without TensorFlow.
"""

import importlib

from keras_gresnet._version import __version__

_SUBMODULES = (
    "analysis", "cli", "convert", "data", "export", "files", "finetune", "layers", "optimizers",
    "plots", "predictions", "training", "weights", "zoo",
)
# Modules that moved into a package keep their old attribute names:
# ``from keras_gresnet import recipes`` still works.
_MOVED = {
    "recipes": "keras_gresnet.training.recipes",
    "distributed": "keras_gresnet.training.backends.tensorflow_multiworker",
}
__all__ = [*_SUBMODULES, "__version__", "decode_predictions", "load_model"]


def decode_predictions(preds, source, top=5):
    """``[[(class_name, probability), ...] per row]``, best first: the class
    names of ``source`` (a published weights name, a run or preset folder, or
    a list of names, or the model itself); :func:`keras_gresnet.predictions.decode_predictions`."""
    predictions = importlib.import_module("keras_gresnet.predictions")
    return predictions.decode_predictions(preds, source, top=top)


def load_model(path, *, compile=True):
    """Load a ``.keras`` file of a zoo model (a run's ``model.keras``, a
    published file, one a user saved) with ``safe_mode=True``: no code from
    the file runs. ``import keras_gresnet`` alone does not import Keras (so
    the command line starts fast), so Keras' own ``keras.saving.load_model``
    finds the package's layers (``ResidualGate``, ``ZeroPadShortcut``...)
    and optimizers (``Keras1Nadam``) only once ``keras_gresnet.layers`` and
    ``keras_gresnet.optimizers`` are imported; this imports them first.
    The loader is the run folders' own (a file Keras cannot read is a
    ``ValueError`` naming it).

    Args:
        path: the ``.keras`` file.
        compile: also restore the optimizer, loss and metrics (Keras' own
            argument).
    """
    importlib.import_module("keras_gresnet.layers")  # registers the layers
    importlib.import_module("keras_gresnet.optimizers")  # and the optimizers
    runs = importlib.import_module("keras_gresnet.training.runs")
    return runs.load_model_file(path, compile=compile)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_gresnet.{name}")
    if name in _MOVED:
        return importlib.import_module(_MOVED[name])
    raise AttributeError(f"module 'keras_gresnet' has no attribute {name!r}")
