"""GR's fully-connected MNIST nets (GR Table 1): plain, ResNet, GResNet and
gated plain.

784 inputs -> Dense(50) -> ``depth`` layers of 50 units -> softmax(10); total
depth ``depth + 2``. Only the ``depth`` middle layers differ between kinds.
"""

import math

import keras

from keras_gresnet._checks import check_choice, check_int
from keras_gresnet.layers import ZooModel, dense_layer, dense_unit
from keras_gresnet.zoo.applications import (
    check_common, check_preprocessing, check_size, head, load_weights,
    model_input,
)
from keras_gresnet.papers import GR_MNIST_ERROR
from keras_gresnet.zoo.builders import paper, register_model

GR_DEPTHS = (2, 10, 20, 50, 100)  # GR Table 1
# GR's first layer, "a linear layer with 50 neurons", read as a fully-connected
# Dot-BN-ReLU layer like every hidden layer ("dense_bn_relu", the default: a
# Dense with no nonlinearity before the first plain layer would only
# factorise one linear map), or literally as a Dense with no BN or ReLU.
STEMS = ("dense_bn_relu", "linear")
_CONFIGS = [dict(depth=d) for d in GR_DEPTHS]


def _gr_table1(kind):
    """GR Table 1's MNIST test errors of one kind of net, a result per depth."""
    return [paper("GR Table 1", GR_MNIST_ERROR[d][kind], "mnist", depth=d) for d in GR_DEPTHS]


_TINY = dict(depth=4, input_shape=(4, 4, 1))


def mlp(
    depth,
    *,
    residual=False,
    gated=False,
    units=50,
    stem="dense_bn_relu",
    k_initial=1.0,
    bn_momentum=0.99,
    include_top=True,
    weights=None,
    input_tensor=None,
    input_shape=None,
    pooling=None,
    classes=10,
    classifier_activation="softmax",
    include_preprocessing=False,
    name="mlp",
):
    """GR's MNIST net of any kind: the generic builder behind
    :func:`plain_mlp`, :func:`resnet_mlp`, :func:`gresnet_mlp` and
    :func:`gated_plain_mlp`.

    Args:
        depth: number of middle layers ``d`` (GR Table 1: 2, 10, 20, 50, 100).
            Residual kinds use ``depth / 2`` two-layer blocks, so it must be even.
        residual: identity shortcuts around pairs of layers (ResNet).
        gated: a scalar gate ``k`` per block (GResNet when ``residual``, gated
            plain otherwise).
        units: width of every hidden layer (GR: 50).
        stem: the first layer, GR's "linear layer with 50 neurons":
            ``"dense_bn_relu"`` (Dense -> BN -> ReLU, as every hidden layer;
            the default, which every published table and weight used) or
            ``"linear"`` (a Dense alone).
        k_initial: initial gate value (GR: 1).
        bn_momentum: BatchNorm momentum (Keras' default, which GR used).
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in Keras Applications; ``weights`` is
        ``None``, a ``.keras`` / ``.weights.h5`` path or a preset folder here
        (the named builders also take published names,
        :mod:`keras_gresnet.weights`). ``input_shape`` defaults to the
        weights' or ``(784,)``; any rank is flattened. ``pooling`` has no effect
        (the features are already a vector).
        include_preprocessing: put the training pipeline's pixel
            normalisation in front of the net, so that it takes raw pixels
            (0..255): ``False`` (the default), ``True`` (the statistics of
            the published ``weights``) or ``dict(method=, mean=, std=)``
            (:class:`keras_gresnet.layers.PixelNormalization`).
    """
    builder = name  # the messages name the model being built
    depth = check_int(depth, "depth", 1)
    check_int(units, "units", 1)
    check_choice(stem, "stem", STEMS)
    check_size(builder, depth // 2 if residual else depth, 784 * units + depth * units**2,
               "depth and units")
    if residual and depth % 2:
        raise ValueError(
            f"depth must be even for residual kinds (blocks of 2 layers), got {depth}"
        )
    input_shape = check_common(
        builder, include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation, default_shape=(784,), head_inputs=units)
    # the first layer's weights, from the input's real size (the check above assumed 784)
    check_size(builder, 0, math.prod(input_shape) * units, "input_shape and units")
    preprocessing = check_preprocessing(builder, include_preprocessing, weights, input_shape)
    inputs, x = model_input(input_tensor, input_shape, preprocessing)
    if len(x.shape) > 2:
        x = keras.layers.Flatten(name="flatten")(x)
    if stem == "linear":
        x = keras.layers.Dense(units, name="stem_dense")(x)
    else:
        x = dense_layer(x, units, bn_momentum=bn_momentum, name="stem_")
    for b in range(1, (depth // 2 if residual else depth) + 1):
        x = dense_unit(
            x,
            units,
            residual=residual,
            gated=gated,
            k_initial=k_initial,
            bn_momentum=bn_momentum,
            name=f"block{b}_",
        )
    x = head(x, include_top=include_top, pooling=pooling, classes=classes,
             classifier_activation=classifier_activation, spatial=False)
    model = ZooModel(inputs, x, name=name)
    return load_weights(model, weights, include_top=include_top, classes=classes)





@register_model(configs=_CONFIGS, recipe="gr_mnist", dataset="mnist", results=_gr_table1("plain"),
                tiny=_TINY)
def plain_mlp(depth, *, units=50, stem="dense_bn_relu", bn_momentum=0.99, include_top=True,
              weights=None, input_tensor=None, input_shape=None, pooling=None, classes=10,
              classifier_activation="softmax", include_preprocessing=False,
              name="plain_mlp"):
    """GR's plain MNIST net (GR Table 1).

    784 -> 50 -> ``depth`` Dense-BN-ReLU layers -> 10, the net that fails to
    train at d = 50 and 100.

    Arguments as :func:`mlp`; ``weights`` also takes a published name
    (``"plain_mlp20_mnist"``) or its dataset (``"mnist"``).
    """
    return mlp(residual=False, gated=False, depth=depth, units=units, stem=stem,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(configs=_CONFIGS, recipe="gr_mnist", dataset="mnist", results=_gr_table1("resnet"),
                tiny=_TINY)
def resnet_mlp(depth, *, units=50, stem="dense_bn_relu", bn_momentum=0.99, include_top=True,
               weights=None, input_tensor=None, input_shape=None, pooling=None, classes=10,
               classifier_activation="softmax", include_preprocessing=False,
               name="resnet_mlp"):
    """GR's MNIST ResNet (GR Table 1).

    ``depth / 2`` blocks of two Dense-BN-ReLU layers around an identity
    shortcut, ``u = f(x) + x``.

    Arguments as :func:`mlp`; ``weights`` also takes a published name
    (``"resnet_mlp20_mnist"``) or its dataset (``"mnist"``).
    """
    return mlp(residual=True, gated=False, depth=depth, units=units, stem=stem,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(configs=_CONFIGS, recipe="gr_mnist", dataset="mnist", results=_gr_table1("gresnet"),
                tiny=_TINY)
def gresnet_mlp(depth, *, units=50, stem="dense_bn_relu", k_initial=1.0, bn_momentum=0.99,
                include_top=True, weights=None, input_tensor=None, input_shape=None,
                pooling=None, classes=10, classifier_activation="softmax",
                include_preprocessing=False, name="gresnet_mlp"):
    """GR's MNIST GResNet (GR Tables 1-2): one scalar gate per block.

    The ResNet MLP with a gate ``k`` on every block, ``u = g(k) f(x) + x``,
    ``g = ReLU``.

    Arguments as :func:`mlp`; ``weights`` also takes a published name
    (``"gresnet_mlp20_mnist"``) or its dataset (``"mnist"``).
    """
    return mlp(residual=True, gated=True, depth=depth, units=units, stem=stem,
        k_initial=k_initial, bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(configs=_CONFIGS, recipe="gr_mnist", dataset="mnist",
                tiny=_TINY)
def gated_plain_mlp(depth, *, units=50, stem="dense_bn_relu", k_initial=1.0,
                    bn_momentum=0.99, include_top=True, weights=None, input_tensor=None,
                    input_shape=None, pooling=None, classes=10,
                    classifier_activation="softmax", include_preprocessing=False,
                    name="gated_plain_mlp"):
    """GR's gated plain MNIST net: a gate on every layer.

    ``u = g(k) f(x) + (1 - g(k)) x``, ``g = ReLU``.

    Arguments as :func:`mlp`.
    """
    return mlp(residual=False, gated=True, depth=depth, units=units, stem=stem,
        k_initial=k_initial, bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)
