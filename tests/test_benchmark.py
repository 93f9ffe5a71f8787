"""The benchmark's PyTorch twins (scripts/benchmarks/torch_reference.py) are
the zoo's architectures: the same parameter counts at full size, and, with
the Keras weights copied in, the same function. And ``benchmark.py --quick`` runs end to
end and prints ratios (a smoke run: no speed is asserted)."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "scripts" / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import torch  # noqa: E402  (torch: the benchmark's reference, installed by make test)
import torch_reference as tr  # noqa: E402
from benchmark import QUICK  # noqa: E402
from keras_gresnet import zoo  # noqa: E402

RNG = np.random.default_rng(0)


def randomize(model):
    """Gates away from 1 and BN statistics away from 0/1, so that a wrong
    shortcut, a missing gate or a swapped BN cannot agree by accident."""
    for w in model.weights:
        path = w.path
        if path.endswith("/k") or "gate" in path:
            value = RNG.uniform(0.2, 1.5, size=w.shape)
        elif "moving_variance" in path:
            value = RNG.uniform(0.5, 2.0, size=w.shape)
        elif any(part in path for part in ("moving_mean", "beta", "gamma")):
            value = RNG.normal(0.2, 0.3, size=w.shape)
        else:
            continue
        w.assign(value.astype("float32"))


def test_full_size_twins_have_the_keras_parameter_counts():
    tr.check_params()  # raises on a mismatch


@pytest.mark.parametrize("name", tr.TWINS)
def test_twin_computes_the_keras_function(name):
    builder, kwargs = QUICK[name]
    shape = tr.MODELS[name][2]
    model = zoo.get_model(builder, weights=None, input_shape=shape, classes=10,
                          classifier_activation=None, **kwargs)
    randomize(model)
    twin = tr.copy_keras_weights(model, tr.quick(name)).eval()
    assert tr.param_counts(twin) == tr.keras_param_counts(model)
    x = RNG.normal(size=(4, *shape)).astype("float32")
    expected = keras.ops.convert_to_numpy(model(x, training=False))
    with torch.no_grad():
        got = twin(tr.to_torch_images(x)).numpy()
    # PyTorch's kernels vs Keras': the same float32 sums in other orders, a few 1e-6 per layer
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_a_twin_with_the_wrong_shortcut_is_told_apart():
    """The check above can fail: h(x) from the raw input instead of the
    activated one (the zoo's first unit of each stage) changes the output."""
    builder, kwargs = QUICK["gresnet_cifar"]
    model = zoo.get_model(builder, weights=None, input_shape=(32, 32, 3), classes=10,
                          classifier_activation=None, **kwargs)
    randomize(model)
    twin = tr.copy_keras_weights(model, tr.quick("gresnet_cifar")).eval()
    for unit in twin.units:
        unit.shared = False
    x = RNG.normal(size=(4, 32, 32, 3)).astype("float32")
    with torch.no_grad():
        got = twin(tr.to_torch_images(x)).numpy()
    assert np.abs(got - keras.ops.convert_to_numpy(model(x, training=False))).max() > 1e-2


def test_copy_refuses_a_twin_of_another_depth():
    model = zoo.get_model("gresnet_cifar", weights=None, input_shape=(32, 32, 3), n=2)
    with pytest.raises(ValueError, match="Keras units"):
        tr.copy_keras_weights(model, tr.quick("gresnet_cifar"))


@pytest.mark.integration
def test_quick_benchmark_prints_ratios_to_pytorch_and_the_pruned_net(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "BENCH_LOG_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "benchmark.py"), "--quick", "--rounds", "1",
         "--models", "gresnet_cifar", "--backends", "tf,pytorch,onnx", "--precisions", "float32",
         "--pruned", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    every = json.loads(out.read_text())
    rows = [r for r in every if r["mode"] != "peak"]
    assert {(r["setup"], r["model"], r["mode"]) for r in rows} == {
        (s, "gresnet_cifar", m) for s in ("tf", "pytorch") for m in ("train", "infer")} | {
        ("onnx", "gresnet_cifar", "infer")} | {
        (s, net, "infer") for s in ("tf", "onnx")
        for net in ("gresnet_mlp100_mnist", "gresnet_mlp100_mnist-pruned")}
    assert all(r["error"] is None and min(r["ips"]) > 0 for r in rows)
    # the exported artefact (onnxruntime) computes the Keras model: float32
    # sums in other orders, ~1e-6 relative per layer
    assert all(float(r["options"]["difference"]) < 1e-4 for r in rows if r["setup"] == "onnx")
    assert all(r["options"]["dtype_policy"] == "float32" for r in rows if r["setup"] == "onnx")
    # the machine's own limit: a float32 matmul per library (TF, PyTorch) and round
    peaks = [r for r in every if r["mode"] == "peak"]
    assert {(r["setup"], r["precision"]) for r in peaks} == {("tf", "float32"),
                                                            ("pytorch", "float32")}
    assert all(min(r["gflops"]) > 0 for r in peaks)
    table = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
             if line.startswith("| gresnet_cifar |")]
    assert [r[1].strip() for r in table] == ["tf", "pytorch", "onnx"] and "1.00x" in table[1][6]
    # each figure's GFLOP/s: img/s x 2 x the counted multiply-adds (zoo.multiply_adds,
    # checked against a hand count in test_zoo), and its share of the run's peak
    builder, kwargs = QUICK["gresnet_cifar"]
    macs = zoo.multiply_adds(zoo.get_model(builder, weights=None, input_shape=(32, 32, 3),
                                           classes=10, **kwargs))
    peak = max(max(r["gflops"]) for r in peaks)
    for row in table:
        ips = float(row[5].replace(",", ""))
        gflops, share = row[9].split()
        # printed rounded: img/s to 1 (to 0.1 under 100), GFLOP/s to 0.1, the share to 1%
        error = (0.5 if ips >= 100 else 0.05) * 2 * macs / 1e9 + 0.05
        assert abs(float(gflops.replace(",", "")) - ips * 2 * macs / 1e9) <= error
        assert abs(float(share.strip("(%)")) - 100 * ips * 2 * macs / 1e9 / peak) \
            <= 0.5 + 100 * error / peak
    assert f"gresnet_cifar {2 * macs / 1e6:,.1f} M / {6 * macs / 1e6:,.1f} M" in proc.stdout
    # --pruned: the published d = 100 GResNet against itself without its
    # closed blocks, side by side, the same function (difference exactly 0)
    pruned = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
              if line.startswith("| gresnet_mlp100_mnist |")]
    assert [r[1].strip() for r in pruned] == ["tf", "onnx"]
    assert all(r[5].strip().endswith("x") for r in pruned)
    log = (tmp_path / "benchmark-tf.log").read_text()
    assert ("gresnet_mlp100_mnist-pruned: 32 closed blocks removed, parameters 315,010 -> "
            "138,978, largest output difference 0\n") in log


@pytest.mark.integration
def test_op_benchmark_prints_each_op_against_pytorch():
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_ops.py"), "--rounds", "1", "--steps", "1"],
        capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
            if line.startswith(("| conv |", "| bn |"))]
    # 3 shapes x (2 conv setups + 3 BN setups + PyTorch's two [+ JAX's two])
    has_jax = importlib.util.find_spec("jax") is not None
    assert len(rows) == 21 + 6 * has_jax
    assert all(float(r[3]) > 0 for r in rows)
    assert {r[4].strip() for r in rows if r[2].strip() == "pytorch"} == {"1.00"}


@pytest.mark.integration
def test_op_benchmark_refuses_a_zero_count():
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "bench_ops.py"), "--rounds", "0"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "--rounds must be at least 1" in proc.stderr


@pytest.mark.integration
def test_benchmark_exits_non_zero_naming_the_cause_when_a_cell_errors(tmp_path):
    """torch missing: every PyTorch cell errors, so the run fails and says why
    (it used to print "error" in every cell and exit 0)."""
    fake = tmp_path / "no_torch"
    fake.mkdir()
    (fake / "torch.py").write_text("raise ImportError('torch is not installed (test)')\n")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "BENCH_LOG_DIR": str(tmp_path),
           "PYTHONPATH": str(fake)}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "benchmark.py"), "--quick", "--rounds", "1",
         "--models", "gresnet_mlp", "--backends", "pytorch", "--precisions", "float32",
         "--modes", "infer"],
        capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    # the model's cell and the round's matmul peak, each naming the cause
    assert "2 cell(s) failed" in proc.stderr
    for cell in ("gresnet_mlp float32 infer", "matmul 256 float32 peak"):
        assert (f"pytorch {cell}: worker pytorch died: ImportError: "
                "torch is not installed (test)") in proc.stderr


def test_command_benchmark_crops_and_flips_each_picture_as_the_keras_pipeline():
    """bench_cli's PyTorch loop does the Keras pipeline's work: a crop at each
    picture's own offset and a flip of each picture, the same values."""
    from bench_cli import crop_and_flip

    from keras_gresnet.data.tfdata import crop_and_flip as keras_crop_and_flip

    images = RNG.normal(size=(6, 32, 32, 3)).astype("float32")  # NHWC
    offsets = np.array([[0, 0], [8, 8], [3, 5], [5, 3], [0, 8], [8, 0]])
    flips = np.array([False, True, True, False, True, False])
    expected = np.asarray(keras_crop_and_flip(images, offsets, flips, padding=4))
    padded = torch.nn.functional.pad(torch.from_numpy(images.transpose(0, 3, 1, 2)), (4,) * 4)
    got = crop_and_flip(padded, torch.from_numpy(offsets), torch.from_numpy(flips))
    np.testing.assert_array_equal(got.numpy().transpose(0, 2, 3, 1), expected)


def test_command_benchmark_runs_a_baseline_checkout_first_on_the_path(tmp_path, monkeypatch):
    """``--baseline DIR``: a Keras setup run from another checkout has that
    checkout's folder first on PYTHONPATH (so its keras_gresnet is imported),
    the others the environment's own; a folder without the package is
    refused before anything runs."""
    import bench_cli

    seen = []

    def fake_run(command, env, **kwargs):
        seen.append(env.get("PYTHONPATH"))
        out = Path(command[command.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "history.csv").write_text("epoch,seconds\n1,2.0\n2,1.0\n")
        (out / "results.json").write_text(json.dumps({"test_error_percent": 90.0}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(bench_cli.subprocess, "run", fake_run)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    old = tmp_path / "old"
    assert bench_cli.keras_run("tensorflow", "float32", tmp_path, 8, 2, tmp_path / "a",
                               source=old) == ([2.0, 1.0], pytest.approx(0, abs=5), 90.0)
    bench_cli.keras_run("tensorflow", "float32", tmp_path, 8, 2, tmp_path / "b")
    assert seen == [f"{old}{os.pathsep}/elsewhere", "/elsewhere"]
    with pytest.raises(SystemExit) as exit_:
        bench_cli.main(["--baseline", str(old), "--layouts", ""])
    assert exit_.value.code == 2


@pytest.mark.integration
@pytest.mark.parametrize("against,ratio", [("earlier", "earlier / now"),
                                           ("no-gate", "now / no-gate")])
def test_shortcut_benchmark_times_both_forms_in_turn(against, ratio):
    """bench_shortcut.py trains a tiny gresnet_cifar with each form of the
    shortcut's subsampling (or with and without its gates), alternating, and
    prints both medians and the ratio (a smoke run: no speed is asserted)."""
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_shortcut.py"), "--n", "1", "--steps", "4",
         "--batch-size", "8", "--against", against],
        capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(rf"4 pairs: now [\d.]+ ms, {against} [\d.]+ ms; {ratio} per pair: "
                     r"median [\d.]+ \(quartiles [\d.]+, [\d.]+\)", proc.stdout), proc.stdout


@pytest.mark.integration
def test_torch_profile_lists_the_twins_convolutions():
    """profile_torch.py times the twin's step and lists aten ops per step,
    the convolution's forward and backward among them (a smoke run)."""
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "profile_torch.py"), "--steps", "2", "--top", "40"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"step [\d.]+ ms \(median of 2", proc.stdout), proc.stdout
    ops_listed = {line.split(" | ")[0].lstrip("| ") for line in proc.stdout.splitlines()
                  if line.startswith("| aten::")}
    assert {"aten::convolution_backward", "aten::mkldnn_convolution"} <= ops_listed, proc.stdout


@pytest.mark.integration
def test_training_profile_sums_the_commands_ops_by_type(tmp_path):
    """profile_train.py profiles an epoch of the command's training and
    prints each op type's time per step; the convolutions' three kinds are
    there, the shares add up to the whole, and the run it profiled is kept."""
    keep = tmp_path / "kept"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "profile_train.py"), "--n", "1", "--examples", "256",
         "--top", "100", "--keep", str(keep)],
        capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:4] for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| op type")}
    assert {"_MklNativeConv2D", "_MklNativeConv2DBackpropFilter"} <= set(rows) or \
        {"Conv2D", "Conv2DBackpropFilter"} <= set(rows)  # TensorFlow without oneDNN
    assert all(float(ms) >= 0 for ms, _ in rows.values())
    assert sum(float(ms) > 0 for ms, _ in rows.values()) >= 3
    # each share printed to 0.1%: the rounding moves the sum by 0.05% a row at most
    assert sum(float(share.strip(" %")) for _, share in rows.values()) == pytest.approx(
        100, abs=0.05 * len(rows) + 1e-9)
    assert "epoch 2 profiled (2 steps)" in proc.stdout
    assert (keep / "run" / "results.json").exists() and list(keep.glob("profile/**/*.xplane.pb"))
    refused = subprocess.run(
        [sys.executable, str(BENCHMARKS / "profile_train.py"), "--keep", str(keep)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert refused.returncode == 2 and "exists" in refused.stderr
