"""The Keras backends a run trains on, one module each, behind one small
protocol (:class:`Backend`).

- :mod:`~keras_gresnet.training.backends.tensorflow`: ``tf.distribute``'s
  strategies: the default (single-device) one, ``one_device``,
  ``mirrored`` (``MirroredStrategy`` over this machine's GPUs, or logical
  CPUs), ``multi_worker`` (``MultiWorkerMirroredStrategy``, whose loop is
  :mod:`~keras_gresnet.training.backends.tensorflow_multiworker`);
  BatchNorm synchronised by Keras' ``synchronized=True``.
- :mod:`~keras_gresnet.training.backends.jax`: one device, ``data_parallel``
  (``mirrored`` means the same there): Keras' own
  ``keras.distribution.DataParallel`` over every device, or over every
  process's devices (``multi_worker``); BatchNorm is global by construction.
- :mod:`~keras_gresnet.training.backends.torch`: one device.

The functions here are the only place that picks a backend's module
(:func:`get`); nothing else in the package branches on
``keras.backend.backend()`` to train. A strategy a backend does not have
is refused (:func:`resolve_strategy`), never ignored.
"""

import importlib
import typing

import keras

from keras_gresnet._checks import check_choice
from keras_gresnet.layers import all_layers
from keras_gresnet.training.cluster import NO_CLUSTER

STRATEGIES = ("auto", "default", "one_device", "mirrored", "data_parallel", "multi_worker")
SINGLE_DEVICE_STRATEGIES = ("auto", "default", "one_device")
# The Keras backends that train here, each a module of this package.
NAMES = ("tensorflow", "jax", "torch")


class Backend(typing.Protocol):
    """What training asks of a Keras backend; each module of this package
    provides it (a module satisfies a protocol: PEP 544).

    Attributes:
        STRATEGIES: the strategy names it has (of :data:`STRATEGIES`).
        EXPORTS: ``{format: ((module, pip package), ...)}``: the formats
            its ``model.export`` writes here, and the converters it needs
            (:mod:`keras_gresnet.export`).
        SYNCHRONIZED_LAYERS: whether ``sync_batchnorm`` is Keras'
            ``BatchNormalization(synchronized=True)`` here (else the
            strategy itself decides the statistics' scope).
        FUSED_STEPS: whether the device pipeline's training steps can run
            as one compiled program here
            (:mod:`keras_gresnet.training.executions`).
    """

    STRATEGIES: tuple
    EXPORTS: dict
    SYNCHRONIZED_LAYERS: bool
    FUSED_STEPS: bool

    def resolve_strategy(self, name):
        """The name ``name`` (one this backend has; ``"auto"`` without a
        cluster) is recorded as: its own name for the same strategy."""

    def make_strategy(self, name, cluster):
        """The strategy of the resolved ``name``; ``cluster`` (a
        :class:`~keras_gresnet.training.cluster.Cluster`) for
        ``"multi_worker"``."""

    def start(self, name, cluster, check_folder, out):
        """``(loop, resumed)``: the
        :class:`~keras_gresnet.training.loop.TrainingLoop` of strategy
        ``name``, once the run folder ``out`` is checked
        (``check_folder()``: ``True`` when the run resumes; on a cluster the
        chief checks it and every process learns the verdict)."""

    def sync_batchnorm(self, requested, name):
        """``sync_batchnorm`` (``None``: the strategy's own way, ``True``,
        ``False``) as the bool a run records under strategy ``name``, or a
        one-line ``ValueError`` where the backend cannot do it."""

    def has_accelerator(self):
        """Whether the backend computes on a GPU or TPU here."""

    def runtime(self):
        """What a timing of this backend means nothing without, beyond the
        CPU (recorded in ``results.json``): e.g. PyTorch's thread count."""


def get(backend=None) -> Backend:
    """The module of ``backend`` (default: Keras' current one)."""
    backend = backend or keras.backend.backend()
    if backend not in NAMES:
        raise ValueError(f"training runs on the Keras backends {', '.join(NAMES)}, not "
                         f"{backend!r}: set KERAS_BACKEND to one of them")
    return importlib.import_module(f"{__name__}.{backend}")


def backend_strategies(backend=None):
    """The strategy names ``backend`` (default: Keras' current one) has: one
    device on a backend that does not train here."""
    backend = backend or keras.backend.backend()
    return get(backend).STRATEGIES if backend in NAMES else SINGLE_DEVICE_STRATEGIES


def resolve_strategy(name, cluster=None, backend=None):
    """The strategy name ``name`` stands for on ``backend`` (default: Keras'
    current one): ``"auto"`` with a cluster is ``"multi_worker"``, which needs
    one; then the backend's own name for it (JAX's ``"mirrored"``, and its
    ``"auto"`` with more than one device, are ``"data_parallel"``). A name
    the backend does not have is refused, naming what it has."""
    check_choice(name, "strategy", STRATEGIES)
    backend = backend or keras.backend.backend()
    if name == "auto" and cluster is not None:
        name = "multi_worker"
    if name not in backend_strategies(backend):
        raise ValueError(
            f"strategy={name!r} is not available on the {backend} backend, which has "
            f"{list(backend_strategies(backend))} (KERAS_BACKEND=tensorflow has "
            f"{list(backend_strategies('tensorflow'))})"
        )
    if name == "multi_worker" and cluster is None:
        raise ValueError(NO_CLUSTER)
    return get(backend).resolve_strategy(name)


def make_strategy(name="auto", cluster=None):
    """The strategy ``name`` of Keras' current backend: a ``tf.distribute``
    strategy on TensorFlow, else
    :class:`~keras_gresnet.training.loop.SingleDevice` or JAX's
    :class:`~keras_gresnet.training.backends.jax.DataParallel`.

    ``"auto"``: the multi-worker strategy when a cluster is configured, else
    the data-parallel one when more than one GPU (TensorFlow) or device
    (JAX) is visible, else one device. ``"multi_worker"``: ``cluster`` (a
    :class:`~keras_gresnet.training.cluster.Cluster`) is required; the
    process joins it (once per process, before anything else runs on the
    backend, and it waits for every worker; see the backend's module).
    """
    return get().make_strategy(resolve_strategy(name, cluster), cluster)


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


def exports():
    """``{format: {backend: ((module, pip package), ...)}}``: which backend's
    ``model.export`` writes each format, and what it needs there."""
    table = {}
    for backend in NAMES:
        for format, modules in get(backend).EXPORTS.items():
            table.setdefault(format, {})[backend] = modules
    return table
