"""Training in one process with Keras' own ``model.fit``: on one device,
under ``MirroredStrategy`` (TensorFlow) or Keras' ``DataParallel`` (JAX):
every strategy but ``"multi_worker"``, whose loop is
:class:`keras_gresnet.training.multiworker.MultiWorkerLoop`."""

import contextlib

from keras_gresnet.training.strategies import DataParallel, SingleDevice, make_strategy


def compile_options(backend=None):
    """The keyword arguments :func:`keras_gresnet.training.train` passes to
    ``model.compile`` besides optimizer, loss and metrics, for ``backend``
    (default: Keras' current one). ``scripts/benchmark.py`` measures them
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


class FitLoop:
    """What :func:`keras_gresnet.training.train` does in one process: check
    the run folder, make the strategy, then train with ``model.fit`` and test
    with ``model.evaluate``. Made by :meth:`start`; the same methods as
    :class:`~keras_gresnet.training.multiworker.MultiWorkerLoop`."""

    chief = True  # the one process reads and writes the run folder

    def __init__(self, strategy):
        self.strategy = strategy
        self.model = None

    @classmethod
    def start(cls, name, check_folder):
        """``check_folder()`` (``True``: the run resumes; raises when the
        folder is refused), then the strategy ``name``
        (:func:`~keras_gresnet.training.make_strategy`). Returns
        ``(loop, resumed)``."""
        resumed = check_folder()
        return cls(make_strategy(name)), resumed

    def check_data(self, num_examples, global_batch_size, evaluated=None):
        """``num_examples`` training examples in global batches of
        ``global_batch_size``, and the sets ``evaluated`` (``{"test": size,
        ...}``) in batches of the same size: under Keras' ``DataParallel``
        every batch must split evenly over the devices; any is fine else."""
        if isinstance(self.strategy, DataParallel):
            check_even_batches({"training": num_examples, **(evaluated or {})},
                               global_batch_size, self.strategy.num_replicas_in_sync)

    def restore(self, backup, model, resumed):
        """Load the newest checkpoint of ``backup`` (a
        :class:`~keras_gresnet.training.runs.EpochBackup`) into ``model``
        when the run ``resumed``; returns its epoch count (0 if none)."""
        return backup.restore(model) if resumed else 0

    def chief_callbacks(self, callbacks):
        """``callbacks`` that only the chief runs, as it runs them."""
        return list(callbacks)

    def prepare(self, model, initial_epoch):
        """Take the built, compiled ``model``; returns ``initial_epoch``."""
        self.model = model
        return initial_epoch

    def evaluate(self, dataset):
        """``{"loss", "accuracy"}`` over ``dataset``, every replica with the
        BatchNorm statistics of replica 0: the model that is saved."""
        if not isinstance(self.strategy, (SingleDevice, DataParallel)):
            from keras_gresnet.training.multiworker import share_statistics

            share_statistics(self.strategy, self.model)
        with self._scope():
            return self.model.evaluate(dataset, verbose=0, return_dict=True)

    def _scope(self):
        """Keras' distribution must be in force while JAX runs the model too;
        a ``tf.distribute`` strategy enters its scope by itself."""
        if isinstance(self.strategy, DataParallel):
            return self.strategy.scope()
        return contextlib.nullcontext()

    def fit(self, dataset, *, epochs, initial_epoch, steps_per_epoch, validation_data,
            callbacks, verbose, num_examples=None, global_batch_size=None):
        """``model.fit`` over ``dataset``, the epochs ``initial_epoch ..
        epochs - 1`` (``num_examples`` and ``global_batch_size``: what the
        multi-worker loop needs, not used here)."""
        with self._scope():
            self.model.fit(  # shuffle=False: the pipeline shuffles (seeded)
                dataset, epochs=epochs, initial_epoch=initial_epoch,
                steps_per_epoch=steps_per_epoch, validation_data=validation_data,
                callbacks=callbacks, verbose=verbose, shuffle=False)
