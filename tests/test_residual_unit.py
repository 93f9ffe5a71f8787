"""``ResidualUnit`` and ``DenseUnit``: the functional units as Keras layers, for
``keras.Sequential`` and subclassed models (same math, saving, one gate)."""

import json

import keras
import numpy as np
import pytest

from keras_gresnet.layers import DenseUnit, ResidualUnit, dense_unit, residual_unit

RNG = np.random.default_rng(0)
BATCH = 2


def _randomize(model):
    """Every weight of ``model`` random (BN variances positive, gates at
    0.7), so that no part of the unit can pass by being an identity."""
    for w in model.weights:
        if w.name == "k":
            value = np.float32(0.7)
        elif w.name == "moving_variance":
            value = RNG.uniform(0.5, 1.5, w.shape)
        else:
            value = RNG.normal(0.0, 0.3, w.shape)
        w.assign(np.asarray(value, "float32"))


def _inputs(shape):
    return RNG.normal(size=(BATCH, *shape)).astype("float32")


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _gates(layer):
    """The trainable scalars named ``k`` of ``layer``."""
    return [w for w in layer.trainable_weights if w.name == "k" and tuple(w.shape) == ()]


# (layer class, functional unit, input shape, positional argument, keyword arguments)
CASES = {
    "preact_basic_gated_stride2_widening": (
        ResidualUnit, residual_unit, (8, 8, 4), 8, dict(stride=2, gated=True, k_initial=0.7)),
    "original_bottleneck": (
        ResidualUnit, residual_unit, (8, 8, 4), 4, dict(unit="original", block="bottleneck",
                                                        expansion=2)),
    "relu_before_add": (ResidualUnit, residual_unit, (8, 8, 4), 4, dict(unit="relu_before_add")),
    "zero_pad_projection": (
        ResidualUnit, residual_unit, (8, 8, 4), 8, dict(stride=2,
                                                        shortcut_projection="zero_pad")),
    "dense_gresnet_block": (DenseUnit, dense_unit, (6,), 6, dict(residual=True, gated=True)),
    "dense_gated_plain_block": (DenseUnit, dense_unit, (6,), 6, dict(gated=True)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_layer_computes_the_functional_unit(case):
    cls, build, shape, width, options = CASES[case]
    inputs = keras.Input(shape)
    functional = keras.Model(inputs, build(inputs, width, name="unit_", **options))
    _randomize(functional)
    layer = cls(width, name="unit", **options)
    x = _inputs(shape)
    layer(x)  # built
    # the same layers, weights and order: the layer's sublayers are named
    # as the functional unit of prefix "{layer name}_"
    names = [w.path.split("/")[-2:] for w in layer.weights]
    assert len(layer.weights) == len(functional.weights)
    assert names == [w.path.split("/")[-2:] for w in functional.weights]
    assert len(_gates(layer)) == options.get("gated", False)
    layer.set_weights(functional.get_weights())
    # The same ops in the same order on the same float32 values: equal up to
    # the last bits (1e-6 relative: a few float32 ulps, room for a backend
    # choosing another kernel for another call; on CPU they are identical).
    expected = _numpy(functional(x, training=False))
    np.testing.assert_allclose(_numpy(layer(x, training=False)), expected, rtol=1e-6, atol=1e-6)
    assert layer.compute_output_shape((BATCH, *shape)) == expected.shape
    # training=True reaches the sublayers (BN on the batch's statistics)
    np.testing.assert_allclose(_numpy(layer(x, training=True)),
                               _numpy(functional(x, training=True)), rtol=1e-6, atol=1e-6)


def _sequential():
    return keras.Sequential([
        keras.Input((8, 8, 4)),
        ResidualUnit(4),
        ResidualUnit(8, stride=2, gated=True, k_initial=0.5),
        ResidualUnit(4, unit="original", block="bottleneck", expansion=2, gated=True),
        keras.layers.GlobalAveragePooling2D(),
        DenseUnit(8, residual=True, gated=True),
        keras.layers.Dense(3),
    ])


def test_a_sequential_of_units_saves_and_loads_in_safe_mode(tmp_path):
    model = _sequential()
    _randomize(model)
    x = _inputs((8, 8, 4))
    expected = model.predict(x, verbose=0)
    model.save(tmp_path / "units.keras")
    loaded = keras.saving.load_model(tmp_path / "units.keras", safe_mode=True)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)
    assert [type(layer) for layer in loaded.layers] == [type(layer) for layer in model.layers]
    assert [type(layer) for layer in loaded.layers[:3]] == [ResidualUnit] * 3
    # one scalar k per gated unit, none in the ungated one, with its value
    assert [len(_gates(layer)) for layer in loaded.layers] == [0, 1, 1, 0, 1, 0]
    assert len(_gates(loaded)) == 3
    assert loaded.layers[0].gate is None
    assert loaded.layers[1].gate.g == pytest.approx(0.7)


class TinyNet(keras.Model):
    """A subclassed model: a gated unit, a pool and a classifier."""

    def __init__(self, filters=4, classes=3, **kwargs):
        super().__init__(**kwargs)
        self.filters, self.classes = filters, classes
        self.block = ResidualUnit(filters, gated=True, k_initial=0.5)
        self.pool = keras.layers.GlobalAveragePooling2D()
        self.head = keras.layers.Dense(classes)

    def call(self, x, training=None):
        return self.head(self.pool(self.block(x, training=training)))

    def get_config(self):
        return {"filters": self.filters, "classes": self.classes, "name": self.name}


def test_a_subclassed_model_trains_its_gate_and_round_trips_its_config():
    model = TinyNet()
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(_inputs((8, 8, 4)), np.array([0, 2]), batch_size=BATCH, epochs=1, verbose=0)
    [k] = _gates(model)
    assert k is model.block.gate.k
    assert float(_numpy(k)) != 0.5  # the gate k received a gradient
    twin = TinyNet.from_config(model.get_config())
    assert twin.get_config() == model.get_config()
    config = model.block.get_config()
    json.dumps(config)  # plain JSON
    assert ResidualUnit.from_config(config).get_config() == config


def test_the_config_holds_every_unit_spec_field_and_a_serialised_initializer():
    unit = ResidualUnit(4, stride=2, preact_type="both_preact", block="single",
                        kernel_initializer=keras.initializers.HeNormal(seed=1), name="u")
    config = json.loads(json.dumps(unit.get_config()))
    twin = ResidualUnit.from_config(config)
    assert twin.spec.block == "single" and twin.preact_type == "both_preact"
    assert twin.get_config() == config
    assert _numpy(twin(_inputs((8, 8, 4)))).shape == (BATCH, 4, 4, 4)
    dense = DenseUnit(6, gated=True, k_initial=0.3, bn_momentum=0.9)
    assert DenseUnit.from_config(dense.get_config()).get_config() == dense.get_config()


def test_the_sublayers_take_the_units_dtype_policy():
    unit = ResidualUnit(4, gated=True, dtype="mixed_bfloat16")
    y = unit(_inputs((8, 8, 4)))
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    assert {layer.dtype_policy.name for layer in unit.inner.layers[1:]} == {"mixed_bfloat16"}
    assert keras.backend.standardize_dtype(unit.gate.k.dtype) == "float32"


@pytest.mark.parametrize("make, argument", [
    (lambda: ResidualUnit(4, unit="preactivation"), "unit"),
    (lambda: ResidualUnit(4, block="wide"), "block"),
    (lambda: ResidualUnit(4, gated="yes"), "gated"),
    (lambda: ResidualUnit(4, dropout=1.5), "dropout"),
    (lambda: ResidualUnit(4, shortcut="scaling", gated=True), "shortcut"),
    (lambda: ResidualUnit(4, kernel_initializer="no_such_initializer"), "kernel_initializer"),
    (lambda: ResidualUnit(0), "filters"),
    (lambda: ResidualUnit(4.0), "filters"),
    (lambda: ResidualUnit(4, stride=0), "stride"),
    (lambda: ResidualUnit(4, preact_type="both"), "preact_type"),
    (lambda: ResidualUnit(4, unit="original", preact_type="branch"), "preact_type"),
    (lambda: ResidualUnit(4, blok="basic"), "blok"),
    (lambda: DenseUnit(0), "units"),
    (lambda: DenseUnit(4, residual=1), "residual"),
    (lambda: DenseUnit(4, gated=None), "gated"),
    (lambda: DenseUnit(4, k_initial="1"), "k_initial"),
    (lambda: DenseUnit(4, bn_momentum=1.5), "bn_momentum"),
])
def test_bad_arguments_fail_at_construction_naming_the_argument(make, argument):
    with pytest.raises(ValueError, match=argument):
        make()


def test_a_dense_block_with_a_shortcut_says_what_width_it_needs():
    with pytest.raises(ValueError, match="needs 4 input features"):
        DenseUnit(4, residual=True)(_inputs((6,)))


def test_the_package_tools_see_the_gates_inside_the_units():
    """``gate_layers`` (and so ``analysis.gate_values``) finds each gated
    unit's one gate inside a Sequential model, in network order."""
    from keras_gresnet.layers.graph import gate_layers

    model = keras.Sequential([
        keras.Input((8, 8, 4)),
        ResidualUnit(4, gated=True, name="first"),
        ResidualUnit(4, name="plain"),
        ResidualUnit(4, gated=True, name="last"),
    ])
    gates = gate_layers(model)
    assert [g.name for g in gates] == ["first_gate", "last_gate"]
    assert [g.k.path for g in gates] == [u.gate.k.path for u in (model.layers[0], model.layers[2])]
