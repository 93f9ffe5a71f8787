"""GR Table 3's question (n=5: original pre-activation ResNet against
GResNet, and GResNet with weight decay on k) on real images of the MNIST
family, with GR's CIFAR recipe at that data's length (``preact_mnist``).

    KERAS_BACKEND=torch python scripts/reproduce/reproduce_gr_conv.py      # Fashion-MNIST
    python scripts/reproduce/reproduce_gr_conv.py --no-train                 # tables only

The runs, in this order: seed 0 of the ResNet and the GResNet (published as
``weights="fashion_mnist"``), seeds 1 and 2 of both, then the GResNet with
``k_decay`` (GR's third column) at seeds 0, 1 and 2. ``--runs`` picks some of them
(``resnet-seed0,gresnet-seed0``), so that two processes can train two runs
side by side (one torch thread each: ``OMP_NUM_THREADS=1``).

Resumable (``scripts/reproduce/reproduce.py``): a finished run is not retrained, an
unfinished one resumes from its last epoch; the table is written from the
finished runs only. Writes to ``--out`` (default
``zoo/results/{dataset}_conv``): ``runs/{name}/`` (one run folder each) and
``table.md`` (per-seed test errors, mean ± std, Welch's t, GR's CIFAR-10
numbers beside: another dataset than GR's), and for each finished GResNet
``gates-{name}.md`` / ``.png``: g(k) per block, the blocks whose shortcut
changes dimension marked (GR Figure 7's reading). Block removal (GR's
pruning): ``scripts/reproduce/reproduce_gr_pruning.py --runs``.
"""

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_gresnet import analysis, files, plots, training  # noqa: E402
from keras_gresnet.papers import GR_CIFAR10_N5_ERROR  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reproduce import add_run_options, summary, train_run, welch, welch_interval  # noqa: E402

# name -> (builder, recipe overrides): GR Table 3's three columns at n=5
NETS = {
    "resnet": ("resnet_cifar", {}),
    "gresnet": ("gresnet_cifar", {}),
    "gresnet_k_decay": ("gresnet_cifar", {"k_decay": True}),
}
LABELS = {"resnet": "ResNet n=5 (original)", "gresnet": "GResNet n=5 (gated)",
          "gresnet_k_decay": "GResNet n=5 + k decay"}
SHORT = {"resnet": "ResNet", "gresnet": "GResNet", "gresnet_k_decay": "GResNet + k decay"}
# The gaps the table tests, first minus second: GR's two claims of Table 3
# (gating helps; "k decay hurts performance") and k decay against ResNet.
GAPS = [("resnet", "gresnet"), ("gresnet_k_decay", "gresnet"), ("resnet", "gresnet_k_decay")]
PLAN = [("resnet", 0), ("gresnet", 0), ("resnet", 1), ("gresnet", 1), ("resnet", 2),
        ("gresnet", 2), ("gresnet_k_decay", 0), ("gresnet_k_decay", 1), ("gresnet_k_decay", 2)]


def run_name(net, seed):
    return f"{net}-seed{seed}"


def train_all(args):
    for net, seed in args.runs:
        builder, overrides = NETS[net]
        if args.epochs:
            overrides = {**overrides, "epochs": args.epochs}
        train_run(args.out / "runs" / run_name(net, seed), builder,
                  model_kwargs=dict(n=5), seed=seed, dataset=args.dataset,
                  data_dir=args.data_dir, max_train_examples=args.max_train_examples,
                  max_test_examples=args.max_test_examples, **overrides)


def collect(args):
    """``{(net, seed): results}`` of the finished runs, in the plan's order
    (each ``results.json`` read once)."""
    finished = {}
    for net, seed in PLAN:
        results = training.read_results(args.out / "runs" / run_name(net, seed))
        if results and "test_error_percent" in results:
            finished[net, seed] = results
    return finished


def errors_of(finished):
    """``{net: {seed: test error %}}``."""
    errors = {}
    for (net, seed), results in finished.items():
        errors.setdefault(net, {})[seed] = results["test_error_percent"]
    return errors


def test_set(args):
    return (f"a seeded {args.max_test_examples}-image test subset (a smoke run)"
            if args.max_test_examples else "full 10k test set")


def write_table(args, finished):
    errors = errors_of(finished)
    lines = [
        f"# GR Table 3's n=5 question on {args.dataset} (not CIFAR-10): test error %",
        "",
        f"Recipe `preact_mnist` ({args.epochs or training.get_recipe('preact_mnist').epochs} "
        f"epochs), {test_set(args)}; '-': not finished yet. GR's numbers are CIFAR-10's "
        f"(GR Table 3), another dataset: compare the gaps, not the errors. Command:",
        "",
        "```",
        " ".join(["python scripts/reproduce/reproduce_gr_conv.py",
                  *table_arguments(sys.argv[1:])]).strip(),
        "```",
        "",
        "| net | seed 0 | seed 1 | seed 2 | mean ± std | GR (CIFAR-10) |",
        "|---|---|---|---|---|---|",
    ]
    for net in NETS:
        seeds = errors.get(net, {})
        cells = [f"{seeds[s]:.2f}" if s in seeds else "-" for s in range(3)]
        lines.append(f"| {LABELS[net]} | {' | '.join(cells)} | {summary(list(seeds.values()))} "
                     f"| {GR_CIFAR10_N5_ERROR[net]} |")
    lines.append("")
    for first, second in GAPS:
        a, b = list(errors.get(first, {}).values()), list(errors.get(second, {}).values())
        test = welch(a, b)
        name = f"{SHORT[first]} - {SHORT[second]}"
        if test:
            gap, low, high = welch_interval(a, b)
            lines.append(f"{name}: {gap:+.2f} points, 95% Welch interval "
                         f"[{low:+.2f}, {high:+.2f}] (n = {len(a)} and {len(b)}; GR, CIFAR-10: "
                         f"{GR_CIFAR10_N5_ERROR[first] - GR_CIFAR10_N5_ERROR[second]:+.2f}); "
                         f"Welch's t = {test[0]:.2f} on {test[1]:.1f} degrees of freedom.")
        else:
            lines.append(f"{name}: Welch's t needs at least 2 finished seeds of each net.")
        lines.append("")
    lines += gate_lines(finished)
    files.write_text(args.out / "table.md", "\n".join(lines).rstrip("\n") + "\n")
    print("\n".join(lines))


def table_arguments(argv):
    """The command line's arguments that change the table (not ``--runs``,
    which only picks what this call trains, nor ``--no-train``)."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--runs":
            skip = True
        elif a != "--no-train" and not a.startswith("--runs="):
            kept.append(a)
    return kept


def gate_lines(finished):
    """The gates of every finished gated run (``collect``), from its
    ``results.json`` (g(k) per block): their mean, smallest and largest, and how many are
    closed (g(k) = 0: the block is an identity), per net and seed; what k
    decay does to them (GR: "regularizing k results in enforcing identity
    mappings")."""
    lines = ["| net | seed | mean g(k) | smallest | largest | closed (g(k) = 0) |",
             "|---|---|---|---|---|---|"]
    for (net, seed), results in finished.items():
        gates = list((results.get("gates") or {}).values())
        if not gates:
            continue
        lines.append(f"| {LABELS[net]} | {seed} | {sum(gates) / len(gates):.3f} | "
                     f"{min(gates):.3f} | {max(gates):.3f} | "
                     f"{sum(g == 0 for g in gates)} of {len(gates)} |")
    if len(lines) == 2:
        return []
    return ["g(k) of the gated blocks of each finished gated run (`results.json`):", "",
            *lines]


def write_gates(args, finished):
    """g(k) per block of every finished gated run, as a table and a bar plot
    (GR Figure 7: the lowest gates at the blocks whose shortcut changes
    dimension, the highest at the last block), and ``gates-{net}-seeds.png``
    with every finished seed of a net where there are two or more."""
    seeds = {}  # net -> {seed: (gate values, blocks whose shortcut changes dimension)}
    for net, seed in finished:
        folder = args.out / "runs" / run_name(net, seed)
        if not NETS[net][0].startswith("gresnet"):
            continue
        model, _ = training.load_run(folder)
        changes = {b.name for b in analysis.residual_blocks(model) if not b.removable}
        values = analysis.gate_values(model)
        name = run_name(net, seed)
        plots.plot_k_per_block(
            [v["block"] for v in values], [v["g"] for v in values],
            args.out / f"gates-{name}.png",
            title=f"{LABELS[net]}, seed {seed}, {args.dataset}: g(k) per block",
            highlight=[i for i, v in enumerate(values) if v["block"] in changes],
            highlight_label="shortcut changes dimension", ylabel="g(k)")
        ranked = sorted(values, key=lambda v: v["g"])
        lines = [f"# g(k) per block: {LABELS[net]}, seed {seed}, {args.dataset}", "",
                 f"From `runs/{name}` (`keras-gresnet gates runs/{name}` prints the same). "
                 f"Rank 1: the lowest g(k).", "",
                 "| block | k | g(k) | rank | shortcut changes dimension |", "|---|---|---|---|---|"]
        for v in values:
            lines.append(f"| {v['block']} | {v['k']:.4f} | {v['g']:.4f} | "
                         f"{ranked.index(v) + 1} | {'yes' if v['block'] in changes else ''} |")
        files.write_text(args.out / f"gates-{name}.md", "\n".join(lines) + "\n")
        seeds.setdefault(net, {})[seed] = (values, changes)
    for net, runs in seeds.items():
        if len(runs) < 2:
            continue
        values, changes = next(iter(runs.values()))
        blocks = [v["block"] for v in values]
        plots.plot_k_per_block(
            blocks, {f"seed {seed}": [v["g"] for v in vs] for seed, (vs, _) in runs.items()},
            args.out / f"gates-{net}-seeds.png",
            title=f"{LABELS[net]}, {args.dataset}: g(k) per block, {len(runs)} seeds",
            highlight=[i for i, b in enumerate(blocks) if b in changes],
            highlight_label="shortcut changes dimension", ylabel="g(k)")


def _runs(text):
    chosen = [r for r in text.split(",") if r]
    known = {run_name(net, seed): (net, seed) for net, seed in PLAN}
    unknown = [r for r in chosen if r not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; accepted: {', '.join(known)}")
    return [known[r] for r in chosen]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fashion_mnist", choices=("fashion_mnist", "mnist"))
    parser.add_argument("--runs", type=_runs, default=list(PLAN),
                        help="comma-separated, in order (default: all, in the plan's order)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="override preact_mnist's 40 (smoke runs only)")
    add_run_options(parser, "table")
    args = parser.parse_args(argv)
    args.out = Path(args.out or f"zoo/results/{args.dataset}_conv")
    if not args.no_train:
        train_all(args)
    finished = collect(args)
    write_table(args, finished)
    write_gates(args, finished)


if __name__ == "__main__":
    main()
