"""Strategies by name, on each Keras backend, and the cluster of a
multi-worker run.

:func:`make_strategy` makes the strategy a run trains under. On TensorFlow:
the default (single-device) one, ``OneDeviceStrategy``, ``MirroredStrategy``
over this machine's GPUs (or logical CPUs), or ``MultiWorkerMirroredStrategy``
over a cluster of processes (:mod:`keras_gresnet.training.multiworker` trains
there). On JAX: one device, ``data_parallel`` (``mirrored`` means the same
there): Keras' own ``keras.distribution.DataParallel`` over every JAX device,
or ``multi_worker``: the same over the devices of every process of a cluster,
joined by ``keras.distribution.initialize`` (:func:`join_jax_cluster`;
:mod:`keras_gresnet.training.multiprocess` trains there). On PyTorch: one
device. A strategy a backend does not have is refused
(:data:`BACKEND_STRATEGIES`), never ignored.

Cluster: configured the TensorFlow way, by ``TF_CONFIG``, on either backend.
``workers`` and ``worker_index`` (``--workers host:port,... --worker-index i``)
write it for you (:func:`resolve_cluster`). The chief is task ``chief``, or
worker 0 where there is none; on JAX it is process 0, and its address is the
coordinator's.
"""

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import threading

import keras

from keras_gresnet._checks import check_choice, check_int
from keras_gresnet.layers import all_layers

STRATEGIES = ("auto", "default", "one_device", "mirrored", "data_parallel", "multi_worker")
# What each Keras backend has (JAX's "mirrored" is its "data_parallel").
BACKEND_STRATEGIES = {
    "tensorflow": ("auto", "default", "one_device", "mirrored", "multi_worker"),
    "jax": ("auto", "default", "one_device", "mirrored", "data_parallel", "multi_worker"),
}
SINGLE_DEVICE_STRATEGIES = ("auto", "default", "one_device")
# Roles of TF_CONFIG's tasks that train; the chief, if any, counts as a worker.
TRAINING_JOBS = ("chief", "worker")
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
NO_CLUSTER = (
    "strategy='multi_worker' needs a cluster: set TF_CONFIG, or pass workers / "
    "worker_index (--workers host:port,host:port --worker-index i)"
)
_MIRRORED = {}  # devices -> the process's MirroredStrategy over them
_MULTI_WORKER = {}  # TF_CONFIG -> the process's MultiWorkerMirroredStrategy (one at most)
_JAX_CLUSTER = []  # the Cluster this process joined on JAX (one at most)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """One process's view of the cluster, as ``TF_CONFIG`` describes it.

    Attributes:
        jobs: ``{"chief": [address], "worker": [address, ...]}``.
        task_type: ``"chief"`` or ``"worker"``.
        task_index: this process's index within its job.
    """

    jobs: dict
    task_type: str
    task_index: int

    @property
    def num_workers(self):
        return sum(len(self.jobs.get(job, ())) for job in TRAINING_JOBS)

    @property
    def is_chief(self):
        """The chief task, or worker 0 when there is no chief."""
        if "chief" in self.jobs:
            return self.task_type == "chief"
        return self.task_index == 0

    @property
    def addresses(self):
        """Every training task's address, the chief's first: on JAX, process
        ``i`` is ``addresses[i]``, and process 0 (the chief) coordinates."""
        return tuple(self.jobs.get("chief", ())) + tuple(self.jobs.get("worker", ()))

    @property
    def process_index(self):
        """This task's position in :attr:`addresses` (its JAX process id)."""
        if self.task_type == "chief":
            return 0
        return len(self.jobs.get("chief", ())) + self.task_index

    def tf_config(self):
        """The ``TF_CONFIG`` dict of this process."""
        return {"cluster": {job: list(addresses) for job, addresses in self.jobs.items()},
                "task": {"type": self.task_type, "index": self.task_index}}


def parse_workers(workers):
    """``"host:port,host:port"`` (or a list of them) -> a tuple of addresses."""
    items = workers.split(",") if isinstance(workers, str) else workers
    try:
        items = [str(item).strip() for item in items]
    except TypeError:
        items = None
    if not items or not all(items):
        raise ValueError(
            f"workers must be host:port addresses separated by commas, e.g. "
            f"'10.0.0.1:12345,10.0.0.2:12345', got {workers!r}"
        )
    for item in items:
        match = _ADDRESS.match(item)
        if not match or not 0 < int(match.group(2)) < 65536:
            raise ValueError(
                f"workers: {item!r} is not a host:port address (port 1-65535), e.g. "
                f"'10.0.0.1:12345'"
            )
    if len(set(items)) != len(items):
        raise ValueError(f"workers lists an address twice: {workers!r}")
    return tuple(items)


def local_workers(count):
    """``"127.0.0.1:p1,127.0.0.1:p2,..."``: ``count`` ports that were free a
    moment ago, for a cluster on this machine (tests, benchmarks, trying it)."""
    check_int(count, "count", 1)
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in sockets)
    finally:
        for s in sockets:
            s.close()


def _cluster_from_tf_config(text):
    try:
        spec = json.loads(text)
        jobs, task = spec["cluster"], spec["task"]
        task_type, task_index = task["type"], task["index"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"TF_CONFIG must be JSON like {{\"cluster\": {{\"worker\": [\"host:port\", "
            f"...]}}, \"task\": {{\"type\": \"worker\", \"index\": 0}}}}; it is "
            f"{text!r} ({error})"
        ) from None
    if not isinstance(jobs, dict):
        raise ValueError(f"TF_CONFIG's cluster must map job names to address lists, "
                         f"got {jobs!r}")
    others = sorted(set(jobs) - set(TRAINING_JOBS))
    if others:
        raise ValueError(
            f"TF_CONFIG's cluster has jobs {others}: MultiWorkerMirroredStrategy "
            f"trains with 'chief' and 'worker' tasks only"
        )
    jobs = {job: parse_workers(addresses) for job, addresses in jobs.items()}
    if len(jobs.get("chief", ())) > 1:
        raise ValueError(f"TF_CONFIG's cluster has {len(jobs['chief'])} chiefs; at most "
                         f"one is allowed")
    if task_type not in jobs:
        raise ValueError(f"TF_CONFIG's task type {task_type!r} is not a job of its "
                         f"cluster {sorted(jobs)}")
    if not isinstance(task_index, int) or not 0 <= task_index < len(jobs[task_type]):
        raise ValueError(
            f"TF_CONFIG's task index must be 0..{len(jobs[task_type]) - 1} for job "
            f"{task_type!r}, got {task_index!r}"
        )
    return Cluster(jobs, task_type, task_index)


def resolve_cluster(workers=None, worker_index=None, environ=None):
    """The :class:`Cluster` of this process, or ``None`` when none is
    configured.

    ``workers`` (``"host:port,..."``, the same list on every worker) with
    ``worker_index`` (this worker's position in it) describe a cluster of
    plain workers, worker 0 being the chief. Without them, ``TF_CONFIG`` is
    read from ``environ`` (default ``os.environ``). Giving both, differently,
    is an error.
    """
    environ = os.environ if environ is None else environ
    if (workers is None) != (worker_index is None):
        raise ValueError(
            "workers and worker_index go together: pass --workers host:port,... "
            "--worker-index i (the same list on every worker, i its position in it)"
        )
    from_env = environ.get("TF_CONFIG")
    if workers is None:
        return _cluster_from_tf_config(from_env) if from_env else None
    addresses = parse_workers(workers)
    index = check_int(worker_index, "worker_index", 0)
    if index >= len(addresses):
        raise ValueError(
            f"worker_index must be 0..{len(addresses) - 1} (a position in workers), "
            f"got {worker_index!r}"
        )
    cluster = Cluster({"worker": addresses}, "worker", index)
    if from_env and _cluster_from_tf_config(from_env) != cluster:
        raise ValueError(
            "TF_CONFIG is set and describes another cluster than workers/worker_index; "
            "give one of them (unset TF_CONFIG to use --workers)"
        )
    return cluster


def backend_strategies(backend=None):
    """The strategy names ``backend`` (default: Keras' current one) has."""
    backend = backend or keras.backend.backend()
    return BACKEND_STRATEGIES.get(backend, SINGLE_DEVICE_STRATEGIES)


def resolve_strategy(name, cluster=None, backend=None):
    """The strategy name ``name`` stands for on ``backend`` (default: Keras'
    current one): ``"auto"`` with a cluster is ``"multi_worker"``, which needs
    one; JAX's ``"mirrored"``, and its ``"auto"`` with more than one device,
    are ``"data_parallel"``. A name the backend does not have is refused,
    naming what it has."""
    check_choice(name, "strategy", STRATEGIES)
    backend = backend or keras.backend.backend()
    if name == "auto" and cluster is not None:
        name = "multi_worker"
    if name not in backend_strategies(backend):
        raise ValueError(
            f"strategy={name!r} is not available on the {backend} backend, which has "
            f"{list(backend_strategies(backend))} (KERAS_BACKEND=tensorflow has "
            f"{list(BACKEND_STRATEGIES['tensorflow'])})"
        )
    if name == "multi_worker" and cluster is None:
        raise ValueError(NO_CLUSTER)
    if backend == "jax" and (name == "mirrored" or (
            name == "auto" and len(keras.distribution.list_devices()) > 1)):
        name = "data_parallel"  # recorded as such: its BatchNorm is global
    return name


class WorkerLost(RuntimeError):
    """Another worker died or stopped answering during a collective op."""

    @classmethod
    def from_error(cls, error):
        """The :class:`WorkerLost` of the collective op's ``error``."""
        text = str(error).strip()
        first = text.splitlines()[0] if text else type(error).__name__
        return cls(
            f"lost contact with another worker ({type(error).__name__}: {first}). Start "
            f"every worker again with the same command: the run resumes from the chief's "
            f"last backup"
        )


def agree_on_folder(cluster, check_folder, out, broadcast):
    """The chief calls ``check_folder()`` (``True``: the run in ``out``
    resumes; ``ValueError``: refused) and every worker learns its verdict
    through ``broadcast(accepted, resumed)``, which returns the chief's two
    values on every worker. Returns whether the run resumes; raises the
    chief's refusal on the chief, and a pointer to it on the others."""
    refusal, resumed = None, False
    if cluster.is_chief:
        try:
            resumed = check_folder()
        except ValueError as error:
            refusal = error
    accepted, resumed = broadcast(refusal is None, bool(resumed))
    if refusal is not None:
        raise refusal
    if not accepted:
        raise ValueError(f"the chief refused the run folder {str(out)!r}; its error "
                         f"message says why")
    return bool(resumed)


def joined_jax_cluster():
    """Whether this process joined a JAX cluster (:func:`join_jax_cluster`)."""
    return bool(_JAX_CLUSTER)


class SingleDevice:
    """The strategy of a run on one device of a backend without
    ``tf.distribute`` (JAX, PyTorch): one replica, no scope of its own."""

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


class DataParallel:
    """Keras' own data parallelism (``keras.distribution.DataParallel``, JAX):
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


def sync_batchnorm(model, synchronized=True):
    """Make every BatchNormalization of ``model`` compute its batch
    statistics over the global batch (an all-reduce over all replicas of all
    workers; Keras' ``synchronized=True``, TensorFlow's strategies only) or,
    with ``False``, over each replica's batch, as the papers' multi-GPU runs
    did. Then N workers train as one process does at the same global batch.
    Returns the number of layers changed."""
    layers = [l for l in all_layers(model) if isinstance(l, keras.layers.BatchNormalization)]
    for layer in layers:
        layer.synchronized = bool(synchronized)
    return len(layers)


def make_strategy(name="auto", cluster=None):
    """The strategy ``name`` of Keras' current backend (see the module's
    docstring): a ``tf.distribute`` strategy on TensorFlow, else
    :class:`SingleDevice` or :class:`DataParallel`.

    ``"auto"``: ``MultiWorkerMirroredStrategy`` when a cluster is configured,
    else ``MirroredStrategy`` when more than one GPU is visible, else the
    default (single-device) strategy. ``"mirrored"``: one replica per GPU, or
    per logical CPU device when there is no GPU (e.g. set up with
    ``tf.config.set_logical_device_configuration``). ``"multi_worker"``:
    ``cluster`` (a :class:`Cluster`, :func:`resolve_cluster`) is required;
    on JAX it is :class:`DataParallel` over every process's devices, once
    this process has joined the cluster (:func:`join_jax_cluster`).
    TensorFlow's collective ops can be set up only once per process, so the
    multi-worker strategy is created once and reused; create it before any
    other TensorFlow op runs. It waits until every worker has joined; while
    it waits, TensorFlow ignores SIGTERM (stop it with SIGINT or SIGKILL),
    and afterwards SIGTERM stops the process again.
    """
    name = resolve_strategy(name, cluster)
    backend = keras.backend.backend()
    if backend == "jax" and name == "multi_worker":
        join_jax_cluster(cluster)
        return DataParallel(auto_shard_dataset=False)
    if backend != "tensorflow":
        return DataParallel() if name == "data_parallel" else SingleDevice()
    if name == "multi_worker":
        return _multi_worker_strategy(cluster)
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        name = "mirrored" if len(gpus) > 1 else "default"
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


def join_jax_cluster(cluster):
    """Join ``cluster`` as JAX process ``cluster.process_index`` of
    ``len(cluster.addresses)``: ``keras.distribution.initialize`` (that is,
    ``jax.distributed.initialize``, whose coordinator is the chief's address;
    CPU devices talk through JAX's CPU collectives, gloo). Once per process,
    before JAX has run anything; it waits for every process (JAX's timeout:
    5 minutes). Then ``jax.devices()`` lists every process's devices."""
    if _JAX_CLUSTER:
        if _JAX_CLUSTER[0] != cluster:
            raise ValueError(
                "this process already joined another cluster; JAX joins one cluster per "
                "process (start a new process)"
            )
        return
    keras.distribution.initialize(
        job_addresses=",".join(cluster.addresses), num_processes=len(cluster.addresses),
        process_id=cluster.process_index)
    _JAX_CLUSTER.append(cluster)
