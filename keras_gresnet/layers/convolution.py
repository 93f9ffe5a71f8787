"""The zoo's Conv2D: ``keras.layers.Conv2D`` that, on the torch backend with
channels-last images, hands ``torch.nn.functional.conv2d`` the NHWC tensor as
it is.

Keras' torch convolution (``keras/src/backend/torch/nn.py``, ``conv``) turns
an NHWC input into a contiguous NCHW copy (``_transpose_spatial_inputs``) and
then back into channels-last memory (``_maybe_convert_to_channels_last``): two
copies of every activation, forward and backward. An NHWC tensor permuted to
NCHW *is* NCHW in torch's ``channels_last`` memory format, which torch's
convolution kernels take directly, so :class:`Conv2D` skips both copies.

Same variables, names and config as Keras' layer (weights and ``.keras``
files load unchanged). Everything else (TensorFlow, JAX, ``channels_first``,
groups, a ``"same"`` padding torch cannot express symmetrically) runs Keras'
own ``convolution_op``.
"""

import keras

PACKAGE = "keras_gresnet"


@keras.saving.register_keras_serializable(package=PACKAGE)
class Conv2D(keras.layers.Conv2D):
    """``keras.layers.Conv2D``, without the layout copies on the torch backend.

    Takes exactly Keras' arguments; ``isinstance(layer, keras.layers.Conv2D)``
    holds."""

    def convolution_op(self, inputs, kernel):
        if (keras.backend.backend() == "torch" and self.data_format == "channels_last"
                and self.groups == 1):
            padding = _torch_padding(self.padding, self.kernel_size, self.strides,
                                     self.dilation_rate)
            if padding is not None:
                return _torch_conv(inputs, kernel, self.strides, padding, self.dilation_rate)
        return super().convolution_op(inputs, kernel)


def _torch_padding(padding, kernel_size, strides, dilation_rate):
    """torch's symmetric padding for Keras' ``padding``, or None where Keras
    would pad asymmetrically (``"same"`` with a stride, or an even kernel)."""
    if padding == "valid":
        return (0, 0)
    pads = []
    for k, s, d in zip(kernel_size, strides, dilation_rate):
        total = d * (k - 1)
        if s != 1 or total % 2:
            return None
        pads.append(total // 2)
    return tuple(pads)


def _torch_conv(inputs, kernel, strides, padding, dilation_rate):
    import torch.nn.functional as F

    kernel = keras.ops.convert_to_tensor(kernel)  # a KerasVariable: its torch tensor
    x = inputs.permute(0, 3, 1, 2)  # NCHW view of NHWC memory: channels_last
    w = kernel.permute(3, 2, 0, 1)  # (h, w, in, out) -> (out, in, h, w)
    y = F.conv2d(x, w, stride=tuple(strides), padding=padding, dilation=tuple(dilation_rate))
    return y.permute(0, 2, 3, 1)
