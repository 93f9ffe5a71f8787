"""keras-gresnet: gated (GResNet) and pre-activation residual networks for Keras 3.

Submodules load on first use (``keras_gresnet.zoo``, ``keras_gresnet.layers``...),
so ``import keras_gresnet`` and the command line start without TensorFlow.
"""

import importlib
import importlib.abc
import importlib.util
import os
import sys

from keras_gresnet._version import __version__

# TensorFlow turns its oneDNN kernels on by itself only on CPUs with AVX-512;
# without them (an AVX2-only CPU) its CPU Conv2D refuses channels_first ("only
# supports the NHWC tensor format"). It reads this once, when it is imported:
# a user's own setting is kept, and so is the choice of a TensorFlow imported
# before this package.
if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

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
__all__ = [*_SUBMODULES, "__version__", "data_config", "decode_predictions", "load_model",
           "preprocess_input"]


def decode_predictions(preds, source, top=5):
    """``[[(class_name, probability), ...] per row]``, best first: the class
    names of ``source`` (a published weights name, a run or preset folder, or
    a list of names, or the model itself); :func:`keras_gresnet.predictions.decode_predictions`."""
    predictions = importlib.import_module("keras_gresnet.predictions")
    return predictions.decode_predictions(preds, source, top=top)


def _register_with_keras():
    """Register the package's layers, models and optimizers with Keras'
    serialisation, so that ``keras.saving.load_model`` reads a zoo model's
    ``.keras`` file (its card inside) after ``import keras_gresnet``, as it
    reads a KerasHub model's after ``import keras_hub``."""
    importlib.import_module("keras_gresnet.layers")
    importlib.import_module("keras_gresnet.optimizers")


def _register_with_keras_hub():
    """Register the zoo's KerasHub classes (backbone, image classifier,
    preprocessor, image converter), so that
    ``keras_hub.models.ImageClassifier.from_preset`` loads a preset of this
    package after ``import keras_gresnet``."""
    importlib.import_module("keras_gresnet.zoo.kerashub")


# The registration each module needs once it is imported, whoever imports it.
_REGISTER_AFTER = {"keras": _register_with_keras, "keras_hub": _register_with_keras_hub}


class _AfterKeras(importlib.abc.MetaPathFinder):
    """``import keras_gresnet`` stays Keras-free (the command line starts
    without TensorFlow); the registration runs once Keras (and KerasHub)
    itself is imported, whoever imports it, right after its module is
    executed."""

    def __init__(self, name):
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # once; the spec itself from the usual finders
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            try:
                _REGISTER_AFTER[name]()
            except ImportError:  # a package the zoo needs is missing: the import still works,
                pass             # and loading a zoo file says what is missing

        spec.loader.exec_module = exec_module
        return spec


for _name, _register in _REGISTER_AFTER.items():
    if sys.modules.get(_name) is not None:
        try:
            _register()
        except ImportError:
            if _name != "keras_hub":
                raise
    elif not any(isinstance(f, _AfterKeras) and f.name == _name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterKeras(_name))


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
            argument). Either way it is the same model with the same card:
            a file holding a ``ZooModel`` (every file this package writes)
            is loaded once, compiled by Keras from what it holds; a plain
            functional file of a zoo model (one saved before models carried
            their card) is the resolved zoo model, compiled from the file's
            compile config (its optimizer's slots start afresh).
    """
    resolver = importlib.import_module("keras_gresnet.zoo.resolver")
    return resolver.resolve(source, compile=compile).model


def preprocess_input(x, source):
    """Raw 0-255 pixels as the model of ``source`` takes them (Keras
    Applications' ``preprocess_input``):
    :func:`keras_gresnet.zoo.pixels.preprocess_input`."""
    pixels = importlib.import_module("keras_gresnet.zoo.pixels")
    return pixels.preprocess_input(x, source)


def data_config(source):
    """What the model of ``source`` takes (timm's ``resolve_data_config``:
    input size, channels, layout, pixels, preprocessing with its mean and
    std, interpolation, crop, classes), for any source: a published name,
    a ``.keras`` file, a run or preset folder, ``hf://``, the model object,
    an exported artefact; :func:`keras_gresnet.zoo.pixels.data_config`."""
    pixels = importlib.import_module("keras_gresnet.zoo.pixels")
    return pixels.data_config(source)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_gresnet.{name}")
    if name in _MOVED:
        return importlib.import_module(_MOVED[name])
    raise AttributeError(f"module 'keras_gresnet' has no attribute {name!r}")
