"""The gate layers and the residual units (GR's gate, HE Tables 1-2)."""

import dataclasses
import json

import keras
import numpy as np
import pytest

from helpers import sgd_step_changes
from keras_gresnet.zoo import transfer_weights
from keras_gresnet import zoo
from keras_gresnet.layers import (
    KERAS_RESNET_V2,
    UNITS,
    UnitSpec,
    ResidualGate,
    ScaledAdd,
    ShortcutDropout,
    ShortcutGate,
    ZeroPadShortcut,
    dense_unit,
    gate_layers,
    residual_unit,
)

RNG = np.random.default_rng(0)


def _pair(shape=(4, 6)):
    return RNG.normal(size=shape).astype("float32"), RNG.normal(size=shape).astype("float32")


@pytest.mark.parametrize("k", [1.0, 0.3, 2.5, 0.0, -1.7])
@pytest.mark.parametrize("form", ["residual", "plain"])
def test_residual_gate_follows_gr_formula(form, k):
    x, fx = _pair()
    gate = ResidualGate(form, k_initial=k)
    out = keras.ops.convert_to_numpy(gate([x, fx]))
    g = max(k, 0.0)  # g = ReLU
    expected = g * fx + x if form == "residual" else g * fx + (1 - g) * x
    # float32 g * F + x, fused or not: <= an ulp of g * F apart (|g * F| < 8: 5e-7)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert gate.g == pytest.approx(g)
    assert [w.name for w in gate.weights] == ["k"]


@pytest.mark.parametrize("form", ["residual", "plain"])
def test_the_gate_reads_its_variable_k_not_its_initial_value(form):
    """GR: k is learned; the merge uses the variable's current value, and the
    loss's gradient reaches it (d u / d k = F(x) - [plain] x, for k > 0)."""
    x, fx = _pair()
    gate = ResidualGate(form, k_initial=1.0)
    gate([x, fx])
    for k in (0.3, 2.0, -0.5):
        gate.k.assign(k)
        g = max(k, 0.0)
        expected = g * fx + x if form == "residual" else g * fx + (1 - g) * x
        # float32 g * F + x, fused or not: <= an ulp of g * F apart (|g * F| < 8: 5e-7)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(gate([x, fx])), expected,
                                   rtol=1e-6, atol=1e-6)
    # One SGD step on mse(u, 0) = mean(u^2) at k = 0.5: the step of k is
    # -mean(2 u du/dk), du/dk = F (residual) or F - x (plain).
    gate.k.assign(0.5)
    inputs = [keras.Input((6,)), keras.Input((6,))]
    model = keras.Model(inputs, gate(inputs))
    u = 0.5 * fx + x if form == "residual" else 0.5 * fx + 0.5 * x
    du_dk = fx if form == "residual" else fx - x
    [step] = sgd_step_changes(model, [x, fx], np.zeros_like(x), loss="mse").values()
    # a float32 mean of 24 signed products (cancellation), read back as new k - 0.5: ~1e-6
    assert float(step) == pytest.approx(-np.mean(2 * u * du_dk), rel=1e-4)


def test_gate_with_nonpositive_k_is_exact_identity():
    x, fx = _pair()
    for form in ("residual", "plain"):
        out = keras.ops.convert_to_numpy(ResidualGate(form, k_initial=-0.1)([x, fx]))
        np.testing.assert_array_equal(out, x)


def test_gate_activation_is_configurable_and_serialized():
    x, fx = _pair()
    gate = ResidualGate("residual", k_initial=-1.0, activation="linear", name="g")
    # g = -1: -1 * F + x rounds as x - F does: exact, rtol is slack
    np.testing.assert_allclose(keras.ops.convert_to_numpy(gate([x, fx])), x - fx, rtol=1e-6)
    config = gate.get_config()
    assert config["activation"] == "linear" and config["k_initial"] == -1.0
    clone = ResidualGate.from_config(config)
    assert clone.get_config() == config


def test_bad_gate_form_is_rejected():
    with pytest.raises(ValueError, match="form"):
        ResidualGate("highway")
    with pytest.raises(ValueError, match="form"):
        ShortcutGate("both")


def test_scaled_add():
    x, fx = _pair()
    out = ScaledAdd(0.5, 0.25)([x, fx])
    # 0.5 x and 0.25 F are exact (powers of 2), then one rounded add as numpy's: exact
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), 0.5 * x + 0.25 * fx, rtol=1e-6)


@pytest.mark.parametrize("form", ["exclusive", "shortcut_only"])
def test_shortcut_gate_follows_he_formula(form):
    h, fx = RNG.normal(size=(2, 2, 5, 5, 4)).astype("float32")
    layer = ShortcutGate(form, bias_initial=-6.0)
    out = keras.ops.convert_to_numpy(layer([h, fx]))
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in (layer.kernel, layer.bias))
    np.testing.assert_array_equal(bias, np.full(4, -6.0, "float32"))
    g = 1 / (1 + np.exp(-(h @ kernel + bias)))
    expected = (1 - g) * h + (g * fx if form == "exclusive" else fx)
    # a 4-term dot and a sigmoid: the backend's exp vs numpy's, a few float32 ulps
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def _unit_layer_names(unit, block="basic", channels=8, filters=8, stride=1, **kwargs):
    x = keras.Input((8, 8, channels))
    y = residual_unit(x, filters, unit=unit, block=block, stride=stride, name="u_", **kwargs)
    model = keras.Model(x, y)
    return [layer.name[2:] for layer in model.layers[1:]], model


# HE Table 2 / Fig. 4, read from the paper: the order of ops in F and after the add.
EXPECTED_BASIC = {
    "original": ["1_conv", "1_bn", "1_relu", "2_conv", "2_bn", "add", "out_relu"],
    "bn_after_add": ["1_conv", "1_bn", "1_relu", "2_conv", "add", "out_bn", "out_relu"],
    "relu_before_add": ["1_conv", "1_bn", "1_relu", "2_conv", "2_bn", "2_relu", "add"],
    "relu_preact": ["preact_relu", "1_conv", "1_bn", "2_relu", "2_conv", "2_bn", "add"],
    "preact": ["preact_bn", "preact_relu", "1_conv", "2_bn", "2_relu", "2_conv", "add"],
}


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_layouts_follow_he(unit):
    names, _ = _unit_layer_names(unit)
    assert names == EXPECTED_BASIC[unit]


def test_preact_bottleneck_with_projection_and_dropout():
    names, model = _unit_layer_names(
        "preact", block="bottleneck", channels=8, filters=4, stride=2, dropout=0.3
    )
    # The projection takes the pre-activated input (HE); the stride sits on the 3x3.
    branch = [n for n in names if n != "0_conv"]
    assert branch == [
        "preact_bn", "preact_relu", "1_conv", "2_bn", "2_relu", "2_dropout", "2_pad",
        "2_conv", "3_bn", "3_relu", "3_dropout", "3_conv", "add",
    ]
    assert "0_conv" in names
    assert model.get_layer("u_0_conv").input is model.get_layer("u_preact_relu").output
    assert model.get_layer("u_2_conv").strides == (2, 2)
    assert model.get_layer("u_1_conv").kernel_size == (1, 1)
    assert model.output.shape == (None, 4, 4, 16)  # 4x expansion, halved resolution


def test_keras_resnet_v2_unit_arguments():
    """Keras ResNetV2's unit: a strided unit keeping its width subsamples x by
    a 1x1 max-pool, biases where no BN follows, Keras' names."""
    names, model = _unit_layer_names(
        "preact", block="bottleneck", channels=16, filters=4, stride=2,
        subsample="pool", conv_bias=True, naming="keras",
    )
    assert names == ["preact_bn", "preact_relu", "1_conv", "1_bn", "1_relu", "2_pad",
                     "2_conv", "2_bn", "2_relu", "0_pool", "3_conv", "out"]
    assert model.get_layer("u_0_pool").input is model.input  # x, not its pre-activation
    assert [model.get_layer(f"u_{i}_conv").use_bias for i in (1, 2, 3)] == [False, False, True]
    assert model.output.shape == (None, 4, 4, 16)
    x = RNG.normal(size=(2, 8, 8, 16)).astype("float32")
    f = keras.Model(model.input, model.get_layer("u_3_conv").output)
    # h + F added again in numpy: one float32 rounding; F from another graph's order
    np.testing.assert_allclose(model.predict(x, verbose=0),
                               x[:, ::2, ::2] + f.predict(x, verbose=0), rtol=1e-5, atol=1e-5)
    # A width change still projects (with a bias: no BN follows in a preact unit).
    _, model = _unit_layer_names("preact", block="bottleneck", channels=8, filters=4,
                                 subsample="pool", conv_bias=True)
    assert model.get_layer("u_0_conv").use_bias
    # Post-activation: every conv feeds a BN, so no bias anywhere.
    _, model = _unit_layer_names("original", channels=8, filters=16, conv_bias=True)
    assert not any(getattr(layer, "use_bias", False) for layer in model.layers)


def test_stride_on_the_first_1x1_or_the_3x3():
    """HE's CIFAR code strides a bottleneck's first 1x1 (resnet-pre-act.lua:70),
    fb.resnet.torch its 3x3 (preresnet.lua:101); the unit default is fb's."""
    for stride_on, strided in (("1x1", 1), ("3x3", 2), (None, 2)):
        options = {} if stride_on is None else dict(stride_on=stride_on)
        _, model = _unit_layer_names("preact", block="bottleneck", channels=8, filters=4,
                                     stride=2, **options)
        strides = {i: model.get_layer(f"u_{i}_conv").strides for i in (0, 1, 2, 3)}
        assert strides == {i: (2, 2) if i in (0, strided) else (1, 1) for i in strides}
        assert model.output.shape == (None, 4, 4, 16)
    with pytest.raises(ValueError, match="stride_on='1x1'.*block='basic'"):
        residual_unit(keras.Input((8, 8, 4)), 4, stride_on="1x1")


def _source_op(model, layer):
    return model.get_layer(layer).input._keras_history.operation.name


@pytest.mark.parametrize("preact_type,shortcut_from,f_from", [
    ("both_preact", "u_preact_relu", "u_preact_relu"),  # fb preresnet.lua:65-67
    ("branch", "input", "u_preact_relu"),               # preresnet.lua:68-70
    ("no_preact", "input", "input"),                    # preresnet.lua:120
])
def test_preact_type_sets_what_the_shortcut_takes(preact_type, shortcut_from, f_from):
    x = keras.Input((8, 8, 4), name="input")
    model = keras.Model(x, residual_unit(x, 8, stride=2, preact_type=preact_type,
                                         shortcut_projection="zero_pad", name="u_"))
    assert _source_op(model, "u_0_zero_pad") == shortcut_from
    assert _source_op(model, "u_1_pad") == f_from
    assert ("u_preact_bn" in [layer.name for layer in model.layers]) == (
        preact_type != "no_preact")
    with pytest.raises(ValueError, match="preact_type.*unit='original'"):
        residual_unit(x, 8, unit="original", preact_type="branch")


def test_unit_default_preact_type_shares_the_bn_relu_only_where_it_projects():
    _, widening = _unit_layer_names("preact", channels=4, filters=8)
    assert _source_op(widening, "u_0_conv") == "u_preact_relu"  # HE: the projection's input
    _, same = _unit_layer_names("preact", channels=8, filters=8)
    add_inputs = {t._keras_history.operation.name for t in same.get_layer("u_add").input}
    assert same.input._keras_history.operation.name in add_inputs  # identity: raw x


@pytest.mark.parametrize("unit", ["preact", "original"])
def test_zero_pad_projection_adds_no_weights(unit):
    x = RNG.normal(size=(2, 8, 8, 4)).astype("float32")
    _, padded = _unit_layer_names(unit, channels=4, filters=8, stride=2,
                                  shortcut_projection="zero_pad", preact_type=None)
    _, projected = _unit_layer_names(unit, channels=4, filters=8, stride=2)
    names = [layer.name for layer in padded.layers]
    assert "u_0_conv" not in names and "u_0_bn" not in names
    # conv projection: 4 x 8 weights, plus a BN (4 x 8) in the original unit only
    # (fb models/resnet.lua:33-34 vs preresnet.lua:33-34).
    extra = 32 + (32 if unit == "original" else 0)
    assert projected.count_params() - padded.count_params() == extra
    assert ("u_0_bn" in [layer.name for layer in projected.layers]) == (unit == "original")
    # The unit is h + F with h = the zero-padded, subsampled input (or its
    # pre-activation): checked against F read from the same model.
    h_layer = padded.get_layer("u_0_zero_pad")
    probe = keras.Model(padded.input, [h_layer.input, h_layer.output,
                                       padded.get_layer("u_add").output])
    h_in, h, y = probe.predict(x, verbose=0)
    np.testing.assert_array_equal(h[..., :4], h_in[:, ::2, ::2])
    np.testing.assert_array_equal(h[..., 4:], 0)
    f = keras.Model(padded.input, padded.get_layer(
        "u_2_conv" if unit == "preact" else "u_2_bn").output).predict(x, verbose=0)
    # h + F added again in numpy: one float32 rounding; F from another graph's order
    np.testing.assert_allclose(y, h + f, rtol=1e-5, atol=1e-5)
    # Pre-activation: h takes the activated input (the width grows: both_preact).
    assert _source_op(padded, "u_0_zero_pad") == ("u_preact_relu" if unit == "preact"
                                               else padded.input._keras_history.operation.name)
    with pytest.raises(ValueError, match="zero_pad.*cannot narrow"):
        residual_unit(keras.Input((8, 8, 16)), 8, shortcut_projection="zero_pad")


def test_kernel_initializer_is_fb_fan_out_by_default():
    """fb.resnet.torch (preresnet.lua:197-200): normal(0, sqrt(2 / (k*k*out))),
    untruncated; WRN's MSRinit (utils.lua:3-8) uses k*k*in."""
    keras.utils.set_random_seed(0)
    fan_out, fan_in = np.sqrt(2 / (9 * 64)), np.sqrt(2 / (9 * 16))
    for option, std in ((None, fan_out), ("msra_fan_in", fan_in)):
        x = keras.Input((8, 8, 16))
        options = {} if option is None else dict(kernel_initializer=option)
        model = keras.Model(x, residual_unit(x, 64, name="u_", **options))
        layer = model.get_layer("u_1_conv")  # 3x3, 16 -> 64
        kernel = keras.ops.convert_to_numpy(layer.kernel)
        # a statistical bound: std of 9216 draws has relative sd 1/sqrt(2n) = 0.74%: 4 sd
        assert kernel.std() == pytest.approx(std, rel=0.03)
        assert np.abs(kernel).max() > 2.5 * std  # untruncated tails (Keras' he_normal: 2)
        config = layer.get_config()["kernel_initializer"]
        assert config["class_name"] == "VarianceScaling"
        assert {k: config["config"][k] for k in ("scale", "mode", "distribution")} == dict(
            scale=2.0, mode="fan_out" if option is None else "fan_in",
            distribution="untruncated_normal")
    x = keras.Input((8, 8, 16))  # one Initializer for every conv: each draws its own
    model = keras.Model(x, residual_unit(
        x, 16, kernel_initializer=keras.initializers.HeNormal(), name="u_"))
    k1, k2 = (keras.ops.convert_to_numpy(model.get_layer(f"u_{i}_conv").kernel)
              for i in (1, 2))
    assert k1.shape == k2.shape and not np.allclose(k1, k2)
    with pytest.raises(ValueError, match="kernel_initializer must be one of"):
        residual_unit(keras.Input((8, 8, 4)), 4, kernel_initializer="msra")


@pytest.mark.parametrize("kwargs,message", [
    (dict(subsample="avg"), "subsample='avg'.*'pool'"),
    (dict(naming="torch"), "naming='torch'.*'keras'"),
    (dict(conv_bias="yes"), "conv_bias must be True or False"),
])
def test_bad_unit_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        residual_unit(keras.Input((6, 6, 4)), 4, **kwargs)


def test_unit_spec_is_checked_once_frozen_and_plain_json(monkeypatch):
    spec = UnitSpec(unit="original", block="bottleneck", gated=True, dropout=0.3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.block = "basic"
    config = spec.get_config()
    assert json.loads(json.dumps(config)) == config and UnitSpec.from_config(config) == spec
    with pytest.raises(ValueError, match="dropout"):
        UnitSpec(dropout=1.5)
    with pytest.raises(ValueError, match="gated=True .* shortcut='scaling'"):
        dataclasses.replace(spec, shortcut="scaling")  # a changed copy is checked too
    with pytest.raises(TypeError, match="a spec or its fields, not both"):
        residual_unit(keras.Input((6, 6, 4)), 4, spec, block="basic")
    # A net of 9 units checks its one spec once, not once a unit.
    checks = []
    post_init = UnitSpec.__post_init__
    monkeypatch.setattr(UnitSpec, "__post_init__", lambda self: (checks.append(1),
                                                                 post_init(self)))
    model = zoo.resnet_cifar(n=3, input_shape=(8, 8, 3), classes=2)
    assert len(checks) == 1 and len(gate_layers(model)) == 0
    assert sum(l.name.endswith("_add") for l in model.layers) == 9


def test_keras_resnet_v2_preset_is_the_keras_layout():
    from keras_gresnet.zoo.resnets import IMAGENET_LAYOUTS

    assert IMAGENET_LAYOUTS["keras"][0] is KERAS_RESNET_V2
    assert (KERAS_RESNET_V2.subsample, KERAS_RESNET_V2.naming, KERAS_RESNET_V2.block) == (
        "pool", "keras", "bottleneck")
    assert IMAGENET_LAYOUTS["he"][0] == UnitSpec(block="bottleneck")


def test_original_unit_projection_has_batchnorm_and_single_block():
    names, model = _unit_layer_names("original", block="single", channels=8, filters=16)
    assert sorted(names) == sorted(["1_conv", "1_bn", "0_conv", "0_bn", "add", "out_relu"])
    assert model.get_layer("u_0_bn").input is model.get_layer("u_0_conv").output
    assert model.output.shape == (None, 8, 8, 16)


_REFERENCE = {}


def _unit_model(shortcut, **kwargs):
    """A unit whose shared layers carry the weights of one reference unit."""
    x = keras.Input((6, 6, 4))
    model = keras.Model(x, residual_unit(x, 4, shortcut=shortcut, name="u_", **kwargs))
    if "ref" not in _REFERENCE:
        x = keras.Input((6, 6, 4))
        _REFERENCE["ref"] = keras.Model(x, residual_unit(x, 4, name="u_"))
    assert "u_2_conv" in transfer_weights(_REFERENCE["ref"], model)
    return model


def test_conv_shortcut_projects_every_unit():
    names = [layer.name for layer in _unit_model("conv").layers]
    assert "u_0_conv" in names
    assert "u_0_conv" not in [layer.name for layer in _unit_model("identity").layers]


def test_dropout_shortcut_scales_h_by_one_half_as_he_describes():
    """HE Table 1: dropout on the shortcut "imposes a scale of lambda with an
    expectation of 0.5": the unit is 0.5 x + F at inference, and a training
    step keeps each element of x unscaled (not x / 0.5, as Keras' Dropout)."""
    x = RNG.normal(size=(3, 6, 6, 4)).astype("float32")
    dropped, identity = _unit_model("dropout"), _unit_model("identity")
    assert dropped.get_layer("u_shortcut_dropout").rate == 0.5
    f = identity.predict(x, verbose=0) - x  # same weights, same F
    # F recovered as (x + F) - x: ulps of |x + F| (~5e-7), then 0.5 x + F rounded once
    np.testing.assert_allclose(dropped.predict(x, verbose=0), 0.5 * x + f,
                               rtol=1e-5, atol=1e-5)
    layer = dropped.get_layer("u_shortcut_dropout")
    probe = keras.Model(dropped.input, [layer.input, layer.output, dropped.output])
    x_in, h, y = (keras.ops.convert_to_numpy(t) for t in probe(x, training=True))
    kept = h == x_in
    assert (kept | (h == 0)).all()  # each element x or 0, never 2x
    assert 0.35 < kept.mean() < 0.65
    f_train = keras.ops.convert_to_numpy(keras.Model(
        dropped.input, dropped.get_layer("u_2_conv").output)(x, training=True))
    # h + F added again in numpy: one float32 rounding; F from another graph's order
    np.testing.assert_allclose(y, h + f_train, rtol=1e-5, atol=1e-5)


def test_shortcut_dropout_expectation_is_half_in_training_and_inference():
    x = np.linspace(-2, 2, 4000).astype("float32").reshape(1, 4000)
    layer = ShortcutDropout(0.5, seed=3)
    samples = np.stack([keras.ops.convert_to_numpy(layer(x, training=True))
                        for _ in range(1000)])
    assert set(np.unique(np.round(samples / np.where(x == 0, 1, x), 5))) <= {0.0, 1.0}
    # a statistical bound: the mean of 1000 draws of 0 or x has sd 0.5|x|/sqrt(1000) <= 0.032
    # (|x| <= 2): 0.2 is 6 sd.
    np.testing.assert_allclose(samples.mean(axis=0), 0.5 * x, atol=0.2)  # per element
    assert abs((samples / np.where(x == 0, 1, x)).mean() - 0.5) < 0.01  # E[lambda] = 0.5
    # 0.5 * x is exact in float32 (a power of two): rtol is slack
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), 0.5 * x, rtol=1e-6)
    quarter = ShortcutDropout(0.75)
    # 1 - 0.75 = 0.25 exactly: 0.25 * x is exact too
    np.testing.assert_allclose(keras.ops.convert_to_numpy(quarter(x)), 0.25 * x, rtol=1e-6)
    config = layer.get_config()
    assert config["rate"] == 0.5 and config["seed"] == 3
    assert ShortcutDropout.from_config(config).get_config() == config
    with pytest.raises(ValueError, match=r"rate must be a number in \[0, 1\)"):
        ShortcutDropout(1.0)


def test_zero_pad_shortcut_is_fb_type_a():
    """fb.resnet.torch's shortcutType A: a 1x1 stride-2 subsampling, then
    zero channels appended after x's own."""
    x = RNG.normal(size=(2, 7, 6, 3)).astype("float32")
    out = keras.ops.convert_to_numpy(ZeroPadShortcut(8, 2)(x))
    assert out.shape == (2, 4, 3, 8)
    np.testing.assert_array_equal(out[..., :3], x[:, ::2, ::2])
    np.testing.assert_array_equal(out[..., 3:], 0)
    assert ZeroPadShortcut(8, 2).compute_output_shape((None, 7, 6, 3)) == (None, 4, 3, 8)
    assert ZeroPadShortcut.from_config(ZeroPadShortcut(8, 2).get_config()).stride == 2


@pytest.mark.parametrize("size,stride", [((8, 6), 2), ((9, 6), 3), ((8, 7), 2), ((4, 4), 4)])
def test_zero_pad_shortcut_subsamples_exactly_in_a_model(size, stride):
    """Sizes the stride divides take the reshape-and-slice path, the others
    the strided slice; in a model of unknown batch size both are
    ``x[:, ::s, ::s]`` to the bit, in float32 and bfloat16."""
    for dtype in ("float32", "bfloat16"):
        inputs = keras.Input((*size, 3), dtype=dtype)
        model = keras.Model(inputs, ZeroPadShortcut(5, stride, dtype=dtype)(inputs))
        x = RNG.normal(size=(3, *size, 3)).astype("float32")
        out = keras.ops.convert_to_numpy(
            keras.ops.cast(model(keras.ops.cast(x, dtype)), "float32"))
        expect = keras.ops.convert_to_numpy(
            keras.ops.cast(keras.ops.cast(x, dtype), "float32"))[:, ::stride, ::stride]
        assert out.shape == (3, -(-size[0] // stride), -(-size[1] // stride), 5)
        np.testing.assert_array_equal(out[..., :3], expect)
        np.testing.assert_array_equal(out[..., 3:], 0)


@pytest.mark.parametrize("training", [True, False])
def test_zero_pad_shortcut_values_and_gradient_in_both_modes(training):
    """Training (a slice) and inference (an index) give ``x[:, ::2, ::2]``
    padded, and the gradient reaching x is ``dy``'s first channels at the
    kept positions and 0 elsewhere, exactly, on every path (a size the
    stride divides and one it does not)."""
    for size in ((8, 6), (7, 6)):
        x = keras.ops.convert_to_tensor(RNG.normal(size=(2, *size, 3)).astype("float32"))
        dy = RNG.normal(size=(2, -(-size[0] // 2), 3, 5)).astype("float32")
        layer = ZeroPadShortcut(5, 2)
        out = keras.ops.convert_to_numpy(layer(x, training=training))
        np.testing.assert_array_equal(out[..., :3], keras.ops.convert_to_numpy(x)[:, ::2, ::2])
        np.testing.assert_array_equal(out[..., 3:], 0)
        grad = _input_gradient(lambda v: layer(v, training=training), x, dy)
        expect = np.zeros((2, *size, 3), "float32")
        expect[:, ::2, ::2] = dy[..., :3]
        np.testing.assert_array_equal(grad, expect)


def _input_gradient(fn, x, dy):
    """d(sum(fn(x) * dy)) / dx on the current backend."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(fn(x) * dy)
        return tape.gradient(loss, x).numpy()
    if backend == "jax":
        import jax
        return np.asarray(jax.grad(lambda v: (fn(v) * dy).sum())(x))
    import torch
    v = x.detach().clone().requires_grad_(True)
    (fn(v) * torch.as_tensor(dy)).sum().backward()
    return v.grad.numpy()


@pytest.mark.tensorflow_only
def test_zero_pad_shortcut_gradient_runs_no_strided_slice_grad():
    """TensorFlow's CPU ``StridedSliceGrad`` walks element by element even
    for a unit-stride slice (6 to 11 ms of a gresnet_cifar step,
    docs/benchmarks.md); where the stride divides the size, the shortcut's
    gradient in training is a ``Pad`` instead."""
    import tensorflow as tf

    layer = ZeroPadShortcut(16, 2)  # no channels added: its only Pad is the slice's gradient
    dy = tf.ones((1, 16, 16, 16))

    @tf.function
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, training=True) * dy)
        return tape.gradient(loss, x)

    spec = tf.TensorSpec((None, 32, 32, 16))
    ops_run = {op.type for op in gradient.get_concrete_function(spec).graph.get_operations()}
    assert "StridedSliceGrad" not in ops_run and "Pad" in ops_run


def test_scaling_shortcut_scales_both_branches():
    x = RNG.normal(size=(3, 6, 6, 4)).astype("float32")
    scaled = _unit_model("scaling", shortcut_scale=0.5, residual_scale=0.5)
    plain = _unit_model("identity")
    f = plain.predict(x, verbose=0) - x  # same seed, same F
    # F recovered as (x + F) - x: ulps of |x + F|, then 0.5 x + 0.5 F rounded once
    np.testing.assert_allclose(scaled.predict(x, verbose=0), 0.5 * x + 0.5 * f,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shortcut,bias,expect", [
    ("exclusive_gating", -30.0, "shortcut"),   # g ~ 0: only h(x)
    ("exclusive_gating", 30.0, "residual"),    # g ~ 1: only F
    ("shortcut_gating", 30.0, "residual"),     # (1-g) h + F, g ~ 1: only F
    ("shortcut_gating", -30.0, "sum"),         # g ~ 0: h + F
])
def test_shortcut_gating_limits(shortcut, bias, expect):
    x = RNG.normal(size=(3, 6, 6, 4)).astype("float32")
    out = _unit_model(shortcut, gate_bias=bias).predict(x, verbose=0)
    f = _unit_model("identity").predict(x, verbose=0) - x
    expected = {"shortcut": x, "residual": f, "sum": x + f}[expect]
    # g = sigmoid(+-30 + h w) is 0 or 1 within ~1e-11: float32 round-off of F is left
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_gated_unit_rejects_he_gating_shortcuts():
    x = keras.Input((6, 6, 4))
    with pytest.raises(ValueError, match="gated=True.*shortcut"):
        residual_unit(x, 4, gated=True, shortcut="exclusive_gating")
    with pytest.raises(ValueError, match="unit="):
        residual_unit(x, 4, unit="postact")


@pytest.mark.parametrize("residual,gated,expected", [
    (False, False, ["dense", "bn", "relu"]),
    (False, True, ["dense", "bn", "relu", "gate"]),
    (True, False, ["1_dense", "1_bn", "1_relu", "2_dense", "2_bn", "2_relu", "add"]),
    (True, True, ["1_dense", "1_bn", "1_relu", "2_dense", "2_bn", "2_relu", "gate"]),
])
def test_dense_units_follow_gr(residual, gated, expected):
    x = keras.Input((50,))
    model = keras.Model(x, dense_unit(x, 50, residual=residual, gated=gated, name="b_"))
    assert [layer.name[2:] for layer in model.layers[1:]] == expected
    assert [g.name for g in gate_layers(model)] == (["b_gate"] if gated else [])


def test_gate_layers_finds_nested_gates_in_order():
    x = keras.Input((50,))
    y = dense_unit(x, 50, residual=True, gated=True, name="a_")
    inner = keras.Model(x, dense_unit(y, 50, residual=True, gated=True, name="b_"))
    z = keras.Input((50,))
    outer = keras.Model(z, dense_unit(inner(z), 50, gated=True, name="c_"))
    assert [g.name for g in gate_layers(outer)] == ["a_gate", "b_gate", "c_gate"]
