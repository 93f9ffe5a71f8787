"""The cluster of a multi-worker run, on every Keras backend: which process
is which, and how they agree.

Configured the TensorFlow way, by ``TF_CONFIG``, on either backend that
trains on a cluster (TensorFlow, JAX). ``workers`` and ``worker_index``
(``--workers host:port,... --worker-index i``) write it for you
(:func:`resolve_cluster`). The chief is task ``chief``, or worker 0 where
there is none; on JAX it is process 0, and its address is the
coordinator's. How each backend trains there is its own module's
(:mod:`keras_gresnet.training.backends`).
"""

import dataclasses
import json
import os
import re
import socket

from keras_gresnet._checks import check_int
from keras_gresnet._text import shown

# Roles of TF_CONFIG's tasks that train; the chief, if any, counts as a worker.
TRAINING_JOBS = ("chief", "worker")
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
NO_CLUSTER = (
    "strategy='multi_worker' needs a cluster: set TF_CONFIG, or pass workers / "
    "worker_index (--workers host:port,host:port --worker-index i)"
)


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
            f"'10.0.0.1:12345,10.0.0.2:12345', got {shown(workers)}"
        )
    for item in items:
        match = _ADDRESS.match(item)
        if not match or not 0 < int(match.group(2)) < 65536:
            raise ValueError(
                f"workers: {shown(item)} is not a host:port address (port 1-65535), e.g. "
                f"'10.0.0.1:12345'"
            )
    if len(set(items)) != len(items):
        raise ValueError(f"workers lists an address twice: {shown(workers)}")
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
