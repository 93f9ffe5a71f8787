"""GR Tables 1-2 and Figure 4: plain, ResNet and GResNet MLPs at each depth
with GR's MNIST recipe; test error per depth and model, mean k per depth.

    python scripts/reproduce_gr_mnist.py --dataset fashion_mnist \\
        --depths 2,10,20,50,100 --epochs 20 --seeds 1 --out zoo/results/fashion_mnist

Resumable: a finished run (its results.json exists) is not retrained, an
unfinished one resumes. Writes to ``--out``: ``runs/{kind}_mlp{depth}-seed{s}/``
(one run folder each), ``results.csv``, ``table.md`` (GR's layout, with GR's
MNIST numbers beside ours), ``mean_k_vs_depth.png``, ``training_curves.png``
and ``k_per_block_d{depth}.png``. On a GPU machine use the full protocol:
``--dataset mnist --epochs 100 --seeds 5``.
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_gresnet import _io, plots, training  # noqa: E402

KINDS = ("plain", "resnet", "gresnet")
LABELS = {"plain": "plain", "resnet": "ResNet", "gresnet": "GResNet"}
# GR Table 1 (MNIST test error %) and Table 2 (mean k of the GResNet).
GR_ERROR = {
    2: (2.29, 2.20, 2.17), 10: (2.22, 1.64, 1.60), 20: (2.21, 1.61, 1.57),
    50: (60.37, 1.62, 1.48), 100: (90.20, 1.50, 1.26),
}
GR_MEAN_K = {2: 5.58, 10: 2.54, 20: 1.73, 50: 1.04, 100: 0.67}


def run_folder(out, kind, depth, seed):
    return Path(out) / "runs" / f"{kind}_mlp{depth}-seed{seed}"


def train_all(args):
    for seed in range(args.seeds):
        for depth in args.depths:
            for kind in args.kinds:
                folder = run_folder(args.out, kind, depth, seed)
                if (folder / "results.json").exists():
                    print(f"done already: {folder}", flush=True)
                    continue
                print(f"training {kind}_mlp depth={depth} seed={seed} -> {folder}", flush=True)
                try:
                    training.train(f"{kind}_mlp", model_kwargs=dict(depth=depth),
                                   dataset=args.dataset, data_dir=args.data_dir,
                                   epochs=args.epochs, seed=seed, out=folder, verbose=2,
                                   max_train_examples=args.max_train_examples)
                except training.TrainingDiverged as error:  # a result too (GR's plain d=100)
                    print(f"diverged: {error}", flush=True)
                    _io.write_json(folder / "results.json", dict(diverged=str(error)))


def collect(args):
    rows = []
    for seed in range(args.seeds):
        for depth in args.depths:
            for kind in args.kinds:
                folder = run_folder(args.out, kind, depth, seed)
                results = json.loads((folder / "results.json").read_text())
                gates = list(results.get("gates", {}).values())
                rows.append(dict(
                    kind=kind, depth=depth, seed=seed,
                    epochs=results.get("epochs", ""),
                    test_error=results.get("test_error_percent", float("nan")),
                    mean_k=statistics.fmean(gates) if gates else "",
                    params=results.get("params", ""),
                    folder=str(folder.relative_to(args.out)),
                ))
    columns = list(rows[0])
    _io.write_csv(Path(args.out) / "results.csv", columns, [[r[c] for c in columns] for r in rows])
    return rows


def _summary(values):
    values = [v for v in values if v != ""]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def write_table(args, rows):
    def pick(kind, depth, key):
        return [r[key] for r in rows if r["kind"] == kind and r["depth"] == depth]

    lines = [
        f"# GR Tables 1-2 on {args.dataset}: test error % (ours) and GR's MNIST numbers",
        "",
        f"{args.epochs} epochs per model, {args.seeds} seed(s) (mean ± std over seeds "
        f"where more than one); GR: MNIST, 100 epochs. Command:",
        "",
        "```",
        "python scripts/reproduce_gr_mnist.py " + " ".join(sys.argv[1:]),
        "```",
        "",
        "| d | plain | ResNet | GResNet | mean k (GResNet) | GR plain | GR ResNet | GR GResNet | GR mean k |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for depth in args.depths:
        ours = [_summary(pick(kind, depth, "test_error")) for kind in KINDS]
        mean_k = _summary(pick("gresnet", depth, "mean_k"))
        gr = GR_ERROR.get(depth, ("-",) * 3)
        lines.append(f"| {depth} | {' | '.join(ours)} | {mean_k} | "
                     f"{' | '.join(map(str, gr))} | {GR_MEAN_K.get(depth, '-')} |")
    _io.write_text(Path(args.out) / "table.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def write_plots(args, rows):
    out = Path(args.out)
    gated = [r for r in rows if r["kind"] == "gresnet" and r["mean_k"] != ""]
    depths = sorted({r["depth"] for r in gated})
    if depths:
        mean_ks = [statistics.fmean(r["mean_k"] for r in gated if r["depth"] == d) for d in depths]
        reference = {"GR (MNIST)": (sorted(GR_MEAN_K), [GR_MEAN_K[d] for d in sorted(GR_MEAN_K)])}
        plots.plot_mean_k_vs_depth(depths, mean_ks, out / "mean_k_vs_depth.png",
                                   reference=reference)
    runs = {}
    for depth in args.depths:
        runs[depth] = {
            LABELS[kind]: plots.read_history(run_folder(out, kind, depth, 0) / "history.csv")
            for kind in args.kinds
            if (run_folder(out, kind, depth, 0) / "history.csv").exists()
        }
    plots.plot_training_curves_grid(runs, out / "training_curves.png")
    deepest = max(args.depths)
    gates_csv = run_folder(out, "gresnet", deepest, 0) / "gates.csv"
    if gates_csv.exists():
        last = [g for g in plots.read_gates(gates_csv)]
        final_epoch = max(g["epoch"] for g in last)
        final = [g for g in last if g["epoch"] == final_epoch]
        plots.plot_k_per_block([g["block"].replace("_gate", "") for g in final],
                               [g["k"] for g in final], out / f"k_per_block_d{deepest}.png",
                               title=f"GResNet d={deepest} on {args.dataset}: final k per block")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=("mnist", "fashion_mnist"))
    parser.add_argument("--depths", default="2,10,20,50,100",
                        type=lambda s: [int(d) for d in s.split(",")])
    parser.add_argument("--kinds", default=",".join(KINDS),
                        type=lambda s: [k for k in s.split(",")])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=1, help="number of seeds: 0..S-1")
    parser.add_argument("--data-dir")
    parser.add_argument("--max-train-examples", type=int,
                        help="a seeded subset of the training set (smoke runs)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--no-train", action="store_true",
                        help="only collect finished runs into the tables and plots")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown --kinds {unknown}; accepted: {','.join(KINDS)}")
    args.out = Path(args.out or f"zoo/results/{args.dataset}")
    if not args.no_train:
        train_all(args)
    rows = collect(args)
    write_table(args, rows)
    write_plots(args, rows)


if __name__ == "__main__":
    main()
