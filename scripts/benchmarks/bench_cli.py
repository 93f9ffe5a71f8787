"""The training path as a user runs it, against native PyTorch: ``keras-gresnet
train gresnet_cifar --n 5`` (its seeded pipeline with GR's augmentation, its
callbacks, run folder and epoch backups) on synthetic CIFAR-10 files in the
official format, and a plain PyTorch loop over the same examples: the twin
of ``scripts/benchmarks/torch_reference.py``, the same augmentation (pad 4, a random
32x32 crop and a horizontal flip of each picture) on tensors, SGD with Nesterov momentum, in
channels_last and NCHW (the faster counts), float32 and bfloat16 autocast.

    python scripts/benchmarks/bench_cli.py --backends torch,tensorflow \\
        --precisions float32,mixed_bfloat16 --examples 2560 --epochs 3 --rounds 2

Every setup runs in its own process, the setups of a round one after the
other and the rounds alternated, so that a ratio compares two runs a few
minutes apart. Throughput: the training examples over the median of the
epochs after the first (``history.csv``'s ``seconds``: training only, not
the per-epoch test of 256 images nor the backup; the PyTorch loop times the
same). Also printed: each command's whole wall time and test error.

A Keras setup may name its input pipeline, ``BACKEND:PIPELINE`` (``jax:device``
against ``jax:numpy``: the same batches, data on the device or sent from the
host), and the training steps a host call runs, ``BACKEND:PIPELINE:STEPS``
(``jax:device:16``: on one JAX device, 16 steps as one compiled program,
``--steps-per-execution``); ``--layouts ""`` leaves PyTorch out. ``--baseline DIR`` adds every
Keras setup run again from another checkout of this package (e.g. ``git
worktree add /tmp/old HEAD~1``; its ``keras_gresnet`` is put first on
``PYTHONPATH``), in the same rounds: code before and after a change, side by
side, the same data and seeds.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEST_EXAMPLES = 256


def keras_run(backend, precision, data_dir, examples, epochs, out, pipeline=None,
              source=None, steps=None):
    command = [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_cifar", "--n", "5",
               "--dataset", "cifar10", "--data-dir", str(data_dir), "--epochs", str(epochs),
               "--max-train-examples", str(examples),
               "--max-test-examples", str(TEST_EXAMPLES), "--out", str(out)]
    if precision != "float32":
        command += ["--mixed-precision", precision]
    if pipeline:
        command += ["--input-pipeline", pipeline]
    if steps:
        command += ["--steps-per-execution", steps]
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    if source:  # another checkout's keras_gresnet before the installed one
        env["PYTHONPATH"] = os.pathsep.join(
            [str(source)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{backend} {precision}: exit {result.returncode}\n"
                         f"{result.stderr[-2000:]}")
    lines = (Path(out) / "history.csv").read_text().splitlines()
    header = lines[0].split(",")
    seconds = [float(line.split(",")[header.index("seconds")]) for line in lines[1:]]
    error = json.loads((Path(out) / "results.json").read_text())["test_error_percent"]
    return seconds, wall, error


def pytorch_worker(args):
    """One PyTorch run; prints ``{"seconds": [...], "wall": s}``."""
    start = time.perf_counter()
    import numpy as np
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(HERE))
    import torch_reference as ref

    from keras_gresnet import data

    torch.set_num_threads(args.threads or os.cpu_count())
    torch.manual_seed(0)
    images, labels = data.load("cifar10", "train", data_dir=args.data_dir)
    test_images, test_labels = data.load("cifar10", "test", data_dir=args.data_dir)
    images, labels = images[:args.examples], labels[:args.examples]
    test_images, test_labels = test_images[:TEST_EXAMPLES], test_labels[:TEST_EXAMPLES]
    mean = images.reshape(-1, 3).mean(axis=0) / 255.0
    channels_last = args.layout == "channels_last"

    def tensors(x):  # NHWC uint8 -> normalised NCHW float32
        t = ref.to_torch_images((x / 255.0 - mean).astype("float32"), channels_last)
        return t.contiguous(memory_format=torch.channels_last) if channels_last else t

    x_all, y_all = tensors(images), torch.from_numpy(labels.astype("int64"))
    x_test = tensors(test_images)
    net = ref.build("gresnet_cifar")
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                          weight_decay=1e-4)
    mixed = args.precision != "float32"
    rng = np.random.default_rng(0)
    seconds = []
    for _ in range(args.epochs):
        epoch_start = time.perf_counter()
        net.train()
        order = torch.from_numpy(rng.permutation(len(y_all)))
        for i in range(0, len(order), 128):
            index = order[i:i + 128]
            xb, yb = x_all[index], y_all[index]
            offsets = torch.from_numpy(rng.integers(0, 9, size=(len(index), 2)))
            flips = torch.from_numpy(rng.random(len(index)) < 0.5)
            xb = crop_and_flip(F.pad(xb, (4, 4, 4, 4)), offsets, flips)  # GR's augmentation
            if channels_last:
                xb = xb.contiguous(memory_format=torch.channels_last)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
                out = net(xb)
            loss = F.cross_entropy(out.float(), yb)
            loss.backward()
            opt.step()
            (out.argmax(1) == yb).float().mean().item()  # Keras' logged accuracy
        seconds.append(time.perf_counter() - epoch_start)
        net.eval()
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
            net(x_test).float().softmax(1)
    print(json.dumps(dict(seconds=seconds, wall=time.perf_counter() - start)))


def crop_and_flip(padded, offsets, flips, size=32):
    """Each picture of a padded NCHW batch cropped back to ``size`` at its own
    offset (``offsets``: ``(N, 2)`` rows and columns) and mirrored left-right
    where ``flips``, as the Keras pipeline does
    (``keras_gresnet.data.tfdata.crop_and_flip``): one gather over the batch."""
    import torch

    n, c = padded.shape[:2]
    span = torch.arange(size)
    rows = offsets[:, :1] + span
    columns = offsets[:, 1:] + torch.where(flips[:, None], span.flip(0), span)
    return padded[torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None],
                  rows[:, None, :, None], columns[:, None, None, :]]


def pytorch_run(layout, precision, data_dir, examples, epochs, threads):
    command = [sys.executable, __file__, "--worker", "--layout", layout, "--precision",
               precision, "--data-dir", str(data_dir), "--examples", str(examples),
               "--epochs", str(epochs)] + (["--threads", str(threads)] if threads else [])
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if result.returncode != 0:
        raise SystemExit(f"pytorch {layout} {precision}: exit {result.returncode}\n"
                         f"{result.stderr[-2000:]}")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    return answer["seconds"], time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="torch,tensorflow")
    parser.add_argument("--precisions", default="float32,mixed_bfloat16")
    parser.add_argument("--examples", type=int, default=2560)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="PyTorch's (default: the cores)")
    parser.add_argument("--layouts", default="channels_last,nchw",
                        help="PyTorch's memory formats ('' for no PyTorch run)")
    parser.add_argument("--baseline", type=Path,
                        help="another checkout of keras-gresnet: every Keras setup runs from it "
                             "too, as 'keras-baseline BACKEND'")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout", default="channels_last", help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return pytorch_worker(args)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first epoch is not timed)")
    if args.baseline and not (args.baseline / "keras_gresnet" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no keras_gresnet/__init__.py there "
                     "(a checkout of this repository is expected)")
    from keras_gresnet.data.synthetic import write_synthetic

    work = Path(tempfile.mkdtemp(prefix="bench_cli-"))
    data_dir = work / "cifar10"
    write_synthetic("cifar10", data_dir, args.examples, TEST_EXAMPLES)
    kinds = ["keras"] + (["keras-baseline"] if args.baseline else [])
    setups = [(f"{kind} {b}", p) for b in args.backends.split(",") for p in
              args.precisions.split(",") for kind in kinds]
    layouts = [layout for layout in args.layouts.split(",") if layout]
    setups += [(f"pytorch {layout}", p) for layout in layouts
               for p in args.precisions.split(",")]
    results = {setup: [] for setup in setups}
    for round_ in range(args.rounds):
        for name, precision in setups:
            kind, what = name.split(" ")
            error = None
            if kind.startswith("keras"):
                backend, _, pipeline = what.partition(":")
                pipeline, _, steps = pipeline.partition(":")
                out = work / f"run-{kind}-{what.replace(':', '-')}-{precision}-{round_}"
                seconds, wall, error = keras_run(
                    backend, precision, data_dir, args.examples, args.epochs, out, pipeline,
                    source=args.baseline if kind == "keras-baseline" else None, steps=steps)
            else:
                seconds, wall = pytorch_run("channels_last" if what == "channels_last"
                                            else "nchw", precision, data_dir, args.examples,
                                            args.epochs, args.threads)
            rate = args.examples / statistics.median(seconds[1:])
            results[(name, precision)].append((rate, wall, error))
            print(f"round {round_ + 1}: {name} {precision}: {rate:.1f} img/s, "
                  f"command {wall:.1f} s" + (f", test error {error:.2f}%" if error is not None
                                             else ""), file=sys.stderr, flush=True)
    # The CPU as every run folder records it (results.json's "machine").
    finished = sorted(work.glob("run-*/results.json"))
    cpu = json.loads(finished[0].read_text())["machine"] if finished else dict(
        model="?", cores=os.cpu_count(), bf16="?")
    print(f"\nCPU: {cpu['model']} ({cpu.get('id') or 'family unknown'}), {cpu['cores']} cores, "
          f"bf16 units: {cpu['bf16']}; "
          f"{args.examples} examples x {args.epochs} epochs, medians of {args.rounds} rounds\n")
    print("| setup | precision | img/s | / PyTorch | command s | test error % |")
    print("|---|---|---:|---:|---:|---:|")
    for precision in args.precisions.split(","):
        best = max((statistics.median(r for r, _, _ in results[(f"pytorch {layout}", precision)])
                    for layout in layouts), default=None)
        for name, p in setups:
            if p != precision:
                continue
            rate = statistics.median(r for r, _, _ in results[(name, p)])
            wall = statistics.median(w for _, w, _ in results[(name, p)])
            errors = sorted({e for _, _, e in results[(name, p)] if e is not None})
            print(f"| {name} | {p} | {rate:.1f} | {f'{rate / best:.2f}x' if best else ''} | "
                  f"{wall:.1f} | {', '.join(f'{e:.2f}' for e in errors)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
