"""ZeroPadShortcut's subsampling as the zoo computes it against its earlier
form (the unit-stride block taken by an index, ``blocks[:, :, 0, :, :c]``,
whose gradient is TensorFlow's element-by-element ``StridedSliceGrad``), in
gresnet_cifar(n=5)'s training step: both nets in one process, compiled as
``keras-gresnet train`` compiles them, their steps alternated (the order
swapped every pair), so that a machine whose speed drifts by 2x within an
hour (docs/benchmarks.md, 2026-12-07, Zen 5) slows both alike.

    python scripts/benchmarks/bench_shortcut.py [--precision mixed_bfloat16] [--steps 60]
        [--against earlier|no-gate]

Prints each net's median step in ms and the median and quartiles of the
per-pair ratio earlier / now (above 1: the zoo's form is faster).
``--against no-gate`` times the zoo's net against itself with every
``ResidualGate`` a plain addition instead (``benchmark.ablated``), the
ratio now / no-gate: what the gates cost a step, the most that folding
``g(k)`` into the convolution before it could gain.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])
    parser.add_argument("--steps", type=int, default=60, help="pairs of steps timed")
    parser.add_argument("--n", type=int, default=5, help="gresnet_cifar's n")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--against", default="earlier", choices=["earlier", "no-gate"],
                        help="the shortcut's earlier form (default), or no gates")
    args = parser.parse_args(argv)

    import keras
    import numpy as np

    from keras_gresnet import zoo
    from keras_gresnet.layers import shortcuts
    from keras_gresnet.training.loop import compile_options

    keras.mixed_precision.set_dtype_policy(args.precision)
    now = shortcuts._subsample_nhwc

    def indexed(x, s, training=False):  # the form of 2026-12-05 to 12-07: the
        return now(x, s)                # inference form (the index) in training too

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch_size, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, args.batch_size)
    nets = {}
    forms = (("now", now), (args.against, indexed if args.against == "earlier" else now))
    for name, subsample in forms:
        shortcuts._subsample_nhwc = subsample  # looked up when the step is traced
        try:
            net = zoo.gresnet_cifar(n=args.n, weights=None)
            if name == "no-gate":
                from benchmark import ablated  # this folder's benchmark.py

                net = ablated(net, "gate")
            net.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                        "sparse_categorical_crossentropy", **compile_options())
            for _ in range(3):  # trace and warm up
                net.train_on_batch(x, y)
        finally:
            shortcuts._subsample_nhwc = now
        nets[name] = net
    times = {name: [] for name in nets}
    for i in range(args.steps):
        for name in (list(nets) if i % 2 == 0 else list(nets)[::-1]):
            start = time.perf_counter()
            nets[name].train_on_batch(x, y)
            times[name].append(time.perf_counter() - start)
    # above 1: the zoo's form is faster (earlier), the gates cost that much (no-gate)
    top, bottom = ("earlier", "now") if args.against == "earlier" else ("now", "no-gate")
    ratios = [a / b for a, b in zip(times[top], times[bottom])]
    low, _, high = statistics.quantiles(ratios, n=4)
    print(f"gresnet_cifar(n={args.n}) {args.precision}, batch {args.batch_size}, "
          f"{args.steps} pairs: " + ", ".join(
              f"{name} {statistics.median(t) * 1e3:.1f} ms" for name, t in times.items())
          + f"; {top} / {bottom} per pair: median {statistics.median(ratios):.3f} "
          f"(quartiles {low:.3f}, {high:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
