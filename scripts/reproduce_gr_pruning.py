"""GR Figure 5: remove residual blocks from the trained depth-d GResNet and
ResNet (no retraining) and plot test accuracy against blocks removed.

GResNet: "greedy" (smallest g(k) first) and "random" orders; ResNet: random
only (it has no gates to rank by). Random curves average ``--random-orders``
seeded orders.

    python scripts/reproduce_gr_pruning.py --results zoo/results/fashion_mnist --depth 100

Reads the run folders written by ``reproduce_gr_mnist.py``, or those
``--runs`` names (the conv nets of ``reproduce_gr_conv.py``):

    python scripts/reproduce_gr_pruning.py --results zoo/results/fashion_mnist_conv \\
        --runs gresnet=runs/gresnet-seed0,resnet=runs/resnet-seed0

Writes ``pruning.csv``, ``pruning.md`` and ``pruning.png`` in ``--results``.
Finished curves are kept in ``pruning.csv`` and not recomputed; a net whose
run has not finished is left out (its curves come when it has).
"""

import argparse
import csv
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_gresnet import analysis, files, plots, training  # noqa: E402
from reproduce_gr_mnist import run_folder  # noqa: E402  (this folder: the runs' layout)

COLUMNS = ("model", "order", "seed", "removed", "accuracy")


def curves_to_run(args):
    """``(label, kind, order, seed)`` of every curve GR Figure 5 draws."""
    runs = [("GResNet greedy", "gresnet", "greedy", 0)]
    for seed in range(args.random_orders):
        runs.append(("GResNet random", "gresnet", "random", seed))
        runs.append(("ResNet random", "resnet", "random", seed))
    return runs


def _runs(text):
    pairs = [p.partition("=") for p in text.split(",") if p]
    if not pairs or any(k not in ("gresnet", "resnet") or not sep or not path
                        for k, sep, path in pairs):
        raise argparse.ArgumentTypeError(f"expected gresnet=PATH,resnet=PATH, got {text!r}")
    return {k: Path(path) for k, _, path in pairs}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="zoo/results/fashion_mnist",
                        help="the --out folder of reproduce_gr_mnist.py")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="the training seed of the runs")
    parser.add_argument("--random-orders", type=int, default=3)
    parser.add_argument("--step", type=int, default=1, help="remove blocks in steps of this")
    parser.add_argument("--runs", type=_runs, default=None,
                        help="the run folders, relative to --results: "
                        "gresnet=PATH,resnet=PATH (default: the --depth, --seed MLP runs)")
    args = parser.parse_args(argv)
    results = Path(args.results)
    table = results / "pruning.csv"
    rows = []
    if table.exists():
        with open(table, newline="") as f:
            rows = list(csv.DictReader(f))
    done = {(r["model"], r["order"], int(r["seed"])) for r in rows}

    if args.runs:
        folders = {kind: results / path for kind, path in args.runs.items()}
    else:
        folders = {kind: run_folder(results, kind, args.depth, args.seed)
                   for kind in ("gresnet", "resnet")}
    finished = {kind for kind, folder in folders.items()
                if "test_accuracy" in (training.read_results(folder) or {})}
    for kind in sorted(set(folders) - finished):
        print(f"{kind}: {folders[kind]} has not finished; its curves are left out", flush=True)
    models = {}
    for label, kind, order, seed in curves_to_run(args):
        if (kind, order, seed) in done or kind not in finished:
            continue
        if kind not in models:
            model, config = training.load_run(folders[kind])
            test, _, _ = training.test_data(config)
            models[kind] = (model, test)
        model, test = models[kind]
        blocks = len([b for b in analysis.residual_blocks(model) if b.removable])
        counts = sorted(set(range(0, blocks + 1, args.step)) | {blocks // 2, blocks})
        print(f"{label} (seed {seed}): {len(counts)} points", flush=True)
        curve = analysis.pruning_curve(model, test, order=order, seed=seed, counts=counts)
        rows += [dict(model=kind, order=order, seed=seed, removed=c, accuracy=a)
                 for c, a in zip(curve["removed"], curve["accuracy"])]
        files.write_csv(table, COLUMNS, [[r[c] for c in COLUMNS] for r in rows])

    curves, summary = {}, []
    for label, kind, order in {(l, k, o) for l, k, o, _ in curves_to_run(args)}:
        mine = [r for r in rows if r["model"] == kind and r["order"] == order]
        if not mine:
            continue
        counts = sorted({int(r["removed"]) for r in mine})
        mean = [statistics.fmean(float(r["accuracy"]) for r in mine if int(r["removed"]) == c)
                for c in counts]
        curves[label] = (counts, mean)
        half = counts[min(range(len(counts)), key=lambda i: abs(counts[i] - counts[-1] / 2))]
        summary.append((label, mean[0], half, mean[counts.index(half)], counts[-1]))
    nets = "the conv nets" if args.runs else f"the d={args.depth} nets"
    plots.plot_pruning_curves(dict(sorted(curves.items())), results / "pruning.png",
                              title=f"GR Fig. 5 on {results.name}: {nets}")
    lines = [
        f"# GR Figure 5 on {results.name}: removing blocks of {nets}",
        "",
        "No retraining. Random orders: mean of "
        f"{args.random_orders} seeded orders. Command:",
        "",
        "```",
        "python scripts/reproduce_gr_pruning.py " + " ".join(sys.argv[1:]),
        "```",
        "",
        "| curve | accuracy, nothing removed | blocks removed | accuracy | kept |",
        "|---|---|---|---|---|",
    ]
    for label, full, half, at_half, total in sorted(summary):
        lines.append(f"| {label} | {100 * full:.2f}% | {half} of {total} | "
                     f"{100 * at_half:.2f}% | {100 * at_half / full:.1f}% |")
    files.write_text(results / "pruning.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
