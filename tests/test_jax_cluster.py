"""Training across processes on JAX (``strategy="multi_worker"`` under
``KERAS_BACKEND=jax``: ``keras.distribution.initialize`` and Keras'
``DataParallel`` over every process's devices), with 2 real processes on
127.0.0.1 talking through JAX's CPU collectives (gloo). Covers agreement
with one process on 2 devices, that only the chief writes, the TensorFlow-free
pipeline on a cluster, resuming from the chief's backup, and each process's
share of every batch.

The processes run tests/jax_cluster_check.py (or the CLI) with
``KERAS_BACKEND=jax``, whatever backend runs this file.
"""

import json
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_gresnet import data
from keras_gresnet.training import local_workers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (  # noqa: E402
    events, job, kill_a_worker_after_a_backup, read_csv, report, steps, trainable,
)
from jax_cluster_check import GLOBAL_BATCH, RUN  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tests" / "jax_cluster_check.py"
JAX = {"KERAS_BACKEND": "jax"}


def run_check(tmp, workers, count=1, overrides=None):
    """``count`` processes of tests/jax_cluster_check.py (``workers``: the
    cluster's addresses, or ``devices2`` / ``devices1``); returns their
    folders and report folders."""
    folders = [tmp / f"p{i}" for i in range(count)]
    extra = [json.dumps(overrides)] if overrides else []
    commands = [[sys.executable, str(CHECK), str(tmp / "reports"), workers, str(i), *extra]
                for i in range(count)]
    with job(commands, folders, env=JAX) as processes:
        codes = processes.wait()
        assert codes == [0] * count, "\n".join(processes.output(i)[-3000:]
                                               for i in range(count))
    names = [f"process{i}" for i in range(count)] if count > 1 else [workers]
    return folders, [tmp / "reports" / name for name in names]


def cluster(tmp, overrides=None):
    return run_check(tmp, local_workers(2), 2, overrides)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    return cluster(tmp_path_factory.mktemp("two_processes"))


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    return run_check(tmp_path_factory.mktemp("two_devices"), "devices2")[1][0]


@pytest.mark.integration
def test_two_processes_train_as_one_process_on_two_devices(two_processes, two_devices):
    """The same SPMD program over the same 2 devices, whether they belong to
    one process or two: the same numbers (measured: bit-identical losses;
    allowed 1e-6 relative), and both processes hold the same weights."""
    _, (chief, other) = two_processes
    mine, reference = report(chief), report(two_devices)
    assert mine["process_count"] == 2 and mine["devices"] == 2 and mine["local_devices"] == 1
    config = mine["config"]
    assert config["strategy"] == "multi_worker" and config["num_workers"] == 2
    assert config["replicas"] == 2 and config["global_batch_size"] == GLOBAL_BATCH
    assert config["sync_batchnorm"] is True  # one SPMD program: global statistics
    assert config["versions"]["backend"] == "jax"
    history = mine["history"]
    assert [r["epoch"] for r in history] == list(range(1, RUN["epochs"] + 1))
    assert history[-1]["loss"] < 0.6 * history[0]["loss"]  # it learns
    for a, b in zip(history, reference["history"], strict=True):
        for key in ("loss", "accuracy", "test_loss", "test_accuracy"):
            # one SPMD program; a 2-device all-reduce is a + b == b + a: bitwise (docstring)
            assert a[key] == pytest.approx(b[key], rel=1e-6), (key, a, b)
    for a, b in zip(report(other)["history"], history, strict=True):
        a.pop("seconds"), b.pop("seconds")  # (each process's own clock)
        assert a == b  # both log the same global numbers
    first, second, single = trainable(chief), trainable(other), trainable(two_devices)
    assert sorted(first) == sorted(single) and len(first) > 5
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
        # the one-process program (bitwise losses above): float32 slack only
        np.testing.assert_allclose(first[name], single[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.integration
def test_only_the_chief_writes_and_its_model_is_the_run(two_processes):
    (chief_folder, other_folder), (chief, other) = two_processes
    run = chief_folder / "run"
    assert (run / "model.keras").is_file() and (run / "results.json").is_file()
    assert not (run / "backup").exists()  # gone once the run is finished
    assert not (other_folder / "run").exists()
    assert report(other)["out"] is None and report(chief)["out"] == "run"
    results = json.loads((run / "results.json").read_text())
    assert results["test_loss"] == report(chief)["results"]["test_loss"]
    assert results["epochs"] == RUN["epochs"]
    # The saved model is an ordinary one: it loads here, on one device.
    saved = keras.saving.load_model(run / "model.keras", safe_mode=True)
    weights = trainable(chief)
    for variable in saved.trainable_variables:
        np.testing.assert_array_equal(np.asarray(variable), weights[variable.path])


@pytest.mark.integration
def test_a_cluster_without_tensorflow_reads_the_same_batches(two_processes, tmp_path):
    """TensorFlow unimportable in both processes (the GPU machine's case):
    the numpy pipeline, each process its share, trains what the tf.data
    pipeline trained."""
    _, (chief, _) = cluster(tmp_path, {"tf_free": True})
    mine, reference = report(chief), report(two_processes[1][0])
    assert mine["tensorflow_imported"] is False
    assert mine["config"]["versions"]["input_pipeline"] == "numpy"
    for a, b in zip(mine["history"], reference["history"], strict=True):
        # The numpy pipeline yields tf.data's batches: the same arithmetic (1e-6: slack);
        # accuracies 1e-6 apart are the same count of test images.
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6), (a, b)
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-6)


def _train_command(addresses, index, epochs=RUN["epochs"]):
    return [sys.executable, "-m", "keras_gresnet.cli", "train", RUN["model"],
            "--depth", str(RUN["model_kwargs"]["depth"]), "--dataset", RUN["dataset"],
            "--epochs", str(epochs), "--seed", str(RUN["seed"]),
            "--max-train-examples", str(RUN["max_train_examples"]),
            "--max-test-examples", str(RUN["max_test_examples"]),
            "--batch-size", str(GLOBAL_BATCH // 2), "--out", "run",
            "--workers", addresses, "--worker-index", str(index), "--tensorboard"]


@pytest.mark.integration
def test_a_killed_process_is_survived_by_resuming(tmp_path, two_processes):
    """SIGKILL process 1 once the chief has backed up an epoch: the chief
    stops at once with exit code 4 and a clear message (not after JAX's
    heartbeat timeout, nor with SIGABRT at its shutdown); the same two
    commands again resume from the chief's backup (loaded by the chief
    alone, then sent to the other process) and finish the run as the
    uninterrupted one did: the same weights, each epoch once in the
    history and in the chief's TensorBoard logs."""
    addresses = local_workers(2)
    folders = [tmp_path / "p0", tmp_path / "p1"]
    commands = [_train_command(addresses, i) for i in range(2)]
    kill_a_worker_after_a_backup(commands, folders, env=JAX)
    backup = folders[0] / "run" / "backup"
    run = folders[0] / "run"
    before = read_csv(run / "history.csv")
    assert 1 <= len(before) < RUN["epochs"] and not (run / "results.json").exists()

    with job(commands, folders, env=JAX) as processes:
        codes = processes.wait()
        assert codes == [0, 0], processes.output(0)[-3000:] + processes.output(1)[-3000:]
    history = read_csv(run / "history.csv")
    assert [int(r["epoch"]) for r in history] == list(range(1, RUN["epochs"] + 1))
    assert history[: len(before)] == before
    assert not backup.exists() and not (folders[1] / "run").exists()
    logged = events(run / "tensorboard")  # the chief's callback, outside the distribution
    for run_name in ("train", "test"):
        assert steps(logged, run_name, "epoch_loss") == list(range(RUN["epochs"]))
    (uninterrupted, _), (chief, _) = two_processes
    resumed = keras.saving.load_model(run / "model.keras")
    reference = keras.saving.load_model(uninterrupted / "run" / "model.keras")
    for a, b in zip(resumed.weights, reference.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)
    # resumed = uninterrupted to the bit (weights equal above); history.csv holds repr()s
    assert [float(r["loss"]) for r in history] == pytest.approx(
        [r["loss"] for r in report(chief)["history"]], rel=1e-6)


@pytest.mark.parametrize("input_pipeline", ["numpy", "tf_data"])
def test_each_process_feeds_its_share_of_every_batch(input_pipeline):
    """process_share: the shares of the processes, in order, are each batch,
    the partial last one too (here 100 = 3 x 32 + 4 examples)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (100, 4, 4, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, 100)
    stream = data.make_dataset(images, labels, batch_size=32, shuffle=True, augment=True,
                               padding=1, seed=3, epochs=(0, 2), input_pipeline=input_pipeline)
    shares = [data.process_share(stream, i, 2) for i in range(2)]
    if input_pipeline == "numpy":
        batches = [stream[i] for i in range(len(stream))]
        parts = [[share[i] for i in range(len(share))] for share in shares]
    else:
        batches = [(x.numpy(), y.numpy()) for x, y in stream]
        parts = [[(x.numpy(), y.numpy()) for x, y in share] for share in shares]
    assert [len(y) for _, y in batches] == [32, 32, 32, 4] * 2
    assert [len(y) for _, y in parts[1]] == [16, 16, 16, 2] * 2
    for (x, y), first, second in zip(batches, *parts, strict=True):
        np.testing.assert_array_equal(np.concatenate([first[0], second[0]]), x)
        np.testing.assert_array_equal(np.concatenate([first[1], second[1]]), y)
        assert not np.array_equal(first[0], second[0])
    assert data.process_share(stream, 0, 1) is stream


@pytest.mark.parametrize("index, count, message", [
    (2, 2, "index must be 0..1"), (0, 0, "count"), (-1, 2, "index")])
def test_a_bad_share_is_refused(index, count, message):
    stream = data.make_dataset(np.zeros((4, 2, 2, 1), np.uint8), np.zeros(4, int),
                               batch_size=2, input_pipeline="numpy")
    with pytest.raises(ValueError, match=message):
        data.process_share(stream, index, count)


def test_a_batch_that_does_not_split_over_the_devices_is_refused():
    from keras_gresnet.training.backends.jax import check_even_batches

    check_even_batches({"training": 100, "test": 40}, 32, 2)  # 4 and 8 split
    with pytest.raises(ValueError) as error:
        check_even_batches({"training": 100, "test": 41}, 32, 2)
    message = str(error.value)
    assert "\n" not in message and "the test set's last batch holds 9 of its 41" in message
    assert "multiple of 2" in message


def test_the_cluster_numbers_its_processes_chief_first():
    from keras_gresnet.training import resolve_cluster

    plain = resolve_cluster("h:1,h:2,h:3", 2, environ={})
    assert plain.addresses == ("h:1", "h:2", "h:3") and plain.process_index == 2
    config = {"cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"]},
              "task": {"type": "worker", "index": 1}}
    with_chief = resolve_cluster(environ={"TF_CONFIG": json.dumps(config)})
    assert with_chief.addresses == ("c:1", "w:1", "w:2") and with_chief.process_index == 2
    config["task"] = {"type": "chief", "index": 0}
    assert resolve_cluster(environ={"TF_CONFIG": json.dumps(config)}).process_index == 0
