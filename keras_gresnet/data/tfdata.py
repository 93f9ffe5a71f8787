"""The ``tf.data`` input pipeline: :func:`make_dataset` turns arrays in
memory into a batched ``tf.data.Dataset`` with the papers' preprocessing and
CIFAR augmentation (:func:`crop_and_flip`), every epoch's order and crops
taken from :func:`keras_gresnet.data.preprocessing.epoch_plan`, so that its
batches equal those of the numpy twin (:mod:`keras_gresnet.data.numpydata`).

The only module of :mod:`keras_gresnet.data` that imports TensorFlow (it is
imported only when a ``tf.data`` pipeline is asked for).
"""

import math

import numpy as np
import tensorflow as tf

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


# --------------------------------------------------------------------------
# CIFAR augmentation (HE, WRN, GR): pad 4 px, random crop, horizontal flip.


def crop_and_flip(images, offsets, flips, padding=4, pad_mode="zero"):
    """Pad a batch by ``padding`` pixels, crop each image back to its size
    at its own offset, and mirror it left-right where ``flips`` is true.

    Vectorized: two ``tf.gather`` over the whole batch, the flip folded into
    the column indices. Offset ``(padding, padding)`` without flip gives the
    image back unchanged.

    Args:
        images: ``(B, H, W, C)`` tensor.
        offsets: int32 ``(B, 2)``, the crop's top-left ``(row, col)`` in the
            padded image, each in ``[0, 2 * padding]``.
        flips: bool ``(B,)``.
        padding: pixels added on every side.
        pad_mode: ``"zero"`` (fb.resnet.torch) or ``"reflect"`` (WRN's
            reflection padding: ``tf.pad``'s ``"REFLECT"``, numpy's
            ``mode="reflect"``).
    """
    images = tf.convert_to_tensor(images)
    height, width = images.shape[1], images.shape[2]
    padded = tf.pad(images, [[0, 0], [padding, padding], [padding, padding], [0, 0]],
                    mode="CONSTANT" if pad_mode == "zero" else "REFLECT")
    offsets = tf.cast(offsets, tf.int32)
    rows = offsets[:, :1] + tf.range(height)
    columns = tf.where(
        tf.reshape(flips, (-1, 1)), tf.range(width - 1, -1, -1), tf.range(width)
    )
    columns = offsets[:, 1:] + columns
    cropped = tf.gather(padded, rows, axis=1, batch_dims=1)
    return tf.gather(cropped, columns, axis=2, batch_dims=1)


def augmentation_params(batch_size, seed, padding=4):
    """Random crop offsets (uniform in ``[0, 2 * padding]``) and flips (p = 0.5)
    for a batch, a pure function of ``seed`` (a shape-``(2,)`` int tensor)."""
    offset_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    offsets = tf.random.stateless_uniform(
        (batch_size, 2), offset_seed, minval=0, maxval=2 * padding + 1, dtype=tf.int32
    )
    flips = tf.random.stateless_uniform((batch_size,), flip_seed) < 0.5
    return offsets, flips


def random_crop_and_flip(images, seed, padding=4):
    """The papers' CIFAR augmentation on a whole batch: pad ``padding`` px,
    random crop back to the input size, horizontal flip with p = 0.5.
    Same ``seed`` (shape ``(2,)``), same result."""
    offsets, flips = augmentation_params(tf.shape(images)[0], seed, padding)
    return crop_and_flip(images, offsets, flips, padding)


# --------------------------------------------------------------------------
# tf.data pipelines.


def make_dataset(images, labels, *, batch_size=128, preprocessing=None, shuffle=False,
                 augment=False, padding=4, pad_mode="zero", flatten=False, drop_remainder=False,
                 seed=0, epochs=None):
    """A batched ``tf.data.Dataset`` of ``(float32 images, int32 labels)``.

    The uint8 arrays stay in memory as they are (CIFAR's 50k images are
    150 MB, 4x less than float32); this is the cache, so nothing is decoded
    twice. Each step takes a batch of example indices, gathers it, then
    normalises and augments it with one vectorized op over the batch, and
    prefetches (:func:`without_autotuning`: no autotuning model).

    Two kinds of stream:

    - ``epochs=None``: one pass over the data. Every new iterator reshuffles
      (a fresh seeded key per iterator), so the order of a pass depends on
      how many iterators came before it.
    - ``epochs=(start, stop)`` (or ``stop``, meaning ``(0, stop)``): the
      batches of epochs ``start .. stop - 1`` in one stream. The order and
      augmentation of epoch ``e`` are a pure function of ``(seed, e)``
      (:func:`~keras_gresnet.data.preprocessing.epoch_plan`). So a run
      resumed at epoch ``e`` sees the batches the uninterrupted run saw, and
      so does every process of a multi-worker run, and so does the numpy
      pipeline. Read it with ``steps_per_epoch``.

    Args:
        images: uint8 ``(N, H, W, C)``.
        labels: ``(N,)`` integer labels.
        batch_size: examples per batch.
        preprocessing: a :class:`~keras_gresnet.data.Preprocessing` fitted on
            training images; ``None`` means ``"scale"``.
        shuffle: reshuffle the examples every epoch.
        augment: crop and flip each batch (after normalising, so the padding
            is zeros of the normalised image, as in HE's code).
        padding: the augmentation's padding.
        pad_mode: ``"zero"`` or ``"reflect"`` (:func:`crop_and_flip`).
        flatten: reshape each image to a vector (GR's MLPs; their builders
            also flatten by themselves).
        drop_remainder: drop the last, smaller batch.
        seed: seeds the shuffle and the augmentation (same seed, same batches).
        epochs: ``None``, or the epochs ``(start, stop)`` to stream (see above).
    """
    images = np.asarray(images)
    labels = np.asarray(labels)
    batch_size, padding, seed, epochs = checked_stream_arguments(
        images, labels, batch_size, padding, seed, epochs, pad_mode)
    augment = checked_augment(augment)
    preprocessing = checked_preprocessing(preprocessing, images)
    scale, offset = (tf.constant(v) for v in preprocessing.scale_offset())
    # Whole arrays as one dataset element (as Keras' array adapter does), so
    # they are not baked into the map function's graph.
    arrays = tf.data.Dataset.from_tensors((images, labels.astype(np.int32))).repeat()
    num_examples = len(images)

    def plan(stream, epoch):
        return epoch_plan(num_examples, seed=seed, epoch=epoch, shuffle=shuffle,
                          padding=padding, stream=stream)

    if epochs is None:
        # One random key per iterator: a new order every pass.
        keys = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).take(1)
        keys = keys.map(lambda key: (tf.constant(ONE_PASS, tf.int64), key % (2 ** 62)))
    else:
        keys = tf.data.Dataset.range(*epochs).map(
            lambda epoch: (tf.constant(EPOCH_STREAM, tf.int64), epoch))

    def epoch_batches(stream, epoch):
        order, offsets, flips = tf.numpy_function(
            plan, [stream, epoch], (tf.int64, tf.int32, tf.bool), stateful=False)
        order.set_shape((num_examples,))
        offsets.set_shape((num_examples, 2))
        flips.set_shape((num_examples,))
        return tf.data.Dataset.from_tensor_slices((order, offsets, flips)).batch(
            batch_size, drop_remainder=drop_remainder)

    example_size = math.prod(images.shape[1:])

    def make_batch(batch, data):
        index, offsets, flips = batch
        x = tf.cast(tf.gather(data[0], index), tf.float32) * scale + offset
        if augment:
            if augment == CROP_ONLY:
                flips = tf.zeros_like(flips)
            x = crop_and_flip(x, offsets, flips, padding, pad_mode)
        if flatten:
            x = tf.reshape(x, (-1, example_size))
        return x, tf.gather(data[1], index)

    steps = steps_per_epoch(num_examples, batch_size, drop_remainder)
    batches = keys.flat_map(epoch_batches).apply(tf.data.experimental.assert_cardinality(
        steps if epochs is None else steps * (epochs[1] - epochs[0])))
    dataset = tf.data.Dataset.zip(batches, arrays)
    dataset = dataset.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return without_autotuning(dataset.prefetch(tf.data.AUTOTUNE))


def without_autotuning(dataset):
    """``dataset`` with tf.data's autotuning model off: its ``AUTOTUNE``
    map runs on as many threads as the process has cores (at most 16) and
    its prefetch buffer grows while the consumer waits, as they do before
    the model's first pass.

    Why: the model's thread (``Model::OptimizeLoop``) sleeps between passes
    for a period that doubles up to 60 s, and where Keras' ``fit`` drops its
    iterator, TensorFlow 2.21 waits for that sleep to end: 24 to 29 s at
    the end of a 3-epoch ``keras-gresnet train gresnet_cifar`` of 6,400
    pictures (``gdb``: the main thread in ``~RootDataset::Iterator``, the
    model thread in ``OptimizeLoop``'s timed wait), 0 s with the model off
    (docs/benchmarks.md, 2026-12-07). The batches are the same either way
    (the map is deterministic), and the model tunes nothing that limits
    these pipelines: one vectorized map per batch."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def batch_share(dataset, index, count):
    """Rows ``index * n // count .. (index + 1) * n // count`` of every batch
    of ``n`` of ``dataset`` (``(images, labels)`` batches): process
    ``index``'s share of each global batch, a partial last batch included
    (what :func:`keras_gresnet.data.process_share` gives a ``tf.data``
    stream)."""
    def share(images, labels):
        n = tf.shape(labels)[0]
        start, stop = index * n // count, (index + 1) * n // count
        return images[start:stop], labels[start:stop]

    return dataset.map(share).prefetch(tf.data.AUTOTUNE)
