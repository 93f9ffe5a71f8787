"""The zoo's BatchNormalization (torch's fused kernel on the torch backend)
against ``keras.layers.BatchNormalization``, on whichever backend the suite
runs: outputs in training and inference, gradients (through a train step),
the moving statistics after several steps, mixed precision, and the saved
forms.

Tolerances: float32 BatchNorm sums ``n`` values per channel in a different
order on the two paths (torch's kernel vs ``keras.ops``); the relative error
of such a sum is about ``n * 2**-24`` at worst (here n <= 8*6*6 = 288, so
under 2e-5), and a few SGD steps on a tiny net carry it to the weights
without amplifying it by more than a small factor: ``rtol=1e-4, atol=1e-5``.
bfloat16 outputs carry 8 significant bits: one rounding of a value of size
~3 is ``3 * 2**-8``, so ``atol=3e-2`` there."""

import numpy as np
import pytest

import keras

from keras_gresnet.layers import BatchNormalization


def _bn_net(bn_class, input_shape, axis, momentum=0.9, seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(input_shape)
    x = inputs
    if len(input_shape) == 3:
        x = keras.layers.Conv2D(4, 3, padding="same", name="conv", use_bias=False,
                                data_format="channels_first" if axis == 1 else "channels_last")(x)
    else:
        x = keras.layers.Dense(4, use_bias=False, name="dense")(x)
    x = bn_class(axis=axis, momentum=momentum, epsilon=1e-3, name="bn")(x)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(3, name="head")(x)
    return keras.Model(inputs, outputs)


def _bn_pair(input_shape, axis):
    ours = _bn_net(BatchNormalization, input_shape, axis)
    theirs = _bn_net(keras.layers.BatchNormalization, input_shape, axis)
    theirs.set_weights(ours.get_weights())
    # non-trivial gamma, beta and moving statistics
    rng = np.random.default_rng(1)
    for model in (ours, theirs):
        bn = model.get_layer("bn")
        c = bn.gamma.shape[0]
        bn.set_weights([np.linspace(0.5, 1.5, c), np.linspace(-0.2, 0.3, c),
                        np.linspace(-0.1, 0.1, c), np.linspace(0.8, 1.2, c)])
    return ours, theirs, rng


CASES = [((6, 6, 2), -1), ((2, 6, 6), 1), ((5,), -1)]


@pytest.mark.parametrize("input_shape,axis", CASES)
def test_outputs_match_keras_in_training_and_inference(input_shape, axis):
    ours, theirs, rng = _bn_pair(input_shape, axis)
    x = rng.normal(size=(8, *input_shape)).astype("float32") * 3 + 1
    for training in (False, True):
        a = keras.ops.convert_to_numpy(ours(x, training=training))
        b = keras.ops.convert_to_numpy(theirs(x, training=training))
        # BatchNorm sums of n <= 288 values in two orders: < 288 * 2**-24 ~ 2e-5 (docstring)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # the two training calls updated the moving statistics alike
    for va, vb in zip(ours.get_layer("bn").weights, theirs.get_layer("bn").weights):
        # a batch statistic (error < 2e-5) enters times 1 - momentum = 0.1: < 2e-6
        np.testing.assert_allclose(keras.ops.convert_to_numpy(va),
                                   keras.ops.convert_to_numpy(vb), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("input_shape,axis", CASES)
def test_training_steps_match_keras_weights_gradients_and_moving_statistics(input_shape, axis):
    """Three SGD steps: every weight (the conv / dense kernel before the
    BatchNorm gets the gradient through its input, gamma and beta their own)
    and both moving statistics end where Keras' layer puts them."""
    ours, theirs, rng = _bn_pair(input_shape, axis)
    x = rng.normal(size=(24, *input_shape)).astype("float32") * 2 - 0.5
    y = rng.integers(0, 3, size=24)
    before = [w.copy() for w in ours.get_weights()]
    for model in (ours, theirs):
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    changed = 0
    for wa, wb, w0, var in zip(ours.get_weights(), theirs.get_weights(), before, ours.weights):
        # the BatchNorm round-off (< 2e-5) through 3 SGD steps, barely amplified (docstring)
        np.testing.assert_allclose(wa, wb, rtol=1e-4, atol=1e-5, err_msg=var.path)
        changed += not np.allclose(wa, w0)
    # every weight moved, statistics included (no bias before the BatchNorm:
    # its gradient would be zero)
    assert changed == len(before)


def test_moving_variance_uses_the_biased_batch_variance_as_keras_does():
    layer = BatchNormalization(momentum=0.0, epsilon=1e-3)
    x = np.array([[1.0], [3.0]], "float32")  # mean 2, biased variance 1 (unbiased 2)
    layer(x, training=True)
    # mean 2 and biased variance 1 of [1, 3] are exact in float32: rtol is slack
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_mean), [2.0], rtol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_variance), [1.0],
                               rtol=1e-6)


def test_mixed_bfloat16_keeps_float32_statistics_and_matches_keras():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        ours, theirs, rng = _bn_pair((6, 6, 2), -1)
        x = rng.normal(size=(8, 6, 6, 2)).astype("float32")
        a = ours(x, training=True)
        b = theirs(x, training=True)
        assert keras.backend.standardize_dtype(a.dtype) == "bfloat16"
        # bfloat16 outputs: 8 significant bits, a rounding of a value ~3 is 3 * 2**-8 ~ 1.2e-2
        np.testing.assert_allclose(keras.ops.convert_to_numpy(keras.ops.cast(a, "float32")),
                                   keras.ops.convert_to_numpy(keras.ops.cast(b, "float32")),
                                   atol=3e-2)
        bn = ours.get_layer("bn")
        for var in bn.weights:
            assert keras.backend.standardize_dtype(var.dtype) == "float32"
        # both average in float32 (measured identical on TF, JAX, torch); where two conv
        # kernels round differently, inputs differ by a bfloat16 ulp, 2**-8 * ~3 ~ 1.2e-2
        np.testing.assert_allclose(keras.ops.convert_to_numpy(bn.moving_mean),
                                   keras.ops.convert_to_numpy(theirs.get_layer("bn").moving_mean),
                                   atol=1e-2)
    finally:
        keras.config.set_dtype_policy(previous)


def test_same_config_and_weights_as_keras_and_saved_forms_load(tmp_path):
    ours, theirs, rng = _bn_pair((6, 6, 2), -1)
    a, b = ours.get_layer("bn"), theirs.get_layer("bn")
    assert a.get_config() == b.get_config()
    assert [v.path for v in a.weights] == [v.path for v in b.weights]
    # weights saved from Keras' layer load into ours and vice versa
    theirs.save_weights(tmp_path / "keras.weights.h5")
    fresh = _bn_net(BatchNormalization, (6, 6, 2), -1, seed=5)
    fresh.load_weights(tmp_path / "keras.weights.h5")
    for wa, wb in zip(fresh.get_weights(), theirs.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    # a .keras file of ours loads in safe mode as our class, the same function
    ours.save(tmp_path / "ours.keras")
    loaded = keras.saving.load_model(tmp_path / "ours.keras", safe_mode=True)
    assert type(loaded.get_layer("bn")) is BatchNormalization
    x = rng.normal(size=(4, 6, 6, 2)).astype("float32")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)),
                                  keras.ops.convert_to_numpy(ours(x)))


# ----------------------------------------------------------------- Conv2D


@pytest.mark.parametrize("padding,strides,kernel", [("same", 1, 3), ("valid", 2, 3),
                                                    ("same", 2, 3), ("same", 1, 2),
                                                    ("valid", 1, 1)])
def test_conv2d_matches_keras_outputs_and_gradients(padding, strides, kernel):
    """The zoo's Conv2D (torch: the NHWC tensor handed to torch as it is)
    against Keras' own, forward and through three SGD steps. Sums of at most
    3*3*3 = 27 products: float32 reordering stays far inside rtol=1e-4."""
    from keras_gresnet.layers import Conv2D

    rng = np.random.default_rng(2)
    x = rng.normal(size=(6, 7, 7, 3)).astype("float32")
    y = rng.integers(0, 3, size=6)

    def net(cls):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((7, 7, 3))
        h = cls(4, kernel, strides=strides, padding=padding, name="conv")(inputs)
        h = cls(2, 3, padding="same", use_bias=False, name="conv2")(h)
        outputs = keras.layers.Dense(3, name="head")(keras.layers.Flatten()(h))
        return keras.Model(inputs, outputs)

    ours, theirs = net(Conv2D), net(keras.layers.Conv2D)
    theirs.set_weights(ours.get_weights())
    assert ours.get_layer("conv").get_config() == theirs.get_layer("conv").get_config()
    # sums of at most 27 products in another order: float32 round-off, ~1e-6 (docstring)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ours(x)),
                               keras.ops.convert_to_numpy(theirs(x)), rtol=1e-4, atol=1e-5)
    for model in (ours, theirs):
        model.compile(keras.optimizers.SGD(0.1),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
    for wa, wb in zip(ours.get_weights(), theirs.get_weights()):
        # that round-off through 3 SGD steps on a tiny net: well inside 1e-4 (docstring)
        np.testing.assert_allclose(wa, wb, rtol=1e-4, atol=1e-5)
