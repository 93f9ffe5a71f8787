"""The rough edges a newcomer meets first: plurals, a closed pipe, an
untrained entry's card, the export format read from the file name."""

import os
import subprocess
import sys

import pytest

from keras_gresnet import cli, weights

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def test_an_untrained_entrys_card_says_so():
    untrained = next(e for e in weights.list_weights() if e.get("epochs") is None)
    card = weights.model_card(untrained)
    assert "- trained: not yet (to train it: `" in card and "not recorded epochs" not in card
    trained = next(e for e in weights.list_weights() if e.get("epochs") == 100)
    assert f"- trained: 100 epochs, seed {trained['seed']}" in weights.model_card(trained)


def test_a_closed_pipe_ends_quietly():
    proc = subprocess.run(f"{sys.executable} -m keras_gresnet.cli weights list | head -1",
                          shell=True, capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.stdout.count("\n") == 1 and proc.stderr == ""


def test_one_epoch_is_singular(tmp_path, capsys):
    assert cli.main(["train", "gresnet_mlp", "--depth", "2", "--dataset", "fashion_mnist",
                     "--max-train-examples", "256", "--max-test-examples", "128",
                     "--epochs", "1", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "after 1 epoch;" in out and "1 epochs" not in out


@pytest.mark.integration
def test_export_reads_the_format_from_the_file_name(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert cli.main(["export", "gresnet_mlp2_fashion_mnist", "--out", str(out)]) == 0
    assert out.is_file() and out.read_bytes()[:2] != b"PK"  # an ONNX protobuf, not a zip
    assert "as onnx" in capsys.readouterr().out
    assert cli.main(["export", "gresnet_mlp2_fashion_mnist", "--format", "litert",
                     "--out", str(tmp_path / "n.onnx")]) == 2
    assert ".tflite" in capsys.readouterr().err


def test_a_missing_backend_package_names_its_install_command(tmp_path):
    """KERAS_BACKEND=jax where JAX is not installed (simulated: find_spec,
    what the check asks, finds no jax): one line with the install command."""
    code = ("import importlib.util, sys\n"
            "real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'jax' else real(name, *a)\n"
            "from keras_gresnet import cli\n"
            "sys.exit(cli.main(['train', 'gresnet_mlp', '--depth', '2']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**ENV, "KERAS_BACKEND": "jax"}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("keras-gresnet train: error: KERAS_BACKEND=jax needs jax, "
                                   "which is not installed: pip install jax jaxlib")


@pytest.mark.integration
def test_tensorflow_start_up_lines_stay_off_the_terminal_on_jax(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth", "2",
         "--dataset", "fashion_mnist", "--max-train-examples", "256", "--max-test-examples",
         "128", "--epochs", "1", "--out", str(tmp_path / "run")],
        capture_output=True, text=True,
        env={**{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
             "KERAS_BACKEND": "jax"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in ("cudart_stub", "oneDNN custom operations", "absl::InitializeLog"):
        assert line not in proc.stderr, proc.stderr


def test_a_bad_hub_setting_is_one_line_naming_it():
    code = ("import sys\nfrom keras_gresnet import cli\n"
            "sys.exit(cli.main(['export', 'hf://owner/name', '--out', 'x.onnx']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**ENV, "HF_HUB_ETAG_TIMEOUT": "abc"}, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "HF_HUB_ETAG_TIMEOUT" in lines[0], proc.stderr
