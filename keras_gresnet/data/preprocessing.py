"""The numbers behind the papers' input preprocessing, in numpy: per-channel
statistics of the training images for each method, and the seeded choice of
the validation split and of the subsets quick runs keep.

GR scales pixels to [0, 1]; HE subtracts the training mean; WRN also divides
by the training std. :class:`keras_gresnet.data.Preprocessing` applies them
to ``tf.data`` batches.
"""

import numpy as np

from keras_gresnet._checks import PREPROCESSINGS, check_choice, check_rate


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
