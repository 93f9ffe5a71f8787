"""Feature maps (``zoo.feature_extractor``) and the preprocessing that
travels with the weights (``include_preprocessing``)."""

import inspect

import keras
import numpy as np
import pytest

from helpers import randomize_bn, random_inputs
from keras_gresnet import data, zoo
from keras_gresnet.layers import PixelNormalization
from keras_gresnet.weights import get_weights

CIFAR = (16, 16, 3)
IMAGENET = (64, 64, 3)


def layer_output(model, name, x):
    return keras.ops.convert_to_numpy(keras.Model(model.input, model.get_layer(name).output)(x))


def features(extractor, x):
    return {k: keras.ops.convert_to_numpy(v) for k, v in extractor(x).items()}


# ------------------------------------------------------------ feature maps


@pytest.mark.parametrize("builder, kwargs, shape, expected", [
    ("gresnet_cifar", dict(n=1), CIFAR, {"P0": 16, "P1": 32, "P2": 64}),
    ("resnet_cifar", dict(n=1, unit="original"), CIFAR, {"P0": 16, "P1": 32, "P2": 64}),
    ("resnet_cifar", dict(n=1, block="bottleneck"), CIFAR, {"P0": 64, "P1": 128, "P2": 256}),
    ("wide_gresnet", dict(n=1, widen_factor=2), CIFAR, {"P0": 32, "P1": 64, "P2": 128}),
    ("preact_resnet50", {}, IMAGENET, {"P2": 256, "P3": 512, "P4": 1024, "P5": 2048}),
])
def test_keys_are_log2_strides_with_the_stage_widths(builder, kwargs, shape, expected):
    model = zoo.get_model(builder, input_shape=shape, **kwargs)
    outputs = zoo.feature_extractor(model).output
    assert list(outputs) == list(expected)
    for key, channels in expected.items():
        stride = 2 ** int(key[1:])
        assert tuple(outputs[key].shape[1:]) == (shape[0] // stride, shape[1] // stride, channels)


@pytest.mark.parametrize("builder, kwargs, shape, names", [
    ("gresnet_cifar", dict(n=2), CIFAR,
     {"P0": "conv2_block2_gate", "P1": "conv3_block2_gate", "P2": "conv4_block2_gate"}),
    ("resnet_cifar", dict(n=2, block="bottleneck"), CIFAR,
     {"P0": "conv2_block2_add", "P1": "conv3_block2_add", "P2": "conv4_block2_add"}),
    ("gresnet50", {}, (32, 32, 3),
     {"P2": "conv2_block3_gate", "P3": "conv3_block4_gate", "P4": "conv4_block6_gate",
      "P5": "conv5_block3_gate"}),
])
def test_a_feature_map_is_its_stages_last_unit_before_the_final_bn_relu(
        builder, kwargs, shape, names):
    model = zoo.get_model(builder, input_shape=shape, **kwargs)
    randomize_bn(model)
    x = random_inputs(model, batch=2)
    got = features(zoo.feature_extractor(model), x)
    assert zoo.stage_layers(model) == names
    for key, name in names.items():
        # the same layers and weights in another Model: only fusion/summation order differs
        np.testing.assert_allclose(got[key], layer_output(model, name, x), rtol=1e-5, atol=1e-5)
    last = list(names)[-1]  # not post_relu's output: a unit's sum can be negative
    assert got[last].min() < 0
    assert layer_output(model, "post_relu", x).min() >= 0


def test_stride_last_layout_keys_the_last_unit_at_each_resolution():
    model = zoo.resnet_imagenet(depth=50, layout="keras", input_shape=IMAGENET)
    assert zoo.stage_layers(model) == {
        "P2": "conv2_block2_out", "P3": "conv3_block3_out", "P4": "conv4_block5_out",
        "P5": "conv5_block3_out"}
    outputs = zoo.feature_extractor(model).output
    assert {k: tuple(v.shape[1:]) for k, v in outputs.items()} == {
        "P2": (16, 16, 256), "P3": (8, 8, 512), "P4": (4, 4, 1024), "P5": (2, 2, 2048)}


def test_stages_picks_keys_in_pyramid_order():
    model = zoo.gresnet_cifar(n=1, input_shape=CIFAR)
    extractor = zoo.feature_extractor(model, stages=["P2", "P0"])
    assert list(extractor.output) == ["P0", "P2"]


def test_loaded_model_and_extractor_survive_a_keras_round_trip(tmp_path):
    model = zoo.gresnet_cifar(n=1, input_shape=CIFAR, include_preprocessing=dict(
        method="meanstd", mean=[0.4, 0.5, 0.6], std=[0.2, 0.25, 0.3]))
    randomize_bn(model)
    x = np.random.default_rng(1).integers(0, 256, size=(2, *CIFAR)).astype("uint8")
    expected = features(zoo.feature_extractor(model), x)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras", safe_mode=True)
    extractor = zoo.feature_extractor(loaded)
    for key, value in features(extractor, x).items():
        # the same model reloaded: same ops, same order; slack for a recompile's fusion
        np.testing.assert_allclose(value, expected[key], rtol=1e-6, atol=1e-6)
    extractor.save(tmp_path / "features.keras")
    reloaded = keras.saving.load_model(tmp_path / "features.keras", safe_mode=True)
    got = features(reloaded, x)
    assert list(got) == ["P0", "P1", "P2"]
    for key, value in got.items():
        # the same model reloaded: same ops, same order; slack for a recompile's fusion
        np.testing.assert_allclose(value, expected[key], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("stages, message", [
    (["P0", "P5"], r"unknown keys \['P5'\].*\['P0', 'P1', 'P2'\]"),
    ("P0", "stages must be None or a non-empty list"),
    ([], "stages must be None or a non-empty list"),
    (["P1", "P1"], "repeated keys"),
])
def test_bad_stages_are_refused_naming_the_keys(stages, message):
    model = zoo.gresnet_cifar(n=1, input_shape=CIFAR)
    with pytest.raises(ValueError, match=message):
        zoo.feature_extractor(model, stages=stages)


def test_an_mlp_has_no_feature_maps():
    with pytest.raises(ValueError, match="no convolutional stages.*not from an MLP"):
        zoo.feature_extractor(zoo.gresnet_mlp(depth=2))
    with pytest.raises(ValueError, match="model must be a Keras model"):
        zoo.feature_extractor("gresnet_cifar")


# -------------------------------------------------- include_preprocessing


def fashion_batch(method, examples=8):
    """Raw uint8 Fashion-MNIST test images, and the same images as the
    training pipeline normalises them (its numpy twin, so on every backend)."""
    pipe = data.pipeline("fashion_mnist", preprocessing=method, batch_size=examples,
                         max_train_examples=4096, max_test_examples=examples,
                         input_pipeline="numpy")
    images, labels = data.load("fashion_mnist", "test")
    keep = data.test_subset(len(labels), examples, 0)
    normalised, pipe_labels = pipe.test[0]
    np.testing.assert_array_equal(np.asarray(pipe_labels), labels[keep])  # same images
    return images[keep], np.asarray(normalised), pipe.config["preprocessing"]


@pytest.mark.integration
@pytest.mark.parametrize("method", ["scale", "mean", "meanstd"])
@pytest.mark.parametrize("builder, kwargs", [
    ("gresnet_cifar", dict(n=1, include_top=False, pooling="avg")),
    ("resnet_mlp", dict(depth=2)),
])
def test_raw_pixels_give_what_the_pipeline_feeds_the_bare_net(method, builder, kwargs):
    raw, normalised, statistics = fashion_batch(method)
    assert raw.dtype == np.uint8 and raw.max() > 200
    if method != "scale":
        assert 0.2 < statistics["mean"][0] < 0.4  # Fashion-MNIST's mean, not a default
    model = zoo.get_model(builder, input_shape=(28, 28, 1), include_preprocessing=statistics,
                          **kwargs)
    bare = zoo.get_model(builder, input_shape=(28, 28, 1), **kwargs)
    randomize_bn(model)
    bare.set_weights(model.get_weights())
    # one x * scale + offset, same float32 scale and offset: an FMA's 1 ulp at most (~2e-7)
    np.testing.assert_allclose(layer_output(model, "preprocessing", raw), normalised,
                               rtol=0, atol=1e-6)
    got = keras.ops.convert_to_numpy(model(raw))
    # the same net on inputs equal up to an ulp: outputs agree to float32 round-off
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(bare(normalised)),
                               rtol=0, atol=1e-6)
    assert np.abs(got - keras.ops.convert_to_numpy(bare(raw.astype("float32")))).max() > 1e-3


@pytest.mark.integration
def test_true_takes_the_published_entrys_statistics():
    raw, normalised, _ = fashion_batch("scale")
    entry = get_weights("gresnet_mlp2_fashion_mnist")
    model = zoo.gresnet_mlp(depth=2, weights="fashion_mnist", include_preprocessing=True)
    bare = zoo.gresnet_mlp(depth=2, weights="fashion_mnist")
    config = model.get_layer("preprocessing").get_config()
    assert {k: config[k] for k in ("method", "mean", "std")} == entry["preprocessing"]
    # the same net on inputs equal up to an ulp: outputs agree to float32 round-off
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(raw)),
                               keras.ops.convert_to_numpy(bare(normalised)), rtol=0, atol=1e-6)


def test_weight_files_load_into_a_model_with_preprocessing(tmp_path):
    source = zoo.resnet_cifar(n=1, input_shape=CIFAR)
    randomize_bn(source)
    source.save_weights(tmp_path / "net.weights.h5")
    source.save(tmp_path / "net.keras")
    stats = dict(method="mean", mean=[0.5, 0.4, 0.3])
    x = np.random.default_rng(2).integers(0, 256, size=(2, *CIFAR)).astype("uint8")
    expected = keras.ops.convert_to_numpy(source(PixelNormalization(**stats)(x)))
    for path in ("net.weights.h5", "net.keras"):
        model = zoo.resnet_cifar(n=1, input_shape=CIFAR, include_preprocessing=stats,
                                 weights=str(tmp_path / path))
        # the same weights and ops on the same inputs, another graph: float32 round-off only
        np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), expected,
                                   rtol=1e-6, atol=1e-6)


def test_preprocessing_survives_a_keras_round_trip(tmp_path):
    stats = dict(method="meanstd", mean=[0.25], std=[0.5])
    model = zoo.gresnet_mlp(depth=2, input_shape=(28, 28, 1), include_preprocessing=stats)
    x = np.random.default_rng(3).integers(0, 256, size=(3, 28, 28, 1)).astype("uint8")
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras", safe_mode=True)
    layer = loaded.get_layer("preprocessing")
    assert isinstance(layer, PixelNormalization)
    assert (layer.method, layer.mean, layer.std) == ("meanstd", (0.25,), (0.5,))
    # the same model reloaded: same ops, same order; slack for a recompile's fusion
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)),
                               keras.ops.convert_to_numpy(model(x)), rtol=1e-6, atol=1e-6)


def test_preprocessing_runs_in_float32_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    model = zoo.gresnet_cifar(n=1, input_shape=CIFAR, include_preprocessing=dict(
        method="mean", mean=[0.3, 0.3, 0.3]))
    layer = model.get_layer("preprocessing")
    assert layer.compute_dtype == "float32" and layer.output.dtype == "float32"
    assert model.get_layer("conv1_conv").compute_dtype == "float16"


@pytest.mark.parametrize("value, message", [
    ("scale", "include_preprocessing must be False, True"),
    (1, "include_preprocessing must be False, True"),
    (True, "include_preprocessing=True takes the statistics of the published"),
    (dict(mean=[0.1]), "include_preprocessing must be dict"),
    (dict(method="scale", scale=2), "include_preprocessing must be dict"),
    (dict(method="norm"), "Unknown preprocessing method='norm'; accepted: 'scale'"),
    (dict(method="mean"), "'mean' preprocessing needs its training mean"),
    (dict(method="meanstd", mean=[0.1]), "'meanstd' preprocessing needs its training std"),
    (dict(method="meanstd", mean=[0.1], std=[0.0]), "std > 0"),
    (dict(method="mean", mean=[float("nan")]), "non-empty list of finite numbers"),
    (dict(method="mean", mean="0.1"), "non-empty list of finite numbers"),
    (dict(method="mean", mean=[0.1, 0.2, 0.3]), r"one mean and std per input channel \(1\)"),
    (dict(method="scale", mean=[0.5]), "'scale' preprocessing has mean 0"),
    (dict(method="mean", mean=[0.5], std=[2.0]), "'mean' preprocessing has std 1"),
])
def test_bad_preprocessing_is_refused_before_the_build(value, message):
    with pytest.raises(ValueError, match=message):
        zoo.gresnet_mlp(depth=2, input_shape=(28, 28, 1), include_preprocessing=value)


@pytest.mark.parametrize("name", zoo.list_models())
def test_every_builder_passes_include_preprocessing_on(name):
    config = zoo.model_builder(name).paper_configs[0]
    assert inspect.signature(zoo.model_builder(name)).parameters[
        "include_preprocessing"].default is False
    with pytest.raises(ValueError, match=f"{name}: include_preprocessing=True takes"):
        zoo.get_model(name, include_preprocessing=True, **config)
