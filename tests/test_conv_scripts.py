"""The conv reproduction scripts end to end on a tiny run: GR Table 3's
question (``reproduce_gr_conv.py``: the table and the g(k)-per-block files
of a finished GResNet), then block removal on it (``reproduce_gr_pruning.py
--runs``), with the unfinished ResNet left out and nothing recomputed on a
second call."""

import csv

import pytest

from helpers import run_script

pytestmark = pytest.mark.integration  # trains, reads real Fashion-MNIST, starts processes


def test_conv_table_gates_and_pruning_of_a_tiny_run(tmp_path):
    out = tmp_path / "conv"
    run_script("scripts/reproduce/reproduce_gr_conv.py", "--runs", "gresnet-seed0", "--epochs",
               "2", "--max-train-examples", "256", "--max-test-examples", "500", "--out",
               str(out), timeout=1200, check=True)
    table = (out / "table.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| GResNet n=5 (gated)"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[1]) > 0 and cells[2:4] == ["-", "-"] and cells[-1] == "6.67"
    assert "| ResNet n=5 (original) | - | - | - |" in table

    gates = (out / "gates-gresnet-seed0.md").read_text().splitlines()
    rows = [line for line in gates if line.startswith("| conv")]
    assert len(rows) == 15  # n=5: three stages of five gated units
    changing = [r.split("|")[1].strip() for r in rows if r.rstrip("| ").endswith("yes")]
    assert changing == ["conv3_block1", "conv4_block1"]  # where the shortcut subsamples
    ranks = sorted(int(r.split("|")[4]) for r in rows)
    assert ranks == list(range(1, 16))
    assert (out / "gates-gresnet-seed0.png").stat().st_size > 1000
    assert not (out / "gates-gresnet-seeds.png").exists()  # one seed: no plot over seeds

    args = ("scripts/reproduce/reproduce_gr_pruning.py", "--results", str(out), "--runs",
            "gresnet=runs/gresnet-seed0,resnet=runs/resnet-seed0", "--random-orders", "1",
            "--step", "13")
    printed = run_script(*args, timeout=1200, check=True).stdout
    assert "resnet seed 0:" in printed and "has not finished" in printed
    with open(out / "pruning.csv", newline="") as f:
        points = list(csv.DictReader(f))
    # 13 removable blocks (15 less the two whose shortcut changes dimension):
    # counts 0, 6 (half) and 13, for the greedy and one random order.
    assert sorted((p["order"], int(p["removed"])) for p in points) == [
        ("greedy", 0), ("greedy", 6), ("greedy", 13), ("random", 0), ("random", 6),
        ("random", 13)]
    assert {p["model"] for p in points} == {"gresnet"}
    full = {float(p["accuracy"]) for p in points if p["removed"] == "0"}
    assert len(full) == 1  # both orders start from the same net
    summary = (out / "pruning.md").read_text()
    assert "| GResNet greedy | 1 (0) |" in summary and "| GResNet random | 1 (0) |" in summary
    assert "no interval (it takes two nets of each)" in summary
    assert "| ResNet random" not in summary
    before = (out / "pruning.csv").read_bytes()
    printed = run_script(*args, timeout=1200, check=True).stdout
    assert "points" not in printed  # nothing recomputed
    assert (out / "pruning.csv").read_bytes() == before

    # A second seed: its column in the table, and g(k) per block over both seeds.
    run_script("scripts/reproduce/reproduce_gr_conv.py", "--runs", "gresnet-seed1", "--epochs",
               "2", "--max-train-examples", "256", "--max-test-examples", "500", "--out",
               str(out), timeout=1200, check=True)
    row = next(line for line in (out / "table.md").read_text().splitlines()
               if line.startswith("| GResNet n=5 (gated)"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[1]) > 0 and float(cells[2]) > 0 and cells[4].endswith("(n=2)")
    table = (out / "table.md").read_text()
    assert "--runs" not in table and "--epochs 2" in table  # the table's command, not the call's
    assert "GResNet + k decay - GResNet: Welch's t needs at least 2 finished seeds" in table
    gate_table = table.split("g(k) of the gated blocks")[1]
    gate_rows = [line.strip("|").split("|") for line in gate_table.splitlines()
                 if line.startswith("| GResNet n=5 (gated) | ")]
    assert [int(r[1]) for r in gate_rows] == [0, 1]
    for row in gate_rows:  # mean, smallest, largest, closed: from the run's own gates
        mean, low, high = (float(c) for c in row[2:5])
        assert low <= mean <= high and row[5].strip().endswith("of 15")
    assert (out / "gates-gresnet-seed1.md").exists()
    assert (out / "gates-gresnet-seeds.png").stat().st_size > 1000
