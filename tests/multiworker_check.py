"""One worker of the 2-worker test in tests/test_distributed.py, in its own
process (MultiWorkerMirroredStrategy is set up once per process).

    python tests/multiworker_check.py WORKERS INDEX REPORT_DIR [OVERRIDES]

OVERRIDES: JSON of train() arguments that replace RUN's, e.g.
'{"sync_batchnorm": true, "epochs": 2}'.

Run from the worker's own folder: the run folder is ``./run``, so a worker
that wrongly wrote the run folder would leave one behind there. Writes to
REPORT_DIR/worker{INDEX}:
- ``shards.npz``: the first 3 per-worker batches of the distributed training
  pipeline (labels, and each image's pixel sum as its fingerprint);
- ``weights.npz``: every trainable variable after training;
- ``report.json``: the history and the test results.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_gresnet import data, training  # noqa: E402
from keras_gresnet.training.backends import tensorflow_multiworker as multiworker  # noqa: E402

# The run both workers train, at its global batch: defined beside its seed
# calibration, which trains it too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "checks"))
from calibrate_per_replica import GLOBAL_BATCH, RUN  # noqa: E402


def main(workers, index, report_dir, overrides=None):
    run_args = {**RUN, **(overrides or {})}
    report = Path(report_dir) / f"worker{index}"
    report.mkdir(parents=True, exist_ok=True)
    cluster = training.resolve_cluster(workers, index)
    strategy = training.make_strategy("multi_worker", cluster)  # train() reuses it

    # What this worker reads of the pipeline train() builds (after seeding).
    keras.utils.set_random_seed(RUN["seed"])
    pipe = data.pipeline(RUN["dataset"], batch_size=GLOBAL_BATCH,
                         seed=RUN["seed"], max_train_examples=RUN["max_train_examples"],
                         max_test_examples=RUN["max_test_examples"])
    batches = iter(multiworker.distribute(strategy, pipe.train_epochs(0, 1)))
    shards = {}
    for step in range(3):
        images, labels = (strategy.experimental_local_results(x)[0] for x in next(batches))
        shards[f"labels{step}"] = labels.numpy()
        shards[f"sums{step}"] = images.numpy().reshape(len(labels), -1).sum(axis=1)
    np.savez(report / "shards.npz", **shards)

    run = training.train(run_args["model"], out="run", workers=workers, worker_index=index,
                         batch_size=GLOBAL_BATCH // cluster.num_workers,
                         **{k: v for k, v in run_args.items() if k != "model"})
    np.savez(report / "weights.npz",
             **{v.path: np.asarray(v) for v in run.model.trainable_variables})
    (report / "report.json").write_text(json.dumps(dict(
        out=None if run.out is None else str(run.out), history=run.history,
        results=run.results, config=run.config)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3],
         json.loads(sys.argv[4]) if len(sys.argv) > 4 else None)
