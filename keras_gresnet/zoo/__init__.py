"""The model zoo: a builder for every model of GR and HE (and WRN).

Every builder takes the Keras Applications arguments (``include_top, weights,
input_tensor, input_shape, pooling, classes, classifier_activation, name``)
plus its architecture arguments, and is reachable by name::

    from keras_gresnet import zoo
    zoo.list_models("*gresnet*")
    model = zoo.gresnet_cifar(n=5)
    model = zoo.get_model("gresnet_mlp", depth=20, weights="mnist")

Modules: :mod:`~keras_gresnet.zoo.builders` (names -> builders, the weights
check of a call), :mod:`~keras_gresnet.zoo.applications` (the Keras Applications
arguments, input and its preprocessing, head, weights),
:mod:`~keras_gresnet.zoo.mlps` (GR's MNIST nets),
:mod:`~keras_gresnet.zoo.resnets` (HE's, GR's and WRN's conv nets),
:mod:`~keras_gresnet.zoo.keras_applications` (Keras' ResNetV2 nets as GResNets,
their ImageNet weights included),
:mod:`~keras_gresnet.zoo.presets` (preset folders written and uploaded, ``from_preset``),
:mod:`~keras_gresnet.zoo.resolver` (the one resolver: any source to a model and its card),
:mod:`~keras_gresnet.zoo.cards` (a model's card, made by one function),
:mod:`~keras_gresnet.zoo.run_config` (a run folder's ``config.json``, read and checked),
:mod:`~keras_gresnet.zoo.pixels` (the pixel contract: ``preprocess_input``,
``raw_pixels_model``, ``data_config``),
:mod:`~keras_gresnet.zoo.hub` (``hf://`` presets on the Hugging Face Hub),
:mod:`~keras_gresnet.zoo.summary` (the papers' figures of a model),
:mod:`~keras_gresnet.zoo.features` (a conv net's feature maps, ``P0``...``P5``),
:mod:`~keras_gresnet.zoo.folding` (BatchNorm folded for inference, ``inference_model``).
"""

from keras_gresnet.weights import list_weights
from keras_gresnet.weights.loading import transfer_weights
from keras_gresnet.zoo.features import feature_extractor, stage_layers
from keras_gresnet.zoo.folding import foldable_batchnorms, inference_model
from keras_gresnet.zoo.keras_applications import from_keras_applications
from keras_gresnet.zoo.mlps import mlp
from keras_gresnet.zoo.pixels import data_config, preprocess_input, raw_pixels_model
from keras_gresnet.zoo.presets import from_preset, save_preset, upload_preset, weights_preset
from keras_gresnet.zoo.resolver import Resolved, load_into, resolve
from keras_gresnet.zoo.builders import get_model, list_models, model_builder, register_model
from keras_gresnet.zoo.resnets import resnet
from keras_gresnet.zoo.summary import multiply_adds, summarize

# Every registered builder by its name (zoo.gresnet_cifar): the modules above
# registered them as they were imported; a new one needs no line here.
globals().update({name: model_builder(name) for name in list_models()})

__all__ = [
    "data_config",
    "feature_extractor",
    "foldable_batchnorms",
    "inference_model",
    "from_keras_applications",
    "from_preset",
    "get_model",
    "list_models",
    "list_weights",
    "load_into",
    "preprocess_input",
    "raw_pixels_model",
    "resolve",
    "Resolved",
    "mlp",
    "model_builder",
    "register_model",
    "resnet",
    "save_preset",
    "stage_layers",
    "multiply_adds",
    "summarize",
    "transfer_weights",
    "upload_preset",
    "weights_preset",
    *list_models(),
]
