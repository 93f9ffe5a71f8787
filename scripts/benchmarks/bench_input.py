"""Benchmark: is the CIFAR input pipeline fast enough to never starve training?

Prints, measured in one process, the images/s of the CIFAR training input
pipeline (``data.make_dataset`` with HE's "mean" preprocessing, shuffle,
pad-4 crop + flip augmentation, batch 128; both the epoch-indexed stream that
training reads and the one-pass dataset) and the images/s of training GR's
``gresnet_cifar(n=5)`` (compiled ``train_on_batch``, SGD, fixed in-memory
batches), and their ratio pipeline/model (goal: >= 20x, so the input costs
at most ~5% of a training step's CPU time).

No real CIFAR exists on this machine: the pipeline reads synthetic CIFAR-10
(``data.synthetic``: random uint8 pixels and labels of CIFAR-10's training
split, 50,000 x 32 x 32 x 3, written in the website's python-pickle format
and read back by ``data.load``); its cost does not depend on the pixel
values. The two measurements alternate, repeat after repeat (each after its
own warm-up), so machine noise hits both alike; the figure for each is the
median over repeats.

    python scripts/benchmarks/bench_input.py [--batches 400] [--steps 5] [--repeats 5]
"""

import argparse
import itertools
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_gresnet import data, zoo  # noqa: E402

CIFAR_TRAIN_SHAPE = (50_000, 32, 32, 3)
BATCH = 128  # HE, GR, WRN
WARMUP_BATCHES = 10
WARMUP_STEPS = 2


def synthetic_cifar(seed=0):
    """CIFAR-10's training split as ``data.load`` reads it from synthetic files."""
    with tempfile.TemporaryDirectory(prefix="bench-input-") as folder:
        data.synthetic.write_synthetic("cifar10", folder, CIFAR_TRAIN_SHAPE[0], 0, seed=seed)
        return data.load("cifar10", "train", data_dir=folder, download=False)


def pipeline_rate(dataset, batches):
    """Images/s over ``batches`` batches of a fresh iterator, after
    ``WARMUP_BATCHES``. The iterator is dropped afterwards, so its background
    threads do not compete with the model's measurement."""
    iterator = iter(dataset)
    for _ in itertools.islice(iterator, WARMUP_BATCHES):
        pass
    images = 0
    start = time.perf_counter()
    for _, y in itertools.islice(iterator, batches):
        images += int(y.shape[0])
    seconds = time.perf_counter() - start
    del iterator
    return images / seconds


def model_rate(model, batches, steps):
    """Images/s over ``steps`` training steps after ``WARMUP_STEPS``,
    cycling through the fixed in-memory ``batches``."""
    cycle = itertools.cycle(batches)
    for x, y in itertools.islice(cycle, WARMUP_STEPS):
        model.train_on_batch(x, y)
    images = 0
    start = time.perf_counter()
    for x, y in itertools.islice(cycle, steps):
        model.train_on_batch(x, y)
        images += int(y.shape[0])
    return images / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=400,
                        help="pipeline batches timed per repeat")
    parser.add_argument("--steps", type=int, default=5,
                        help="training steps timed per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for flag in ("batches", "steps", "repeats"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")

    print(f"keras {keras.__version__}, tensorflow {tf.__version__}, backend "
          f"{keras.backend.backend()}, {os.cpu_count()} CPUs, batch {BATCH}")
    print("NOTE: no real CIFAR on this machine; the pipeline reads synthetic CIFAR-10 "
          f"files, random uint8 data of CIFAR-10's shape {CIFAR_TRAIN_SHAPE} (its cost "
          "does not depend on pixel values).")

    images, labels = synthetic_cifar()
    preprocessing = data.Preprocessing.fit("mean", images)
    common = dict(batch_size=BATCH, preprocessing=preprocessing, shuffle=True, augment=True,
                  seed=0)
    # What training reads: the epoch-indexed stream (Pipeline.train_epochs),
    # long enough that a timed run crosses epoch boundaries; and the one-pass
    # dataset (repeated, reshuffled by each pass).
    datasets = {"pipeline": data.make_dataset(images, labels, epochs=(0, 1000), **common),
                "one pass": data.make_dataset(images, labels, **common).repeat()}
    # The model trains on real pipeline output, held in memory as tensors.
    fixed_batches = list(itertools.islice(iter(datasets["pipeline"]), 4))

    model = zoo.gresnet_cifar(n=5)
    model.compile(
        optimizer=keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
        loss="sparse_categorical_crossentropy",
    )

    rates = {"pipeline": [], "one pass": [], "model": []}
    for repeat in range(args.repeats):
        for name, dataset in datasets.items():
            rates[name].append(pipeline_rate(dataset, args.batches))
        rates["model"].append(model_rate(model, fixed_batches, args.steps))
        print(f"  repeat {repeat + 1}/{args.repeats}: pipeline "
              f"{rates['pipeline'][-1]:9.0f} img/s, one pass {rates['one pass'][-1]:9.0f} "
              f"img/s, model {rates['model'][-1]:7.1f} img/s", flush=True)

    pipeline, one_pass, model_ = (statistics.median(rates[k])
                                  for k in ("pipeline", "one pass", "model"))
    ratio = pipeline / model_
    print(f"\ninput pipeline (mean, shuffle, crop+flip): {pipeline:9.0f} images/s "
          f"(median of {args.repeats} x {args.batches} batches; the epoch stream "
          f"training reads)")
    print(f"  the same as one-pass dataset:           {one_pass:9.0f} images/s "
          f"(stream / one pass: {pipeline / one_pass:.3f})")
    print(f"gresnet_cifar(n=5) training (SGD):         {model_:9.1f} images/s "
          f"(median of {args.repeats} x {args.steps} steps)")
    print(f"ratio pipeline/model:                      {ratio:9.1f}x "
          f"(goal >= 20x: {'met' if ratio >= 20 else 'NOT met'})")


if __name__ == "__main__":
    main()
