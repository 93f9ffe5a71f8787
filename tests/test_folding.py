"""BatchNorm folded for inference (zoo.inference_model): which BatchNorms
fold, the folded net computes the trained one's function (float32 and
mixed bfloat16), the source is left alone, the folded net saves and loads
as a Keras model with its card, and the exports fold by default."""

import keras
import numpy as np
import pytest

from helpers import outputs, randomize_bn
from keras_gresnet import export, training, zoo
from keras_gresnet.layers import gate_layers
from keras_gresnet.zoo.folding import foldable_batchnorms

BACKEND = keras.backend.backend()


def batchnorms(model):
    return [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]


def trained_like(model):
    """BN statistics, scales and gates away from their initial values."""
    randomize_bn(model)
    rng = np.random.default_rng(7)
    for layer in batchnorms(model):
        layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape).astype("float32"))
        layer.moving_variance.assign(
            rng.uniform(0.3, 3.0, layer.moving_variance.shape).astype("float32"))
    for i, gate in enumerate(gate_layers(model)):
        gate.k.assign(0.4 + 0.3 * i)
    return model


def images(model, batch=4):
    return np.random.default_rng(3).normal(size=(batch, *model.input_shape[1:])).astype(
        "float32")


# (builder arguments, BatchNorms, how many fold): counted by hand from the
# units. gresnet_cifar(n=1): a BN between F's convs in each of 3 units, the
# final BN, and each unit's pre-activation (fb's both_preact on the first of
# a stage); the first unit's pre-activation reads the stem conv alone and
# folds, the other two read a gate's sum and stay, as does the final one.
# HE's original unit: every BN follows a conv (stem, F's two, the
# projection's): all fold. GR's MLP of depth 2 (a stem layer and one residual block
# of two): every Dense-BN-ReLU folds.
NETS = {
    "gresnet_cifar": (dict(builder="gresnet_cifar", n=1, input_shape=(16, 16, 3),
                           classifier_activation=None), 7, 4),
    "resnet_original": (dict(builder="resnet_cifar", n=1, unit="original",
                             input_shape=(16, 16, 3), classifier_activation=None), 7, 7),
    "bottleneck_preact": (dict(builder="resnet_cifar", n=1, block="bottleneck",
                               input_shape=(16, 16, 3), classifier_activation=None), 10, 7),
    "gresnet_mlp": (dict(builder="gresnet_mlp", depth=2, classifier_activation=None), 3, 3),
}


def build(net):
    arguments, _, _ = NETS[net]
    arguments = dict(arguments)
    return trained_like(zoo.get_model(arguments.pop("builder"), **arguments))


@pytest.mark.parametrize("net", NETS)
def test_folded_net_computes_the_trained_one(net):
    model = build(net)
    _, count, folds = NETS[net]
    assert len(batchnorms(model)) == count
    assert len(foldable_batchnorms(model)) == folds
    x = images(model)
    ref = outputs(model, x)
    before = [keras.ops.convert_to_numpy(w) for w in model.weights]
    folded = zoo.inference_model(model)
    assert len(batchnorms(folded)) == count - folds
    assert foldable_batchnorms(folded) == {}  # nothing left that could fold
    # float32 kernels rescaled once (float64 products, one rounding each):
    # a relative 1e-7 per weight, summed over a few layers of O(1) logits
    np.testing.assert_allclose(outputs(folded, x), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    # the source is untouched, and the folded net's variables are its own
    assert len(batchnorms(model)) == count
    for old, new in zip(before, model.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(new), old)
    for layer in folded.layers:
        for w in layer.weights:
            w.assign(keras.ops.zeros(w.shape, w.dtype))
    np.testing.assert_array_equal(outputs(model, x), ref)


def test_only_a_linear_layer_read_by_the_batchnorm_alone_folds():
    x = keras.Input((8, 8, 3))
    a = keras.layers.Conv2D(4, 3, padding="same", name="shared")(x)
    a_bn = keras.layers.BatchNormalization(name="shared_bn")(a)  # a is read twice
    b = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="relu_conv")(a_bn)
    b_bn = keras.layers.BatchNormalization(name="relu_bn")(b)  # after a ReLU: no
    c = keras.layers.Conv2D(4, 1, name="plain")(b_bn)
    c_bn = keras.layers.BatchNormalization(name="plain_bn")(c)
    d = keras.layers.Conv2D(4, 1, name="output_conv")(c_bn)
    d_bn = keras.layers.BatchNormalization(name="output_bn")(d)  # d is an output too
    y = keras.layers.Add()([a, c_bn])
    model = keras.Model(x, [y, d, d_bn])
    trained_like(model)
    assert foldable_batchnorms(model) == {"plain_bn": "plain"}
    folded = zoo.inference_model(model)
    assert [layer.name for layer in batchnorms(folded)] == ["shared_bn", "relu_bn", "output_bn"]
    x = images(model)
    for ref, out in zip(outputs(model, x), outputs(folded, x)):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("dtype_policy", ["mixed_bfloat16"])
def test_folded_bfloat16_net_is_as_close_to_float32_as_the_trained_one(dtype_policy):
    model = build("gresnet_cifar")
    x = images(model)
    ref = outputs(model, x)
    with training.dtype_policy_scope(dtype_policy):
        low = build("gresnet_cifar")
    low.set_weights(model.get_weights())
    folded = zoo.inference_model(low)
    policies = {layer.name: layer.dtype_policy.name for layer in low.layers if layer.weights}
    assert {layer.name: layer.dtype_policy.name for layer in folded.layers if layer.weights} == {
        name: policy for name, policy in policies.items()
        if name in {layer.name for layer in folded.layers}}
    assert policies["conv2_block1_1_conv"] == dtype_policy
    scale = np.abs(ref).max()
    unfolded_error = np.abs(outputs(low, x).astype(np.float32) - ref).max() / scale
    folded_error = np.abs(outputs(folded, x).astype(np.float32) - ref).max() / scale
    # bfloat16 keeps 8 significant bits (relative 2**-9 = 0.2% per rounding);
    # ~10 roundings in sequence: a few % of the logits' scale, folded or not
    assert unfolded_error < 0.05 and folded_error < 0.05, (unfolded_error, folded_error)


@pytest.mark.parametrize("fold_batchnorm", [True, False])
def test_a_mixed_bfloat16_net_recast_to_float32_computes_the_float32_function(fold_batchnorm):
    """``dtype_policy="float32"`` (what the ONNX and LiteRT exports of a
    bfloat16 net run): every layer computes in float32 with the same weights
    (a mixed-precision net's variables are float32), so the outputs are the
    float32 net's, not the bfloat16 net's; the source is left alone."""
    model = build("gresnet_cifar")
    x = images(model)
    ref = outputs(model, x)
    with training.dtype_policy_scope("mixed_bfloat16"):
        low = build("gresnet_cifar")
    low.set_weights(model.get_weights())
    low_out = outputs(low, x).astype(np.float32)
    recast = zoo.inference_model(low, fold_batchnorm=fold_batchnorm, dtype_policy="float32")
    assert {layer.dtype_policy.name for layer in recast.layers} == {"float32"}
    assert len(batchnorms(recast)) == (3 if fold_batchnorm else 7)
    assert low.get_layer("conv2_block1_1_conv").dtype_policy.name == "mixed_bfloat16"
    scale = np.abs(ref).max()
    # float32 in another order (folded in float64): ~1e-7 relative a layer
    np.testing.assert_allclose(outputs(recast, x), ref, rtol=1e-5, atol=1e-5 * scale)
    assert np.abs(low_out - ref).max() > 1e-3 * scale  # bfloat16's 8 bits: 2**-9 a rounding
    assert zoo.inference_model(model, dtype_policy="float32") is not model  # folds
    assert zoo.inference_model(model, fold_batchnorm=False, dtype_policy="float32") is model
    with pytest.raises(ValueError, match="^dtype_policy must be a Keras dtype policy.*'float31'$"):
        zoo.inference_model(model, dtype_policy="float31")


def test_folded_net_keeps_its_card_and_saves_as_a_keras_model(tmp_path):
    model = build("gresnet_cifar")
    model.remember(model.builder, model.builder_kwargs, {"dataset": "cifar10",
                                                        "class_names": list("abcdefghij")})
    folded = zoo.inference_model(model)
    assert folded.card == model.card and folded.builder is None
    path = tmp_path / "folded.keras"
    folded.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    x = images(model)
    np.testing.assert_array_equal(outputs(loaded, x), outputs(folded, x))
    assert loaded.card == model.card and len(batchnorms(loaded)) == 3
    assert zoo.inference_model(model, fold_batchnorm=False) is model


def test_export_refuses_a_fold_that_is_not_a_bool(tmp_path):
    with pytest.raises(ValueError, match="fold_batchnorm must be True or False, got 'no'"):
        export.export(build("gresnet_cifar"), tmp_path / "m.onnx", format="onnx",
                      fold_batchnorm="no")
    assert not list(tmp_path.iterdir())


@pytest.mark.tensorflow_only  # a SavedModel's graph is TensorFlow's
def test_a_saved_model_holds_the_unfolded_batchnorms_only_when_asked(tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2

    model = build("gresnet_cifar")
    counts = {}
    for fold in (True, False):
        out = export.export(model, tmp_path / f"fold{fold}", include_preprocessing=False,
                            fold_batchnorm=fold)
        proto = saved_model_pb2.SavedModel()
        proto.ParseFromString((out / "saved_model.pb").read_bytes())
        serving = [f for f in proto.meta_graphs[0].graph_def.library.function
                   if "Conv2D" in {n.op for n in f.node_def}]
        counts[fold] = max(sum(n.op == "FusedBatchNormV3" for n in f.node_def) for f in serving)
    assert counts == {True: 3, False: 7}
