"""The figures the papers quote for a built model: depth, gates, parameters."""

import math

import keras

from keras_gresnet.layers import ResidualGate


def summarize(model):
    """The figures the papers quote for a model: ``depth`` (weighted layers on
    the main path, i.e. convs and dense layers except projection shortcuts),
    ``gates`` (GR's scalar gates), ``params`` (trainable, as the papers count)
    and ``total_params`` (with BatchNorm's moving statistics)."""
    depth = gates = 0
    for layer in model.layers:
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            depth += not layer.name.endswith("_0_conv")
        gates += isinstance(layer, ResidualGate)
    return dict(
        depth=depth,
        gates=gates,
        params=sum(math.prod(w.shape) for w in model.trainable_weights),
        total_params=model.count_params(),
    )


def _flat_layers(model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from _flat_layers(layer)
        else:
            yield layer


def multiply_adds(model):
    """Multiply-adds per image of a model's convolutions and dense layers (the
    papers' "FLOPs": HE's ImageNet tables and WRN count multiply-adds of the
    weighted layers), counted from each layer's kernel and output shape:
    a ``Conv2D`` does ``kh * kw * c_in / groups`` of them per output value, a
    ``Dense`` ``units_in`` per output. BatchNorm, ReLU, the gates, additions
    and pooling (one operation per value, under 1% of a conv net's total) are
    not counted. Twice this is the floating-point operations per image."""
    total = 0
    for layer in _flat_layers(model):
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            kernel = layer.kernel.shape
            per_output = math.prod(kernel[:-1])  # kh * kw * c_in / groups, or units_in
            outputs = math.prod(d for d in layer.output.shape[1:])
            total += per_output * outputs
    return total


def activation_values(model):
    """The values every layer of ``model`` outputs for one image, summed:
    what a training step keeps for its backward pass, per image (an upper
    bound: a fused op keeps fewer). Times the batch and the bytes per value,
    it estimates a step's activation memory."""
    return sum(math.prod(d for d in layer.output.shape[1:])
               for layer in _flat_layers(model) if not isinstance(layer, keras.layers.InputLayer))
