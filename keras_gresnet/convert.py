"""Keras Applications' ResNetV2 nets as GResNets: the public name of
:mod:`keras_gresnet.zoo.keras_applications`, where the conversion and its
registered builders (``gresnet50v2``...) live beside the other zoo models."""

from keras_gresnet.zoo import keras_applications as _module
from keras_gresnet.zoo.keras_applications import *  # noqa: F401,F403

__all__ = list(_module.__all__)
