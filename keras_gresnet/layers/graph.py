"""Finding layers in a built model: every layer (nested models included) and
GR's gates, in network order."""

from keras_gresnet.layers.merges import ResidualGate
from keras_gresnet.layers.inputs import PixelNormalization


def all_layers(model):
    """Every layer of ``model``, a nested model before its own layers."""
    for layer in model.layers:
        yield layer
        if hasattr(layer, "layers"):
            yield from all_layers(layer)


def gate_layers(model):
    """Every :class:`ResidualGate` of ``model`` (nested models included), in
    network order; ``gate.name`` is its block, ``gate.g`` its current g(k)."""
    return [layer for layer in all_layers(model) if isinstance(layer, ResidualGate)]


def takes_raw_pixels(model):
    """Whether ``model`` normalises raw 0-255 pixels itself: it has a
    :class:`PixelNormalization` layer (``include_preprocessing``, or a
    fine-tuned copy given raw pixels)."""
    return any(isinstance(layer, PixelNormalization) for layer in all_layers(model))
