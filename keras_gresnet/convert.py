"""Keras Applications' ResNetV2 nets as GResNets: the public name of
:mod:`keras_gresnet.zoo.keras_applications`, where the conversion and its
registered builders (``gresnet50v2``...) live beside the other zoo models."""

from keras_gresnet.zoo.keras_applications import (  # noqa: F401
    KERAS_PREPROCESSING,
    KERAS_RESNET_V2,
    from_keras_applications,
    gresnet50v2,
    gresnet101v2,
    gresnet152v2,
    preprocess_input,
)

__all__ = [
    "KERAS_PREPROCESSING",
    "KERAS_RESNET_V2",
    "from_keras_applications",
    "gresnet101v2",
    "gresnet152v2",
    "gresnet50v2",
    "preprocess_input",
]
