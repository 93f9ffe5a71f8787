"""Seed calibration of the per-replica bounds of
``tests/test_distributed.py::test_two_workers_match_one_process_at_the_same_global_batch``:
for each seed, 2 TensorFlow workers (per-replica BatchNorm; each a
``keras-gresnet train --workers`` process) against one process at the same
global batch (the test's run, about 25 s a seed here); prints, one JSON line
a seed, the three quantities the test bounds.

    python scripts/checks/calibrate_per_replica.py 0,1,2,3

The run is defined here, :data:`RUN` at :data:`GLOBAL_BATCH`, with the
worker command (:func:`train_command`) and the single-process reference
(:func:`single_process`): ``tests/multiworker_check.py`` and
``tests/test_distributed.py`` import them from this file, so the test and
its calibration train one run.
"""

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The run both workers train, and the single-process reference with the same
# global batch. Keras 3's Nadam: the tolerances of test_distributed.py were
# measured with it (gr_mnist's default is now Keras 1's, whose slow momentum
# ramp gives the per-replica BatchNorm runs another path).
RUN = dict(model="gresnet_mlp", model_kwargs=dict(depth=2), dataset="fashion_mnist",
           epochs=6, max_train_examples=12000, max_test_examples=1000, seed=5, verbose=0,
           optimizer_name="nadam")
GLOBAL_BATCH = 128  # split evenly over the workers (one CPU replica each)
DEADLINE = 600  # seconds for one pair of workers


def train_command(addresses, index, epochs=RUN["epochs"], seed=RUN["seed"]):
    """The ``keras-gresnet train`` command of worker ``index`` of the cluster
    ``addresses`` training RUN (its run folder: ``./run``)."""
    workers = len(addresses.split(","))
    return [sys.executable, "-m", "keras_gresnet.cli", "train", RUN["model"],
            "--depth", str(RUN["model_kwargs"]["depth"]), "--dataset", RUN["dataset"],
            "--epochs", str(epochs), "--seed", str(seed),
            "--max-train-examples", str(RUN["max_train_examples"]),
            "--max-test-examples", str(RUN["max_test_examples"]),
            "--batch-size", str(GLOBAL_BATCH // workers), "--out", "run",
            "--optimizer-name", RUN["optimizer_name"],
            "--workers", addresses, "--worker-index", str(index)]


def single_process(out, **overrides):
    """RUN (with ``overrides``) in this process, on one device, at the same
    global batch."""
    from keras_gresnet import training

    run = {**RUN, **overrides}
    return training.train(run.pop("model"), out=out, strategy="default",
                          batch_size=GLOBAL_BATCH, **run)


def two_workers(folder, seed):
    """RUN with ``seed`` on 2 worker processes (127.0.0.1), each in its own
    folder under ``folder``: the chief's loss and test accuracy, one dict an
    epoch."""
    from keras_gresnet.training.backends import tensorflow_multiworker as multiworker

    addresses = multiworker.local_workers(2)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TF_CONFIG", None)
    folders, processes = [folder / f"w{i}" for i in range(2)], []
    try:
        for index, worker in enumerate(folders):
            worker.mkdir(parents=True)
            with open(worker / "worker.log", "wb") as log:
                processes.append(subprocess.Popen(
                    train_command(addresses, index, seed=seed), cwd=worker, env=env,
                    stdout=log, stderr=subprocess.STDOUT))
        codes = [p.wait(timeout=DEADLINE) for p in processes]
    finally:
        for p in processes:  # TensorFlow ignores SIGTERM while it waits for a peer
            if p.poll() is None:
                p.kill()
                p.wait()
    if codes != [0, 0]:
        logs = "\n".join((w / "worker.log").read_text(errors="replace")[-3000:] for w in folders)
        raise SystemExit(f"workers exited with {codes}:\n{logs}")
    with open(folders[0] / "run" / "history.csv", newline="") as f:
        return [{k: float(row[k]) for k in ("loss", "test_accuracy")}
                for row in csv.DictReader(f)]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit(__doc__)
    for seed in [int(s) for s in argv[0].split(",")]:
        tmp = Path(tempfile.mkdtemp(prefix=f"calib{seed}-"))
        mine = two_workers(tmp / "w", seed)
        theirs = single_process(tmp / "one", seed=seed).history
        pairs = list(zip(mine, theirs, strict=True))
        loss = max(abs(m["loss"] - t["loss"]) / t["loss"] for m, t in pairs)
        acc = max(abs(m["test_accuracy"] - t["test_accuracy"]) for m, t in pairs)
        gap = sum(m["test_accuracy"] - t["test_accuracy"] for m, t in pairs) / len(pairs)
        print(json.dumps(dict(seed=seed, max_loss_rel=round(loss, 4), max_epoch_acc=round(acc, 4),
                              mean_gap=round(gap, 4))), flush=True)


if __name__ == "__main__":
    main()
