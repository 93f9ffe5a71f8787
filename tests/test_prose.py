"""The sentences of README.md, docs/analysis.md and docs/models.md say what
the results files hold, and quote the papers word for word.

``FIGURES`` maps each sentence that carries a figure from a file under
``zoo/results/`` (or a published weights file) to that file and the
computation that gives the figure, rounded as printed: the test renders the
sentence from the files and finds it in the page (whitespace aside), so a
figure changed on either side fails it. The MNIST tables and gap bullets are
checked by ``tests/test_results_tables.py``, which regenerates them with the
reproduction script; the rest is here. Every double-quoted text of the three
pages is a verbatim substring of ``tests/data/paper_passages.md`` (the
papers' own words, with their source) unless ``NOT_QUOTATIONS`` lists it as
no quotation of a paper.

Only files are read: no model is built and nothing is trained.
"""

import csv
import functools
import io
import json
import re
import statistics
import string
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "zoo" / "results"
PAGES = ("README.md", "docs/analysis.md", "docs/models.md")
PASSAGES = ROOT / "tests" / "data" / "paper_passages.md"

sys.path.insert(0, str(ROOT / "scripts" / "reproduce"))
from reproduce import paired_interval, welch, welch_interval  # noqa: E402

# GR's own numbers (GR Table 3, CIFAR-10), the inputs of derived figures.
GR_RESNET5, GR_GRESNET5, GR_K_DECAY5 = 7.16, 6.67, 7.04
GR_RESNET_MLP = {2: 2.20, 10: 1.64, 20: 1.61}  # GR Table 1, MNIST


# --- reading the files ------------------------------------------------------

@functools.cache
def rows(path):
    with open(RESULTS / path, newline="") as f:
        return list(csv.DictReader(f))


@functools.cache
def load_json(path):
    return json.loads((RESULTS / path).read_text())


def mnist(kind, depth, column="test_error"):
    """``column`` of the MNIST ``results.csv`` rows of ``kind`` at ``depth``,
    by seed."""
    found = sorted((int(r["seed"]), float(r[column])) for r in rows("mnist/results.csv")
                   if r["kind"] == kind and r["depth"] == str(depth))
    return [value for _, value in found]


def mnist_gates(run):
    """The final g(k) per block of an MNIST run, in block order."""
    gates = load_json(f"mnist/runs/{run}/results.json")["gates"]
    return [gates[f"block{i}_gate"] for i in range(1, len(gates) + 1)]


def mnist_raw_k(run):
    """The final raw k per block of an MNIST run (its ``gates.csv``)."""
    table = rows(f"mnist/runs/{run}/gates.csv")
    last = max(int(r["epoch"]) for r in table)
    return [float(r["k"]) for r in sorted((r for r in table if int(r["epoch"]) == last),
                                          key=lambda r: int(r["index"]))]


def fixed_momentum_gates(run):
    """The final g(k) of a run of Keras 1's Nadam with a fixed momentum."""
    return load_json(f"mnist_fixed_momentum/runs/{run}/results.json")["gates"].values()


def fashion(kind, depth):
    """The Fashion-MNIST MLP row (20 epochs, seed 0) of ``kind`` at ``depth``."""
    return next(r for r in rows("fashion_mnist/results.csv")
                if r["kind"] == kind and r["depth"] == str(depth))


@functools.cache
def published_k(name):
    """Raw k per block, in block order, of a published ``.keras`` file (its
    ``model.weights.h5`` read with h5py: gates ``residual_gate``,
    ``residual_gate_1``..., created in block order)."""
    import h5py

    with zipfile.ZipFile(ROOT / "zoo" / "weights" / f"{name}.keras") as archive:
        weights = archive.read("model.weights.h5")
    found = {}
    with h5py.File(io.BytesIO(weights), "r") as f:
        def visit(path, item):
            match = re.fullmatch(r"layers/residual_gate(?:_(\d+))?/vars/0", path)
            if match:
                found[int(match.group(1) or 0)] = float(item[()])
        f.visititems(visit)
    return [found[i] for i in sorted(found)]


def pruning(folder, model, order, removed):
    """Accuracy (%) after ``removed`` blocks: one value per training seed (the
    mean over its seeded orders); a folder without training seeds (the
    Fashion-MNIST MLPs) gives one value per order."""
    table = rows(f"{folder}/pruning.csv")
    values = {}
    for r in table:
        if r["model"] == model and r["order"] == order and int(r["removed"]) == removed:
            key = r.get("train_seed", r["seed"])
            values.setdefault(int(key), []).append(100 * float(r["accuracy"]))
    return [statistics.fmean(values[k]) for k in sorted(values)]


def conv_error(kind, seed):
    return load_json(f"fashion_mnist_conv/runs/{kind}-seed{seed}/results.json")[
        "test_error_percent"]


def conv_errors(kind):
    return [conv_error(kind, seed) for seed in (0, 1, 2)]


def conv_gates(seed, kind="gresnet"):
    """{block: g(k)} after the last epoch of the conv GResNet of ``seed``
    (``kind="gresnet_k_decay"``: the one trained with k decay)."""
    table = rows(f"fashion_mnist_conv/runs/{kind}-seed{seed}/gates.csv")
    last = max(int(r["epoch"]) for r in table)
    return {r["block"].removesuffix("_gate"): float(r["g"]) for r in table
            if int(r["epoch"]) == last}


def rank(seed, block):
    """The rank of ``block``'s g(k) among the 15 of the conv GResNet (1: lowest)."""
    gates = conv_gates(seed)
    return sorted(gates, key=gates.get).index(block) + 1


def finetune(depth, direction, shots, method):
    """Test error (%) of the MLP fine-tuning table's cell, by seed."""
    found = []
    for key, value in load_json("finetune/results.json").items():
        point = json.loads(key)
        if (point["depth"], point["direction"], point["shots"], point["method"]) == (
                depth, direction, shots, method):
            found.append((point["seed"], 100 * value["error"]))
    return [e for _, e in sorted(found)]


def finetune_conv(shots, method):
    found = []
    for key, value in load_json("finetune_conv/results.json").items():
        point = json.loads(key)
        if (point["shots"], point["method"]) == (shots, method):
            found.append((point["seed"], 100 * value["error"]))
    return [e for _, e in sorted(found)]


def selection(net, setting, value):
    """Validation errors (%) of one grid point of ``finetune_select.py``:
    ``{cell: [error by seed]}``."""
    cells = {}
    for key, error in load_json(f"finetune_select/{net}/results.json").items():
        point = json.loads(key)
        if point["settings"] == {setting: value}:
            cell = (point["size"], point["direction"], point["shots"])
            cells.setdefault(cell, []).append((point["seed"], 100 * error))
    return {cell: [e for _, e in sorted(found)] for cell, found in sorted(cells.items())}


def selection_mean(net, setting, value):
    """The mean over the cells of each cell's mean over the seeds (the
    selection tables' "mean")."""
    return statistics.fmean(statistics.fmean(v) for v in selection(net, setting, value).values())


def selection_gap(net, setting, value, default):
    """Paired interval of a grid point against another, every cell and seed
    a pair (``finetune_select.choose``)."""
    def units(v):
        return [e for cell in selection(net, setting, v).values() for e in cell]
    return paired_interval(units(value), units(default))


DIRECTIONS = {"Fashion-MNIST -> MNIST": "fashion_mnist_to_mnist",
              "MNIST -> Fashion-MNIST": "mnist_to_fashion_mnist"}
CELLS = [(depth, name, shots) for depth in (2, 20) for name in DIRECTIONS for shots in (10, 100)]


# --- formatting, as the pages print ------------------------------------------

def f1(x):
    return f"{x:.1f}"


def f2(x):
    return f"{x:.2f}"


def s2(x):
    return f"{x:+.2f}"


def mean(values):
    return statistics.fmean(values)


def interval(values, digits=2):
    """``[-0.24, +0.25]`` from ``(gap, low, high)``."""
    return f"[{values[1]:+.{digits}f}, {values[2]:+.{digits}f}]"


def range_(values, digits=1):
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def kept(after, before):
    return f1(100 * after / before)


def word(n):
    """A small count as the prose writes it."""
    return ("no", "one", "two", "three", "four", "five", "six", "seven", "eight")[n]


def closed(gates):
    return sum(g == 0 for g in gates)


def listed(items):
    """``a``, ``a and b``, ``a, b and c``: a list as the prose writes it."""
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def kd_seeds():
    """The seeds of the k-decay GResNet whose run has finished (its
    ``results.json``): the prose gives the column as far as it goes."""
    return [s for s in (0, 1, 2)
            if (RESULTS / CONV / "runs" / f"{KD}-seed{s}" / "results.json").is_file()]


def other_gresnets():
    """``, which also gives the other GResNet's mean, 1.27``: the GResNets
    without k decay whose seed has no finished k-decay twin, or nothing."""
    means = [f2(mean(conv_gates(s).values())) for s in (0, 1, 2) if s not in kd_seeds()]
    if not means:
        return ""
    whose = "GResNets' means" if len(means) > 1 else "GResNet's mean"
    return f", which also gives the other {whose}, {listed(means)}"


def first_open(ks):
    """How many leading blocks keep k > 0."""
    return next(i for i, k in enumerate(ks) if k <= 0)


def k_decay_gap():
    """k decay - GResNet in test error over the finished k-decay seeds: the
    two columns, the Welch interval, and whether it holds GR's gap and 0 (the
    README and docs/analysis.md both say so)."""
    kd, g = [conv_error(KD, s) for s in kd_seeds()], conv_errors("gresnet")
    gap, low, high = welch_interval(kd, g)
    return dict(kd=kd, g=g, ci=(gap, low, high), holds_0=low <= 0 <= high,
                holds_gr=low <= GR_K_DECAY5 - GR_GRESNET5 <= high)


def k_decay_errors():
    """The fields of docs/analysis.md's k-decay sentence."""
    d = k_decay_gap()
    kd, g, r = d["kd"], d["g"], conv_errors("resnet")
    t, dof = welch(kd, g)
    return dict(
        seeds=listed(kd_seeds()), errors=listed([f"{f2(e)}%" for e in kd]), m=f2(mean(kd)),
        g=f2(mean(g)), r=f2(mean(r)), gap=s2(mean(kd) - mean(g)), ci=interval(d["ci"]),
        t=f2(t), dof=f1(dof), n=len(kd), nw=word(len(kd)), gr=s2(GR_K_DECAY5 - GR_GRESNET5),
        gr_in="inside" if d["holds_gr"] else "outside",
        zero="and so is 0" if d["holds_0"] else "and 0 is not",
        gap2=s2(mean(r) - mean(kd)), ci2=interval(welch_interval(r, kd)),
        gr2=s2(GR_RESNET5 - GR_K_DECAY5),
        behind=word(sum(conv_error(KD, s) > conv_error("gresnet", s) for s in kd_seeds())),
        each=", ".join(s2(conv_error(KD, s) - conv_error("gresnet", s)) for s in kd_seeds()))


def k_decay_gap_readme():
    """The fields of README.md's k-decay sentence: the column's mean ± std,
    its gap to the GResNet, and which of GR's gap and 0 the interval holds."""
    d = k_decay_gap()
    gr = s2(GR_K_DECAY5 - GR_GRESNET5)
    holds = {(True, True): f"which holds GR's {gr} and 0 alike",
             (True, False): f"which holds GR's {gr} but not 0",
             (False, True): f"which holds 0 but not GR's {gr}",
             (False, False): f"which holds neither GR's {gr} nor 0"}[d["holds_gr"], d["holds_0"]]
    return dict(m=f2(mean(d["kd"])), sd=f2(statistics.stdev(d["kd"])),
                gap=s2(mean(d["kd"]) - mean(d["g"])), ci=interval(d["ci"]), holds=holds)


# --- the sentences ------------------------------------------------------------
# (page, sentence with {fields}, function of no argument giving the fields).
# Each field is one printed figure or interval.

D100 = [f"gresnet_mlp100-seed{s}" for s in (0, 1, 2)]
FM = "fashion_mnist"
CONV = "fashion_mnist_conv"
KD = "gresnet_k_decay"


def _conv_after(model, removed):
    return pruning(CONV, model, "random" if model == "resnet" else "random", removed)


def removed_six(model):
    """Each conv net's accuracy (%) of ``model`` by training seed: unpruned,
    and with 6 of 13 blocks removed greedy and random (the mean of its
    orders), and those two as a share of the unpruned accuracy."""
    full, greedy, random = (pruning(CONV, model, "greedy", 0), pruning(CONV, model, "greedy", 6),
                            pruning(CONV, model, "random", 6))
    return {"full": full, "greedy": greedy, "random": random,
            "kept greedy": [100 * a / f for a, f in zip(greedy, full)],
            "kept random": [100 * a / f for a, f in zip(random, full)]}


def k_decay_removal():
    """The fields of docs/analysis.md's block-removal sentence on the k-decay nets."""
    kd, g = removed_six(KD), removed_six("gresnet")
    gaps = {k: welch_interval(kd[k], g[k]) for k in ("kept greedy", "kept random")}

    def percents(values):
        return listed([f"{f2(a)}%" for a in values])

    return dict(
        kg=percents(kd["greedy"]), kr=percents(kd["random"]), kfull=percents(kd["full"]),
        seeds=listed(kd_seeds()), gg=percents(g["greedy"]), gr=percents(g["random"]),
        gfull=percents(g["full"]),
        dg=s2(gaps["kept greedy"][0]), cig=interval(gaps["kept greedy"]),
        dr=s2(gaps["kept random"][0]), cir=interval(gaps["kept random"]),
        zero={2: "both intervals contain 0", 1: "one interval contains 0",
              0: "neither interval contains 0"}[sum(low <= 0 <= high
                                                    for _, low, high in gaps.values())],
        behind=word(sum(a < b for a, b in zip(kd["greedy"], kd["random"]))),
        nw=word(len(kd["greedy"])),
        each=", ".join(s2(a - b) for a, b in zip(kd["greedy"], kd["random"])),
        cip=interval(paired_interval(kd["greedy"], kd["random"])))


FIGURES = [
    # docs/analysis.md, --zero-gates
    ("docs/analysis.md", "seed-1 and seed-2 run folders): {a}, {b} and {c} of 50 blocks go",
     lambda: dict(zip("abc", (closed(mnist_gates(r)) for r in D100)))),
    # docs/analysis.md, the recipe: Keras 1's Nadam against a fixed momentum
    ("docs/analysis.md", "**{err}% test error, mean g(k) {g}, {z} of 25 gates at exactly 0**, "
     "against {err0}%, {g0} and {z0} for Keras 1's reading at seed 0 ({m} ± {sd}% over seeds "
     "0-2); the fixed momentum is ahead early ({e1}% against {e1k}% after epoch 1)",
     lambda: dict(
         err=f2(load_json("mnist_fixed_momentum/runs/gresnet_mlp50-seed0/results.json")[
             "test_error_percent"]),
         g=f2(mean(load_json("mnist_fixed_momentum/runs/gresnet_mlp50-seed0/results.json")[
             "gates"].values())),
         z=closed(load_json("mnist_fixed_momentum/runs/gresnet_mlp50-seed0/results.json")[
             "gates"].values()),
         err0=f2(mnist("gresnet", 50)[0]), g0=f2(mnist("gresnet", 50, "mean_g")[0]),
         z0=closed(mnist_gates("gresnet_mlp50-seed0")),
         m=f2(mean(mnist("gresnet", 50))), sd=f2(statistics.stdev(mnist("gresnet", 50))),
         e1=f2(100 * (1 - float(rows("mnist_fixed_momentum/runs/gresnet_mlp50-seed0/"
                                     "history.csv")[0]["test_accuracy"]))),
         e1k=f2(100 * (1 - float(rows("mnist/runs/gresnet_mlp50-seed0/history.csv")[0][
             "test_accuracy"]))))),
    ("docs/analysis.md", "**{err}%, mean g(k) {g}, {z} of 50 gates at exactly 0**, against "
     "{err0}%, {g0} and {z0} for Keras 1's reading at seed 0 ({m} ± {sd}% over seeds 0-2)",
     lambda: dict(
         err=f2(load_json("mnist_fixed_momentum/runs/gresnet_mlp100-seed0/results.json")[
             "test_error_percent"]),
         g=f"{mean(fixed_momentum_gates('gresnet_mlp100-seed0')):.3f}",
         z=closed(load_json("mnist_fixed_momentum/runs/gresnet_mlp100-seed0/results.json")[
             "gates"].values()),
         err0=f2(mnist("gresnet", 100)[0]), g0=f"{mnist('gresnet', 100, 'mean_g')[0]:.3f}",
         z0=closed(mnist_gates("gresnet_mlp100-seed0")),
         m=f2(mean(mnist("gresnet", 100))), sd=f2(statistics.stdev(mnist("gresnet", 100))))),
    # docs/analysis.md, GR's MNIST claims one by one
    ("docs/analysis.md", "**The plain net fails at depth: reproduced.** {p50}% and {p100}% error "
     "at d = 50 and 100 (GR: 60.37% and 90.20%), while the ResNet trains (seed 0: {r50}% and "
     "{r100}%)",
     lambda: dict(p50=f2(mnist("plain", 50)[0]), p100=f2(mnist("plain", 100)[0]),
                  r50=f2(mnist("resnet", 50)[0]), r100=f2(mnist("resnet", 100)[0]))),
    ("docs/analysis.md", "Here the plain net equals the ResNet at d = 2 and 10 ({p2} vs {r2}, "
     "{p10} vs {r10}) and is {gap} points behind at d = 20 ({p20} vs {r20})",
     lambda: dict(p2=f2(mnist("plain", 2)[0]), r2=f2(mnist("resnet", 2)[0]),
                  p10=f2(mnist("plain", 10)[0]), r10=f2(mnist("resnet", 10)[0]),
                  gap=f2(mnist("plain", 20)[0] - mnist("resnet", 20)[0]),
                  p20=f2(mnist("plain", 20)[0]), r20=f2(mnist("resnet", 20)[0]))),
    ("docs/analysis.md", "GResNet is ahead on point estimates at four depths: by {a}, {b} and "
     "{c} points at d = 2, 10 and 20 (one seed each, no interval) and by {d} points at d = 100 "
     "over three seeds; at d = 50 the two are level ({e} points over three seeds). Seeds 0, 1, "
     "2: ResNet {r50} at d = 50 and {r100} at d = 100; GResNet {g50} and {g100}. The 95% Welch "
     "intervals of those two gaps, {i50} and {i100}, contain zero",
     lambda: dict(
         a=f2(mnist("resnet", 2)[0] - mnist("gresnet", 2)[0]),
         b=f2(mnist("resnet", 10)[0] - mnist("gresnet", 10)[0]),
         c=f2(mnist("resnet", 20)[0] - mnist("gresnet", 20)[0]),
         d=f2(mean(mnist("resnet", 100)) - mean(mnist("gresnet", 100))),
         e=f"{mean(mnist('resnet', 50)) - mean(mnist('gresnet', 50)):+.3f}",
         r50=", ".join(map(f2, mnist("resnet", 50))), r100=", ".join(map(f2, mnist("resnet", 100))),
         g50=", ".join(map(f2, mnist("gresnet", 50))),
         g100=", ".join(map(f2, mnist("gresnet", 100))),
         i50=interval(welch_interval(mnist("resnet", 50), mnist("gresnet", 50))),
         i100=interval(welch_interval(mnist("resnet", 100), mnist("gresnet", 100))))),
    ("docs/analysis.md", "Raw k goes {k2}, {k10}, {k20}, {k50}, {k100} from d = 2 to 100 (d = 50 "
     "and 100: means of 3 seeds, {k50_3} and {k100_3}, spread at most {spread})",
     lambda: dict(
         k2=f2(mnist("gresnet", 2, "mean_k")[0]), k10=f2(mnist("gresnet", 10, "mean_k")[0]),
         k20=f2(mnist("gresnet", 20, "mean_k")[0]), k50=f2(mean(mnist("gresnet", 50, "mean_k"))),
         k100=f2(mean(mnist("gresnet", 100, "mean_k"))),
         k50_3=f"{mean(mnist('gresnet', 50, 'mean_k')):.3f}",
         k100_3=f"{mean(mnist('gresnet', 100, 'mean_k')):.3f}",
         spread=f2(max(statistics.stdev(mnist("gresnet", d, "mean_k")) for d in (50, 100))))),
    ("docs/analysis.md", "Here k falls with depth: the first {lo} to {hi} blocks keep k > 0 on "
     "every d = 100 seed",
     lambda: dict(lo=min(first_open(mnist_raw_k(r)) for r in D100),
                  hi=max(first_open(mnist_raw_k(r)) for r in D100))),
    ("docs/analysis.md", "every block from block {b0} (seed 0) or {b1} (seed 1) to block 50; on "
     "seed 2 all of blocks {b2}-50 but blocks {x}. {z0}, {z1} and {z2} of the 50 gates in all",
     lambda: dict(
         b0=1 + min(i for i, k in enumerate(mnist_raw_k(D100[0]))
                    if all(v <= 0 for v in mnist_raw_k(D100[0])[i:])),
         b1=1 + min(i for i, k in enumerate(mnist_raw_k(D100[1]))
                    if all(v <= 0 for v in mnist_raw_k(D100[1])[i:])),
         b2=22, x=" and ".join(str(i + 1) for i in range(21, 50)
                               if mnist_raw_k(D100[2])[i] > 0),
         z0=sum(k <= 0 for k in mnist_raw_k(D100[0])),
         z1=sum(k <= 0 for k in mnist_raw_k(D100[1])),
         z2=sum(k <= 0 for k in mnist_raw_k(D100[2])))),
    ("docs/analysis.md", "the ResNets at d = 10 and 20 are {a} and {b} points worse than GR's (at "
     "d = 2, {c})",
     lambda: dict(a=f2(mnist("resnet", 10)[0] - GR_RESNET_MLP[10]),
                  b=f2(mnist("resnet", 20)[0] - GR_RESNET_MLP[20]),
                  c=f2(mnist("resnet", 2)[0] - GR_RESNET_MLP[2]))),
    ("docs/analysis.md", "the gated plain net (`u = g(k) f(x) + (1 - g(k)) x`) reaches {gp50}% "
     "error against the plain net's {p50}% and the ResNet's {r50}%. At d = 100 it does not: "
     "{gp100}%, chance level like the plain net's {p100}%",
     lambda: dict(gp50=f2(mnist("gated_plain", 50)[0]), p50=f2(mnist("plain", 50)[0]),
                  r50=f2(mnist("resnet", 50)[0]), gp100=f2(mnist("gated_plain", 100)[0]),
                  p100=f2(mnist("plain", 100)[0]))),
    ("docs/analysis.md", "mean g(k) over its 100 gates is {m} after epoch 100 (min {lo}, max {hi}",
     lambda: dict(m=f2(mean(mnist_gates("gated_plain_mlp100-seed0"))),
                  lo=f"{min(mnist_gates('gated_plain_mlp100-seed0')):g}",
                  hi=f2(max(mnist_gates("gated_plain_mlp100-seed0"))))),
    ("docs/analysis.md", "at d = 50 ResNet seeds 1, 2 gave {r1}% and {r2}%", lambda: dict(
        r1=f2(mnist("resnet", 50)[1]), r2=f2(mnist("resnet", 50)[2]))),
    ("docs/analysis.md", "GResNet {g1}% and {g2}% (1.99%, 2.07%)", lambda: dict(
        g1=f2(mnist("gresnet", 50)[1]), g2=f2(mnist("gresnet", 50)[2]))),
    ("docs/analysis.md", "at d = 100 ResNet {r1}% and {r2}% (first runs 2.03%, 1.94%), GResNet "
     "{g1}% and {g2}%", lambda: dict(
         r1=f2(mnist("resnet", 100)[1]), r2=f2(mnist("resnet", 100)[2]),
         g1=f2(mnist("gresnet", 100)[1]), g2=f2(mnist("gresnet", 100)[2]))),
    ("docs/analysis.md", "which moved the d = 50 gap from +0.02 to {gap50} points, interval "
     "{ci50}; at d = 100", lambda: dict(
         gap50=f"{mean(mnist('resnet', 50)) - mean(mnist('gresnet', 50)):+.3f}",
         ci50=interval(welch_interval(mnist("resnet", 50), mnist("gresnet", 50))))),
    ("docs/analysis.md", "which moved the d = 100 gap from +0.08 to {gap} points, interval from "
     "[-0.33, +0.49] to {ci}", lambda: dict(
         gap=s2(mean(mnist("resnet", 100)) - mean(mnist("gresnet", 100))),
         ci=interval(welch_interval(mnist("resnet", 100), mnist("gresnet", 100))))),
    # docs/analysis.md, GR Figure 5 on MNIST
    ("docs/analysis.md", "With 25 of 50 blocks removed greedy keeps {greedy}% (mean of three "
     "nets; the accuracy of the full nets) against random's {random}%: {gap} points, Welch "
     "interval {ci}, which still contains 0 with three nets; on each net greedy is ahead ({each} "
     "points). The reason: {z0}, {z1} and {z2} of the 50 gates end at exactly g(k) = 0",
     lambda: dict(
         greedy=f2(mean(pruning("mnist", "gresnet", "greedy", 25))),
         random=f2(mean(pruning("mnist", "gresnet", "random", 25))),
         gap=s2(mean(pruning("mnist", "gresnet", "greedy", 25))
                - mean(pruning("mnist", "gresnet", "random", 25))),
         ci=interval(welch_interval(pruning("mnist", "gresnet", "greedy", 25),
                                    pruning("mnist", "gresnet", "random", 25))),
         each=", ".join(s2(a - b) for a, b in zip(pruning("mnist", "gresnet", "greedy", 25),
                                                  pruning("mnist", "gresnet", "random", 25))),
         z0=closed(mnist_gates(D100[0])), z1=closed(mnist_gates(D100[1])),
         z2=closed(mnist_gates(D100[2])))),
    ("docs/analysis.md", "After 5 random removals the ResNets keep {k}% of their accuracy ({each}% "
     "per net); after 25, {k25}%",
     lambda: dict(
         k=f2(mean([100 * a / b for a, b in zip(pruning("mnist", "resnet", "random", 5),
                                                pruning("mnist", "resnet", "random", 0))])),
         each=", ".join(f2(100 * a / b) for a, b in zip(pruning("mnist", "resnet", "random", 5),
                                                       pruning("mnist", "resnet", "random", 0))),
         k25=f2(mean([100 * a / b for a, b in zip(pruning("mnist", "resnet", "random", 25),
                                                  pruning("mnist", "resnet", "random", 0))])))),
    ("docs/analysis.md", "With 25 removed: GResNet {g}% against ResNet {r}%, {gap} points, Welch "
     "interval {ci}; GResNet ahead on seeds 0 and 2 ({g0} against {r0}, {g2} against {r2}), "
     "behind on seed 1 ({g1} against {r1}). With every block removed (stem and head alone) the "
     "nets already differ by {gap50} points ({g50}% against {r50}%, interval {ci50})",
     lambda: (lambda g, r, g50, r50: dict(
         g=f2(mean(g)), r=f2(mean(r)), gap=s2(mean(g) - mean(r)),
         ci=interval(welch_interval(g, r)), g0=f2(g[0]), r0=f2(r[0]), g1=f2(g[1]), r1=f2(r[1]),
         g2=f2(g[2]), r2=f2(r[2]), gap50=s2(mean(g50) - mean(r50)), g50=f2(mean(g50)),
         r50=f2(mean(r50)), ci50=interval(welch_interval(g50, r50))))(
        pruning("mnist", "gresnet", "random", 25), pruning("mnist", "resnet", "random", 25),
        pruning("mnist", "gresnet", "random", 50), pruning("mnist", "resnet", "random", 50))),
    # docs/analysis.md, the Fashion-MNIST MLPs (20 epochs, seed 0)
    *[("docs/analysis.md", "| {d} | {plain} | {resnet} | {gresnet} | {g} | ", (
        lambda d=d: dict(d=d, plain=f2(float(fashion("plain", d)["test_error"])),
                         resnet=f2(float(fashion("resnet", d)["test_error"])),
                         gresnet=f2(float(fashion("gresnet", d)["test_error"])),
                         g=f2(float(fashion("gresnet", d)["mean_k"])))))
      for d in (2, 10, 20, 50, 100)],
    ("docs/analysis.md", "| GResNet, greedy (smallest k first) | {full}% | {after}% | {kept}% |",
     lambda: dict(full=f2(pruning(FM, "gresnet", "greedy", 0)[0]),
                  after=f2(pruning(FM, "gresnet", "greedy", 25)[0]),
                  kept=kept(pruning(FM, "gresnet", "greedy", 25)[0],
                            pruning(FM, "gresnet", "greedy", 0)[0]))),
    *[("docs/analysis.md", "| {name}, random | {full}% | {after}% ({range}) | {kept}% |", (
        lambda model=model, name=name: dict(
            name=name, full=f2(pruning(FM, model, "random", 0)[0]),
            after=f2(mean(pruning(FM, model, "random", 25))),
            range=range_(pruning(FM, model, "random", 25)),
            kept=kept(mean(pruning(FM, model, "random", 25)), pruning(FM, model, "random", 0)[0]))))
      for model, name in (("gresnet", "GResNet"), ("resnet", "ResNet"))],
    ("docs/analysis.md", "**The plain net fails at depth 50 and 100, as in GR**: {p50}% and "
     "{p100}% error",
     lambda: dict(p50=f2(float(fashion("plain", 50)["test_error"])),
                  p100=f2(float(fashion("plain", 100)["test_error"])))),
    ("docs/analysis.md", "**Mean g(k) falls with depth, as GR's mean k does**: {g}",
     lambda: dict(g=", ".join(f2(float(fashion("gresnet", d)["mean_k"]))
                              for d in (2, 10, 20, 50, 100)))),
    ("docs/analysis.md", "every k is > 0 there (the smallest {low}, d = 100), so raw k equals "
     "g(k) at every depth. In the d = 100 GResNet the middle third of the blocks has the "
     "smallest mean k ({a} / {b} / {c} for the first / middle / last third); the single "
     "smallest k are spread over the second half (block {i1}: {k1}, block {i2}: {k2}, block "
     "{i3}: {k3})",
     lambda: (lambda ks, low: dict(
         low=f"{min(low):.3f}", a=f2(mean(ks[:17])), b=f2(mean(ks[17:34])), c=f2(mean(ks[34:])),
         **{f"i{j + 1}": i + 1 for j, i in enumerate(sorted(range(50), key=ks.__getitem__)[:3])},
         **{f"k{j + 1}": f2(ks[i]) for j, i in enumerate(sorted(range(50),
                                                               key=ks.__getitem__)[:3])}))(
        published_k("gresnet_mlp100_fashion_mnist"),
        [k for d in (2, 10, 20, 50, 100) for k in published_k(f"gresnet_mlp{d}_fashion_mnist")])),
    ("docs/analysis.md", "**GResNet beats ResNet at 4 of 5 depths, not at every depth**: by "
     "{lo} to {hi} points at d = 2, 10, 20, 50, and it loses by {loss} at d = 100",
     lambda: (lambda gaps: dict(lo=f2(min(gaps[:4])), hi=f2(max(gaps[:4])), loss=f2(-gaps[4])))(
        [float(fashion("resnet", d)["test_error"]) - float(fashion("gresnet", d)["test_error"])
         for d in (2, 10, 20, 50, 100)])),
    ("docs/analysis.md", "Removing the 30 blocks with the smallest k costs {c30} points ({full}% "
     "-> {after}%), half of the blocks {c25} points, against {random} points for the random "
     "orders' mean at half",
     lambda: (lambda full: dict(
         c30=f1(full - pruning(FM, "gresnet", "greedy", 30)[0]), full=f2(full),
         after=f2(pruning(FM, "gresnet", "greedy", 30)[0]),
         c25=f1(full - pruning(FM, "gresnet", "greedy", 25)[0]),
         random=f1(full - mean(pruning(FM, "gresnet", "random", 25)))))(
        pruning(FM, "gresnet", "greedy", 0)[0])),
    ("docs/analysis.md", "random the GResNet keeps {g}% of its accuracy and the ResNet {r}%",
     lambda: dict(g=kept(mean(pruning(FM, "gresnet", "random", 25)),
                         pruning(FM, "gresnet", "random", 0)[0]),
                  r=kept(mean(pruning(FM, "resnet", "random", 25)),
                         pruning(FM, "resnet", "random", 0)[0]))),
    ("docs/analysis.md", "the ResNet keeps {k}% of its accuracy after 5 random removals ({after}% "
     "against {full}%, mean of the 5 orders)",
     lambda: dict(k=kept(mean(pruning(FM, "resnet", "random", 5)),
                         pruning(FM, "resnet", "random", 0)[0]),
                  after=f2(mean(pruning(FM, "resnet", "random", 5))),
                  full=f2(pruning(FM, "resnet", "random", 0)[0]))),
    # docs/analysis.md, GR Table 3 on Fashion-MNIST
    *[("docs/analysis.md", "| {name} | {e0} | {e1} | {e2} | {m} ± {sd} |", (
        lambda kind=kind, name=name: dict(
            name=name, **{f"e{s}": f2(e) for s, e in enumerate(conv_errors(kind))},
            m=f2(mean(conv_errors(kind))), sd=f2(statistics.stdev(conv_errors(kind))))))
      for kind, name in (("resnet", "ResNet n=5 (original)"), ("gresnet", "GResNet n=5 (gated)"))],
    ("docs/analysis.md", "**The target is met by all six nets**: {lo}% to {hi}% test error",
     lambda: dict(lo=f2(min(conv_errors("resnet") + conv_errors("gresnet"))),
                  hi=f2(max(conv_errors("resnet") + conv_errors("gresnet"))))),
    ("docs/analysis.md", "The three GResNets average {g}% accuracy ({ge}% error), the three "
     "ResNets {r}%",
     lambda: dict(g=f2(100 - mean(conv_errors("gresnet"))), ge=f2(mean(conv_errors("gresnet"))),
                  r=f2(100 - mean(conv_errors("resnet"))))),
    ("docs/analysis.md", "ResNet - GResNet is {gap} points, 95% Welch interval {ci} (t = {t} on "
     "{dof} degrees of freedom, n = 3 and 3). GR's CIFAR-10 gap is +0.49 points, outside the "
     "interval by {out} points only; as a relative gain ({rel}% of the ResNet's error, (7.16 - "
     "6.67) / 7.16) it would be about {scaled} points at this error level ({level}%)",
     lambda: (lambda r, g: dict(
         gap=s2(mean(r) - mean(g)), ci=interval(welch_interval(r, g)), t=f2(welch(r, g)[0]),
         dof=f1(welch(r, g)[1]),
         out=f2(GR_RESNET5 - GR_GRESNET5 - welch_interval(r, g)[2]),
         rel=f1(100 * (GR_RESNET5 - GR_GRESNET5) / GR_RESNET5),
         scaled=s2(mean(r) * (GR_RESNET5 - GR_GRESNET5) / GR_RESNET5), level=f2(mean(r))))(
        conv_errors("resnet"), conv_errors("gresnet"))),
    ("docs/analysis.md", "(std {r} and {g} points)", lambda: dict(
        r=f2(statistics.stdev(conv_errors("resnet"))),
        g=f2(statistics.stdev(conv_errors("gresnet"))))),
    ("docs/analysis.md", "so one seed of each (seed 0: {gap} points)", lambda: dict(
        gap=s2(conv_error("resnet", 0) - conv_error("gresnet", 0)))),
    # docs/analysis.md, GR Table 3's k-decay column (the seeds finished so far)
    ("docs/analysis.md", "| GResNet n=5 + k decay | {cells} | {stat} |",
     lambda: (lambda e: dict(
         cells=" | ".join(f2(e[s]) if s in e else "-" for s in (0, 1, 2)),
         stat=(f"{f2(mean(e.values()))} ± {f2(statistics.stdev(e.values()))}"
               if len(e) > 1 else f2(mean(e.values())))
         + ("" if len(e) == 3 else f" (n={len(e)})")))(
        {s: conv_error(KD, s) for s in kd_seeds()})),
    ("docs/analysis.md", "ends seeds {seeds} at {errors} test error (mean {m}%), against {g}% "
     "for the three GResNets and {r}% for the three ResNets. k decay - GResNet is {gap} points, "
     "95% Welch interval {ci} (t = {t} on {dof} degrees of freedom, n = {n} and 3); GR's CIFAR-10 "
     "gap, {gr} points (7.04% against 6.67%), is {gr_in} it, {zero}. ResNet - k decay is "
     "{gap2} points, {ci2} (GR: {gr2}). Seed for seed, k decay is behind the GResNet on {behind} "
     "of {nw} ({each} points)",
     k_decay_errors),
    ("docs/analysis.md", "With k decay the 15 gates end at mean g(k) {m} on seeds {seeds} "
     "(smallest {lo}; largest {hi}), against {gm} for the GResNets of the same seeds without k "
     "decay; seed for seed {lowered} of 15 are lower, and {closed} is at 0",
     lambda: (lambda kd, g: dict(
         seeds=listed(kd_seeds()), m=listed([f2(mean(kd[s].values())) for s in kd]),
         lo=listed([f"{f2(min(kd[s].values()))} at {min(kd[s], key=kd[s].get)}" for s in kd]),
         hi=listed([f"{f2(max(kd[s].values()))} at {max(kd[s], key=kd[s].get)}" for s in kd]),
         gm=listed([f2(mean(g[s].values())) for s in kd]),
         lowered=listed([sum(kd[s][b] < g[s][b] for b in g[s]) for s in kd]),
         closed={0: "none"}.get(sum(closed(kd[s].values()) for s in kd),
                                sum(closed(kd[s].values()) for s in kd))))(
        {s: conv_gates(s, KD) for s in kd_seeds()}, {s: conv_gates(s) for s in kd_seeds()})),
    ("docs/analysis.md", "(`table.md`'s gate table{others}; `gates-gresnet_k_decay-seed{seeds}.md` "
     "per block)",
     lambda: dict(others=other_gresnets(), seeds=(
         "{" + ",".join(map(str, kd_seeds())) + "}" if len(kd_seeds()) > 1 else kd_seeds()[0]))),
    ("docs/analysis.md", "With 6 of 13 blocks removed greedy leaves {kg} and the random orders "
     "{kr} (mean of 3 orders a net) of the k-decay nets' {kfull} (seeds {seeds}); the three "
     "GResNets keep {gg} greedy and {gr} random of their {gfull}. As a share of each net's own "
     "accuracy, k decay - GResNet is {dg} points greedy, Welch 95% interval {cig}, and {dr} "
     "points random, {cir}: {zero}. Greedy is behind random on {behind} of the {nw} k-decay nets "
     "({each} points; paired 95% interval {cip})",
     k_decay_removal),
    # docs/analysis.md, GR Figure 7's reading
    ("docs/analysis.md", "conv4_block1 and conv3_block1 rank {a}nd and {b}th of 15 on seed 2 "
     "({ga}, {gb}), {c}st and {d}nd on seed 0, {e}nd and {f}rd on seed 1",
     lambda: dict(a=rank(2, "conv4_block1"), b=rank(2, "conv3_block1"),
                  ga=f2(conv_gates(2)["conv4_block1"]), gb=f2(conv_gates(2)["conv3_block1"]),
                  c=min(rank(0, "conv4_block1"), rank(0, "conv3_block1")),
                  d=max(rank(0, "conv4_block1"), rank(0, "conv3_block1")),
                  e=min(rank(1, "conv4_block1"), rank(1, "conv3_block1")),
                  f=max(rank(1, "conv4_block1"), rank(1, "conv3_block1")))),
    ("docs/analysis.md", "the very first block, conv2_block1, is the lowest on seeds {s1} and "
     "{s2} ({g1}, {g2})",
     lambda: dict(s1=[s for s in (0, 1, 2) if rank(s, "conv2_block1") == 1][0],
                  s2=[s for s in (0, 1, 2) if rank(s, "conv2_block1") == 1][1],
                  g1=f2(conv_gates(1)["conv2_block1"]), g2=f2(conv_gates(2)["conv2_block1"]))),
    ("docs/analysis.md", "conv4_block5 ranks {a}th, {b}th and {c}th of 15 on seeds 0, 1 and 2; "
     "the highest is in stage conv3 on all three (conv3_block5 on seeds 0 and 2, {h0} and {h2}; "
     "conv3_block4 on seed 1, {h1})",
     lambda: dict(a=rank(0, "conv4_block5"), b=rank(1, "conv4_block5"),
                  c=rank(2, "conv4_block5"),
                  h0=f2(conv_gates(0)["conv3_block5"]) if rank(0, "conv3_block5") == 15 else "?",
                  h2=f2(conv_gates(2)["conv3_block5"]) if rank(2, "conv3_block5") == 15 else "?",
                  h1=f2(conv_gates(1)["conv3_block4"]) if rank(1, "conv3_block4") == 15 else "?")),
    # docs/analysis.md, block removal on the conv nets
    ("docs/analysis.md", "The removable block with the lowest g(k) is conv2_block1 on every seed "
     "(g = {g0}, {g1}, {g2}); removing it, exactly the net with that gate at 0, takes the test "
     "accuracy from {f0}% to {a0}% (seed 0), from {f1}% to {a1}% (seed 1) and from {f2}% to "
     "{a2}% (seed 2)",
     lambda: (lambda full, one: dict(
         g0=f2(conv_gates(0)["conv2_block1"]), g1=f2(conv_gates(1)["conv2_block1"]),
         g2=f2(conv_gates(2)["conv2_block1"]),
         **{f"f{s}": f2(full[s]) for s in range(3)}, **{f"a{s}": f1(one[s]) for s in range(3)}))(
        pruning(CONV, "gresnet", "greedy", 0), pruning(CONV, "gresnet", "greedy", 1))),
    ("docs/analysis.md", "With 6 of 13 blocks removed greedy leaves {a}%, {b}% and {c}% accuracy "
     "(chance is 10%; mean of the three nets {m}%, `pruning.md`), {ka}%, {kb}% and {kc}% of the "
     "unpruned nets' accuracy",
     lambda: (lambda six, full: dict(
         a=f2(six[0]), b=f2(six[1]), c=f2(six[2]), m=f2(mean(six)),
         ka=kept(six[0], full[0]), kb=kept(six[1], full[1]), kc=kept(six[2], full[2])))(
        pruning(CONV, "gresnet", "greedy", 6), pruning(CONV, "gresnet", "greedy", 0))),
    ("docs/analysis.md", "(after one block it is above: {g1}% against {r1}% and {g2}% against "
     "{r2}%). At 6 of 13 removed greedy minus random is {gap} points: Welch 95% interval {ci} "
     "over the three nets, and, pairing each net's greedy and random curves (both prune the same "
     "net), a paired 95% interval of {paired} (each net: {each}",
     lambda: (lambda greedy, random, g1, r1: dict(
         g1=f1(g1[1]), r1=f1(r1[1]), g2=f1(g1[2]), r2=f1(r1[2]),
         gap=s2(mean(greedy) - mean(random)),
         ci=interval(welch_interval(greedy, random)),
         paired=interval(paired_interval(greedy, random)),
         each=", ".join(s2(a - b) for a, b in zip(greedy, random))))(
        pruning(CONV, "gresnet", "greedy", 6), pruning(CONV, "gresnet", "random", 6),
        pruning(CONV, "gresnet", "greedy", 1), pruning(CONV, "gresnet", "random", 1))),
    ("docs/analysis.md", "No gate is near 0 (the lowest removable one is {low})",
     lambda: dict(low=f2(min(g for s in (0, 1, 2) for b, g in conv_gates(s).items()
                             if b not in ("conv3_block1", "conv4_block1"))))),
    ("docs/analysis.md", "(after one block: {r0}% against {g0}%, {r1}% against {g1}%, {r2}% "
     "against {g2}%; after four, {r41}% against {g41}% and {r42}% against {g42}% on seeds 1 and "
     "2; after six: {r60}% against {g60}%, {r61}% against {g61}%, {r62}% against {g62}%",
     lambda: dict(**{f"r{s}": f1(_conv_after("resnet", 1)[s]) for s in range(3)},
                  **{f"g{s}": f1(_conv_after("gresnet", 1)[s]) for s in range(3)},
                  **{f"r4{s}": f1(_conv_after("resnet", 4)[s]) for s in (1, 2)},
                  **{f"g4{s}": f1(_conv_after("gresnet", 4)[s]) for s in (1, 2)},
                  **{f"r6{s}": f1(_conv_after("resnet", 6)[s]) for s in range(3)},
                  **{f"g6{s}": f1(_conv_after("gresnet", 6)[s]) for s in range(3)})),
    ("docs/analysis.md", "At 6 of 13 removed the gap is {gap} points (GResNet minus ResNet, means "
     "{g}% and {r}%), with a Welch 95% interval of {ci} over three nets a side: the interval "
     "contains 0. With every removable block gone the GResNets keep {a}%, {b}% and {c}% (the "
     "seed-2 net below chance), the ResNets {r13}% each: {gap13} points, {ci13}",
     lambda: (lambda g, r, g13, r13: dict(
         gap=s2(mean(g) - mean(r)), g=f2(mean(g)), r=f2(mean(r)), ci=interval(welch_interval(g, r)),
         a=f2(g13[0]), b=f2(g13[1]), c=f2(g13[2]),
         r13=f2(r13[0]) if len(set(r13)) == 1 else "?", gap13=s2(mean(g13) - mean(r13)),
         ci13=interval(welch_interval(g13, r13))))(
        _conv_after("gresnet", 6), _conv_after("resnet", 6),
        _conv_after("gresnet", 13), _conv_after("resnet", 13))),
    # README.md
    ("README.md", "Over 3 seeds on Fashion-MNIST the CIFAR GResNet n=5 has {g} ± {gs}% error and "
     "the ResNet {r} ± {rs}%: a gap of {gap} points, 95% Welch interval {ci}. It contains GR's "
     "relative gain ({rel}%, about {scaled} points at this error) but not GR's CIFAR-10 gap of "
     "+0.49 points (outside by {out})",
     lambda: (lambda r, g: dict(
         g=f2(mean(g)), gs=f2(statistics.stdev(g)), r=f2(mean(r)), rs=f2(statistics.stdev(r)),
         gap=s2(mean(r) - mean(g)), ci=interval(welch_interval(r, g)),
         rel=f1(100 * (GR_RESNET5 - GR_GRESNET5) / GR_RESNET5),
         scaled=s2(mean(r) * (GR_RESNET5 - GR_GRESNET5) / GR_RESNET5),
         out=f2(GR_RESNET5 - GR_GRESNET5 - welch_interval(r, g)[2])))(
        conv_errors("resnet"), conv_errors("gresnet"))),
    ("README.md", "With GR's k decay the GResNet has {m} ± {sd}%: {gap} points against it "
     "without, {ci}, {holds}", k_decay_gap_readme),
    ("README.md", "the plain net fails at depth ({p50}% and {p100}% error at d = 50 and 100; GR "
     "60.37% and 90.20%); mean k falls with depth ({k2} at d = 2 to {k100} at d = 100",
     lambda: dict(p50=f2(mnist("plain", 50)[0]), p100=f2(mnist("plain", 100)[0]),
                  k2=f2(mnist("gresnet", 2, "mean_k")[0]),
                  k100=f2(mean(mnist("gresnet", 100, "mean_k"))))),
    ("README.md", "here the two are within {d10} points at d = 10 ({r10} vs {p10}) and {d20} apart "
     "at d = 20. GR's smallest k sit near the middle blocks; here the first {lo} to {hi} blocks "
     "of each d = 100 seed keep k > 0 and nearly every later gate ends at k <= 0 ({zlo} to {zhi} "
     "of the 50)",
     lambda: dict(d10=f2(mnist("resnet", 10)[0] - mnist("plain", 10)[0]),
                  r10=f2(mnist("resnet", 10)[0]), p10=f2(mnist("plain", 10)[0]),
                  d20=f1(mnist("plain", 20)[0] - mnist("resnet", 20)[0]),
                  lo=min(first_open(mnist_raw_k(r)) for r in D100),
                  hi=max(first_open(mnist_raw_k(r)) for r in D100),
                  zlo=min(sum(k <= 0 for k in mnist_raw_k(r)) for r in D100),
                  zhi=max(sum(k <= 0 for k in mnist_raw_k(r)) for r in D100))),
    ("README.md", "its mean error is lower in all {n} cells, by {lo} to {hi} points; in {big} by "
     "{floor} points or more, each with a paired 95% interval over the seeds below 0",
     lambda: (lambda gaps, highs: dict(
         n=sum(g < 0 for g in gaps), lo=f1(-max(gaps)), hi=f1(-min(gaps)),
         big=sum(h < 0 for h in highs),
         floor=f1(min(-g for g, h in zip(gaps, highs) if h < 0))))(
        [mean(finetune(d, DIRECTIONS[n], s, "new")) - mean(finetune(d, DIRECTIONS[n], s, "scratch"))
         for d, n, s in CELLS],
        [paired_interval(finetune(d, DIRECTIONS[n], s, "new"),
                         finetune(d, DIRECTIONS[n], s, "scratch"))[2] for d, n, s in CELLS])),
    ("README.md", "-0.10 points at 10 shots (worse on {worse} of 3 seeds, by up to {most}; paired "
     "interval {ci10}) and {gap100} at 100 (paired interval {ci100})",
     lambda: (lambda n10, s10, n100, s100: dict(
         worse=sum(a > b for a, b in zip(n10, s10)), most=f2(max(a - b for a, b in zip(n10, s10))),
         ci10=interval(paired_interval(n10, s10)), gap100=f2(mean(n100) - mean(s100)),
         ci100=interval(paired_interval(n100, s100))))(
        finetune(2, "mnist_to_fashion_mnist", 10, "new"),
        finetune(2, "mnist_to_fashion_mnist", 10, "scratch"),
        finetune(2, "mnist_to_fashion_mnist", 100, "new"),
        finetune(2, "mnist_to_fashion_mnist", 100, "scratch"))),
    ("README.md", "{new}% against {scratch}% from scratch on the mean of 3 seeds, but per seed "
     "{a}, {b} and {c} points, paired 95% interval {ci}; at 100 it is worse ({new100}% against "
     "{scratch100}%: scratch is better on {every} seed)",
     lambda: (lambda n, s, n100, s100: dict(
         new=f1(mean(n)), scratch=f1(mean(s)),
         **dict(zip("abc", (s2(a - b) for a, b in zip(n, s)))),
         ci=interval(paired_interval(n, s)), new100=f1(mean(n100)), scratch100=f1(mean(s100)),
         every="every" if all(a > b for a, b in zip(n100, s100)) else "not every"))(
        finetune_conv(10, "new"), finetune_conv(10, "scratch"),
        finetune_conv(100, "new"), finetune_conv(100, "scratch"))),
    # docs/models.md, the MLP fine-tuning table and its prose
    *[("docs/models.md", "| {depth} | {name} | {shots} | {old} ({old_r}) | {new} ({new_r}) | "
       "{scratch} ({scratch_r}) | {gap} ({worst}) |", (
        lambda d=d, n=n, s=s: (lambda old, new, scratch: dict(
            depth=d, name=n, shots=s, old=f1(mean(old)), old_r=range_(old), new=f1(mean(new)),
            new_r=range_(new), scratch=f1(mean(scratch)), scratch_r=range_(scratch),
            gap=f"{mean(new) - mean(scratch):+.1f}",
            worst=f"{max(a - b for a, b in zip(new, scratch)):+.1f}"))(
            finetune(d, DIRECTIONS[n], s, "old"), finetune(d, DIRECTIONS[n], s, "new"),
            finetune(d, DIRECTIONS[n], s, "scratch"))))
      for d, n, s in CELLS],
    ("docs/models.md", "The mean of every cell is better than scratch, by {lo} to {hi} points",
     lambda: (lambda gaps: dict(lo=f1(-max(gaps)), hi=f1(-min(gaps))))(
        [mean(finetune(d, DIRECTIONS[n], s, "new")) - mean(finetune(d, DIRECTIONS[n], s, "scratch"))
         for d, n, s in CELLS])),
    ("docs/models.md", "at 10 shots {gap} points better on the mean, worse on {worse} of 3 seeds "
     "({n0}% against {s0}%, {n2}% against {s2}%; the third {n1}% against {s1}%), paired 95% "
     "interval {ci}; at 100 shots {gap100} points better, on every seed (by {a}, {b} and {c}), "
     "but with a paired 95% interval of {ci100}. In the other {others} cells the paired interval "
     "is below 0",
     lambda: (lambda n, s, n100, s100: dict(
         gap=f2(mean(s) - mean(n)), worse=sum(a > b for a, b in zip(n, s)),
         n0=f2(n[0]), s0=f2(s[0]), n2=f2(n[2]), s2=f2(s[2]), n1=f2(n[1]), s1=f2(s[1]),
         ci=interval(paired_interval(n, s)), gap100=f2(mean(s100) - mean(n100)),
         **dict(zip("abc", (f2(b - a) for a, b in zip(n100, s100)))),
         ci100=interval(paired_interval(n100, s100)),
         others=word(sum(paired_interval(finetune(d, DIRECTIONS[m], k, "new"),
                                    finetune(d, DIRECTIONS[m], k, "scratch"))[2] < 0
                    for d, m, k in CELLS))))(
        finetune(2, "mnist_to_fashion_mnist", 10, "new"),
        finetune(2, "mnist_to_fashion_mnist", 10, "scratch"),
        finetune(2, "mnist_to_fashion_mnist", 100, "new"),
        finetune(2, "mnist_to_fashion_mnist", 100, "scratch"))),
    # docs/models.md, the validation-split selection table
    ("docs/models.md", "`full_lr` 5e-3, 1e-2, **2e-2**, 5e-2 | {a}, {b}, **{c}**, {d} |",
     lambda: dict(zip("abcd", (f2(selection_mean("gresnet_mlp", "full_lr", v))
                               for v in (0.005, 0.01, 0.02, 0.05))))),
    ("docs/models.md", "`head_lr` 1e-3, **1e-2**, 3e-2 | {a}, **{b}**, {c} | 1e-2 kept: 3e-2 is "
     "{gap} points lower, paired 95% interval {ci}",
     lambda: dict(**dict(zip("abc", (f2(selection_mean("gresnet_mlp", "head_lr", v))
                                     for v in (0.001, 0.01, 0.03)))),
                  gap=f2(-selection_gap("gresnet_mlp", "head_lr", 0.03, 0.01)[0]),
                  ci=interval(selection_gap("gresnet_mlp", "head_lr", 0.03, 0.01)))),
    ("docs/models.md", "`full_epochs` 15, 25, **50** | {a}, {b}, **{c}** | 50: {gap} points lower "
     "than 25, paired 95% interval {ci}",
     lambda: dict(**dict(zip("abc", (f2(selection_mean("gresnet_mlp", "full_epochs", v))
                                     for v in (15, 25, 50)))),
                  gap=f2(-selection_gap("gresnet_mlp", "full_epochs", 50, 25)[0]),
                  ci=interval(selection_gap("gresnet_mlp", "full_epochs", 50, 25)))),
    ("docs/models.md", "`full_lr` 3e-4, **1e-3**, 3e-3 | {a}, **{b}**, {c} |",
     lambda: dict(zip("abc", (f2(selection_mean("gresnet_cifar", "full_lr", v))
                              for v in (0.0003, 0.001, 0.003))))),
    ("docs/models.md", "`full_epochs` **25**, 50 | **{a}**, {b} | 25 kept: 50 is {gap} points "
     "lower, paired 95% interval {ci}",
     lambda: dict(a=f2(selection_mean("gresnet_cifar", "full_epochs", 25)),
                  b=f2(selection_mean("gresnet_cifar", "full_epochs", 50)),
                  gap=f2(-selection_gap("gresnet_cifar", "full_epochs", 50, 25)[0]),
                  ci=interval(selection_gap("gresnet_cifar", "full_epochs", 50, 25)))),
    # docs/models.md, the conv net's fine-tuning table and its prose
    *[("docs/models.md", "| gresnet_cifar5 | Fashion-MNIST -> MNIST | {shots} | {new} ({new_r}) | "
       "{scratch} ({scratch_r}) | {gap} ({worst}) |", (
        lambda s=s: (lambda new, scratch: dict(
            shots=s, new=f1(mean(new)), new_r=range_(new), scratch=f1(mean(scratch)),
            scratch_r=range_(scratch), gap=f"{mean(new) - mean(scratch):+.1f}",
            worst=f"{max(a - b for a, b in zip(new, scratch)):+.1f}"))(
            finetune_conv(s, "new"), finetune_conv(s, "scratch"))))
      for s in (10, 100)],
    ("docs/models.md", "At 10 images per class fine-tuning is {gap} points lower on the mean and "
     "on "
     "{ahead} of 3 seeds (per seed {each} points), but the paired 95% interval, {ci}, contains "
     "0: no gain is established. At 100 it is worse on every seed ({each100} points; paired "
     "interval {ci100}): with 1,000 digits GR's CIFAR recipe trains the conv net from scratch to "
     "{scratch}% in 30 epochs",
     lambda: (lambda n, s, n100, s100: dict(
         gap=f1(mean(s) - mean(n)), ahead=sum(a < b for a, b in zip(n, s)),
         each=", ".join(s2(a - b) for a, b in zip(n, s)), ci=interval(paired_interval(n, s)),
         each100=", ".join(s2(a - b) for a, b in zip(n100, s100)),
         ci100=interval(paired_interval(n100, s100), digits=3), scratch=f1(mean(s100))))(
        finetune_conv(10, "new"), finetune_conv(10, "scratch"),
        finetune_conv(100, "new"), finetune_conv(100, "scratch"))),
]

# Double-quoted texts of the three pages that quote no paper: names, a
# card's line, a shell or JSON value.
NOT_QUOTATIONS = {"GR", "HE", "WRN", "28", "in the paper", "not yet trained"}


# --- the checks -----------------------------------------------------------------

def flat(text):
    """Whitespace (line breaks and a list item's indentation) as one space."""
    return re.sub(r"\s+", " ", text).strip()


@functools.cache
def page(name):
    return flat((ROOT / name).read_text())


def fields(template):
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def rendered(template, values):
    missing = set(fields(template)) - set(values)
    assert not missing, f"no value for {sorted(missing)} in {template[:60]!r}"
    return flat(template.format(**values))


@pytest.mark.parametrize("doc,template,values", FIGURES,
                         ids=[f"{doc}:{template[:40]}" for doc, template, _ in FIGURES])
def test_each_sentence_says_what_its_results_file_holds(doc, template, values):
    sentence = rendered(template, values())
    assert sentence in page(doc), (
        f"{doc} does not say what the results files give:\n  {sentence}")


def test_every_figure_is_counted():
    # A table row or sentence checked without a field would check no figure.
    assert all(fields(template) for _, template, _ in FIGURES)
    assert sum(len(fields(t)) for _, t, _ in FIGURES) >= 300


@functools.cache
def passages():
    """The papers' passages of ``tests/data/paper_passages.md``, flattened."""
    blocks = PASSAGES.read_text().split("\n## ")[1:]
    return [flat(block.split("\n", 1)[1]) for block in blocks]


def quotations(name):
    """Every double-quoted text of a page outside code (fenced blocks and
    inline code), flattened."""
    text = re.sub(r"```.*?```", "", (ROOT / name).read_text(), flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    return [flat(q) for q in re.findall(r'"([^"]+)"', text)]


@pytest.mark.parametrize("doc", PAGES)
def test_every_quotation_is_the_papers_own_words(doc):
    quoted = [q for q in quotations(doc) if q not in NOT_QUOTATIONS]
    assert quoted
    wrong = [q for q in quoted if not any(q in p for p in passages())]
    assert not wrong, f"{doc} quotes words that are in no paper passage: {wrong}"


def test_the_pages_quote_the_papers():
    # The quotation check has quotations to check on every page but the
    # README's two and models.md's three HE case names are few: count them all.
    quoted = [q for doc in PAGES for q in quotations(doc) if q not in NOT_QUOTATIONS]
    assert len(quoted) >= 15
