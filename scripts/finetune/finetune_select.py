"""finetune()'s defaults chosen on a validation split of the training images.

How ``keras_gresnet.finetune``'s defaults (the per-net starting rate of
phase 2, ``DENSE_FULL_LR`` and ``CONV_FULL_LR``, and the others) are
checked and chosen, without a test image: for
each value of each setting in ``--grid`` (any ``finetune`` keyword), the
published net is fine-tuned on each selection seed's few images per class of
the target (``--seeds``, default 100, 101, 102: the tables of
``scripts/finetune/finetune_example.py`` use seeds 0, 1, 2) and its error measured on
a **validation split held out of the target's training images**: ``--val``
images per class drawn (seeded) from the training images that are not among
the seed's shots; the test sets are never read. The value with the lowest
mean validation error over the cells (depths, directions, shots; each the
mean over the seeds) replaces today's default where it is lower beyond noise
(Student's paired 95% interval of the differences, net by net, wholly below
0; :func:`choose`); otherwise the default stays.

Every finished net's validation error is kept in ``results.json`` (keyed by
everything that defines it), so a killed run resumes and a wider grid trains
only the new values; ``table-<setting>.md`` holds the errors and the choice::

    python scripts/finetune/finetune_select.py                          # the MLPs' full_lr
    python scripts/finetune/finetune_select.py --net gresnet_cifar --grid full_lr=0.0003,0.001,0.003
"""

import argparse
import itertools
import json
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# finetune_example: this folder; reproduce (the intervals): scripts/reproduce/.
sys.path[:0] = [str(Path(__file__).resolve().parent),
                str(Path(__file__).resolve().parents[1] / "reproduce")]
from finetune_example import (  # noqa: E402
    CLASSES, DIRECTIONS, NETS, TITLES, Data, build, new_defaults, test_error,
)
from keras_gresnet import files, finetune  # noqa: E402
from reproduce import paired_interval  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_GRIDS = {
    "gresnet_mlp": {"full_lr": [5e-3, 1e-2, 2e-2, 5e-2]},
    "gresnet_cifar": {"full_lr": [3e-4, 1e-3, 3e-3]},
}


def grid_value(text):
    """``NAME=V1,V2,...``: a finetune keyword and its values (numbers or words)."""
    name, _, values = text.partition("=")
    if not values:
        raise argparse.ArgumentTypeError(f"--grid wants NAME=V1,V2,..., got {text!r}")

    def parse(value):  # 50 -> int, 0.01 and 1e-3 -> float, adam -> str
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
        return value

    return name, [parse(v) for v in values.split(",")]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--net", choices=list(NETS), default="gresnet_mlp")
    parser.add_argument("--depths", type=int, nargs="+", default=None,
                        help="gresnet_mlp depths (default 2 20, the tables' depths)")
    parser.add_argument("--grid", type=grid_value, nargs="+", default=None,
                        help="NAME=V1,V2 per finetune setting (default: full_lr, "
                        "the net's own grid)")
    parser.add_argument("--shots", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102],
                        help="each draws its shots and validation split and seeds the "
                        "training (the tables use 0, 1, 2)")
    parser.add_argument("--val", type=int, default=200,
                        help="validation images per class, held out of the training images")
    parser.add_argument("--out", type=Path, default=None,
                        help="default zoo/results/finetune_select/<net>")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    net = NETS[args.net]
    args.sizes = args.depths or ([2, 20] if args.net == "gresnet_mlp" else list(net["sizes"]))
    args.directions = list(net["directions"])
    args.grid = dict(args.grid) if args.grid else DEFAULT_GRIDS[args.net]
    unknown = set(args.grid) - set(finetune.finetune.__kwdefaults__)
    if unknown:
        parser.error(f"--grid: {sorted(unknown)} are not finetune() keywords")
    args.out = args.out or ROOT / "zoo" / "results" / "finetune_select" / args.net
    return args


def validation_split(sets, target, shots, seed, per_class):
    """``per_class`` training images of each class that are not among the
    seed's ``shots`` (:meth:`Data.shot_index`), seeded."""
    images, labels = sets(target, "train")
    taken = sets.shot_index(target, shots, seed)
    free = np.ones(len(labels), bool)
    free[taken] = False
    rng = np.random.default_rng([seed, shots])
    index = np.concatenate([rng.choice(np.flatnonzero(free & (labels == c)), per_class,
                                       replace=False) for c in range(CLASSES)])
    assert not np.isin(index, taken).any()
    return images[index], labels[index]


def current_defaults(net, names):
    """finetune()'s defaults today for the settings ``names`` (``full_lr``:
    the net kind's, :func:`keras_gresnet.finetune.default_full_lr`), as a
    point's JSON."""
    defaults = {**finetune.finetune.__kwdefaults__, **new_defaults(net)}
    return json.dumps({name: defaults[name] for name in names}, sort_keys=True)


def choose(errors, means, default):
    """The point to make the default, and why: today's default unless the
    point of lowest mean validation error beats it beyond noise (Student's
    paired 95% interval of the differences, net by net over every cell and
    seed, wholly below 0). Differences of a few tenths of a point between
    settings are within what another seed's images move, and a default
    should not change on them."""
    def units(point):
        return [e for cell in errors[point].values() for e in cell]

    gaps = {}
    if default in errors:
        for point in errors:
            if point != default:
                gaps[point] = paired_interval(units(point), units(default))
    lowest = min(means, key=means.get)
    if default not in errors:
        return lowest, dict(gaps=gaps, why="lowest mean; today's default not in the grid")
    if lowest == default:
        return default, dict(gaps=gaps, why="today's default, the lowest mean")
    gap = gaps[lowest]
    if gap is not None and gap[2] < 0:
        return lowest, dict(gaps=gaps, why=f"lower than today's default {default} beyond "
                            f"noise: paired 95% interval wholly below 0")
    return default, dict(gaps=gaps, why=f"today's default kept: the lowest mean, {lowest}, "
                         f"is not lower beyond noise (its paired 95% interval holds 0)")


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    tf.config.experimental.enable_op_determinism()
    sets = Data(args.data_dir, raw=NETS[args.net]["raw"])
    path = args.out / "results.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    args.out.mkdir(parents=True, exist_ok=True)
    names = sorted(args.grid)
    points = [dict(zip(names, values)) for values in itertools.product(
        *(args.grid[name] for name in names))]
    errors, trained = {}, 0
    for size in args.sizes:
        for direction in args.directions:
            source, target = DIRECTIONS[direction]
            pretrained = None
            for shots, seed in itertools.product(args.shots, args.seeds):
                x, y = sets.shots(target, shots, seed)
                val = validation_split(sets, target, shots, seed, args.val)
                for point in points:
                    key = json.dumps(dict(net=args.net, size=size, direction=direction,
                                          shots=shots, seed=seed, val=args.val,
                                          settings=point), sort_keys=True)
                    if key not in results:
                        if pretrained is None:
                            pretrained = build(args.net, size,
                                               weights=f"{args.net}{size}_{source}")
                        began = time.perf_counter()
                        keras.utils.set_random_seed(seed)
                        model, _ = finetune.finetune(pretrained, (x, y), classes=CLASSES,
                                                     verbose=0, **point)
                        results[key] = test_error(model, *val)
                        keras.backend.clear_session(free_memory=False)
                        files.write_json(path, results)  # resumable after every net
                        trained += 1
                        print(f"{args.net}{size} {direction} {shots} shots seed {seed} "
                              f"{point}: "
                              f"validation error {100 * results[key]:.2f}% "
                              f"({time.perf_counter() - began:.0f} s)", flush=True)
                    errors.setdefault(json.dumps(point, sort_keys=True), {}).setdefault(
                        (size, direction, shots), []).append(results[key])
    cells = list(next(iter(errors.values())))
    means = {point: np.mean([np.mean(e) for e in cell.values()])
             for point, cell in errors.items()}
    best, rule = choose(errors, means, current_defaults(args.net, names))
    header = " | ".join(f"{args.net}{s} {TITLES[DIRECTIONS[d][0]]} -> "
                        f"{TITLES[DIRECTIONS[d][1]]}, {n} shots" for s, d, n in cells)
    lines = [
        f"Validation error (%), mean over seeds {', '.join(map(str, args.seeds))}: "
        f"{args.val} training images per class of the target that are not among the "
        f"seed's shots (no test image read); mean: over the cells.", "",
        f"| setting | {header} | mean | - today's default, paired 95% interval |",
        "|---" * (len(cells) + 3) + "|",
    ]
    for point, cell in errors.items():
        mark = " (chosen)" if point == best else ""
        gap = rule["gaps"].get(point)
        lines.append(f"| `{point}`{mark} | "
                     + " | ".join(f"{100 * np.mean(cell[c]):.1f}" for c in cells)
                     + f" | {100 * means[point]:.2f} | "
                     + ("-" if gap is None else "{:+.2f} [{:+.2f}, {:+.2f}]".format(
                         *(100 * g for g in gap))) + " |")
    command = shlex.join(["python", "scripts/finetune/finetune_select.py",
                          *(sys.argv[1:] if argv is None else argv)])
    wall = time.perf_counter() - start
    lines += ["", f"Chosen: `{best}` ({rule['why']}). Made by `{command}` in {wall / 60:.1f} min "
              f"({trained} nets trained, the rest reused from results.json), on "
              f"{os.cpu_count()} CPU cores."]
    text = "\n".join(lines) + "\n"
    print(text)
    files.write_text(args.out / f"table-{'-'.join(names)}.md",
                     f"# finetune()'s {', '.join(names)} on a validation split\n\n" + text)


if __name__ == "__main__":
    main()
