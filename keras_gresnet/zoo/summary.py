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
