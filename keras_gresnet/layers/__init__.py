"""Gate layers, residual units (GR and HE), the pixel preprocessing layer
and graph helpers, built on ``keras.ops`` only: the bottom of the package,
importing nothing above it."""

from keras_gresnet.layers.graph import all_layers, gate_layers
from keras_gresnet.layers.merges import (
    GATE_FORMS,
    SHORTCUT_GATE_FORMS,
    ResidualGate,
    ScaledAdd,
    ShortcutGate,
)
from keras_gresnet.layers.preprocessing import PixelNormalization, pixel_statistics
from keras_gresnet.layers.units import (
    BLOCKS,
    NAMINGS,
    PREACT_UNITS,
    SHORTCUTS,
    SUBSAMPLES,
    UNITS,
    check_unit_args,
    conv,
    dense_layer,
    dense_unit,
    residual_unit,
)

__all__ = [
    "BLOCKS",
    "GATE_FORMS",
    "NAMINGS",
    "PREACT_UNITS",
    "SHORTCUTS",
    "SHORTCUT_GATE_FORMS",
    "SUBSAMPLES",
    "UNITS",
    "PixelNormalization",
    "ResidualGate",
    "ScaledAdd",
    "ShortcutGate",
    "all_layers",
    "check_unit_args",
    "conv",
    "dense_layer",
    "dense_unit",
    "gate_layers",
    "pixel_statistics",
    "residual_unit",
]
