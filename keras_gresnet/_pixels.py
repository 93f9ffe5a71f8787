"""The one pixel-normalisation formula, shared by the training pipeline
(:class:`keras_gresnet.data.Preprocessing`) and the layer that travels with
the weights (:class:`keras_gresnet.layers.PixelNormalization`), so that the
two compute the same float32 numbers."""

import numpy as np


def scale_offset(mean, std):
    """float32 ``(scale, offset)`` per channel: ``(x / 255 - mean) / std`` is
    computed as ``float32(x) * scale + offset`` (one multiply-add per pixel)."""
    std = np.asarray(std, np.float32)
    scale = np.float32(1.0) / (np.float32(255.0) * std)
    offset = -np.asarray(mean, np.float32) / std
    return scale, offset
