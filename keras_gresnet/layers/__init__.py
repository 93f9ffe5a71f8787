"""Gate layers and residual units (GR and HE), built on ``keras.ops`` only."""

from keras_gresnet.layers.merges import (
    GATE_FORMS,
    SHORTCUT_GATE_FORMS,
    ResidualGate,
    ScaledAdd,
    ShortcutGate,
    all_layers,
    gate_layers,
)
from keras_gresnet.layers.units import (
    BLOCKS,
    NAMINGS,
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
    "SHORTCUTS",
    "SHORTCUT_GATE_FORMS",
    "SUBSAMPLES",
    "UNITS",
    "ResidualGate",
    "ScaledAdd",
    "ShortcutGate",
    "all_layers",
    "check_unit_args",
    "conv",
    "dense_layer",
    "dense_unit",
    "gate_layers",
    "residual_unit",
]
