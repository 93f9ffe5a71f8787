"""Published weights at another input (timm's habits): the one rule for
when weights trained at one input shape load into a net of another, and
timm's ``adapt_input_conv`` for the first layer's kernel (Keras-free;
numpy imported on use).

Another channel count always loads: the first convolution's kernel is
adapted as timm's ``adapt_input_conv`` adapts it (summed over the input
channels for one channel; repeated and rescaled by ``I / C`` for ``C``),
an MLP's first Dense kernel the same way on its channel axis, and the
per-channel pixel statistics follow (:func:`adapt_statistics`). Another
height and width load with Keras Applications' rule, widened as timm's:
without the head (``include_top=False``) or with a new one (other
``classes``), and only into a body that takes any size (a conv net with
global pooling; an MLP's first Dense layer fixes them).
"""

import math

ADAPT_INPUT_CONV = "first kernel per timm's adapt_input_conv"


def hwc(shape, channels_first=False):
    """``shape`` as ``(height, width, channels)`` (a rank-3 shape given in
    Keras' channels_first layout is reordered); any other rank as it is."""
    shape = tuple(None if d is None else int(d) for d in shape)
    if channels_first and len(shape) == 3:
        return (shape[1], shape[2], shape[0])
    return shape


def input_change(trained, wanted, *, new_head, spatial=None):
    """The rule: may weights trained at input shape ``trained`` load into
    a net built at ``wanted`` (both ``(height, width, channels)``, or the
    vector shape of an MLP)? ``new_head``: the net has no head
    (``include_top=False``) or another class count; ``spatial``: whether
    its body takes any height and width (a conv net: ``True``; an MLP's
    first Dense layer after ``Flatten``: ``False``; ``None``: not known
    yet, checked again when the weights load).

    Returns ``None`` for the same shape, else what the card records
    (``"input adapted from (28, 28, 1) to (28, 28, 3), first kernel per
    timm's adapt_input_conv"``); one ``ValueError`` line naming both
    shapes and what is accepted otherwise."""
    trained, wanted = tuple(trained), tuple(wanted)
    if trained == wanted:
        return None
    refused = f"input_shape {wanted} is not {trained}"
    if len(trained) != len(wanted) or len(trained) != 3:
        raise ValueError(f"{refused} (only a (height, width, channels) picture input takes "
                         f"another shape: another channel count, or another height and width "
                         f"with include_top=False or a new head)")
    if trained[:2] != wanted[:2]:
        if not new_head:
            raise ValueError(f"{refused} (another size is taken with include_top=False or a "
                             f"new head: other classes; another channel count with any head)")
        if spatial is False:
            raise ValueError(f"{refused}: an MLP's first Dense layer takes the flattened "
                             f"height x width x channels, so its height and width are the "
                             f"weights' (only the channel count may change)")
    if wanted[2] is None or wanted[2] < 1:
        raise ValueError(f"{refused}: the channel count must be known (>= 1)")
    note = f"input adapted from {trained} to {wanted}"
    return f"{note}, {ADAPT_INPUT_CONV}" if trained[2] != wanted[2] else note


def adapt_input_conv(kernel, channels, axis=-2):
    """timm's ``adapt_input_conv`` (timm/models/_manipulate.py) on a Keras
    kernel, whose input-channel axis is ``axis`` (``(kh, kw, in, out)``:
    -2): to one channel, the sum over the ``I`` input channels; to
    ``C > 1``, the kernel repeated ``ceil(C / I)`` times along that axis,
    the first ``C`` kept, times ``I / C`` (float32 arithmetic, as timm's;
    the same kernel for ``C == I``). Returns a new array of the kernel's
    dtype."""
    import numpy as np

    kernel = np.asarray(kernel)
    given = kernel.shape[axis]
    if not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be an int >= 1, got {channels!r}")
    if channels == given:
        return kernel.copy()
    weights = kernel.astype("float32")
    if channels == 1:
        adapted = weights.sum(axis=axis, keepdims=True)
    else:
        repeat = math.ceil(channels / given)
        adapted = np.concatenate([weights] * repeat, axis=axis)
        adapted = np.take(adapted, np.arange(channels), axis=axis)
        adapted *= np.float32(given / float(channels))
    return adapted.astype(kernel.dtype)


def adapt_statistics(statistics, channels):
    """The per-channel pixel statistics ``{"method", "mean", "std"}`` for
    ``channels`` channels, as the kernel's channels follow the weights':
    the mean of each statistic for one channel (a grey picture seen as the
    average of the trained channels), else the values repeated channel
    after channel (a grey mean repeated for RGB, so that a grey picture's
    R = G = B pixels give what the grey net gives). ``None`` stays
    ``None``; the same count is unchanged."""
    if statistics is None:
        return None
    adapted = dict(statistics)
    for key in ("mean", "std"):
        values = statistics.get(key)
        if values is None or len(values) == channels:
            continue
        if channels == 1:
            adapted[key] = [math.fsum(values) / len(values)]
        else:
            adapted[key] = [values[i % len(values)] for i in range(channels)]
    return adapted
