""":func:`train`: one training run, from its arguments to a finished run folder.

The steps: resolve and check the config, check the run folder (and join the
cluster of a multi-worker run), build the seeded data pipeline, build and
compile the model under the strategy, restore an unfinished run's backup,
prepare the folder, train (``model.fit``, or the multi-worker loop), and
write the results. Running the same command again on an unfinished run
folder resumes after the last finished epoch. The whole run happens under
the config's dtype policy; the caller's comes back afterwards.
"""

import dataclasses
import numbers
import sys
import time
from pathlib import Path

import keras

from keras_gresnet import data, zoo
from keras_gresnet._cpu import CPU_DEVICES, cpu_info, memory_available
from keras_gresnet.files import interrupt_kept
from keras_gresnet.layers import gate_layers
from keras_gresnet.training import backends, executions, runs
from keras_gresnet.training.cluster import resolve_cluster
from keras_gresnet.training.loss import cross_entropy, logits_head
from keras_gresnet.training.config import (
    build_model, dtype_policy_scope, inference_copy, resolve_config,
)
from keras_gresnet.training.loop import compile_options
from keras_gresnet.training.recipes import Recipe
from keras_gresnet.training.tensorboard import TENSORBOARD, RunTensorBoard, check_tensorboard


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


@dataclasses.dataclass
class Run:
    """What :func:`train` returns (``out`` is ``None`` on a multi-worker
    run's non-chief workers, which write nothing)."""

    out: Path
    config: dict
    model: keras.Model
    history: list
    results: dict


# The most training steps a host call runs where the device pipeline feeds
# them (Keras' steps_per_execution): the host dispatches them, then waits for
# the last one's loss (the run logger's check for divergence).
DEVICE_STEPS_PER_EXECUTION = 16


def steps_per_execution(steps_per_epoch, most=DEVICE_STEPS_PER_EXECUTION):
    """The largest divisor of ``steps_per_epoch`` not above ``most``: Keras
    runs whole executions, so one that is no divisor would carry steps of
    the next epoch into this one (469 Fashion-MNIST steps of 128: 7; 391
    CIFAR steps: 1)."""
    return max(d for d in range(1, min(most, steps_per_epoch) + 1) if steps_per_epoch % d == 0)


def train(model, *, out=None, overwrite=False, verbose="auto", workers=None,
          worker_index=None, tensorboard=False, input_pipeline="auto",
          steps_per_execution="auto", **kwargs):
    """Train the zoo model ``model`` with its paper's recipe; returns a :class:`Run`.

    Args:
        model: a :func:`keras_gresnet.zoo.list_models` name.
        out: the run folder (default ``runs/{model}-{dataset}-seed{seed}``).
            An unfinished run there is resumed; a finished one is refused
            unless ``overwrite``.
        verbose: Keras' ``fit`` verbosity (``"auto"``: a progress bar).
        workers, worker_index: a multi-worker cluster
            (:mod:`keras_gresnet.training.cluster`): every worker's
            ``host:port``, the same list on every worker, and this worker's
            index in it. They write ``TF_CONFIG``; a ``TF_CONFIG`` already set
            does the same.
        tensorboard: also write TensorBoard logs into ``out/tensorboard``
            (:mod:`keras_gresnet.training.tensorboard`; needs TensorFlow and
            the ``tensorboard`` package, on any backend). Not part of the
            config: a resumed run may turn it on or off.
        input_pipeline: what feeds the batches, one of
            :data:`keras_gresnet.data.INPUT_PIPELINES`: ``"auto"`` (the
            device pipeline on JAX with a GPU or TPU, else ``tf.data`` where
            TensorFlow is installed, else numpy;
            :func:`keras_gresnet.data.choose_input_pipeline`), ``"tf_data"``,
            ``"numpy"`` or ``"device"`` (JAX: the pixels on the device, each
            batch cut there). Every pipeline gives the same batches, so it is
            not part of the config (a run may resume on another); the run
            folder's ``config.json`` records the one used (``versions``).
        steps_per_execution: the training steps one host call runs, a whole
            number or ``"auto"``. Where the device pipeline feeds one JAX
            device, one compiled program of that many steps, each batch cut
            inside it (:mod:`keras_gresnet.training.executions`; its float32
            rounding is its own, so the weights are the per-step run's up to
            rounding); elsewhere Keras' ``steps_per_execution``, the largest
            divisor of an epoch's steps not above it
            (:func:`steps_per_execution`: the same steps, bit for bit).
            ``"auto"``: :data:`DEVICE_STEPS_PER_EXECUTION` with the device
            pipeline, compiled as one where JAX has a GPU or TPU (on a CPU,
            Keras' way, bit for bit the numpy pipeline's run: there a conv
            net's step is long beside a host call, docs/benchmarks.md), and 1
            with the others. Recorded in ``versions``; a resumed run may
            change it.
        **kwargs: the run's config, as
            :func:`~keras_gresnet.training.resolve_config` takes it:
            ``model_kwargs`` (the builder's arguments: ``depth=20``...), the
            run's options (:class:`~keras_gresnet.training.RunOptions`, each
            described there: ``dataset``, ``recipe``, ``seed``, ``strategy``,
            ``validation_split``, ``data_dir``, ``max_train_examples``,
            ``max_test_examples``, ``sync_batchnorm``, ``dtype_policy``; a
            resumed run keeps its own dtype policy), and any recipe field
            (``epochs``, ``batch_size``, ``learning_rate``, ``weight_decay``,
            ``k_decay``...). The recipe's ``batch_size`` is per replica;
            BatchNorm uses each replica's statistics unless ``sync_batchnorm``,
            as the papers' multi-GPU runs did; the test set is evaluated after
            every epoch as ``test_*``.

    Raises:
        TrainingDiverged: the loss became NaN or infinite (the run folder keeps
            its history and backup, no model.keras).
        keras_gresnet.training.WorkerLost: a multi-worker run lost
            a worker; start every worker again with the same command to resume.
    """
    if not isinstance(tensorboard, bool):
        raise ValueError(f"tensorboard must be True or False, got {tensorboard!r}")
    data.resolve_input_pipeline(input_pipeline)  # an unknown one, or one this backend lacks
    steps_per_execution = _checked_steps_per_execution(steps_per_execution)
    if tensorboard:
        check_tensorboard()
    if out is not None and not str(out).strip():
        raise ValueError(f"out={str(out)!r}: give a folder for the run, or leave it out for "
                         f"runs/MODEL-DATASET-seedSEED")
    cluster = resolve_cluster(workers, worker_index)
    config = resolve_config(model, cluster=cluster, **kwargs)
    with dtype_policy_scope(config["dtype_policy"]):
        return _train(config, cluster, out, overwrite, verbose, tensorboard, input_pipeline,
                      steps_per_execution)


def _checked_steps_per_execution(value):
    """:func:`train`'s ``steps_per_execution``: ``"auto"`` or an int >= 1."""
    if isinstance(value, str) and value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"steps_per_execution must be 'auto' or a whole number of training "
                         f"steps >= 1, got {value!r}")
    return int(value)


def _train(config, cluster, out, overwrite, verbose, tensorboard, input_pipeline,
           steps_per_execution="auto"):
    """:func:`train` once the config is resolved (under its dtype policy)."""
    recipe = Recipe.from_config(config["recipe"])
    out = runs.run_folder(config, out)
    loop, resumed = _start(config, cluster, out, overwrite)
    pipe = _data(config, recipe, loop, input_pipeline)
    _note_schedule(config, recipe, pipe, loop.chief and verbose != 0)
    steps, fused = _executions(config, loop.strategy, steps_per_execution)
    net = _compiled_model(config, recipe, pipe, loop.strategy,
                          host_steps=1 if fused else steps)
    _check_memory(net, config)
    backup = runs.EpochBackup(out / runs.BACKUP)
    # Outside the strategy's scope: loading makes Keras create a throw-away
    # optimizer, whose variables would be a collective op (a broadcast on
    # TensorFlow, a global placement on JAX) that the chief alone starts.
    initial_epoch = loop.prepare(net, loop.restore(backup, net, resumed))
    logger = runs.RunLogger(out if loop.chief else None, test=lambda: loop.evaluate(pipe.test),
                            resume=resumed)
    backup.diverged = lambda: logger.diverged
    epochs, train_data = _epochs(recipe, pipe, initial_epoch, backup.folder)
    # Only now that every argument and every file read has proved good does
    # the folder change, and only the chief's: it holds the folder's lock
    # until the run ends, however it ends.
    lock = runs.prepare_folder(out, config, overwrite=overwrite, resumed=resumed) \
        if loop.chief else None
    if loop.chief and verbose != 0:  # every check passed: what it trains with, then the epochs
        print(devices_line(config, loop.strategy), file=sys.stderr, flush=True)
    # A Ctrl-C that C code swallows is raised again after the next batch
    # (files.interrupt_kept): the run stops, resumable, as Ctrl-C stops it.
    with interrupt_kept() as interrupt:
        try:
            # The history is written before the backup: a kill between the two
            # retrains that epoch and replaces its row, never loses it.
            callbacks = [logger]
            if loop.chief:
                # TensorBoard after the backup: an epoch reaches it once it is saved,
                # so the epoch a killed run trains again is never logged twice.
                callbacks += loop.chief_callbacks(
                    [backup] + ([RunTensorBoard(out / TENSORBOARD, logger)] if tensorboard else []))
            callbacks.append(runs.RaiseInterrupt(interrupt))
            # The loss from the logits on every backend (keras_gresnet.training.loss).
            with logits_head(net):
                seconds = _fit(loop, train_data, epochs, initial_epoch, pipe, config, verbose,
                               callbacks=callbacks, fused_steps=steps if fused else None)
                _check_finite(logger, config, out)
                test = loop.evaluate(pipe.test)
            results = _results(test, net, logger.history, initial_epoch, seconds)
            # The returned model evaluates as Keras' own softmax classifiers do.
            with loop.strategy.scope():
                net.compile(optimizer=net.optimizer, loss="sparse_categorical_crossentropy",
                            metrics=["accuracy"], **compile_options())
            interrupt.check()
            if loop.chief:
                runs.finish(out, inference_copy(net), results, logger.gates, config["dataset"],
                            config)
        finally:
            if lock is not None:
                lock.release()
    return Run(out=out if loop.chief else None, config=config, model=net,
               history=logger.history, results=results)


def _start(config, cluster, out, overwrite):
    """The run's training loop (its backend's, for its strategy) and whether
    it resumes: the run folder is checked, and the strategy made (first,
    before any other TensorFlow op, on a cluster)."""
    def check_folder():
        return runs.check_folder(out, config, overwrite)

    return backends.get().start(config["strategy"], cluster, check_folder, out)


def _data(config, recipe, loop, input_pipeline="auto"):
    """Seed everything, then the run's pipeline of global batches (recorded in
    ``config``: its data, replicas and global batch size, and in its
    ``versions`` the input pipeline)."""
    keras.utils.set_random_seed(config["seed"])
    input_pipeline = data.choose_input_pipeline(input_pipeline, config["dataset"],
                                                keras.backend.backend(),
                                                backends.get().has_accelerator())
    config["versions"] = {**config.get("versions", {}), "input_pipeline": input_pipeline}
    if input_pipeline == "tf_data":  # always, where TensorFlow is installed
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    replicas = loop.strategy.num_replicas_in_sync
    global_batch_size = recipe.batch_size * replicas
    pipe = data.pipeline(
        config["dataset"],
        data_dir=config["data_dir"],
        preprocessing=recipe.preprocessing,
        batch_size=global_batch_size,
        validation_split=config["validation_split"],
        augment=recipe.augment,
        pad_mode=recipe.pad_mode,
        seed=config["seed"],
        max_train_examples=config["max_train_examples"],
        max_test_examples=config["max_test_examples"],
        input_pipeline=input_pipeline,
        # a picture folder is fitted to the model's input, where one is asked for
        image_shape=(config["model_kwargs"].get("input_shape")
                     if config["dataset"] == data.FOLDER else None),
    )
    loop.check_data(pipe.num_train, global_batch_size,
                    evaluated=dict(validation=pipe.num_validation, test=pipe.num_test))
    config.update(data=pipe.config, replicas=replicas, global_batch_size=global_batch_size)
    return pipe


def _device_names(strategy):
    """The short names of the devices ``strategy`` trains on (``CPU:0``,
    ``GPU:1``), or ``None`` where the strategy does not list them."""
    try:
        names = getattr(getattr(strategy, "extended", None), "worker_devices", None)
    except RuntimeError:  # TensorFlow's default strategy: this process's default device
        names = None
    distribution = getattr(strategy, "distribution", None)
    if names is None and distribution is not None:
        names = [str(d) for d in distribution.device_mesh.devices.reshape(-1)]
    return None if not names else [str(n).rsplit("device:", 1)[-1] for n in names]


def _steps_note(versions):
    """What :func:`devices_line` says of the steps a host call runs."""
    steps = versions.get("steps_per_execution", 1)
    if versions.get("fused_steps"):
        return f", {steps} steps a host call compiled as one"
    return f", up to {steps} steps a host call" if steps > 1 else ""


def devices_line(config, strategy):
    """One line: the strategy a run trains with, its replicas and devices,
    and its input pipeline; ``--strategy mirrored`` that found one device
    says that it trains one replica, and how to try several on a CPU."""
    replicas = strategy.num_replicas_in_sync
    devices = _device_names(strategy)
    pipeline = config.get("versions", {}).get("input_pipeline")
    line = (f"{config['model']} on {config['dataset']}: strategy {config['strategy']}, "
            f"{replicas} replica{'s' if replicas != 1 else ''}"
            + (f" on {', '.join(devices)}" if devices else "")
            + (f", input pipeline {pipeline}" if pipeline else "")
            + _steps_note(config.get("versions", {})))
    if config["strategy"] == "mirrored" and replicas == 1:
        line += (f"; --strategy mirrored found one device, so it trains one replica "
                 f"({CPU_DEVICES}=N splits the CPU into N devices to try it)")
    return line


# What a training process takes besides its net: TensorFlow or JAX, the data,
# the pipeline (0.9 GB measured for a small CIFAR net on TensorFlow).
PROCESS_BYTES = 2**30


def _check_memory(net, config):
    """Refuse (one line naming ``--input-shape``, before the run's first
    write) a net whose training would take more memory than the machine has
    free: its activations (:func:`keras_gresnet.zoo.summary.activation_values`,
    4 bytes each, times the global batch), its weights with their gradients
    and optimizer slots, and :data:`PROCESS_BYTES` for the process itself.
    Measured: ``gresnet_cifar --n 5`` at 96x96x3, batch 128, peaked at 5.0 GB
    (this estimate: 5.7 GiB). A picture folder is read at its pictures' own
    size: 248x248 camera thumbnails ask 32 GiB, once killed by the kernel."""
    from keras_gresnet.zoo.summary import activation_values

    free = memory_available()
    if free is None:
        return
    batch = config["global_batch_size"]
    need = 4 * (batch * activation_values(net) + 4 * net.count_params()) + PROCESS_BYTES
    if need > free:
        shape = "x".join(str(d) for d in net.input_shape[1:])
        raise ValueError(
            f"{config['model']} at {shape} with a batch of {batch} needs about "
            f"{need / 2**30:.1f} GiB to train, more than the {free / 2**30:.1f} GiB this "
            f"machine has free: choose a smaller size with --input-shape (the CIFAR nets' "
            f"own is 32,32,3) or a smaller --batch-size")


def _note_schedule(config, recipe, pipe, show):
    """Where a run is too short for the recipe's milestones (they merge,
    :meth:`Recipe.schedule_note`), record the schedule it gets in the config
    (``lr_schedule``) and, when ``show``, print it on one line."""
    note = recipe.schedule_note(pipe.steps_per_epoch)
    if note is None:
        return
    config["lr_schedule"] = note
    if show:
        print(note, file=sys.stderr, flush=True)


def _compiled_model(config, recipe, pipe, strategy, host_steps=1):
    """The config's model, built and compiled under ``strategy``, its
    optimizer built (so that a backup can be loaded into it), Keras'
    :func:`steps_per_execution` of up to ``host_steps`` steps a host call."""
    options = compile_options()
    if host_steps > 1:
        options["steps_per_execution"] = steps_per_execution(pipe.steps_per_epoch, host_steps)
    with strategy.scope():
        net = build_model(config, pipe.input_shape, pipe.num_classes)
        net.compile(
            optimizer=recipe.optimizer(pipe.steps_per_epoch),
            loss=cross_entropy(),  # of the logits: fitted inside logits_head
            metrics=["accuracy"],
            **options,
        )
        net.optimizer.build(net.trainable_variables)
    return net


def _epochs(recipe, pipe, initial_epoch, backup):
    """``(epochs, train_data)``: the epoch count to train to, and the batches
    of the epochs left; a checkpoint that counts more epochs than the run has
    (renamed, or another run's) is refused in one line."""
    epochs = recipe.fit_epochs(pipe.steps_per_epoch)
    if initial_epoch > epochs:
        raise ValueError(
            f"{backup}: its newest checkpoint counts {initial_epoch} finished epochs, more "
            f"than the run's {epochs}; it is not this run's (renamed, or copied from another): "
            f"remove it to resume from an earlier one, or train again with --overwrite")
    # Epoch e's batches are a function of (seed, e): a resumed run and every
    # worker read what an uninterrupted single process reads.
    return epochs, pipe.train_epochs(initial_epoch, epochs)


def _executions(config, strategy, requested="auto"):
    """``(steps, fused)``: the training steps a host call runs (``requested``,
    :func:`train`'s ``steps_per_execution``) and whether they run as one
    compiled program (the device pipeline on one JAX device,
    :mod:`keras_gresnet.training.executions`); recorded in the config's
    ``versions``."""
    device = config["versions"].get("input_pipeline") == "device"
    fused = device and executions.available(strategy)
    if requested == "auto":
        steps = DEVICE_STEPS_PER_EXECUTION if device else 1
        fused = fused and backends.get().has_accelerator()
    else:
        steps = requested
    fused = fused and steps > 1
    config["versions"].update(steps_per_execution=steps, fused_steps=fused)
    return steps, fused


def _fit(loop, train_data, epochs, initial_epoch, pipe, config, verbose, callbacks,
         fused_steps=None):
    """Train from ``initial_epoch`` to ``epochs``, ``fused_steps`` a host call
    as one compiled program (:func:`_executions`) or one compiled step at a
    time; returns the seconds it took (none when a run that crashed after its
    last epoch is finished)."""
    start = time.perf_counter()
    if initial_epoch >= epochs:
        return 0.0
    steps = pipe.steps_per_epoch
    if fused_steps:
        train_data, steps = executions.fuse(loop.model, train_data, fused_steps)
    loop.fit(train_data, epochs=epochs, initial_epoch=initial_epoch,
             steps_per_epoch=steps, num_examples=pipe.num_train,
             global_batch_size=config["global_batch_size"], validation_data=pipe.validation,
             callbacks=callbacks, verbose=verbose)
    return time.perf_counter() - start


def _check_finite(logger, config, out):
    """Raise :class:`TrainingDiverged` when the loss became NaN or infinite."""
    if logger.diverged:
        raise TrainingDiverged(
            f"{config['model']} on {config['dataset']}: {logger.diverged} (epoch "
            f"{len(logger.history)}); lower the learning rate (--learning-rate), "
            f"check the data, or try another seed. History so far: {out / runs.HISTORY}"
        )


def _results(test, net, history, initial_epoch, seconds):
    """``results.json``: the final test metrics, epochs, time, gates and size."""
    return dict(
        test_loss=float(test["loss"]),
        test_accuracy=float(test["accuracy"]),
        test_error_percent=100 * (1 - float(test["accuracy"])),
        epochs=history[-1]["epoch"] if history else initial_epoch,
        seconds_this_process=round(seconds, 1),
        machine=_machine(),
        gates={g.name: g.g for g in gate_layers(net)},
        params=zoo.summarize(net)["params"],
    )


def _machine():
    """The CPU and backend threads the finishing process trained on (a
    timing means nothing without them)."""
    return {**cpu_info(), **backends.get().runtime()}
