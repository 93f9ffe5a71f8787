"""Convolutional residual nets of HE, GR and WRN: one generic builder
(:func:`resnet`), the CIFAR, Wide and ImageNet families over it, and one
function per paper model (``preact_resnet164``, ``gresnet_cifar``...) that
fixes that family's configuration.

Layer names follow Keras Applications: ``conv1_conv`` (stem),
``conv{stage}_block{b}_{i}_conv``, ``conv{stage}_block{b}_gate``, ``post_bn``,
``avg_pool``, ``predictions``; stages start at 2. With
``resnet_imagenet(layout="keras")`` every weighted layer has the name of its
counterpart in Keras' ResNetV2.
"""

import dataclasses

import keras

from keras_gresnet._checks import check_choice, check_int
from keras_gresnet.layers import (
    BLOCKS,
    BatchNormalization,
    ZooModel,
    KERAS_RESNET_V2,
    UnitSpec,
    channel_axis,
    conv,
    residual_unit,
)
from keras_gresnet.zoo.applications import (
    check_common, check_preprocessing, check_size, head, load_weights,
    model_input,
)
from keras_gresnet.papers import GR_CIFAR10_N5_ERROR
from keras_gresnet.zoo.builders import paper, register_model, untrained

CIFAR_WIDTHS = (16, 32, 64)  # HE / GR CIFAR nets
IMAGENET_WIDTHS = (64, 128, 256, 512)
# Weighted layers per unit, for depth = layers_per_unit * 3n + 2 (HE).
CIFAR_LAYERS_PER_UNIT = {"basic": 2, "bottleneck": 3, "single": 1}
IMAGENET_STAGES = {  # HE: bottleneck units per stage
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
    200: (3, 24, 36, 3),
}
STEMS = ("cifar", "imagenet")
# Which unit of a stage takes its stride: the first (HE), or the last, with
# no stride in the last stage (Keras ResNetV2, after TF-slim).
STRIDE_POSITIONS = ("first", "last")
# Which pre-activation units put their BN-ReLU before the split, so that
# h(x) takes the activated x ("both_preact"; the others start F with it):
# the first unit of every stage, stage 1 included (fb.resnet.torch
# models/preresnet.lua:114-123, the base of Keras ResNetV2's block1), or the
# units whose width changes (HE's CIFAR code, resnet-pre-act.lua:38, 62-66;
# WRN, wide-residual-networks models/wide-resnet.lua:52-54).
BOTH_PREACTS = ("first", "width_change")
# Layouts of the ImageNet net: the unit (a :class:`UnitSpec` preset) and the
# net's own :func:`resnet` arguments. "he" is HE's (fb.resnet.torch's);
# "keras" is Keras Applications' ResNetV2 (``keras.applications.ResNet50V2``...),
# layer names included, so that its weights load by name
# (:mod:`keras_gresnet.zoo.keras_applications`).
IMAGENET_LAYOUTS = {
    "he": (UnitSpec(block="bottleneck"), {}),
    "keras": (KERAS_RESNET_V2, dict(
        stem_bn=False,  # the first unit's preact_bn normalises the pooled stem
        stride_position="last",
    )),
}


def resnet(stage_sizes, widths, spec=None, *, stem="cifar", stem_filters=16,
           stride_position="first", stem_bn=None, both_preact="first", include_top=True,
           weights=None, input_tensor=None, input_shape=None, pooling=None, classes=10,
           classifier_activation="softmax", include_preprocessing=False, name="resnet",
           **unit_options):
    """The generic residual net behind every convolutional zoo model.

    Args:
        stage_sizes: units per stage, e.g. ``(18, 18, 18)`` for ResNet-110.
        widths: conv width of each stage (every stage but one halves the
            resolution, see ``stride_position``).
        spec: the :class:`~keras_gresnet.layers.UnitSpec` of every unit
            (checked when it was made); or leave it out and give its fields
            as keyword ``unit_options``.
        stem: ``"cifar"`` (3x3 conv, stride 1) or ``"imagenet"`` (7x7/2 conv +
            3x3/2 max-pool).
        stem_filters: width of the stem conv.
        stride_position: ``"first"`` (HE: the first unit of every stage but
            the first takes the stride) or ``"last"`` (Keras ResNetV2: the
            last unit of every stage but the last).
        stem_bn: BN-ReLU after the stem conv. ``None``: HE's choice (always,
            but a CIFAR pre-activation net, whose first unit normalises its
            own input); Keras ResNetV2: ``False``. Where a pre-activation
            net's stem has it, the first unit has no BN-ReLU of its own
            (``preact_type="no_preact"``, fb.resnet.torch's ImageNet nets).
        both_preact: which pre-activation units apply their BN-ReLU before
            the split (``h`` takes the activated input): ``"first"`` (the
            first unit of every stage, fb.resnet.torch) or
            ``"width_change"`` (units whose width changes, HE's CIFAR
            bottleneck code and WRN), :data:`BOTH_PREACTS`.
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in Keras Applications; ``weights`` is
            ``None``, a ``.keras`` / ``.weights.h5`` path or a preset folder
            (the named builders also take published names,
            :mod:`keras_gresnet.weights`).
        include_preprocessing: put the training pipeline's pixel
            normalisation in front of the net, so that it takes raw pixels
            (0..255): ``False`` (the default), ``True`` (the statistics of
            the published ``weights``) or ``dict(method=, mean=, std=)``
            (:class:`keras_gresnet.layers.PixelNormalization`).
        **unit_options: the fields of the :class:`~keras_gresnet.layers.UnitSpec`
            (``unit, block, shortcut, gated, k_initial, dropout, expansion,
            ...``) when no ``spec`` is given, at its defaults when left out.
            Each unit's ``preact_type`` follows from ``both_preact`` and
            ``stem_bn``; the spec's ``kernel_initializer`` also initialises
            the stem conv, its ``conv_bias`` gives it a bias when no batch
            norm follows it, and its BatchNorm settings are the stem's and
            the last BN's too.
    """
    builder = name  # the messages name the model being built
    if spec is None:
        spec = UnitSpec(**unit_options)  # checked once, here
    elif unit_options:
        raise TypeError(f"resnet() takes a spec or its fields, not both: got spec and "
                        f"{sorted(unit_options)}")
    elif not isinstance(spec, UnitSpec):
        raise ValueError(f"spec must be a keras_gresnet.layers.UnitSpec, got {spec!r}")
    out_widths = _check_net(stage_sizes, widths, spec, stem, stem_filters, stride_position,
                            stem_bn, both_preact)
    # Weights per unit: basic 2 3x3 convs (18 w^2); bottleneck 1x1, 3x3, 1x1
    # with a width expansion e ((2 e + 9) w^2).
    per_unit = 18 if spec.block != "bottleneck" else 2 * spec.expansion + 9
    check_size(builder, sum(stage_sizes),
               sum(n * per_unit * w**2 for n, w in zip(stage_sizes, widths)),
               "the stage sizes (n or depth) and widths (widen_factor)")
    downsamplings = len(stage_sizes) - 1 + (2 if stem == "imagenet" else 0)
    input_shape = check_common(
        builder, include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        default_shape=(224, 224, 3) if stem == "imagenet" else (32, 32, 3),
        head_inputs=out_widths[-1],
        min_size=2**downsamplings)
    preprocessing = check_preprocessing(builder, include_preprocessing, weights, input_shape)
    if stem_bn is None:
        # A pre-activation net's first unit normalises its own input; HE's
        # ImageNet stem keeps BN-ReLU before the max-pool in every variant.
        stem_bn = not spec.preact or stem == "imagenet"
    inputs, x = model_input(input_tensor, input_shape, preprocessing)
    x = _stem(x, stem, stem_filters, stem_bn, spec)
    x = _stages(x, stage_sizes, widths, out_widths, spec, stride_position, both_preact,
                stem_bn)
    if spec.preact:  # HE: an extra BN-ReLU after the last pre-activation unit
        x = BatchNormalization(**_bn(spec), name="post_bn")(x)
        x = keras.layers.Activation("relu", name="post_relu")(x)
    x = head(x, include_top=include_top, pooling=pooling, classes=classes,
             classifier_activation=classifier_activation)
    model = ZooModel(inputs, x, name=name)
    return load_weights(model, weights, include_top=include_top, classes=classes)


def _check_net(stage_sizes, widths, spec, stem, stem_filters, stride_position, stem_bn,
               both_preact):
    """Check :func:`resnet`'s own arguments (its units' are ``spec``'s,
    checked already); return the stages' output widths."""
    if not isinstance(stage_sizes, (list, tuple)) or not stage_sizes:
        raise ValueError(f"stage_sizes must be a non-empty tuple of ints, got {stage_sizes!r}")
    if not isinstance(widths, (list, tuple)) or len(widths) != len(stage_sizes):
        raise ValueError(
            f"widths must give one width per stage ({len(stage_sizes)}), got {widths!r}"
        )
    for n in stage_sizes:
        check_int(n, "n (units per stage)", 1)
    for w in widths:
        check_int(w, "widths", 1)
    check_int(stem_filters, "stem_filters", 1)
    check_choice(stem, "stem", STEMS)
    check_choice(stride_position, "stride_position", STRIDE_POSITIONS)
    check_choice(both_preact, "both_preact", BOTH_PREACTS)
    out_widths = [spec.out_filters(w) for w in widths]
    if (spec.shortcut_projection == "zero_pad" and spec.shortcut != "conv"
            and any(b < a for a, b in zip([stem_filters] + out_widths, out_widths))):
        raise ValueError(
            f"shortcut_projection='zero_pad' pads x with zero channels, so the widths "
            f"may not shrink from the stem's {stem_filters} on, got output widths "
            f"{tuple(out_widths)}; use shortcut_projection='conv'")
    if stem_bn is not None and not isinstance(stem_bn, bool):
        raise ValueError(f"stem_bn must be None, True or False, got {stem_bn!r}")
    return out_widths


def _bn(spec):
    return dict(momentum=spec.bn_momentum, epsilon=spec.bn_epsilon, axis=channel_axis())


def _stem(x, stem, stem_filters, stem_bn, spec):
    """The stem: a 3x3 conv (CIFAR) or HE's 7x7/2 conv and 3x3/2 max-pool
    (ImageNet), with BN-ReLU where ``stem_bn``."""
    stem_bias = spec.conv_bias and not stem_bn
    init = spec.kernel_initializer
    if stem == "imagenet":
        x = conv(x, stem_filters, 7, stride=2, name="conv1", use_bias=stem_bias,
                 kernel_initializer=init)
    else:
        x = conv(x, stem_filters, 3, name="conv1", use_bias=stem_bias, kernel_initializer=init)
    if stem_bn:
        x = BatchNormalization(**_bn(spec), name="conv1_bn")(x)
        x = keras.layers.Activation("relu", name="conv1_relu")(x)
    if stem == "imagenet":
        x = keras.layers.ZeroPadding2D(1, name="pool1_pad")(x)
        x = keras.layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    return x


def _stages(x, stage_sizes, widths, out_widths, spec, stride_position, both_preact, stem_bn):
    """The residual units, stage after stage, each unit's stride and
    ``preact_type`` placed as :func:`resnet`'s docstring says."""
    last_stage = len(stage_sizes) - 1
    for s, (n, width) in enumerate(zip(stage_sizes, widths)):
        for b in range(n):
            if stride_position == "first":
                strided = b == 0 and s > 0
            else:
                strided = b == n - 1 and s < last_stage
            preact_type = None
            if spec.preact:
                changes = x.shape[channel_axis()] != out_widths[s]
                shared = b == 0 if both_preact == "first" else changes
                preact_type = "both_preact" if shared else "branch"
                if s == 0 and b == 0 and stem_bn:
                    # fb preresnet.lua:120, 146-150: after the stem's BN-ReLU
                    # (and max-pool) the first unit has none of its own.
                    preact_type = "no_preact"
            x = residual_unit(x, width, spec, stride=2 if strided else 1,
                              preact_type=preact_type, name=f"conv{s + 2}_block{b + 1}_")
    return x


def _depth_to_n(depth, layers_per_unit, extra, argument="depth"):
    depth = check_int(depth, argument, layers_per_unit + extra)
    if (depth - extra) % (3 * layers_per_unit):
        raise ValueError(
            f"{argument} must be {3 * layers_per_unit}n+{extra} for this block, "
            f"e.g. {3 * layers_per_unit * 5 + extra}, got {depth}"
        )
    return (depth - extra) // (3 * layers_per_unit)


def _resolve_n(n, depth, layers_per_unit, extra, default):
    if depth is None:
        return check_int(default if n is None else n, "n", 1)
    from_depth = _depth_to_n(depth, layers_per_unit, extra)
    if n is not None and check_int(n, "n", 1) != from_depth:
        raise ValueError(f"n={n} and depth={depth} disagree (depth {depth} means n={from_depth})")
    return from_depth




# ------------------------------------------------------------------ CIFAR


def _cifar(*, n=None, depth=None, block="basic", widths=CIFAR_WIDTHS, stride_on=None,
           shortcut_projection=None, both_preact=None, **arguments):
    """HE's CIFAR net: 3 stages of ``n`` units, ``depth = layers * 3n + 2``;
    the ``None`` options at the reference code's choice for ``block``."""
    check_choice(block, "block", tuple(BLOCKS))
    n = _resolve_n(n, depth, CIFAR_LAYERS_PER_UNIT[block], 2, default=5)
    bottleneck = block == "bottleneck"  # HE's resnet-pre-act.lua, else fb.resnet.torch
    if stride_on is None:  # resnet-pre-act.lua:70; fb has no CIFAR bottleneck
        stride_on = "1x1" if bottleneck else "3x3"
    if shortcut_projection is None:  # resnet-pre-act.lua:83; fb opts.lua:78-85 (type A)
        shortcut_projection = "conv" if bottleneck else "zero_pad"
    if both_preact is None:  # resnet-pre-act.lua:38, 62-66; fb preresnet.lua:119-123
        both_preact = "width_change" if bottleneck else "first"
    arguments.update(stride_on=stride_on, shortcut_projection=shortcut_projection,
                     both_preact=both_preact)
    arguments.setdefault("stem_filters", widths[0] if isinstance(widths, (list, tuple))
                         and widths else CIFAR_WIDTHS[0])
    return resnet((n, n, n), widths, stem="cifar", block=block, **arguments)


@register_model(
    configs=[
        dict(depth=110, unit="original"),  # HE Tables 1-3
        dict(depth=110, block="single", unit="original"),  # HE Table 3, 1-layer skip
        dict(depth=110, block="single"),
    ],
    recipe="preact_cifar", dataset="cifar10",
    results=[paper("GR Table 3, n=5, 32 layers", GR_CIFAR10_N5_ERROR["resnet"], "cifar10", n=5)],
    pretrained=[untrained("cifar10", n=5, preprocessing="mean")],
    tiny=dict(n=2, input_shape=(16, 16, 3)),
)
def resnet_cifar(n=None, *, depth=None, unit="preact", block="basic", shortcut="identity",
                 gated=False, widths=CIFAR_WIDTHS, k_initial=1.0, dropout=0.0, expansion=4,
                 shortcut_scale=0.5, residual_scale=1.0, gate_bias=-6.0, shortcut_dropout=0.5,
                 bn_momentum=0.9, bn_epsilon=1e-5, subsample="conv", conv_bias=False,
                 naming="zoo", stride_position="first", stem_bn=None, stride_on=None,
                 shortcut_projection=None, both_preact=None,
                 kernel_initializer="msra_fan_out", include_top=True,
                 weights=None, input_tensor=None, input_shape=None, pooling=None, classes=10,
                 classifier_activation="softmax", include_preprocessing=False,
                 name="resnet_cifar"):
    """CIFAR residual net of HE and GR, every HE CIFAR variant an argument.

    3 stages of ``n`` units, widths 16/32/64.

    Depth is ``6n+2`` (basic), ``9n+2`` (bottleneck) or ``3n+2`` (single,
    HE's 1-layer skip); give ``n`` or ``depth``. Default: GR's ``n=5``.

    Args:
        n: units per stage. depth: total weighted layers (alternative to n).
        unit: ``"preact"`` (full pre-activation, HE's best) or any HE Table 2
            arrangement: ``"original"``, ``"bn_after_add"``,
            ``"relu_before_add"``, ``"relu_preact"``.
        block: ``"basic"``, ``"bottleneck"`` or ``"single"``.
        shortcut: HE Table 1 kind: ``"identity"``, ``"scaling"``,
            ``"exclusive_gating"``, ``"shortcut_gating"``, ``"conv"``,
            ``"dropout"``.
        gated: GR's scalar gate on every unit (GResNet).
        widths: stage widths.
        stride_on: ``"3x3"`` or ``"1x1"``; ``None``: the first 1x1 of a
            bottleneck (HE's CIFAR code), else the 3x3.
        shortcut_projection: ``h`` where the width grows, ``"zero_pad"``
            or ``"conv"``; ``None``: ``"conv"`` for a bottleneck (HE's CIFAR
            code), else ``"zero_pad"`` (fb.resnet.torch's CIFAR default).
        both_preact: ``"first"`` or ``"width_change"``; ``None``:
            ``"width_change"`` for a bottleneck (HE's CIFAR code), else
            ``"first"`` (fb.resnet.torch).
        kernel_initializer: of every conv (fb.resnet.torch's fan-out MSRA
            normal), see :func:`keras_gresnet.layers.initializer`.
        k_initial, dropout, expansion, shortcut_scale, residual_scale,
        gate_bias, shortcut_dropout, bn_momentum, bn_epsilon, subsample,
        conv_bias, naming, stride_position, stem_bn: as in :func:`resnet`.
        include_top, weights, input_tensor, input_shape, pooling, classes,
        classifier_activation, name: as in Keras Applications; ``weights``
            also takes a published name or its dataset (``"cifar10"``).
    """
    return _cifar(n=n, depth=depth, unit=unit, block=block, shortcut=shortcut, gated=gated,
        widths=widths, k_initial=k_initial, dropout=dropout, expansion=expansion,
        shortcut_scale=shortcut_scale, residual_scale=residual_scale, gate_bias=gate_bias,
        shortcut_dropout=shortcut_dropout, bn_momentum=bn_momentum, bn_epsilon=bn_epsilon,
        subsample=subsample, conv_bias=conv_bias, naming=naming,
        stride_position=stride_position, stem_bn=stem_bn, stride_on=stride_on,
        shortcut_projection=shortcut_projection, both_preact=both_preact,
        kernel_initializer=kernel_initializer, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_cifar",
    results=[paper("GR Table 3, n=5, 32 layers", GR_CIFAR10_N5_ERROR["gresnet"], "cifar10", n=5),
             paper("GR Table 3, n=5, 32 layers, with k decay",
                   GR_CIFAR10_N5_ERROR["gresnet_k_decay"], "cifar10",
                   recipe_options={"k_decay": True}, n=5)],
    pretrained=[untrained("cifar10", n=5, preprocessing="mean")],
    tiny=dict(n=2, input_shape=(16, 16, 3)),
)
def gresnet_cifar(n=5, *, depth=None, block="basic", shortcut="identity",
                  widths=CIFAR_WIDTHS, k_initial=1.0, dropout=0.0, bn_momentum=0.9,
                  include_top=True, weights=None, input_tensor=None, input_shape=None,
                  pooling=None, classes=10, classifier_activation="softmax",
                  include_preprocessing=False, name="gresnet_cifar"):
    """GR's CIFAR GResNet (GR Table 3: n=5, 32 layers, 15 gates).

    A full pre-activation ResNet with a scalar gate ``k`` on every unit.

    Arguments as :func:`resnet_cifar` (``depth = 6n + 2``).
    """
    return _cifar(unit="preact", gated=True, n=n, depth=depth, block=block, shortcut=shortcut,
        widths=widths, k_initial=k_initial, dropout=dropout, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)



# HE Tables 2-3 (CIFAR): the paper's named nets.


@register_model(
    family="resnet_cifar", recipe="he_cifar",
    results=[paper("HE Table 2", 6.37, "cifar10")],
    pretrained=[untrained("cifar10", preprocessing="meanstd", recipe="preact_cifar_he")],
    tiny=dict(input_shape=(8, 8, 3)),
)
def preact_resnet110(*, dropout=0.0, bn_momentum=0.9, include_top=True, weights=None,
                     input_tensor=None, input_shape=None, pooling=None, classes=10,
                     classifier_activation="softmax", include_preprocessing=False,
                     name="preact_resnet110"):
    """ResNet-110, full pre-activation (HE Table 2).

    Arguments as :func:`resnet_cifar`, which builds the other variants.
    """
    return _cifar(depth=110, unit="preact", block="basic", dropout=dropout,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_cifar", recipe="he_cifar",
    results=[paper("HE Table 2", 5.46, "cifar10"), paper("HE Table 3", 24.33, "cifar100")],
    pretrained=[untrained("cifar10", preprocessing="meanstd", recipe="preact_cifar_he")],
    tiny=dict(input_shape=(8, 8, 3)),
)
def preact_resnet164(*, dropout=0.0, bn_momentum=0.9, include_top=True, weights=None,
                     input_tensor=None, input_shape=None, pooling=None, classes=10,
                     classifier_activation="softmax", include_preprocessing=False,
                     name="preact_resnet164"):
    """ResNet-164, bottleneck, full pre-activation (HE Tables 2-3).

    Arguments as :func:`resnet_cifar`.
    """
    return _cifar(depth=164, unit="preact", block="bottleneck", dropout=dropout,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_cifar", recipe="he_cifar",
    results=[paper("HE Table 3", 4.92, "cifar10"), paper("HE Table 3", 22.71, "cifar100")],
    pretrained=[untrained("cifar10", preprocessing="meanstd", recipe="preact_cifar_he")],
    tiny=dict(input_shape=(8, 8, 3)),
)
def preact_resnet1001(*, dropout=0.0, bn_momentum=0.9, include_top=True, weights=None,
                      input_tensor=None, input_shape=None, pooling=None, classes=10,
                      classifier_activation="softmax", include_preprocessing=False,
                      name="preact_resnet1001"):
    """ResNet-1001, bottleneck, full pre-activation (HE Table 3).

    Arguments as :func:`resnet_cifar`.
    """
    return _cifar(depth=1001, unit="preact", block="bottleneck", dropout=dropout,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_cifar", recipe="he_cifar",
    results=[paper("HE Table 2", 6.61, "cifar10")],
    tiny=dict(input_shape=(8, 8, 3)),
)
def resnet110(*, dropout=0.0, bn_momentum=0.9, include_top=True, weights=None,
              input_tensor=None, input_shape=None, pooling=None, classes=10,
              classifier_activation="softmax", include_preprocessing=False,
              name="resnet110"):
    """ResNet-110, original (post-activation) unit (HE Tables 1-2).

    Arguments as :func:`resnet_cifar`.
    """
    return _cifar(depth=110, unit="original", block="basic", dropout=dropout,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_cifar", recipe="he_cifar",
    results=[paper("HE Table 2", 5.93, "cifar10"), paper("HE Table 3", 25.16, "cifar100")],
    tiny=dict(input_shape=(8, 8, 3)),
)
def resnet164(*, dropout=0.0, bn_momentum=0.9, include_top=True, weights=None,
              input_tensor=None, input_shape=None, pooling=None, classes=10,
              classifier_activation="softmax", include_preprocessing=False,
              name="resnet164"):
    """ResNet-164, bottleneck, original unit (HE Table 3).

    Arguments as :func:`resnet_cifar`.
    """
    return _cifar(depth=164, unit="original", block="bottleneck", dropout=dropout,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_cifar", recipe="he_cifar",
    results=[paper("HE Table 3", 7.61, "cifar10"), paper("HE Table 3", 27.82, "cifar100")],
    tiny=dict(input_shape=(8, 8, 3)),
)
def resnet1001(*, dropout=0.0, bn_momentum=0.9, include_top=True, weights=None,
               input_tensor=None, input_shape=None, pooling=None, classes=10,
               classifier_activation="softmax", include_preprocessing=False,
               name="resnet1001"):
    """ResNet-1001, bottleneck, original unit (HE Table 3).

    Arguments as :func:`resnet_cifar`.
    """
    return _cifar(depth=1001, unit="original", block="bottleneck", dropout=dropout,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


# ------------------------------------------------------------------- Wide


def _wide(*, n=None, widen_factor=10, depth=None, **arguments):
    """WRN-d-k: depth ``6n+4``, widths 16k/32k/64k, pre-activation basic units."""
    check_int(widen_factor, "widen_factor", 1)
    n = _resolve_n(n, depth, 2, 4, default=4)
    # WRN's code: projections where the width changes, with the BN-ReLU
    # before the split there (models/wide-resnet.lua:52-54, 65-67).
    return resnet((n, n, n), tuple(w * widen_factor for w in CIFAR_WIDTHS), stem="cifar",
                  stem_filters=CIFAR_WIDTHS[0], unit="preact", block="basic",
                  shortcut_projection="conv", both_preact="width_change", **arguments)


@register_model(
    recipe="wrn_cifar", dataset="cifar10",
    results=[paper("GR Tables 3-4 (WRN-28-10)", 3.89, "cifar10", n=4, widen_factor=10, dropout=0.3),
             paper("GR Table 4 (WRN-28-10)", 18.85, "cifar100", n=4, widen_factor=10, dropout=0.3)],
    tiny=dict(n=2, widen_factor=1, input_shape=(16, 16, 3)),
)
def wide_resnet(n=None, widen_factor=10, dropout=0.3, *, depth=None, gated=False,
                k_initial=1.0, bn_momentum=0.9, kernel_initializer="msra_fan_in",
                include_top=True, weights=None,
                input_tensor=None, input_shape=None, pooling=None, classes=10,
                classifier_activation="softmax", include_preprocessing=False,
                name="wide_resnet"):
    """Wide ResNet WRN-d-k (WRN; GR Tables 3-4).

    Depth ``6n+4``, widths 16k/32k/64k, full pre-activation basic units,
    dropout between the convs.

    Default: WRN-28-10 with dropout 0.3 (n=4).

    Args:
        n: units per stage. depth: alternative to n (``6n+4``).
        widen_factor: ``k``.
        dropout: rate between the two convs of each unit.
        gated: GR's gate on every unit (:func:`wide_gresnet`).
        kernel_initializer: of every conv; WRN's ``MSRinit`` is fan-in
            (``"msra_fan_in"``), see :func:`keras_gresnet.layers.initializer`.
        k_initial, bn_momentum, and the Keras Applications arguments: as in
            :func:`resnet_cifar`.
    """
    return _wide(n=n, widen_factor=widen_factor, dropout=dropout, depth=depth, gated=gated,
        k_initial=k_initial, bn_momentum=bn_momentum, kernel_initializer=kernel_initializer,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="wide_resnet",
    results=[paper("GR Tables 3-4", 3.65, "cifar10", n=4, widen_factor=10, dropout=0.3),
             paper("GR Tables 3-4", 18.27, "cifar100", n=4, widen_factor=10, dropout=0.3)],
    pretrained=[untrained(dataset, name=f"wide_gresnet28_10_{dataset}", n=4, widen_factor=10,
                          preprocessing="meanstd") for dataset in ("cifar10", "cifar100")],
    tiny=dict(n=2, widen_factor=1, input_shape=(16, 16, 3)),
)
def wide_gresnet(n=None, widen_factor=10, dropout=0.3, *, depth=None, k_initial=1.0,
                 bn_momentum=0.9, kernel_initializer="msra_fan_in", include_top=True, weights=None, input_tensor=None,
                 input_shape=None, pooling=None, classes=10, classifier_activation="softmax",
                 include_preprocessing=False, name="wide_gresnet"):
    """Wide GResNet (GR Tables 3-4): WRN-28-10 with a gate on every unit.

    Arguments as :func:`wide_resnet`.
    """
    return _wide(gated=True, n=n, widen_factor=widen_factor, dropout=dropout, depth=depth,
        k_initial=k_initial, bn_momentum=bn_momentum, kernel_initializer=kernel_initializer,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


# --------------------------------------------------------------- ImageNet


def _imagenet(*, depth=152, unit="preact", layout="he", bn_momentum=None, **arguments):
    """HE's ImageNet bottleneck net in one of :data:`IMAGENET_LAYOUTS`."""
    if depth not in IMAGENET_STAGES:
        raise ValueError(
            f"depth must be one of {tuple(IMAGENET_STAGES)} for ImageNet ResNets, got {depth!r}"
        )
    check_choice(layout, "layout", tuple(IMAGENET_LAYOUTS))
    if layout == "keras" and unit != "preact":
        raise ValueError(
            f"layout='keras' is Keras' ResNetV2, a full pre-activation net: it takes "
            f"unit='preact', got unit={unit!r}"
        )
    preset, net = IMAGENET_LAYOUTS[layout]
    fields, rest = UnitSpec.partition(arguments)
    if bn_momentum is not None:  # None: the layout's
        fields["bn_momentum"] = bn_momentum
    spec = dataclasses.replace(preset, unit=unit, **fields)
    return resnet(IMAGENET_STAGES[depth], IMAGENET_WIDTHS, spec, stem="imagenet",
                  stem_filters=64, **net, **rest)


@register_model(configs=[dict(depth=d) for d in IMAGENET_STAGES], recipe="he_imagenet",
                dataset="imagenet2012", tiny=dict(depth=50, input_shape=(32, 32, 3)))
def resnet_imagenet(depth=152, *, unit="preact", gated=False, layout="he", k_initial=1.0,
                    bn_momentum=None, include_top=True, weights=None, input_tensor=None,
                    input_shape=None, pooling=None, classes=1000,
                    classifier_activation="softmax", include_preprocessing=False,
                    name="resnet_imagenet"):
    """ImageNet bottleneck ResNet of HE, every depth and unit an argument.

    7x7/2 stem + 3x3/2 max-pool, four stages of widths 64/128/256/512 (x4
    expansion), 224x224 inputs.

    Args:
        depth: 50, 101, 152 (units 3-8-36-3) or 200 (3-24-36-3).
        unit: HE Table 2 arrangement (``"preact"`` or ``"original"``...).
        gated: GR's gate on every unit.
        layout: ``"he"`` (fb.resnet.torch, HE's code) or ``"keras"``: Keras
            Applications' ResNetV2 (``keras.applications.ResNet50V2``...,
            full pre-activation), layer names included, so that its weights
            load by name (:func:`keras_gresnet.zoo.from_keras_applications`).
            A layout is a :class:`~keras_gresnet.layers.UnitSpec` preset and
            :func:`resnet` arguments (:data:`IMAGENET_LAYOUTS`).
        bn_momentum: BatchNorm momentum; ``None``: the layout's (HE 0.9,
            Keras 0.99).
        k_initial and the Keras Applications arguments: as in
            :func:`resnet_cifar` (``classes=1000``).
    """
    return _imagenet(depth=depth, unit=unit, gated=gated, layout=layout, k_initial=k_initial,
        bn_momentum=bn_momentum, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)



# HE's ImageNet nets (pre-activation and original units) and GR's gate on them.
_HE_IMAGENET = "HE, single-crop top-1 at a 320 crop"


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def preact_resnet50(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
                    input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
                    include_preprocessing=False, name="preact_resnet50"):
    """ImageNet ResNet-50, full pre-activation (HE).

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=50, unit="preact", gated=False, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def resnet50(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
             input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
             include_preprocessing=False, name="resnet50"):
    """ImageNet ResNet-50, original unit (HE).

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=50, unit="original", gated=False, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def gresnet50(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
              input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
              include_preprocessing=False, name="gresnet50"):
    """ImageNet GResNet-50: full pre-activation, GR's gate on every unit.

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=50, unit="preact", gated=True, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def preact_resnet101(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
                     input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
                     include_preprocessing=False, name="preact_resnet101"):
    """ImageNet ResNet-101, full pre-activation (HE).

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=101, unit="preact", gated=False, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def resnet101(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
              input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
              include_preprocessing=False, name="resnet101"):
    """ImageNet ResNet-101, original unit (HE).

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=101, unit="original", gated=False, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def gresnet101(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
               input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
               include_preprocessing=False, name="gresnet101"):
    """ImageNet GResNet-101: full pre-activation, GR's gate on every unit.

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=101, unit="preact", gated=True, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    results=[paper(_HE_IMAGENET, 21.1, "imagenet")],
    tiny=dict(input_shape=(32, 32, 3)),
)
def preact_resnet152(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
                     input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
                     include_preprocessing=False, name="preact_resnet152"):
    """ImageNet ResNet-152, full pre-activation (HE).

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=152, unit="preact", gated=False, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def resnet152(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
              input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
              include_preprocessing=False, name="resnet152"):
    """ImageNet ResNet-152, original unit (HE).

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=152, unit="original", gated=False, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def gresnet152(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
               input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
               include_preprocessing=False, name="gresnet152"):
    """ImageNet GResNet-152: full pre-activation, GR's gate on every unit.

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=152, unit="preact", gated=True, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    results=[paper(_HE_IMAGENET, 20.7, "imagenet")],
    pretrained=[untrained("imagenet", input_shape=(224, 224, 3), classes=1000,
                          preprocessing="meanstd")],
    tiny=dict(input_shape=(32, 32, 3)),
)
def preact_resnet200(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
                     input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
                     include_preprocessing=False, name="preact_resnet200"):
    """ImageNet ResNet-200, full pre-activation (HE).

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=200, unit="preact", gated=False, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    results=[paper(_HE_IMAGENET, 21.8, "imagenet")],
    tiny=dict(input_shape=(32, 32, 3)),
)
def resnet200(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
              input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
              include_preprocessing=False, name="resnet200"):
    """ImageNet ResNet-200, original unit (HE).

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=200, unit="original", gated=False, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)


@register_model(
    family="resnet_imagenet",
    tiny=dict(input_shape=(32, 32, 3)),
)
def gresnet200(*, bn_momentum=0.9, include_top=True, weights=None, input_tensor=None,
               input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
               include_preprocessing=False, name="gresnet200"):
    """ImageNet GResNet-200: full pre-activation, GR's gate on every unit.

    Arguments as :func:`resnet_imagenet`.
    """
    return _imagenet(depth=200, unit="preact", gated=True, bn_momentum=bn_momentum,
        include_top=include_top, weights=weights, input_tensor=input_tensor,
        input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation,
        include_preprocessing=include_preprocessing, name=name)
