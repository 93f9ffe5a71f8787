"""Gate values, residual blocks, pruning and pruning curves (GR Fig. 5/7)."""

import keras
import numpy as np
import pytest

from helpers import random_inputs, randomize_bn
from keras_gresnet import analysis, cli, training, zoo

CIFAR_TINY = dict(input_shape=(16, 16, 3))


def test_gate_values_in_network_order():
    model = zoo.gresnet_cifar(n=2, **CIFAR_TINY)
    for i, gate in enumerate(model.layers[j] for j in range(len(model.layers))
                             if model.layers[j].name.endswith("_gate")):
        gate.k.assign(0.5 - 0.25 * i)
    values = analysis.gate_values(model)
    assert [v["block"] for v in values] == [
        f"conv{s}_block{b}" for s in (2, 3, 4) for b in (1, 2)]
    assert [v["layer"] for v in values] == [f"{v['block']}_gate" for v in values]
    assert [v["index"] for v in values] == list(range(6))
    assert [v["k"] for v in values] == pytest.approx([0.5, 0.25, 0.0, -0.25, -0.5, -0.75])
    assert [v["g"] for v in values] == pytest.approx([0.5, 0.25, 0, 0, 0, 0])  # g = ReLU
    assert analysis.gate_values(zoo.resnet_cifar(n=1, **CIFAR_TINY)) == []


def test_residual_blocks_gated_and_ungated():
    gated = analysis.residual_blocks(zoo.gresnet_cifar(n=2, **CIFAR_TINY))
    plain = analysis.residual_blocks(zoo.resnet_cifar(n=2, **CIFAR_TINY))
    assert [b.name for b in gated] == [b.name for b in plain]
    assert [b.removable for b in gated] == [True, True, False, True, False, True]
    assert all(b.gate == f"{b.name}_gate" for b in gated) and all(b.gate is None for b in plain)
    mlp = analysis.residual_blocks(zoo.gresnet_mlp(depth=24))
    assert [b.name for b in mlp] == [f"block{i}" for i in range(1, 13)]
    assert mlp[0].layers == ("block1_1_dense", "block1_1_bn", "block1_1_relu",
                             "block1_2_dense", "block1_2_bn", "block1_2_relu", "block1_gate")
    assert len(analysis.residual_blocks(zoo.gated_plain_mlp(depth=3))) == 3
    assert analysis.residual_blocks(zoo.plain_mlp(depth=3)) == []


@pytest.mark.parametrize("builder,kwargs,block", [
    (zoo.gresnet_mlp, dict(depth=6), "block2"),
    (zoo.gated_plain_mlp, dict(depth=4), "block3"),
    (zoo.gresnet_cifar, dict(n=2, **CIFAR_TINY), "conv3_block2"),
    (zoo.wide_gresnet, dict(n=2, widen_factor=1, **CIFAR_TINY), "conv4_block2"),
])
def test_removing_a_closed_gate_changes_nothing(builder, kwargs, block):
    model = builder(**kwargs)
    randomize_bn(model, scale=0.3)
    model.get_layer(f"{block}_gate").k.assign(-0.3)  # g(k) = 0
    pruned = analysis.prune(model, [block])
    x = random_inputs(model, batch=5)
    np.testing.assert_array_equal(pruned.predict(x, verbose=0), model.predict(x, verbose=0))
    assert not any(layer.name.startswith(block + "_") for layer in pruned.layers)
    # An open gate's block does matter: removing it changes the outputs.
    other = next(b for b in analysis.residual_blocks(model) if b.removable and b.name != block)
    changed = analysis.prune(model, [other.name]).predict(x, verbose=0)
    assert not np.allclose(changed, model.predict(x, verbose=0))


def test_prune_bookkeeping_and_original_untouched():
    model = zoo.resnet_mlp(depth=8)
    before = [w.copy() for w in model.get_weights()]
    layers_before = len(model.layers)
    blocks = analysis.residual_blocks(model)
    pruned = analysis.prune(model, [1, "block3"])
    removed_params = sum(model.get_layer(n).count_params() for b in (blocks[1], blocks[2])
                         for n in b.layers)
    assert pruned.count_params() == model.count_params() - removed_params
    assert len(pruned.layers) == layers_before - 14
    assert [b.name for b in analysis.residual_blocks(pruned)] == ["block1", "block4"]
    assert len(model.layers) == layers_before
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    for layer in pruned.layers:  # copies, not shared layers
        assert layer is not model.get_layer(layer.name)
        for a, b in zip(layer.get_weights(), model.get_layer(layer.name).get_weights()):
            np.testing.assert_array_equal(a, b)
    # Removing every block leaves stem -> classifier.
    empty = analysis.prune(model, range(4))
    assert analysis.residual_blocks(empty) == []
    assert empty.output.shape == (None, 10)


def test_prune_rejects_projection_and_unknown_blocks():
    model = zoo.gresnet_cifar(n=1, **CIFAR_TINY)
    with pytest.raises(ValueError, match="conv3_block1.*projection"):
        analysis.prune(model, ["conv3_block1"])
    with pytest.raises(ValueError, match="Unknown block 'conv9_block1'"):
        analysis.prune(model, ["conv9_block1"])
    with pytest.raises(ValueError, match="block index 7 out of range"):
        analysis.prune(model, [7])


def test_pruned_model_saves_and_reloads(tmp_path):
    model = zoo.gresnet_cifar(n=2, **CIFAR_TINY)
    randomize_bn(model, scale=0.3)
    pruned = analysis.prune(model, ["conv2_block2", "conv4_block2"])
    path = tmp_path / "pruned.keras"
    pruned.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    x = random_inputs(model, batch=5)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), pruned.predict(x, verbose=0))
    assert len(analysis.gate_values(loaded)) == 4


def test_removal_order():
    model = zoo.gresnet_mlp(depth=8)
    for k, block in zip((0.9, 0.1, 0.5, -1.0), ("block1", "block2", "block3", "block4")):
        model.get_layer(f"{block}_gate").k.assign(k)
    greedy = [b.name for b in analysis.removal_order(model, "greedy")]
    assert greedy == ["block4", "block2", "block3", "block1"]  # smallest g(k) first
    random_a = [b.name for b in analysis.removal_order(model, "random", seed=1)]
    assert random_a == [b.name for b in analysis.removal_order(model, "random", seed=1)]
    assert sorted(random_a) == sorted(greedy)
    with pytest.raises(ValueError, match="order='random'"):
        analysis.removal_order(zoo.resnet_mlp(depth=4), "greedy")
    with pytest.raises(ValueError, match="order='best'"):
        analysis.removal_order(model, "best")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("analysis") / "run"
    training.train("gresnet_mlp", model_kwargs=dict(depth=12), dataset="fashion_mnist",
                   epochs=3, max_train_examples=6000, max_test_examples=1000, out=out,
                   verbose=0)
    return out


@pytest.mark.integration
def test_accuracy_runs_without_an_autograd_graph():
    """On torch an eager call records every activation for a backward pass
    unless gradients are off: the pruning curve of a conv net on 10k images
    took 16 GB that way. Accuracy is the argmax's, in batches."""
    seen = []

    def model(x, training):
        assert training is False
        if keras.backend.backend() == "torch":
            import torch

            seen.append(torch.is_grad_enabled())
        return keras.ops.convert_to_tensor(np.eye(3, dtype="float32")[np.arange(len(x)) % 3])

    # Batches of 3, 3, 1 predict 0 1 2 | 0 1 2 | 0: six of these seven labels.
    x, y = np.zeros((7, 2), "float32"), np.array([0, 1, 2, 0, 1, 0, 0])
    assert analysis.pruning.accuracy(model, (x, y), batch_size=3) == pytest.approx(6 / 7)
    assert seen == ([False] * 3 if keras.backend.backend() == "torch" else [])


def test_pruning_curve_on_a_trained_model(trained_run):
    """Bar: the curve starts at the model's own accuracy; closing one gate
    (g = 0) makes the greedy order remove that block first at no cost; no
    later point beats the full model by more than chance (1 point: 10 of the
    1,000 test images; the net is trained here, so its weights differ per
    CPU), and removing all 6 blocks costs more than 5 points. Measured once
    (test accuracy %, 0..6 blocks removed, on a 10,000-image set): 74.76,
    74.76, 74.77, 70.53, 61.20, 54.44, ...: the block of the smallest open
    gate went for free too. Earlier data orders gave curves that were not
    monotone."""
    model, config = training.load_run(trained_run)
    model.get_layer("block4_gate").k.assign(0.0)
    test, _, _ = training.test_data(config)
    full = analysis.accuracy(model, test)
    curve = analysis.pruning_curve(model, test, order="greedy")
    assert curve["removed"] == list(range(7)) and curve["order"][0] == "block4"
    assert curve["accuracy"][0] == pytest.approx(full)
    assert curve["accuracy"][1] == pytest.approx(curve["accuracy"][0])
    # Never better than the full net beyond chance: the net is trained in the
    # fixture (its weights differ per CPU), so allow 10 of the 1,000 test images.
    assert all(a < full + 0.01 for a in curve["accuracy"][2:]), curve["accuracy"]
    assert curve["accuracy"][-1] < full - 0.05
    random = analysis.pruning_curve(model, test, order="random", seed=3, counts=[0, 3])
    assert random["removed"] == [0, 3] and random["accuracy"][0] == pytest.approx(full)
    with pytest.raises(ValueError, match="only 6 blocks"):
        analysis.pruning_curve(model, test, counts=[7])


@pytest.mark.integration
def test_cli_gates_and_prune(trained_run, capsys, tmp_path):
    assert cli.main(["gates", str(trained_run)]) == 0
    printed = capsys.readouterr().out
    assert "block1" in printed and "block6" in printed and "6 gates, mean g(k)" in printed
    out = tmp_path / "pruned.keras"
    assert cli.main(["prune", str(trained_run), "--count", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "removed 2 blocks" in printed and "test accuracy after" in printed
    pruned = keras.saving.load_model(out, safe_mode=True)
    assert len(analysis.residual_blocks(pruned)) == 4
    assert cli.main(["prune", str(trained_run), "--blocks", "block2,block9"]) == 2
    assert "Unknown block 'block9'" in capsys.readouterr().err
    assert not (trained_run / "pruned-2.keras").exists()
    assert cli.main(["prune", str(trained_run)]) == 2  # neither --blocks nor --count


# Every registered builder at a size that builds in seconds: a deep paper
# model through its family with the same unit, block and gating (the same
# unit code), the ImageNet and Keras-ResNetV2 ones at depth 50 on 64x64.
IMAGENET_TINY = dict(input_shape=(64, 64, 3), classes=10)


def _small(name):
    if name.endswith("_mlp"):
        return getattr(zoo, name)(depth=4, input_shape=(4, 4, 1))
    if name in ("resnet_cifar", "gresnet_cifar"):
        return getattr(zoo, name)(n=2, **CIFAR_TINY)
    if name in ("wide_resnet", "wide_gresnet"):
        return getattr(zoo, name)(n=2, widen_factor=1, **CIFAR_TINY)
    if name.endswith(("110", "164", "1001")):  # HE's CIFAR nets
        unit = "preact" if name.startswith("preact") else "original"
        block = "basic" if name.endswith("110") else "bottleneck"
        return zoo.resnet_cifar(n=2, unit=unit, block=block, **CIFAR_TINY)
    if name.endswith("v2"):
        return zoo.gresnet50v2(**IMAGENET_TINY)
    if name == "resnet_imagenet":
        return zoo.resnet_imagenet(50, **IMAGENET_TINY)
    sibling = name.rstrip("0123456789") + "50"  # gresnet152 -> gresnet50: the same unit
    return getattr(zoo, sibling)(**IMAGENET_TINY)


def _residual_source(model, merge):
    """The last weighted layer of a merge's residual branch (its input 1)."""
    config = {layer["name"]: layer for layer in model.get_config()["layers"]}
    name = analysis.pruning._references(config[merge]["inbound_nodes"])[1][0]
    while not model.get_layer(name).weights:
        (name,) = {ref[0] for ref in analysis.pruning._references(config[name]["inbound_nodes"])}
    return model.get_layer(name)


def _small_key(name):
    """The small build ``name`` is tested through (builders sharing one are
    the same unit code at another depth)."""
    if name.endswith(("110", "164", "1001")):
        return f"resnet_cifar:{name.rstrip('0123456789')}{'basic' if name.endswith('110') else 'bottleneck'}"
    if name.endswith("v2"):
        return "gresnet50v2"
    if name == "resnet_imagenet":
        return "preact_resnet50"  # its defaults: full pre-activation, ungated
    if name[-3:] in ("101", "152", "200"):
        return name.rstrip("0123456789") + "50"
    return name


SMALL_BUILDS = {}
for _name in zoo.list_models():
    SMALL_BUILDS.setdefault(_small_key(_name), []).append(_name)


@pytest.mark.parametrize("name", [names[0] for names in SMALL_BUILDS.values()],
                         ids=[",".join(names) for names in SMALL_BUILDS.values()])
def test_pruning_a_block_is_the_net_whose_gate_is_zero(name):
    """GR's identity on every builder: removing a gated block gives exactly
    the network whose g(k) = 0 (an ungated block: whose residual f(x) = 0),
    stage-first pre-activation units included, on random BatchNorm statistics
    and gates."""
    model = _small(name)
    randomize_bn(model, scale=0.3)
    for i, gate in enumerate(analysis.gates.gate_layers(model)):
        gate.k.assign(0.3 + 0.1 * (i % 7))
    blocks = [b for b in analysis.residual_blocks(model) if b.removable]
    if name == "plain_mlp":
        assert blocks == []  # GR's plain net has no residual block
        return
    assert blocks, name
    x = random_inputs(model, batch=2)
    # the first removable block of each stage (where the pre-activation is
    # shared), and one more
    firsts = {b.name.rsplit("_block", 1)[0]: b for b in reversed(blocks)}
    for block in sorted({*firsts.values(), blocks[-1]}, key=lambda b: b.index):
        pruned = keras.ops.convert_to_numpy(analysis.prune(model, [block])(x, training=False))
        if block.gate is not None:
            gate = model.get_layer(block.gate)
            saved = keras.ops.convert_to_numpy(gate.k)
            gate.k.assign(-0.3)  # g(k) = ReLU(k) = 0
            closed = keras.ops.convert_to_numpy(model(x, training=False))
            gate.k.assign(saved)
        else:
            merge = next(n for n in block.layers if n.endswith("_add"))
            layer = _residual_source(model, merge)
            saved = layer.get_weights()
            layer.set_weights([np.zeros_like(w) for w in saved])  # f(x) = 0
            closed = keras.ops.convert_to_numpy(model(x, training=False))
            layer.set_weights(saved)
        # the same float32 operations on the same values: equal to the bit
        np.testing.assert_array_equal(pruned, closed, err_msg=f"{name}: {block.name}")


def test_closed_gates_go_and_the_predictions_stay(tmp_path, capsys):
    """GR's "faster predictions by using a pruned version": every block whose
    g(k) = 0 exactly removed at once, the outputs unchanged to the bit."""
    model = zoo.gresnet_mlp(depth=10, input_shape=(4, 4, 1))  # 5 blocks
    randomize_bn(model, scale=0.3)
    for i, gate in enumerate(analysis.gates.gate_layers(model)):
        gate.k.assign(-0.2 if i in (1, 3) else 0.4 + 0.1 * i)  # g(k) = 0 on block2, block4
    closed = analysis.closed_blocks(model)
    assert [b.name for b in closed] == ["block2", "block4"]
    x = random_inputs(model, batch=4)
    pruned = analysis.prune(model, closed)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(pruned(x, training=False)),
                                  keras.ops.convert_to_numpy(model(x, training=False)))
    assert pruned.count_params() < model.count_params()
    model.save(tmp_path / "m.keras")
    out = tmp_path / "small.keras"
    assert cli.main(["prune", str(tmp_path / "m.keras"), "--zero-gates", "--out", str(out)]) == 0
    assert "removed 2 blocks: block2, block4" in capsys.readouterr().out and out.is_file()
    for gate in analysis.gates.gate_layers(model):
        gate.k.assign(0.5)
    model.save(tmp_path / "open.keras")
    assert cli.main(["prune", str(tmp_path / "open.keras"), "--zero-gates"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no removable block whose gate is exactly closed" in err[0]
    assert cli.main(["prune", str(tmp_path / "m.keras"), "--zero-gates", "--count", "1"]) == 2
    assert "give one of --blocks" in capsys.readouterr().err
