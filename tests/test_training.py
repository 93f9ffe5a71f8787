"""Training: the run folder, resuming, seeds, NaN, bad input, real
Fashion-MNIST, MirroredStrategy and the command line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_gresnet import cli, data, training
from keras_gresnet.layers import gate_layers

from helpers import read_csv

FAST = dict(dataset="fashion_mnist", max_train_examples=2048, max_test_examples=512, verbose=0)
ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"


def test_defaults_follow_the_papers():
    assert training.default_recipe("gresnet_mlp") == "gr_mnist"
    assert training.default_recipe("wide_gresnet") == "wrn_cifar"
    # HE's own CIFAR nets: HE's recipe (its warm-up); GR's: GR's form of it.
    for model in ("preact_resnet110", "preact_resnet164", "preact_resnet1001", "resnet110",
                  "resnet164", "resnet1001"):
        assert training.default_recipe(model) == "he_cifar", model
        assert training.default_dataset(model) == "cifar10", model
    assert training.default_recipe("gresnet_cifar") == "preact_cifar"
    assert training.default_recipe("resnet_cifar") == "preact_cifar"
    # The ImageNet builders: HE's ImageNet recipe and data.
    for model in ("resnet50", "resnet101", "resnet152", "resnet200", "preact_resnet50",
                  "preact_resnet200", "gresnet50", "gresnet200", "resnet_imagenet"):
        assert training.default_recipe(model) == "he_imagenet", model
        assert training.default_dataset(model) == "imagenet2012", model
    assert training.default_dataset("plain_mlp") == "mnist"
    assert training.default_dataset("gresnet_cifar") == "cifar10"
    # CIFAR conv nets on the MNIST family: GR's CIFAR recipe at its length;
    # the MLPs and the ImageNet nets keep theirs.
    for model in ("gresnet_cifar", "resnet_cifar", "preact_resnet110", "wide_gresnet"):
        for dataset in ("mnist", "fashion_mnist"):
            assert training.default_recipe(model, dataset) == "preact_mnist", (model, dataset)
        assert training.resolve_config(model, dataset="fashion_mnist")["recipe"]["epochs"] == 40
    assert training.default_recipe("gresnet_mlp", "fashion_mnist") == "gr_mnist"
    assert training.default_recipe("resnet50", "mnist") == "he_imagenet"
    preact_mnist = training.get_recipe("preact_mnist").get_config()
    preact_cifar = training.get_recipe("preact_cifar").get_config()
    assert {k for k in preact_cifar if preact_cifar[k] != preact_mnist[k]} == {
        "name", "epochs", "citation"}
    config = training.resolve_config("preact_resnet50")
    assert config["dataset"] == "imagenet2012" and config["recipe"]["name"] == "he_imagenet"
    assert config["recipe"]["batch_size"] == 256 and config["recipe"]["lr_milestones"] == [30, 60]
    config = training.resolve_config("wide_resnet", epochs=1)
    assert config["model_kwargs"] == {}  # WRN's dropout 0.3 is the builder's default
    assert config["recipe"]["weight_decay"] == 5e-4 and config["recipe"]["epochs"] == 1


@pytest.mark.integration
def test_run_folder_holds_everything(tmp_path):
    out = tmp_path / "run"
    run = training.train("gresnet_mlp", model_kwargs=dict(depth=4), epochs=2, out=out, **FAST)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["config.json", "history.csv", "gates.csv", "model.keras", "history.png",
         "gates.png", "results.json"])  # the backup is gone once the run is finished
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == "gresnet_mlp" and config["model_kwargs"] == {"depth": 4}
    assert config["recipe"]["name"] == "gr_mnist" and config["recipe"]["epochs"] == 2
    assert config["recipe"]["optimizer_name"] == "keras1_nadam"
    assert config["data"]["preprocessing"]["method"] == "scale"
    assert config["replicas"] == 1 and config["global_batch_size"] == 128
    assert "lr_schedule" not in config  # noted only where milestones merge

    history = read_csv(out / "history.csv")
    assert [int(r["epoch"]) for r in history] == [1, 2]  # as the console counts
    assert {"loss", "accuracy", "test_loss", "test_accuracy", "lr"} <= set(history[0])
    assert float(history[0]["lr"]) == pytest.approx(0.002)

    gates = read_csv(out / "gates.csv")
    assert [(int(r["epoch"]), r["block"]) for r in gates] == [
        (e, b) for e in (0, 1, 2) for b in ("block1_gate", "block2_gate")]  # 0: initial
    assert all(float(r["k"]) == 1.0 for r in gates[:2])  # GR: k starts at 1
    final = {r["block"]: float(r["g"]) for r in gates[-2:]}
    assert final == pytest.approx(run.results["gates"])
    assert final != pytest.approx({"block1_gate": 1.0, "block2_gate": 1.0})  # k learned

    for name in ("history.png", "gates.png"):
        assert (out / name).read_bytes()[:8] == PNG
    results = json.loads((out / "results.json").read_text())
    assert results["epochs"] == 2
    assert results["test_error_percent"] == pytest.approx(100 * (1 - results["test_accuracy"]))

    keras.backend.clear_session()
    loaded = keras.saving.load_model(out / "model.keras", safe_mode=True)
    assert not loaded.compiled  # the published file holds no optimizer state
    loaded.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    pipe = data.pipeline("fashion_mnist", max_train_examples=2048, max_test_examples=512)
    reloaded = loaded.evaluate(pipe.test, verbose=0, return_dict=True)
    # an accuracy over 512 test images: 1e-6 is below one image, so the same count
    assert reloaded["accuracy"] == pytest.approx(results["test_accuracy"], abs=1e-6)
    assert [g.name for g in gate_layers(loaded)] == ["block1_gate", "block2_gate"]

    own = training.evaluate(out)  # the run's own test set: its 512-example subset
    assert own["examples"] == 512 and own["dataset"] == "fashion_mnist"
    # the same count: one image is 100/512 ~ 0.2 points, far above 1e-6
    assert own["test_error_percent"] == pytest.approx(results["test_error_percent"], abs=1e-6)


@pytest.mark.integration
def test_same_seed_gives_the_same_history(tmp_path):
    def history(seed, name):
        run = training.train("gresnet_mlp", model_kwargs=dict(depth=2), epochs=2, seed=seed,
                             out=tmp_path / name, **FAST)
        return [(r["loss"], r["test_loss"]) for r in run.history]

    first, again, other = history(7, "a"), history(7, "b"), history(8, "c")
    assert first == again
    assert first != other


@pytest.mark.integration
def test_a_one_step_run_merges_its_milestones_and_says_so(tmp_path, capsys):
    """Issue 39: 100 examples of batch 128 make a 1-step run, on which
    preact_mnist's 50% and 75% fall on steps 0 and 1; they merge (both from
    step 1), the run trains, and the schedule it got is one line on stderr
    and in config.json."""
    out = tmp_path / "run"
    run = training.train("gresnet_cifar", model_kwargs=dict(n=1), dataset="fashion_mnist",
                         epochs=1, max_train_examples=100, max_test_examples=64, out=out,
                         verbose=2)
    note = ("Recipe 'preact_mnist': lr_milestones (0.5, 0.75) (fraction) fall on steps (0, 1) "
            "of a 1-step run, merged: learning rate 0.1 x0.01 from step 1")
    assert capsys.readouterr().err.count(note) == 1
    assert json.loads((out / "config.json").read_text())["lr_schedule"] == note
    assert [float(r["lr"]) for r in read_csv(out / "history.csv")] == pytest.approx([0.1])
    assert run.results["epochs"] == 1


def test_nan_loss_stops_the_run_with_a_clear_error(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(training.TrainingDiverged, match=r"loss became (nan|inf).*learning rate"):
        training.train("plain_mlp", model_kwargs=dict(depth=2), epochs=3, out=out,
                       optimizer_name="sgd", optimizer_kwargs={}, learning_rate=1e12, **FAST)
    assert not (out / "model.keras").exists() and not (out / "results.json").exists()
    assert len(read_csv(out / "history.csv")) <= 1


@pytest.mark.parametrize("kwargs,message", [
    (dict(model="gresnet"), "name='gresnet'"),
    (dict(model_kwargs=dict(depth=3)), "depth must be even"),
    (dict(model_kwargs=dict(depth=2, widen=2)), "unexpected keyword argument 'widen'"),
    (dict(model_kwargs=dict()), "missing 1 required positional argument: 'depth'"),
    (dict(model_kwargs=dict(classes=3)), "come from the dataset"),
    (dict(epochz=3), "Unknown Recipe field"),
    (dict(recipe="fb_imagenet"), "recipe name='fb_imagenet'"),
    (dict(dataset="svhn"), "dataset='svhn'"),
    (dict(validation_split=1.5), "validation_split must be"),
    (dict(strategy="tpu"), "strategy='tpu'"),
    (dict(seed=-1), r"seed must be an integer in \[0, 2147483647\]"),
    (dict(epochs=0), "epochs"),
])
def test_bad_input_leaves_no_run_folder(tmp_path, kwargs, message):
    args = dict(model="gresnet_mlp", model_kwargs=dict(depth=2), epochs=1,
                out=tmp_path / "run", **FAST)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        training.train(args.pop("model"), **args)
    assert not (tmp_path / "run").exists()


@pytest.mark.integration
def test_finished_run_is_kept_unless_overwritten(tmp_path):
    out = tmp_path / "run"
    kwargs = dict(model_kwargs=dict(depth=2), epochs=1, out=out, **FAST)
    training.train("gresnet_mlp", **kwargs)
    before = (out / "results.json").read_text()
    with pytest.raises(ValueError, match="finished run"):
        training.train("gresnet_mlp", **kwargs)
    assert (out / "results.json").read_text() == before
    training.train("gresnet_mlp", overwrite=True, seed=1, **kwargs)
    assert json.loads((out / "config.json").read_text())["seed"] == 1


def test_unfinished_run_with_another_config_is_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    fast = {k: v for k, v in FAST.items() if k != "verbose"}
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2), epochs=5, **fast)
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"another config \(differs in \['recipe'\]\)"):
        training.train("gresnet_mlp", model_kwargs=dict(depth=2), epochs=1, out=out, **FAST)
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]


def test_k_decay_reaches_the_gates_only_when_asked():
    for k_decay in (False, True):
        config = training.resolve_config("gresnet_cifar", model_kwargs=dict(n=1),
                                         k_decay=k_decay)
        model = training.build_model(config, (16, 16, 3), 10)
        assert all((g.k.regularizer is not None) == k_decay for g in gate_layers(model))
        kernels = [w for w in model.weights if w.name == "kernel"]
        assert kernels and all(w.regularizer is not None for w in kernels)
        # The papers' code decays BN's gamma and beta too; not the statistics.
        gammas = [w for w in model.weights if w.name in ("gamma", "beta")]
        assert gammas and all(w.regularizer is not None for w in gammas)
        assert all(w.regularizer is None for w in model.non_trainable_weights)


def test_strategies():
    strategy = training.make_strategy("auto")
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        assert strategy is tf.distribute.get_strategy()  # no GPU here
    else:  # one CPU device here
        assert isinstance(strategy, training.loop.SingleDevice)
    assert training.make_strategy("one_device").num_replicas_in_sync == 1
    with pytest.raises(ValueError, match="strategy='tpu'"):
        training.make_strategy("tpu")


@pytest.mark.tensorflow_only
def test_one_gpu_trains_under_one_device_strategy_whose_input_is_prefetched_there(
        monkeypatch, tmp_path):
    """On one GPU "auto" is ``OneDeviceStrategy("/gpu:0")``: the dataset
    Keras' ``fit`` iterates is its distributed dataset, prefetched to the
    GPU, where the default strategy hands the dataset back as it is (the
    batch would cross to the GPU inside each step). No GPU here: the GPU is
    faked for the choice, and ``fit`` runs under the strategy on the CPU."""
    import tensorflow as tf

    from keras_gresnet.training.backends import tensorflow as backend

    real = tf.config.list_logical_devices
    gpu = tf.config.LogicalDevice(name="/device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        lambda device_type=None: [gpu] if device_type == "GPU" else real(device_type))
    strategy = backend.make_strategy("auto", None)
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    assert strategy.extended.worker_devices == ("/job:localhost/replica:0/task:0/device:GPU:0",)
    monkeypatch.undo()
    assert backend.make_strategy("auto", None) is tf.distribute.get_strategy()  # no GPU here

    dataset = tf.data.Dataset.range(4).batch(2)
    assert tf.distribute.get_strategy().experimental_distribute_dataset(dataset) is dataset
    distributed = tf.distribute.OneDeviceStrategy("/cpu:0").experimental_distribute_dataset(dataset)
    assert isinstance(distributed, tf.distribute.DistributedDataset)
    assert [b.device for b in distributed] == ["/job:localhost/replica:0/task:0/device:CPU:0"] * 2

    run = training.train("gresnet_mlp", strategy="one_device", model_kwargs=dict(depth=2),
                         dataset="fashion_mnist", epochs=1, max_train_examples=512,
                         max_test_examples=256, verbose=0, seed=0, out=str(tmp_path / "run"))
    assert run.config["strategy"] == "one_device" and run.config["replicas"] == 1
    assert len(run.history) == 1 and np.isfinite(run.history[0]["loss"])
    assert 0 <= run.results["test_error_percent"] <= 100


def _cli(*args):
    return [sys.executable, "-m", "keras_gresnet.cli", *args]


def _quiet_env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


@pytest.mark.integration
def test_resume_after_sigkill_continues_the_history(tmp_path):
    out = tmp_path / "run"
    command = _cli("train", "gresnet_mlp", "--depth", "2", "--dataset", "fashion_mnist",
                   "--epochs", "6", "--max-train-examples", "12000",
                   "--max-test-examples", "500", "--seed", "1", "--out", str(out))
    first = subprocess.Popen(command, cwd=ROOT, env=_quiet_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and first.poll() is None:
            if list((out / "backup").glob("epoch-*.weights.h5")):
                break
            time.sleep(0.02)
        assert first.poll() is None, "the first run ended before it could be killed"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    killed_at = read_csv(out / "history.csv")
    assert 1 <= len(killed_at) < 6
    assert not (out / "results.json").exists() and (out / "backup").exists()

    second = subprocess.run(command, cwd=ROOT, env=_quiet_env(), capture_output=True, text=True,
                            timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Epoch 1/6" not in second.stdout  # resumed, not restarted
    history = read_csv(out / "history.csv")
    assert [int(r["epoch"]) for r in history] == [1, 2, 3, 4, 5, 6]
    assert history[0] == killed_at[0]  # the epoch trained before the kill is kept
    gate_epochs = [int(r["epoch"]) for r in read_csv(out / "gates.csv")]
    assert gate_epochs == [0, 1, 2, 3, 4, 5, 6]
    assert json.loads((out / "results.json").read_text())["epochs"] == 6
    assert not (out / "backup").exists()
    # Epoch e reads the batches of (seed, e), and the backup holds the
    # optimizer: the run ends as the uninterrupted run does, to the bit.
    uninterrupted = training.train("gresnet_mlp", model_kwargs=dict(depth=2), epochs=6,
                                   dataset="fashion_mnist", max_train_examples=12000,
                                   max_test_examples=500, seed=1, out=tmp_path / "again",
                                   verbose=0)
    resumed = keras.saving.load_model(out / "model.keras")
    for a, b in zip(resumed.weights, uninterrupted.model.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)
    assert [float(r["loss"]) for r in history] == [r["loss"] for r in uninterrupted.history]


@pytest.mark.integration
def test_real_fashion_mnist_training_beats_a_broken_model(tmp_path):
    """Full Fashion-MNIST, 2 epochs of a GResNet with 4 middle layers: a model
    that does not learn stays near 10% accuracy; measured here ~86%."""
    run = training.train("gresnet_mlp", model_kwargs=dict(depth=4), dataset="fashion_mnist",
                         epochs=2, out=tmp_path / "run", verbose=0)
    assert run.config["data"]["source"]["train"].startswith("/usr/share/datasets")
    assert run.history[1]["loss"] < run.history[0]["loss"]
    assert run.results["test_accuracy"] > 0.83


@pytest.mark.integration
@pytest.mark.tensorflow_only
def test_mirrored_strategy_matches_a_single_device(tmp_path):
    """2 logical CPU replicas x 32 vs 1 device x 64, same seed and data order.
    BatchNorm uses each replica's 32 examples (as the papers' multi-GPU runs),
    so the runs are close, not equal: measured 5-10% apart in training loss
    and under 1 point in test accuracy; we allow 20% and 6 points. With
    sync_batchnorm the statistics cover all 64 and the loss is the single
    device's to 1e-5 while round-off stays small (two epochs here). The three runs share one process, which a fresh
    MirroredStrategy per run would break (tensorflow/tensorflow#62790)."""
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "mirrored_check.py"),
                             str(tmp_path)], cwd=ROOT, env=_quiet_env(), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == [2, 1] and report["global_batch"] == [64, 64]
    assert report["replicas_trainable_equal"]
    mirrored, single = report["mirrored"], report["single"]
    assert mirrored[-1]["loss"] < 0.7 * mirrored[0]["loss"]
    for m, s in zip(mirrored, single):
        assert abs(m["loss"] - s["loss"]) < 0.2 * s["loss"]
    accuracy = [r["test_accuracy"] for r in report["results"]]
    assert abs(accuracy[0] - accuracy[1]) < 0.06
    # The accuracy a mirrored run reports is the one its model.keras scores.
    reported = [accuracy[0], report["synchronized_results"]["test_accuracy"]]
    # the same count of correct test images: 1e-6 is below one image
    assert report["reloaded"] == pytest.approx(reported, abs=1e-6)
    # Synchronised: the single device's loss up to round-off amplified by
    # training. One step differs by float32 sums of 64 terms in two orders (a
    # few 2**-24 each), but every step feeds the difference back (a chaotic
    # map: no bound of the arithmetic, and CPUs differ: 7e-8 after two epochs,
    # then 3.2e-4 in epoch 3 on an AVX2 CPU, 3.2e-3 on an AVX-512 one). What
    # must not happen is the per-replica statistics' error, 5-10% from epoch
    # 1: 2% tells them apart in every epoch.
    synchronized = report["synchronized"]
    for m, s in zip(synchronized, single, strict=True):
        assert m["loss"] == pytest.approx(s["loss"], rel=2e-2)


def test_cli_options_split_into_recipe_and_builder():
    options = cli.parse_extra(["--depth", "20", "--k-decay", "--lr=0.01", "--unit", "original",
                               "--lr-milestones", "(0.5,0.75)"])
    assert options == {"depth": 20, "k_decay": True, "lr": 0.01, "unit": "original",
                       "lr_milestones": (0.5, 0.75)}
    overrides, builder = cli.split_options(options)
    assert overrides == {"k_decay": True, "learning_rate": 0.01, "lr_milestones": (0.5, 0.75)}
    assert builder == {"depth": 20, "unit": "original"}
    with pytest.raises(ValueError, match="unexpected argument 'oops'"):
        cli.parse_extra(["oops"])


def test_cli_bad_input_is_one_clear_line(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["train", "gresnet_mlp", "--depth", "3", "--dataset", "fashion_mnist",
                     "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "error: depth must be even" in err and "Traceback" not in err
    assert not out.exists()
    assert cli.main(["evaluate", str(tmp_path / "missing.keras")]) == 2


def test_epoch_backup_is_atomic_keeps_two_and_skips_a_diverged_epoch(tmp_path):
    def model():
        net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        net.compile(optimizer="adam", loss="mse")
        net.optimizer.build(net.trainable_variables)
        return net

    net, folder = model(), tmp_path / "backup"
    backup = training.EpochBackup(folder)
    backup.set_model(net)
    assert backup.restore(model()) == 0  # nothing to restore
    for epoch in range(3):
        net.layers[0].kernel.assign(np.full((3, 2), float(epoch), "float32"))
        net.optimizer.iterations.assign(10 * (epoch + 1))
        backup.on_epoch_end(epoch, {"loss": 1.0})
    backup.on_epoch_end(3, {"loss": float("nan")})  # not saved
    assert sorted(p.name for p in folder.iterdir()) == [
        "epoch-00002.weights.h5", "epoch-00003.weights.h5"]  # no temporary file left
    fresh = model()
    assert backup.restore(fresh) == 3
    np.testing.assert_array_equal(np.asarray(fresh.layers[0].kernel), np.full((3, 2), 2.0))
    assert int(fresh.optimizer.iterations) == 30  # the optimizer state comes back
    (folder / "epoch-00003.weights.h5").write_bytes(b"truncated")  # the newest unreadable
    fresh = model()
    assert backup.restore(fresh) == 2
    np.testing.assert_array_equal(np.asarray(fresh.layers[0].kernel), np.full((3, 2), 1.0))


@pytest.mark.integration
def test_a_crash_after_the_last_epoch_resumes_without_training(tmp_path, monkeypatch):
    out = tmp_path / "run"
    kwargs = dict(model_kwargs=dict(depth=2), epochs=2, out=out, **FAST)

    def crash(*args, **kw):
        raise RuntimeError("simulated crash while plotting")

    monkeypatch.setattr(training.runs.plots, "plot_history", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        training.train("gresnet_mlp", **kwargs)
    assert [p.name for p in (out / "backup").iterdir()] == ["epoch-00001.weights.h5",
                                                            "epoch-00002.weights.h5"]
    monkeypatch.undo()
    first = read_csv(out / "history.csv")
    run = training.train("gresnet_mlp", **kwargs)
    assert read_csv(out / "history.csv") == first  # nothing trained again
    assert run.results["epochs"] == 2 and (out / "results.json").exists()
    assert not (out / "backup").exists()
    # the machine it finished on, beside its timing
    from keras_gresnet._cpu import cpu_info

    assert run.results["machine"]["model"] == cpu_info()["model"]
