"""keras-gresnet: gated (GResNet) and pre-activation residual networks for Keras 3.

Submodules load on first use (``keras_gresnet.zoo``, ``keras_gresnet.layers``...),
so ``import keras_gresnet`` and the command line start without TensorFlow.
"""

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "analysis", "cli", "convert", "data", "export", "files", "finetune", "layers", "optimizers",
    "plots", "training", "weights", "zoo",
)
# Modules that moved into a package keep their old attribute names:
# ``from keras_gresnet import recipes`` still works.
_MOVED = {
    "recipes": "keras_gresnet.training.recipes",
    "distributed": "keras_gresnet.training.multiworker",
}
__all__ = [*_SUBMODULES, "__version__"]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_gresnet.{name}")
    if name in _MOVED:
        return importlib.import_module(_MOVED[name])
    raise AttributeError(f"module 'keras_gresnet' has no attribute {name!r}")
