"""Layers of a unit's shortcut ``h(x)`` that Keras has no layer for: the
zero-padded identity of fb.resnet.torch's CIFAR nets and HE Table 1's
dropout shortcut. ``keras.ops`` only, registered for ``safe_mode`` loading."""

import keras
from keras import ops

PACKAGE = "keras_gresnet"


def _subsample_nhwc(x, s, training=False):
    """``x[:, ::s, ::s, :]``, the same values. Where ``s`` divides the height
    and width, as a reshape to ``(N, H/s, s, W/s, s*C)`` and a unit-stride
    part of it: TensorFlow's CPU ``StridedSlice`` walks element by element
    and took 5x the time of this slice forward (docs/benchmarks.md,
    2026-12-05: gresnet_cifar(n=5) inference +10% in float32, +8% in
    bfloat16). Its gradient, ``StridedSliceGrad``, walks element by element
    even for the unit-stride ``blocks[:, :, 0, :, :c]``, so in training the
    part is an ``ops.slice``, whose gradient is one ``Pad`` (2026-12-07: 3.3
    against 0.4 ms forward and backward at 128x32x32x16, 6 to 11 ms of a
    gresnet_cifar step). Inference keeps the index: it needs no batch size,
    and it is what the exports hold (the ops ``artefact_checks`` allows).
    Other sizes keep the strided slice."""
    _, h, w, c = x.shape
    if h is None or w is None or c is None or h % s or w % s:
        return x[:, ::s, ::s, :]
    blocks = ops.reshape(x, (-1, h // s, s, w // s, s * c))
    if not training:
        return blocks[:, :, 0, :, :c]
    kept = ops.slice(blocks, (0, 0, 0, 0, 0), (ops.shape(x)[0], h // s, 1, w // s, c))
    return ops.reshape(kept, (-1, h // s, w // s, c))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ZeroPadShortcut(keras.layers.Layer):
    """The strided identity padded with zero channels up to ``filters``:
    fb.resnet.torch's shortcutType "A" (HE's option A), ``x[:, ::s, ::s]``
    (a 1x1 average pool with stride ``s``) followed by the zero channels
    (models/preresnet.lua:35-41). No weights.

    Args:
        filters: output channels (at least the input's).
        stride: subsampling of both spatial axes.
        data_format: ``"channels_last"`` (the default, and what a saved
            config without it was) or ``"channels_first"``.
    """

    def __init__(self, filters, stride=1, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.stride = int(stride)
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got "
                             f"{data_format!r}")
        self.data_format = data_format
        self._axis = -1 if data_format == "channels_last" else 1

    def build(self, input_shape):
        if input_shape[self._axis] > self.filters:
            raise ValueError(
                f"ZeroPadShortcut pads channels: filters={self.filters} is fewer than the "
                f"input's {input_shape[self._axis]}")

    def call(self, x, training=None):
        s = self.stride
        first = self.data_format == "channels_first"
        if s > 1:
            x = x[:, :, ::s, ::s] if first else _subsample_nhwc(x, s, bool(training))
        extra = self.filters - x.shape[self._axis]
        if not extra:
            return x
        pads = [[0, 0], [0, extra], [0, 0], [0, 0]] if first else \
            [[0, 0], [0, 0], [0, 0], [0, extra]]
        return ops.pad(x, pads)

    def compute_output_shape(self, input_shape):
        def sub(d):
            return None if d is None else (d + self.stride - 1) // self.stride
        if self.data_format == "channels_first":
            return (input_shape[0], self.filters, sub(input_shape[2]), sub(input_shape[3]))
        return (input_shape[0], sub(input_shape[1]), sub(input_shape[2]), self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "stride": self.stride,
                "data_format": self.data_format}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ShortcutDropout(keras.layers.Layer):
    """HE Table 1's dropout shortcut, ``h(x) = dropout(x)`` as HE describes
    it: it "statistically imposes a scale of lambda with an expectation of
    0.5 on the shortcut" (HE section 3.1), i.e. a mask with no rescaling of
    the kept values (Keras' ``Dropout`` divides them by ``1 - rate``, which
    keeps the expectation at ``x``).

    Training: ``m * x`` with ``m ~ Bernoulli(1 - rate)`` per element, so
    ``E[h] = (1 - rate) x``. Inference: the expectation itself, ``(1 - rate)
    x`` (dropout as first published, the mask's mean at test time), so that
    the net sees the same scale in both modes.

    Args:
        rate: probability of dropping an element (HE: 0.5).
        seed: an int for reproducible masks, or ``None``.
    """

    def __init__(self, rate=0.5, seed=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            raise ValueError(f"rate must be a number in [0, 1), got {rate!r}")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, x, training=False):
        keep = 1.0 - self.rate
        if not training or self.rate == 0:
            return keep * x
        u = keras.random.uniform(ops.shape(x), seed=self.seed_generator, dtype=x.dtype)
        return ops.where(u < keep, x, ops.zeros_like(x))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
