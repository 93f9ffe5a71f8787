"""Steps a host call on JAX with the device pipeline: Keras' own
``steps_per_execution`` (a Python loop of compiled steps, one dispatch each)
against :mod:`keras_gresnet.training.executions` (the same steps as one
compiled program, each batch cut inside it), in one process, the two
alternated every round, so that a machine whose speed drifts slows both
alike. Each compiles once before the timed rounds.

    KERAS_BACKEND=jax python scripts/benchmarks/bench_executions.py \\
        [--model gresnet_mlp --depth 10] [--batch-size 16] [--steps 64] \\
        [--per-call 16] [--rounds 5]

``--model gresnet_mlp`` (flat 28x28 pictures) or ``gresnet_cifar`` (``--n``,
32x32x3 with GR's crop and flip). Prints the CPU, each way's images/s per
round, the median per-round ratio fused / Keras (above 1: fused is
faster) and each way's first fit, which compiles (on a CPU the fused steps
are unrolled: a program of ``--per-call`` steps). Synthetic uint8 pictures:
speed only.
"""

import argparse
import os
import statistics
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gresnet_mlp", choices=["gresnet_mlp", "gresnet_cifar"])
    parser.add_argument("--depth", type=int, default=10, help="gresnet_mlp's depth")
    parser.add_argument("--n", type=int, default=1, help="gresnet_cifar's n")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=64, help="steps an epoch (one timed fit)")
    parser.add_argument("--per-call", type=int, default=16, help="steps a host call")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of both")
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")

    import keras
    import numpy as np

    if keras.backend.backend() != "jax":
        raise SystemExit("bench_executions.py: the fused steps are JAX's; run with KERAS_BACKEND=jax")
    from keras_gresnet import zoo
    from keras_gresnet._cpu import cpu_info
    from keras_gresnet.data import devicedata
    from keras_gresnet.training import executions

    rng = np.random.default_rng(0)
    count = args.batch_size * args.steps
    if args.model == "gresnet_mlp":
        images = rng.integers(0, 256, (count, 28, 28, 1), dtype=np.uint8)
        cut = dict(flatten=True, augment=False)

        def build():
            return zoo.gresnet_mlp(depth=args.depth, weights=None, input_shape=(784,))
    else:
        images = rng.integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)
        cut = dict(flatten=False, augment=True)

        def build():
            return zoo.gresnet_cifar(n=args.n, weights=None)
    labels = rng.integers(0, 10, count)

    def compiled(steps_per_execution):
        keras.utils.set_random_seed(1)
        net = build()
        net.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True),
                    loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                    steps_per_execution=steps_per_execution)
        return net

    def dataset(epoch):
        return devicedata.make_dataset(images, labels, batch_size=args.batch_size, shuffle=True,
                                       seed=3, epochs=(epoch, epoch + 1), **cut)

    keras_net, fused_net = compiled(args.per_call), compiled(1)
    rates = {"keras": [], "fused": []}

    def fit(way, epoch):
        if way == "keras":
            net, data, steps = keras_net, dataset(epoch), args.steps
        else:
            net = fused_net
            data, steps = executions.fuse(net, dataset(epoch), args.per_call)
        start = time.perf_counter()
        net.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
        return count / (time.perf_counter() - start)

    compile_s = {}
    for way in rates:  # compile both: the first fit's seconds
        start = time.perf_counter()
        fit(way, 0)
        compile_s[way] = time.perf_counter() - start
    for round_ in range(args.rounds):
        order = list(rates) if round_ % 2 == 0 else list(rates)[::-1]
        for way in order:
            rates[way].append(fit(way, round_ + 1))
        print(f"round {round_ + 1}: keras {rates['keras'][-1]:.0f} img/s, "
              f"fused {rates['fused'][-1]:.0f} img/s", file=sys.stderr, flush=True)
    cpu = cpu_info()
    ratios = [f / k for f, k in zip(rates["fused"], rates["keras"])]
    what = (f"gresnet_mlp(depth={args.depth})" if args.model == "gresnet_mlp"
            else f"gresnet_cifar(n={args.n})")
    print(f"CPU: {cpu['model']} ({cpu['id']}), {cpu['cores']} cores; {what}, batch "
          f"{args.batch_size}, {args.steps} steps a round, {args.per_call} steps a host call; "
          f"first fit (compiling) keras {compile_s['keras']:.1f} s, fused {compile_s['fused']:.1f} s")
    print(f"keras {statistics.median(rates['keras']):.0f} img/s, fused "
          f"{statistics.median(rates['fused']):.0f} img/s; fused / keras median "
          f"{statistics.median(ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
