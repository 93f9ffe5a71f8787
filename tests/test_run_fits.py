"""A run says what it trains on, and trains only at a size that fits (issue
49, items 3 and 4): every run's first lines name its strategy, replicas and
devices; ``--strategy mirrored`` with one device says that it trains one
replica, and ``KERAS_GRESNET_CPU_DEVICES=N`` splits the CPU to try it; a
picture folder read at a size whose training would not fit in memory is
refused in one line naming ``--input-shape`` before anything is written."""

import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from PIL import Image

from keras_gresnet import _cpu, cli, zoo
from keras_gresnet.training import runner
from keras_gresnet.zoo.summary import activation_values


def test_activation_values_is_the_sum_of_the_layers_outputs():
    """By hand for GR's MLP (depth 2, 50 units, 784 inputs, 10 classes)."""
    model = zoo.gresnet_mlp(depth=2)
    by_hand = sum(math.prod(layer.output.shape[1:]) for layer in model.layers
                  if not isinstance(layer, keras.layers.InputLayer))
    assert activation_values(model) == by_hand > 50 * 3


def test_memory_available_reads_meminfo_and_the_cgroup(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert _cpu.memory_available(meminfo, tmp_path / "none") == 2048 * 1024
    (tmp_path / "memory.max").write_text("1000000\n")
    (tmp_path / "memory.current").write_text("400000\n")
    assert _cpu.memory_available(meminfo, tmp_path) == 600000  # the cgroup's lower
    (tmp_path / "memory.max").write_text("max\n")
    assert _cpu.memory_available(meminfo, tmp_path) == 2048 * 1024


@pytest.mark.parametrize("text,expected", [("", None), ("2", 2), (" 8 ", 8), ("0", ValueError),
                                           ("65", ValueError), ("two", ValueError)])
def test_cpu_devices_is_checked(text, expected):
    if expected is ValueError:
        with pytest.raises(ValueError, match=_cpu.CPU_DEVICES):
            _cpu.cpu_devices({_cpu.CPU_DEVICES: text})
    else:
        assert _cpu.cpu_devices({_cpu.CPU_DEVICES: text}) == expected
    environ = {_cpu.CPU_DEVICES: "3", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    _cpu.split_cpu_for_jax(environ)
    assert environ["XLA_FLAGS"].split() == ["--xla_cpu_multi_thread_eigen=false",
                                            "--xla_force_host_platform_device_count=3"]


@pytest.mark.integration  # reads and decodes a picture folder
def test_a_folder_too_large_to_train_is_refused_before_any_write(tmp_path, capsys, monkeypatch):
    """Camera thumbnails of 248x248 without --input-shape: a CIFAR net at that
    size asks 32 GiB a batch of 128, 2 GiB a batch of 4; refused in one line
    (here against a machine of 1.5 GiB free, so the test does not depend on
    this one's memory)."""
    rng = np.random.default_rng(0)
    for name in ("cats", "dogs"):
        (tmp_path / "pictures" / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (248, 248, 3), dtype=np.uint8)).save(
                tmp_path / "pictures" / name / f"{i}.jpg")
    monkeypatch.setattr(runner, "memory_available", lambda: 1.5 * 2**30)
    out = tmp_path / "run"
    code = cli.main(["train", "gresnet_cifar", "--n", "5", "--dataset", "folder", "--data-dir",
                     str(tmp_path / "pictures"), "--batch-size", "4", "--epochs", "1",
                     "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert "248x248x3" in line and "--input-shape" in line and "GiB" in line
    assert not out.exists()
    # the same net at its own size fits the same 1.5 GiB
    net = zoo.gresnet_cifar(n=5, input_shape=(32, 32, 3), classes=2)
    runner._check_memory(net, {"model": "gresnet_cifar", "global_batch_size": 4})


@pytest.mark.integration  # trains (a few steps)
def test_every_run_says_its_strategy_and_one_mirrored_device_says_so(tmp_path, capsys):
    code = cli.main(["train", "gresnet_mlp", "--depth", "2", "--dataset", "fashion_mnist",
                     "--max-train-examples", "256", "--max-test-examples", "256", "--epochs",
                     "1", "--strategy", "mirrored", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 0, err
    line = next(x for x in err.splitlines() if "strategy mirrored" in x)
    assert "1 replica" in line and "found one device" in line and _cpu.CPU_DEVICES in line


@pytest.mark.integration  # a fresh process: the devices are split before TensorFlow starts
@pytest.mark.tensorflow_only
def test_keras_gresnet_cpu_devices_trains_mirrored_replicas(tmp_path):
    env = dict(os.environ, **{_cpu.CPU_DEVICES: "2"})
    done = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth", "2",
         "--dataset", "fashion_mnist", "--max-train-examples", "256", "--max-test-examples",
         "256", "--epochs", "1", "--strategy", "mirrored", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "strategy mirrored, 2 replicas on CPU:0, CPU:1" in done.stderr
