"""The numpy input pipeline, the TensorFlow-free twin of
:mod:`keras_gresnet.data.tfdata`: :func:`make_dataset` turns arrays in memory
into a ``keras.utils.PyDataset`` of batches that ``model.fit`` reads on every
Keras backend.

Same arguments, same batches: both pipelines cut every epoch from
:func:`keras_gresnet.data.preprocessing.epoch_plan` and normalise with the
same float32 multiply-add, and :func:`crop_and_flip` is ``tfdata``'s crop
and flip in numpy, so the batches of the epoch-indexed stream are identical
(a test compares them). This is the pipeline :func:`keras_gresnet.data.pipeline`
uses where TensorFlow is not installed (the JAX-only GPU machine), or when
asked (``input_pipeline="numpy"``).
"""

import keras
import numpy as np

from keras_gresnet.data.preprocessing import (
    CROP_ONLY,
    EPOCH_STREAM,
    ONE_PASS,
    checked_augment,
    checked_preprocessing,
    checked_stream_arguments,
    epoch_plan,
    steps_per_epoch,
)


def crop_and_flip(images, offsets, flips, padding=4, pad_mode="zero"):
    """Pad a batch by ``padding`` pixels, crop each image back to its size
    at its own offset, and mirror it left-right where ``flips`` is true (what
    :func:`keras_gresnet.data.tfdata.crop_and_flip` does, in numpy).

    Args:
        images: ``(B, H, W, C)`` array.
        offsets: int ``(B, 2)``, the crop's top-left ``(row, col)`` in the
            padded image, each in ``[0, 2 * padding]``.
        flips: bool ``(B,)``.
        padding: pixels added on every side.
        pad_mode: ``"zero"`` or ``"reflect"`` (``np.pad``'s ``mode="reflect"``:
            the border pixel not repeated, WRN's reflection padding).
    """
    images = np.asarray(images)
    batch, height, width = images.shape[:3]
    padded = np.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)),
                    mode="constant" if pad_mode == "zero" else "reflect")
    offsets = np.asarray(offsets, np.int64)
    rows = offsets[:, :1] + np.arange(height)
    columns = np.where(np.asarray(flips, bool)[:, None], np.arange(width - 1, -1, -1),
                       np.arange(width))
    columns = offsets[:, 1:] + columns
    return padded[np.arange(batch)[:, None, None], rows[:, :, None], columns[:, None, :]]


class ArrayDataset(keras.utils.PyDataset):
    """Batches ``(float32 images, int32 labels)`` of arrays in memory; what
    :func:`make_dataset` returns. ``len()`` is the number of batches: one
    pass, or every epoch of ``epochs``."""

    def __init__(self, images, labels, *, batch_size, preprocessing, shuffle, augment, padding,
                 flatten, drop_remainder, seed, epochs, pad_mode="zero"):
        super().__init__()
        self.images, self.labels = images, labels.astype(np.int32)
        self.batch_size, self.preprocessing = batch_size, preprocessing
        self.shuffle, self.augment, self.padding = shuffle, augment, padding
        self.pad_mode = pad_mode
        self.flatten, self.seed, self.epochs = flatten, seed, epochs
        self.steps_per_epoch = steps_per_epoch(len(images), batch_size, drop_remainder)
        # One pass: a fresh random key per pass (on_epoch_end draws the next).
        self._keys = np.random.default_rng([ONE_PASS, seed])
        self._pass_key = int(self._keys.integers(2 ** 62))
        self._plan = (None, None)

    def __len__(self):
        if self.epochs is None:
            return self.steps_per_epoch
        start, stop = self.epochs
        return (stop - start) * self.steps_per_epoch

    def on_epoch_end(self):
        if self.epochs is None:
            self._pass_key = int(self._keys.integers(2 ** 62))

    def _epoch(self, index):
        """``((stream, key), step)`` of batch ``index``."""
        if self.epochs is None:
            return (ONE_PASS, self._pass_key), index
        epoch, step = divmod(index, self.steps_per_epoch)
        return (EPOCH_STREAM, self.epochs[0] + epoch), step

    def batch_plan(self, index):
        """``(indices, offsets, flips)`` of batch ``index``: its examples'
        rows in ``images``, and their crops' offsets and flips (``None``,
        ``None`` without augmentation), from the epoch's
        :func:`~keras_gresnet.data.preprocessing.epoch_plan`."""
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of {len(self)}")
        key, step = self._epoch(index)
        if self._plan[0] != key:
            self._plan = key, epoch_plan(len(self.images), seed=self.seed, epoch=key[1],
                                         shuffle=self.shuffle, padding=self.padding,
                                         stream=key[0])
        order, offsets, flips = self._plan[1]
        batch = slice(step * self.batch_size, (step + 1) * self.batch_size)
        if not self.augment:
            return order[batch], None, None
        return order[batch], offsets[batch], flips[batch] & (self.augment != CROP_ONLY)

    def __getitem__(self, index):
        indices, offsets, flips = self.batch_plan(index)
        x = self.preprocessing(self.images[indices])
        if offsets is not None:
            x = crop_and_flip(x, offsets, flips, self.padding, self.pad_mode)
        if self.flatten:
            x = x.reshape(len(x), -1)
        return x, self.labels[indices]


def make_dataset(images, labels, *, batch_size=128, preprocessing=None, shuffle=False,
                 augment=False, padding=4, pad_mode="zero", flatten=False, drop_remainder=False,
                 seed=0, epochs=None, dataset_class=ArrayDataset):
    """A ``keras.utils.PyDataset`` of ``(float32 images, int32 labels)``
    batches, with the arguments and batches of
    :func:`keras_gresnet.data.tfdata.make_dataset` (see there): ``epochs=None``
    is one pass, reshuffled every epoch; ``epochs=(start, stop)`` the epochs
    ``start .. stop - 1``, each a pure function of ``(seed, epoch)``.
    ``dataset_class``: :class:`ArrayDataset` or a subclass that makes the
    same batches elsewhere (:mod:`keras_gresnet.data.devicedata`)."""
    images = np.asarray(images)
    labels = np.asarray(labels)
    batch_size, padding, seed, epochs = checked_stream_arguments(
        images, labels, batch_size, padding, seed, epochs, pad_mode)
    augment = checked_augment(augment)
    preprocessing = checked_preprocessing(preprocessing, images)
    return dataset_class(images, labels, batch_size=batch_size, preprocessing=preprocessing,
                         shuffle=shuffle, augment=augment, padding=padding, flatten=flatten,
                         drop_remainder=drop_remainder, seed=seed, epochs=epochs,
                         pad_mode=pad_mode)


class BatchShare(keras.utils.PyDataset):
    """Rows ``index * n // count .. (index + 1) * n // count`` of every batch
    of ``n`` of a ``keras.utils.PyDataset`` of ``(images, labels)`` batches:
    process ``index``'s share of each global batch, a partial last batch
    included (what :func:`keras_gresnet.data.process_share` gives the numpy
    pipeline)."""

    def __init__(self, dataset, index, count):
        super().__init__()
        self.dataset, self.index, self.count = dataset, index, count

    def __len__(self):
        return len(self.dataset)

    def on_epoch_end(self):
        self.dataset.on_epoch_end()

    def __getitem__(self, i):
        images, labels = self.dataset[i]
        n = len(labels)
        rows = slice(self.index * n // self.count, (self.index + 1) * n // self.count)
        return images[rows], labels[rows]
