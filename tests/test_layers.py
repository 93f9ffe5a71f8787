"""The gate layers and the residual units (GR's gate, HE Tables 1-2)."""

import keras
import numpy as np
import pytest

from helpers import sgd_step_changes
from keras_gresnet.zoo import transfer_weights
from keras_gresnet.layers import (
    UNITS,
    ResidualGate,
    ScaledAdd,
    ShortcutGate,
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
    assert float(step) == pytest.approx(-np.mean(2 * u * du_dk), rel=1e-4)


def test_gate_with_nonpositive_k_is_exact_identity():
    x, fx = _pair()
    for form in ("residual", "plain"):
        out = keras.ops.convert_to_numpy(ResidualGate(form, k_initial=-0.1)([x, fx]))
        np.testing.assert_array_equal(out, x)


def test_gate_activation_is_configurable_and_serialized():
    x, fx = _pair()
    gate = ResidualGate("residual", k_initial=-1.0, activation="linear", name="g")
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
    np.testing.assert_allclose(model.predict(x, verbose=0),
                               x[:, ::2, ::2] + f.predict(x, verbose=0), rtol=1e-5, atol=1e-5)
    # A width change still projects (with a bias: no BN follows in a preact unit).
    _, model = _unit_layer_names("preact", block="bottleneck", channels=8, filters=4,
                                 subsample="pool", conv_bias=True)
    assert model.get_layer("u_0_conv").use_bias
    # Post-activation: every conv feeds a BN, so no bias anywhere.
    _, model = _unit_layer_names("original", channels=8, filters=16, conv_bias=True)
    assert not any(getattr(layer, "use_bias", False) for layer in model.layers)


@pytest.mark.parametrize("kwargs,message", [
    (dict(subsample="avg"), "subsample='avg'.*'pool'"),
    (dict(naming="torch"), "naming='torch'.*'keras'"),
    (dict(conv_bias="yes"), "conv_bias must be True or False"),
])
def test_bad_unit_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        residual_unit(keras.Input((6, 6, 4)), 4, **kwargs)


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


def test_dropout_shortcut_is_identity_at_inference_and_drops_in_training():
    x = RNG.normal(size=(3, 6, 6, 4)).astype("float32")
    dropped, identity = _unit_model("dropout"), _unit_model("identity")
    assert dropped.get_layer("u_shortcut_dropout").rate == 0.5
    np.testing.assert_allclose(dropped.predict(x, verbose=0), identity.predict(x, verbose=0),
                               rtol=1e-6, atol=1e-6)
    train_out = keras.ops.convert_to_numpy(dropped(x, training=True))
    assert not np.allclose(train_out, keras.ops.convert_to_numpy(identity(x, training=True)))


def test_scaling_shortcut_scales_both_branches():
    x = RNG.normal(size=(3, 6, 6, 4)).astype("float32")
    scaled = _unit_model("scaling", shortcut_scale=0.5, residual_scale=0.5)
    plain = _unit_model("identity")
    f = plain.predict(x, verbose=0) - x  # same seed, same F
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
