"""What every zoo builder shares: the Keras Applications arguments, their
checks (made before any layer is built), the input and its preprocessing,
the classifier head, and the weights: checked first, loaded last."""

import math

import keras

from keras_gresnet._checks import check_int
from keras_gresnet.layers import pixel_statistics
from keras_gresnet.layers.inputs import (  # noqa: F401 (the builders' input)
    STATISTICS_FORM, channels_first as _channels_first, model_input,
)
from keras_gresnet.weights import arguments as weights_arguments
from keras_gresnet.weights.adapt import adapt_statistics
from keras_gresnet.zoo import resolver
from keras_gresnet.zoo.builders import hub_weights

POOLINGS = (None, "avg", "max")


def load_weights(model, weights, *, include_top, classes):
    """Load what ``weights=`` asked for into the freshly built ``model`` (the
    last step of every builder); returns ``model``."""
    if weights is not None:
        resolver.load_into(model, weights, include_top=include_top, classes=classes)
    return model


# Sizes this package builds. HE's deepest net has 333 units (ResNet-1001)
# and WRN's widest 36.5M parameters; a Keras graph of many thousands of
# blocks takes minutes to build and gigabytes of memory, and 2e9 float32
# parameters are 8 GB before the optimizer doubles or triples them.
MAX_BLOCKS = 5_000
MAX_PARAMS = 2_000_000_000
# Values in one input example: a 4,096 x 4,096 RGB picture is 50M; more is a
# typo (input_shape=(100000, 100000)) that would ask for terabytes.
MAX_INPUT = 2 ** 26


def _size(number, about=""):
    """``number`` as a refusal writes it: ``1,234,567`` (after ``about``), or
    past 10^15 (a 300-digit argument's: no float, nor a screenful of digits)
    just that."""
    return f"{about}{number:,.0f}" if number < 1e15 else "more than 10^15"


def check_size(builder, blocks, params, arguments):
    """Refuse a model of more than :data:`MAX_BLOCKS` blocks or about
    :data:`MAX_PARAMS` parameters before anything is built; ``arguments``
    names what sets the size (e.g. ``"depth"``)."""
    if blocks > MAX_BLOCKS:
        raise ValueError(
            f"{builder}: {arguments} give {_size(blocks)} blocks; this package builds at most "
            f"{MAX_BLOCKS:,} (HE's deepest net has 333; a Keras graph of more takes "
            f"minutes and gigabytes to build)")
    if params > MAX_PARAMS:
        raise ValueError(
            f"{builder}: {arguments} give {_size(params, 'about ')} parameters; this package "
            f"builds at most {MAX_PARAMS:,} (8 GB of float32 weights before the "
            f"optimizer's state)")


def check_common(
    builder,
    *,
    include_top,
    weights,
    input_tensor,
    input_shape,
    pooling,
    classes,
    classifier_activation,
    default_shape,
    min_size=None,
    head_inputs=None,
):
    """Check the Keras Applications arguments; return the resolved input shape.

    ``min_size=None`` means a vector model (any rank, flattened); otherwise an
    image model taking rank-3 ``(height, width, channels)`` inputs with both
    spatial sizes at least ``min_size``. The input (at most :data:`MAX_INPUT`
    values an example) and, with ``head_inputs`` (the classifier's input
    width), the head's ``head_inputs * classes`` weights count in the size
    check, before anything is built.
    """
    if not isinstance(include_top, bool):
        raise ValueError(f"include_top must be True or False, got {include_top!r}")
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    check_int(classes, "classes", 1)
    try:
        keras.activations.get(classifier_activation)
    except Exception:
        raise ValueError(
            f"classifier_activation must be None or a Keras activation name or "
            f"callable (e.g. 'softmax'), got {classifier_activation!r}"
        ) from None
    # A public builder resolved a name to its entry (registry's
    # application_arguments); a generic builder called directly takes None
    # or a path.
    entry = weights if isinstance(weights, dict) else None
    if entry is None and not hub_weights(weights):
        weights_arguments.check_argument(weights, builder)
    if input_shape is None and input_tensor is not None:
        input_shape = tuple(input_tensor.shape[1:])
    # Image models follow keras.config.image_data_format(); the defaults and
    # the registry's shapes are (height, width, channels).
    first = min_size is not None and keras.config.image_data_format() == "channels_first"
    if input_shape is None:  # Keras Applications: the weights decide the default
        declared = None if entry or weights is None or hub_weights(weights) else \
            resolver.declared_input_shape(weights)  # weights=<path> as weights=<name>
        input_shape = tuple(entry["input_shape"]) if entry else declared or default_shape
        if first and len(input_shape) == 3 and not declared:  # a file's is as it was built
            input_shape = (input_shape[2], input_shape[0], input_shape[1])
    try:
        input_shape = tuple(None if d is None else int(d) for d in input_shape)
    except (TypeError, ValueError):
        raise ValueError(f"input_shape must be a tuple of sizes, got {input_shape!r}") from None
    if min_size is None:
        if not input_shape or any(d is None or d < 1 for d in input_shape):
            raise ValueError(
                f"input_shape of {builder} must be a non-empty tuple of known "
                f"positive sizes, e.g. {default_shape}, got {input_shape!r}"
            )
    else:
        if len(input_shape) != 3:
            example = (default_shape[2], *default_shape[:2]) if first else default_shape
            raise ValueError(
                f"input_shape of {builder} must have rank 3 "
                f"({'channels, height, width' if first else 'height, width, channels'}), "
                f"e.g. {example}, got {input_shape!r}"
            )
        c, h, w = input_shape if first else (input_shape[2], *input_shape[:2])
        if c is None or c < 1:
            raise ValueError(f"input_shape must have a known channel count >= 1, got {input_shape!r}")
        for d in (h, w):
            if d is not None and d < min_size:
                raise ValueError(
                    f"input_shape of {builder} needs height and width >= {min_size}, "
                    f"got {input_shape!r}"
                )
    values = math.prod(d for d in input_shape if d is not None)
    if values > MAX_INPUT:
        raise ValueError(
            f"input_shape {input_shape!r} of {builder} holds {values:,} values an example; "
            f"this package builds inputs of at most {MAX_INPUT:,} (a 4,096 x 4,096 RGB "
            f"picture is 50,331,648)")
    if include_top and head_inputs:
        check_size(builder, 0, head_inputs * classes + classes, f"classes={classes:,}")
    return input_shape


def check_preprocessing(builder, include_preprocessing, weights, input_shape):
    """The ``include_preprocessing`` of a builder as ``{"method", "mean",
    "std"}`` for a :class:`~keras_gresnet.layers.PixelNormalization`, or
    ``None`` (``False``): checked before anything is built.

    ``True`` takes the statistics of the ``weights`` registry entry (its
    ``"preprocessing"`` field, for another channel count as
    :func:`keras_gresnet.weights.adapt.adapt_statistics` adapts them) and
    is refused without one; a dict gives them
    (``dict(method="scale")`` needs no ``mean`` or ``std``). One value per
    channel of ``input_shape`` (its last size); a vector model takes one
    value, broadcast over its features, too."""
    if include_preprocessing is False:
        return None
    if include_preprocessing is True:
        entry = weights if isinstance(weights, dict) else None
        if entry is None:
            raise ValueError(
                f"{builder}: include_preprocessing=True takes the statistics of the "
                f"published weights= entry, and weights={weights!r} has none; pass "
                f"include_preprocessing={STATISTICS_FORM} (the training pipeline's "
                f"Preprocessing.get_config(); dict(method='scale') for pixels / 255)")
        # the entry's, for the channels of this input (timm's in_chans: a grey
        # mean repeated for RGB, as the first kernel is)
        statistics = adapt_statistics(entry["preprocessing"],
                                      input_shape[0 if _channels_first(input_shape) else -1])
    elif isinstance(include_preprocessing, dict):
        statistics = include_preprocessing
    else:
        raise ValueError(
            f"include_preprocessing must be False, True (the weights' statistics) or "
            f"{STATISTICS_FORM}, got {include_preprocessing!r}")
    unknown = sorted(set(statistics) - {"method", "mean", "std"})
    if unknown or "method" not in statistics:
        raise ValueError(
            f"include_preprocessing must be {STATISTICS_FORM}, got {statistics!r}")
    channels = input_shape[0 if _channels_first(input_shape) else -1]
    method, mean, std = pixel_statistics(statistics["method"], statistics.get("mean"),
                                         statistics.get("std"), channels)
    allowed = (channels, 1) if len(input_shape) == 1 else (channels,)
    if len(mean) not in allowed:
        raise ValueError(
            f"include_preprocessing of {builder} needs one mean and std per input channel "
            f"({channels}), got {len(mean)}")
    return {"method": method, "mean": list(mean), "std": list(std)}


def head_dtype():
    """float32 for the classifier under a mixed policy (numerically safe
    softmax, as the Keras mixed-precision guide advises), else the policy."""
    policy = keras.config.dtype_policy()
    return "float32" if policy.compute_dtype != policy.variable_dtype else None


def head(x, *, include_top, pooling, classes, classifier_activation, spatial=True):
    """Pooling and classifier, named as Keras Applications name them."""
    if include_top:
        if spatial:
            x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
        return keras.layers.Dense(
            classes, activation=classifier_activation, dtype=head_dtype(), name="predictions"
        )(x)
    if spatial and pooling == "avg":
        return keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    if spatial and pooling == "max":
        return keras.layers.GlobalMaxPooling2D(name="max_pool")(x)
    return x
