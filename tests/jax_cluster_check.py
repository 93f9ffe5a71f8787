"""One process of the JAX cluster tests in tests/test_jax_cluster.py
(``jax.distributed`` is set up once per process), or the single-process
reference run.

    python tests/jax_cluster_check.py REPORT_DIR WORKERS INDEX [OVERRIDES]

WORKERS: ``host:port,...`` (INDEX: this process's position); ``devices2``
for the reference, one process with ``strategy="data_parallel"`` on 2
virtual CPU devices at the same global batch; or ``devices1``, one device. OVERRIDES: JSON of
train() arguments that replace RUN's; ``"tf_free": true`` makes TensorFlow
unimportable first (the numpy pipeline, as on the GPU machine).

Run from the process's own folder: the run folder is ``./run``, so a
process that wrongly wrote it would leave one behind there. Writes to
REPORT_DIR/process{INDEX} (``devices2`` / ``devices1`` for the references): ``weights.npz``
(every trainable variable after training) and ``report.json`` (the
history, the results, the config, and what JAX saw).
"""

import json
import os
import sys
from pathlib import Path

# The run the cluster trains, and its global batch: 4000 % 64 = 32 and
# 1000 % 64 = 40, so every last batch splits evenly over 2 processes.
RUN = dict(model="gresnet_mlp", model_kwargs=dict(depth=2), dataset="fashion_mnist",
           epochs=3, max_train_examples=4000, max_test_examples=1000, seed=5, verbose=0)
GLOBAL_BATCH = 64


def main(report_dir, workers, index, overrides):
    # Here, not at import: tests/test_jax_cluster.py imports RUN from this file.
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    overrides = dict(overrides)
    if overrides.pop("tf_free", False):
        for name in ("tensorflow", "tensorflow_datasets"):
            sys.modules[name] = None  # `import tensorflow` now raises ImportError
    if workers == "devices2":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_force_host_platform_device_count=2")
    import jax
    import numpy as np

    from keras_gresnet import training

    run_args = {**RUN, **overrides}
    if workers == "devices2":
        extra = dict(strategy="data_parallel", batch_size=GLOBAL_BATCH // 2)
    elif workers == "devices1":
        extra = dict(strategy="default", batch_size=GLOBAL_BATCH)
    else:
        extra = dict(workers=workers, worker_index=index,
                     batch_size=GLOBAL_BATCH // len(workers.split(",")))
    report = Path(report_dir) / (workers if workers.startswith("devices") else f"process{index}")
    report.mkdir(parents=True, exist_ok=True)
    run = training.train(run_args.pop("model"), out="run", **extra, **run_args)
    np.savez(report / "weights.npz",
             **{v.path: np.asarray(v) for v in run.model.trainable_variables})
    (report / "report.json").write_text(json.dumps(dict(
        out=None if run.out is None else str(run.out), history=run.history,
        results=run.results, config=run.config, process_count=jax.process_count(),
        devices=len(jax.devices()), local_devices=len(jax.local_devices()),
        tensorflow_imported=sys.modules.get("tensorflow") is not None)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]),
         json.loads(sys.argv[4]) if len(sys.argv) > 4 else {})
