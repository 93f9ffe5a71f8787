"""The training loop of a run, and Keras' own ``model.fit`` in one process.

:class:`TrainingLoop` is what :func:`keras_gresnet.training.train` asks of a
loop, with the one-process answers; :class:`FitLoop` trains with
``model.fit`` on one device or one process's devices. Each backend's module
(:mod:`keras_gresnet.training.backends`) picks the loop of a strategy, and
the loops of a cluster are theirs: TensorFlow's
:class:`~keras_gresnet.training.backends.tensorflow_multiworker.MultiWorkerLoop`,
JAX's :class:`~keras_gresnet.training.backends.jax.MultiProcessLoop`.
"""

import abc
import contextlib


class SingleDevice:
    """The strategy of a run on one device of a backend without
    ``tf.distribute`` (JAX, PyTorch): one replica, no scope of its own."""

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


def compile_options(backend=None):
    """The keyword arguments :func:`keras_gresnet.training.train` passes to
    ``model.compile`` besides optimizer, loss and metrics, for ``backend``
    (default: Keras' current one). ``scripts/benchmarks/benchmark.py`` measures them
    (docs/benchmarks.md): Keras' ``jit_compile="auto"`` on every backend.
    On TensorFlow, XLA trains the CIFAR net 1.14x faster on one CPU (150
    against 131 img/s, 5 rounds side by side), but Keras refuses it wherever
    op determinism is enabled ("Model doesn't support jit_compile=True",
    ``keras/src/trainers/trainer.py`` ``model_supports_jit``), and ``train()``
    enables it so that a resumed run is the uninterrupted one; "auto" also
    means no XLA under ``tf.distribute``. JAX's "auto" is XLA; PyTorch's is
    eager (``True`` would be ``torch.compile``, minutes per model here)."""
    del backend  # one answer for every backend (see above)
    return {"jit_compile": "auto"}


class TrainingLoop(abc.ABC):
    """What :func:`keras_gresnet.training.train` asks of a training loop, in
    the order it asks: :meth:`check_data`, :meth:`restore`, :meth:`prepare`,
    :meth:`chief_callbacks`, :meth:`fit`, :meth:`evaluate`. The methods with
    a body are one process's answers; a cluster's loop overrides them.
    ``strategy``: the run's strategy (``num_replicas_in_sync``, ``scope()``);
    ``chief``: whether this process reads and writes the run folder."""

    chief = True

    def __init__(self, strategy):
        self.strategy = strategy
        self.model = None

    def check_data(self, num_examples, global_batch_size, evaluated=None):
        """Refuse, before anything is written, data this loop cannot split:
        ``num_examples`` training examples in global batches of
        ``global_batch_size``, and the sets ``evaluated`` (``{"test": size,
        ...}``) in batches of the same size. One process: any is fine."""

    def restore(self, backup, model, resumed):
        """Load the newest checkpoint of ``backup`` (a
        :class:`~keras_gresnet.training.runs.EpochBackup`) into ``model``
        when the run ``resumed``; returns its epoch count (0 if none)."""
        return backup.restore(model) if resumed else 0

    def chief_callbacks(self, callbacks):
        """``callbacks`` that only the chief runs, as it runs them."""
        return list(callbacks)

    def prepare(self, model, initial_epoch):
        """Take the built, compiled ``model``; returns the first epoch to
        train (the same on every process)."""
        self.model = model
        return initial_epoch

    @abc.abstractmethod
    def fit(self, dataset, *, epochs, initial_epoch, steps_per_epoch, validation_data,
            callbacks, verbose, num_examples, global_batch_size):
        """Train the epochs ``initial_epoch .. epochs - 1`` of ``dataset``
        (each ``steps_per_epoch`` global batches of ``global_batch_size`` out
        of ``num_examples`` examples), calling the Keras ``callbacks`` as
        ``model.fit`` does."""

    @abc.abstractmethod
    def evaluate(self, dataset):
        """``{"loss", "accuracy"}`` over ``dataset``, of the model that the
        chief saves."""


class FitLoop(TrainingLoop):
    """Keras' ``model.fit`` and ``model.evaluate`` in one process, under a
    strategy that needs no scope at run time (one device; a
    ``tf.distribute`` strategy enters its own). Made by :meth:`start`."""

    @classmethod
    def start(cls, make_strategy, check_folder):
        """``check_folder()`` (``True``: the run resumes; raises when the
        folder is refused), then the strategy, ``make_strategy()``. Returns
        ``(loop, resumed)``."""
        resumed = check_folder()
        return cls(make_strategy()), resumed

    def _scope(self):
        """What is in force while the model runs (a backend's loop may need
        its distribution there)."""
        return contextlib.nullcontext()

    def evaluate(self, dataset):
        """``model.evaluate`` over ``dataset``."""
        with self._scope():
            return self.model.evaluate(dataset, verbose=0, return_dict=True)

    def fit(self, dataset, *, epochs, initial_epoch, steps_per_epoch, validation_data,
            callbacks, verbose, num_examples=None, global_batch_size=None):
        """``model.fit`` over ``dataset``, the epochs ``initial_epoch ..
        epochs - 1`` (``num_examples`` and ``global_batch_size``: what a
        cluster's loop needs, not used here)."""
        with self._scope():
            self.model.fit(  # shuffle=False: the pipeline shuffles (seeded)
                dataset, epochs=epochs, initial_epoch=initial_epoch,
                steps_per_epoch=steps_per_epoch, validation_data=validation_data,
                callbacks=callbacks, verbose=verbose, shuffle=False)


def refuse_sync_batchnorm(requested, strategy, backend):
    """The BatchNorm-sync policy of a backend with one device only:
    ``sync_batchnorm`` is ``False`` (``None`` means so), ``True`` is refused
    in one line."""
    if requested:
        raise ValueError(
            f"sync_batchnorm=True is not available on the {backend} backend "
            f"with strategy={strategy!r} (one device: there is nothing to synchronise); "
            f"on JAX use strategy='data_parallel', on TensorFlow 'mirrored' or 'multi_worker'"
        )
    return False
