"""From Keras Applications to GResNet: carry a Keras pre-activation ResNet
(``keras.applications.ResNet50V2``, ``ResNet101V2``, ``ResNet152V2``) over to
the zoo's equivalent, every weight included.

The zoo builds the same network with ``resnet_imagenet(depth,
layout="keras")`` (Keras' layer names included) and GR's gate ``k`` on every
unit; with all ``k = 1`` the gated net computes the very same function
(GR: ``u = relu(k) F(x) + x``), so an ImageNet-pretrained ResNetV2 becomes an
ImageNet-pretrained GResNet::

    from keras_gresnet import zoo
    model = zoo.gresnet50v2(weights="imagenet")  # Keras' ImageNet weights
    x = zoo.keras_applications.preprocess_input(images)  # as Keras' ResNetV2 expects
    model.predict(x)
    # or raw pixels (0..255) in, Keras' preprocessing inside the model:
    model = zoo.gresnet50v2(weights="imagenet", include_preprocessing=True)

    model = zoo.from_keras_applications(my_resnet50v2)  # any built one

``gresnet50v2``, ``gresnet101v2`` and ``gresnet152v2`` are registered
builders like every other (``list_models``, ``get_model``, ``train``), with
the zoo's ``weights=None`` default: their ``weights`` are Keras' own
(``"imagenet"`` or a Keras weights file). ``keras_gresnet.convert`` names
this module too.
"""

import inspect
import os

import keras

from keras_gresnet.layers import ResidualGate
from keras_gresnet.weights.loading import transfer_weights
from keras_gresnet.zoo.applications import check_preprocessing
from keras_gresnet.zoo.builders import register_model
from keras_gresnet.zoo.resnets import IMAGENET_STAGES, resnet_imagenet

# Keras Applications' pre-activation ResNets and their HE depth.
KERAS_RESNET_V2 = {"ResNet50V2": 50, "ResNet101V2": 101, "ResNet152V2": 152}
# The models' inputs are Keras' ResNetV2 inputs: pixels scaled to [-1, 1].
preprocess_input = keras.applications.resnet_v2.preprocess_input
# The same as a PixelNormalization (include_preprocessing=True with Keras'
# ImageNet weights): (x / 255 - 0.5) / 0.5 = x / 127.5 - 1, Keras' "tf" mode.
KERAS_PREPROCESSING = dict(method="meanstd", mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])
# The weights= a Keras Applications builder takes besides a file path.
KERAS_WEIGHTS = (None, "imagenet")


def _is_default(value, default):
    if value is default:
        return True
    return default is not None and type(value) is type(default) and value == default


def _accepted():
    return f"{', '.join(map(repr, KERAS_RESNET_V2))}, or a model one of them built"


def _application(name):
    """The Keras Applications builder called ``name`` (any case, e.g.
    ``"ResNet50V2"`` or Keras' model name ``"resnet50v2"``)."""
    if isinstance(name, str):
        for key in KERAS_RESNET_V2:
            if name.lower() == key.lower():
                return key
    raise ValueError(f"Unknown Keras application {name!r}; accepted: {_accepted()}")


def _architecture(model):
    """What a built Keras ResNetV2 is: ``depth`` and the Keras Applications
    arguments the zoo needs to build its twin. ``ValueError`` for another model."""
    layers = {layer.name: layer for layer in model.layers}

    def refuse(why):
        return ValueError(
            f"model {model.name!r} is not a Keras Applications pre-activation ResNet "
            f"({why}); accepted: {_accepted()}"
        )

    if "conv1_bn" in layers or "post_bn" not in layers:  # ResNet50 (v1) et al.
        raise refuse("it has conv1_bn or no post_bn: a post-activation ResNet?")
    sizes = []
    for stage in (2, 3, 4, 5):
        n = 0
        while f"conv{stage}_block{n + 1}_preact_bn" in layers:
            n += 1
        sizes.append(n)
    depths = {stages: depth for depth, stages in IMAGENET_STAGES.items()
              if depth in KERAS_RESNET_V2.values()}
    if tuple(sizes) not in depths:
        raise refuse(f"units per stage {tuple(sizes)}, not one of {tuple(depths)}")
    if len(model.inputs) != 1:
        raise refuse(f"{len(model.inputs)} inputs")
    arch = dict(depth=depths[tuple(sizes)], input_shape=tuple(model.inputs[0].shape[1:]))
    head = layers.get("predictions")
    arch["include_top"] = head is not None
    if head is not None:
        arch.update(classes=head.units, classifier_activation=head.activation)
    else:
        arch["pooling"] = ("avg" if "avg_pool" in layers
                           else "max" if "max_pool" in layers else None)
    return arch


def from_keras_applications(keras_model_or_name, *, gated=True, bn_momentum=None,
                            include_top=True, weights=None, input_tensor=None, input_shape=None,
                            pooling=None, classes=1000, classifier_activation="softmax",
                            include_preprocessing=False, name=None):
    """The zoo's twin of a Keras Applications ResNetV2, every weight copied.

    Returns ``zoo.resnet_imagenet(depth, layout="keras", gated=gated, ...)``
    with the source's weights: with ``gated=True`` a GResNet whose every
    gate has ``k = 1`` (one extra parameter per unit: 16 for ResNet-50), so
    both compute the same function; with ``gated=False`` the plain twin.

    Args:
        keras_model_or_name: ``"ResNet50V2"``, ``"ResNet101V2"``,
            ``"ResNet152V2"`` (built here with the Keras Applications
            arguments below), or a model one of them built (its own
            architecture and weights are used).
        gated: GR's gate on every unit.
        bn_momentum: the twin's BatchNorm momentum (a training setting: the
            function is the same); ``None``: Keras' 0.99.
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation: the Keras Applications arguments, with a name
            only (a model brings its own). ``weights``: ``None`` (random),
            ``"imagenet"`` (Keras downloads its ImageNet weights; inputs then
            go through :data:`preprocess_input`) or a Keras weights file.
        include_preprocessing: ``True`` with ``weights="imagenet"``: Keras'
            ResNetV2 preprocessing (:data:`KERAS_PREPROCESSING`) as the twin's
            first layer, so that it takes pixels in 0..255; or the zoo's
            statistics dict (:func:`keras_gresnet.zoo.applications.check_preprocessing`).
        name: name of the returned model (default: the zoo's, e.g.
            ``gresnet50v2``).

    Raises:
        ValueError: an unknown name, a model that is not a Keras ResNetV2,
            Keras arguments given with a model, a weights= Keras does not
            take, or a weight that finds no layer to go to.
    """
    if not isinstance(gated, bool):
        raise ValueError(f"gated must be True or False, got {gated!r}")
    if weights not in KERAS_WEIGHTS and not (isinstance(weights, str)
                                             and os.path.isfile(weights)):
        raise ValueError(f"weights must be None, 'imagenet' (Keras' own) or an existing "
                         f"Keras weights file of the ResNetV2, got {weights!r}")
    given = dict(include_top=include_top, weights=weights, input_tensor=input_tensor,
                 input_shape=input_shape, pooling=pooling, classes=classes,
                 classifier_activation=classifier_activation)
    # Checked before Keras builds (or downloads) anything: a ResNetV2 takes RGB.
    preprocessing = check_preprocessing(
        name or "from_keras_applications", include_preprocessing,
        {"preprocessing": KERAS_PREPROCESSING} if weights == "imagenet" else None,
        input_shape or (None, None, 3))
    if isinstance(keras_model_or_name, keras.Model):
        source = keras_model_or_name
        # The signature's own defaults (Keras', but weights=None: no download).
        defaults = inspect.signature(from_keras_applications).parameters
        clash = sorted(k for k, v in given.items() if not _is_default(v, defaults[k].default))
        if clash:
            raise ValueError(
                f"{', '.join(clash)} build a model from a name; the given model "
                f"{source.name!r} brings its own (convert it as it is)"
            )
    else:
        application = getattr(keras.applications, _application(keras_model_or_name))
        source = application(**given)
    arch = _architecture(source)
    if input_tensor is not None:  # the twin takes the same tensor (a name only)
        arch.update(input_tensor=input_tensor, input_shape=input_shape)
    depth = arch.pop("depth")
    # Keras' own model name, e.g. resnet50v2 (gresnet50v2 with the gates).
    name = name or f"{'g' if gated else ''}resnet{depth}v2"
    target = resnet_imagenet(depth, layout="keras", gated=gated, bn_momentum=bn_momentum,
                             include_preprocessing=preprocessing or False, name=name, **arch)

    copied = set(transfer_weights(source, target))
    left = [layer.name for layer in source.layers if layer.weights and layer.name not in copied]
    if left:
        raise ValueError(
            f"{source.name!r} has weighted layers with no counterpart in {target.name!r} "
            f"({len(left)}): {left[:5]}{'...' if len(left) > 5 else ''}"
        )
    fresh = [layer.name for layer in target.layers if layer.weights
             and layer.name not in copied and not isinstance(layer, ResidualGate)]
    if fresh:  # would silently change the function
        raise ValueError(
            f"{target.name!r} has weighted layers that got no weights from "
            f"{source.name!r} ({len(fresh)}): {fresh[:5]}{'...' if len(fresh) > 5 else ''}"
        )
    return target


# Keras Applications' ResNetV2 nets as GResNets: registered builders with the
# zoo's weights=None default; weights="imagenet" is Keras' own.


@register_model(family="resnet_imagenet", keras_weights=True,
                tiny=dict(input_shape=(32, 32, 3)))
def gresnet50v2(*, gated=True, bn_momentum=None, include_top=True, weights=None, input_tensor=None,
                input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
                include_preprocessing=False, name="gresnet50v2"):
    """ImageNet GResNet-50 from Keras' ResNet50V2, a gate on every unit.

    ``weights="imagenet"``: Keras' weights, every ``k = 1`` (the same function).

    Arguments as :func:`from_keras_applications`; inputs go through
    :data:`preprocess_input` (or ``include_preprocessing=True``).
    """
    return from_keras_applications(
        keras_model_or_name="ResNet50V2", gated=gated, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(family="resnet_imagenet", keras_weights=True,
                tiny=dict(input_shape=(32, 32, 3)))
def gresnet101v2(*, gated=True, bn_momentum=None, include_top=True, weights=None, input_tensor=None,
                 input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
                 include_preprocessing=False, name="gresnet101v2"):
    """ImageNet GResNet-101 from Keras' ResNet101V2, a gate on every unit.

    ``weights="imagenet"``: Keras' weights, every ``k = 1`` (the same function).

    Arguments as :func:`from_keras_applications`; inputs go through
    :data:`preprocess_input` (or ``include_preprocessing=True``).
    """
    return from_keras_applications(
        keras_model_or_name="ResNet101V2", gated=gated, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(family="resnet_imagenet", keras_weights=True,
                tiny=dict(input_shape=(32, 32, 3)))
def gresnet152v2(*, gated=True, bn_momentum=None, include_top=True, weights=None, input_tensor=None,
                 input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
                 include_preprocessing=False, name="gresnet152v2"):
    """ImageNet GResNet-152 from Keras' ResNet152V2, a gate on every unit.

    ``weights="imagenet"``: Keras' weights, every ``k = 1`` (the same function).

    Arguments as :func:`from_keras_applications`; inputs go through
    :data:`preprocess_input` (or ``include_preprocessing=True``).
    """
    return from_keras_applications(
        keras_model_or_name="ResNet152V2", gated=gated, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


__all__ = [
    "KERAS_PREPROCESSING",
    "KERAS_RESNET_V2",
    "from_keras_applications",
    "gresnet101v2",
    "gresnet152v2",
    "gresnet50v2",
    "preprocess_input",
]
