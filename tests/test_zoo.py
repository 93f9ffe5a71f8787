"""The zoo: facts from the papers (GR, HE and WRN, each cited by table), the Keras Applications
contract, the registry, and bad input."""

import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

from helpers import random_inputs, randomize_bn, sgd_step_changes
from keras_gresnet import zoo
from keras_gresnet.layers import gate_layers
from keras_gresnet.zoo import mlps as mlp_module
from keras_gresnet.zoo import resnets as resnet_module

RNG = np.random.default_rng(0)
CIFAR_TINY = dict(input_shape=(16, 16, 3))


def trainable_params(model):
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


# ---------------------------------------------------------------- registry

def test_registry_lists_and_builds_by_name():
    names = zoo.list_models()
    assert names == sorted(names) and len(names) == len(set(names))
    for expected in ("plain_mlp", "resnet_mlp", "gresnet_mlp", "gated_plain_mlp",
                     "resnet_cifar", "gresnet_cifar", "preact_resnet110",
                     "preact_resnet164", "preact_resnet1001", "resnet110",
                     "wide_resnet", "wide_gresnet", "preact_resnet152",
                     "preact_resnet200", "gresnet152", "gresnet200", "resnet200"):
        assert expected in names
        assert getattr(zoo, expected) is zoo.model_builder(expected)
    assert zoo.list_models("*gresnet*") == [
        "gresnet101", "gresnet101v2", "gresnet152", "gresnet152v2", "gresnet200", "gresnet50",
        "gresnet50v2", "gresnet_cifar", "gresnet_mlp", "wide_gresnet"]
    assert zoo.list_models("nothing*") == []
    model = zoo.get_model("gresnet_mlp", depth=4)
    assert model.name == "gresnet_mlp" and len(gate_layers(model)) == 2  # the builder's name


def test_unknown_model_name_suggests_close_names():
    with pytest.raises(ValueError, match=r"name='gresnet'.*gresnet_cifar"):
        zoo.get_model("gresnet")


# ------------------------------------------------------ parameter counts (HE, WRN)

IMAGENET = pytest.mark.integration  # full-size ImageNet nets: seconds each to build


@pytest.mark.parametrize("builder,kwargs,params,millions", [
    (zoo.preact_resnet110, {}, 1_727_962, 1.7),   # HE Table 3: 1.7M
    (zoo.resnet110, {}, 1_727_962, 1.7),          # HE Table 3 (original unit): 1.7M
    (zoo.preact_resnet164, {}, 1_703_258, 1.7),   # HE Table 3: 1.7M
    (zoo.resnet164, {}, 1_704_154, 1.7),          # HE Table 3: 1.7M
    pytest.param(zoo.preact_resnet1001, {}, 10_327_706, 10.2,  # HE Table 3: 10.2M
                 marks=pytest.mark.integration),
    pytest.param(zoo.resnet1001, {}, 10_328_602, 10.2, marks=pytest.mark.integration),
    (zoo.resnet_cifar, dict(n=5), 464_154, None),  # GR Table 3's n=5 (no count given)
    (zoo.gresnet_cifar, dict(n=5), 464_169, None),  # + GR's 15 gates
    (zoo.wide_resnet, {}, 36_479_194, 36.5),      # WRN Table 1 / GR Table 4: 36.5M
    (zoo.wide_gresnet, {}, 36_479_206, 36.5),     # + 12 gates
    (zoo.plain_mlp, dict(depth=2), 45_160, None),    # GR Table 1: 784-50-...-10
    (zoo.plain_mlp, dict(depth=100), 304_860, None),
    (zoo.resnet_mlp, dict(depth=100), 304_860, None),
    (zoo.gresnet_mlp, dict(depth=100), 304_910, None),  # + GR's 50 gates
    (zoo.gated_plain_mlp, dict(depth=100), 304_960, None),
    # HE's ImageNet nets (HE Tables 4-5 give no counts; Keras Applications'
    # table: ResNet50V2 25.6M).
    pytest.param(zoo.preact_resnet50, {}, 25_549_352, 25.6, marks=IMAGENET),
    pytest.param(zoo.resnet50, {}, 25_557_032, 25.6, marks=IMAGENET),
    pytest.param(zoo.preact_resnet101, {}, 44_541_480, None, marks=IMAGENET),
    pytest.param(zoo.preact_resnet152, {}, 60_185_128, None, marks=IMAGENET),
    pytest.param(zoo.preact_resnet200, {}, 64_666_152, None, marks=IMAGENET),
    # Keras' own ResNet50V2: 25,568,360 trainable parameters (model.summary()).
    pytest.param(zoo.resnet_imagenet, dict(depth=50, layout="keras"), 25_568_360, 25.6,
                 marks=IMAGENET),
])
def test_parameter_counts_are_pinned(builder, kwargs, params, millions):
    """Exact trainable counts at the reference code's defaults (BN's moving
    statistics excluded, as the papers count), each near the paper's figure.
    Built in a ``StatelessScope``: every variable made with its shape, its
    initialisation deferred (a count needs no values; TensorFlow builds
    ResNet-1001 in about half the time)."""
    with keras.StatelessScope():
        model = builder(**kwargs)
    count = trainable_params(model)
    assert count == params
    if millions is not None:
        assert abs(count / (millions * 1e6) - 1) < 0.03, count


def test_multiply_adds_equal_a_hand_count():
    """gresnet_cifar(n=1) on 32x32x3, counted by hand from HE's CIFAR layout:
    the 3x3 stem (3 -> 16), one unit a stage of two 3x3 convs (16 at 32x32;
    16 -> 32 strided, then 32 -> 32 at 16x16; 32 -> 64, 64 -> 64 at 8x8;
    zero-padding shortcuts add no conv) and the 64 -> 10 classifier."""
    hand = (32 * 32 * 16 * (9 * 3)
            + 2 * 32 * 32 * 16 * (9 * 16)
            + 16 * 16 * 32 * (9 * 16) + 16 * 16 * 32 * (9 * 32)
            + 8 * 8 * 64 * (9 * 32) + 8 * 8 * 64 * (9 * 64)
            + 64 * 10)
    model = zoo.gresnet_cifar(n=1, input_shape=(32, 32, 3))
    assert zoo.multiply_adds(model) == hand == 12_239_488
    # n = 5 (GR Table 3's net, the benchmark's): 4 more units a stage, two 3x3
    # convs each at the stage's width and size; 2x this is its FLOPs per image
    more = 4 * 2 * (32 * 32 * 16 * (9 * 16) + 16 * 16 * 32 * (9 * 32) + 8 * 8 * 64 * (9 * 64))
    assert zoo.multiply_adds(zoo.gresnet_cifar(n=5, input_shape=(32, 32, 3))) \
        == hand + more == 68_862_592
    # a nested model (a pipeline's preprocessing in front) counts its inner layers
    inputs = keras.Input((32, 32, 3))
    assert zoo.multiply_adds(keras.Model(inputs, model(inputs))) == hand
    # a 28x28 input scales every conv by the pixels it computes (28/32)^2
    small = zoo.gresnet_cifar(n=1, input_shape=(28, 28, 3))
    assert zoo.multiply_adds(small) == (hand - 640) * 28 * 28 // (32 * 32) + 640


def test_listed_conv_entries_state_the_count_the_builders_build():
    """The registry's not-yet-trained CIFAR entries give the count of the
    net their builder builds today (the ImageNet and 1001-layer ones are
    pinned above)."""
    from keras_gresnet import weights
    cheap = [e for e in weights.list_weights() if e["status"] == weights.NOT_TRAINED
             and e["builder"] in ("resnet_cifar", "gresnet_cifar", "preact_resnet110",
                                  "preact_resnet164")]
    assert len(cheap) >= 4
    for entry in cheap:
        model = zoo.get_model(entry["builder"], **entry["builder_kwargs"],
                              classes=entry["classes"])
        assert trainable_params(model) == entry["params"], entry["name"]


@pytest.mark.parametrize("gated,ungated,kwargs,gates", [
    (zoo.gresnet_cifar, zoo.resnet_cifar, dict(n=5), 15),   # GR: 15 gates in the n=5 GResNet
    (zoo.wide_gresnet, zoo.wide_resnet, dict(n=4), 12),
    (zoo.gresnet_mlp, zoo.resnet_mlp, dict(depth=2), 1),
    (zoo.gresnet_mlp, zoo.resnet_mlp, dict(depth=20), 10),
    (zoo.gresnet_mlp, zoo.resnet_mlp, dict(depth=100), 50),
    (zoo.gated_plain_mlp, zoo.plain_mlp, dict(depth=10), 10),
])
def test_gating_adds_exactly_one_parameter_per_block(gated, ungated, kwargs, gates):
    g, u = gated(**kwargs), ungated(**kwargs)
    assert g.count_params() - u.count_params() == gates
    assert len(gate_layers(g)) == gates and not gate_layers(u)
    assert all(w.shape == () for layer in gate_layers(g) for w in layer.weights)


def test_mlp_layout_follows_gr():
    model = zoo.plain_mlp(depth=10)
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    # 784 -> 50 -> 10 layers of 50 -> 10: total depth d + 2.
    assert [layer.units for layer in dense] == [50] * 11 + [10]
    assert model.input.shape == (None, 784) and model.output.shape == (None, 10)
    assert len([layer for layer in zoo.resnet_mlp(depth=10).layers
                if isinstance(layer, keras.layers.Dense)]) == 12


def test_cifar_layout_follows_he():
    model = zoo.preact_resnet110()
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    main_path = [c for c in convs if not c.name.endswith("_0_conv")]
    assert len(main_path) + 1 == 110  # + the classifier
    assert sorted({c.filters for c in convs}) == [16, 32, 64]
    # fb.resnet.torch's CIFAR shortcutType A: zero-padded identities where
    # the width grows, no projection (opts.lua:78-81).
    assert [c.name for c in convs if c.name.endswith("_0_conv")] == []
    assert [layer.name for layer in model.layers if layer.name.endswith("_0_zero_pad")] == [
        "conv3_block1_0_zero_pad", "conv4_block1_0_zero_pad"]
    # HE's extra BN-ReLU after the last unit, before the pooling.
    post_relu = model.get_layer("post_relu")
    assert post_relu.activation is keras.activations.relu
    assert _producer(post_relu.input) == "post_bn"
    assert _producer(model.get_layer("avg_pool").input) == "post_relu"
    assert zoo.resnet_cifar(depth=164, block="bottleneck").output.shape == (None, 10)


@pytest.mark.integration
def test_imagenet_layout_follows_he():
    model = zoo.preact_resnet152(input_shape=(64, 64, 3))
    units = [n for n in ("conv2", "conv3", "conv4", "conv5")]
    counts = [len({layer.name.split("_")[1] for layer in model.layers
                   if layer.name.startswith(u + "_block")}) for u in units]
    assert counts == [3, 8, 36, 3]
    assert model.get_layer("conv1_conv").kernel_size == (7, 7)
    assert model.get_layer("conv1_conv").strides == (2, 2)
    assert isinstance(model.get_layer("pool1_pool"), keras.layers.MaxPooling2D)
    assert model.output.shape == (None, 1000)
    assert model.get_layer("conv5_block3_3_conv").filters == 2048


# ------------------------------------- the papers' reference code, unit by unit

def _op(model, tensor):
    return tensor._keras_history.operation.name


def _add_inputs(model, unit):
    """The producers of the two terms the unit's merge adds."""
    return sorted(_op(model, t) for t in model.get_layer(f"{unit}add").input)


def _unit_ops(model, unit):
    """The unit's layers in order, F and the merge; then its shortcut's (``0_*``)."""
    ops = [layer.name[len(unit):] for layer in model.layers if layer.name.startswith(unit)]
    return [o for o in ops if not o.startswith("0_")] + [o for o in ops if o.startswith("0_")]


def test_fb_cifar_preact_net_follows_preresnet_lua():
    """fb.resnet.torch models/preresnet.lua, CIFAR (HE's ResNet-110): the
    stem is a bare conv (167); the first unit of every stage, stage 1 too,
    is 'both_preact' (114-123): its BN-ReLU comes before the split and h
    takes the activated signal (65-67); the others start F with it and
    add the raw x (68-70); where the width grows h is shortcutType A, the
    zero-padded strided identity (opts.lua:78-81, preresnet.lua:35-41)."""
    model = zoo.preact_resnet110(input_shape=(8, 8, 3))
    names = [layer.name for layer in model.layers]
    assert "conv1_bn" not in names and not any(n.endswith("_0_conv") for n in names)
    assert _add_inputs(model, "conv2_block1_") == ["conv2_block1_2_conv",
                                                   "conv2_block1_preact_relu"]
    assert _add_inputs(model, "conv2_block2_") == ["conv2_block1_add", "conv2_block2_2_conv"]
    assert _unit_ops(model, "conv3_block1_") == [
        "preact_bn", "preact_relu", "1_pad", "1_conv", "2_bn", "2_relu", "2_conv", "add",
        "0_zero_pad"]
    assert _op(model, model.get_layer("conv3_block1_0_zero_pad").input) == \
        "conv3_block1_preact_relu"
    pad = model.get_layer("conv4_block1_0_zero_pad")
    assert (pad.filters, pad.stride) == (64, 2)
    assert model.get_layer("conv3_block1_1_conv").strides == (2, 2)
    assert _unit_ops(model, "conv3_block2_") == [
        "preact_bn", "preact_relu", "1_conv", "2_bn", "2_relu", "2_conv", "add"]


def test_fb_cifar_original_net_follows_resnet_lua():
    """models/resnet.lua, CIFAR: conv-BN-ReLU stem (137-139), post-activation
    units (53-65) and the type-A shortcut where the width grows."""
    model = zoo.resnet110(input_shape=(8, 8, 3))
    assert model.get_layer("conv1_bn") and model.get_layer("conv1_relu")
    assert _unit_ops(model, "conv3_block1_") == [
        "1_pad", "1_conv", "1_bn", "1_relu", "2_conv", "2_bn", "add", "out_relu", "0_zero_pad"]
    assert _op(model, model.get_layer("conv3_block1_0_zero_pad").input) == "conv2_block18_out_relu"


@pytest.mark.parametrize("builder", [zoo.preact_resnet164, zoo.resnet164])
def test_he_cifar_bottleneck_nets_follow_resnet_pre_act_lua(builder):
    """KaimingHe/resnet-1k-layers resnet-pre-act.lua (ResNet-164/1001): a unit
    whose width grows (every stage's first, stage 1's 16 -> 64 included)
    shares one BN-ReLU before the split (62-66), strides its FIRST 1x1
    (70) and projects by a bare 1x1 conv (83); the others add the raw x
    (38-55). The original-unit twins (resnet.lua's bottleneck, 69-88) keep
    the BN after their projection (resnet.lua:33-34)."""
    model = builder(input_shape=(8, 8, 3))
    preact = builder is zoo.preact_resnet164
    for unit, stride in (("conv2_block1_", 1), ("conv3_block1_", 2), ("conv4_block1_", 2)):
        assert [model.get_layer(f"{unit}{i}_conv").strides for i in (0, 1, 2, 3)] == [
            (stride, stride), (stride, stride), (1, 1), (1, 1)]
        projection = model.get_layer(f"{unit}0_conv")
        source = _op(model, projection.input)
        assert source == (f"{unit}preact_relu" if preact else
                          "conv1_relu" if unit == "conv2_block1_" else
                          f"conv{int(unit[4]) - 1}_block18_out_relu")
        assert (f"{unit}0_bn" in [layer.name for layer in model.layers]) == (not preact)
    if preact:
        assert _unit_ops(model, "conv3_block1_") == [
            "preact_bn", "preact_relu", "1_conv", "2_bn", "2_relu", "2_conv", "3_bn",
            "3_relu", "3_conv", "add", "0_conv"]
        assert _add_inputs(model, "conv3_block2_") == ["conv3_block1_add",
                                                       "conv3_block2_3_conv"]


@pytest.mark.parametrize("widen_factor", [1, 2])
def test_wrn_follows_wide_resnet_lua(widen_factor):
    """szagoruyko/wide-residual-networks models/wide-resnet.lua: the BN-ReLU
    goes before the split only where the width changes (52-54), where h is
    a bare 1x1 conv (65-67); WRN-d-1's first unit (16 -> 16) adds the raw
    conv1 output. Convs are fan-in MSRA normal (utils.lua:3-8)."""
    model = zoo.wide_resnet(n=1, widen_factor=widen_factor, **CIFAR_TINY)
    first = _add_inputs(model, "conv2_block1_")
    if widen_factor == 1:
        assert first == ["conv1_conv", "conv2_block1_2_conv"]
    else:
        assert _op(model, model.get_layer("conv2_block1_0_conv").input) == \
            "conv2_block1_preact_relu"
    assert _op(model, model.get_layer("conv3_block1_0_conv").input) == "conv3_block1_preact_relu"
    assert "conv3_block1_0_bn" not in [layer.name for layer in model.layers]
    init = model.get_layer("conv3_block1_1_conv").get_config()["kernel_initializer"]["config"]
    assert (init["mode"], init["distribution"], init["scale"]) == (
        "fan_in", "untruncated_normal", 2.0)


def test_he_imagenet_net_follows_fb_preresnet_lua():
    """models/preresnet.lua, ImageNet: conv 7x7/2, BN, ReLU, max-pool (146-149);
    stage 1's first unit is 'no_preact' (120: no second BN-ReLU on the
    pooled stem), the later stages' first units 'both_preact'; the stride on
    the 3x3 (101); shortcutType B, a bare 1x1 conv (31-34, opts.lua:76);
    fan-out MSRA normal init (197-200)."""
    model = zoo.preact_resnet50(input_shape=(32, 32, 3))
    names = [layer.name for layer in model.layers]
    assert "conv2_block1_preact_bn" not in names and "conv1_bn" in names
    for layer in ("conv2_block1_0_conv", "conv2_block1_1_conv"):
        assert _op(model, model.get_layer(layer).input) == "pool1_pool"
    assert _op(model, model.get_layer("conv3_block1_0_conv").input) == "conv3_block1_preact_relu"
    assert [model.get_layer(f"conv3_block1_{i}_conv").strides for i in (0, 1, 2, 3)] == [
        (2, 2), (1, 1), (2, 2), (1, 1)]
    assert not any(n.endswith("_0_bn") for n in names)
    assert _add_inputs(model, "conv2_block2_") == ["conv2_block1_add", "conv2_block2_3_conv"]
    for layer in ("conv1_conv", "conv4_block3_2_conv"):
        init = model.get_layer(layer).get_config()["kernel_initializer"]
        assert init["class_name"] == "VarianceScaling"
        assert (init["config"]["mode"], init["config"]["distribution"]) == (
            "fan_out", "untruncated_normal")


def test_keras_layout_keeps_keras_resnet_v2():
    """keras/src/applications/resnet.py residual_block_v2: every block's
    BN-ReLU first, the first block's conv shortcut on it, the others' raw
    x (or its 1x1 max-pool); default Conv2D initializer (glorot_uniform)."""
    model = zoo.resnet_imagenet(depth=50, layout="keras", input_shape=(32, 32, 3))
    assert _op(model, model.get_layer("conv2_block1_preact_bn").input) == "pool1_pool"
    assert _op(model, model.get_layer("conv2_block1_0_conv").input) == "conv2_block1_preact_relu"
    pool = [layer for layer in model.layers if layer.name == "conv2_block3_0_pool"][0]
    assert _op(model, pool.input) == "conv2_block2_out"
    assert model.get_layer("conv3_block4_2_conv").strides == (2, 2)
    init = model.get_layer("conv3_block1_1_conv").get_config()["kernel_initializer"]
    assert init["class_name"] == "GlorotUniform"


@pytest.mark.parametrize("kwargs,expected", [
    (dict(), ("3x3", "zero_pad")),                              # fb CIFAR
    (dict(block="bottleneck"), ("1x1", "conv")),                # HE's resnet-pre-act.lua
    (dict(block="bottleneck", stride_on="3x3", shortcut_projection="zero_pad"),
     ("3x3", "zero_pad")),
    (dict(shortcut_projection="conv"), ("3x3", "conv")),
])
def test_resnet_cifar_defaults_follow_the_block_and_can_be_overridden(kwargs, expected):
    model = zoo.resnet_cifar(n=1, **CIFAR_TINY, **kwargs)
    names = {layer.name for layer in model.layers}
    bottleneck = kwargs.get("block") == "bottleneck"
    stride_on, projection = expected
    strided = 1 if stride_on == "1x1" or not bottleneck else 2
    assert model.get_layer(f"conv3_block1_{strided}_conv").strides == (2, 2)
    assert ("conv3_block1_0_conv" in names) == (projection == "conv")
    assert ("conv3_block1_0_zero_pad" in names) == (projection == "zero_pad")


# ------------------------------------------------ gated vs ungated function

def _twin(gated_builder, ungated_builder, **kwargs):
    gated, plain = gated_builder(**kwargs), ungated_builder(**kwargs)
    copied = zoo.transfer_weights(plain, gated)
    assert len(copied) == len([layer for layer in plain.layers if layer.weights])
    return gated, plain


TWINS = [
    (zoo.gresnet_cifar, zoo.resnet_cifar, dict(n=2, **CIFAR_TINY)),
    (zoo.wide_gresnet, zoo.wide_resnet, dict(n=1, widen_factor=2, **CIFAR_TINY)),
    (zoo.gresnet_mlp, zoo.resnet_mlp, dict(depth=6)),
    (zoo.gresnet50, zoo.preact_resnet50, dict(input_shape=(32, 32, 3))),
]


@pytest.mark.parametrize("gated_builder,ungated_builder,kwargs", TWINS)
def test_gated_with_k_one_equals_ungated(gated_builder, ungated_builder, kwargs):
    gated, plain = _twin(gated_builder, ungated_builder, **kwargs)
    randomize_bn(plain)
    zoo.transfer_weights(plain, gated)
    x = random_inputs(plain)
    # g(1) * F + x is F + x exactly: only another graph's order (float32 round-off)
    np.testing.assert_allclose(gated.predict(x, verbose=0), plain.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-5)


def _producer(tensor):
    return tensor._keras_history.operation.name


def _ungated_terms(plain, gate):
    """``(x, F)`` of the block ``gate`` gates, read from the ungated twin
    ``plain`` (independent of the gate's own wiring): a residual block's
    merge ``{block}_add`` adds the shortcut ``x`` (identity, the unit's
    shared pre-activation ``{block}_preact_*``, or the projection
    ``{block}_0_*``) and the branch ``F``; a plain layer
    ``{block}_dense`` -> ``{block}_relu`` has ``x`` its input, ``F`` its output."""
    block = gate.name[:-len("_gate")]
    names = {layer.name for layer in plain.layers}
    if f"{block}_add" in names:
        pair = plain.get_layer(f"{block}_add").input
        branch = [t for t in pair if _producer(t).startswith(block + "_")
                  and not _producer(t).startswith((block + "_0_", block + "_preact_"))]
        assert len(branch) == 1, [_producer(t) for t in pair]
        return next(t for t in pair if t is not branch[0]), branch[0]
    return plain.get_layer(f"{block}_dense").input, plain.get_layer(f"{block}_relu").output


GATED_TWINS = [
    (zoo.gresnet_cifar, zoo.resnet_cifar, dict(n=2, **CIFAR_TINY)),  # identity + projection units
    (zoo.gresnet_mlp, zoo.resnet_mlp, dict(depth=4)),
    (zoo.gated_plain_mlp, zoo.plain_mlp, dict(depth=3)),
    (zoo.wide_gresnet, zoo.wide_resnet, dict(n=1, widen_factor=1, **CIFAR_TINY)),
]


@pytest.mark.parametrize("gated_builder,ungated_builder,kwargs", GATED_TWINS)
def test_each_gate_computes_gr_s_merge_of_the_ungated_branch(gated_builder, ungated_builder,
                                                             kwargs):
    """GR's gate: the GResNet block is ``g(k) F(x) + x`` and the gated plain
    layer ``g(k) f(x) + (1 - g(k)) x``, g = ReLU, with ``F`` and ``x`` taken
    from the ungated twin (same weights): one gate at a time is set to k, the
    others to 1 (so its inputs are the twin's)."""
    gated, plain = _twin(gated_builder, ungated_builder, **kwargs)
    randomize_bn(plain)
    zoo.transfer_weights(plain, gated)
    x_in = random_inputs(plain)
    gates = gate_layers(gated)
    residual = gated_builder is not zoo.gated_plain_mlp
    for gate in gates:
        shortcut, branch = keras.Model(plain.input, list(_ungated_terms(plain, gate))).predict(
            x_in, verbose=0)
        assert np.abs(branch).max() > 1e-3 and np.abs(branch - shortcut).max() > 1e-3
        probe = keras.Model(gated.input, gate.output)
        for k in (0.6, 1.7, -0.3):
            for other in gates:
                other.k.assign(k if other is gate else 1.0)
            g = max(k, 0.0)
            expected = g * branch + shortcut if residual else g * branch + (1 - g) * shortcut
            # g * F + shortcut redone in numpy: a rounding or two; F from another graph's order
            np.testing.assert_allclose(probe.predict(x_in, verbose=0), expected,
                                       rtol=1e-5, atol=1e-5, err_msg=f"{gate.name}, k={k}")


@pytest.mark.parametrize("gated_builder,ungated_builder,kwargs", GATED_TWINS)
def test_gates_at_or_below_zero_make_exact_identities(gated_builder, ungated_builder, kwargs):
    """GR: k <= 0 turns a block into its shortcut exactly (the shortcut read
    from the ungated twin); projection units reduce to h(x)."""
    model, plain = _twin(gated_builder, ungated_builder, **kwargs)
    randomize_bn(plain)
    zoo.transfer_weights(plain, model)
    gates = gate_layers(model)
    for i, gate in enumerate(gates):
        gate.k.assign(-0.5 if i % 2 else 0.0)
    x_in = random_inputs(model)
    names = {layer.name for layer in model.layers}
    for gate in gates:
        # The layer whose output is the twin's shortcut, named in the gated
        # net: a merge ``{block}_add`` (or a plain layer's ``{block}_relu``)
        # of the twin is ``{block}_gate`` here; anything else keeps its name.
        source = _producer(_ungated_terms(plain, gate)[0])
        block = source.rsplit("_", 1)[0]
        if source.endswith(("_add", "_relu")) and f"{block}_gate" in names:
            source = f"{block}_gate"
        shortcut = model.get_layer(source).output
        out, expected = keras.Model(model.input, [gate.output, shortcut]).predict(
            x_in, verbose=0)
        np.testing.assert_array_equal(out, expected, err_msg=gate.name)
    if gated_builder is zoo.gresnet_mlp:  # the whole middle of the net vanishes
        probe = keras.Model(model.input, [model.get_layer("stem_relu").output,
                                          gates[-1].output])
        stem, last = probe.predict(random_inputs(model), verbose=0)
        np.testing.assert_array_equal(stem, last)


@pytest.mark.parametrize("builder", [zoo.wide_resnet, zoo.wide_gresnet])
def test_wrn_units_drop_out_between_their_convs(builder):
    """WRN: dropout (0.3, the builders' default) between the two 3x3 convs
    of every unit, after the second BN-ReLU: ``relu -> dropout -> conv``;
    training-mode outputs vary from call to call, inference ones do not."""
    model = builder(n=2, widen_factor=1, **CIFAR_TINY)
    dropouts = [layer for layer in model.layers if isinstance(layer, keras.layers.Dropout)]
    units = {re.match(r"conv\d_block\d+", layer.name)[0] for layer in model.layers
             if re.match(r"conv\d_block\d+", layer.name)}
    assert len(dropouts) == len(units) == 6
    consumers = {}
    for layer in model.layers:
        for node in layer._inbound_nodes:
            for tensor in node.input_tensors:
                consumers.setdefault(_producer(tensor), []).append(layer)
    for dropout in dropouts:
        assert dropout.rate == 0.3
        assert _producer(dropout.input) == dropout.name.replace("dropout", "relu")
        [after] = consumers[dropout.name]
        assert isinstance(after, keras.layers.Conv2D) and after.kernel_size == (3, 3)
    x = random_inputs(model, batch=4)
    a, b = (keras.ops.convert_to_numpy(model(x, training=True)) for _ in range(2))
    assert np.abs(a - b).max() > 1e-4  # the masks differ (BN's batch statistics do not)
    np.testing.assert_array_equal(model.predict(x, verbose=0), model.predict(x, verbose=0))
    assert not any(isinstance(layer, keras.layers.Dropout)
                   for layer in builder(n=1, widen_factor=1, dropout=0.0, **CIFAR_TINY).layers)


@pytest.mark.parametrize("builder,kwargs", [
    (zoo.gresnet_cifar, dict(n=1, **CIFAR_TINY)),
    (zoo.gresnet_mlp, dict(depth=4)),
    (zoo.gated_plain_mlp, dict(depth=3)),
    (zoo.wide_gresnet, dict(n=1, widen_factor=1, **CIFAR_TINY)),
])
def test_gradients_reach_every_gate(builder, kwargs):
    model = builder(**kwargs)
    x = random_inputs(model, batch=8)
    y = RNG.integers(0, 10, size=8)
    ks = [g.k for g in gate_layers(model)]
    changes = sgd_step_changes(model, x, y, lr=1e-3)
    assert ks and all(float(abs(changes[k.path])) > 0 for k in ks)


def test_mixed_float16():
    keras.config.set_dtype_policy("mixed_float16")
    model = zoo.gresnet_cifar(n=1, **CIFAR_TINY)
    gates = gate_layers(model)
    assert all(g.k.dtype == "float32" for g in gates)
    assert gates[0].compute_dtype == "float16"
    assert model.get_layer("predictions").compute_dtype == "float32"
    x = random_inputs(model, batch=4)
    out = model(x, training=True)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    out = keras.ops.convert_to_numpy(out)
    assert np.isfinite(out).all()
    # the head is float32 (asserted): 10 float32 probabilities sum to 1 within ~1e-6
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    # A step (loss scaling included) moves every float32 gate by a finite amount.
    changes = sgd_step_changes(model, x, RNG.integers(0, 10, size=4), lr=1e-3)
    assert all(np.isfinite(changes[g.k.path]) and abs(changes[g.k.path]) > 0 for g in gates)


# -------------------------------------------- every builder, the Keras contract

def _tiny_kwargs(name):
    """The smallest configuration of every registered builder: its record's
    (``register_model(tiny=...)``)."""
    return zoo.model_builder(name).tiny


def test_every_builder_declares_its_tiny_build():
    assert [n for n in zoo.list_models() if not isinstance(zoo.model_builder(n).tiny, dict)] == []


# Full-size ImageNet nets (101 to 200 layers) take seconds each to build.
BIG = ("101", "152", "200")


@pytest.mark.parametrize("name", [
    n if not n.removesuffix("v2").endswith(BIG)
    else pytest.param(n, marks=pytest.mark.integration)
    for n in zoo.list_models() if not n.endswith("1001")
] + [pytest.param("preact_resnet1001", marks=pytest.mark.slow),
     pytest.param("resnet1001", marks=pytest.mark.slow)])
def test_every_builder_builds_and_runs(name):
    model = zoo.get_model(name, **_tiny_kwargs(name))
    x = random_inputs(model, batch=2)
    classes = 1000 if model.get_layer("predictions").units == 1000 else 10
    # Training mode (BN on batch statistics, as the first step sees it), and
    # inference. Not for the original-unit ResNet-1001: at initialisation,
    # with BN's identity moving statistics, its 333 units x -> relu(x + F(x))
    # grow the activations geometrically until float32 overflows to NaN
    # (measured: 3 builds of 3); training sets the
    # statistics long before anyone runs inference.
    modes = (True,) if name == "resnet1001" else (True, False)
    for training in modes:
        out = keras.ops.convert_to_numpy(model(x, training=training))
        assert out.shape == (2, classes)
        # float32 softmax over up to 1000 classes: < 1000 * 2**-24 ~ 6e-5 off 1 at worst
        np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-4)


@pytest.mark.parametrize("name,kwargs,shapes", [
    ("resnet_cifar", dict(n=1, **CIFAR_TINY), {None: (None, 4, 4, 64), "avg": (None, 64),
                                               "max": (None, 64)}),
    ("preact_resnet164", dict(input_shape=(8, 8, 3)), {None: (None, 2, 2, 256),
                                                       "avg": (None, 256)}),
    ("wide_gresnet", dict(n=1, widen_factor=2, **CIFAR_TINY), {"avg": (None, 128)}),
    ("gresnet50", dict(input_shape=(64, 64, 3)), {None: (None, 2, 2, 2048),
                                                  "max": (None, 2048)}),
    ("gresnet_mlp", dict(depth=2), {None: (None, 50), "avg": (None, 50)}),
])
def test_feature_extractor_shapes(name, kwargs, shapes):
    for pooling, shape in shapes.items():
        model = zoo.get_model(name, include_top=False, pooling=pooling, **kwargs)
        assert model.output.shape == shape
        assert "predictions" not in [layer.name for layer in model.layers]


def test_input_tensor_and_classes():
    tensor = keras.Input((16, 16, 1))
    model = zoo.gresnet_cifar(n=1, input_tensor=tensor, classes=3,
                              classifier_activation=None)
    assert model.input is tensor and model.output.shape == (None, 3)
    mlp = zoo.gresnet_mlp(depth=2, input_shape=(28, 28, 1))
    assert mlp.get_layer("flatten").output.shape == (None, 784)
    assert mlp.predict(np.zeros((1, 28, 28, 1)), verbose=0).shape == (1, 10)


@pytest.mark.parametrize("name,kwargs", [
    ("gresnet_mlp", dict(depth=4)),
    ("gated_plain_mlp", dict(depth=2)),
    ("gresnet_cifar", dict(n=1, **CIFAR_TINY)),
    ("resnet_cifar", dict(n=1, unit="original", shortcut="exclusive_gating", **CIFAR_TINY)),
    ("resnet_cifar", dict(n=1, block="bottleneck", shortcut="scaling",
                          residual_scale=0.5, **CIFAR_TINY)),
    ("resnet_cifar", dict(n=1, unit="bn_after_add", shortcut="dropout", **CIFAR_TINY)),
    ("wide_gresnet", dict(n=1, widen_factor=2, **CIFAR_TINY)),
])
def test_keras_save_load_round_trip(tmp_path, name, kwargs):
    model = zoo.get_model(name, **kwargs)
    for gate in gate_layers(model):
        gate.k.assign(0.7)
    randomize_bn(model)
    x = random_inputs(model)
    path = tmp_path / "model.keras"
    model.save(path)
    keras.backend.clear_session()
    loaded = keras.saving.load_model(path, safe_mode=True)  # no custom_objects
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert [g.g for g in gate_layers(loaded)] == pytest.approx([0.7] * len(gate_layers(model)))
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]


@pytest.mark.integration
def test_load_model_in_a_fresh_process_needs_only_import_keras_gresnet(tmp_path):
    """``keras_gresnet.load_model`` registers the layers and optimizers that
    a bare ``import keras_gresnet`` (which imports no Keras) leaves out: a
    compiled gated net with zero-padded shortcuts and Keras 1's Nadam."""
    from keras_gresnet.optimizers import Keras1Nadam

    model = zoo.gresnet_cifar(n=1, **CIFAR_TINY)
    model.compile(Keras1Nadam(0.002), "sparse_categorical_crossentropy")
    for gate in gate_layers(model):
        gate.k.assign(0.7)
    path = tmp_path / "model.keras"
    model.save(path)
    code = ("import keras_gresnet, sys\n"
            "assert 'keras_gresnet.layers' not in sys.modules\n"
            f"m = keras_gresnet.load_model({str(path)!r})\n"
            "print(type(m.optimizer).__name__, [l.name for l in m.layers if 'gate' in l.name])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Keras1Nadam" in result.stdout and "conv4_block1_gate" in result.stdout


def test_load_model_runs_no_code_from_the_file(tmp_path):
    import keras_gresnet

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: t * 2)(inputs))
    path = tmp_path / "lambda.keras"
    model.save(path)
    with pytest.raises(ValueError, match="safe_mode"):
        keras_gresnet.load_model(path)


# ----------------------------------------------------------------- bad input

BAD_INPUT = [
    ("resnet_cifar", dict(n=0), "n must be an integer >= 1"),
    ("resnet_cifar", dict(n=2.5), "n must be an integer"),
    ("resnet_cifar", dict(depth=111), "depth must be 6n\\+2"),
    ("resnet_cifar", dict(depth=32, block="bottleneck"), "depth must be 9n\\+2"),
    ("resnet_cifar", dict(n=3, depth=110), "disagree"),
    ("resnet_mlp", dict(depth=3), "depth must be even"),
    ("gresnet_mlp", dict(depth=7), "depth must be even"),
    ("plain_mlp", dict(depth=0), "depth must be an integer >= 1"),
    ("resnet_cifar", dict(unit="postact"), "unit='postact'.*'preact'"),
    ("resnet_cifar", dict(shortcut="zero_pad"), "shortcut='zero_pad'.*'identity'"),
    ("resnet_cifar", dict(block="wide"), "block='wide'.*'bottleneck'"),
    ("gresnet_cifar", dict(shortcut="scaling"), "gated=True.*shortcut"),
    ("resnet_cifar", dict(classes=0), "classes must be an integer >= 1"),
    ("plain_mlp", dict(depth=2, classes=-1), "classes must be an integer >= 1"),
    ("resnet_cifar", dict(input_shape=(2, 2, 3)), "height and width >= 4"),
    ("preact_resnet50", dict(input_shape=(16, 16, 3)), "height and width >= 32"),
    ("resnet_cifar", dict(input_shape=(32, 32)), "rank 3"),
    ("resnet_cifar", dict(input_shape=(32, 32, 3, 1)), "rank 3"),
    ("gresnet_mlp", dict(depth=2, input_shape=()), "input_shape"),
    ("resnet_cifar", dict(pooling="mean"), "pooling must be one of"),
    ("gresnet_mlp", dict(depth=2, weights="fashion_mnist_v0"), "weights='fashion_mnist_v0'.*None"),
    ("preact_resnet152", dict(weights="imagenet"), "weights='imagenet'.*None"),
    ("resnet_cifar", dict(include_top="yes"), "include_top must be True or False"),
    ("resnet_cifar", dict(classifier_activation="softestmax"), "classifier_activation"),
    ("wide_resnet", dict(widen_factor=0), "widen_factor must be an integer >= 1"),
    ("wide_resnet", dict(dropout=1.5), "dropout must be a number in \\[0, 1\\)"),
    ("wide_resnet", dict(depth=30), "depth must be 6n\\+4"),
    ("resnet_imagenet", dict(depth=34), "depth must be one of \\(50, 101, 152, 200\\)"),
    ("preact_resnet110", dict(depth=20), "preact_resnet110 fixes depth"),
    ("resnet_cifar", dict(shortcut_dropout=1.0), "shortcut_dropout must be"),
    ("resnet_imagenet", dict(layout="torch"), "layout='torch'.*'he', 'keras'"),
    ("resnet_imagenet", dict(layout="keras", unit="original"), "layout='keras'.*unit='preact'"),
    ("resnet_cifar", dict(stride_position="middle"), "stride_position='middle'.*'last'"),
    ("resnet_cifar", dict(stem_bn=1), "stem_bn must be None, True or False"),
    ("resnet_cifar", dict(subsample="avg"), "subsample='avg'"),
    ("resnet_cifar", dict(stride_on="2x2"), "stride_on='2x2'.*'1x1'"),
    ("resnet_cifar", dict(stride_on="1x1"), "stride_on='1x1'.*block='basic'"),
    ("resnet_cifar", dict(shortcut_projection="pad"), "shortcut_projection='pad'.*'zero_pad'"),
    ("resnet_cifar", dict(both_preact="all"), "both_preact='all'.*'width_change'"),
    ("resnet_cifar", dict(kernel_initializer="msra"), "kernel_initializer must be one of"),
    ("resnet_cifar", dict(widths=(32, 16, 64)), "zero_pad.*may not shrink"),
    ("wide_resnet", dict(kernel_initializer=3), "kernel_initializer must be one of"),
]


@pytest.mark.parametrize("name,kwargs,message", BAD_INPUT)
def test_bad_input_raises_before_building(monkeypatch, name, kwargs, message):
    def no_building(*args, **kw):
        raise AssertionError("a layer was built before the arguments were checked")

    monkeypatch.setattr(mlp_module, "model_input", no_building)
    monkeypatch.setattr(resnet_module, "model_input", no_building)
    with pytest.raises(ValueError, match=message):
        zoo.get_model(name, **kwargs)


# ------------------------------------------------------- one place per model


@pytest.mark.integration
def test_a_model_declared_in_one_place_is_listed_built_and_trained_by_its_defaults(
        monkeypatch, tmp_path, capsys):
    """A new model is its ``def`` and its ``register_model`` call: the
    registry lists it, the Keras-free catalog is generated with it, the
    builders' record names it, and ``train`` takes its paper's recipe and
    dataset from the same call (no name patterns elsewhere)."""
    import importlib.util

    from keras_gresnet import cli, training
    from keras_gresnet.zoo import builders

    monkeypatch.setattr(builders, "_MODELS", dict(builders._MODELS))  # forgotten afterwards

    @zoo.register_model(configs=[dict(depth=2)], recipe="gr_mnist", dataset="fashion_mnist")
    def throwaway_mlp(depth=2, **kwargs):
        """A throw-away net, declared in one place."""
        return zoo.gresnet_mlp(depth, **kwargs)

    assert "throwaway_mlp" in zoo.list_models("throw*")
    model = zoo.get_model("throwaway_mlp", classes=3)
    assert model.builder == "throwaway_mlp" and model.builder_kwargs["classes"] == 3
    spec = importlib.util.spec_from_file_location(
        "write_catalog", os.path.join(os.path.dirname(__file__), "..", "scripts",
                                      "release", "write_catalog.py"))
    catalog = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(catalog)
    assert "'throwaway_mlp': 'A throw-away net, declared in one place.'" in catalog.catalog_text()
    assert training.default_recipe("throwaway_mlp") == "gr_mnist"
    assert training.default_dataset("throwaway_mlp") == "fashion_mnist"
    out = tmp_path / "run"
    assert cli.main(["train", "throwaway_mlp", "--epochs", "1", "--max-train-examples", "64",
                     "--max-test-examples", "32", "--out", str(out)]) == 0
    config = __import__("json").loads((out / "config.json").read_text())
    assert (config["model"], config["dataset"], config["recipe"]["name"]) == (
        "throwaway_mlp", "fashion_mnist", "gr_mnist")
    with pytest.raises(ValueError, match="needs its paper's recipe= and dataset="):
        zoo.register_model(lambda: None)
