"""keras-gresnet: gated (GResNet) and pre-activation residual networks for Keras 3.

Submodules load on first use (``keras_gresnet.zoo``, ``keras_gresnet.layers``...),
so ``import keras_gresnet`` and the command line start without TensorFlow.
"""

import importlib
from pathlib import Path

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
__all__ = [*_SUBMODULES, "__version__", "decode_predictions", "load_model", "preprocess_input"]


def decode_predictions(preds, source, top=5):
    """``[[(class_name, probability), ...] per row]``, best first: the class
    names of ``source`` (a published weights name, a run or preset folder, or
    a list of names, or the model itself); :func:`keras_gresnet.predictions.decode_predictions`."""
    predictions = importlib.import_module("keras_gresnet.predictions")
    return predictions.decode_predictions(preds, source, top=top)


def load_model(source, *, compile=True):
    """The model of ``source``, with its card: a ``.keras`` file (loaded with
    ``safe_mode=True``: no code from the file runs), a run or preset folder,
    a published weights name or ``hf://owner/name``
    (:func:`keras_gresnet.zoo.resolve`, the one resolver every command uses).
    The package's layers and optimizers are registered first, so a ``.keras``
    file of a zoo model needs no ``custom_objects``.

    Args:
        source: anything :func:`keras_gresnet.zoo.resolve` takes.
        compile: for a ``.keras`` file or a run folder, also restore the
            optimizer, loss and metrics it was saved with (Keras' own
            argument); the model then comes as the file holds it, with the
            resolved card where it is a zoo model.
    """
    resolver = importlib.import_module("keras_gresnet.zoo.resolver")
    resolved = resolver.resolve(source)
    if not compile or resolved.kind not in ("keras_file", "run"):
        return resolved.model
    loading = importlib.import_module("keras_gresnet.weights.loading")
    path = Path(source) / "model.keras" if resolved.kind == "run" else Path(source)
    model = loading.load_model_file(path, compile=True)
    if hasattr(model, "remember"):
        model.remember(model.builder, model.builder_kwargs, resolved.card)
    return model


def preprocess_input(x, source):
    """Raw 0-255 pixels as the model of ``source`` takes them (Keras
    Applications' ``preprocess_input``):
    :func:`keras_gresnet.zoo.resolver.preprocess_input`."""
    resolver = importlib.import_module("keras_gresnet.zoo.resolver")
    return resolver.preprocess_input(x, source)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_gresnet.{name}")
    if name in _MOVED:
        return importlib.import_module(_MOVED[name])
    raise AttributeError(f"module 'keras_gresnet' has no attribute {name!r}")
