"""The ``tf.data`` side of the datasets: :func:`pipeline` turns a dataset into
train / validation / test ``tf.data.Dataset`` objects with the papers'
preprocessing (:class:`Preprocessing`, statistics from the training images
only) and CIFAR augmentation (:func:`random_crop_and_flip`), and records
everything a config needs to rebuild it (:attr:`Pipeline.config`);
:func:`make_dataset` does the same for arrays in memory.

The only module of :mod:`keras_gresnet.data` that imports TensorFlow.
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from keras_gresnet._checks import PREPROCESSINGS, check_choice, check_int, check_rate
from keras_gresnet.data.datasets import DATASETS
from keras_gresnet.data.preprocessing import (
    checked_statistics,
    fit_statistics,
    split_indices,
    subset_indices,
    test_subset,
)
from keras_gresnet.data.sources import load_with_source


# --------------------------------------------------------------------------
# Preprocessing (GR: pixels / 255; HE: mean subtraction; WRN: mean/std).


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """Pixel normalisation ``x -> (x / 255 - mean) / std``, per channel.

    - ``"scale"``: ``mean = 0``, ``std = 1`` (GR's MNIST nets: pixels in [0, 1]).
    - ``"mean"``: training-set mean, ``std = 1`` (HE and GR's pre-activation
      ResNets: mean subtraction only).
    - ``"meanstd"``: training-set mean and std (WRN).

    Build it with :meth:`fit` on the TRAINING images (the statistics of
    :mod:`keras_gresnet.data.preprocessing`); save it with :meth:`get_config`
    so the same statistics are used at test time.
    """

    method: str
    mean: tuple
    std: tuple

    def __post_init__(self):
        mean, std = checked_statistics(self.method, self.mean, self.std)
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    @classmethod
    def fit(cls, method, train_images):
        """The ``method``'s statistics of ``train_images`` (uint8 ``N, H, W, C``)."""
        return cls(method, *fit_statistics(method, train_images))

    def __call__(self, images):
        """Normalised float32 images (a tensor), from uint8 or float pixels."""
        std = tf.constant(self.std, tf.float32)
        # One multiply-add per pixel: (x / 255 - mean) / std.
        scale = 1.0 / (255.0 * std)
        offset = -tf.constant(self.mean, tf.float32) / std
        return tf.cast(images, tf.float32) * scale + offset

    def get_config(self):
        return {"method": self.method, "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


# --------------------------------------------------------------------------
# CIFAR augmentation (HE, WRN, GR): pad 4 px, random crop, horizontal flip.


def crop_and_flip(images, offsets, flips, padding=4):
    """Zero-pad a batch by ``padding`` pixels, crop each image back to its size
    at its own offset, and mirror it left-right where ``flips`` is true.

    Vectorized: two ``tf.gather`` over the whole batch, the flip folded into
    the column indices. Offset ``(padding, padding)`` without flip gives the
    image back unchanged.

    Args:
        images: ``(B, H, W, C)`` tensor.
        offsets: int32 ``(B, 2)``, the crop's top-left ``(row, col)`` in the
            padded image, each in ``[0, 2 * padding]``.
        flips: bool ``(B,)``.
        padding: pixels of zeros on every side.
    """
    images = tf.convert_to_tensor(images)
    height, width = images.shape[1], images.shape[2]
    padded = tf.pad(images, [[0, 0], [padding, padding], [padding, padding], [0, 0]])
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
                 augment=False, padding=4, flatten=False, drop_remainder=False, seed=0,
                 epochs=None):
    """A batched ``tf.data.Dataset`` of ``(float32 images, int32 labels)``.

    The uint8 arrays stay in memory as they are (CIFAR's 50k images are
    150 MB, 4x less than float32); this is the cache, so nothing is decoded
    twice. Each step shuffles (seeded, reshuffled every epoch) only example
    indices, gathers a batch, then normalises and augments it with one
    vectorized op over the batch, and prefetches (AUTOTUNE).

    Two kinds of stream:

    - ``epochs=None``: one pass over the data. Every new iterator reshuffles
      (``tf.data``'s seeded ``reshuffle_each_iteration``), so the order of a
      pass depends on how many iterators came before it.
    - ``epochs=(start, stop)`` (or ``stop``, meaning ``(0, stop)``): the
      batches of epochs ``start .. stop - 1`` in one stream. The order and
      augmentation of epoch ``e`` are a pure function of ``(seed, e)``. So a
      run resumed at epoch ``e`` sees the batches the uninterrupted run saw,
      and so does every process of a multi-worker run. Read it with
      ``steps_per_epoch``.

    Args:
        images: uint8 ``(N, H, W, C)``.
        labels: ``(N,)`` integer labels.
        batch_size: examples per batch.
        preprocessing: a :class:`Preprocessing` fitted on training images;
            ``None`` means ``"scale"``.
        shuffle: reshuffle the examples every epoch.
        augment: :func:`random_crop_and_flip` each batch (after normalising,
            so the padding is zeros of the normalised image, as in HE's code).
        padding: the augmentation's padding.
        flatten: reshape each image to a vector (GR's MLPs; their builders
            also flatten by themselves).
        drop_remainder: drop the last, smaller batch.
        seed: seeds the shuffle and the augmentation (same seed, same batches).
        epochs: ``None``, or the epochs ``(start, stop)`` to stream (see above).
    """
    images = np.asarray(images)
    labels = np.asarray(labels)
    batch_size, padding, seed, epochs = _checked_stream_arguments(
        images, labels, batch_size, padding, seed, epochs)
    preprocessing = _checked_preprocessing(preprocessing, images)
    # Whole arrays as one dataset element (as Keras' array adapter does), so
    # they are not baked into the map function's graph.
    arrays = tf.data.Dataset.from_tensors((images, labels.astype(np.int32))).repeat()
    if epochs is None:
        batches = _one_pass(len(images), batch_size, shuffle, drop_remainder, seed)
    else:
        batches = _epoch_stream(len(images), batch_size, shuffle, drop_remainder, seed,
                                *epochs)
    example_size = math.prod(images.shape[1:])

    def make_batch(batch, data):
        index, batch_seed = batch
        x = preprocessing(tf.gather(data[0], index))
        if augment:
            x = random_crop_and_flip(x, batch_seed, padding)
        if flatten:
            x = tf.reshape(x, (-1, example_size))
        return x, tf.gather(data[1], index)

    dataset = tf.data.Dataset.zip(batches, arrays)
    dataset = dataset.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _checked_stream_arguments(images, labels, batch_size, padding, seed, epochs):
    """``(batch_size, padding, seed, epochs)`` of :func:`make_dataset`, checked;
    ``epochs`` as ``None`` or ``(start, stop)``."""
    if images.ndim != 4 or labels.shape != images.shape[:1]:
        raise ValueError(
            f"images must be (N, H, W, C) and labels (N,), got {images.shape} and {labels.shape}"
        )
    batch_size = check_int(batch_size, "batch_size", 1)
    padding = check_int(padding, "padding", 0)
    seed = check_int(seed, "seed", 0)
    if epochs is not None:
        start, stop = (0, epochs) if isinstance(epochs, int) else tuple(epochs)
        start, stop = check_int(start, "epochs start", 0), check_int(stop, "epochs stop", 0)
        if start > stop:
            raise ValueError(f"epochs must be (start, stop) with start <= stop, got {epochs!r}")
        epochs = (start, stop)
    return batch_size, padding, seed, epochs


def _checked_preprocessing(preprocessing, images):
    """``preprocessing`` (``None``: ``"scale"``), checked against ``images``."""
    if preprocessing is None:
        preprocessing = Preprocessing.fit("scale", images[:0])
    if not isinstance(preprocessing, Preprocessing):
        raise ValueError(
            f"preprocessing must be a Preprocessing (fit on the training images) or "
            f"None, got {preprocessing!r}"
        )
    if len(preprocessing.mean) != images.shape[-1]:
        raise ValueError(
            f"preprocessing has {len(preprocessing.mean)} channels, images have "
            f"{images.shape[-1]}"
        )
    return preprocessing


def _one_pass(num_examples, batch_size, shuffle, drop_remainder, seed):
    """``(index batch, batch seed)`` pairs of one pass, reshuffled (and
    reseeded) by every new iterator."""
    indices = tf.data.Dataset.range(num_examples)
    if shuffle:
        indices = indices.shuffle(num_examples, seed=seed, reshuffle_each_iteration=True)
    indices = indices.batch(batch_size, drop_remainder=drop_remainder)
    # One stateless seed per batch, a new sequence every epoch.
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    return tf.data.Dataset.zip(indices, seeds)


def _epoch_stream(num_examples, batch_size, shuffle, drop_remainder, seed, start, stop):
    """``(index batch, batch seed)`` pairs of epochs ``start .. stop - 1``,
    each epoch's a pure function of ``(seed, epoch)``."""
    fold_in = tf.random.experimental.stateless_fold_in

    def epoch_batches(epoch):
        epoch_seed = fold_in(tf.constant([seed, 0], tf.int64), epoch)
        order = tf.range(num_examples, dtype=tf.int64)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(order, epoch_seed)
        batches = tf.data.Dataset.from_tensor_slices(order).batch(
            batch_size, drop_remainder=drop_remainder)
        steps = tf.data.Dataset.range(tf.int64.max)
        seeds = steps.map(lambda step: fold_in(epoch_seed, step + 1))
        return tf.data.Dataset.zip(batches, seeds)

    return tf.data.Dataset.range(start, stop).flat_map(epoch_batches)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """What :func:`pipeline` returns.

    Attributes:
        train, validation, test: ``tf.data.Dataset`` of batches
            ``(float32 images, int32 labels)``; ``validation`` is ``None``
            without ``validation_split``. Only ``train`` is shuffled/augmented.
            ``train`` is one pass, reshuffled by every new iterator;
            :meth:`train_epochs` streams given epochs, each one's order fixed
            by the seed and the epoch (what :func:`keras_gresnet.training.train`
            reads).
        preprocessing: the fitted :class:`Preprocessing` (training statistics).
        input_shape: one example's shape as the model sees it.
        num_classes, num_train, num_validation, num_test: sizes.
        steps_per_epoch: batches in one pass over ``train``.
        config: the arguments, the statistics and the data source, JSON-ready.
    """

    train: tf.data.Dataset
    validation: tf.data.Dataset
    test: tf.data.Dataset
    preprocessing: Preprocessing
    input_shape: tuple
    num_classes: int
    num_train: int
    num_validation: int
    num_test: int
    steps_per_epoch: int
    config: dict
    train_epochs_fn: object = dataclasses.field(default=None, repr=False, compare=False)

    def train_epochs(self, start, stop):
        """The training batches of epochs ``start .. stop - 1`` as one stream,
        each epoch's order and augmentation a pure function of the seed and
        the epoch (:func:`make_dataset`'s ``epochs``): what a resumed or
        multi-worker run reads, ``steps_per_epoch`` batches per epoch."""
        return self.train_epochs_fn((start, stop))


def pipeline(name, *, data_dir=None, download=True, preprocessing="scale", batch_size=128,
             validation_split=0.0, augment=False, padding=4, flatten=False,
             drop_remainder=False, seed=0, max_train_examples=None, max_test_examples=None):
    """Train / validation / test datasets of ``name``, as the papers feed them.

    GR's MNIST nets: ``preprocessing="scale"``. HE and GR's pre-activation
    ResNets: ``preprocessing="mean", augment=True``. WRN:
    ``preprocessing="meanstd", augment=True``. Batch 128 in all three.

    The statistics come from the training examples only (after holding out
    the validation part), never from the test split.

    Args:
        name: ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"`` or ``"cifar100"``.
        data_dir, download: as in :func:`keras_gresnet.data.load`.
        preprocessing: ``"scale"``, ``"mean"`` or ``"meanstd"``
            (see :class:`Preprocessing`).
        batch_size: examples per batch.
        validation_split: fraction of the TRAINING split held out for
            validation, chosen by ``seed``; 0 for none.
        augment, padding, flatten, drop_remainder, seed: as in
            :func:`make_dataset` (``drop_remainder`` applies to ``train`` only).
        max_train_examples, max_test_examples: keep a seeded random subset of
            at most this many training (after the validation split) and test
            examples, for quick runs; ``None`` keeps all.
    """
    validation_split = _checked_pipeline_arguments(
        name, preprocessing, batch_size, padding, seed, validation_split,
        max_train_examples, max_test_examples)
    splits, sources = _split_arrays(name, data_dir, download, validation_split, seed,
                                    max_train_examples, max_test_examples)
    train_images, train_labels = splits["train"]
    fitted = Preprocessing.fit(preprocessing, train_images)
    common = dict(batch_size=batch_size, preprocessing=fitted, flatten=flatten)
    train_options = dict(shuffle=True, augment=augment, padding=padding,
                         drop_remainder=drop_remainder, seed=seed, **common)
    train = make_dataset(train_images, train_labels, **train_options)
    validation = None
    if len(splits["validation"][1]):
        validation = make_dataset(*splits["validation"], **common)
    test = make_dataset(*splits["test"], **common)

    image_shape = DATASETS[name].image_shape
    num_train = len(train_labels)
    rounding = math.floor if drop_remainder else math.ceil
    config = dict(
        name=name, preprocessing=fitted.get_config(), batch_size=batch_size,
        validation_split=validation_split, augment=augment, padding=padding, flatten=flatten,
        drop_remainder=drop_remainder, seed=seed, max_train_examples=max_train_examples,
        max_test_examples=max_test_examples, source=sources)
    return Pipeline(
        train=train,
        validation=validation,
        test=test,
        preprocessing=fitted,
        input_shape=(math.prod(image_shape),) if flatten else image_shape,
        num_classes=DATASETS[name].num_classes,
        num_train=num_train,
        num_validation=len(splits["validation"][1]),
        num_test=len(splits["test"][1]),
        steps_per_epoch=rounding(num_train / batch_size),
        config=config,
        train_epochs_fn=lambda epochs: make_dataset(train_images, train_labels,
                                                    epochs=epochs, **train_options),
    )


def _checked_pipeline_arguments(name, preprocessing, batch_size, padding, seed,
                                validation_split, max_train_examples, max_test_examples):
    """Every argument of :func:`pipeline` checked before any data is read;
    returns ``validation_split`` as a float."""
    check_choice(name, "name", tuple(DATASETS))
    check_choice(preprocessing, "preprocessing", PREPROCESSINGS)
    check_int(batch_size, "batch_size", 1)
    check_int(padding, "padding", 0)
    check_int(seed, "seed", 0)
    validation_split = check_rate(validation_split, "validation_split")
    for value, argument in ((max_train_examples, "max_train_examples"),
                            (max_test_examples, "max_test_examples")):
        if value is not None:
            check_int(value, argument, 1)
    return validation_split


def _split_arrays(name, data_dir, download, validation_split, seed, max_train_examples,
                  max_test_examples):
    """``({"train", "validation", "test": (images, labels)}, {"train", "test":
    source})``: the validation part held out of the training split, then the
    seeded subsets kept."""
    images, labels, source = load_with_source(name, "train", data_dir=data_dir,
                                              download=download)
    test_images, test_labels, test_source = load_with_source(name, "test", data_dir=data_dir,
                                                             download=download)
    train_index, validation_index = split_indices(len(images), validation_split, seed)
    train_index = subset_indices(train_index, max_train_examples, seed)
    test_index = test_subset(len(test_images), max_test_examples, seed)
    splits = {
        "train": (images[train_index], labels[train_index]),
        "validation": (images[validation_index], labels[validation_index]),
        "test": (test_images[test_index], test_labels[test_index]),
    }
    return splits, {"train": source, "test": test_source}
