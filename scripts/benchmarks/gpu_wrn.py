"""GR Table 3's WRN row on Fashion-MNIST, for one lent GPU: trains
``wide_gresnet(n=4, widen_factor=10)`` (WRN-28-10 with GR's gates, dropout
0.3) with GR's WRN recipe (``wrn_cifar``: SGD Nesterov 0.9, lr 0.1 x0.2 at
59/200, 119/200 and 159/200 of the epochs, weight decay 5e-4, mean/std,
pad-4 reflection crop + flip, batch 128) on the real Fashion-MNIST IDX files
carried in the working tree, on the JAX backend, for as many epochs as
``--budget-s`` allows at ``--images-per-s`` (the schedule's milestones are
fractions of the epochs, so a shorter run keeps the recipe's shape, as
``preact_mnist``'s 40 epochs do for HE's 164).

It is one ``keras_gresnet.training.train`` run in a folder outside ``$OUT``
(``--run``: its ``model.keras``, about 146 MB, is too large to bring back
from a lent machine); ``$OUT/wrn/`` receives the run's ``config.json``,
``history.csv``, ``gates.csv``, ``results.json`` and ``summary.json`` (test
error, epochs, seconds, device, the 12 gates' k and g(k)). Run it through
``scripts/benchmarks/gpu_wrn.sh`` (installs Keras from ``.whl/``).

    KERAS_BACKEND=jax python scripts/benchmarks/gpu_wrn.py --data-dir .data/fashion_mnist \
        --budget-s 480
    KERAS_BACKEND=jax python scripts/benchmarks/gpu_wrn.py --data-dir DIR --smoke   # CPU: 1 step

``--smoke``: ``widen_factor=1``, 128 training and 128 test images, one
epoch of one step: proves the script runs, measures nothing.
"""

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")

TRAIN_IMAGES, TEST_IMAGES = 60_000, 10_000
# wide_gresnet(n=4, widen_factor=10) at 28x28x1, keras-jax float32 on an
# NVIDIA H200: 6036 img/s over 40 training steps of batch 128
# (zoo/results/gpu/gpu_check-recipes.json, 2026-12-04).
H200_IMAGES_PER_S = 6036.4
RUN_FILES = ("config.json", "history.csv", "gates.csv", "results.json")


def epochs_for(budget_s, images_per_s, overhead_s):
    """The whole epochs that fit in ``budget_s``: each trains 60k images
    and evaluates the 10k test images (at about 3x the training rate, a
    forward pass only), after ``overhead_s`` of start-up and compiling."""
    epoch_s = TRAIN_IMAGES / images_per_s + TEST_IMAGES / (3 * images_per_s)
    return max(1, math.floor((budget_s - overhead_s) / epoch_s))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True,
                        help="a folder holding Fashion-MNIST's four IDX .gz files")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="seconds of training the run may take (default 480)")
    parser.add_argument("--images-per-s", type=float, default=H200_IMAGES_PER_S,
                        help=f"the expected training rate (default {H200_IMAGES_PER_S}, "
                        "measured on an H200)")
    parser.add_argument("--overhead-s", type=float, default=60.0,
                        help="start-up and compile time taken off the budget (default 60)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="train this many epochs (default: what the budget allows)")
    parser.add_argument("--dtype-policy", default="float32",
                        choices=("float32", "mixed_bfloat16"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run", default="/tmp/gpu_wrn_run",
                        help="the run folder (outside $OUT: model.keras is ~146 MB)")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu_wrn_out",
                        help="where the results go (default $OUT)")
    parser.add_argument("--smoke", action="store_true",
                        help="widen_factor=1, 128 images, one step: a CPU check that it runs")
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir)
    missing = [name for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
               if not (data_dir / name).is_file()]
    if missing:
        parser.error(f"--data-dir: {data_dir} lacks {', '.join(missing)} "
                     "(Fashion-MNIST's IDX files)")
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs: a whole number >= 1, got {args.epochs}")

    import jax
    import keras

    from keras_gresnet import analysis, training

    widen = 1 if args.smoke else 10
    epochs = 1 if args.smoke else (
        args.epochs or epochs_for(args.budget_s, args.images_per_s, args.overhead_s))
    limits = dict(max_train_examples=128, max_test_examples=128) if args.smoke else {}
    print(f"keras {keras.__version__} on {keras.backend.backend()}, jax {jax.__version__} "
          f"{jax.devices()}; wide_gresnet(n=4, widen_factor={widen}), wrn_cifar, "
          f"{epochs} epochs, {args.dtype_policy}{' (smoke)' if args.smoke else ''}", flush=True)
    run_folder = Path(args.run)
    started = time.time()
    run = training.train(
        "wide_gresnet", out=str(run_folder), overwrite=True, verbose=2,
        model_kwargs=dict(n=4, widen_factor=widen), dataset="fashion_mnist",
        recipe="wrn_cifar", epochs=epochs, seed=args.seed, data_dir=str(data_dir),
        dtype_policy=args.dtype_policy, **limits)
    seconds = time.time() - started
    out = Path(args.out) / "wrn"
    out.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (run_folder / name).is_file():
            shutil.copyfile(run_folder / name, out / name)
    results = json.loads((run_folder / "results.json").read_text())
    gates = analysis.gate_values(run.model)
    summary = dict(
        model=f"wide_gresnet(n=4, widen_factor={widen})", recipe="wrn_cifar",
        dataset="fashion_mnist", epochs=epochs, seed=args.seed, smoke=args.smoke,
        dtype_policy=args.dtype_policy, test_error_percent=results["test_error_percent"],
        seconds=round(seconds, 1), device=str(jax.devices()[0]),
        params=int(run.model.count_params()),
        gates=[dict(block=g["block"], k=g["k"], g=g["g"]) for g in gates],
        weights="not brought back: model.keras stays in the run folder on the lent machine")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "gates"}), flush=True)
    print("gates k:", " ".join(f"{g['k']:.3f}" for g in gates), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
