"""The zoo under ``keras.config.set_image_data_format("channels_first")``
(Keras Applications accept it): every conv family builds NCHW and computes
the channels_last model's function with the same weights, on transposed
inputs; the saved file loads (safe mode) and keeps its format."""

import keras
import numpy as np
import pytest

from helpers import randomize_bn
from keras_gresnet import training, zoo

CASES = {
    "gresnet_cifar": dict(n=1),
    "resnet_cifar_zero_pad": dict(builder="resnet_cifar", n=1, unit="original"),
    "preact_bottleneck": dict(builder="resnet_cifar", depth=11, block="bottleneck"),
    # the ImageNet stem: 7x7/2 conv, zero padding, 3x3/2 max-pool
    "resnet_imagenet": dict(builder="resnet_imagenet", depth=50, input_shape=(40, 40, 3)),
}


@pytest.fixture
def channels_first():
    previous = keras.config.image_data_format()
    keras.config.set_image_data_format("channels_first")
    yield
    keras.config.set_image_data_format(previous)


def _build(case, **extra):
    kwargs = dict(CASES[case])
    builder = kwargs.pop("builder", case)
    shape = kwargs.pop("input_shape", None)
    if shape is not None and keras.config.image_data_format() == "channels_first":
        shape = (shape[2], shape[0], shape[1])
    return zoo.get_model(builder, input_shape=shape, classifier_activation=None,
                         **kwargs, **extra)


@pytest.mark.parametrize("case", list(CASES))
def test_a_channels_first_model_computes_the_channels_last_function(case, channels_first,
                                                                      tmp_path):
    nchw = _build(case)
    keras.config.set_image_data_format("channels_last")
    try:
        nhwc = _build(case)
    finally:
        keras.config.set_image_data_format("channels_first")
    randomize_bn(nhwc)
    assert [tuple(w.shape) for w in nchw.weights] == [tuple(w.shape) for w in nhwc.weights]
    nchw.set_weights(nhwc.get_weights())
    assert nchw.input_shape[1] in (1, 3) and nhwc.input_shape[-1] == nchw.input_shape[1]
    x = np.random.default_rng(0).normal(size=(2, *nhwc.input_shape[1:])).astype("float32")
    expected = keras.ops.convert_to_numpy(nhwc(x, training=False))
    got = keras.ops.convert_to_numpy(nchw(np.transpose(x, (0, 3, 1, 2)), training=False))
    # Same sums in other orders: float32 round-off, a few units of 1e-6 per layer.
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    nchw.save(tmp_path / "nchw.keras")
    loaded = keras.saving.load_model(tmp_path / "nchw.keras", safe_mode=True)
    # the same model reloaded: same ops, same order; slack for a recompile's fusion only
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(np.transpose(x, (0, 3, 1, 2)), training=False)), got,
        rtol=1e-5, atol=1e-6)


def test_defaults_and_preprocessing_follow_the_format(channels_first):
    model = zoo.gresnet_cifar(n=1, include_preprocessing=dict(method="meanstd",
                                                              mean=[0.1, 0.2, 0.3],
                                                              std=[0.5, 0.5, 0.5]))
    assert model.input_shape == (None, 3, 32, 32)
    layer = model.get_layer("preprocessing")
    assert layer.get_config()["data_format"] == "channels_first"
    x = np.ones((1, 3, 2, 2), "float32") * 255
    out = keras.ops.convert_to_numpy(layer(x))
    # x * scale + offset, float32 scale and offset: a few ulps (~2e-7) of values ~1.5
    np.testing.assert_allclose(out[0, :, 0, 0], [(1 - 0.1) / 0.5, (1 - 0.2) / 0.5,
                                                 (1 - 0.3) / 0.5], rtol=1e-6)
    with pytest.raises(ValueError, match=r"rank 3 \(channels, height, width\)"):
        zoo.gresnet_cifar(n=1, input_shape=(32, 32))
    with pytest.raises(ValueError, match="channels_last"):
        training.resolve_config("gresnet_cifar", dataset="fashion_mnist")
