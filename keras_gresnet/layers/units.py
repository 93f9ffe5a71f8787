"""The residual units of HE and the fully-connected blocks of GR.

Units are built with the functional API (as Keras Applications do) so every
layer of a built model has a systematic name, ``{prefix}{i}_conv``,
``{prefix}gate``..., and a block can be found, inspected or cut out by its
name prefix.
"""

import keras

from keras_gresnet._checks import check_choice
from keras_gresnet.layers.convolution import Conv2D
from keras_gresnet.layers.merges import ResidualGate, ScaledAdd, ShortcutGate
from keras_gresnet.layers.normalization import BatchNormalization
from keras_gresnet.layers.shortcuts import ShortcutDropout, ZeroPadShortcut

# HE Table 2's activation arrangements. For conv i of the residual branch F:
#   pre    ops before the conv (pre-activation),
#   post   ops after every conv but the last, last_post after the last one,
#   after  ops after the addition.
# With a pre-activation unit the first ``pre`` ops are shared with a
# projection shortcut ("the projection takes the pre-activated input", HE).
UNITS = {
    "original": dict(pre=(), post=("bn", "relu"), last_post=("bn",), after=("relu",)),
    "bn_after_add": dict(pre=(), post=("bn", "relu"), last_post=(), after=("bn", "relu")),
    "relu_before_add": dict(pre=(), post=("bn", "relu"), last_post=("bn", "relu"), after=()),
    "relu_preact": dict(pre=("relu",), post=("bn",), last_post=("bn",), after=()),
    "preact": dict(pre=("bn", "relu"), post=(), last_post=(), after=()),
}
PREACT_UNITS = ("preact", "relu_preact")

# Layout of F: (kernel size, width multiplier) per conv. "single" is HE
# Table 3's 1-layer skip; "bottleneck" is 1x1, 3x3, 1x1.
BLOCKS = {
    "basic": ((3, 1), (3, 1)),
    "bottleneck": ((1, 1), (3, 1), (1, "expansion")),
    "single": ((3, 1),),
}
# The conv of F that takes a unit's stride: the (first) 3x3, as
# fb.resnet.torch (models/preresnet.lua:101, models/resnet.lua:77) and Keras
# ResNetV2, or a bottleneck's first 1x1, as HE's own CIFAR code
# (resnet-1k-layers, resnet-pre-act.lua:43, 70).
STRIDE_ONS = ("3x3", "1x1")
# h(x) of a unit whose width grows: a 1x1 conv projection (HE's option B,
# fb.resnet.torch shortcutType "B": models/preresnet.lua:31-34) or fb's
# shortcutType "A", the strided identity padded with zero channels
# (models/preresnet.lua:35-41).
SHORTCUT_PROJECTIONS = ("conv", "zero_pad")
# Where a pre-activation unit's BN-ReLU goes, fb.resnet.torch's names
# (models/preresnet.lua:65-71): "branch" starts F with it and h(x) takes the
# raw x; "both_preact" applies it before the split, so h(x) takes the
# activated x too; "no_preact" has none (the first unit after an ImageNet
# stem that ends in BN-ReLU, preresnet.lua:120, 146-149).
PREACT_TYPES = ("branch", "both_preact", "no_preact")
# Conv initializers of the papers' code, by the name their code gives them:
# MSRA (He et al.) normal(0, sqrt(2 / n)) with n = k*k*out_channels in
# fb.resnet.torch and resnet-1k-layers (models/preresnet.lua:197-200,
# resnet-pre-act.lua:127-130), n = k*k*in_channels in WRN's utils.MSRinit
# (wide-residual-networks models/utils.lua:3-8). Untruncated; Keras'
# "he_normal" is fan-in and truncated.
CONV_INITIALIZERS = {
    "msra_fan_out": dict(scale=2.0, mode="fan_out", distribution="untruncated_normal"),
    "msra_fan_in": dict(scale=2.0, mode="fan_in", distribution="untruncated_normal"),
}

# HE Table 1. A shortcut kind sets h(x) and how h(x) and F(x) are merged.
SHORTCUTS = (
    "identity",          # h(x) = x
    "scaling",           # h(x) * shortcut_scale + F * residual_scale
    "exclusive_gating",  # (1 - g(x)) h(x) + g(x) F
    "shortcut_gating",   # (1 - g(x)) h(x) + F
    "conv",              # h(x) = 1x1 conv, on every unit
    "dropout",           # h(x) = dropout(x)
)
# Shortcut kinds that compose with GR's gate on F.
GATEABLE_SHORTCUTS = ("identity", "conv")

# h(x) of a strided unit that keeps its width: a strided 1x1 projection (HE)
# or a 1x1 max-pool with the stride, i.e. plain subsampling (Keras ResNetV2).
SUBSAMPLES = ("conv", "pool")
# Layer names. "zoo": the BN-ReLU before conv i of a pre-activation unit is
# conv i's pre-activation, ``{i}_bn``; "keras": Keras ResNetV2 names it after
# the conv it follows, ``{i-1}_bn``, and calls the final addition ``out``.
NAMINGS = ("zoo", "keras")


def check_unit_args(
    unit="preact",
    block="basic",
    shortcut="identity",
    gated=False,
    *,
    subsample="conv",
    naming="zoo",
    conv_bias=False,
    stride_on="3x3",
    shortcut_projection="conv",
    preact_type=None,
    kernel_initializer="msra_fan_out",
):
    """Raise ``ValueError`` for an unknown unit, block, shortcut, subsample,
    naming, ``stride_on``, ``shortcut_projection``, ``preact_type`` or
    ``kernel_initializer``, a ``conv_bias`` that is not a bool, or options
    that do not go together."""
    check_choice(unit, "unit", tuple(UNITS))
    check_choice(block, "block", tuple(BLOCKS))
    check_choice(shortcut, "shortcut", SHORTCUTS)
    check_choice(subsample, "subsample", SUBSAMPLES)
    check_choice(naming, "naming", NAMINGS)
    check_choice(stride_on, "stride_on", STRIDE_ONS)
    check_choice(shortcut_projection, "shortcut_projection", SHORTCUT_PROJECTIONS)
    if preact_type is not None:
        check_choice(preact_type, "preact_type", PREACT_TYPES)
        if unit not in PREACT_UNITS:
            raise ValueError(
                f"preact_type places a pre-activation unit's BN-ReLU and needs unit in "
                f"{PREACT_UNITS}, got unit={unit!r}, preact_type={preact_type!r}")
    if stride_on == "1x1" and block != "bottleneck":
        raise ValueError(
            f"stride_on='1x1' puts the stride on a bottleneck's first 1x1 conv; "
            f"block={block!r} has none: use stride_on='3x3'")
    initializer(kernel_initializer)
    if not isinstance(conv_bias, bool):
        raise ValueError(f"conv_bias must be True or False, got {conv_bias!r}")
    if gated and shortcut not in GATEABLE_SHORTCUTS:
        raise ValueError(
            f"gated=True puts GR's gate on F and combines with shortcut in "
            f"{GATEABLE_SHORTCUTS}, got shortcut={shortcut!r}"
        )


def channel_axis():
    """The channel axis of the images Keras is set to build for:
    ``keras.config.image_data_format()``'s -1 (channels_last) or 1."""
    return -1 if keras.config.image_data_format() == "channels_last" else 1


def _ops(x, ops, name, bn_momentum, bn_epsilon):
    for op in ops:
        if op == "bn":
            x = BatchNormalization(
                axis=channel_axis(), momentum=bn_momentum, epsilon=bn_epsilon,
                name=f"{name}_bn"
            )(x)
        else:
            x = keras.layers.Activation("relu", name=f"{name}_relu")(x)
    return x


def initializer(identifier):
    """A fresh Keras initializer for one conv: a name of
    :data:`CONV_INITIALIZERS` (``"msra_fan_out"``, ``"msra_fan_in"``) or
    anything ``keras.initializers.get`` takes (``"he_normal"``, a config
    dict, an ``Initializer``, copied so that no two convs share its seed)."""
    if isinstance(identifier, str) and identifier in CONV_INITIALIZERS:
        return keras.initializers.VarianceScaling(**CONV_INITIALIZERS[identifier])
    try:
        if isinstance(identifier, keras.initializers.Initializer):
            identifier = keras.initializers.serialize(identifier)
        found = keras.initializers.get(identifier)
    except (ValueError, TypeError):
        found = None
    if found is None or not callable(found):
        raise ValueError(
            f"kernel_initializer must be one of {tuple(CONV_INITIALIZERS)} or a Keras "
            f"initializer (a name such as 'he_normal', a config dict or an "
            f"Initializer), got {identifier!r}")
    return found


def conv(x, filters, kernel_size, stride=1, name=None, use_bias=False,
         kernel_initializer="msra_fan_out"):
    """A convolution (bias-free unless ``use_bias``; initialised by
    ``kernel_initializer``, see :func:`initializer`) with torch-style
    symmetric padding.

    Keras' ``padding="same"`` pads strided convolutions asymmetrically; the
    explicit ``ZeroPadding2D`` gives the papers' (and Keras ResNetV2's) layout.
    """
    pad = (kernel_size - 1) // 2
    if stride > 1 and pad:
        x = keras.layers.ZeroPadding2D(pad, name=f"{name}_pad")(x)
        padding = "valid"
    else:
        padding = "same"
    return Conv2D(
        filters,
        kernel_size,
        strides=stride,
        padding=padding,
        use_bias=use_bias,
        kernel_initializer=initializer(kernel_initializer),
        name=f"{name}_conv",
    )(x)


def residual_unit(
    x,
    filters,
    *,
    stride=1,
    unit="preact",
    block="basic",
    shortcut="identity",
    gated=False,
    k_initial=1.0,
    dropout=0.0,
    expansion=4,
    shortcut_scale=0.5,
    residual_scale=1.0,
    gate_bias=-6.0,
    shortcut_dropout=0.5,
    bn_momentum=0.9,
    bn_epsilon=1e-5,
    subsample="conv",
    conv_bias=False,
    naming="zoo",
    stride_on="3x3",
    shortcut_projection="conv",
    preact_type=None,
    kernel_initializer="msra_fan_out",
    name="unit_",
):
    """One residual unit of HE (optionally with GR's gate), ``y = h(x) + F(x)``.

    Args:
        x: input tensor (channels last).
        filters: width of the unit's convs (a bottleneck's output has
            ``expansion * filters`` channels).
        stride: stride of the unit (on the conv ``stride_on`` names).
        unit: activation arrangement, a key of :data:`UNITS` (HE Table 2).
        block: ``"basic"`` (two 3x3), ``"bottleneck"`` (1x1, 3x3, 1x1) or
            ``"single"`` (one 3x3, HE Table 3's 1-layer skip).
        shortcut: a kind of :data:`SHORTCUTS` (HE Table 1), on top of the
            base of ``h``: ``x``, or where the shape changes a projection
            (``shortcut_projection``, ``subsample``).
        gated: put GR's scalar gate on F: ``y = relu(k) F(x) + h(x)``.
        k_initial: initial ``k`` of the gate (GR: 1).
        dropout: dropout rate between the convs of F (WRN: 0.3).
        expansion: output width multiplier of a bottleneck (HE: 4).
        shortcut_scale, residual_scale: scales of the ``"scaling"`` shortcut.
        gate_bias: initial ``b_g`` of the ``*_gating`` shortcuts.
        shortcut_dropout: rate of the ``"dropout"`` shortcut
            (:class:`~keras_gresnet.layers.ShortcutDropout`, HE: 0.5).
        bn_momentum, bn_epsilon: batch-norm settings (GR/HE: momentum 0.9).
        subsample: ``h`` of a strided unit that keeps its width: ``"conv"``
            (a strided 1x1 projection, HE) or ``"pool"`` (``MaxPooling2D(1,
            stride)`` of the unit input, Keras ResNetV2).
        conv_bias: give a bias to every conv not directly followed by a
            batch norm (where it is not redundant). Keras ResNetV2 has one on
            the last conv of F and on the projection.
        naming: ``"zoo"`` or ``"keras"`` (Keras ResNetV2's names: the BN-ReLU
            between conv i and conv i+1 is ``{i}_bn``/``{i}_relu``, not
            ``{i+1}_bn``, and an addition ending the unit is ``out``), see
            :data:`NAMINGS`.
        stride_on: ``"3x3"`` (fb.resnet.torch, Keras) or ``"1x1"`` (a
            bottleneck's first 1x1, HE's CIFAR code), :data:`STRIDE_ONS`.
        shortcut_projection: ``h`` of a unit whose width grows: ``"conv"``
            (1x1 projection, with a BN after it in a post-activation unit,
            none in a pre-activation one) or ``"zero_pad"`` (strided
            identity plus zero channels), :data:`SHORTCUT_PROJECTIONS`.
        preact_type: a pre-activation unit's BN-ReLU, :data:`PREACT_TYPES`;
            ``None``: ``"both_preact"`` where ``h`` is a projection or the
            width grows (HE: "the projection takes the pre-activated
            input"), else ``"branch"``.
        kernel_initializer: of every conv, see :func:`initializer`
            (default: fb.resnet.torch's fan-out MSRA normal).
        name: prefix of every layer of the unit, e.g. ``"conv3_block2_"``.
    """
    check_unit_args(unit, block, shortcut, gated, subsample=subsample, naming=naming,
                    conv_bias=conv_bias, stride_on=stride_on,
                    shortcut_projection=shortcut_projection, preact_type=preact_type,
                    kernel_initializer=kernel_initializer)
    spec = UNITS[unit]
    layout = BLOCKS[block]
    preact = unit in PREACT_UNITS
    out_filters = filters * (expansion if block == "bottleneck" else 1)
    in_filters = x.shape[channel_axis()]
    if shortcut in ("exclusive_gating", "shortcut_gating") and channel_axis() != -1:
        raise ValueError(f"shortcut={shortcut!r} gates over the last axis: build it with "
                         f"keras.config.set_image_data_format('channels_last')")
    if shortcut_projection == "zero_pad" and in_filters > out_filters and shortcut != "conv":
        raise ValueError(
            f"shortcut_projection='zero_pad' pads x with zero channels and cannot narrow "
            f"{in_filters} channels to {out_filters}; use shortcut_projection='conv'")
    widens = in_filters != out_filters
    project = (shortcut == "conv" or (widens and shortcut_projection == "conv")
               or (not widens and stride != 1 and subsample == "conv"))
    strided_conv = 1 if stride_on == "1x1" else next(
        i for i, (kernel, _) in enumerate(layout, start=1) if kernel == 3)
    if preact and preact_type is None:
        preact_type = "both_preact" if project or widens else "branch"

    def ops(t, which, tag):
        return _ops(t, spec[which], f"{name}{tag}", bn_momentum, bn_epsilon)

    def bias(next_ops):  # a bias right before a BN is redundant
        return conv_bias and next_ops[:1] != ("bn",)

    unit_input = x
    if preact and preact_type != "no_preact":
        x = ops(x, "pre", "preact")
    # h(x) takes the unit input, or its pre-activation where the BN-ReLU
    # comes before the split (fb preresnet.lua:65-67, resnet-pre-act.lua:64-66).
    source = x if preact_type == "both_preact" else unit_input
    if project:
        h = conv(source, out_filters, 1, stride, name=f"{name}0",
                 use_bias=bias(() if preact else ("bn",)),
                 kernel_initializer=kernel_initializer)
        if not preact:  # fb models/resnet.lua:33-34; none in preresnet.lua:33-34
            h = _ops(h, ("bn",), f"{name}0", bn_momentum, bn_epsilon)
    elif widens:
        h = ZeroPadShortcut(out_filters, stride, data_format=keras.config.image_data_format(),
                            name=f"{name}0_zero_pad")(source)
    elif stride != 1:
        h = keras.layers.MaxPooling2D(1, strides=stride, name=f"{name}0_pool")(source)
    else:
        h = source
    if shortcut == "dropout":
        h = ShortcutDropout(shortcut_dropout, name=f"{name}shortcut_dropout")(h)

    f = x
    for i, (kernel, width) in enumerate(layout, start=1):
        last = i == len(layout)
        if i > 1:
            if preact:
                f = ops(f, "pre", str(i - 1 if naming == "keras" else i))
            if dropout:
                f = keras.layers.Dropout(dropout, name=f"{name}{i}_dropout")(f)
        width = out_filters if width == "expansion" else filters
        next_ops = spec["last_post"] if last else spec["post"] + (spec["pre"] if preact else ())
        f = conv(f, width, kernel, stride if i == strided_conv else 1, name=f"{name}{i}",
                 use_bias=bias(next_ops), kernel_initializer=kernel_initializer)
        f = ops(f, "last_post" if last else "post", str(i))

    if gated:
        y = ResidualGate("residual", k_initial, name=f"{name}gate")([h, f])
    elif shortcut == "scaling":
        y = ScaledAdd(shortcut_scale, residual_scale, name=f"{name}add")([h, f])
    elif shortcut in ("exclusive_gating", "shortcut_gating"):
        form = "exclusive" if shortcut == "exclusive_gating" else "shortcut_only"
        y = ShortcutGate(form, gate_bias, name=f"{name}shortcut_gate")([h, f])
    else:
        ends_unit = naming == "keras" and not spec["after"]
        y = keras.layers.Add(name=f"{name}{'out' if ends_unit else 'add'}")([h, f])
    return ops(y, "after", "out")


def dense_layer(x, units, *, bn_momentum=0.99, name="layer_"):
    """GR's plain fully-connected layer: Dense -> BatchNorm -> ReLU ("Dot-BN-ReLU")."""
    x = keras.layers.Dense(units, name=f"{name}dense")(x)
    x = BatchNormalization(momentum=bn_momentum, name=f"{name}bn")(x)
    return keras.layers.Activation("relu", name=f"{name}relu")(x)


def dense_unit(
    x,
    units,
    *,
    residual=False,
    gated=False,
    k_initial=1.0,
    bn_momentum=0.99,
    name="block_",
):
    """One block of GR's MNIST nets.

    - ``residual=False, gated=False``: a plain layer (Dot-BN-ReLU).
    - ``residual=False, gated=True``: gated plain layer,
      ``u = g(k) f(x) + (1 - g(k)) x``.
    - ``residual=True``: two plain layers with an identity shortcut
      (post-activation, as GR's MNIST ResNets), ``u = f(x) + x``, or
      ``u = g(k) f(x) + x`` with ``gated=True`` (GResNet), where
      ``f(x) = ReLU(BN(W2 ReLU(BN(W1 x))))``: the sum comes after the second
      ReLU, as GR writes its residual layer ``u = g(k) f(x, W) + x`` with
      ``f`` made of Dot-BN-ReLU layers (no ReLU after the addition).

    ``bn_momentum`` defaults to Keras' own 0.99 (GR trained with Keras).
    """
    if not residual:
        f = dense_layer(x, units, bn_momentum=bn_momentum, name=name)
        if not gated:
            return f
        return ResidualGate("plain", k_initial, name=f"{name}gate")([x, f])
    f = x
    for i in (1, 2):
        f = dense_layer(f, units, bn_momentum=bn_momentum, name=f"{name}{i}_")
    if gated:
        return ResidualGate("residual", k_initial, name=f"{name}gate")([x, f])
    return keras.layers.Add(name=f"{name}add")([x, f])
