"""Benchmark: training steps/s of one process against 2 workers
(MultiWorkerMirroredStrategy on 127.0.0.1), at the same global batch.

The model is GR's ``gresnet_cifar(n=5)`` at HE's global batch of 128. Each
configuration is a real ``keras-gresnet train`` command (2 workers: 2
processes):

- ``fit``: one process, ``model.fit`` (the single-device path), batch 128;
- ``1 worker``: a cluster of one, so the multi-worker training loop runs
  without any peer (batch 128). Against ``fit`` it gives the loop's own cost;
- ``2 workers``: two worker processes, each with batch 64 on its own CPU
  replica; ``--sync-batchnorm`` adds the synchronised-BatchNorm variant.

steps/s is measured from the run's own per-epoch ``seconds`` (history.csv),
epochs after the first (the first traces the step function), so process
start-up and data loading do not count. The configurations alternate, round
after round, so noise on this machine hits them alike. Each figure is the
median over rounds; each ratio is against ``fit``.

No CIFAR exists on this machine: the runs read synthetic CIFAR-10 files
(``data.synthetic``: random uint8 pixels and labels, the website's
python-pickle format) written to a temporary folder. The step's cost does
not depend on the pixel values.

    python scripts/benchmarks/bench_distributed.py [--rounds 2] [--steps 20] [--epochs 3]
                                        [--sync-batchnorm]

On 2 cores, expect no speed-up: the 2 workers share the cores that one
process uses alone. The point of the figures is the overhead.
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from keras_gresnet import data, training  # noqa: E402

GLOBAL_BATCH = 128  # HE, GR


def run(name, workers, data_dir, out, args, sync_batchnorm=False):
    """Train one configuration; returns steps/s over the epochs after the first."""
    common = [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_cifar",
              "--n", "5", "--dataset", "cifar10", "--data-dir", str(data_dir),
              "--epochs", str(args.epochs), "--max-train-examples",
              str(args.steps * GLOBAL_BATCH), "--max-test-examples", "128",
              "--batch-size", str(GLOBAL_BATCH // max(workers, 1)), "--overwrite"]
    if sync_batchnorm:
        common.append("--sync-batchnorm")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_CONFIG", None)
    if workers == 0:
        commands = [common + ["--strategy", "default", "--out", str(out / "run")]]
    else:
        addresses = training.local_workers(workers)
        commands = [common + ["--out", str(out / "run"), "--workers", addresses,
                              "--worker-index", str(i)] for i in range(workers)]
    processes = [subprocess.Popen(c, env=env, cwd=out, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for c in commands]
    try:
        errors = [p.communicate(timeout=3600)[1] for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, error in zip(processes, errors):
        if p.returncode:
            raise SystemExit(f"{name} failed (exit {p.returncode}):\n{error[-3000:]}")
    with open(out / "run" / "history.csv", newline="") as f:
        seconds = [float(row["seconds"]) for row in csv.DictReader(f)][1:]
    return args.steps / statistics.median(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="at least 2 (the first is "
                        "not timed)")
    parser.add_argument("--sync-batchnorm", action="store_true",
                        help="also time 2 workers with synchronised BatchNorm")
    args = parser.parse_args()
    for value, name, low in ((args.rounds, "--rounds", 1), (args.steps, "--steps", 1),
                             (args.epochs, "--epochs", 2)):
        if value < low:
            parser.error(f"{name} must be at least {low}, got {value}")
    configurations = [("fit", 0, False), ("1 worker", 1, False), ("2 workers", 2, False)]
    if args.sync_batchnorm:
        configurations.append(("2 workers, sync BN", 2, True))
    measured = {name: [] for name, _, _ in configurations}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data.synthetic.write_synthetic("cifar10", tmp / "data", args.steps * GLOBAL_BATCH,
                                       128)
        for round_ in range(args.rounds):
            for name, workers, sync in configurations:
                out = tmp / f"{name}-{round_}".replace(" ", "_").replace(",", "")
                out.mkdir()
                steps_per_second = run(name, workers, tmp / "data", out, args, sync)
                measured[name].append(steps_per_second)
                print(f"round {round_ + 1}: {name:20s} {steps_per_second:.3f} steps/s",
                      file=sys.stderr, flush=True)
    base = statistics.median(measured["fit"])
    print(f"gresnet_cifar(n=5), global batch {GLOBAL_BATCH}, {args.steps} steps/epoch, "
          f"median of {args.rounds} rounds ({os.cpu_count()} CPU cores)")
    print(f"{'configuration':22s} {'steps/s':>8s} {'ms/step':>8s} {'vs fit':>7s}")
    for name, values in measured.items():
        median = statistics.median(values)
        print(f"{name:22s} {median:8.3f} {1000 / median:8.0f} {median / base:7.2f}")


if __name__ == "__main__":
    main()
