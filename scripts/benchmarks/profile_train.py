"""Where a training step's time goes, through the command a user runs:
``keras-gresnet train gresnet_cifar`` (TensorFlow) on synthetic CIFAR-10
files, with TensorFlow's profiler (``tf.profiler.experimental``) on for one
whole epoch after the first (no tracing or compilation in it), and the
profile's op statistics summed by op type, per training step.

    python scripts/benchmarks/profile_train.py --n 5 --examples 3200 \\
        [--mixed-precision mixed_bfloat16] [--epoch 2] [--top 25]

The table: each op type's self time in milliseconds per step (TensorFlow's
``framework_op_stats``: the ops' own time; ops that run side by side, which
TensorFlow's inter-op pool does, each count in full, so that the column adds
up to more than the step's wall time, printed from ``history.csv``) and its
share of the column. Counts of ops are not shown: the profiler records some
op types twice per execution (``_MklNativeConv2D``: 2 per convolution and
step, where ``ONEDNN_VERBOSE=1`` logs 1). The raw profile stays in ``--keep DIR`` for
TensorBoard's profile plugin.
"""

import argparse
import collections
import glob
import json
import os
import sys
import tempfile
from pathlib import Path

TOOL = "framework_op_stats"


def op_types(profile_dir):
    """``{op type: self microseconds}`` of a profile folder."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    paths = glob.glob(os.path.join(profile_dir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise SystemExit(f"{profile_dir}: the profiler wrote no .xplane.pb")
    data, _ = plugin.xspace_to_tools_data(paths, TOOL, {})
    table = json.loads(data)
    table = table[0] if isinstance(table, list) else table
    columns = {c["id"]: i for i, c in enumerate(table["cols"])}
    totals = collections.Counter()
    for row in table["rows"]:
        cells = [c["v"] if c else None for c in row["c"]]
        kind = cells[columns["type"]]
        if kind == "IDLE":
            continue
        totals[kind] += cells[columns["total_self_time"]]
    return totals


def profiled(epoch, profile_dir):
    """Turn the profiler on for the whole of epoch ``epoch`` (1-based) of the
    run the command trains, around the run logger's epoch hooks."""
    import tensorflow as tf

    from keras_gresnet.training import runs

    begin, end = runs.RunLogger.on_epoch_begin, runs.RunLogger.on_epoch_end

    def on_epoch_begin(self, index, logs=None):
        begin(self, index, logs)
        if index + 1 == epoch:
            tf.profiler.experimental.start(str(profile_dir))

    def on_epoch_end(self, index, logs=None):
        if index + 1 == epoch:
            tf.profiler.experimental.stop()
        end(self, index, logs)

    runs.RunLogger.on_epoch_begin, runs.RunLogger.on_epoch_end = on_epoch_begin, on_epoch_end


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5, help="gresnet_cifar's n (default 5)")
    parser.add_argument("--examples", type=int, default=3200)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epoch", type=int, default=2, help="the epoch profiled (>= 2)")
    parser.add_argument("--mixed-precision", choices=["mixed_bfloat16"])
    parser.add_argument("--top", type=int, default=25, help="op types shown")
    parser.add_argument("--keep", help="a new folder to keep the run and the raw profile in")
    args = parser.parse_args(argv)
    if args.epoch < 2:
        parser.error("--epoch must be at least 2 (the first epoch traces and compiles)")
    if args.examples < args.batch_size:
        parser.error(f"--examples must be at least --batch-size ({args.batch_size})")
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.keep and Path(args.keep).exists():
        parser.error(f"--keep {args.keep}: exists; name a new folder")
    work = Path(args.keep or tempfile.mkdtemp(prefix="profile_train-"))
    work.mkdir(parents=True, exist_ok=True)
    from keras_gresnet.cli import main as cli
    from keras_gresnet.data.synthetic import write_synthetic

    write_synthetic("cifar10", work / "cifar10", args.examples, 256)
    profiled(args.epoch, work / "profile")
    command = ["train", "gresnet_cifar", "--n", str(args.n), "--dataset", "cifar10",
               "--data-dir", str(work / "cifar10"), "--epochs", str(args.epoch),
               "--batch-size", str(args.batch_size), "--max-test-examples", "256",
               "--out", str(work / "run")]
    if args.mixed_precision:
        command += ["--mixed-precision", args.mixed_precision]
    code = cli(command)
    if code:
        return code
    steps = -(-args.examples // args.batch_size)
    history = (work / "run" / "history.csv").read_text().splitlines()
    header = history[0].split(",")
    seconds = float(history[args.epoch].split(",")[header.index("seconds")])
    totals = op_types(work / "profile")
    ops_ms = sum(totals.values()) / 1000 / steps
    print(f"\ngresnet_cifar(n={args.n}), {args.mixed_precision or 'float32'}, batch "
          f"{args.batch_size}, epoch {args.epoch} profiled ({steps} steps): step "
          f"{1000 * seconds / steps:.1f} ms wall (under the profiler), ops' self time "
          f"{ops_ms:.1f} ms\n")
    print("| op type | ms per step | share of the ops' time |")
    print("|---|---:|---:|")
    for kind, micros in totals.most_common(args.top):
        print(f"| {kind} | {micros / 1000 / steps:.2f} | {micros / 1000 / steps / ops_ms:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
