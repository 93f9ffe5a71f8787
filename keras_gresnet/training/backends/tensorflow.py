"""TensorFlow: ``tf.distribute``'s strategies, the loop of each, Keras'
synchronised BatchNorm, and every export format.

``"auto"``: ``MirroredStrategy`` when more than one GPU is visible,
``OneDeviceStrategy`` on the one GPU (its distributed input, what Keras'
``fit`` iterates, is prefetched to the GPU: tf.data's prefetch to device),
else (no GPU) the default strategy. ``"one_device"``: the first GPU, or
the CPU. ``"mirrored"``: one replica per GPU, or per logical CPU device
when there is no GPU (e.g. set up with
``tf.config.set_logical_device_configuration``); ``model.fit`` trains
there (:class:`MirroredFitLoop`). ``"multi_worker"``:
``MultiWorkerMirroredStrategy`` over a cluster, trained by
:mod:`~keras_gresnet.training.backends.tensorflow_multiworker` (Keras'
``fit`` does not run under it). TensorFlow is imported only when a
strategy is made.
"""

import json
import os
import signal
import threading

from keras_gresnet._cpu import cpu_devices
from keras_gresnet.training.loop import FitLoop

STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker")
# model.export's formats here, and the converters each needs as (module,
# pip package).
EXPORTS = {
    "tf_saved_model": (),
    "onnx": (("tf2onnx", "tf2onnx"), ("onnx", "onnx")),
    "litert": (),
}
SYNCHRONIZED_LAYERS = True  # sync_batchnorm is Keras' BatchNormalization(synchronized=True)
FUSED_STEPS = False  # no device pipeline here
_MIRRORED = {}  # devices -> the process's MirroredStrategy over them
_MULTI_WORKER = {}  # TF_CONFIG -> the process's MultiWorkerMirroredStrategy (one at most)


def resolve_strategy(name):
    """TensorFlow records every name as it is (``"auto"`` is decided by the
    GPUs of the machine that makes it)."""
    return name


def make_strategy(name, cluster):
    """The ``tf.distribute`` strategy ``name`` (see the module's docstring).
    TensorFlow's collective ops can be set up only once per process, so the
    multi-worker strategy is created once and reused; create it before any
    other TensorFlow op runs. It waits until every worker has joined; while
    it waits, TensorFlow ignores SIGTERM (stop it with SIGINT or SIGKILL),
    and afterwards SIGTERM stops the process again."""
    if name == "multi_worker":
        return _multi_worker_strategy(cluster)
    import tensorflow as tf

    _split_cpu(tf)
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        name = "mirrored" if len(gpus) > 1 else "one_device" if gpus else "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    devices = tuple(d.name for d in (gpus or tf.config.list_logical_devices("CPU")))
    # One MirroredStrategy per process and device set: a second one restarts
    # the collective instance keys, and its first all-reduce of another shape
    # aborts ("Shape mismatch in the collective instance 100",
    # tensorflow/tensorflow#62790).
    if devices not in _MIRRORED:
        _MIRRORED[devices] = tf.distribute.MirroredStrategy(list(devices))
    return _MIRRORED[devices]


def _split_cpu(tf):
    """Where ``KERAS_GRESNET_CPU_DEVICES=N`` is set, split the CPU into N
    logical devices (before TensorFlow lists its devices; once made, the
    split stays as it is), so that ``--strategy mirrored`` trains N
    replicas on a machine without a GPU."""
    count = cpu_devices()
    if count is None:
        return
    (cpu, *_) = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:  # TensorFlow's devices are already set up in this process
        pass


def _multi_worker_strategy(cluster):
    """The process's ``MultiWorkerMirroredStrategy`` for ``cluster``, made
    once (it sets ``TF_CONFIG``; see :func:`make_strategy`)."""
    import tensorflow as tf

    config = json.dumps(cluster.tf_config(), sort_keys=True)
    if config not in _MULTI_WORKER:
        if _MULTI_WORKER:
            raise ValueError(
                "this process already joined another cluster; TensorFlow sets up "
                "collective ops once per process (start a new process)"
            )
        os.environ["TF_CONFIG"] = config
        handler = signal.getsignal(signal.SIGTERM)
        _MULTI_WORKER[config] = tf.distribute.MultiWorkerMirroredStrategy()
        # TensorFlow's preemption notifier has now replaced the SIGTERM
        # handler with one that logs "SIGTERM caught" and carries on, so a
        # plain `kill` or a scheduler could not stop a worker. Reinstall the
        # handler Python had (by default: terminate). Every file a run writes
        # is atomic, and the job resumes from its last backup.
        if handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)
    return _MULTI_WORKER[config]


class MirroredFitLoop(FitLoop):
    """``model.fit`` under a ``tf.distribute`` strategy of one process. Keras
    keeps BatchNorm's moving statistics per replica: an evaluation first
    gives every replica replica 0's, so it measures the model that is
    saved."""

    def evaluate(self, dataset):
        if self.strategy.num_replicas_in_sync > 1:
            from keras_gresnet.training.backends.tensorflow_multiworker import (
                share_statistics,
            )

            share_statistics(self.strategy, self.model)
        return super().evaluate(dataset)


def start(name, cluster, check_folder, out):
    """The multi-worker loop on a cluster (the strategy first, before any
    other TensorFlow op), else ``model.fit``."""
    if name == "multi_worker":
        from keras_gresnet.training.backends.tensorflow_multiworker import MultiWorkerLoop

        return MultiWorkerLoop.join(make_strategy(name, cluster), cluster, check_folder, out)
    return MirroredFitLoop.start(lambda: make_strategy(name, cluster), check_folder)


def sync_batchnorm(requested, name):
    """Per-replica statistics unless asked (``None`` is ``False``), as the
    papers' multi-GPU runs did."""
    del name  # every strategy can
    return bool(requested)


def has_accelerator():
    """Whether TensorFlow sees a GPU or TPU."""
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU"))


def runtime():
    """Nothing beyond the CPU."""
    return {}
