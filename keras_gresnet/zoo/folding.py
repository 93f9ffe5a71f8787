"""BatchNorm folded into the convolution (or dense layer) before it, for
inference.

At inference a BatchNorm is the per-channel affine map
``y = gamma (z - mean) / sqrt(var + eps) + beta``; where ``z`` is a
convolution's (or a dense layer's) output and nothing else reads ``z``, the
map goes into that layer's kernel and bias:

    s = gamma / sqrt(var + eps)
    kernel' = kernel * s          (per output channel)
    bias'   = (bias - mean) * s + beta

so the BatchNorm's pass over the activations (and, in a bfloat16 graph, its
casts) disappears. In HE's post-activation units every BatchNorm follows a
conv; in a pre-activation unit only the one between F's convs does (the unit's
first BN-ReLU reads the sum ``h(x) + F(x)``, which no layer produces alone, and
stays). :func:`inference_model` is what ``keras-gresnet predict`` and every
export run: same inputs, outputs and card, the folded layers' weights
computed in float64.
"""

import keras
import numpy as np

from keras_gresnet.layers import ZooModel
from keras_gresnet.layers.model import model_card
from keras_gresnet.zoo.resolver import resolve

# The layers a BatchNorm folds into: a linear map with a kernel whose last
# axis is the output channel (Keras' Conv*D kernels are (..., in, out) in
# either data format; Dense's (in, out)).
FOLDS_INTO = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D, keras.layers.Dense)


def foldable_batchnorms(model):
    """``{batchnorm name: layer name}`` of ``model``'s BatchNorms that fold
    into the layer before them: a BatchNorm (not synchronised, no renorm)
    over the channel axis of a linear conv or dense layer whose output it
    alone reads, each layer called once in the graph."""
    nodes = [node for depth in model._nodes_by_depth.values() for node in depth]
    readers = {}
    calls = {}
    for node in nodes:
        calls[id(node.operation)] = calls.get(id(node.operation), 0) + 1
        for tensor in node.input_tensors:
            readers[id(tensor)] = readers.get(id(tensor), 0) + 1
    for tensor in model.outputs:
        readers[id(tensor)] = readers.get(id(tensor), 0) + 1
    pairs = {}
    for node in nodes:
        bn = node.operation
        if not isinstance(bn, keras.layers.BatchNormalization) or len(node.input_tensors) != 1:
            continue
        (z,) = node.input_tensors
        producer = z._keras_history.operation
        if (isinstance(producer, FOLDS_INTO) and _folds(bn, producer, len(z.shape))
                and readers[id(z)] == 1 and calls[id(producer)] == 1 and calls[id(bn)] == 1):
            pairs[bn.name] = producer.name
    return pairs


def _folds(bn, producer, rank):
    axis = bn.axis if isinstance(bn.axis, int) else (
        bn.axis[0] if len(bn.axis) == 1 else None)
    if axis is None or bn.renorm or bn.synchronized:
        return False
    channel = (1 if getattr(producer, "data_format", "channels_last") == "channels_first"
               else rank - 1)
    return axis % rank == channel and producer.activation is keras.activations.linear


def inference_model(source, *, fold_batchnorm=True, dtype_policy=None):
    """The model of ``source`` (anything :func:`~keras_gresnet.zoo.resolve`
    takes) for inference: every BatchNorm that :func:`foldable_batchnorms`
    finds folded into the layer before it (which gets a bias), the others
    as they are. A new model with new variables (the source is left alone),
    the same inputs and outputs as ``source``'s model, and its card; no
    builder record, as its graph is no longer the builder's. Its outputs
    equal the source's at inference up to float rounding (folded in
    float64, stored in the variables' dtype). ``fold_batchnorm=False``
    keeps every BatchNorm. ``dtype_policy`` (a Keras dtype policy or its
    name, e.g. ``"float32"``): every layer computes in it, the weights
    cast to its variable dtype (a ``mixed_bfloat16`` net's variables are
    float32 already: the same numbers); default: each layer's own. With
    nothing to fold or cast, the resolved model itself."""
    model = resolve(source, argument="source").model
    policy = None if dtype_policy is None else _policy(dtype_policy)
    recast = policy is not None and any(
        layer.dtype_policy.name != policy.name for layer in model.layers
        if not isinstance(layer, keras.layers.InputLayer))
    if not fold_batchnorm and not recast:
        return model
    if not isinstance(model, keras.Model) or not hasattr(model, "_nodes_by_depth"):
        raise ValueError(f"source must be a functional Keras model to fold its BatchNorms "
                         f"or change its dtype policy, got {type(model).__name__}")
    pairs = foldable_batchnorms(model) if fold_batchnorm else {}
    if not pairs and not recast:
        return model
    bn_of = {producer: bn for bn, producer in pairs.items()}  # one BN a producer

    def clone(layer):
        config = layer.get_config()
        if layer.name in bn_of:
            config["use_bias"] = True
        if recast:
            config["dtype"] = policy.name
        return layer.__class__.from_config(config)

    def call(layer, *args, **kwargs):
        if layer.name in pairs:  # the folded BatchNorm: its input passes through
            return args[0]
        return layer(*args, **kwargs)

    folded = keras.models.clone_model(model, clone_function=clone, call_function=call)
    for layer in folded.layers:
        if not layer.weights:  # an input (whose clone is named after its tensor), a ReLU...
            continue
        source_layer = model.get_layer(layer.name)
        if layer.name in bn_of:
            layer.set_weights(_folded_weights(source_layer, model.get_layer(bn_of[layer.name]),
                                              layer.kernel.dtype))
        else:
            layer.set_weights([keras.ops.convert_to_numpy(keras.ops.cast(value, target.dtype))
                               for value, target in zip(source_layer.weights, layer.weights)])
    if isinstance(model, ZooModel):
        if not isinstance(folded, ZooModel):
            folded = ZooModel(folded.inputs, folded.outputs, name=model.name)
        folded.remember(None, None, model_card(model))
    return folded


def _policy(dtype_policy):
    try:
        return keras.dtype_policies.get(dtype_policy)
    except (TypeError, ValueError):
        raise ValueError(f"dtype_policy must be a Keras dtype policy or its name ('float32', "
                         f"'mixed_bfloat16'...), got {dtype_policy!r}") from None


def _folded_weights(layer, bn, dtype):
    """``[kernel', bias']`` of ``layer`` with ``bn`` folded in (float64
    arithmetic, cast to ``dtype``, the folded layer's variable dtype)."""
    kernel = keras.ops.convert_to_numpy(layer.kernel)
    channels = kernel.shape[-1]
    bias = (keras.ops.convert_to_numpy(layer.bias).astype(np.float64) if layer.use_bias
            else np.zeros(channels))

    def value(variable, default):
        if variable is None:
            return np.full(channels, default)
        return keras.ops.convert_to_numpy(variable).astype(np.float64)

    gamma, beta = value(bn.gamma, 1.0), value(bn.beta, 0.0)
    mean, variance = value(bn.moving_mean, 0.0), value(bn.moving_variance, 1.0)
    scale = gamma / np.sqrt(variance + bn.epsilon)
    return [keras.ops.convert_to_numpy(keras.ops.cast(array, dtype)) for array in (
        kernel.astype(np.float64) * scale, (bias - mean) * scale + beta)]
