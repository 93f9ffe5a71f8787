"""The device input pipeline (JAX backend): the dataset kept on the
accelerator, each batch cut there.

The numpy pipeline (:mod:`keras_gresnet.data.numpydata`) gathers, normalises,
pads, crops and mirrors every batch on the host and sends it to the device:
at batch 1024 of 32x32x3 float32 that is 12.6 MB a step, which is what held
a large-batch GPU run back (docs/benchmarks.md). Here the pixels go to the
device once (uint8 as read: Fashion-MNIST 47 MB, CIFAR 150 MB) and each step
sends only its plan: the examples' indices, crop offsets and flips (16 bytes
an example), cut from the same :func:`~keras_gresnet.data.preprocessing.epoch_plan`
as the other pipelines. One compiled function on the device then gathers the
batch, normalises it with the same float32 scale and offset, pads it, crops
and mirrors it. So the batches are the numpy pipeline's, example for example
(a test compares them), and a run is the same run whichever pipeline fed it:
resumable, deterministic with its seed, the recipe unchanged.
"""

import functools

import keras
import numpy as np

from keras_gresnet.data.numpydata import ArrayDataset
from keras_gresnet.data.numpydata import make_dataset as numpy_make_dataset


def check_backend():
    """The device pipeline runs on the JAX backend only (``ValueError``)."""
    if keras.backend.backend() != "jax":
        raise ValueError(f"input_pipeline='device' keeps the data on JAX's devices and needs "
                         f"KERAS_BACKEND=jax, not {keras.backend.backend()}; use 'numpy', "
                         f"'tf_data' or 'auto'")


def device_batch(images, labels, index, offsets, flips, table, scale, offset, *, padding,
                 pad_mode, flatten):
    """One batch on the device: ``images[index]`` normalised, padded by
    ``padding`` (zeros or reflection) and cropped at ``offsets`` (``None``:
    no crop), mirrored where ``flips``; what :meth:`ArrayDataset.__getitem__`
    computes on the host. uint8 pixels are normalised by ``table`` (each
    value's float32 ``x * scale + offset`` per channel, computed by the host
    pipeline's own numpy): the same bits, where XLA would fuse the multiply
    and the add into one rounding; other pixels by that multiply-add here
    (``table`` ``None``; one float32 rounding apart at most)."""
    import jax.numpy as jnp

    x = images[index]
    if table is not None:
        x = table[x.astype(jnp.int32), jnp.arange(x.shape[-1])]
    else:
        x = x.astype(jnp.float32) * scale + offset
    if offsets is not None:
        batch, height, width = x.shape[:3]
        x = jnp.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)),
                    mode="constant" if pad_mode == "zero" else "reflect")
        rows = offsets[:, :1] + jnp.arange(height)
        columns = jnp.where(flips[:, None], jnp.arange(width - 1, -1, -1), jnp.arange(width))
        columns = offsets[:, 1:] + columns
        x = x[jnp.arange(batch)[:, None, None], rows[:, :, None], columns[:, None, :]]
    if flatten:
        x = x.reshape(x.shape[0], -1)
    return x, labels[index]


@functools.cache
def _compiled_batch():
    import jax

    return jax.jit(device_batch, static_argnames=("padding", "pad_mode", "flatten"))


class DeviceArrayDataset(ArrayDataset):
    """:class:`~keras_gresnet.data.numpydata.ArrayDataset`'s batches, made on
    the device from the pixels put there once: each item is a pair of JAX
    arrays ``(float32 images, int32 labels)`` already on the device, which
    Keras' JAX trainer takes as they are."""

    def __init__(self, images, labels, **options):
        import jax

        super().__init__(images, labels, **options)
        self.device_images = jax.device_put(self.images)
        self.device_labels = jax.device_put(self.labels)
        scale, offset = self.preprocessing.scale_offset()
        self.scale = jax.device_put(np.asarray(scale, np.float32))
        self.offset = jax.device_put(np.asarray(offset, np.float32))
        self.table = None
        if self.images.dtype == np.uint8:  # every value's normalisation, by the host's numpy
            values = np.repeat(np.arange(256, dtype=np.uint8)[:, None], self.images.shape[-1], 1)
            self.table = jax.device_put(self.preprocessing(values))

    def __getitem__(self, index):
        indices, offsets, flips = self.batch_plan(index)
        return _compiled_batch()(self.device_images, self.device_labels, indices, offsets, flips,
                                 self.table, self.scale, self.offset, padding=self.padding,
                                 pad_mode=self.pad_mode, flatten=self.flatten)


def make_dataset(images, labels, **options):
    """The batches of :func:`keras_gresnet.data.numpydata.make_dataset` (same
    arguments, checked there), made on JAX's device
    (:class:`DeviceArrayDataset`)."""
    check_backend()
    return numpy_make_dataset(images, labels, dataset_class=DeviceArrayDataset, **options)
