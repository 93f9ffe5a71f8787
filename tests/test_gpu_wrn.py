"""``scripts/benchmarks/gpu_wrn.py``, the one-lease script of GR Table 3's WRN
row: its epoch budget, its refusal of a folder without Fashion-MNIST, and
its ``--smoke`` run on a CPU (JAX, one step of ``wide_gresnet(n=4,
widen_factor=1)`` on the real Fashion-MNIST files), which must leave in
``--out`` what a lease brings back: the run's files and ``summary.json``
with the test error and the 12 gates."""

import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "benchmarks" / "gpu_wrn.py"
FASHION = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist (`make data`)


def _script():
    spec = importlib.util.spec_from_file_location("gpu_wrn", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("budget_s,images_per_s,overhead_s",
                         [(480, 6036.4, 60), (420, 2000, 30), (7200, 6036.4, 60)])
def test_the_epochs_fit_the_budget(budget_s, images_per_s, overhead_s):
    # Each epoch trains the 60k images and tests the 10k at 3x the rate:
    # the epochs chosen fit after the overhead, one more would not.
    wrn = _script()
    epochs = wrn.epochs_for(budget_s, images_per_s, overhead_s)
    epoch_s = wrn.TRAIN_IMAGES / images_per_s + wrn.TEST_IMAGES / (3 * images_per_s)
    assert overhead_s + epochs * epoch_s <= budget_s < overhead_s + (epochs + 1) * epoch_s


def test_a_budget_too_small_still_trains_one_epoch():
    assert _script().epochs_for(10, 6036.4, 60) == 1


def _run(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_a_folder_without_fashion_mnist_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    result = _run("--data-dir", str(tmp_path), "--smoke", "--run", str(tmp_path / "run"),
                  "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "--data-dir" in last and "t10k-images-idx3-ubyte.gz" in last
    assert "train-images-idx3-ubyte.gz" not in last.split("lacks", 1)[1]
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


@pytest.mark.integration
def test_the_smoke_run_brings_back_the_run_files_and_the_gates(tmp_path):
    run, out = tmp_path / "run", tmp_path / "out"
    result = _run("--data-dir", str(FASHION), "--smoke", "--run", str(run), "--out", str(out),
                  env=dict(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr[-3000:]
    back = out / "wrn"
    for name in ("config.json", "history.csv", "gates.csv", "results.json", "summary.json"):
        assert (back / name).is_file(), name
    assert not (back / "model.keras").exists()  # ~146 MB at widen 10: stays on the lent machine
    summary = json.loads((back / "summary.json").read_text())
    assert summary["smoke"] is True and summary["epochs"] == 1
    assert summary["model"] == "wide_gresnet(n=4, widen_factor=1)"
    assert summary["recipe"] == "wrn_cifar" and summary["dataset"] == "fashion_mnist"
    assert summary["device"].lower().startswith("cpu")
    # WRN-28 with n=4: 3 stages of 4 blocks, one gate each
    assert len(summary["gates"]) == 12
    assert all(math.isfinite(g["k"]) and g["g"] == max(g["k"], 0.0) for g in summary["gates"])
    results = json.loads((back / "results.json").read_text())
    assert summary["test_error_percent"] == results["test_error_percent"]
    assert 0 <= results["test_error_percent"] <= 100
    with open(back / "history.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 1
    assert json.loads((back / "config.json").read_text())["max_train_examples"] == 128
