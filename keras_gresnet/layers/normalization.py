"""The zoo's BatchNormalization: ``keras.layers.BatchNormalization`` with
PyTorch's fused kernel on the torch backend and TensorFlow's on TensorFlow.

Keras 3 computes BatchNorm from ``keras.ops`` on every backend (mean,
variance, normalise, scale: separate kernels and separate backward passes).
On the torch backend that is most of the gap between a Keras conv net and the
same net in native PyTorch (docs/benchmarks.md). :class:`BatchNormalization`
is Keras' layer, same variables, names, config and conventions (so published
weights and ``.keras`` files load unchanged), whose ``call`` hands the work
to ``torch.nn.functional.batch_norm`` when the backend is torch: one fused
kernel forward, one backward, channels-last tensors as they are.

Conventions kept exactly:

- ``momentum`` is Keras' (``moving = moving * momentum + batch * (1 -
  momentum)``; torch's ``momentum`` is ``1 - momentum``).
- The moving variance is fed the *biased* batch variance, as Keras does;
  torch's kernel feeds the unbiased one, so its update is corrected by
  ``(n - 1) / n`` (:func:`_keras_moving_variance`).
- Statistics and the normalisation run in float32 for float16 / bfloat16
  inputs, as in Keras (torch's CPU and CUDA kernels take a 16-bit input with
  float32 parameters and statistics, and accumulate in float32), and the
  output has the layer's compute dtype.

On TensorFlow, NHWC images (4-D, channels last) go through TensorFlow's
fused kernel (``FusedBatchNormV3``), which measured 3.8x faster than Keras'
form for gresnet_cifar's BatchNorms (``scripts/benchmarks/bench_ops.py``,
docs/benchmarks.md). Everything else (JAX, whose XLA fuses the
``keras.ops`` form itself; vectors; ``synchronized=True``; ``renorm``; a
``mask``; a symbolic ``training``; a batch of one value per channel;
variables that are not float32, under a ``"bfloat16"`` policy) runs Keras'
own ``call``.
"""

import keras

PACKAGE = "keras_gresnet"


@keras.saving.register_keras_serializable(package=PACKAGE)
class BatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization``, fused on the torch backend.

    Takes exactly Keras' arguments; see the module docstring for what runs
    where. ``isinstance(layer, keras.layers.BatchNormalization)`` holds, so
    code that finds BatchNorm layers (fine-tuning, ``sync_batchnorm``, the
    recipes' momentum) treats it as Keras' own."""

    def call(self, inputs, training=None, mask=None):
        backend = keras.backend.backend()
        fusable = (mask is None and not self.renorm and not self.synchronized
                   and isinstance(self.axis, int) and isinstance(training, (bool, type(None))))
        if fusable and backend == "torch":
            return _torch_call(self, inputs, bool(training and self.trainable))
        # TensorFlow's kernel takes float32 statistics only (a "bfloat16"
        # policy's bfloat16 variables have no CPU kernel): Keras' form then.
        if fusable and backend == "tensorflow" and len(inputs.shape) == 4 \
                and self.axis % 4 == 3 and self.variable_dtype == "float32":
            return _tf_call(self, inputs, bool(training and self.trainable))
        return super().call(inputs, training=training, mask=mask)


def _keras_moving_variance(old, updated, momentum, count):
    """The moving variance Keras would hold, from torch's update.

    Torch set ``updated = momentum * old + (1 - momentum) * v * n / (n - 1)``
    (unbiased ``v``, Keras' ``momentum``); Keras wants ``momentum * old +
    (1 - momentum) * v``."""
    return momentum * old + (updated - momentum * old) * ((count - 1) / count)


def _torch_call(layer, inputs, training):
    import torch
    import torch.nn.functional as F

    axis = layer.axis % inputs.ndim
    count = inputs.numel() // inputs.shape[axis]
    if training and count < 2:  # torch refuses it; Keras gives variance 0
        return keras.layers.BatchNormalization.call(layer, inputs, training=True)
    x = inputs
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = x.to(torch.float32)
    # A view with the channels at dim 1: NHWC stays NHWC in memory, which is
    # torch's channels_last format, and its kernel reads it as it is.
    if axis != 1:
        x = x.movedim(axis, 1)
    stats_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    gamma = layer.gamma.value.to(stats_dtype) if layer.scale else None
    beta = layer.beta.value.to(stats_dtype) if layer.center else None
    moving_mean = layer.moving_mean.value.to(stats_dtype)
    moving_variance = layer.moving_variance.value.to(stats_dtype)
    if training:
        mean = moving_mean.detach().clone()
        variance = moving_variance.detach().clone()
        y = F.batch_norm(x, mean, variance, gamma, beta, training=True,
                         momentum=1.0 - layer.momentum, eps=layer.epsilon)
        layer.moving_mean.assign(mean)
        layer.moving_variance.assign(_keras_moving_variance(
            moving_variance.detach(), variance, layer.momentum, count))
    else:
        y = F.batch_norm(x, moving_mean, moving_variance, gamma, beta, training=False,
                         eps=layer.epsilon)
    if axis != 1:
        y = y.movedim(1, axis)
    return y.to(_torch_dtype(layer.compute_dtype))


def _tf_call(layer, inputs, training):
    """TensorFlow's fused kernel (``FusedBatchNormV3``) on NHWC images: its
    ``batch_variance`` is the unbiased one (n - 1), so the moving variance
    takes the biased ``(n - 1) / n`` of it, as Keras' layer does."""
    import tensorflow as tf

    x = inputs
    if x.dtype not in (tf.float16, tf.bfloat16, tf.float32):
        x = tf.cast(x, tf.float32)
    channels = x.shape[-1]
    gamma = layer.gamma.value if layer.scale else tf.ones((channels,), tf.float32)
    beta = layer.beta.value if layer.center else tf.zeros((channels,), tf.float32)
    if training:
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            x, gamma, beta, epsilon=layer.epsilon, data_format="NHWC", is_training=True)
        count = tf.cast(tf.size(x, out_type=tf.int64) // channels, tf.float32)
        variance = variance * (count - 1.0) / count
        m = layer.momentum
        layer.moving_mean.assign(layer.moving_mean * m + mean * (1.0 - m))
        layer.moving_variance.assign(layer.moving_variance * m + variance * (1.0 - m))
    else:
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(
            x, gamma, beta, mean=layer.moving_mean.value, variance=layer.moving_variance.value,
            epsilon=layer.epsilon, data_format="NHWC", is_training=False)
    return tf.cast(y, layer.compute_dtype)


def _torch_dtype(name):
    import torch

    return getattr(torch, keras.backend.standardize_dtype(name))
