"""TensorBoard logs of a run: Keras' ``TensorBoard`` callback writing into
the run folder's ``tensorboard/``, with the test set and the gates added.

============================ ==============================================
``tensorboard/train/``       Keras' ``epoch_loss``, ``epoch_accuracy``,
                             ``epoch_learning_rate``; ``gates/<block>``:
                             ``g(k)`` of each gate (the ``block`` of
                             ``gates.csv``) and the histogram ``gates`` of
                             them all
``tensorboard/validation/``  ``epoch_loss``, ``epoch_accuracy`` of the
                             ``validation_split`` (as Keras writes them)
``tensorboard/test/``        ``epoch_loss``, ``epoch_accuracy`` of the test
                             set (the ``test_*`` of ``history.csv``)
============================ ==============================================

The step is the epoch (0-based, as in ``history.csv``). A resumed run writes
new event files into the same folders, from the epoch it resumes at.
Keras' callback writes with ``tf.summary``: TensorFlow and the
``tensorboard`` package must be installed (:func:`check_tensorboard`), on
any Keras backend.
"""

import os

import keras

TENSORBOARD = "tensorboard"  # the run folder's subfolder
# The subfolders (TensorBoard "runs") a run writes: Keras' two and ours.
RUNS = ("train", "validation", "test")


def check_tensorboard():
    """Raise one ``ValueError`` line when TensorBoard logs cannot be written
    here: Keras' ``TensorBoard`` callback needs TensorFlow's ``tf.summary``,
    whose scalars are implemented by the ``tensorboard`` package."""
    missing = []
    for module in ("tensorflow", "tensorboard"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ValueError(
            f"tensorboard=True (--tensorboard) needs {' and '.join(missing)} installed "
            f"(Keras' TensorBoard callback writes with tf.summary), on any Keras backend: "
            f"pip install {' '.join(missing)}, or train without --tensorboard")


class RunTensorBoard(keras.callbacks.TensorBoard):
    """Keras' ``TensorBoard`` callback for a run folder: Keras' epoch
    scalars, plus the test set's and the gates' (module docstring), flushed
    after every epoch, so that a killed run loses no finished epoch.

    ``logger``: the run's :class:`~keras_gresnet.training.RunLogger`, whose
    ``on_epoch_end`` runs first; its rows of the epoch (the test metrics,
    the gates' ``g``) are what is written, so that TensorBoard shows what
    ``history.csv`` and ``gates.csv`` hold.
    """

    def __init__(self, log_dir, logger):
        # No graph (a jit-compiled step has none worth showing), no
        # profiling, one point per epoch.
        super().__init__(log_dir=str(log_dir), write_graph=False, update_freq="epoch",
                         profile_batch=0)
        self.logger = logger

    def _writer(self, run):
        # Keras keeps its writers (train, val) in _writers and closes them all
        # at the end of training; the test writer joins them.
        if run not in self._writers:
            self._writers[run] = self.summary.create_file_writer(
                os.path.join(self.log_dir, run))
        return self._writers[run]

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        # the logger counts epochs trained (1 after the first); TensorBoard's
        # steps are Keras' own epoch index, as its training scalars
        rows = [r for r in self.logger.history if r["epoch"] == epoch + 1]
        test = {k[len("test_"):]: v for r in rows[-1:] for k, v in r.items()
                if k.startswith("test_")}
        if test:
            with self._writer("test").as_default():
                for name, value in test.items():
                    self.summary.scalar(f"epoch_{name}", value, step=epoch)
        gates = [r for r in self.logger.gates if r["epoch"] == epoch + 1]
        if gates:
            with self._train_writer.as_default():
                for row in gates:
                    self.summary.scalar(f"gates/{row['block']}", row["g"], step=epoch)
                self.summary.histogram("gates", [row["g"] for row in gates], step=epoch)
        for writer in self._writers.values():
            writer.flush()
