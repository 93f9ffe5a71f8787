"""Training across processes on JAX: the loop of ``strategy="multi_worker"``
under ``KERAS_BACKEND=jax``, Keras' own ``model.fit`` over
``keras.distribution.DataParallel`` spanning the devices of every process.

The cluster is the TensorFlow path's (``--workers host:port,...
--worker-index i``, or ``TF_CONFIG``): process ``i`` is the ``i``-th
training task, the chief first, and the chief's address is JAX's
coordinator (:func:`~keras_gresnet.training.strategies.join_jax_cluster`,
``keras.distribution.initialize``). Between CPU hosts JAX talks through its
gloo collectives; between GPU hosts through NCCL.

Data: every process builds the same seeded pipeline of global batches and
feeds Keras its share of each (:func:`keras_gresnet.data.process_share`:
rows ``i * n // P .. (i + 1) * n // P`` of every batch of ``n``, a partial
last batch too); Keras assembles them into one global batch. So one step of
the cluster sees exactly the examples of one process at the same global
batch, and BatchNorm's statistics cover the global batch (one SPMD
program). Every batch must split evenly over all devices
(:func:`~keras_gresnet.training.fitting.check_even_batches`, before
anything is written). Each process needs the dataset on its own disk.

State: as in :mod:`keras_gresnet.training.multiworker`, only the chief
reads and writes the run folder. It checks the folder and tells every
process its verdict; after building (and, resuming, loading the backup) it
sends its weights, optimizer state and first epoch to every process
(``jax.experimental.multihost_utils.broadcast_one_to_all``). The weights
are replicated on every device, so the chief saves them as one process
does. So the processes need no shared file system, and a restarted job
resumes from the chief's last backup.
"""

import contextlib

import keras
import numpy as np

from keras_gresnet import data
from keras_gresnet.training.fitting import FitLoop
from keras_gresnet.training.strategies import (
    DataParallel, WorkerLost, agree_on_folder, make_strategy,
)

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


class MultiProcessLoop(FitLoop):
    """What :func:`keras_gresnet.training.train` does on a JAX cluster: join
    it, agree on the run folder, give every process the chief's state, then
    :class:`~keras_gresnet.training.fitting.FitLoop`'s ``fit`` and
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
