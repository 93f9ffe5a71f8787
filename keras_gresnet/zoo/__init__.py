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

# Every registered builder, e.g. ``zoo.gresnet_cifar``, ``zoo.preact_resnet164``.
globals().update({name: model_builder(name) for name in list_models()})

__all__ = [
    "get_model",
    "list_models",
    "mlp",
    "model_builder",
    "register_model",
    "resnet",
    "summarize",
    "transfer_weights",
    "weight_entries",
    *list_models(),
]
