"""GR Tables 1-2 and Figure 4: plain, ResNet and GResNet MLPs at each depth
with GR's MNIST recipe; test error per depth and model, mean k per depth.

    python scripts/reproduce/reproduce_gr_mnist.py      # GR's protocol on real MNIST
    python scripts/reproduce/reproduce_gr_mnist.py --dataset fashion_mnist --epochs 20 \\
        --seeds 1 --out zoo/results/fashion_mnist

The runs, in this order: seed 0 of every kind at every depth, the gated plain
net at ``--gated-plain-depths``, then seeds 1 .. ``--seeds``-1 of the ResNet
and GResNet at each of ``--seed-depths`` in turn (GR's 100, then 50).
``--runs`` trains only some of them (``resnet_mlp100-seed2``), so that two
processes can train two runs at once (a net this narrow keeps about one core
busy); the tables are still written from every finished run.

Resumable: a finished run is not retrained (a diverged one counts as
finished), an unfinished one resumes; the tables are written from the
finished runs only, so they can be made while runs go on (``--no-train``).
Writes to ``--out``:
``runs/{kind}_mlp{depth}-seed{s}/`` (one run folder each), ``results.csv``,
``table.md`` (GR's layout, with GR's MNIST numbers beside ours),
``mean_k_vs_depth.png``, ``training_curves.png`` and ``k_per_block_d{depth}.png``.
"""

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_gresnet import files, plots, training  # noqa: E402
from keras_gresnet.papers import GR_MNIST_ERROR, GR_MNIST_MEAN_K  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reproduce import add_run_options, summary, train_run, welch_interval  # noqa: E402

KINDS = ("plain", "resnet", "gresnet")
LABELS = {"plain": "plain", "resnet": "ResNet", "gresnet": "GResNet",
          "gated_plain": "gated plain"}


def run_folder(out, kind, depth, seed):
    return Path(out) / "runs" / f"{kind}_mlp{depth}-seed{seed}"


def plan(args):
    """``[(kind, depth, seed)]`` in the order they are trained."""
    runs = [(kind, depth, 0) for depth in args.depths for kind in args.kinds]
    runs += [("gated_plain", depth, 0) for depth in args.gated_plain_depths]
    for depth in args.seed_depths:
        runs += [(kind, depth, seed) for seed in range(1, args.seeds)
                 for kind in ("resnet", "gresnet")]
    return list(dict.fromkeys(runs))


def run_name(kind, depth, seed):
    return run_folder("", kind, depth, seed).name


def train_all(args):
    # The recipe's optimizer unless asked (the Fashion-MNIST tables: Keras 3's "nadam").
    overrides = {"optimizer_name": args.optimizer_name} if args.optimizer_name else {}
    for kind, depth, seed in plan(args):
        if args.runs is not None and run_name(kind, depth, seed) not in args.runs:
            continue
        train_run(run_folder(args.out, kind, depth, seed), f"{kind}_mlp",
                  model_kwargs=dict(depth=depth), seed=seed, dataset=args.dataset,
                  data_dir=args.data_dir, epochs=args.epochs,
                  max_train_examples=args.max_train_examples,
                  max_test_examples=args.max_test_examples, **overrides)


def final_ks(folder):
    """The raw ``k`` of every gate after the run's last epoch (gates.csv), in
    network order: GR's Table 2 averages k, and ``results.json`` holds g(k)."""
    gates = training.read_gates(folder)
    last = max(g["epoch"] for g in gates)
    return [g["k"] for g in sorted((g for g in gates if g["epoch"] == last),
                                   key=lambda g: g["index"])]


def collect(args):
    rows = []
    for kind, depth, seed in plan(args):
        folder = run_folder(args.out, kind, depth, seed)
        results = training.read_results(folder)
        if results is None:
            continue  # not trained yet
        gates = list(results.get("gates", {}).values())  # g(k) = ReLU(k)
        ks = final_ks(folder) if gates else []
        rows.append(dict(
            kind=kind, depth=depth, seed=seed,
            epochs=results.get("epochs", ""),
            test_error=results.get("test_error_percent", float("nan")),
            mean_g=statistics.fmean(gates) if gates else "",
            mean_k=statistics.fmean(ks) if ks else "",
            params=results.get("params", ""),
            folder=str(folder.relative_to(args.out)),
        ))
    columns = ["kind", "depth", "seed", "epochs", "test_error", "mean_g", "mean_k", "params",
               "folder"]
    files.write_csv(Path(args.out) / "results.csv", columns,
                    [[r[c] for c in columns] for r in rows])
    return rows


def write_table(args, rows):
    def pick(kind, depth, key):
        return [r[key] for r in rows if r["kind"] == kind and r["depth"] == depth]

    lines = [
        f"# GR Tables 1-2 on {args.dataset}: test error % (ours) and GR's MNIST numbers",
        "",
        f"{args.epochs} epochs per model; seed 0, or mean ± std over the n seeds "
        f"where more than one finished; '-': not trained yet. GR: MNIST, 100 epochs. "
        f"Optimizer: {args.optimizer_name or training.get_recipe('gr_mnist').optimizer_name}. "
        f"Command:",
        "",
        "```",
        # The command that trains them (--no-train only collects).
        " ".join(["python scripts/reproduce/reproduce_gr_mnist.py",
                  *(a for a in sys.argv[1:] if a != "--no-train")]).strip(),
        "```",
        "",
        "| d | plain | ResNet | GResNet | gated plain | mean g(k) (GResNet) | mean k (GResNet) | GR plain | GR ResNet | GR GResNet | GR mean k |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for depth in args.depths:
        ours = [summary(pick(kind, depth, "test_error")) for kind in (*KINDS, "gated_plain")]
        mean_g = summary(pick("gresnet", depth, "mean_g"))
        mean_k = summary(pick("gresnet", depth, "mean_k"))
        gr = [GR_MNIST_ERROR[depth][kind] for kind in KINDS] if depth in GR_MNIST_ERROR \
            else ("-",) * 3
        lines.append(f"| {depth} | {' | '.join(ours)} | {mean_g} | {mean_k} | "
                     f"{' | '.join(map(str, gr))} | {GR_MNIST_MEAN_K.get(depth, '-')} |")
    lines += ["", "ResNet - GResNet test error, points (mean of seeds; 95% Welch interval "
              "where both have 2 or more seeds):", ""]
    for depth in args.depths:
        interval = welch_interval(pick("resnet", depth, "test_error"),
                                  pick("gresnet", depth, "test_error"))
        gr_gap = (f"{GR_MNIST_ERROR[depth]['resnet'] - GR_MNIST_ERROR[depth]['gresnet']:+.2f}"
                  if depth in GR_MNIST_ERROR else "-")
        if interval:
            gap, low, high = interval
            lines.append(f"- d = {depth}: {gap:+.2f}, 95% interval [{low:+.2f}, {high:+.2f}] "
                         f"(n = {len(pick('resnet', depth, 'test_error'))} and "
                         f"{len(pick('gresnet', depth, 'test_error'))}); GR {gr_gap}")
        else:
            resnet, gresnet = pick("resnet", depth, "test_error"), pick("gresnet", depth,
                                                                          "test_error")
            if resnet and gresnet:
                lines.append(f"- d = {depth}: {resnet[0] - gresnet[0]:+.2f} (one seed, no "
                             f"interval); GR {gr_gap}")
    files.write_text(Path(args.out) / "table.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def write_plots(args, rows):
    out = Path(args.out)
    gated = [r for r in rows if r["kind"] == "gresnet" and r["mean_k"] != ""]
    depths = sorted({r["depth"] for r in gated})
    if depths:
        mean_ks = [statistics.fmean(r["mean_k"] for r in gated if r["depth"] == d) for d in depths]
        reference = {"GR (MNIST)": (sorted(GR_MNIST_MEAN_K), [GR_MNIST_MEAN_K[d] for d in sorted(GR_MNIST_MEAN_K)])}
        plots.plot_mean_k_vs_depth(depths, mean_ks, out / "mean_k_vs_depth.png",
                                   reference=reference)
    runs = {}
    finished = {(r["kind"], r["depth"]) for r in rows if r["seed"] == 0}
    for depth in args.depths:
        curves = {
            LABELS[kind]: training.read_history(run_folder(out, kind, depth, 0))
            for kind in args.kinds if (kind, depth) in finished
        }
        if curves:  # depths with no finished run yet are left out
            runs[depth] = curves
    if runs:
        plots.plot_training_curves_grid(runs, out / "training_curves.png")
    deepest = max(d for _, d in finished) if finished else max(args.depths)
    if ("gresnet", deepest) in finished:
        seeds = sorted(r["seed"] for r in gated if r["depth"] == deepest)
        series = {f"seed {seed}": final_ks(run_folder(out, "gresnet", deepest, seed))
                  for seed in seeds}
        blocks = [f"block{i + 1}" for i in range(len(series["seed 0"]))]
        plots.plot_k_per_block(
            blocks, series if len(series) > 1 else series["seed 0"],
            out / f"k_per_block_d{deepest}.png",
            title=f"GResNet d={deepest} on {args.dataset}: final k per block, "
                  f"{len(series)} seed{'s' if len(series) > 1 else ''}")


def _depths(text):
    return [int(d) for d in text.split(",") if d]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=("mnist", "fashion_mnist"))
    parser.add_argument("--depths", default="2,10,20,50,100", type=_depths)
    parser.add_argument("--kinds", default=",".join(KINDS),
                        type=lambda s: [k for k in s.split(",")])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=3,
                        help="seeds 0..S-1 of the ResNet and GResNet at --seed-depths")
    parser.add_argument("--seed-depths", default="100,50", type=_depths,
                        help="depths that get the extra seeds, in this order")
    parser.add_argument("--gated-plain-depths", default="50,100", type=_depths,
                        help="depths of the gated plain net (seed 0)")
    parser.add_argument("--optimizer-name",
                        help="override gr_mnist's optimizer (default keras1_nadam, GR's)")
    parser.add_argument("--runs", type=lambda s: [r for r in s.split(",") if r],
                        help="train only these runs of the plan, e.g. "
                             "resnet_mlp100-seed2,gresnet_mlp100-seed2 (default: all)")
    add_run_options(parser, "tables and plots")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown --kinds {unknown}; accepted: {','.join(KINDS)}")
    planned = [run_name(*run) for run in plan(args)]
    unknown = [r for r in args.runs or [] if r not in planned]
    if unknown:
        parser.error(f"--runs: not in the plan: {', '.join(unknown)}; accepted: "
                     f"{', '.join(planned)}")
    args.out = Path(args.out or f"zoo/results/{args.dataset}")
    if not args.no_train:
        train_all(args)
    rows = collect(args)
    write_table(args, rows)
    write_plots(args, rows)


if __name__ == "__main__":
    main()
