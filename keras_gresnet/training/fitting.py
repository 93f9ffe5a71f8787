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

    def check_data(self, num_examples, global_batch_size):
        """Every epoch ``model.fit`` takes is fine."""

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
