"""Run by tests/test_training.py in a fresh process: TensorFlow's logical
devices must be configured before it starts. Trains the same model on 2
logical CPU replicas (MirroredStrategy, 32 per replica), on one device
(batch 64, the same global batch), and on the 2 replicas with synchronised
BatchNorm; prints the histories, and whether the replicas' copies of every
trainable variable are equal, as JSON."""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)

from keras_gresnet import training  # noqa: E402

out = sys.argv[1]
common = dict(model_kwargs=dict(depth=2), dataset="fashion_mnist", epochs=3,
              max_train_examples=4096, max_test_examples=1000, verbose=0, seed=3)
mirrored = training.train("gresnet_mlp", strategy="mirrored", batch_size=32,
                          out=f"{out}/mirrored", **common)
# Every replica holds the same trainable weights (BatchNorm's moving
# statistics are per replica in Keras, like the papers' per-GPU BN).
replicas_trainable_equal = all(
    all(np.array_equal(np.asarray(v.values[0]), np.asarray(c)) for c in v.values[1:])
    for v in (w.value for w in mirrored.model.trainable_weights)
)
single = training.train("gresnet_mlp", strategy="default", batch_size=64,
                        out=f"{out}/single", **common)
synchronized = training.train("gresnet_mlp", strategy="mirrored", batch_size=32,
                              sync_batchnorm=True, out=f"{out}/synchronized", **common)
print(json.dumps(dict(
    replicas=[mirrored.config["replicas"], single.config["replicas"]],
    global_batch=[mirrored.config["global_batch_size"], single.config["global_batch_size"]],
    replicas_trainable_equal=replicas_trainable_equal,
    mirrored=mirrored.history, single=single.history, synchronized=synchronized.history,
    results=[mirrored.results, single.results],
    synchronized_results=synchronized.results,
    # What the published model.keras of each mirrored run scores, reloaded.
    reloaded=[training.evaluate(f"{out}/{run}")["test_accuracy"]
              for run in ("mirrored", "synchronized")],
)))
