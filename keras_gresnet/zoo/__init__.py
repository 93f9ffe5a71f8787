"""The model zoo: a builder for every model of GR and HE (and WRN).

Every builder takes the Keras Applications arguments (``include_top, weights,
input_tensor, input_shape, pooling, classes, classifier_activation, name``)
plus its architecture arguments, and is reachable by name::

    from keras_gresnet import zoo
    zoo.list_models("*gresnet*")
    model = zoo.get_model("gresnet_cifar", n=5)
"""

from keras_gresnet.zoo._base import summarize, transfer_weights, weight_entries
from keras_gresnet.zoo._registry import get_model, list_models, model_builder, register_model
from keras_gresnet.zoo._mlp import mlp
from keras_gresnet.zoo._resnet import resnet
from keras_gresnet.weights import from_preset, list_weights, save_preset

# Every registered builder, e.g. ``zoo.gresnet_cifar``, ``zoo.preact_resnet164``.
globals().update({name: model_builder(name) for name in list_models()})

__all__ = [
    "from_preset",
    "get_model",
    "list_models",
    "list_weights",
    "mlp",
    "model_builder",
    "register_model",
    "resnet",
    "save_preset",
    "summarize",
    "transfer_weights",
    "weight_entries",
    *list_models(),
]
