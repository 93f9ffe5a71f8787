"""HE's ImageNet input pipeline, as fb.resnet.torch (which HE's code builds
on) feeds ILSVRC-2012 through ``tensorflow_datasets``' ``imagenet2012``.

Implemented (fb.resnet.torch datasets/imagenet.lua:80-103, transforms.lua):

- training: :func:`random_sized_crop` (scale and aspect-ratio augmentation:
  area 8%-100%, aspect ratio 3/4-4/3, up to 10 tries, else the test crop;
  bicubic resize to 224), per-channel mean/std with fb's fixed statistics
  (:data:`MEAN`, :data:`STD`), horizontal flip with p = 0.5;
- testing: :func:`center_crop`, shorter side resized to 256 and the central
  224 crop (fb's default), or HE's 320 x 320 test crop (``test_size=320``:
  shorter side 320, central 320).

Not implemented: fb's ColorJitter (brightness, contrast, saturation 0.4) and
AlexNet-style PCA Lighting noise (0.1), and ten-crop testing.

ImageNet cannot be downloaded: ``tensorflow_datasets`` prepares it from the
user's ``ILSVRC2012_img_train.tar`` and ``ILSVRC2012_img_val.tar`` in its
``manual_dir`` (default ``data_dir/downloads/manual``). TensorFlow and
``tensorflow_datasets`` are imported on use.
"""

import os

import numpy as np

from keras_gresnet._checks import check_choice, check_int
from keras_gresnet.data.preprocessing import Preprocessing, steps_per_epoch

NAME = "imagenet2012"
NUM_CLASSES = 1000
IMAGE_SIZE = 224  # fb.resnet.torch datasets/imagenet.lua:83 (RandomSizedCrop(224))
TEST_SIZES = (224, 320)  # fb's 256 -> 224 centre crop; HE's 320 crop (HE Table 5)
MANUAL_FILES = ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar")
# fb.resnet.torch datasets/imagenet.lua:66-70: "computed from random subset of
# ImageNet training images", in [0, 1] units.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SPLITS = {"train": "train", "test": "validation"}
_ATTEMPTS = 10  # transforms.lua:158 (attempt >= 10)


def preprocessing():
    """fb's per-channel mean/std (:data:`MEAN`, :data:`STD`)."""
    return Preprocessing("meanstd", MEAN, STD)


def _resize_shorter(image, size):
    import tensorflow as tf

    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = size / tf.reduce_min(shape)
    new = tf.cast(tf.round(shape * scale), tf.int32)
    return tf.image.resize(image, new, method="bicubic")


def center_crop(image, test_size=IMAGE_SIZE):
    """fb's test transform (imagenet.lua:93-99): the shorter side resized to
    256 (``test_size=224``) or to 320 (``test_size=320``, HE's 320 crop),
    then the central ``test_size`` square; float32 pixels in [0, 255]."""
    return _scale_and_crop(image, 256 if test_size == 224 else test_size, test_size)


def _scale_and_crop(image, shorter, size):
    """fb's Scale(shorter) then CenterCrop(size) (transforms.lua:37-60)."""
    import tensorflow as tf

    resized = _resize_shorter(tf.cast(image, tf.float32), shorter)
    height, width = tf.shape(resized)[0], tf.shape(resized)[1]
    top, left = (height - size) // 2, (width - size) // 2
    return resized[top:top + size, left:left + size]


def random_sized_crop(image, seed, size=IMAGE_SIZE):
    """fb's RandomSizedCrop (transforms.lua:130-163): a crop of 8% to 100% of
    the area with aspect ratio in [3/4, 4/3] (sides swapped with p = 0.5) at
    a uniform position, bicubic-resized to ``size``; the first of 10 draws
    that fits, else the shorter side resized to ``size`` and its centre. ``seed``: shape-``(2,)`` int
    tensor (same seed, same crop)."""
    import tensorflow as tf

    height, width = tf.shape(image)[0], tf.shape(image)[1]
    seeds = tf.random.experimental.stateless_split(seed, 5)
    area = tf.cast(height * width, tf.float32) * tf.random.stateless_uniform(
        (_ATTEMPTS,), seeds[0], 0.08, 1.0)
    ratio = tf.random.stateless_uniform((_ATTEMPTS,), seeds[1], 3 / 4, 4 / 3)
    w = tf.cast(tf.round(tf.sqrt(area * ratio)), tf.int32)
    h = tf.cast(tf.round(tf.sqrt(area / ratio)), tf.int32)
    swap = tf.random.stateless_uniform((_ATTEMPTS,), seeds[2]) < 0.5
    w, h = tf.where(swap, h, w), tf.where(swap, w, h)
    fits = (h <= height) & (w <= width)
    first = tf.argmax(tf.cast(fits, tf.int32))
    h, w = tf.maximum(h[first], 1), tf.maximum(w[first], 1)
    top = tf.random.stateless_uniform((), seeds[3], 0, tf.maximum(height - h, 0) + 1, tf.int32)
    left = tf.random.stateless_uniform((), seeds[4], 0, tf.maximum(width - w, 0) + 1, tf.int32)

    def crop():
        patch = tf.cast(image[top:top + h, left:left + w], tf.float32)
        return tf.image.resize(patch, (size, size), method="bicubic")

    return tf.cond(tf.reduce_any(fits), crop, lambda: _scale_and_crop(image, size, size))


def _load_split(split, data_dir, manual_dir):
    """The tfds split as a ``tf.data.Dataset`` of ``{"image", "label"}``;
    prepared from ``manual_dir``'s ILSVRC tar files when it is not yet."""
    import tensorflow_datasets as tfds

    try:
        return tfds.load(NAME, split=split, data_dir=data_dir, download=False)
    except Exception as error:  # not prepared under data_dir (tfds' own types)
        not_prepared = error
    missing = [f for f in MANUAL_FILES if not os.path.isfile(os.path.join(manual_dir, f))]
    if missing:
        raise ValueError(
            f"ImageNet ({NAME}) is not prepared under data_dir={data_dir!r} "
            f"({type(not_prepared).__name__}) and manual_dir={manual_dir!r} lacks "
            f"{', '.join(missing)}: ImageNet cannot be downloaded; register at "
            f"https://image-net.org/download-images, put {' and '.join(MANUAL_FILES)} in "
            f"manual_dir (tensorflow_datasets prepares them once)")
    config = tfds.download.DownloadConfig(manual_dir=manual_dir)
    return tfds.load(NAME, split=split, data_dir=data_dir, download=True,
                     download_and_prepare_kwargs=dict(download_config=config))


def _epoch_seed(seed, epoch):
    """One int per ``(seed, epoch)``: the epoch's shuffle and crop seed."""
    return int(np.random.default_rng([2, int(seed), int(epoch)]).integers(2**31 - 1))


def make_dataset(examples, *, num_examples, batch_size, augment, seed=0, epochs=None,
                 test_size=IMAGE_SIZE, shuffle_buffer=10_000):
    """Batches ``(float32 images, int32 labels)`` of a tfds ImageNet split.

    ``augment``: shuffled (a ``shuffle_buffer`` of examples), random-sized
    224 crops and flips (:func:`random_sized_crop`); else the test crop
    (:func:`center_crop`, ``test_size``), in order. ``epochs=(start, stop)``
    streams those epochs, each one's order and crops a function of ``(seed,
    epoch)``; ``None``: one pass (epoch 0). ``num_examples`` examples per
    epoch."""
    import tensorflow as tf

    scale, offset = (tf.constant(v) for v in preprocessing().scale_offset())
    examples = examples.take(num_examples)

    def one_epoch(epoch):
        epoch_seed = _epoch_seed(seed, epoch)
        stream = examples
        if augment:
            stream = stream.shuffle(shuffle_buffer, seed=epoch_seed)

        def prepare(index, example):
            image = example["image"]
            if augment:
                key = tf.stack([tf.constant(epoch_seed, tf.int64), index])
                crop_key, flip_key = tf.unstack(tf.random.experimental.stateless_split(key, 2))
                image = random_sized_crop(image, crop_key)
                flip = tf.random.stateless_uniform((), flip_key) < 0.5
                image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
            else:
                image = center_crop(image, test_size)
            return image * scale + offset, tf.cast(example["label"], tf.int32)

        return stream.enumerate().map(prepare, num_parallel_calls=tf.data.AUTOTUNE,
                                      deterministic=True).batch(batch_size)

    start, stop = (0, 1) if epochs is None else epochs
    batches = one_epoch(start)
    for epoch in range(start + 1, stop):
        batches = batches.concatenate(one_epoch(epoch))
    steps = steps_per_epoch(num_examples, batch_size) * (stop - start)
    return batches.apply(tf.data.experimental.assert_cardinality(steps)).prefetch(
        tf.data.AUTOTUNE)


def pipeline_fields(*, data_dir=None, manual_dir=None, batch_size=256, augment=True, seed=0,
                    max_train_examples=None, max_test_examples=None, test_size=IMAGE_SIZE):
    """HE's ImageNet data, the fields of a
    :class:`keras_gresnet.data.pipelines.Pipeline` (which
    ``data.pipeline("imagenet2012", ...)`` returns): ``train`` (augmented when
    ``augment``), ``test`` (the validation split, test crops), no
    ``validation``.

    Args:
        data_dir: tensorflow_datasets' folder (``None``: its default).
        manual_dir: the folder with the ILSVRC tar files (default
            ``data_dir/downloads/manual``, tfds' own).
        batch_size, augment, seed: as in :func:`make_dataset`.
        max_train_examples, max_test_examples: the first this many examples
            (quick runs); ``None`` keeps all.
        test_size: 224 (fb: 256 -> central 224) or 320 (HE's 320 crop).
    """
    check_int(batch_size, "batch_size", 1)
    check_int(seed, "seed", 0)
    check_choice(test_size, "test_size", TEST_SIZES)
    for value, argument in ((max_train_examples, "max_train_examples"),
                            (max_test_examples, "max_test_examples")):
        if value is not None:
            check_int(value, argument, 1)
    if manual_dir is None:
        root = data_dir or os.path.join(os.path.expanduser("~"), "tensorflow_datasets")
        manual_dir = os.path.join(root, "downloads", "manual")
    train, test = (_load_split(SPLITS[s], data_dir, str(manual_dir)) for s in ("train", "test"))
    counts = {"train": 1_281_167, "test": 50_000}  # ILSVRC-2012 train / validation
    num_train = min(counts["train"], max_train_examples or counts["train"])
    num_test = min(counts["test"], max_test_examples or counts["test"])

    def train_stream(epochs):
        return make_dataset(train, num_examples=num_train, batch_size=batch_size,
                            augment=augment, seed=seed, epochs=epochs)

    config = dict(name=NAME, preprocessing=preprocessing().get_config(), batch_size=batch_size,
                  validation_split=0.0, augment=augment, test_size=test_size, seed=seed,
                  max_train_examples=max_train_examples, max_test_examples=max_test_examples,
                  source={"train": "tensorflow_datasets", "test": "tensorflow_datasets"})
    return dict(
        train=train_stream(None),
        validation=None,
        test=make_dataset(test, num_examples=num_test, batch_size=batch_size, augment=False,
                          test_size=test_size),
        preprocessing=preprocessing(),
        input_shape=(IMAGE_SIZE, IMAGE_SIZE, 3),
        num_classes=NUM_CLASSES,
        num_train=num_train,
        num_validation=0,
        num_test=num_test,
        steps_per_epoch=steps_per_epoch(num_train, batch_size),
        config=config,
        train_epochs_fn=train_stream,
    )
