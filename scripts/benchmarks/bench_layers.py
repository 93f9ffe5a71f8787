"""Benchmark: the cost of GR's gates, measured side by side in one run.

Prints the train-step time of ungated vs gated twins (``resnet_cifar(n=5)``
vs ``gresnet_cifar(n=5)``, ``resnet_mlp(50)`` vs ``gresnet_mlp(50)``) and
their ratio (goal: <= 1.05), and the time to build ``preact_resnet1001()``.
Steps alternate between the two models (ABAB...) so machine noise hits both
alike; the figure per model is the median step.

    python scripts/benchmarks/bench_layers.py [--rounds 15] [--batch 128]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_gresnet import zoo  # noqa: E402


def train_step_fn(model, batch):
    """A compiled ``train_on_batch`` closure on a fixed random batch."""
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, *model.input.shape[1:])).astype("float32")
    y = rng.integers(0, 10, size=batch)
    return lambda: model.train_on_batch(x, y)


def side_by_side(name_a, step_a, name_b, step_b, rounds, warmup=3):
    for _ in range(warmup):
        step_a(), step_b()
    times = {name_a: [], name_b: []}
    for _ in range(rounds):
        for name, step in ((name_a, step_a), (name_b, step_b)):
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    a, b = (statistics.median(times[n]) for n in (name_a, name_b))
    print(f"{name_a:>22s}: {a * 1e3:8.2f} ms/step (median of {rounds})")
    print(f"{name_b:>22s}: {b * 1e3:8.2f} ms/step (median of {rounds})")
    print(f"{'ratio gated/ungated':>22s}: {b / a:8.3f}")
    return b / a


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}, "
          f"batch {args.batch}, {os.cpu_count()} CPUs")

    for ungated, gated, kwargs in (
        ("resnet_cifar", "gresnet_cifar", dict(n=5)),
        ("resnet_mlp", "gresnet_mlp", dict(depth=50)),
    ):
        print(f"\n{ungated} vs {gated} {kwargs}")
        steps = [train_step_fn(zoo.get_model(n, **kwargs), args.batch) for n in (ungated, gated)]
        side_by_side(ungated, steps[0], gated, steps[1], args.rounds)

    keras.backend.clear_session()
    start = time.perf_counter()
    model = zoo.preact_resnet1001()
    seconds = time.perf_counter() - start
    print(f"\nbuild preact_resnet1001(): {seconds:.1f} s "
          f"({len(model.layers)} layers, {zoo.summarize(model)['params'] / 1e6:.2f}M params)")


if __name__ == "__main__":
    main()
