"""The MNIST write-up says what its run folders hold: the README's and
docs/analysis.md's tables and gap intervals are what
``scripts/reproduce/reproduce_gr_mnist.py --no-train`` computes from the committed run
folders today; and the command the model cards give for a published net
(``keras-gresnet train ...``) trains the same run as the reproduction script
that recorded it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import read_csv

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT / "zoo" / "results" / "mnist"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def _rows(text):
    """The table rows and the gap bullets of a text."""
    lines = text.splitlines()
    return ([line for line in lines if line.startswith("| d | plain") or
             line.startswith("|---|---|---|---|---|---|---|---|---|---|---|") or
             (line.startswith("| ") and line.split("|")[1].strip() in {"2", "10", "20", "50",
                                                                      "100"}
              and "GR" not in line.split("|")[1])],
            [line for line in lines if line.startswith("- d = ")])


@pytest.mark.integration
def test_readme_and_analysis_tables_are_what_the_run_folders_give(tmp_path):
    out = tmp_path / "mnist"
    shutil.copytree(MNIST / "runs", out / "runs",
                    ignore=shutil.ignore_patterns("model.keras", "backup", "*.png"))
    proc = subprocess.run([sys.executable, "scripts/reproduce/reproduce_gr_mnist.py", "--no-train",
                           "--out", str(out)], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table, gaps = _rows((out / "table.md").read_text())
    assert len(table) == 7 and len(gaps) == 5
    for document in (MNIST / "table.md", ROOT / "README.md", ROOT / "docs" / "analysis.md"):
        got_table, got_gaps = _rows(document.read_text())
        rows = [row for row in got_table if "mean g(k)" in got_table[0]]
        assert rows[:7] == table, document
        assert got_gaps[:5] == gaps, document


@pytest.mark.integration
def test_the_cards_command_trains_the_run_the_script_recorded(tmp_path):
    """The registry's command for a published MNIST net is ``keras-gresnet
    train ...``; its config.json records ``scripts/reproduce/reproduce_gr_mnist.py``.
    Both call ``training.train`` with one config: the same run to the bit
    (tiny here: depth 2, one epoch on 256 Fashion-MNIST images)."""
    script = subprocess.run(
        [sys.executable, "scripts/reproduce/reproduce_gr_mnist.py", "--dataset", "fashion_mnist",
         "--depths", "2", "--kinds", "gresnet", "--epochs", "1", "--seeds", "1",
         "--gated-plain-depths", "", "--seed-depths", "", "--max-train-examples", "256",
         "--out", str(tmp_path / "script")],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert script.returncode == 0, script.stderr[-2000:]
    cli = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth", "2",
         "--dataset", "fashion_mnist", "--epochs", "1", "--seed", "0",
         "--max-train-examples", "256", "--out", str(tmp_path / "cli")],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr[-2000:]
    a, b = tmp_path / "script" / "runs" / "gresnet_mlp2-seed0", tmp_path / "cli"
    config_a, config_b = (json.loads((f / "config.json").read_text()) for f in (a, b))
    assert "reproduce_gr_mnist.py" in " ".join(config_a["command"])
    for config in (config_a, config_b):
        del config["command"], config["versions"]
    assert config_a == config_b
    history_a, history_b = (read_csv(f / "history.csv") for f in (a, b))
    timing = {column for column in history_a[0] if "time" in column or "second" in column}
    assert timing  # the one column that may differ: wall clock
    assert ([{k: v for k, v in row.items() if k not in timing} for row in history_a]
            == [{k: v for k, v in row.items() if k not in timing} for row in history_b])
    assert (a / "gates.csv").read_text() == (b / "gates.csv").read_text()
    import keras_gresnet

    model_a, model_b = (keras_gresnet.load_model(f / "model.keras") for f in (a, b))
    for wa, wb in zip(model_a.get_weights(), model_b.get_weights()):
        np.testing.assert_array_equal(wa, wb)


def test_runs_trains_only_the_named_runs_of_the_plan(monkeypatch, tmp_path, capsys):
    # ``--runs`` splits the plan between processes: each trains its runs only,
    # in the plan's order; a name outside the plan is refused before any run.
    sys.path.insert(0, str(ROOT / "scripts" / "reproduce"))
    import reproduce_gr_mnist as script

    trained = []
    monkeypatch.setattr(script, "train_run", lambda folder, *a, **k: trained.append(
        Path(folder).name))
    monkeypatch.setattr(script, "collect", lambda args: [])
    monkeypatch.setattr(script, "write_table", lambda args, rows: None)
    monkeypatch.setattr(script, "write_plots", lambda args, rows: None)
    script.main(["--out", str(tmp_path), "--runs",
                 "gresnet_mlp100-seed2,resnet_mlp100-seed2"])
    assert trained == ["resnet_mlp100-seed2", "gresnet_mlp100-seed2"]
    trained.clear()
    script.main(["--out", str(tmp_path), "--depths", "2", "--seed-depths", "2", "--seeds", "2",
                 "--gated-plain-depths", ""])
    assert trained == ["plain_mlp2-seed0", "resnet_mlp2-seed0", "gresnet_mlp2-seed0",
                       "resnet_mlp2-seed1", "gresnet_mlp2-seed1"]
    trained.clear()
    with pytest.raises(SystemExit) as exit_:
        script.main(["--out", str(tmp_path), "--runs", "gresnet_mlp100-seed3"])
    assert exit_.value.code == 2 and trained == []
    assert "--runs: not in the plan: gresnet_mlp100-seed3" in capsys.readouterr().err


def test_the_conv_table_tests_gr_table_3s_three_gaps_and_reads_the_gates(tmp_path, monkeypatch):
    """``reproduce_gr_conv.py``'s table from finished run folders (only their
    ``results.json`` is read): each net's errors, the three Welch intervals
    (gating; GR's "k decay hurts performance"; k decay against ResNet) from
    those errors, the gates of every gated run with its closed ones counted,
    and the command without the call's ``--runs``."""
    sys.path.insert(0, str(ROOT / "scripts" / "reproduce"))
    import reproduce_gr_conv as script
    from reproduce import welch_interval

    errors = {"resnet": [5.8, 5.4, 5.6], "gresnet": [5.7, 5.4], "gresnet_k_decay": [5.9, 6.3]}
    gates = {"gresnet": [1.4, 0.6, 2.0], "gresnet_k_decay": [1.0, 0.0, 0.5]}
    for net, values in errors.items():
        for seed, error in enumerate(values):
            folder = tmp_path / "runs" / f"{net}-seed{seed}"
            folder.mkdir(parents=True)
            results = {"test_error_percent": error}
            if net in gates:
                results["gates"] = {f"b{i}": g + seed for i, g in enumerate(gates[net])}
            (folder / "results.json").write_text(json.dumps(results))
    (tmp_path / "runs" / "gresnet-seed2").mkdir()  # unfinished: no results.json
    monkeypatch.setattr(sys, "argv", ["reproduce_gr_conv.py", "--runs", "gresnet-seed2",
                                      "--epochs", "3"])
    args = script.argparse.Namespace(out=tmp_path, epochs=3, max_test_examples=None,
                                     dataset="fashion_mnist")
    script.write_table(args, script.collect(args))
    table = (tmp_path / "table.md").read_text()
    assert "python scripts/reproduce/reproduce_gr_conv.py --epochs 3\n" in table
    assert "| GResNet n=5 + k decay | 5.90 | 6.30 | - | 6.10 ± 0.28 (n=2) | 7.04 |" in table
    for first, second, text, gr in [
            ("resnet", "gresnet", "ResNet - GResNet", "+0.49"),
            ("gresnet_k_decay", "gresnet", "GResNet + k decay - GResNet", "+0.37"),
            ("resnet", "gresnet_k_decay", "ResNet - GResNet + k decay", "+0.12")]:
        gap, low, high = welch_interval(errors[first], errors[second])
        assert (f"{text}: {gap:+.2f} points, 95% Welch interval [{low:+.2f}, {high:+.2f}] "
                f"(n = {len(errors[first])} and {len(errors[second])}; GR, CIFAR-10: {gr})"
                in table)
    assert "| GResNet n=5 (gated) | 0 | 1.333 | 0.600 | 2.000 | 0 of 3 |" in table
    assert "| GResNet n=5 (gated) | 1 | 2.333 | 1.600 | 3.000 | 0 of 3 |" in table
    assert "| GResNet n=5 + k decay | 0 | 0.500 | 0.000 | 1.000 | 1 of 3 |" in table
    assert "| GResNet n=5 + k decay | 1 | 1.500 | 1.000 | 2.000 | 0 of 3 |" in table
    assert "| ResNet n=5 (original) | 0 |" not in table  # no gates: not in the gate table
