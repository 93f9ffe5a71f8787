"""The numbers behind the papers' input preprocessing, in numpy: per-channel
statistics of the training images for each method (:class:`Preprocessing`),
the seeded choice of the validation split and of the subsets quick runs keep,
and the order and augmentation of every training epoch (:func:`epoch_plan`).

GR scales pixels to [0, 1]; HE subtracts the training mean; WRN also divides
by the training std. Both input pipelines, ``tf.data``
(:mod:`~keras_gresnet.data.tfdata`) and numpy
(:mod:`~keras_gresnet.data.numpydata`), take their numbers from here, so
they yield identical batches.
"""

import dataclasses
import math

import numpy as np

from keras_gresnet._checks import PREPROCESSINGS, check_choice, check_int, check_rate
from keras_gresnet._pixels import scale_offset


# --------------------------------------------------------------------------
# Statistics (GR: pixels / 255; HE: mean subtraction; WRN: mean/std).


def channel_stats(images):
    """Exact per-channel mean and (population) std of uint8 images in [0, 1]
    units, from a 256-bin histogram per channel: no float copy of the data."""
    values = np.arange(256) / 255.0
    means, stds = [], []
    for channel in range(images.shape[-1]):
        counts = np.bincount(images[..., channel].ravel(), minlength=256)
        mean = counts @ values / counts.sum()
        means.append(float(mean))
        stds.append(float(np.sqrt(counts @ (values - mean) ** 2 / counts.sum())))
    return tuple(means), tuple(stds)


def fit_statistics(method, train_images):
    """``(mean, std)`` per channel of ``method`` for ``train_images`` (uint8
    ``N, H, W, C``): zeros and ones for ``"scale"``, the training mean (and,
    for ``"meanstd"``, std) otherwise."""
    check_choice(method, "preprocessing", PREPROCESSINGS)
    channels = np.shape(train_images)[-1]
    mean, std = (0.0,) * channels, (1.0,) * channels
    if method != "scale":
        mean, train_std = channel_stats(np.asarray(train_images, dtype=np.uint8))
        if method == "meanstd":
            # A constant channel (std 0) is only centred, not divided by 0.
            std = tuple(s if s > 0 else 1.0 for s in train_std)
    return mean, std


def checked_statistics(method, mean, std):
    """``(mean, std)`` as tuples of floats, after checking ``method`` and that
    they give one value per channel with ``std > 0``."""
    check_choice(method, "preprocessing", PREPROCESSINGS)
    mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
    if len(mean) != len(std) or not all(s > 0 for s in std):
        raise ValueError(
            f"mean and std need one value per channel and std > 0, got "
            f"mean={mean}, std={std}"
        )
    return mean, std


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """Pixel normalisation ``x -> (x / 255 - mean) / std``, per channel.

    - ``"scale"``: ``mean = 0``, ``std = 1`` (GR's MNIST nets: pixels in [0, 1]).
    - ``"mean"``: training-set mean, ``std = 1`` (HE and GR's pre-activation
      ResNets: mean subtraction only).
    - ``"meanstd"``: training-set mean and std (WRN).

    Build it with :meth:`fit` on the TRAINING images; save it with
    :meth:`get_config` so the same statistics are used at test time. Calling
    it normalises a numpy batch; the ``tf.data`` pipeline applies the same
    :meth:`scale_offset` to tensors.
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

    def scale_offset(self):
        """float32 ``(scale, offset)`` per channel: the normalised image is
        ``float32(x) * scale + offset`` (one multiply-add per pixel)."""
        return scale_offset(self.mean, self.std)

    def __call__(self, images):
        """Normalised float32 images from a numpy batch of pixels."""
        scale, offset = self.scale_offset()
        return np.asarray(images).astype(np.float32) * scale + offset

    def get_config(self):
        return {"method": self.method, "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def checked_preprocessing(preprocessing, images):
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


# --------------------------------------------------------------------------
# The order and augmentation of a training epoch.

# The crop's padding: zeros (fb.resnet.torch transforms.lua:62-72), or the
# image mirrored at its border (WRN's randomcrop_type=reflection,
# nn.SpatialReflectionPadding, train.lua:103-117; numpy's mode="reflect").
PAD_MODES = ("zero", "reflect")

# The augmentation of a training stream: none (False), the papers' pad +
# random crop + horizontal flip (True), or the crop alone ("crop": images a
# mirror would relabel, such as digits).
CROP_ONLY = "crop"
AUGMENTS = (False, True, CROP_ONLY)


def checked_augment(augment):
    """``augment``, one of :data:`AUGMENTS`."""
    if not any(augment is a or (isinstance(a, str) and augment == a) for a in AUGMENTS):
        raise ValueError(f"augment must be one of {AUGMENTS} (True: crop and flip; "
                         f"{CROP_ONLY!r}: crop only), got {augment!r}")
    return augment


def dataset_augment(augment, flips_keep_labels):
    """What ``augment=True`` means for a dataset: crop and flip where a
    mirror image keeps its label, the crop alone where it does not (MNIST's
    digits)."""
    augment = checked_augment(augment)
    return CROP_ONLY if augment is True and not flips_keep_labels else augment


# The first word of an epoch plan's seed: the epoch-indexed stream, or the
# one-pass stream (a fresh random key per pass).
EPOCH_STREAM, ONE_PASS = 0, 1


def epoch_plan(num_examples, *, seed, epoch, shuffle=True, padding=4, stream=EPOCH_STREAM):
    """``(order, offsets, flips)`` of one epoch, a pure function of ``(seed,
    epoch)``: the example order (int64 ``(N,)``, a seeded permutation when
    ``shuffle``), and for the example at each position its crop's top-left
    ``(row, col)`` in the padded image (int32 ``(N, 2)``, uniform in
    ``[0, 2 * padding]``) and whether it is mirrored (bool ``(N,)``, p = 0.5).
    Both input pipelines cut their batches from it, so a resumed run, every
    worker of a cluster, and either pipeline see the same batches."""
    rng = np.random.default_rng([int(stream), int(seed), int(epoch)])
    order = rng.permutation(num_examples) if shuffle else np.arange(num_examples)
    offsets = rng.integers(0, 2 * padding + 1, size=(num_examples, 2), dtype=np.int32)
    flips = rng.random(num_examples) < 0.5
    return order.astype(np.int64), offsets, flips


def steps_per_epoch(num_examples, batch_size, drop_remainder=False):
    """Batches in one epoch of ``num_examples`` (the last, smaller one
    dropped with ``drop_remainder``): what both input pipelines yield."""
    rounding = math.floor if drop_remainder else math.ceil
    return rounding(num_examples / batch_size)


def checked_epochs(epochs):
    """``epochs`` (``None``, ``stop`` or ``(start, stop)``) as ``None`` or
    ``(start, stop)``."""
    if epochs is None:
        return None
    start, stop = (0, epochs) if isinstance(epochs, int) else tuple(epochs)
    start, stop = check_int(start, "epochs start", 0), check_int(stop, "epochs stop", 0)
    if start > stop:
        raise ValueError(f"epochs must be (start, stop) with start <= stop, got {epochs!r}")
    return start, stop


def checked_stream_arguments(images, labels, batch_size, padding, seed, epochs,
                             pad_mode="zero"):
    """``(batch_size, padding, seed, epochs)`` of a pipeline's
    ``make_dataset``, checked (and ``pad_mode``, one of :data:`PAD_MODES`);
    ``epochs`` as ``None`` or ``(start, stop)``."""
    if images.ndim != 4 or labels.shape != images.shape[:1]:
        raise ValueError(
            f"images must be (N, H, W, C) and labels (N,), got {images.shape} and {labels.shape}"
        )
    batch_size = check_int(batch_size, "batch_size", 1)
    padding = check_int(padding, "padding", 0)
    check_choice(pad_mode, "pad_mode", PAD_MODES)
    if pad_mode == "reflect" and padding >= min(images.shape[1:3]):
        raise ValueError(f"padding={padding} with pad_mode='reflect' needs images larger "
                         f"than the padding, got {images.shape[1:3]}")
    seed = check_int(seed, "seed", 0)
    return batch_size, padding, seed, checked_epochs(epochs)


# --------------------------------------------------------------------------
# Seeded index choices: the validation split, quick runs' subsets.


def split_indices(num_examples, validation_split, seed=0):
    """``(train, validation)`` sorted index arrays: a seeded random
    ``validation_split`` fraction of ``range(num_examples)`` and the rest."""
    validation_split = check_rate(validation_split, "validation_split")
    permutation = np.random.default_rng(seed).permutation(num_examples)
    num_validation = round(num_examples * validation_split)
    if validation_split and not 0 < num_validation < num_examples:
        raise ValueError(
            f"validation_split={validation_split} of {num_examples} examples leaves "
            f"an empty train or validation set"
        )
    return np.sort(permutation[num_validation:]), np.sort(permutation[:num_validation])


def subset_indices(indices, limit, seed):
    """At most ``limit`` of ``indices``, a seeded random choice kept in order
    (all of them for ``limit=None``)."""
    if limit is None or limit >= len(indices):
        return indices
    return np.sort(np.random.default_rng(seed).choice(indices, limit, replace=False))


def test_subset(num_test, max_test_examples, seed):
    """The indices of the test examples :func:`keras_gresnet.data.pipeline`
    keeps with ``max_test_examples`` and ``seed`` (all of them for ``None``)."""
    return subset_indices(np.arange(num_test), max_test_examples, seed)
