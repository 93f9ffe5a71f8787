"""timm's habits: published weights at another input. Another channel count
adapts the first layer's kernel as timm's ``adapt_input_conv`` does (and
the pixel statistics with it), another height and width loads without the
head or with a new one into a body that takes it; one rule
(:func:`keras_gresnet.weights.adapt.input_change`) for the builders'
``weights=`` and ``from_preset``."""

import hashlib
import math

import keras
import numpy as np
import pytest

from keras_gresnet import weights, zoo
from keras_gresnet.layers import gate_layers
from keras_gresnet.weights.adapt import adapt_input_conv, adapt_statistics

GREY, RGB = (8, 8, 1), (8, 8, 3)
MLP_GREY = (4, 4, 1)
CLASSES = 3
STATISTICS = {"method": "meanstd", "mean": [0.4], "std": [0.25]}
RGB_STATISTICS = {"method": "meanstd", "mean": [0.3, 0.4, 0.5], "std": [0.2, 0.25, 0.3]}
NOTE = "first kernel per timm's adapt_input_conv"

pytestmark = pytest.mark.usefixtures("network_guard")


def _timm_adapt_input_conv(in_chans, conv_weight, base_chans):
    """timm 1.0.31's ``adapt_input_conv`` (timm/models/_manipulate.py) line
    by line, numpy for torch, on its OIHW layout: the reference."""
    O, I, J, K = conv_weight.shape
    if in_chans == base_chans:
        return conv_weight
    conv_weight = conv_weight.astype("float32")
    if in_chans == 1:
        conv_weight = conv_weight.sum(axis=1, keepdims=True)
    else:
        repeat = int(math.ceil(in_chans / base_chans))
        conv_weight = np.tile(conv_weight, (1, repeat, 1, 1))[:, :in_chans, :, :]
        conv_weight *= np.float32(base_chans / float(in_chans))  # torch: a float32 op
    return conv_weight


@pytest.mark.parametrize("given, channels", [(1, 3), (3, 1), (1, 4), (3, 4), (3, 3), (2, 5)])
def test_the_kernel_is_adapted_by_timms_rule(given, channels):
    kernel = np.random.default_rng(given * 10 + channels).normal(
        0, 1, (3, 3, given, 16)).astype("float32")  # Keras: (kh, kw, in, out)
    adapted = adapt_input_conv(kernel, channels)
    assert adapted.shape == (3, 3, channels, 16) and adapted.dtype == np.float32
    timm = _timm_adapt_input_conv(channels, kernel.transpose(3, 2, 0, 1), given)
    np.testing.assert_array_equal(adapted, timm.transpose(2, 3, 1, 0))
    # The rule in words, value by value: summed for one channel; channel c
    # is the trained channel c mod I, times I / C, for more.
    if channels == 1:
        expected = kernel[..., 0:1, :]
        for c in range(1, given):
            expected = expected + kernel[..., c:c + 1, :]
    else:
        expected = np.stack([kernel[..., c % given, :] for c in range(channels)], axis=-2) * \
            np.float32(given / channels)
    np.testing.assert_array_equal(adapted, expected)


def test_the_statistics_follow_the_channels():
    assert adapt_statistics(STATISTICS, 3) == {"method": "meanstd", "mean": [0.4] * 3,
                                               "std": [0.25] * 3}
    assert adapt_statistics(RGB_STATISTICS, 1)["mean"] == pytest.approx([0.4])
    assert adapt_statistics(RGB_STATISTICS, 1)["std"] == pytest.approx([0.25])
    assert adapt_statistics(RGB_STATISTICS, 4)["mean"] == [0.3, 0.4, 0.5, 0.3]
    assert adapt_statistics(STATISTICS, 1) == STATISTICS


def _randomized(model, seed):
    """Every weight random (BatchNorm statistics and gates too), so that a
    load that missed one, or a kernel adapted wrongly, shows."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        value = rng.uniform(0.5, 1.5, w.shape) if "variance" in w.path else \
            rng.normal(0, 0.4, w.shape)
        w.assign(value.astype("float32"))
    for i, gate in enumerate(gate_layers(model)):
        gate.k.assign(0.2 + 0.3 * i)
    return model


def _publish(registry, name, model, statistics):
    """``model``, carrying its card, saved as the published file of the
    registry entry ``name``."""
    model.remember(model.builder, model.builder_kwargs,
                   {"source": name, "class_names": ["a", "b", "c"], "preprocessing": statistics})
    registry.shipped.mkdir(exist_ok=True)
    path = registry.shipped / f"{name}.keras"
    model.save(path)
    body = path.read_bytes()
    return dict(
        name=name, builder=model.builder,
        builder_kwargs={k: model.builder_kwargs[k] for k in ("n", "depth") if
                        k in model.builder_kwargs and model.builder_kwargs[k] is not None},
        dataset="folder", input_shape=list(model.input_shape[1:]), classes=CLASSES,
        class_names=["a", "b", "c"], preprocessing=statistics, test_error_percent=10.0,
        command="keras-gresnet train", params=1, file=path.name, size=len(body),
        sha256=hashlib.sha256(body).hexdigest(), keras_version=keras.__version__,
        date="2026-12-05", status="published", license="test licence")


@pytest.fixture
def nets(registry):
    """A grey conv net, an RGB conv net and a grey MLP, random, published as
    ``grey``, ``rgb`` and ``mlp`` (conftest's temporary registry)."""
    grey = _randomized(zoo.gresnet_cifar(n=1, input_shape=GREY, classes=CLASSES), 1)
    rgb = _randomized(zoo.gresnet_cifar(n=1, input_shape=RGB, classes=CLASSES), 2)
    mlp = _randomized(zoo.gresnet_mlp(depth=2, input_shape=MLP_GREY, classes=CLASSES), 3)
    registry.write([_publish(registry, "grey", grey, STATISTICS),
                    _publish(registry, "rgb", rgb, RGB_STATISTICS),
                    _publish(registry, "mlp", mlp, STATISTICS)])
    return dict(grey=grey, rgb=rgb, mlp=mlp)


def _first_kernel(model):
    first = next(layer for layer in model.layers if layer.weights)
    return keras.ops.convert_to_numpy(first.kernel)


def _assert_body_is_the_sources(model, source, adapted_layer):
    """Every weighted layer but the adapted one and the head: the source's
    to the bit."""
    for layer in model.layers:
        if layer.weights and layer.name not in (adapted_layer, "predictions"):
            for a, b in zip(layer.get_weights(), source.get_layer(layer.name).get_weights()):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name, shape, channels", [("grey", RGB, 3), ("rgb", GREY, 1),
                                                   ("grey", (8, 8, 4), 4)])
def test_builders_and_from_preset_adapt_the_first_kernel(nets, tmp_path, name, shape,
                                                         channels):
    source = nets[name]
    expected = adapt_input_conv(_first_kernel(source), channels)
    zoo.save_preset(source, tmp_path / "preset")
    trained = tuple(source.input_shape[1:])
    for model in (zoo.gresnet_cifar(n=1, weights=name, input_shape=shape, classes=CLASSES),
                  zoo.get_model("gresnet_cifar", n=1, weights=name, input_shape=shape,
                                classes=CLASSES),
                  zoo.from_preset(name, input_shape=shape),
                  zoo.from_preset(str(tmp_path / "preset"), input_shape=shape)):
        assert tuple(model.input_shape[1:]) == shape
        np.testing.assert_array_equal(_first_kernel(model), expected)
        _assert_body_is_the_sources(model, source, "conv1_conv")
        np.testing.assert_array_equal(model.get_layer("predictions").get_weights()[0],
                                      source.get_layer("predictions").get_weights()[0])
        card = model.card
        assert card["source"].endswith(f"{name}; input adapted from {trained} to {shape}, {NOTE}")
        assert card["class_names"] == ["a", "b", "c"]  # the head is the weights'
        statistics = STATISTICS if name == "grey" else RGB_STATISTICS
        assert card["preprocessing"] == adapt_statistics(statistics, channels)


def _probabilities(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


@pytest.mark.parametrize("builder, name, grey_shape", [
    ("gresnet_cifar", "grey", GREY), ("gresnet_mlp", "mlp", MLP_GREY)])
def test_a_grey_picture_as_rgb_gives_the_grey_nets_probabilities(nets, builder, name,
                                                                 grey_shape):
    """Raw pixels in (the normalisation inside the model, its statistics
    repeated per channel): R = G = B gives what the grey net gives on the
    grey picture. The adapted first layer sums three products (w / 3) x
    where the grey net has one, w x: float32 rounds w / 3 (one rounding,
    relative 2^-24) and the longer sum (at most 27 terms for a 3x3 kernel,
    each addition relative 2^-24) changes each first-layer output by at
    most about 30 * 2^-24 ~ 2e-6 of the sum of |w x|; what follows is the
    same float32 arithmetic in both nets, so the probabilities (in [0, 1])
    differ by that times the net's gain: 1e-5 leaves it a factor 5
    (measured: 1.8e-7 here for the conv net, 3.3e-7 for the MLP, 7.2e-7
    for the published 32-layer net, scripts/checks/grey_as_rgb.py)."""
    kwargs = dict(n=1) if builder == "gresnet_cifar" else dict(depth=2)
    rgb_shape = (*grey_shape[:2], 3)
    kwargs["classes"] = CLASSES  # the head is the weights'
    grey_net = zoo.get_model(builder, **kwargs, weights=name, include_preprocessing=True)
    rgb_net = zoo.get_model(builder, **kwargs, weights=name, include_preprocessing=True,
                            input_shape=rgb_shape)
    assert rgb_net.get_layer("preprocessing").mean == (0.4,) * 3
    raw = np.random.default_rng(5).integers(0, 256, (16, *grey_shape)).astype("float32")
    grey = _probabilities(grey_net, raw)
    as_rgb = _probabilities(rgb_net, np.repeat(raw, 3, axis=-1))
    np.testing.assert_allclose(as_rgb, grey, rtol=0, atol=1e-5)
    assert np.abs(grey - grey[:1]).max() > 0.01  # the pictures are told apart
    # without the normalisation inside: the card's statistics, repeated, do it
    plain = zoo.get_model(builder, **kwargs, weights=name, input_shape=rgb_shape)
    x = ((np.repeat(raw, 3, axis=-1) / 255 - np.asarray(plain.card["preprocessing"]["mean"]))
         / np.asarray(plain.card["preprocessing"]["std"])).astype("float32")
    np.testing.assert_allclose(_probabilities(plain, x), grey, rtol=0, atol=1e-5)


def test_the_mlps_first_dense_kernel_is_adapted_on_its_channel_axis(nets):
    source = nets["mlp"]
    model = zoo.gresnet_mlp(depth=2, weights="mlp", input_shape=(4, 4, 3), classes=CLASSES)
    kernel = _first_kernel(source).reshape(*MLP_GREY, -1)  # rows: the (h, w, c) positions
    expected = adapt_input_conv(kernel, 3, axis=-2).reshape(4 * 4 * 3, -1)
    np.testing.assert_array_equal(_first_kernel(model), expected)
    _assert_body_is_the_sources(model, source, "stem_dense")


def test_a_bigger_picture_loads_the_body_without_the_head_or_with_a_new_one(nets):
    source = nets["grey"]
    for model in (zoo.gresnet_cifar(n=1, weights="grey", include_top=False, pooling="avg",
                                    input_shape=(32, 32, 1)),
                  zoo.from_preset("grey", include_top=False, input_shape=(32, 32, 1))):
        assert tuple(model.input_shape[1:]) == (32, 32, 1)
        _assert_body_is_the_sources(model, source, None)
        assert model.card["source"] == "grey; input adapted from (8, 8, 1) to (32, 32, 1)"
        assert "class_names" not in model.card  # the head is not the weights'
    features = _probabilities(zoo.gresnet_cifar(n=1, weights="grey", include_top=False,
                                                pooling="avg", input_shape=(32, 32, 1)),
                              np.zeros((1, 32, 32, 1), "float32"))
    assert features.shape == (1, 64)
    # a new head (other classes) and three channels at once
    model = zoo.from_preset("grey", input_shape=(16, 16, 3), classes=2)
    assert model.get_layer("predictions").units == 2
    np.testing.assert_array_equal(_first_kernel(model),
                                  adapt_input_conv(_first_kernel(source), 3))
    _assert_body_is_the_sources(model, source, "conv1_conv")


@pytest.mark.parametrize("call, message", [
    (lambda: zoo.gresnet_cifar(n=1, weights="grey", input_shape=(16, 16, 1), classes=CLASSES),
     r"input_shape \(16, 16, 1\) is not \(8, 8, 1\) \(another size is taken with "
     r"include_top=False or a new head"),
    (lambda: zoo.from_preset("grey", input_shape=(16, 16, 1)),
     r"^preset='grey': input_shape \(16, 16, 1\) is not \(8, 8, 1\) \(another size is taken "
     r"with include_top=False or a new head"),
    (lambda: zoo.gresnet_mlp(depth=2, weights="mlp", input_shape=(8, 8, 1), classes=CLASSES,
                             include_top=False),
     r"^input_shape \(8, 8, 1\) is not \(4, 4, 1\): an MLP's first Dense layer takes the "
     r"flattened height x width x channels"),
    (lambda: zoo.from_preset("mlp", input_shape=(8, 8, 3), include_top=False),
     r"^preset='mlp': input_shape \(8, 8, 3\) is not \(4, 4, 1\): an MLP's first Dense"),
    (lambda: zoo.gresnet_mlp(depth=2, weights="mlp", input_shape=(16,), classes=CLASSES),
     r"input_shape \(16,\) is not \(4, 4, 1\) \(only a \(height, width, channels\) picture"),
])
def test_what_does_not_fit_is_refused_in_one_line(nets, call, message):
    with pytest.raises(ValueError, match=message) as error:
        call()
    assert "\n" not in str(error.value)


def test_a_dataset_name_takes_the_weights_of_the_same_channels_first(nets):
    """``weights="folder"`` names the grey and the RGB net: an RGB input
    takes the RGB weights as they are, a grey input the grey ones, and a
    4-channel input the first that fits, adapted."""
    for shape, name in ((RGB, "rgb"), (GREY, "grey"), ((8, 8, 4), "grey")):
        model = zoo.gresnet_cifar(n=1, weights="folder", input_shape=shape, classes=CLASSES)
        assert model.card["source"].split(";")[0] == name


def test_the_rule_is_checked_before_the_weights_are_read(registry):
    """The builders' check runs on the registry entry alone: an entry whose
    file does not exist is refused for its shape, not for its file."""
    entry = dict(name="absent", builder="gresnet_cifar", builder_kwargs={"n": 1},
                 dataset="folder", input_shape=list(GREY), classes=CLASSES,
                 class_names=["a", "b", "c"], preprocessing=STATISTICS,
                 test_error_percent=10.0, command="keras-gresnet train", params=1,
                 file="absent.keras", size=1, sha256="0" * 64,
                 keras_version=keras.__version__, date="2026-12-05", status="published")
    registry.write([entry])
    with pytest.raises(ValueError, match=r"weights 'absent' were trained .*input_shape "
                                         r"\(9, 9, 1\) is not \(8, 8, 1\)"):
        weights.check_fits("absent", zoo.gresnet_cifar, dict(n=1, classes=CLASSES),
                           input_shape=(9, 9, 1))
    # another channel count fits the same entry (the kernel is adapted on load)
    assert weights.check_fits("absent", zoo.gresnet_cifar, dict(n=1, classes=CLASSES),
                              input_shape=(8, 8, 3))["name"] == "absent"
