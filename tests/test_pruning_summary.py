"""GR Figure 5 over several trained nets (``scripts/reproduce/reproduce_gr_pruning.py``):
the summary averages each net's random orders, then the nets, shows each
net's value, and gives the GResNet-ResNet gap an interval only from two nets
a side."""

import argparse
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "reproduce"))

import reproduce_gr_pruning as pruning  # noqa: E402


def _pruning_rows(kind, order, train_seed, accuracies, seed=0):
    return [dict(model=kind, train_seed=str(train_seed), order=order, seed=str(seed),
                 removed=str(c), accuracy=str(a)) for c, a in enumerate(accuracies)]


def _gap(lines, what):
    """``(gap, low, high)`` of the summary line on ``what``, or its text
    when it has no interval."""
    line = next(line for line in lines if line.startswith(f"- {what}: "))
    if "no interval" in line:
        return line
    gap = float(line.split(": ")[1].split(" points")[0])
    low, high = (float(v) for v in line.split("[")[1].split("]")[0].split(", "))
    return gap, low, high


def test_each_net_averages_its_orders_then_the_table_its_nets():
    rows = (_pruning_rows("gresnet", "random", 0, [0.9, 0.6, 0.2], seed=0)
            + _pruning_rows("gresnet", "random", 0, [0.9, 0.8, 0.2], seed=1)
            + _pruning_rows("gresnet", "random", 1, [0.8, 0.5, 0.1])
            + _pruning_rows("gresnet", "greedy", 0, [0.9, 0.9, 0.2])
            + _pruning_rows("gresnet", "greedy", 1, [0.8, 0.8, 0.1])
            + _pruning_rows("resnet", "random", 0, [0.9, 0.4, 0.1])
            + _pruning_rows("resnet", "random", 1, [0.8, 0.3, 0.3]))
    curves = pruning.net_curves(rows)
    assert curves["gresnet", "random"][0][1] == pytest.approx(0.7)  # mean of its 2 orders
    lines = pruning.table_lines(curves, [0, 1])
    gres = next(line for line in lines if line.startswith("| GResNet random"))
    # half of 2 blocks is 1 (also the fewest removed): nets at 70 and 50,
    # mean 60; kept 70/90 and 50/80
    assert gres.split(" | ")[1:7] == ["2 (0, 1)", "85.00 (90.00, 80.00)%",
                                      "70.14 (77.78, 62.50)% (1 of 2)", "1 of 2",
                                      "60.00 (70.00, 50.00)%", "70.14 (77.78, 62.50)%"]
    # GResNet 70, 50 against ResNet 40, 30: +25 points; Welch's t with 2
    # nets a side (dof about 1.5) gives a wide interval that still holds +25
    gap, low, high = _gap(lines, "GResNet random - ResNet random at half the blocks removed")
    assert gap == pytest.approx(25.0) and low < 25 < high and high - low > 50
    # greedy 90, 80 against random 70, 50: +25 points
    gap, low, high = _gap(lines, "GResNet greedy - GResNet random at half the blocks removed")
    assert gap == pytest.approx(25.0) and low < 25 < high
    # every block removed: GResNet 20, 10 against ResNet 10, 30: -5 points
    gap, low, high = _gap(lines, "GResNet random - ResNet random with every block removed")
    assert gap == pytest.approx(-5.0) and low < -5 < high
    # no spread on either side (every net at chance, say): an exact difference
    flat = pruning.net_curves(_pruning_rows("gresnet", "random", 0, [0.9, 0.1]) + _pruning_rows(
        "gresnet", "random", 1, [0.8, 0.1]) + _pruning_rows("resnet", "random", 0, [0.9, 0.1])
        + _pruning_rows("resnet", "random", 1, [0.7, 0.1]))
    assert _gap(pruning.table_lines(flat, [0, 1]), "GResNet random - ResNet random with "
                "every block removed").endswith(": +0.00 points, every net of a side at "
                                                "the same accuracy (no interval needed).")
    # one seed: its nets only, and no interval
    assert _gap(pruning.table_lines(curves, [1]), "GResNet random - ResNet random at half "
                "the blocks removed").endswith("no interval (it takes two nets of each).")


def test_rows_before_the_train_seed_column_are_the_seed_0_nets(tmp_path):
    table = tmp_path / "pruning.csv"
    table.write_text("model,order,seed,removed,accuracy\ngresnet,greedy,0,0,0.9\n")
    assert pruning.read_rows(table)[0]["train_seed"] == "0"
    assert pruning.read_rows(tmp_path / "none.csv") == []


@pytest.mark.parametrize("text", ["", "a", "0,0", "-1", "1,,2"])
def test_bad_seeds_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="distinct training seeds"):
        pruning._seeds(text)


def test_several_seeds_need_a_seed_in_every_run_path(capsys):
    with pytest.raises(SystemExit) as exit_:
        pruning.main(["--seeds", "0,1", "--runs", "gresnet=runs/g0,resnet=runs/r{seed}"])
    assert exit_.value.code == 2 and "every PATH needs {seed}" in capsys.readouterr().err


def test_greedy_against_random_is_also_paired_on_the_same_nets():
    from reproduce import paired_interval

    # greedy 90, 80, 70 against random 70, 50, 65 on the same three nets:
    # differences +20, +30, +5, mean +18.33, sd 12.58; t(0.975, 2) = 4.303
    rows = []
    for seed, (g, r) in enumerate(((0.9, 0.7), (0.8, 0.5), (0.7, 0.65))):
        rows += _pruning_rows("gresnet", "greedy", seed, [0.95, g, 0.1])
        rows += _pruning_rows("gresnet", "random", seed, [0.95, r, 0.1])
    lines = pruning.table_lines(pruning.net_curves(rows), [0, 1, 2])
    gap, low, high = _gap(lines, "GResNet greedy - GResNet random at half the blocks "
                          "removed, paired on each net")
    half = 4.303 * 12.583 / 3 ** 0.5
    assert gap == pytest.approx(18.33, abs=0.01)
    assert (low, high) == pytest.approx((18.33 - half, 18.33 + half), abs=0.05)
    assert "(each net's difference: +20.00, +30.00, +5.00)" in next(
        line for line in lines if "paired on each net" in line)
    assert paired_interval([1.0], [0.5]) is None
    assert paired_interval([1.0, 2.0], [0.5, 1.5]) == (0.5, 0.5, 0.5)  # no spread: exact
    with pytest.raises(ValueError, match="as many"):
        paired_interval([1.0, 2.0], [1.0])


def test_k_decay_nets_get_their_curves_and_are_compared_with_the_gresnets():
    """GR Table 3's third column: greedy and random curves of the k-decay
    nets, and the share of each net's accuracy kept at half the blocks
    against the GResNet's (GR's "enforcing identity mappings": if k decay
    closes gates, its nets lose less)."""
    rows = []
    # GResNet nets at 90 and 80, keeping 45 and 60 at half: kept 50% and 75%;
    # k-decay nets at 90 and 80, keeping 81 and 72: kept 90% and 90%.
    for seed, (full, gres, kd) in enumerate(((0.9, 0.45, 0.81), (0.8, 0.6, 0.72))):
        for order in ("greedy", "random"):
            rows += _pruning_rows("gresnet", order, seed, [full, gres, 0.1])
            rows += _pruning_rows("gresnet_k_decay", order, seed, [full, kd, 0.1])
        rows += _pruning_rows("resnet", "random", seed, [full, 0.3, 0.1])
    lines = pruning.table_lines(pruning.net_curves(rows), [0, 1])
    kd = next(line for line in lines if line.startswith("| GResNet + k decay greedy"))
    assert kd.split(" | ")[1:7] == ["2 (0, 1)", "85.00 (90.00, 80.00)%",
                                    "90.00 (90.00, 90.00)% (1 of 2)", "1 of 2",
                                    "76.50 (81.00, 72.00)%", "90.00 (90.00, 90.00)%"]
    assert "| GResNet + k decay random |" in "\n".join(lines)
    for order in ("greedy", "random"):  # kept 90, 90 against 50, 75: +27.5 points
        gap, low, high = _gap(lines, f"GResNet + k decay {order} - GResNet {order} at half "
                              "the blocks removed (the share of each net's own accuracy kept)")
        assert gap == pytest.approx(27.5) and low < 27.5 < high
    gap, low, high = _gap(lines, "GResNet + k decay greedy - GResNet + k decay random at "
                          "half the blocks removed, paired on each net")
    assert (gap, low, high) == (0.0, 0.0, 0.0)  # the same accuracy both ways on each net
    # Without k-decay nets the summary is the two-net one, line for line.
    plain = [r for r in rows if r["model"] != "gresnet_k_decay"]
    assert not any("k decay" in line for line in pruning.table_lines(
        pruning.net_curves(plain), [0, 1]))
    assert pruning._runs("gresnet_k_decay=runs/k{seed},gresnet=runs/g{seed}") == {
        "gresnet_k_decay": "runs/k{seed}", "gresnet": "runs/g{seed}"}
    with pytest.raises(argparse.ArgumentTypeError, match="KIND one of gresnet, "
                                                         "gresnet_k_decay, resnet"):
        pruning._runs("plain=runs/p")
