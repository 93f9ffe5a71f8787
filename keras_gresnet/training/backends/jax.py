"""JAX: one device, or Keras' own ``keras.distribution.DataParallel`` over
this process's devices (``data_parallel``; ``mirrored`` means the same here)
or over every process's devices (``multi_worker``), all with Keras' own
``model.fit``. One SPMD program, so BatchNorm's statistics cover the global
batch: ``sync_batchnorm`` is always on there, and off on one device.

``"auto"`` is ``data_parallel`` where JAX sees more than one device. Every
batch must split evenly over the devices (:func:`check_even_batches`,
before anything is written).

Across processes (``multi_worker``): the cluster is the TensorFlow path's
(``--workers host:port,... --worker-index i``, or ``TF_CONFIG``): process
``i`` is the ``i``-th training task, the chief first, and the chief's
address is JAX's coordinator (:func:`join_jax_cluster`,
``keras.distribution.initialize``). Between CPU hosts JAX talks through its
gloo collectives; between GPU hosts through NCCL.

Data: every process builds the same seeded pipeline of global batches and
feeds Keras its share of each (:func:`keras_gresnet.data.process_share`:
rows ``i * n // P .. (i + 1) * n // P`` of every batch of ``n``, a partial
last batch too); Keras assembles them into one global batch. So one step of
the cluster sees exactly the examples of one process at the same global
batch. Each process needs the dataset on its own disk.

State: as on TensorFlow's cluster, only the chief reads and writes the run
folder. It checks the folder and tells every process its verdict; after
building (and, resuming, loading the backup) it sends its weights,
optimizer state and first epoch to every process
(``jax.experimental.multihost_utils.broadcast_one_to_all``). The weights
are replicated on every device, so the chief saves them as one process
does. So the processes need no shared file system, and a restarted job
resumes from the chief's last backup. JAX is imported only when needed.
"""

import contextlib

import keras
import numpy as np

from keras_gresnet import data
from keras_gresnet.training.cluster import WorkerLost, agree_on_folder
from keras_gresnet.training.loop import FitLoop, SingleDevice, refuse_sync_batchnorm

STRATEGIES = ("auto", "default", "one_device", "mirrored", "data_parallel", "multi_worker")
# model.export's formats here, and the converters each needs as (module,
# pip package). JAX has no LiteRT converter in Keras.
EXPORTS = {
    "tf_saved_model": (("tensorflow", "tensorflow"),),
    "onnx": (("jax2onnx", "jax2onnx"),),
}
SYNCHRONIZED_LAYERS = False  # the strategy decides: global under DataParallel
FUSED_STEPS = True  # keras_gresnet.training.executions: the device pipeline's steps as one program
_CLUSTER = []  # the Cluster this process joined (one at most)

class DataParallel:
    """Keras' own data parallelism (``keras.distribution.DataParallel``):
    the model's variables replicated on every device, each global batch split
    across them, one SPMD program. So BatchNorm's batch statistics cover the
    global batch (as ``sync_batchnorm`` does on TensorFlow). Build, compile
    and fit inside :meth:`scope`. ``auto_shard_dataset=False``: each process
    of a cluster feeds its own share of every global batch (Keras would
    split only a ``tf.data`` stream, and not a partial last batch evenly)."""

    def __init__(self, devices=None, auto_shard_dataset=True):
        self.distribution = keras.distribution.DataParallel(
            devices=devices, auto_shard_dataset=auto_shard_dataset)
        self.num_replicas_in_sync = len(self.distribution.device_mesh.devices.reshape(-1))

    def scope(self):
        return self.distribution.scope()

    @staticmethod
    @contextlib.contextmanager
    def outside():
        """No Keras distribution in force, e.g. for what one process of a
        cluster does alone: under one, creating or assigning a variable
        places a global array, which on JAX is a collective op that every
        process must join (Keras' saving creates a throw-away optimizer)."""
        current = keras.distribution.distribution()
        keras.distribution.set_distribution(None)
        try:
            yield
        finally:
            keras.distribution.set_distribution(current)


def resolve_strategy(name):
    """``"mirrored"``, and ``"auto"`` with more than one device, are
    ``"data_parallel"`` (recorded as such: its BatchNorm is global)."""
    if name == "mirrored" or (name == "auto" and len(keras.distribution.list_devices()) > 1):
        return "data_parallel"
    return name


def make_strategy(name, cluster):
    """:class:`DataParallel` over this process's devices
    (``"data_parallel"``) or, once this process joined ``cluster``
    (:func:`join_jax_cluster`), over every process's (``"multi_worker"``);
    else one device."""
    if name == "multi_worker":
        join_jax_cluster(cluster)
        return DataParallel(auto_shard_dataset=False)
    return DataParallel() if name == "data_parallel" else SingleDevice()


def join_jax_cluster(cluster):
    """Join ``cluster`` as JAX process ``cluster.process_index`` of
    ``len(cluster.addresses)``: ``keras.distribution.initialize`` (that is,
    ``jax.distributed.initialize``, whose coordinator is the chief's address;
    CPU devices talk through JAX's CPU collectives, gloo). Once per process,
    before JAX has run anything; it waits for every process (JAX's timeout:
    5 minutes). Then ``jax.devices()`` lists every process's devices."""
    if _CLUSTER:
        if _CLUSTER[0] != cluster:
            raise ValueError(
                "this process already joined another cluster; JAX joins one cluster per "
                "process (start a new process)"
            )
        return
    keras.distribution.initialize(
        job_addresses=",".join(cluster.addresses), num_processes=len(cluster.addresses),
        process_id=cluster.process_index)
    _CLUSTER.append(cluster)


def joined_cluster():
    """Whether this process joined a JAX cluster (:func:`join_jax_cluster`)."""
    return bool(_CLUSTER)


def start(name, cluster, check_folder, out):
    """The loop of strategy ``name``: across processes, on this process's
    devices, or on one device."""
    if name == "multi_worker":
        return MultiProcessLoop.join(cluster, check_folder, out)
    loop = DataParallelLoop if name == "data_parallel" else FitLoop
    return loop.start(lambda: make_strategy(name, cluster), check_folder)


def sync_batchnorm(requested, name):
    """Global statistics under :class:`DataParallel` (``False`` refused: one
    SPMD program cannot keep per-replica statistics); one device: nothing to
    synchronise."""
    if name in ("data_parallel", "multi_worker"):
        if requested is False:
            raise ValueError(
                f"sync_batchnorm=False is not available with strategy={name!r} on JAX "
                f"(Keras' DataParallel, one SPMD program): its BatchNorm statistics always "
                f"cover the global batch; per-replica statistics need "
                f"KERAS_BACKEND=tensorflow with strategy='mirrored' or 'multi_worker'"
            )
        return True
    return refuse_sync_batchnorm(requested, name, "jax")


def has_accelerator():
    """Whether JAX computes on a GPU or TPU."""
    import jax

    return jax.default_backend() != "cpu"


def check_even_batches(sizes, global_batch_size, devices):
    """Refuse a set of ``sizes`` (``{"training": examples, ...}``) whose last,
    partial batch does not split evenly over ``devices``: Keras'
    ``DataParallel`` gives every device an equal share of each batch (JAX's
    sharding cannot split 2 examples over 3 devices)."""
    for name, size in sizes.items():
        remainder = size % global_batch_size
        if remainder % devices:
            raise ValueError(
                f"the {name} set's last batch holds {remainder} of its {size} examples, "
                f"which does not split evenly over {devices} devices (Keras' DataParallel "
                f"gives each an equal share); choose sizes (max_train_examples, "
                f"max_test_examples, validation_split) or batch_size so that every last "
                f"batch is a multiple of {devices}"
            )


class DataParallelLoop(FitLoop):
    """``model.fit`` under :class:`DataParallel`: every batch must split
    evenly over the devices, and Keras' distribution is in force while JAX
    runs the model."""

    def check_data(self, num_examples, global_batch_size, evaluated=None):
        check_even_batches({"training": num_examples, **(evaluated or {})},
                           global_batch_size, self.strategy.num_replicas_in_sync)

    def _scope(self):
        return self.strategy.scope()


# Keras' callback hooks, which OutsideDistribution forwards.
_HOOKS = tuple(f"on_{stage}_{event}" for stage in ("train", "test", "predict")
               for event in ("begin", "end", "batch_begin", "batch_end")) + (
    "on_epoch_begin", "on_epoch_end")
# What JAX's errors say when a peer process died or stopped answering (gloo's
# CPU collectives; the coordination service's heartbeat).
_LOST_PEER = ("Gloo ", "by peer", "heartbeat timeout", "UNAVAILABLE: ", "DEADLINE_EXCEEDED: ")


@contextlib.contextmanager
def watching_peers():
    """Turn JAX's error of a collective op whose peer died into
    :class:`WorkerLost`: a ``JaxRuntimeError`` such as gloo's "Connection
    closed by peer", or the ``ValueError`` JAX raises when the cross-process
    check of a ``device_put`` fails so ("Gloo AllGather failed ... Connection
    reset by peer"). Any other error passes unchanged."""
    import jax

    try:
        yield
    except (jax.errors.JaxRuntimeError, ValueError) as error:
        if not any(sign in str(error) for sign in _LOST_PEER):
            raise
        raise WorkerLost.from_error(error) from None


def broadcast_from_chief(values):
    """Process 0's ``values`` (a list of arrays or numbers, the same shapes
    and dtypes in every process), on every process."""
    from jax.experimental import multihost_utils

    with watching_peers():
        return multihost_utils.broadcast_one_to_all([np.asarray(v) for v in values])


def state_variables(model):
    """``model``'s variables and its optimizer's, each once, in a fixed order
    (the same for two models built from one config)."""
    return list({id(v): v for v in model.variables + model.optimizer.variables}.values())


class OutsideDistribution(keras.callbacks.Callback):
    """``callback``, its hooks run with no Keras distribution in force
    (:meth:`DataParallel.outside`): for a callback only the chief runs, such
    as the epoch backup, whose saving would otherwise start a collective op
    that no other process joins."""

    def __init__(self, callback):
        super().__init__()
        self.callback = callback

    def set_model(self, model):
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.callback.set_params(params)


def _forward(hook):
    def forward(self, *args, **kwargs):
        with DataParallel.outside():
            return getattr(self.callback, hook)(*args, **kwargs)

    forward.__name__ = hook
    return forward


for _hook in _HOOKS:
    setattr(OutsideDistribution, _hook, _forward(_hook))


class MultiProcessLoop(DataParallelLoop):
    """What :func:`keras_gresnet.training.train` does on a JAX cluster: join
    it, agree on the run folder, give every process the chief's state, then
    :class:`DataParallelLoop`'s ``fit`` and
    ``evaluate``, each process feeding its share of every batch. Made by
    :meth:`join`."""

    def __init__(self, strategy, chief, index, count):
        super().__init__(strategy)
        self.chief, self.index, self.count = chief, index, count
        self._shares = {}
        self._restored = None  # the chief's backup, as arrays, for prepare()

    @classmethod
    def join(cls, cluster, check_folder, out):
        """Join ``cluster`` (before JAX has run anything); the chief calls
        ``check_folder()`` (``True``: the run in ``out`` resumes;
        ``ValueError``: refused) and every process learns its verdict.
        Returns ``(loop, resumed)``."""
        strategy = make_strategy("multi_worker", cluster)
        resumed = agree_on_folder(cluster, check_folder, out,
                                  lambda *verdict: broadcast_from_chief(list(verdict)))
        loop = cls(strategy, cluster.is_chief, cluster.process_index, len(cluster.addresses))
        return loop, resumed

    def restore(self, backup, model, resumed):
        """The chief loads the newest checkpoint of ``backup`` when the run
        ``resumed``, into a copy of ``model`` on its own devices (assigning
        to ``model``'s global arrays alone would be a collective op that the
        other processes do not join); :meth:`prepare` gives the values to
        every process. Returns the checkpoint's epoch count (0 if none, and
        on the other processes)."""
        if not (self.chief and resumed):
            return 0
        with DataParallel.outside():
            copy = model.__class__.from_config(model.get_config())
            copy.compile(optimizer=keras.optimizers.deserialize(
                keras.optimizers.serialize(model.optimizer)))
            copy.optimizer.build(copy.trainable_variables)
            epoch = backup.restore(copy)
            values = [np.asarray(v) for v in state_variables(copy)]
        expected = [tuple(v.shape) for v in state_variables(model)]
        if [v.shape for v in values] != expected:
            raise RuntimeError(f"the copy of the model that loaded {backup.folder} has other "
                               f"variables than the model")
        self._restored = values
        return epoch

    def chief_callbacks(self, callbacks):
        """``callbacks`` that only the chief runs, each run outside the
        distribution (:class:`OutsideDistribution`)."""
        return [OutsideDistribution(callback) for callback in callbacks]

    def prepare(self, model, initial_epoch):
        """Take the built, compiled ``model`` and give every process the
        chief's weights, optimizer state (its backup's, when resuming) and
        ``initial_epoch``; returns that epoch."""
        self.model = model
        variables = state_variables(model)
        values = self._restored or [np.asarray(v) for v in variables]
        received = broadcast_from_chief([np.int32(initial_epoch)] + values)
        with self.strategy.scope(), watching_peers():  # the same values everywhere
            for variable, value in zip(variables, received[1:]):
                variable.assign(value)
        self._restored = None
        return int(received[0])

    def _share(self, dataset):
        """This process's share of every batch of ``dataset`` (made once per
        dataset)."""
        if dataset is None:
            return None
        key = id(dataset)
        if key not in self._shares:
            self._shares[key] = (dataset, data.process_share(dataset, self.index, self.count))
        return self._shares[key][1]

    def evaluate(self, dataset):
        """``{"loss", "accuracy"}`` over ``dataset``'s global batches, every
        process feeding its share."""
        with watching_peers():
            return super().evaluate(self._share(dataset))

    def fit(self, dataset, *, validation_data, verbose, **kwargs):
        """``model.fit`` over this process's shares; only the chief shows
        progress.

        Raises:
            WorkerLost: another process died or stopped answering.
        """
        with watching_peers():
            super().fit(self._share(dataset), validation_data=self._share(validation_data),
                        verbose=verbose if self.chief else 0, **kwargs)


def runtime():
    """Nothing beyond the CPU."""
    return {}
