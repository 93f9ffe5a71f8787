"""Run options: TensorBoard logs (``tensorboard=True``, ``--tensorboard``) and
Keras' mixed precision (``dtype_policy=``, ``--mixed-precision``), on tiny
runs of real Fashion-MNIST. The event files are read back with TensorFlow,
which must be installed (on any backend)."""

import json
import sys

import keras
import numpy as np
import pytest

from keras_gresnet import cli, data, training
from keras_gresnet.layers import gate_layers

from helpers import events, read_csv, scalars, steps

FAST = dict(dataset="fashion_mnist", max_train_examples=512, max_test_examples=256, verbose=0)
# 2 gated blocks; plain SGD traces in half the time of GR's Nadam.
MLP = dict(model_kwargs=dict(depth=4), optimizer_name="sgd", optimizer_kwargs={},
           learning_rate=0.1, **FAST)


# --------------------------------------------------------------------------
# TensorBoard.


@pytest.mark.integration
def test_tensorboard_logs_keras_scalars_test_metrics_and_every_gate(tmp_path):
    out = tmp_path / "run"
    run = training.train("gresnet_mlp", epochs=2, validation_split=0.25, out=out,
                         tensorboard=True, **MLP)
    board = out / "tensorboard"
    assert sorted(p.name for p in board.iterdir()) == ["test", "train", "validation"]
    found = events(board)
    history = read_csv(out / "history.csv")

    def column(name):
        return [float(r[name]) for r in history]

    for run_name, prefix in (("train", ""), ("validation", "val_"), ("test", "test_")):
        for metric in ("loss", "accuracy"):
            assert steps(found, run_name, f"epoch_{metric}") == [0, 1], (run_name, metric)
            # TensorBoard stores float32 scalars: one rounding, 2**-24 ~ 6e-8
            assert scalars(found, run_name, f"epoch_{metric}") == pytest.approx(
                column(prefix + metric), rel=1e-6), (run_name, metric)
    assert column("test_loss") != pytest.approx(column("loss"))  # three runs, not one

    # One g(k) per gate per epoch, the gates.csv values, under the gates.csv block.
    gates = read_csv(out / "gates.csv")
    blocks = [g.name for g in gate_layers(run.model)]
    assert blocks == ["block1_gate", "block2_gate"]
    tags = sorted(tag for run_name, tag in found if tag.startswith("gates/"))
    assert tags == [f"gates/{b}" for b in blocks]
    for block in blocks:
        assert steps(found, "train", f"gates/{block}") == [0, 1]
        # TensorBoard stores float32 scalars: one rounding, 2**-24 ~ 6e-8
        assert scalars(found, "train", f"gates/{block}") == pytest.approx(
            [float(r["g"]) for r in gates if r["block"] == block and int(r["epoch"]) >= 1],
            rel=1e-6)
    # TensorBoard stores float32 scalars: one rounding, 2**-24 ~ 6e-8
    assert scalars(found, "train", "gates/block1_gate")[-1] == pytest.approx(
        run.results["gates"]["block1_gate"], rel=1e-6)
    histogram = found[("train", "gates")]
    assert [step for step, _ in histogram] == [0, 1]
    assert histogram[-1][1][:, 2].sum() == len(blocks)  # counts: one per gate

    # The folder is the run's own: --overwrite retrains it and replaces the logs.
    training.train("gresnet_mlp", epochs=1, out=out, overwrite=True, seed=1,
                   tensorboard=True, **MLP)
    again = events(board)
    assert steps(again, "train", "epoch_loss") == [0]
    assert steps(again, "train", "gates/block1_gate") == [0]
    assert ("validation", "epoch_loss") not in again  # no validation split this time
    # A file of the user's in it is never deleted: overwrite is refused.
    (board / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a run's own.*tensorboard"):
        training.train("gresnet_mlp", epochs=1, out=out, overwrite=True, **MLP)
    assert (board / "notes.txt").read_text() == "mine"


def _crash_at(monkeypatch, crash_epoch):
    """Make the epoch backup raise at ``crash_epoch`` (before it saves): a
    run killed after that epoch's history row, before its checkpoint."""
    real = training.EpochBackup.on_epoch_end

    def on_epoch_end(self, epoch, logs=None):
        if epoch == crash_epoch:
            raise RuntimeError("simulated kill")
        real(self, epoch, logs)

    monkeypatch.setattr(training.EpochBackup, "on_epoch_end", on_epoch_end)


@pytest.mark.integration
def test_a_resumed_run_appends_to_its_logs_and_keeps_its_dtype_policy(tmp_path, monkeypatch):
    out = tmp_path / "run"
    kwargs = dict(epochs=3, out=out, tensorboard=True, dtype_policy="mixed_float16", **MLP)
    _crash_at(monkeypatch, 2)
    with pytest.raises(RuntimeError, match="simulated kill"):
        training.train("gresnet_mlp", **kwargs)
    monkeypatch.undo()
    assert keras.config.dtype_policy().name == "float32"  # restored after a raise too
    # Flushed after every epoch: what a killed process logged is on disk.
    first = events(out / "tensorboard")
    assert steps(first, "train", "epoch_loss") == [0, 1]
    assert steps(first, "test", "epoch_loss") == [0, 1]
    assert steps(first, "train", "gates/block2_gate") == [0, 1]
    files = sorted(p.name for p in (out / "tensorboard" / "train").iterdir())
    assert len(files) == 1

    # The policy must match the recorded one; nothing is touched when refused.
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match=r"differs in \['dtype_policy'\]"):
        training.train("gresnet_mlp", **dict(kwargs, dtype_policy="float32"))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before

    run = training.train("gresnet_mlp", **kwargs)
    assert isinstance(run.model.optimizer, keras.optimizers.LossScaleOptimizer)
    found = events(out / "tensorboard")
    history = read_csv(out / "history.csv")
    assert [int(r["epoch"]) for r in history] == [1, 2, 3]
    for run_name in ("train", "test"):
        assert steps(found, run_name, "epoch_loss") == [0, 1, 2]  # each epoch once
    # TensorBoard stores float32 scalars: one rounding, 2**-24 ~ 6e-8
    assert scalars(found, "train", "epoch_loss") == pytest.approx(
        [float(r["loss"]) for r in history], rel=1e-6)
    assert steps(found, "train", "gates/block1_gate") == [0, 1, 2]
    resumed = sorted(p.name for p in (out / "tensorboard" / "train").iterdir())
    assert len(resumed) == 2 and files[0] in resumed  # appended beside the first file
    assert json.loads((out / "config.json").read_text())["dtype_policy"] == "mixed_float16"


@pytest.mark.integration
def test_tensorboard_need_not_match_on_resume_and_float32_is_the_default(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    # An unfinished run's folder, started without TensorBoard (its config only).
    fast = {k: v for k, v in MLP.items() if k != "verbose"}
    (out / "config.json").write_text(json.dumps(
        training.resolve_config("gresnet_mlp", epochs=1, **fast)))
    keras.config.set_dtype_policy("mixed_float16")  # the caller's: not the run's
    run = training.train("gresnet_mlp", epochs=1, out=out, tensorboard=True, **MLP)
    assert "tensorboard" not in run.config  # an output, not part of the run's config
    found = events(out / "tensorboard")
    assert steps(found, "train", "epoch_loss") == [0]
    assert steps(found, "train", "gates/block1_gate") == [0]
    assert run.config["dtype_policy"] == "float32"
    assert {layer.compute_dtype for layer in run.model.layers} == {"float32"}
    assert not isinstance(run.model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert keras.config.dtype_policy().name == "mixed_float16"


def test_tensorboard_without_tensorflow_is_refused_before_any_write(tmp_path, monkeypatch,
                                                                   capsys):
    out = tmp_path / "run"
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` fails
    with pytest.raises(ValueError, match=r"needs tensorboard installed.*pip install "
                                         r"tensorboard"):
        training.train("gresnet_mlp", epochs=1, out=out, tensorboard=True, **MLP)
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(ValueError, match="needs tensorflow and tensorboard installed"):
        training.train("gresnet_mlp", epochs=1, out=out, tensorboard=True, **MLP)
    code = cli.main(["train", "gresnet_mlp", "--depth", "2", "--dataset", "fashion_mnist",
                     "--epochs", "1", "--out", str(out), "--tensorboard"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    if keras.backend.backend() == "tensorflow":  # the backend itself is missing: said first
        assert "KERAS_BACKEND=tensorflow needs tensorflow" in err and "pip install" in err
    else:
        assert "--tensorboard" in err and "needs tensorflow" in err
    assert not out.exists()


def test_tensorboard_must_be_a_bool(tmp_path):
    with pytest.raises(ValueError, match="tensorboard must be True or False, got 'yes'"):
        training.train("gresnet_mlp", epochs=1, out=tmp_path / "run", tensorboard="yes",
                       **MLP)
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------
# Mixed precision.


@pytest.mark.integration
def test_mixed_float16_trains_loss_scaled_and_its_model_loads(tmp_path):
    out = tmp_path / "run"
    keras.config.set_dtype_policy("mixed_bfloat16")  # the caller's: it comes back
    # GR's recipe, its own optimizer (Keras 1's Nadam) inside Keras' loss scaling.
    run = training.train("gresnet_mlp", model_kwargs=dict(depth=4), epochs=2, out=out,
                         dtype_policy="mixed_float16", **FAST)
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    assert json.loads((out / "config.json").read_text())["dtype_policy"] == "mixed_float16"
    assert run.config["dtype_policy"] == "mixed_float16"

    net = run.model
    for layer in net.layers:  # float16 compute, float32 weights; the head float32
        compute = "float32" if layer.name == "predictions" else "float16"
        assert (layer.compute_dtype, layer.variable_dtype) == (compute, "float32"), layer.name
    assert all(w.dtype == "float32" for w in net.weights)
    # Keras wraps the recipe's optimizer and scales the loss by its dynamic scale.
    optimizer = net.optimizer
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert type(optimizer.inner_optimizer).__name__ == "Keras1Nadam"
    scale = float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))
    assert scale > 1
    assert float(keras.ops.convert_to_numpy(optimizer.scale_loss(2.0))) == 2.0 * scale
    losses = [r["loss"] for r in run.history]
    assert all(np.isfinite(losses)) and losses[1] < losses[0]
    gates = read_csv(out / "gates.csv")
    initial = [float(r["g"]) for r in gates if r["epoch"] == "0"]
    assert len(initial) == 2 and [g.g for g in gate_layers(net)] != pytest.approx(initial)

    loaded = keras.saving.load_model(out / "model.keras", safe_mode=True)
    # Every layer's policy is saved with it (the InputLayer's, which computes
    # nothing, is the global one at load time).
    assert [(layer.name, layer.compute_dtype) for layer in loaded.layers[1:]] == [
        (layer.name, layer.compute_dtype) for layer in net.layers[1:]]
    pipe = data.pipeline("fashion_mnist", max_train_examples=512, max_test_examples=256)
    images = next(iter(pipe.test))[0][:16]
    predictions = loaded.predict(images, verbose=0)
    assert predictions.dtype == np.float32 and predictions.shape == (16, 10)
    # the head and its softmax run in float32: 10 rounded terms, ~1e-6 off 1
    np.testing.assert_allclose(predictions.sum(axis=1), 1.0, rtol=1e-5)
    # predict() (compiled) and a direct call run the float16 body in other
    # orders: float16's unit roundoff is 2**-11 (4.9e-4), and the float32
    # head's 50 inputs each carry a few of those, so logits and probabilities
    # (slope <= 1/4 in each logit) may differ by a few 2**-11: 2**-8 allows 8.
    # (Measured 1.9e-4 on an AVX-512 CPU, under 1e-6 on an AVX2 one.)
    np.testing.assert_allclose(predictions, keras.ops.convert_to_numpy(net(images)),
                               atol=2 ** -8)
    loaded.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    accuracy = loaded.evaluate(pipe.test, verbose=0, return_dict=True)["accuracy"]
    # a count over 256 test images (1e-6 < 1/256), both by compiled evaluate(): same order
    assert accuracy == pytest.approx(run.results["test_accuracy"], abs=1e-6)


@pytest.mark.integration
def test_mixed_bfloat16_is_not_loss_scaled(tmp_path):
    keras.config.set_dtype_policy("mixed_float16")
    run = training.train("gresnet_mlp", epochs=1, out=tmp_path / "bf16",
                         dtype_policy="mixed_bfloat16", **MLP)
    assert keras.config.dtype_policy().name == "mixed_float16"
    assert {layer.compute_dtype for layer in run.model.layers[:-1]} == {"bfloat16"}
    assert run.model.layers[-1].compute_dtype == "float32"
    # Only float16 needs loss scaling (bfloat16 has float32's exponent range).
    assert not isinstance(run.model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert np.isfinite(run.results["test_loss"])


def test_build_model_uses_the_configs_policy_and_restores_the_global_one():
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2),
                                     dtype_policy="mixed_bfloat16")
    model = training.build_model(config, (28, 28, 1), 10)
    assert keras.config.dtype_policy().name == "float32"
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert len(dense) == 4 and {layer.compute_dtype for layer in dense[:-1]} == {"bfloat16"}
    assert model.get_layer("predictions").compute_dtype == "float32"
    with pytest.raises(RuntimeError, match="inside"):
        with training.dtype_policy_scope("mixed_float16"):
            assert keras.config.dtype_policy().name == "mixed_float16"
            raise RuntimeError("inside")
    assert keras.config.dtype_policy().name == "float32"


@pytest.mark.parametrize("policy", ["float64", "float16", "mixed_float32", "", None, 16])
def test_bad_dtype_policy_is_refused_before_any_write(tmp_path, policy):
    with pytest.raises(ValueError, match=r"Unknown dtype_policy=.*accepted: 'float32', "
                                         r"'mixed_float16', 'mixed_bfloat16'"):
        training.train("gresnet_mlp", epochs=1, out=tmp_path / "run", dtype_policy=policy,
                       **MLP)
    assert not (tmp_path / "run").exists()


def test_cli_mixed_precision_float64_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["train", "gresnet_mlp", "--depth", "2", "--dataset", "fashion_mnist",
                     "--epochs", "1", "--out", str(out), "--mixed-precision", "float64"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "error: --mixed-precision float64" in err and "mixed_bfloat16" in err
    assert not out.exists()
    assert keras.config.dtype_policy().name == "float32"


def test_resume_compares_the_recorded_policy(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    fast = {k: v for k, v in MLP.items() if k != "verbose"}
    mixed = training.resolve_config("gresnet_mlp", epochs=2, dtype_policy="mixed_float16",
                                    **fast)
    plain = training.resolve_config("gresnet_mlp", epochs=2, **fast)
    (out / "config.json").write_text(json.dumps(mixed))
    assert training.runs.check_folder(out, mixed, overwrite=False) is True
    with pytest.raises(ValueError, match=r"differs in \['dtype_policy'\]"):
        training.runs.check_folder(out, plain, overwrite=False)
    # A config.json from before the option holds no dtype_policy: it was float32.
    (out / "config.json").write_text(json.dumps(
        {k: v for k, v in plain.items() if k != "dtype_policy"}))
    assert training.runs.check_folder(out, plain, overwrite=False) is True
    with pytest.raises(ValueError, match=r"differs in \['dtype_policy'\]"):
        training.runs.check_folder(out, mixed, overwrite=False)


def test_train_command_names_the_mixed_precision():
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=20), epochs=3,
                                     dtype_policy="mixed_bfloat16")
    words = cli.train_command(config).split()
    at = words.index("--mixed-precision")
    assert words[at + 1] == "mixed_bfloat16"
    args, _ = cli.build_parser().parse_known_args(words[1:])
    assert args.dtype_policy == "mixed_bfloat16" and args.tensorboard is False
    assert training.RunOptions.from_namespace(args).dtype_policy == "mixed_bfloat16"
    plain = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=20), epochs=3)
    assert "--mixed-precision" not in cli.train_command(plain)
