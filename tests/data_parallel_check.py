"""Run by tests/test_backends.py in a fresh process: JAX's devices must be
configured before it starts. On 2 virtual CPU devices
(``--xla_force_host_platform_device_count=2``), trains the same model with
``strategy="data_parallel"`` (Keras' ``keras.distribution.DataParallel``, 32
per replica) and on one device (batch 64, the same global batch); prints the
histories, the results, the reloaded ``model.keras``'s test accuracy,
where the trained variables live, and the refusal of a test set whose last
batch does not split over the devices, as JSON."""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import keras  # noqa: E402

from keras_gresnet import training  # noqa: E402

out = sys.argv[1]
common = dict(model_kwargs=dict(depth=2), dataset="fashion_mnist", epochs=2,
              max_train_examples=2048, max_test_examples=512, verbose=0, seed=3)
parallel = training.train("gresnet_mlp", strategy="data_parallel", batch_size=32,
                          out=f"{out}/parallel", **common)
devices = sorted({str(d) for v in parallel.model.trainable_variables
                  for d in v.value.sharding.device_set})
mirrored_name, auto_name = (
    training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2), strategy=name)["strategy"]
    for name in ("mirrored", "auto"))
single = training.train("gresnet_mlp", strategy="default", batch_size=64,
                        out=f"{out}/single", **common)
# One step each: the difference the arithmetic bounds (training then feeds
# it back, chaotically).
one_step = dict(common, epochs=1, max_train_examples=64)
first = [training.train("gresnet_mlp", strategy=strategy, batch_size=batch,
                        out=f"{out}/{strategy}-one-step", **one_step).history[0]["loss"]
         for strategy, batch in (("data_parallel", 32), ("default", 64))]
reloaded = keras.saving.load_model(f"{out}/parallel/model.keras")
reloaded.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
test = training.test_data(parallel.config)[0]
# 511 test examples: a last batch of 63, which 2 devices cannot share evenly.
try:
    training.train("gresnet_mlp", strategy="data_parallel", batch_size=32,
                   out=f"{out}/uneven", **dict(common, max_test_examples=511))
    uneven = None
except ValueError as error:
    uneven = str(error)
print(json.dumps(dict(
    uneven_refusal=uneven, uneven_folder_exists=os.path.exists(f"{out}/uneven"),
    jax_devices=len(jax.devices()), variable_devices=devices, mirrored_is=mirrored_name,
    auto_is=auto_name,
    replicas=[parallel.config["replicas"], single.config["replicas"]],
    global_batch=[parallel.config["global_batch_size"], single.config["global_batch_size"]],
    sync_batchnorm=parallel.config["sync_batchnorm"],
    parallel=parallel.history, single=single.history, first_step_loss=first,
    results=[parallel.results, single.results],
    reloaded_accuracy=float(reloaded.evaluate(test, verbose=0, return_dict=True)["accuracy"]),
)))
