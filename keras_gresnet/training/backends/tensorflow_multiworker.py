"""TensorFlow across machines: the loop of ``strategy="multi_worker"``
(``tf.distribute.MultiWorkerMirroredStrategy``), and the collective ops it needs.

``model.fit`` does not run under MultiWorkerMirroredStrategy with Keras 3.15
and TensorFlow 2.21: its symbolic build fails ("Attempt to convert a value
(PerReplica...) to a Tensor"), and past that its metric reduction does. So
:func:`keras_gresnet.training.train` keeps ``model.fit`` on one device and
under MirroredStrategy (:mod:`keras_gresnet.training.backends.tensorflow`), and for
``strategy="multi_worker"`` runs :class:`Trainer` (through
:class:`MultiWorkerLoop`). It uses the same model, recipe, optimizer,
callbacks and run folder. Its training step is written with ``strategy.run``
and ``tf.GradientTape``. The Keras optimizer's ``apply_gradients`` sums the
gradients over all replicas with TensorFlow's collective ops, as it does
under ``fit``.

Cluster: :func:`~keras_gresnet.training.cluster.resolve_cluster` (whose
names this module also carries, for ``keras_gresnet.distributed``) and
:func:`~keras_gresnet.training.backends.tensorflow.make_strategy`, which
makes the strategy this loop trains under.

Data (:func:`distribute`): every worker builds the same seeded pipeline of
global batches, and ``tf.data``'s ``AutoShardPolicy.DATA`` gives each worker
its replicas' share of every global batch. tf.distribute splits each global
batch into per-replica batches, and each worker keeps its own. So one step of
N workers sees exactly the examples that one process with the same global
batch sees. Each worker needs the dataset on its own disk.

State: only the chief reads and writes the run folder. At the start, the
chief's weights, optimizer state and epoch are broadcast to every worker
(:func:`broadcast_from_chief`, a collective all-reduce of the chief's values
and the others' zeros). So the workers need no shared file system, and a
restarted job resumes from the chief's last backup.
"""

import math
import weakref

import keras
import tensorflow as tf

from keras_gresnet.training.backends import sync_batchnorm  # noqa: F401 (here too)
from keras_gresnet.training.cluster import (  # noqa: F401 (the cluster's names, here too)
    TRAINING_JOBS, Cluster, WorkerLost, agree_on_folder, local_workers, parse_workers,
    resolve_cluster,
)
from keras_gresnet.training.loop import TrainingLoop

# Errors of a collective op whose peer died or stopped answering.
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError,
                tf.errors.CancelledError, tf.errors.DeadlineExceededError)


def _local_replicas(strategy):
    return len(strategy.extended.worker_devices)


_BROADCASTS = {}  # id(strategy) -> (weak reference to it, its traced all-reduce)


def _broadcast_function(strategy):
    """One traced function per strategy (no retracing per call): the chief's
    first replica's ``flat``, every other replica's zeros, summed."""
    entry = _BROADCASTS.get(id(strategy))
    if entry is None or entry[0]() is not strategy:
        strategy_ref, local = weakref.ref(strategy), _local_replicas(strategy)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float64),
                                      tf.TensorSpec([], tf.bool)])
        def all_reduce(flat, chief):
            def replica():
                context = tf.distribute.get_replica_context()
                first = tf.equal(context.replica_id_in_sync_group % local, 0)
                # Made on the replica's device: the all-reduce sends from there.
                mine = tf.where(tf.logical_and(first, chief), flat, tf.zeros_like(flat))
                return context.all_reduce("sum", mine)

            dist = strategy_ref()
            return dist.experimental_local_results(dist.run(replica))[0]

        _BROADCASTS[id(strategy)] = (strategy_ref, all_reduce)
    return _BROADCASTS[id(strategy)][1]


def broadcast_from_chief(strategy, values, chief):
    """The chief's ``values`` (tensors or variables), on every worker.

    Every worker calls it with values of the same shapes and dtypes. The
    chief's first replica contributes its values, every other replica zeros,
    and a collective all-reduce sums them. The values travel as float64, which
    is exact for float32 and for integers below 2**53.
    """
    values = [tf.convert_to_tensor(v) for v in values]
    flat = tf.concat([tf.reshape(tf.cast(v, tf.float64), [-1]) for v in values], axis=0)
    try:
        summed = _broadcast_function(strategy)(flat, tf.constant(bool(chief)))
    except _PEER_ERRORS as error:
        raise WorkerLost.from_error(error) from None
    out, start = [], 0
    for v in values:
        size = math.prod(v.shape)
        out.append(tf.cast(tf.reshape(summed[start:start + size], v.shape), v.dtype))
        start += size
    return out


def broadcast_variables(strategy, variables, chief, extra=()):
    """Assign the chief's first replica's values of ``variables`` to every
    replica of every worker; returns the chief's ``extra`` values (numbers)."""
    variables = list({id(v): v for v in variables}.values())
    received = broadcast_from_chief(strategy, list(extra) + variables, chief)
    for variable, value in zip(variables, received[len(extra):]):
        variable.assign(value)
    return [v.numpy() for v in received[:len(extra)]]


def broadcast_state(strategy, model, epoch, chief):
    """Give every worker the chief's weights, optimizer state and ``epoch``
    (the first epoch to train); returns that epoch."""
    (epoch,) = broadcast_variables(strategy, model.variables + model.optimizer.variables,
                                   chief, extra=[epoch])
    return int(epoch)


def share_statistics(strategy, model, chief=True):
    """Give every replica the chief's (replica 0's) non-trainable state, e.g.
    BatchNorm's moving statistics, which Keras keeps per replica: an
    evaluation then measures the model that the chief saves."""
    if strategy.num_replicas_in_sync > 1 and model.non_trainable_variables:
        broadcast_variables(strategy, model.non_trainable_variables, chief)


def distribute(strategy, dataset):
    """``dataset`` (batches of the global batch size) split across the
    replicas of every worker with ``AutoShardPolicy.DATA``.

    Every worker must build the same dataset, in the same order. The
    pipelines of :mod:`keras_gresnet.data` are seeded and deterministic.
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(dataset.with_options(options))


def check_last_batch(num_examples, global_batch_size, replicas):
    """Refuse an epoch whose last, partial batch would leave a replica with
    no example (BatchNorm's statistics of an empty batch are NaN)."""
    remainder = num_examples % global_batch_size
    if 0 < remainder < replicas:
        raise ValueError(
            f"the last batch of each epoch holds {remainder} of {num_examples} training "
            f"examples, fewer than the {replicas} replicas, so a replica would get none; "
            f"change batch_size or max_train_examples so that the examples divided by "
            f"the global batch {global_batch_size} leave 0 or at least {replicas}"
        )


def _cross_entropy_and_correct(labels, logits):
    """Summed sparse cross-entropy of the softmax of ``logits`` (the model's
    output inside :func:`keras_gresnet.training.loss.logits_head`) and the
    number of correct predictions, over a batch."""
    logits = tf.cast(logits, tf.float32)
    cross_entropy = keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                                 from_logits=True)
    predicted = tf.argmax(logits, axis=-1, output_type=labels.dtype)
    correct = tf.cast(tf.equal(predicted, labels), tf.float32)
    return tf.reduce_sum(cross_entropy), tf.reduce_sum(correct)


def _regularization(model):
    losses = model.losses
    return tf.add_n([tf.cast(x, tf.float32) for x in losses]) if losses else tf.zeros([])


class Trainer:
    """``fit`` and ``evaluate`` of a compiled Keras classifier under
    ``strategy``, with the reported numbers of Keras' own ``fit``. ``chief``:
    whether this process is the chief.

    Loss: each replica's summed cross-entropy over the global batch's size,
    plus the regularisation losses over the number of replicas. So the
    optimizer's all-reduced (summed) gradient is the gradient of the mean loss
    over the global batch, for a partial last batch too. ``loss`` and
    ``accuracy`` are averaged over the epoch's examples, as Keras reports them.
    """

    def __init__(self, model, strategy, chief=True):
        self.model = model
        self.strategy = strategy
        self.chief = chief
        self._train_step = tf.function(self._train_step_fn)
        self._evaluate = tf.function(self._evaluate_fn)
        self._distributed = {}

    def _replica_train_step(self, images, labels, global_size):
        model = self.model
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            cross_entropy, correct = _cross_entropy_and_correct(labels, logits)
            regularization = _regularization(model)
            loss = (cross_entropy / global_size
                    + regularization / self.strategy.num_replicas_in_sync)
            scaled = model.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled, model.trainable_variables)
        model.optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        # One small all-reduce, so that every worker logs (and stops on) the
        # same global numbers.
        totals = tf.distribute.get_replica_context().all_reduce(
            "sum", tf.stack([cross_entropy, correct]))
        return totals, regularization

    def _train_step_fn(self, iterator, global_size):
        images, labels = next(iterator)
        totals, regularization = self.strategy.run(
            self._replica_train_step, args=(images, labels, global_size))
        local = self.strategy.experimental_local_results
        return local(totals)[0], local(regularization)[0]

    def _replica_test_step(self, images, labels):
        logits = self.model(images, training=False)
        cross_entropy, correct = _cross_entropy_and_correct(labels, logits)
        size = tf.cast(tf.shape(labels)[0], tf.float32)
        return tf.distribute.get_replica_context().all_reduce(
            "sum", tf.stack([cross_entropy, correct, size]))

    def _evaluate_fn(self, dataset):
        totals = tf.zeros([3])
        for images, labels in dataset:
            step = self.strategy.run(self._replica_test_step, args=(images, labels))
            totals += self.strategy.experimental_local_results(step)[0]
        return totals, _regularization(self.model)

    def _distribute(self, dataset):
        key = id(dataset)
        if key not in self._distributed:
            self._distributed[key] = (dataset, distribute(self.strategy, dataset))
        return self._distributed[key][1]

    def evaluate(self, dataset):
        """``{"loss", "accuracy"}`` over ``dataset`` (global batches; every
        worker reads its share), every replica with the chief's BatchNorm
        statistics (:func:`share_statistics`): the model the chief saves."""
        share_statistics(self.strategy, self.model, self.chief)
        try:
            totals, regularization = self._evaluate(self._distribute(dataset))
        except _PEER_ERRORS as error:
            raise WorkerLost.from_error(error) from None
        cross_entropy, correct, size = (float(x) for x in totals.numpy())
        return {"loss": cross_entropy / size + float(regularization),
                "accuracy": correct / size}

    def fit(self, dataset, *, epochs, steps_per_epoch, num_examples, global_batch_size,
            initial_epoch=0, validation_data=None, callbacks=(), verbose=0):
        """Train from ``initial_epoch`` to ``epochs`` on ``dataset``, calling
        the Keras ``callbacks`` as ``fit`` does; stops when one sets
        ``model.stop_training``.

        ``dataset`` streams the epochs ``initial_epoch .. epochs - 1``
        (:meth:`keras_gresnet.data.Pipeline.train_epochs`), each
        ``steps_per_epoch`` global batches of ``global_batch_size`` out of
        ``num_examples`` examples, so an epoch's last batch may be partial.

        Raises:
            WorkerLost: another worker died or stopped answering.
        """
        check_last_batch(num_examples, global_batch_size, self.strategy.num_replicas_in_sync)
        if steps_per_epoch != math.ceil(num_examples / global_batch_size):
            raise ValueError(
                f"steps_per_epoch={steps_per_epoch} does not match {num_examples} "
                f"examples in global batches of {global_batch_size}"
            )
        callbacks = keras.callbacks.CallbackList(
            list(callbacks), add_progbar=verbose != 0, model=self.model,
            verbose=1 if verbose == "auto" else verbose, epochs=epochs, steps=steps_per_epoch)
        train = self._distribute(dataset)
        model = self.model
        model.stop_training = False
        logs = {}
        try:
            callbacks.on_train_begin()
            iterator = iter(train)
            for epoch in range(initial_epoch, epochs):
                callbacks.on_epoch_begin(epoch)
                logs = self._train_epoch(iterator, callbacks, steps_per_epoch, num_examples,
                                         global_batch_size)
                epoch_logs = dict(logs)
                if validation_data is not None and not model.stop_training:
                    epoch_logs.update({f"val_{k}": v
                                       for k, v in self.evaluate(validation_data).items()})
                callbacks.on_epoch_end(epoch, epoch_logs)
                if model.stop_training:
                    break
            callbacks.on_train_end(logs)
        except _PEER_ERRORS as error:
            raise WorkerLost.from_error(error) from None
        return logs

    def _train_epoch(self, iterator, callbacks, steps_per_epoch, num_examples,
                     global_batch_size):
        """One epoch's steps (fewer if a callback stops training); returns
        its logs: the loss and accuracy over the examples seen."""
        loss_sum = correct_sum = seen = 0.0
        logs = {}
        for step in range(steps_per_epoch):
            callbacks.on_train_batch_begin(step)
            size = min(global_batch_size, num_examples - step * global_batch_size)
            totals, regularization = self._train_step(iterator, tf.constant(size, tf.float32))
            cross_entropy, correct = (float(x) for x in totals.numpy())
            loss_sum += cross_entropy + size * float(regularization)
            correct_sum += correct
            seen += size
            logs = {"loss": loss_sum / seen, "accuracy": correct_sum / seen}
            callbacks.on_train_batch_end(step, logs)
            if self.model.stop_training:
                break
        return logs


class MultiWorkerLoop(TrainingLoop):
    """What :func:`keras_gresnet.training.train` does on a TensorFlow
    cluster: join it, agree on the run folder, give every worker the chief's
    state, then train and test with :class:`Trainer`. Made by :meth:`join`;
    ``chief``: whether this process is the chief (the only one that reads
    and writes the run folder)."""

    def __init__(self, strategy, chief):
        super().__init__(strategy)
        self.chief = chief
        self.trainer = None

    @classmethod
    def join(cls, strategy, cluster, check_folder, out):
        """Under ``strategy``, ``cluster``'s ``MultiWorkerMirroredStrategy``
        (made before any other TensorFlow op, as it requires), the chief
        calls ``check_folder()`` (``True``: the run in ``out`` resumes;
        ``ValueError``: refused) and every worker learns its verdict.
        Returns ``(loop, resumed)``."""
        chief = cluster.is_chief

        def broadcast(*verdict):
            return [float(v) for v in broadcast_from_chief(strategy, list(map(float, verdict)),
                                                           chief)]

        return cls(strategy, chief), agree_on_folder(cluster, check_folder, out, broadcast)

    def check_data(self, num_examples, global_batch_size, evaluated=None):
        """Refuse an epoch that would leave a replica without an example
        (``evaluated``, the sizes of the sets only evaluated: any is fine)."""
        check_last_batch(num_examples, global_batch_size, self.strategy.num_replicas_in_sync)

    def restore(self, backup, model, resumed):
        """The chief loads the newest checkpoint of ``backup`` into ``model``
        when the run ``resumed`` (:meth:`prepare` gives it to the others);
        returns its epoch count (0 if none, and on the other workers)."""
        return backup.restore(model) if self.chief and resumed else 0

    def prepare(self, model, initial_epoch):
        """Take the built, compiled ``model`` and give every worker the chief's
        weights, optimizer state and ``initial_epoch``; returns that epoch."""
        self.model = model
        self.trainer = Trainer(model, self.strategy, self.chief)
        return broadcast_state(self.strategy, model, initial_epoch, self.chief)

    def evaluate(self, dataset):
        """``{"loss", "accuracy"}`` of the chief's model (:meth:`Trainer.evaluate`)."""
        return self.trainer.evaluate(dataset)

    def fit(self, dataset, *, verbose, **kwargs):
        """:meth:`Trainer.fit`; only the chief shows progress."""
        self.trainer.fit(dataset, verbose=verbose if self.chief else 0, **kwargs)
