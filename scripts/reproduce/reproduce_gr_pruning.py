"""GR Figure 5: remove residual blocks from the trained depth-d GResNet and
ResNet (no retraining) and plot test accuracy against blocks removed, over
one or more trained nets of each (their training seeds).

GResNet: "greedy" (smallest g(k) first) and "random" orders; ResNet: random
only (it has no gates to rank by). Random curves average ``--random-orders``
seeded orders (the same permutations for every net).

    python scripts/reproduce/reproduce_gr_pruning.py --results zoo/results/fashion_mnist --depth 100
    python scripts/reproduce/reproduce_gr_pruning.py --results zoo/results/mnist --seeds 0,1,2

Reads the run folders written by ``reproduce_gr_mnist.py``, or those
``--runs`` names, ``{seed}`` standing for each of ``--seeds`` (the conv nets
of ``reproduce_gr_conv.py``):

    python scripts/reproduce/reproduce_gr_pruning.py --results zoo/results/fashion_mnist_conv \\
        --seeds 0,1 --runs gresnet=runs/gresnet-seed{seed},resnet=runs/resnet-seed{seed}

``--runs`` may also name ``gresnet_k_decay=PATH`` (GR Table 3's GResNet with
weight decay on k): its greedy and random curves, and whether removing its
blocks costs less than the GResNet's (GR: "regularizing k results in
enforcing identity mappings").

Writes ``pruning.csv``, ``pruning.md`` and ``pruning.png`` in ``--results``:
per curve the mean over the nets and each net's value; then greedy against
random on each gated net, the GResNet's random curve against the ResNet's at
half the blocks and with every block removed, and the k-decay nets' share of
their accuracy kept at half the blocks against the GResNet's, each with
Welch's 95% interval (two nets a side at least). Finished curves are kept in
``pruning.csv`` and not recomputed (rows written before the ``train_seed``
column existed are of the seed-0 nets); a net whose run has not finished is
left out (its curves come when it has).
"""

import argparse
import csv
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_gresnet import analysis, files, plots, training  # noqa: E402
from reproduce import paired_interval, welch_interval  # noqa: E402
from reproduce_gr_mnist import run_folder  # noqa: E402  (this folder: the runs' layout)

COLUMNS = ("model", "train_seed", "order", "seed", "removed", "accuracy")
# The nets, by kind: the gated ones are pruned greedily (smallest g(k) first)
# and at random, the ResNet at random only (it has no gates to rank by);
# gresnet_k_decay is GR Table 3's third column (weight decay on k too).
KINDS = {"gresnet": "GResNet", "gresnet_k_decay": "GResNet + k decay", "resnet": "ResNet"}
GATED = ("gresnet", "gresnet_k_decay")
LABELS = {(kind, order): f"{name} {order}" for kind, name in KINDS.items()
          for order in (("greedy", "random") if kind in GATED else ("random",))}


def curves_to_run(args):
    """``(kind, order, seed)`` of every curve GR Figure 5 draws for one net
    of each kind."""
    runs = [(kind, "greedy", 0) for kind in GATED]
    for seed in range(args.random_orders):
        runs += [(kind, "random", seed) for kind in KINDS]
    return runs


def _runs(text):
    pairs = [p.partition("=") for p in text.split(",") if p]
    if not pairs or any(k not in KINDS or not sep or not path for k, sep, path in pairs):
        raise argparse.ArgumentTypeError(
            f"expected KIND=PATH pairs, KIND one of {', '.join(KINDS)} (e.g. "
            f"gresnet=PATH,resnet=PATH), got {text!r}")
    return {k: path for k, _, path in pairs}


def _seeds(text):
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(
            f"expected distinct training seeds >= 0 such as 0,1,2, got {text!r}")
    return seeds


def folders_of(args, results):
    """``{(kind, train_seed): run folder}``."""
    if args.runs is None:
        return {(kind, s): run_folder(results, kind, args.depth, s)
                for kind in ("gresnet", "resnet") for s in args.seeds}
    return {(kind, s): results / path.format(seed=s)
            for kind, path in args.runs.items() for s in args.seeds}


def read_rows(table):
    """The finished curve points of ``pruning.csv`` (``[]`` without one)."""
    if not table.exists():
        return []
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:  # written before train_seed existed: the seed-0 nets
        row["train_seed"] = row.get("train_seed") or "0"
    return rows


def net_curves(rows):
    """``{(kind, order): {train_seed: {removed: accuracy}}}``: each net's
    curve, random orders averaged."""
    points = {}
    for r in rows:
        key = (r["model"], r["order"])
        net = points.setdefault(key, {}).setdefault(int(r["train_seed"]), {})
        net.setdefault(int(r["removed"]), []).append(float(r["accuracy"]))
    return {key: {s: {c: statistics.fmean(a) for c, a in net.items()}
                  for s, net in nets.items()} for key, nets in points.items()}


def _values(values, scale=100):
    """``"m"`` for one net, ``"m (a, b, ...)"`` for more (each net's, by seed)."""
    shown = [f"{scale * v:.2f}" for v in values]
    mean = f"{scale * statistics.fmean(values):.2f}"
    return mean if len(values) == 1 else f"{mean} ({', '.join(shown)})"


def _gap_line(what, a, b):
    """One difference of mean accuracies, with Welch's 95% interval over the nets."""
    if len(a) < 2 or len(b) < 2:
        return f"{what}: no interval (it takes two nets of each)."
    gap = welch_interval(a, b)
    if gap is None:  # no spread on either side: the difference is exact
        return (f"{what}: {100 * (statistics.fmean(a) - statistics.fmean(b)):+.2f} points, "
                f"every net of a side at the same accuracy (no interval needed).")
    return (f"{what}: {100 * gap[0]:+.2f} points, Welch 95% interval "
            f"[{100 * gap[1]:+.2f}, {100 * gap[2]:+.2f}] over the nets.")


def _paired_line(what, a, b):
    """The same difference taken net by net (greedy and random orders are two
    measures of the same nets), with Student's paired 95% interval."""
    paired = paired_interval(a, b) if len(a) == len(b) else None
    if paired is None:
        return f"{what}: no interval (it takes two nets measured both ways)."
    return (f"{what}: {100 * paired[0]:+.2f} points, paired 95% interval "
            f"[{100 * paired[1]:+.2f}, {100 * paired[2]:+.2f}] over the nets "
            f"(each net's difference: {', '.join(f'{100 * (x - y):+.2f}' for x, y in zip(a, b))}).")


def table_lines(curves, seeds):
    """The Markdown rows of ``pruning.md``: per curve, the nets' accuracy with
    nothing, the fewest, half and every block removed; then GR's three
    comparisons as differences with Welch intervals: greedy against random on
    the GResNet (also paired net by net: both orders prune the same nets), and
    the GResNet's random curve against the ResNet's at half the blocks and
    with every block removed (the stem and head alone)."""
    lines = ["| curve | nets (training seeds) | nothing removed | kept after the fewest "
             "| blocks removed | accuracy | kept | every block removed |",
             "|---|---|---|---|---|---|---|---|"]
    halves, everys, kept_at_half = {}, {}, {}
    for key in sorted(curves, key=lambda k: LABELS[k]):
        nets = {s: c for s, c in curves[key].items() if s in seeds}
        if not nets:
            continue
        total = min(max(c) for c in nets.values())
        half = min(min(c, key=lambda n: abs(n - total / 2)) for c in nets.values())
        fewest = min(min(n for n in c if n > 0) for c in nets.values())
        order = sorted(nets)
        full = [nets[s][0] for s in order]
        at_fewest = [nets[s][fewest] / f for s, f in zip(order, full)]
        at_half = [nets[s][half] for s in order]
        every = [nets[s][total] for s in order]
        kept = [a / f for a, f in zip(at_half, full)]
        halves[key], everys[key], kept_at_half[key] = at_half, every, kept
        lines.append(f"| {LABELS[key]} | {len(order)} ({', '.join(map(str, order))}) | "
                     f"{_values(full)}% | {_values(at_fewest)}% ({fewest} of {total}) | "
                     f"{half} of {total} | {_values(at_half)}% | "
                     f"{_values(kept, 100)}% | {_values(every)}% |")
    lines.append("")
    for kind in GATED:
        if kind != "gresnet" and (kind, "greedy") not in halves:
            continue
        greedy, random = halves.get((kind, "greedy"), []), halves.get((kind, "random"), [])
        what = f"{KINDS[kind]} greedy - {KINDS[kind]} random at half the blocks removed"
        lines += ["- " + _gap_line(what, greedy, random),
                  "- " + _paired_line(what + ", paired on each net", greedy, random)]
    lines += [
        "- " + _gap_line("GResNet random - ResNet random with every block removed",
                         *(everys.get((k, "random"), []) for k in ("gresnet", "resnet"))),
        "- " + _gap_line("GResNet random - ResNet random at half the blocks removed",
                         *(halves.get((k, "random"), []) for k in ("gresnet", "resnet"))),
    ]
    if any(key[0] == "gresnet_k_decay" for key in halves):
        # GR: "regularizing k results in enforcing identity mappings": if it
        # does, removing blocks of the k-decay nets costs less.
        for order in ("greedy", "random"):
            lines.append("- " + _gap_line(
                f"GResNet + k decay {order} - GResNet {order} at half the blocks removed "
                f"(the share of each net's own accuracy kept)",
                *(kept_at_half.get((k, order), []) for k in ("gresnet_k_decay", "gresnet"))))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="zoo/results/fashion_mnist",
                        help="the --out folder of reproduce_gr_mnist.py")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--seeds", type=_seeds, default=[0],
                        help="the training seeds of the nets, e.g. 0,1,2 (default 0)")
    parser.add_argument("--random-orders", type=int, default=3)
    parser.add_argument("--step", type=int, default=1, help="remove blocks in steps of this")
    parser.add_argument("--runs", type=_runs, default=None,
                        help="the run folders, relative to --results, {seed} standing for "
                        "each of --seeds: gresnet=PATH,resnet=PATH, and gresnet_k_decay=PATH "
                        "(default: the --depth MLP runs)")
    args = parser.parse_args(argv)
    if args.runs and len(args.seeds) > 1 and not all("{seed}" in p for p in args.runs.values()):
        parser.error("--runs: with several --seeds every PATH needs {seed}, e.g. "
                     "runs/gresnet-seed{seed}")
    results = Path(args.results)
    table = results / "pruning.csv"
    rows = read_rows(table)
    done = {(r["model"], int(r["train_seed"]), r["order"], int(r["seed"])) for r in rows}

    folders = folders_of(args, results)
    finished = {net for net, folder in folders.items()
                if "test_accuracy" in (training.read_results(folder) or {})}
    for net in sorted(set(folders) - finished):
        print(f"{net[0]} seed {net[1]}: {folders[net]} has not finished; its curves are "
              f"left out", flush=True)
    for kind, train_seed in sorted(finished):
        todo = [(o, s) for k, o, s in curves_to_run(args)
                if k == kind and (kind, train_seed, o, s) not in done]
        if not todo:
            continue
        model, config = training.load_run(folders[kind, train_seed])
        test, _, _ = training.test_data(config)
        blocks = len([b for b in analysis.residual_blocks(model) if b.removable])
        counts = sorted(set(range(0, blocks + 1, args.step)) | {blocks // 2, blocks})
        for order, seed in todo:
            print(f"{LABELS[kind, order]}, net of seed {train_seed}, order {seed}: "
                  f"{len(counts)} points", flush=True)
            curve = analysis.pruning_curve(model, test, order=order, seed=seed, counts=counts)
            rows += [dict(model=kind, train_seed=train_seed, order=order, seed=seed,
                          removed=c, accuracy=a)
                     for c, a in zip(curve["removed"], curve["accuracy"])]
            files.write_csv(table, COLUMNS, [[r[c] for c in COLUMNS] for r in rows])

    curves = net_curves(rows)
    plotted = {}
    for key, nets in curves.items():
        nets = [n for s, n in nets.items() if s in args.seeds]
        if nets:
            counts = sorted(set.intersection(*(set(n) for n in nets)))
            plotted[LABELS[key]] = (counts, [statistics.fmean(n[c] for n in nets)
                                             for c in counts])
    nets = "the conv nets" if args.runs else f"the d={args.depth} nets"
    plots.plot_pruning_curves(dict(sorted(plotted.items())), results / "pruning.png",
                              title=f"GR Fig. 5 on {results.name}: {nets}, mean over "
                                    f"seeds {', '.join(map(str, args.seeds))}")
    lines = [
        f"# GR Figure 5 on {results.name}: removing blocks of {nets}",
        "",
        "No retraining. Accuracy (%) on the test set; random orders: mean of "
        f"{args.random_orders} seeded orders per net; several nets: their mean, then each "
        "net's value by training seed. Command:",
        "",
        "```",
        "python scripts/reproduce/reproduce_gr_pruning.py " + " ".join(sys.argv[1:] if argv is None
                                                              else argv),
        "```",
        "",
        *table_lines(curves, args.seeds),
    ]
    files.write_text(results / "pruning.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
