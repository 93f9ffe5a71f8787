"""Shared test helpers (importable: pytest puts tests/ on sys.path)."""

import keras
import numpy as np

RNG = np.random.default_rng(0)


def randomize_bn(model, scale=0.1):
    """Non-trivial BN statistics so that an identity cannot pass by accident."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            for w in (layer.moving_mean, layer.beta):
                w.assign(RNG.normal(size=w.shape, scale=scale).astype("float32"))


def random_inputs(model, batch=3):
    """A random float32 batch of the model's input shape."""
    return RNG.normal(size=(batch, *model.input.shape[1:])).astype("float32")
