"""The papers' input preprocessing as a layer, so that it travels with the
weights: raw pixels in, what the training pipeline fed the net out.

The input of every zoo model, with the preprocessing in it when asked
(:func:`model_input`).

GR scales pixels to [0, 1] (``"scale"``); HE subtracts the training mean
(``"mean"``); WRN also divides by the training std (``"meanstd"``), as
:class:`keras_gresnet.data.Preprocessing` records them.
"""

import math
import numbers

import keras
from keras import ops

from keras_gresnet._checks import PREPROCESSINGS
from keras_gresnet._pixels import scale_offset
from keras_gresnet.layers.merges import PACKAGE

STATISTICS_FORM = "dict(method=..., mean=[...], std=[...])"


def _values(values, argument, method):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or not len(values) or \
            not all(isinstance(v, numbers.Real) and not isinstance(v, bool)
                    and math.isfinite(v) for v in values):
        raise ValueError(
            f"{argument} of the {method!r} preprocessing must be a non-empty list of finite "
            f"numbers, one per channel, got {values!r}")
    return tuple(float(v) for v in values)


def pixel_statistics(method, mean=None, std=None, channels=None):
    """``(method, mean, std)`` checked: ``method`` in ``("scale", "mean",
    "meanstd")``, one finite ``mean`` and one ``std > 0`` per channel, and
    the statistics the method implies (``"scale"``: mean 0, std 1;
    ``"mean"``: std 1). ``None`` for a statistic the method fixes gives its
    value for as many channels as the other statistic, else ``channels``."""
    if not isinstance(method, str) or method not in PREPROCESSINGS:
        raise ValueError(
            f"Unknown preprocessing method={method!r}; accepted: "
            f"{', '.join(map(repr, PREPROCESSINGS))}")
    fixed = {"scale": ("mean", "std"), "mean": ("std",), "meanstd": ()}[method]
    given = {"mean": mean, "std": std}
    for argument in ("mean", "std"):
        if given[argument] is None and argument not in fixed:
            raise ValueError(f"the {method!r} preprocessing needs its training {argument} "
                             f"per channel: pass {STATISTICS_FORM}")
        if given[argument] is not None:
            given[argument] = _values(given[argument], argument, method)
    for argument in ("mean", "std"):
        if given[argument] is None:  # as many channels as the other statistic
            other = given["std" if argument == "mean" else "mean"]
            count = len(other) if other is not None else channels
            if count is None:
                raise ValueError(f"the {argument} of the {method!r} preprocessing needs "
                                 f"the channel count")
            given[argument] = (0.0 if argument == "mean" else 1.0,) * count
    mean, std = given["mean"], given["std"]
    if len(mean) != len(std) or not all(s > 0 for s in std):
        raise ValueError(
            f"mean and std need one value per channel and std > 0, got mean={list(mean)}, "
            f"std={list(std)}")
    if "mean" in fixed and any(mean):
        raise ValueError(f"the 'scale' preprocessing has mean 0, got mean={list(mean)} "
                         f"(use method='mean' or 'meanstd')")
    if "std" in fixed and any(s != 1 for s in std):
        raise ValueError(f"the {method!r} preprocessing has std 1, got std={list(std)} "
                         f"(use method='meanstd')")
    return method, mean, std


@keras.saving.register_keras_serializable(package=PACKAGE)
class PixelNormalization(keras.layers.Layer):
    """Raw pixels to the net's input: ``(x / 255 - mean) / std`` per channel.

    ``x`` are pixel values in 0..255 (uint8 or float). The arithmetic is the
    training pipeline's, ``float32(x) * scale + offset`` with the float32
    ``scale = 1 / (255 std)`` and ``offset = -mean / std`` of
    :func:`keras_gresnet._pixels.scale_offset` (the pipeline's own), so the output is
    what the net was trained on; it runs in float32 under any dtype policy.
    No weights: the statistics are constants of the config.

    Args:
        method: ``"scale"``, ``"mean"`` or ``"meanstd"``.
        mean, std: per channel, in [0, 1] pixel units (the fields of
            ``Preprocessing.get_config()``); a statistic the method fixes may
            be left out.
        channels: the channel count where both are left out (``"scale"``).
    """

    def __init__(self, method="scale", mean=None, std=None, channels=None,
                 data_format="channels_last", **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.method, self.mean, self.std = pixel_statistics(method, mean, std, channels)
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got "
                             f"{data_format!r}")
        self.data_format = data_format
        self._scale, self._offset = scale_offset(self.mean, self.std)
        if data_format == "channels_first":  # per channel on axis 1: (C, 1, 1)
            self._scale = [[[v]] for v in self._scale]
            self._offset = [[[v]] for v in self._offset]

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        return x * ops.convert_to_tensor(self._scale) + ops.convert_to_tensor(self._offset)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "method": self.method, "mean": list(self.mean),
                "std": list(self.std), "data_format": self.data_format}


def model_input(input_tensor, input_shape, preprocessing=None):
    """``(model_input, first_tensor)`` as Keras Applications build them; with
    ``preprocessing`` (:func:`keras_gresnet.zoo.applications.check_preprocessing`), the first tensor is the
    output of a ``PixelNormalization`` named ``"preprocessing"``."""
    if input_tensor is None:
        inputs = x = keras.layers.Input(shape=input_shape, name="input")
    elif not keras.backend.is_keras_tensor(input_tensor):
        inputs = x = keras.layers.Input(tensor=input_tensor, shape=input_shape, name="input")
    else:
        sources = keras.utils.get_source_inputs(input_tensor)
        inputs, x = (sources[0] if len(sources) == 1 else sources), input_tensor
    if preprocessing is not None:
        data_format = "channels_first" if channels_first(tuple(x.shape[1:])) else \
            "channels_last"
        x = PixelNormalization(**preprocessing, data_format=data_format,
                               name="preprocessing")(x)
    return inputs, x


def channels_first(input_shape):
    """Whether ``input_shape`` is an image in Keras' channels_first format."""
    return len(input_shape) == 3 and keras.config.image_data_format() == "channels_first"
