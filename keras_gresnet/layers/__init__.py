"""Gate and shortcut layers, residual units (GR and HE), the pixel preprocessing layer
and graph helpers, built on ``keras.ops`` only: the bottom of the package,
importing nothing above it."""

from keras_gresnet.layers.convolution import Conv2D
from keras_gresnet.layers.graph import all_layers, gate_layers, takes_raw_pixels
from keras_gresnet.layers.merges import (
    GATE_FORMS,
    SHORTCUT_GATE_FORMS,
    ResidualGate,
    ScaledAdd,
    ShortcutGate,
)
from keras_gresnet.layers.model import ZooModel, model_card
from keras_gresnet.layers.normalization import BatchNormalization
from keras_gresnet.layers.inputs import PixelNormalization, pixel_statistics
from keras_gresnet.layers.residual import DenseUnit, ResidualUnit
from keras_gresnet.layers.shortcuts import ShortcutDropout, ZeroPadShortcut
from keras_gresnet.layers.units import (
    BLOCKS,
    CONV_INITIALIZERS,
    NAMINGS,
    PREACT_TYPES,
    PREACT_UNITS,
    SHORTCUT_PROJECTIONS,
    SHORTCUTS,
    STRIDE_ONS,
    SUBSAMPLES,
    KERAS_RESNET_V2,
    UNITS,
    UnitSpec,
    channel_axis,
    conv,
    dense_layer,
    dense_unit,
    initializer,
    residual_unit,
)

__all__ = [
    "BLOCKS",
    "CONV_INITIALIZERS",
    "GATE_FORMS",
    "NAMINGS",
    "PREACT_TYPES",
    "PREACT_UNITS",
    "SHORTCUTS",
    "SHORTCUT_GATE_FORMS",
    "SHORTCUT_PROJECTIONS",
    "STRIDE_ONS",
    "SUBSAMPLES",
    "UNITS",
    "KERAS_RESNET_V2",
    "UnitSpec",
    "BatchNormalization",
    "Conv2D",
    "DenseUnit",
    "PixelNormalization",
    "ResidualGate",
    "ResidualUnit",
    "ScaledAdd",
    "ShortcutDropout",
    "ShortcutGate",
    "ZeroPadShortcut",
    "ZooModel",
    "all_layers",
    "channel_axis",
    "model_card",
    "takes_raw_pixels",
    "conv",
    "dense_layer",
    "dense_unit",
    "gate_layers",
    "initializer",
    "pixel_statistics",
    "residual_unit",
]
