"""Every Keras backend: which strategies each has (and the refusal of those it
has not), JAX's data parallelism through Keras' own engine against one
device, and what works without TensorFlow. CI also runs the backend-neutral
tests on JAX and on PyTorch (``make test-backends``) and the TensorFlow-free
check in a venv without TensorFlow (``make test-tf-free``)."""

import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import pytest

from keras_gresnet import cli, export, training
from keras_gresnet.training import backends, loop

ROOT = Path(__file__).resolve().parents[1]


def test_each_backend_has_its_strategies_and_refuses_the_others():
    resolve = backends.resolve_strategy
    assert resolve("mirrored", backend="tensorflow") == "mirrored"
    assert resolve("mirrored", backend="jax") == "data_parallel"  # the same idea on JAX
    assert resolve("data_parallel", backend="jax") == "data_parallel"
    assert resolve("auto", backend="torch") == "auto"
    cluster = training.resolve_cluster("127.0.0.1:1,127.0.0.1:2", 0, environ={})
    for backend in ("tensorflow", "jax"):  # JAX's: Keras' DataParallel across processes
        assert resolve("auto", cluster, backend=backend) == "multi_worker"
        with pytest.raises(ValueError, match="strategy='multi_worker' needs a cluster"):
            resolve("multi_worker", backend=backend)
    refusals = [("data_parallel", "tensorflow"), ("mirrored", "torch"),
                ("multi_worker", "torch"), ("data_parallel", "numpy")]
    for name, backend in refusals:
        with pytest.raises(ValueError) as error:
            resolve(name, backend=backend)
        message = str(error.value)
        assert "\n" not in message and f"the {backend} backend" in message
        assert str(list(backends.backend_strategies(backend))) in message


def test_each_backend_is_one_module_with_the_whole_protocol():
    """Every Keras backend that trains is one module with every member of
    ``backends.Backend`` (the same parameters), its loops are complete
    ``TrainingLoop``s, and no other training module branches on the backend."""
    protocol = backends.Backend
    functions = {name: inspect.signature(member) for name, member in vars(protocol).items()
                 if inspect.isfunction(member) and not name.startswith("_")}
    assert {"make_strategy", "start", "sync_batchnorm", "resolve_strategy"} <= set(functions)
    loops = set()
    for name in backends.NAMES:
        module = backends.get(name)
        assert module.__name__ == f"keras_gresnet.training.backends.{name}"
        for member, signature in functions.items():
            assert list(inspect.signature(getattr(module, member)).parameters) == \
                list(signature.parameters)[1:], (name, member)
        assert set(module.STRATEGIES) <= set(backends.STRATEGIES)
        assert set(module.EXPORTS) <= set(export.FORMATS)
        assert isinstance(module.SYNCHRONIZED_LAYERS, bool)
        assert module.FUSED_STEPS is (name == "jax")
        loops |= {v for v in vars(module).values()
                  if isinstance(v, type) and issubclass(v, loop.TrainingLoop)}
    if importlib.util.find_spec("tensorflow") is not None:  # its module imports TensorFlow
        loops.add(importlib.import_module(
            "keras_gresnet.training.backends.tensorflow_multiworker").MultiWorkerLoop)
    # FitLoop, MirroredFitLoop, DataParallelLoop, MultiProcessLoop (+ MultiWorkerLoop)
    assert len(loops) >= 4 and not any(inspect.isabstract(loop) for loop in loops)
    with pytest.raises(ValueError, match="KERAS_BACKEND"):
        backends.get("numpy")
    branching = re.compile(r"backend\(\) *(==|!=|in) ")
    training_dir = Path(training.__file__).parent
    for path in training_dir.glob("*.py"):
        assert not branching.search(path.read_text()), path.name


def test_sync_batchnorm_where_the_backend_can_and_only_there():
    config = dict(model_kwargs=dict(depth=2), dataset="fashion_mnist")
    if keras.backend.backend() == "tensorflow":
        assert training.resolve_config("gresnet_mlp", sync_batchnorm=True, **config)[
            "sync_batchnorm"] is True
        assert training.resolve_config("gresnet_mlp", **config)["sync_batchnorm"] is False
        with pytest.raises(ValueError, match="tensorflow backend"):
            training.resolve_config("gresnet_mlp", strategy="data_parallel", **config)
    else:
        with pytest.raises(ValueError, match=f"on the {keras.backend.backend()} backend"):
            training.resolve_config("gresnet_mlp", sync_batchnorm=True, **config)
        assert training.resolve_config("gresnet_mlp", **config)["sync_batchnorm"] is False
    if keras.backend.backend() == "jax":
        parallel = training.resolve_config("gresnet_mlp", strategy="data_parallel", **config)
        assert parallel["sync_batchnorm"] is True  # one SPMD program: global statistics
        cluster = training.resolve_cluster("127.0.0.1:1,127.0.0.1:2", 1, environ={})
        across = training.resolve_config("gresnet_mlp", cluster=cluster, **config)
        assert across["strategy"] == "multi_worker" and across["sync_batchnorm"] is True
        for strategy, more in (("data_parallel", {}), ("multi_worker", dict(cluster=cluster))):
            with pytest.raises(ValueError, match="always cover the global batch"):
                training.resolve_config("gresnet_mlp", strategy=strategy,
                                        sync_batchnorm=False, **more, **config)


def _run(script, tmp_path, **env):
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / script), str(tmp_path)], cwd=tmp_path,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env), capture_output=True,
        text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_jax_data_parallel_on_two_devices_matches_one_device(tmp_path):
    """2 virtual CPU devices x 32 (Keras' DataParallel) vs 1 device x 64,
    same seed and data order. One SPMD program computes BatchNorm over the
    global batch, so one step is the single device's up to float summation
    order (sums of 64 terms in two orders: a few 2**-24 each; 1e-5 allows
    more than 10 times that), where per-device statistics would differ by
    about 1e-2. Training then feeds round-off back chaotically (no bound of
    the arithmetic; CPUs differ), so the epochs are compared at 2%."""
    report = _run("data_parallel_check.py", tmp_path, KERAS_BACKEND="jax")
    assert report["jax_devices"] == 2 and report["variable_devices"] == ["cpu:0", "cpu:1"]
    assert report["mirrored_is"] == report["auto_is"] == "data_parallel"
    assert report["replicas"] == [2, 1] and report["global_batch"] == [64, 64]
    assert report["sync_batchnorm"] is True
    parallel, single = report["parallel"], report["single"]
    assert parallel[-1]["loss"] < 0.7 * parallel[0]["loss"]  # it learns
    one_parallel, one_single = report["first_step_loss"]
    # one step: sums of 64 terms in two orders, a few 2**-24 each; 1e-5 allows 10x (docstring)
    assert one_parallel == pytest.approx(one_single, rel=1e-5)
    for p, s in zip(parallel, single, strict=True):
        # Round-off fed back chaotically by training (docstring): no arithmetic bound; 2% in loss,
        # 2 points in accuracy (of 2048 training examples), per epoch.
        assert p["loss"] == pytest.approx(s["loss"], rel=2e-2)
        assert p["accuracy"] == pytest.approx(s["accuracy"], abs=0.02)
    accuracy = [r["test_accuracy"] for r in report["results"]]
    assert abs(accuracy[0] - accuracy[1]) < 0.03
    # What the run reports is what its model.keras gives.
    assert report["reloaded_accuracy"] == report["results"][0]["test_accuracy"]
    # Refused before anything is written (JAX would fail in the first epoch's
    # test with an IndivisibleError).
    assert "the test set's last batch holds 63 of its 511 examples" in report["uneven_refusal"]
    assert report["uneven_folder_exists"] is False


@pytest.mark.integration
def test_without_tensorflow_on_jax(tmp_path):
    """tests/tf_free_check.py with TensorFlow unimportable: published
    weights, gates, pruning, fine-tuning from arrays, and `keras-gresnet
    train` on Fashion-MNIST and on CIFAR files through the numpy pipeline."""
    report = _run("tf_free_check.py", tmp_path, KERAS_BACKEND="jax")
    assert report["backend"] == "jax" and report["tensorflow_imported"] is False
    # The published Fashion-MNIST GResNet (12.56% on the whole test set).
    assert report["published_error_percent"] < 15
    assert [g["layer"] for g in report["gates"]] == ["block1_gate"]
    assert report["pruned_blocks"] == 0 and report["finetuned_classes"] == 5
    assert report["mlp_exit"] == 0 and report["mlp_results"]["test_error_percent"] < 80
    assert report["cifar_exit"] == 0
    config = report["cifar_config"]
    assert config["versions"]["input_pipeline"] == "numpy"
    assert "tensorflow" not in config["versions"]
    assert config["data"]["augment"] is True and config["data"]["preprocessing"]["method"] == "mean"


def test_cli_refuses_a_strategy_the_backend_lacks_in_one_line(tmp_path, capsys):
    """JAX has every strategy; there, multi_worker without a cluster is what
    is refused."""
    backend = keras.backend.backend()
    missing = {"tensorflow": "data_parallel", "jax": "multi_worker"}.get(backend, "mirrored")
    out = tmp_path / "run"
    code = cli.main(["train", "gresnet_mlp", "--depth", "2", "--dataset", "fashion_mnist",
                     "--epochs", "1", "--strategy", missing, "--out", str(out)])
    error = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists()
    assert len(error.splitlines()) == 1
    if backend == "jax":
        assert "strategy='multi_worker' needs a cluster" in error
    else:
        assert f"strategy={missing!r} is not available on the {backend} backend" in error
