"""The residual units of HE and the fully-connected blocks of GR.

Units are built with the functional API (as Keras Applications do) so every
layer of a built model has a systematic name, ``{prefix}{i}_conv``,
``{prefix}gate``..., and a block can be found, inspected or cut out by its
name prefix.
"""

import dataclasses

import keras

from keras_gresnet._checks import check_choice, check_int, check_rate
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


@dataclasses.dataclass(frozen=True)
class UnitSpec:
    """Everything every residual unit of a net shares, checked once when the
    spec is made (``ValueError`` naming the argument): frozen, and plain
    JSON through :meth:`get_config` / :meth:`from_config`.

    What varies from unit to unit (its width, stride, ``preact_type`` and
    name) is :func:`residual_unit`'s own argument; :func:`keras_gresnet.zoo.resnet`
    makes one spec for all of a net's units. :data:`KERAS_RESNET_V2` is
    Keras Applications' ResNetV2 unit as a preset.

    Attributes:
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
        kernel_initializer: of every conv, see :func:`initializer`
            (default: fb.resnet.torch's fan-out MSRA normal).
    """

    unit: str = "preact"
    block: str = "basic"
    shortcut: str = "identity"
    gated: bool = False
    k_initial: float = 1.0
    dropout: float = 0.0
    expansion: int = 4
    shortcut_scale: float = 0.5
    residual_scale: float = 1.0
    gate_bias: float = -6.0
    shortcut_dropout: float = 0.5
    bn_momentum: float = 0.9
    bn_epsilon: float = 1e-5
    subsample: str = "conv"
    conv_bias: bool = False
    naming: str = "zoo"
    stride_on: str = "3x3"
    shortcut_projection: str = "conv"
    kernel_initializer: object = "msra_fan_out"

    def __post_init__(self):
        check_choice(self.unit, "unit", tuple(UNITS))
        check_choice(self.block, "block", tuple(BLOCKS))
        check_choice(self.shortcut, "shortcut", SHORTCUTS)
        check_choice(self.subsample, "subsample", SUBSAMPLES)
        check_choice(self.naming, "naming", NAMINGS)
        check_choice(self.stride_on, "stride_on", STRIDE_ONS)
        check_choice(self.shortcut_projection, "shortcut_projection", SHORTCUT_PROJECTIONS)
        if self.stride_on == "1x1" and self.block != "bottleneck":
            raise ValueError(
                f"stride_on='1x1' puts the stride on a bottleneck's first 1x1 conv; "
                f"block={self.block!r} has none: use stride_on='3x3'")
        initializer(self.kernel_initializer)
        for field in ("gated", "conv_bias"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"{field} must be True or False, got {getattr(self, field)!r}")
        if self.gated and self.shortcut not in GATEABLE_SHORTCUTS:
            raise ValueError(
                f"gated=True puts GR's gate on F and combines with shortcut in "
                f"{GATEABLE_SHORTCUTS}, got shortcut={self.shortcut!r}"
            )
        check_int(self.expansion, "expansion", 1)
        check_rate(self.dropout, "dropout")
        check_rate(self.shortcut_dropout, "shortcut_dropout")

    @property
    def preact(self):
        """Whether the unit is a pre-activation one (:data:`PREACT_UNITS`)."""
        return self.unit in PREACT_UNITS

    def out_filters(self, filters):
        """The output width of a unit of ``filters``: a bottleneck expands."""
        return filters * (self.expansion if self.block == "bottleneck" else 1)

    def get_config(self):
        """The spec as a JSON-ready dict (every field)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, config):
        """The spec of :meth:`get_config`'s dict, checked as a new one."""
        return cls(**config)

    @classmethod
    def partition(cls, arguments):
        """``(fields, rest)`` of the dict ``arguments``: the spec's fields
        among them, and the other arguments."""
        names = {f.name for f in dataclasses.fields(cls)}
        return ({k: v for k, v in arguments.items() if k in names},
                {k: v for k, v in arguments.items() if k not in names})


# Keras Applications' ResNetV2 unit (keras/src/applications/resnet.py,
# residual_block_v2): its subsampling by a 1x1 max-pool, biases, names,
# BatchNorm epsilon and momentum (Keras' defaults, as the source layers have
# them) and Conv2D's default initializer (the block gives none).
KERAS_RESNET_V2 = UnitSpec(
    unit="preact", block="bottleneck", subsample="pool", conv_bias=True, naming="keras",
    bn_epsilon=1.001e-5, bn_momentum=0.99, kernel_initializer="glorot_uniform")


def residual_unit(x, filters, spec=None, *, stride=1, preact_type=None, name="unit_",
                  **options):
    """One residual unit of HE (optionally with GR's gate), ``y = h(x) + F(x)``.

    Args:
        x: input tensor.
        filters: width of the unit's convs (a bottleneck's output has
            ``expansion * filters`` channels).
        spec: the :class:`UnitSpec` (arrangement, block, shortcut, gate,
            BatchNorm, naming...), checked once where it was made; or leave
            it out and give its fields as keyword ``options``
            (``unit="original", block="bottleneck"``...).
        stride: stride of the unit (on the conv ``spec.stride_on`` names).
        preact_type: a pre-activation unit's BN-ReLU, :data:`PREACT_TYPES`;
            ``None``: ``"both_preact"`` where ``h`` is a projection or the
            width grows (HE: "the projection takes the pre-activated
            input"), else ``"branch"``.
        name: prefix of every layer of the unit, e.g. ``"conv3_block2_"``.
    """
    if spec is None:
        spec = UnitSpec(**options)
    elif options:
        raise TypeError(f"residual_unit() takes a spec or its fields, not both: got spec and "
                        f"{sorted(options)}")
    if preact_type is not None:
        check_choice(preact_type, "preact_type", PREACT_TYPES)
        if not spec.preact:
            raise ValueError(
                f"preact_type places a pre-activation unit's BN-ReLU and needs unit in "
                f"{PREACT_UNITS}, got unit={spec.unit!r}, preact_type={preact_type!r}")
    arrangement = UNITS[spec.unit]
    layout = BLOCKS[spec.block]
    preact = spec.preact
    out_filters = spec.out_filters(filters)
    in_filters = x.shape[channel_axis()]
    if spec.shortcut in ("exclusive_gating", "shortcut_gating") and channel_axis() != -1:
        raise ValueError(f"shortcut={spec.shortcut!r} gates over the last axis: build it "
                         f"with keras.config.set_image_data_format('channels_last')")
    if (spec.shortcut_projection == "zero_pad" and in_filters > out_filters
            and spec.shortcut != "conv"):
        raise ValueError(
            f"shortcut_projection='zero_pad' pads x with zero channels and cannot narrow "
            f"{in_filters} channels to {out_filters}; use shortcut_projection='conv'")
    widens = in_filters != out_filters
    project = (spec.shortcut == "conv" or (widens and spec.shortcut_projection == "conv")
               or (not widens and stride != 1 and spec.subsample == "conv"))
    strided_conv = 1 if spec.stride_on == "1x1" else next(
        i for i, (kernel, _) in enumerate(layout, start=1) if kernel == 3)
    if preact and preact_type is None:
        preact_type = "both_preact" if project or widens else "branch"

    def ops(t, which, tag):
        return _ops(t, arrangement[which], f"{name}{tag}", spec.bn_momentum, spec.bn_epsilon)

    def bias(next_ops):  # a bias right before a BN is redundant
        return spec.conv_bias and next_ops[:1] != ("bn",)

    unit_input = x
    if preact and preact_type != "no_preact":
        x = ops(x, "pre", "preact")
    # h(x) takes the unit input, or its pre-activation where the BN-ReLU
    # comes before the split (fb preresnet.lua:65-67, resnet-pre-act.lua:64-66).
    source = x if preact_type == "both_preact" else unit_input
    h = _shortcut(source, spec, out_filters, stride, project, widens, name)

    f = x
    for i, (kernel, width) in enumerate(layout, start=1):
        last = i == len(layout)
        if i > 1:
            if preact:
                f = ops(f, "pre", str(i - 1 if spec.naming == "keras" else i))
            if spec.dropout:
                f = keras.layers.Dropout(spec.dropout, name=f"{name}{i}_dropout")(f)
        width = out_filters if width == "expansion" else filters
        next_ops = (arrangement["last_post"] if last
                    else arrangement["post"] + (arrangement["pre"] if preact else ()))
        f = conv(f, width, kernel, stride if i == strided_conv else 1, name=f"{name}{i}",
                 use_bias=bias(next_ops), kernel_initializer=spec.kernel_initializer)
        f = ops(f, "last_post" if last else "post", str(i))

    y = _merge(h, f, spec, name)
    return ops(y, "after", "out")


def _shortcut(source, spec, out_filters, stride, project, widens, name):
    """``h(x)`` of a unit: ``source`` as it is, or a 1x1 projection (a BN
    after it in a post-activation unit), zero channels padded on, a 1x1
    max-pool with the stride; then the ``"dropout"`` shortcut's dropout."""
    if project:
        h = conv(source, out_filters, 1, stride, name=f"{name}0",
                 use_bias=spec.conv_bias and spec.preact,  # no bias before a BN
                 kernel_initializer=spec.kernel_initializer)
        if not spec.preact:  # fb models/resnet.lua:33-34; none in preresnet.lua:33-34
            h = _ops(h, ("bn",), f"{name}0", spec.bn_momentum, spec.bn_epsilon)
    elif widens:
        h = ZeroPadShortcut(out_filters, stride, data_format=keras.config.image_data_format(),
                            name=f"{name}0_zero_pad")(source)
    elif stride != 1:
        h = keras.layers.MaxPooling2D(1, strides=stride, name=f"{name}0_pool")(source)
    else:
        h = source
    if spec.shortcut == "dropout":
        h = ShortcutDropout(spec.shortcut_dropout, name=f"{name}shortcut_dropout")(h)
    return h


def _merge(h, f, spec, name):
    """``h(x)`` and ``F(x)`` merged: GR's gate, HE Table 1's scaling or
    shortcut gating, or a sum."""
    if spec.gated:
        y = ResidualGate("residual", spec.k_initial, name=f"{name}gate")([h, f])
    elif spec.shortcut == "scaling":
        y = ScaledAdd(spec.shortcut_scale, spec.residual_scale, name=f"{name}add")([h, f])
    elif spec.shortcut in ("exclusive_gating", "shortcut_gating"):
        form = "exclusive" if spec.shortcut == "exclusive_gating" else "shortcut_only"
        y = ShortcutGate(form, spec.gate_bias, name=f"{name}shortcut_gate")([h, f])
    else:
        ends_unit = spec.naming == "keras" and not UNITS[spec.unit]["after"]
        y = keras.layers.Add(name=f"{name}{'out' if ends_unit else 'add'}")([h, f])
    return y


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
