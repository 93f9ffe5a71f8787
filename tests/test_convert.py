"""From Keras Applications to GResNet: a Keras ResNetV2 becomes the zoo's
``resnet_imagenet(layout="keras")``, every weight carried, the function kept.

Keras' ImageNet weights cannot be downloaded here: the sources have random
weights and non-trivial batch-norm statistics instead."""

import keras
import numpy as np
import pytest

from keras_gresnet import convert, zoo
from keras_gresnet.layers import ResidualGate, gate_layers

RNG = np.random.default_rng(0)
SMALL = dict(include_top=False, pooling="avg", input_shape=(64, 64, 3))


def _nontrivial(model):
    """Non-trivial BN statistics and biases: an identity, a missed or
    misplaced weight cannot pass by accident."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            for w in (layer.moving_mean, layer.beta):
                w.assign(RNG.normal(size=w.shape, scale=0.2).astype("float32"))
            for w in (layer.moving_variance, layer.gamma):
                w.assign(RNG.uniform(0.5, 1.5, size=w.shape).astype("float32"))
        if isinstance(layer, keras.layers.Conv2D) and layer.use_bias:
            layer.bias.assign(RNG.normal(size=layer.bias.shape, scale=0.2).astype("float32"))
    return model


def _assert_same_function(source, target, batch=2):
    x = RNG.normal(size=(batch, *source.input.shape[1:])).astype("float32")
    want = keras.ops.convert_to_numpy(source(x, training=False))
    got = keras.ops.convert_to_numpy(target(x, training=False))
    assert got.shape == want.shape
    assert np.abs(want).max() > 1e-2  # not a degenerate output
    # the same layers and weights in another graph: float32 reordering, ~1e-6 per layer, 50 deep
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _weight_count(model, skip=()):
    return sum(len(layer.weights) for layer in model.layers if not isinstance(layer, skip))


@pytest.mark.integration
def test_resnet50v2_becomes_a_gresnet_with_the_same_function():
    source = _nontrivial(keras.applications.ResNet50V2(weights=None, **SMALL))
    for gated in (True, False):
        model = convert.from_keras_applications(source, gated=gated)
        _assert_same_function(source, model)
        # Every source weight was carried (stem 2, 16 units x 16, 4 projections
        # x 2, post_bn 4), value for value.
        assert _weight_count(model, skip=ResidualGate) == _weight_count(source) == 270
        for layer in (layer for layer in source.layers if layer.weights):
            for want, got in zip(layer.get_weights(),
                                 model.get_layer(layer.name).get_weights()):
                np.testing.assert_array_equal(got, want)
        gates = gate_layers(model)
        if not gated:
            assert model.name == "resnet50v2" and not gates
            assert model.count_params() == source.count_params()
            continue
        # GR: one scalar k = 1 per unit.
        assert model.name == "gresnet50v2" and len(gates) == 3 + 4 + 6 + 3
        assert model.count_params() - source.count_params() == 16
        assert [float(g.k.numpy()) for g in gates] == [1.0] * 16
        # The gates sit on F: with k = 0 only the shortcuts are left.
        for gate in gates:
            gate.k.assign(0.0)
        x = RNG.normal(size=(2, 64, 64, 3)).astype("float32")
        # an inequality: without F the outputs must move far more than round-off (1e-2 >> 1e-5)
        assert not np.allclose(model(x, training=False), source(x, training=False), atol=1e-2)


def test_by_name_with_the_top_and_keras_arguments():
    model = convert.from_keras_applications(
        "resnet50v2", input_shape=(96, 96, 3), classes=7, classifier_activation=None,
    )
    assert model.input.shape == (None, 96, 96, 3) and model.output.shape == (None, 7)
    assert model.get_layer("predictions").activation is keras.activations.linear
    assert len(gate_layers(model)) == 16


@pytest.mark.integration
def test_with_the_top_at_224():
    source = _nontrivial(keras.applications.ResNet50V2(weights=None, classifier_activation=None))
    model = convert.from_keras_applications(source)
    assert model.input.shape == (None, 224, 224, 3) and model.output.shape == (None, 1000)
    _assert_same_function(source, model, batch=1)


def test_keras_layout_in_the_zoo():
    """Keras' ResNetV2 layout, as zoo arguments: stride on the last unit of
    stages 2-4, max-pool shortcut there, no stem BN, biases where no BN follows."""
    model = zoo.resnet_imagenet(50, layout="keras", **SMALL)
    strided = [layer.name for layer in model.layers
               if isinstance(layer, keras.layers.Conv2D) and layer.strides == (2, 2)]
    assert strided == ["conv1_conv", "conv2_block3_2_conv", "conv3_block4_2_conv",
                       "conv4_block6_2_conv"]
    pools = [layer.name for layer in model.layers
             if isinstance(layer, keras.layers.MaxPooling2D) and layer.pool_size == (1, 1)]
    assert pools == ["conv2_block3_0_pool", "conv3_block4_0_pool", "conv4_block6_0_pool"]
    biased = {layer.name.split("_", 2)[-1] for layer in model.layers
              if isinstance(layer, keras.layers.Conv2D) and layer.use_bias}
    assert biased == {"conv", "0_conv", "3_conv"}  # conv1_conv, projections, last of F
    assert "conv1_bn" not in [layer.name for layer in model.layers]
    assert model.get_layer("conv5_block3_out").output is model.get_layer("post_bn").input
    assert model.get_layer("post_bn").epsilon == pytest.approx(1.001e-5)


@pytest.mark.integration
def test_imagenet_weights_path(tmp_path, monkeypatch):
    """``weights="imagenet"`` with the download faked: Keras' own file (its
    legacy h5 layout, its name) loads into Keras' net, then reaches the GResNet."""
    legacy_h5 = pytest.importorskip("keras.src.legacy.saving.legacy_h5_format")
    file_utils = pytest.importorskip("keras.src.utils.file_utils")
    h5py = pytest.importorskip("h5py")
    published = _nontrivial(keras.applications.ResNet50V2(weights=None, include_top=False))
    path = tmp_path / "notop.h5"
    with h5py.File(path, "w") as f:
        legacy_h5.save_weights_to_hdf5_group(f, published)
    asked = []
    monkeypatch.setattr(file_utils, "get_file",
                        lambda fname, origin, **kw: asked.append(fname) or str(path))
    model = zoo.gresnet50v2(include_top=False, weights="imagenet")
    assert asked == ["resnet50v2_weights_tf_dim_ordering_tf_kernels_notop.h5"]
    assert model.name == "gresnet50v2" and model.input.shape == (None, None, None, 3)
    x = RNG.normal(size=(1, 32, 32, 3)).astype("float32")
    # Keras' net vs the converted one: float32 reordering, ~1e-6 per layer, 50 layers
    np.testing.assert_allclose(model(x, training=False), published(x, training=False),
                               rtol=1e-4, atol=1e-4)
    # Keras' preprocessing inside the model: raw pixels in, the same outputs
    # as preprocess_input outside (x / 127.5 - 1 against (x / 255 - 0.5) / 0.5
    # in float32: a few ulps of inputs in [-1, 1], carried through 50 layers)
    pixels = RNG.integers(0, 256, size=(1, 32, 32, 3)).astype("float32")
    raw_in = zoo.gresnet50v2(include_top=False, weights="imagenet", include_preprocessing=True)
    assert raw_in.get_layer("preprocessing").get_config()["mean"] == [0.5, 0.5, 0.5]
    raw = keras.ops.convert_to_numpy(raw_in(pixels, training=False))
    want = published(convert.preprocess_input(pixels.copy()), training=False)
    np.testing.assert_allclose(raw, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("application,units", [
    ("ResNet101V2", 3 + 4 + 23 + 3),
    pytest.param("ResNet152V2", 3 + 8 + 36 + 3, marks=pytest.mark.slow),
])
@pytest.mark.integration
def test_deeper_resnets_convert(application, units):
    source = getattr(keras.applications, application)(
        weights=None, include_top=False, input_shape=(32, 32, 3))
    model = convert.from_keras_applications(_nontrivial(source))
    assert len(gate_layers(model)) == units
    assert model.count_params() - source.count_params() == units
    assert _weight_count(model, skip=ResidualGate) == _weight_count(source)
    _assert_same_function(source, model)


@pytest.mark.integration
def test_152_maps_every_layer():
    source = keras.applications.ResNet152V2(weights=None, include_top=False,
                                            input_shape=(32, 32, 3))
    model = convert.from_keras_applications(source, gated=False)
    weighted = {layer.name for layer in source.layers if layer.weights}
    assert weighted == {layer.name for layer in model.layers if layer.weights}
    assert len(weighted) == 1 + 50 * 6 + 4 + 1  # stem, units, projections, post_bn


# ----------------------------------------------------------------- bad input

def test_unknown_application_name():
    for name in ("ResNet50", "ResNet50V3", "gresnet50", 50):
        with pytest.raises(ValueError, match=r"accepted: 'ResNet50V2', 'ResNet101V2', "
                                             r"'ResNet152V2', or a model"):
            convert.from_keras_applications(name)


def test_a_post_activation_resnet50_is_refused():
    v1 = keras.applications.ResNet50(weights=None, include_top=False, input_shape=(32, 32, 3))
    with pytest.raises(ValueError, match=r"'resnet50' is not a Keras Applications "
                                         r"pre-activation ResNet.*accepted: 'ResNet50V2'"):
        convert.from_keras_applications(v1)


@pytest.fixture(scope="module")
def tiny_resnet50v2():
    return keras.applications.ResNet50V2(weights=None, include_top=False,
                                         input_shape=(32, 32, 3))


def test_a_model_brings_its_own_arguments(tiny_resnet50v2):
    source = tiny_resnet50v2
    with pytest.raises(ValueError, match=r"classes, input_shape build a model from a name"):
        convert.from_keras_applications(source, input_shape=(64, 64, 3), classes=10)
    with pytest.raises(ValueError, match=r"gated must be True or False"):
        convert.from_keras_applications(source, gated="yes")


def test_a_weight_without_a_target_is_an_error(tiny_resnet50v2):
    source = tiny_resnet50v2
    extra = keras.layers.Dense(3, name="extra_head")(source.output)
    with pytest.raises(ValueError, match=r"'with_extra' has weighted layers with no "
                                         r"counterpart in 'gresnet50v2' \(1\): \['extra_head'\]"):
        convert.from_keras_applications(keras.Model(source.input, extra, name="with_extra"))


def test_imagenet_builders_are_documented_and_registered():
    for depth, builder in ((50, convert.gresnet50v2), (101, convert.gresnet101v2),
                           (152, convert.gresnet152v2)):
        assert builder.__name__ == f"gresnet{depth}v2"
        assert f"ResNet{depth}V2" in builder.__doc__ and "ImageNet" in builder.__doc__
        # one builder, reachable by name like every zoo model, trained by default
        # with HE's ImageNet recipe; its weights are Keras' own
        assert zoo.model_builder(builder.__name__) is builder is getattr(zoo, builder.__name__)
        assert builder.keras_weights and builder.default_recipe == "he_imagenet"


def test_keras_weights_are_checked_before_keras_builds():
    with pytest.raises(ValueError, match=r"weights must be None, 'imagenet' \(Keras' own\)"):
        zoo.gresnet50v2(weights="fashion_mnist")
    with pytest.raises(ValueError, match="gresnet50v2: include_preprocessing=True takes"):
        zoo.gresnet50v2(include_preprocessing=True)  # no weights, no statistics
