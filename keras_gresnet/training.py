"""Train any zoo model with its paper's recipe, on one device or many.

:func:`train` resolves a full config (model, builder arguments, dataset,
recipe with overrides, seed, strategy), builds the model under the
``tf.distribute`` strategy, trains it with ``model.fit`` and leaves a run
folder behind:

============== ===========================================================
config.json    the resolved config (written first)
history.csv    per-epoch loss/accuracy (train, validation, test) and the lr of the
               epoch's first step
gates.csv      per-epoch ``k`` and ``g(k)`` of every gate (epoch -1: initial)
model.keras    the final model, without optimizer state (:func:`inference_copy`)
history.png    training / test curves; gates.png: ``k`` per block over epochs
results.json   final test metrics; written last, so it marks a finished run
backup/        Keras ``BackupAndRestore`` state while a run is unfinished
============== ===========================================================

Every file is written atomically (temporary file + ``os.replace``). Running
the same command again on an unfinished run folder resumes after the last
finished epoch.
"""

import dataclasses
import fnmatch
import inspect
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import keras
import tensorflow as tf

from keras_gresnet import data, distributed, plots, recipes, zoo
from keras_gresnet._checks import check_choice, check_int, check_rate
from keras_gresnet._io import (
    atomic_path, remove_stale_temporaries, temporary_target, write_csv, write_json,
)
from keras_gresnet.layers import gate_layers

STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker")

# The paper each model family comes from decides its default recipe and data.
DEFAULT_RECIPES = (("*_mlp", "gr_mnist"), ("wide_*", "wrn_cifar"), ("*", "preact_cifar"))
DEFAULT_DATASETS = (("*_mlp", "mnist"), ("*", "cifar10"))
# Keys of config.json that may differ when a run is resumed.
_VOLATILE = ("command", "versions")


_MIRRORED = {}  # devices -> the process's MirroredStrategy over them
_NO_CLUSTER = (
    "strategy='multi_worker' needs a cluster: set TF_CONFIG, or pass workers / "
    "worker_index (--workers host:port,host:port --worker-index i)"
)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


def _first_match(name, table):
    return next(value for pattern, value in table if fnmatch.fnmatchcase(name, pattern))


def default_recipe(model):
    """The recipe of ``model``'s paper: ``gr_mnist`` for GR's MLPs,
    ``wrn_cifar`` for Wide (G)ResNets, ``preact_cifar`` otherwise."""
    return _first_match(model, DEFAULT_RECIPES)


def default_dataset(model):
    """``mnist`` for GR's MLPs, ``cifar10`` for the convolutional nets."""
    return _first_match(model, DEFAULT_DATASETS)


def make_strategy(name="auto", cluster=None):
    """A ``tf.distribute`` strategy by name.

    ``"auto"``: ``MultiWorkerMirroredStrategy`` when a cluster is configured,
    else ``MirroredStrategy`` when more than one GPU is visible, else the
    default (single-device) strategy. ``"mirrored"``: one replica per GPU, or
    per logical CPU device when there is no GPU (e.g. set up with
    ``tf.config.set_logical_device_configuration``). ``"multi_worker"``: see
    :mod:`keras_gresnet.distributed`; ``cluster`` (a
    :class:`~keras_gresnet.distributed.Cluster`) is required.
    """
    check_choice(name, "strategy", STRATEGIES)
    if name == "auto" and cluster is not None:
        name = "multi_worker"
    if name == "multi_worker":
        if cluster is None:
            raise ValueError(_NO_CLUSTER)
        return distributed.make_strategy(cluster)
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


def _builder_accepts(builder, argument):
    params = inspect.signature(builder).parameters
    return argument in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def resolve_config(
    model,
    *,
    dataset=None,
    recipe=None,
    model_kwargs=None,
    seed=0,
    strategy="auto",
    validation_split=0.0,
    data_dir=None,
    max_train_examples=None,
    max_test_examples=None,
    sync_batchnorm=False,
    cluster=None,
    **overrides,
):
    """The full, JSON-ready config of a training run; every argument checked.

    ``overrides`` replace fields of the recipe (``epochs=2``,
    ``learning_rate=0.01``, ``k_decay=True``...). ``cluster``: the
    :func:`keras_gresnet.distributed.resolve_cluster` of a multi-worker run
    (``strategy="auto"`` then means ``"multi_worker"``); the config records
    its ``num_workers``, not its addresses. ``sync_batchnorm``: BatchNorm
    statistics over the global batch, not each replica's
    (:func:`keras_gresnet.distributed.sync_batchnorm`).
    """
    builder = zoo.model_builder(model)
    dataset = dataset or default_dataset(model)
    check_choice(dataset, "dataset", tuple(data.DATASETS))
    recipe = recipes.get_recipe(recipe or default_recipe(model), **overrides)
    check_int(seed, "seed", 0, 2**31 - 1)
    check_choice(strategy, "strategy", STRATEGIES)
    if strategy == "auto" and cluster is not None:
        strategy = "multi_worker"
    if strategy == "multi_worker" and cluster is None:
        raise ValueError(_NO_CLUSTER)
    if cluster is not None and strategy != "multi_worker":
        raise ValueError(
            f"a cluster is configured (TF_CONFIG or workers), which needs strategy="
            f"'multi_worker' or 'auto', got strategy={strategy!r}"
        )
    check_rate(validation_split, "validation_split")
    if not isinstance(sync_batchnorm, bool):
        raise ValueError(f"sync_batchnorm must be True or False, got {sync_batchnorm!r}")
    for value, argument in ((max_train_examples, "max_train_examples"),
                            (max_test_examples, "max_test_examples")):
        if value is not None:
            check_int(value, argument, 1)
    model_kwargs = dict(model_kwargs or {})
    reserved = sorted({"input_shape", "classes", "input_tensor"} & set(model_kwargs))
    if reserved:
        raise ValueError(
            f"model_kwargs may not set {reserved}: they come from the dataset"
        )
    if recipe.dropout and "dropout" not in model_kwargs and _builder_accepts(builder, "dropout"):
        model_kwargs["dropout"] = recipe.dropout
    return dict(
        model=model,
        model_kwargs=model_kwargs,
        dataset=dataset,
        data_dir=None if data_dir is None else str(data_dir),
        validation_split=float(validation_split),
        max_train_examples=max_train_examples,
        max_test_examples=max_test_examples,
        recipe=recipe.get_config(),
        seed=int(seed),
        strategy=strategy,
        num_workers=cluster.num_workers if cluster is not None else 1,
        sync_batchnorm=sync_batchnorm,
        command=list(sys.argv),
        versions=dict(keras=keras.__version__, tensorflow=tf.__version__),
    )


def build_model(config, input_shape, num_classes):
    """The config's zoo model with the recipe's decay and BN momentum."""
    model = zoo.get_model(
        config["model"], input_shape=input_shape, classes=num_classes, **config["model_kwargs"]
    )
    recipes.Recipe.from_config(config["recipe"]).apply_to(model)
    distributed.sync_batchnorm(model, config.get("sync_batchnorm", False))
    return model


def inference_copy(model):
    """``model``'s architecture and weights without the optimizer state: the
    published file is a third of the size (Nadam keeps two slots per weight);
    recompile it to fine-tune. The backup keeps the optimizer while a run is
    unfinished."""
    # from_config, not clone_model: a clone of a compiled model is compiled
    # (and saved with its optimizer) too.
    copy = model.__class__.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    # Synchronized BatchNorm is a training setting, and TensorFlow-only: the
    # published file loads on every Keras backend.
    distributed.sync_batchnorm(copy, False)
    return copy


def gate_rows(model, epoch):
    """``(epoch, index, block, k, g)`` for every gate of ``model``."""
    return [
        (epoch, i, gate.name, float(keras.ops.convert_to_numpy(gate.k)), gate.g)
        for i, gate in enumerate(gate_layers(model))
    ]


class RunLogger(keras.callbacks.Callback):
    """Writes ``history.csv`` and ``gates.csv`` atomically after every epoch,
    evaluates the test set each epoch (GR reports test error), and stops the
    run at the first NaN or infinite loss.

    ``test``: a function returning the test set's ``{"loss", "accuracy"}``
    (``None``: no test columns). ``out=None`` keeps the rows in memory only
    (a multi-worker run's other workers). On a resumed run, rows of epochs
    that are trained again are dropped, so the history never holds an epoch
    twice. ``seconds``: the epoch's training and validation time.
    """

    GATE_COLUMNS = ("epoch", "index", "block", "k", "g")

    def __init__(self, out, test=None, resume=True):
        super().__init__()
        self.out = None if out is None else Path(out)
        self.test = test
        # An earlier process's rows (read now, before anything is written:
        # a corrupt file is an error naming it, and the folder is untouched).
        read = self.out is not None and resume
        self.history = _history_rows(self.out / "history.csv") if read else []
        gates = self.out / "gates.csv" if read else None
        self.gates = plots.read_gates(gates) if gates and gates.exists() else []
        self.diverged = None
        self._trimmed = False
        self._epoch_start = None

    def on_train_begin(self, logs=None):
        if not self.gates:
            self.gates = [dict(zip(self.GATE_COLUMNS, r)) for r in gate_rows(self.model, -1)]

    def on_epoch_begin(self, epoch, logs=None):
        if not self._trimmed:  # the first epoch of this process
            self.history = [r for r in self.history if r["epoch"] < epoch]
            self.gates = [r for r in self.gates if r["epoch"] < epoch]
            self._trimmed = True
        self._epoch_start = time.perf_counter()
        # The rate the epoch's first step trains at (the schedule at the
        # current iteration), not the one the next epoch starts with.
        self._epoch_lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.diverged = f"the training loss became {float(loss)} at batch {batch}"
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        row = {"epoch": epoch, **{k: float(v) for k, v in (logs or {}).items()}}
        row["seconds"] = round(time.perf_counter() - self._epoch_start, 3)
        row["lr"] = self._epoch_lr
        if self.test is not None and not self.diverged:
            row.update({f"test_{k}": float(v) for k, v in self.test().items()})
        self.history.append(row)
        self.gates += [dict(zip(self.GATE_COLUMNS, r)) for r in gate_rows(self.model, epoch)]
        if self.out is not None:
            self.write()

    def write(self):
        columns = ["epoch"] + sorted({k for r in self.history for k in r} - {"epoch"})
        write_csv(self.out / "history.csv", columns,
                  [[r.get(c, "") for c in columns] for r in self.history])
        write_csv(self.out / "gates.csv", self.GATE_COLUMNS,
                  [[r[c] for c in self.GATE_COLUMNS] for r in self.gates])


def _history_rows(path):
    """The rows of an earlier process's ``history.csv`` (none if absent)."""
    if not path.exists():
        return []
    columns = plots.read_history(path)
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


class EpochBackup(keras.callbacks.Callback):
    """After every epoch, saves the model and its optimizer state as
    ``folder/epoch-NNNNN.weights.h5`` (a Keras weights file; NNNNN counts the
    finished epochs). Each file is written atomically, and the last ``keep``
    are kept. :meth:`restore` loads the newest that reads.

    Unlike Keras' ``BackupAndRestore``, the epoch is in the name of the one
    file that holds the weights: a kill at any moment leaves either the old or
    the new checkpoint, never weights of one epoch with the count of another.
    A diverged epoch (a NaN or infinite loss) is not saved.
    """

    def __init__(self, folder, keep=2):
        super().__init__()
        self.folder = Path(folder)
        self.keep = check_int(keep, "keep", 1)

    def checkpoints(self):
        """``[(epochs finished, path)]``, oldest first."""
        found = []
        for path in self.folder.glob("epoch-*.weights.h5"):
            count = path.name[len("epoch-"):-len(".weights.h5")]
            if count.isdigit():
                found.append((int(count), path))
        return sorted(found)

    def restore(self, model):
        """Load the newest readable checkpoint into ``model`` (building its
        optimizer first); returns its epoch count, 0 if there is none."""
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        errors = []
        for epoch, path in reversed(self.checkpoints()):
            try:
                model.load_weights(path)
                return epoch
            except (OSError, ValueError) as error:
                errors.append(f"{path.name}: {error}")
        if errors:
            raise ValueError(f"no checkpoint in {self.folder} could be read: {errors}")
        return 0

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.folder / f"epoch-{epoch + 1:05d}.weights.h5") as tmp:
            self.model.save_weights(tmp)
        for _, path in self.checkpoints()[:-self.keep]:
            path.unlink(missing_ok=True)


@dataclasses.dataclass
class Run:
    """What :func:`train` returns (``out`` is ``None`` on a multi-worker
    run's non-chief workers, which write nothing)."""

    out: Path
    config: dict
    model: keras.Model
    history: list
    results: dict


RUN_FILES = ("results.json", "config.json", "history.csv", "gates.csv", "model.keras",
             "history.png", "gates.png")
BACKUP = "backup"
# Keys every config.json of this package holds: how a folder is known as a
# run folder before anything in it is replaced.
_CONFIG_SCHEMA = ("model", "model_kwargs", "dataset", "recipe", "seed", "strategy")
_CHECKPOINT = re.compile(r"^epoch-\d{5,}\.weights\.h5$")
_PRUNED = re.compile(r"^pruned-\d+\.keras$")  # what `keras-gresnet prune RUN` writes


def _read_config(path):
    """A run folder's ``config.json`` (a dict of this package's schema);
    ``ValueError`` naming the file otherwise."""
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable JSON config ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: must hold a JSON object (a keras-gresnet run config), "
                         f"got {type(config).__name__}")
    missing = [k for k in _CONFIG_SCHEMA if k not in config]
    if missing or not isinstance(config.get("recipe"), dict):
        raise ValueError(f"{path} is not a keras-gresnet run config (it lacks "
                         f"{missing or ['recipe']}); this folder is not a run folder")
    return config


def _is_run_name(name):
    """Whether a file named ``name`` in a run folder is one this package writes
    (a temporary of one of them included)."""
    name = temporary_target(name) or name
    return name in RUN_FILES or bool(_CHECKPOINT.match(name)) or bool(_PRUNED.match(name))


def _is_run_file(path):
    """Whether ``path`` (in a run folder) is one this package writes."""
    if path.is_dir():
        return path.name == BACKUP and all(_is_run_file(p) for p in path.iterdir())
    return _is_run_name(path.name)


def _check_run_folder(out, config, overwrite):
    """Refuse a folder that is not ours, a finished run (unless ``overwrite``)
    or a folder holding a different run; return ``True`` when an unfinished
    run is resumed. Touches nothing.

    A folder is ours when it is new, empty, or holds a ``config.json`` of
    this package's schema. ``overwrite`` replaces only a run's own files and
    refuses a folder that holds anything else."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out={str(out)!r} is a file; pass a folder for the run")
    if not out.exists():
        parent = next((p for p in out.absolute().parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise ValueError(f"out={str(out)!r}: {parent} is a file, not a folder")
        return False
    entries = sorted(out.iterdir())
    if not entries:
        return False
    previous = out / "config.json"
    if not previous.is_file():
        names = ", ".join(p.name for p in entries[:5]) + ("..." if len(entries) > 5 else "")
        raise ValueError(
            f"out={str(out)!r} is not empty and holds no keras-gresnet run (no config.json; "
            f"it holds {names}); pick a new or empty folder")
    old = _read_config(previous)
    if overwrite:
        foreign = [p.name for p in entries if not _is_run_file(p)]
        if foreign:
            raise ValueError(
                f"out={str(out)!r} holds files that are not a run's own ({', '.join(foreign)}); "
                f"--overwrite replaces only a run's files: move them away, or pick another out")
        return False
    if (out / "results.json").exists():
        raise ValueError(
            f"out={str(out)!r} holds a finished run (results.json); pass "
            f"overwrite=True / --overwrite to train it again, or another out"
        )
    new = json.loads(json.dumps(config))
    differ = sorted(k for k in new if k not in _VOLATILE and old.get(k) != new[k])
    if differ:
        raise ValueError(
            f"out={str(out)!r} holds an unfinished run with another config "
            f"(differs in {differ}); resume it with the same arguments or pick "
            f"another out"
        )
    return True


def _remove_run_files(out):
    """Delete a run's own files in ``out`` (checked by :func:`_check_run_folder`)
    and nothing else; the backup folder goes only once empty."""
    for path in out.iterdir() if out.is_dir() else ():
        if path.is_file() and _is_run_file(path):
            path.unlink(missing_ok=True)
    _remove_backup(out)


def _remove_backup(out):
    """Delete the run's checkpoints (and its temporaries) in ``out/backup``;
    the folder itself only once nothing else is in it."""
    folder = out / BACKUP
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.is_file() and _CHECKPOINT.match(temporary_target(path.name) or path.name):
            path.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        pass  # something of the user's is in it: it stays


def _join_cluster(config, cluster, out, overwrite):
    """Start the multi-worker strategy; the chief checks the run folder and
    every worker learns its verdict. Returns ``(strategy, chief, resumed)``."""
    dist = distributed.make_strategy(cluster)
    chief, refusal, resumed = cluster.is_chief, None, False
    if chief:
        try:
            resumed = _check_run_folder(out, config, overwrite)
        except ValueError as error:
            refusal = error
    (accepted,) = distributed.broadcast_from_chief(dist, [float(refusal is None)], chief)
    if refusal is not None:
        raise refusal
    if not float(accepted):
        raise ValueError(f"the chief refused the run folder {str(out)!r}; its error "
                         f"message says why")
    return dist, chief, resumed


def train(model, *, out=None, overwrite=False, verbose="auto", workers=None,
          worker_index=None, **kwargs):
    """Train the zoo model ``model`` with its paper's recipe; returns a :class:`Run`.

    Args:
        model: a :func:`keras_gresnet.zoo.list_models` name.
        out: the run folder (default ``runs/{model}-{dataset}-seed{seed}``).
            An unfinished run there is resumed; a finished one is refused
            unless ``overwrite``.
        verbose: Keras' ``fit`` verbosity (``"auto"``: a progress bar).
        workers, worker_index: a multi-worker cluster
            (:mod:`keras_gresnet.distributed`): every worker's ``host:port``,
            the same list on every worker, and this worker's index in it.
            They write ``TF_CONFIG``; a ``TF_CONFIG`` already set does the same.
        **kwargs: the run's config, as :func:`resolve_config` takes it:
            ``dataset`` (default: the paper's), ``recipe`` (default: the
            paper's), ``model_kwargs`` (builder arguments: ``depth=20``...),
            ``seed`` (seeds weights, shuffling and augmentation; ops are made
            deterministic, so a CPU run is repeatable), ``strategy``
            (:func:`make_strategy`; the recipe's ``batch_size`` is per replica,
            the global batch ``batch_size * replicas``, and BatchNorm uses each
            replica's statistics, as the papers' multi-GPU runs did),
            ``validation_split`` (held out of the training set, reported as
            ``val_*``; the test set is evaluated after every epoch as
            ``test_*``), ``data_dir``, ``max_train_examples`` /
            ``max_test_examples`` (seeded subsets, for quick runs),
            ``sync_batchnorm`` (BatchNorm statistics over the global batch),
            and any recipe field (``epochs``, ``batch_size``,
            ``learning_rate``, ``weight_decay``, ``k_decay``...).

    Raises:
        TrainingDiverged: the loss became NaN or infinite (the run folder keeps
            its history and backup, no model.keras).
        keras_gresnet.distributed.WorkerLost: a multi-worker run lost a
            worker; start every worker again with the same command to resume.
    """
    cluster = distributed.resolve_cluster(workers, worker_index)
    config = resolve_config(model, cluster=cluster, **kwargs)
    seed = config["seed"]
    recipe = recipes.Recipe.from_config(config["recipe"])
    out = Path(out or f"runs/{config['model']}-{config['dataset']}-seed{seed}")
    multi_worker = config["strategy"] == "multi_worker"
    if multi_worker:  # before any other TensorFlow op, as the strategy requires
        dist, chief, resumed = _join_cluster(config, cluster, out, overwrite)
    else:
        resumed, chief = _check_run_folder(out, config, overwrite), True
        dist = make_strategy(config["strategy"])

    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()
    replicas = dist.num_replicas_in_sync
    global_batch_size = recipe.batch_size * replicas
    pipe = data.pipeline(
        config["dataset"],
        data_dir=config["data_dir"],
        preprocessing=recipe.preprocessing,
        batch_size=global_batch_size,
        validation_split=config["validation_split"],
        augment=recipe.augment,
        seed=seed,
        max_train_examples=config["max_train_examples"],
        max_test_examples=config["max_test_examples"],
    )
    if multi_worker:
        distributed.check_last_batch(pipe.num_train, global_batch_size, replicas)
    config["data"] = pipe.config
    config["replicas"] = replicas
    config["global_batch_size"] = global_batch_size
    backup = EpochBackup(out / "backup")
    with dist.scope():
        net = build_model(config, pipe.input_shape, pipe.num_classes)
        net.compile(
            optimizer=recipe.optimizer(pipe.steps_per_epoch),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        net.optimizer.build(net.trainable_variables)
    # Outside the scope: loading makes Keras create a throw-away optimizer,
    # whose variables would be broadcast (a collective op) by the chief alone.
    initial_epoch = backup.restore(net) if chief and resumed else 0
    if multi_worker:
        trainer = distributed.Trainer(net, dist, chief)
        initial_epoch = distributed.broadcast_state(dist, net, initial_epoch, chief)

    def evaluate_test():
        # Every replica tests with the BatchNorm statistics of the chief's
        # replica 0, so the test error reported is the saved model's.
        if multi_worker:
            return trainer.evaluate(pipe.test)
        distributed.share_statistics(dist, net)
        return net.evaluate(pipe.test, verbose=0, return_dict=True)

    logger = RunLogger(out if chief else None, test=evaluate_test, resume=resumed)
    # The history is written before the backup: a kill between the two
    # retrains that epoch and replaces its row, never loses it.
    callbacks = [logger, backup] if chief else [logger]
    epochs = recipe.fit_epochs(pipe.steps_per_epoch)
    # Epoch e's batches are a function of (seed, e): a resumed run and every
    # worker read what an uninterrupted single process reads.
    train_data = pipe.train_epochs(initial_epoch, epochs)
    # Only now that every argument and every file read has proved good does
    # the folder change, and only the chief's.
    if chief:
        if overwrite:
            _remove_run_files(out)
        out.mkdir(parents=True, exist_ok=True)
        for folder in (out, out / BACKUP):  # left by a killed process of ours
            remove_stale_temporaries(folder, owned=_is_run_name)
        if not resumed:
            write_json(out / "config.json", config)
    start = time.perf_counter()
    if multi_worker:
        trainer.fit(train_data, epochs=epochs, initial_epoch=initial_epoch,
                    steps_per_epoch=pipe.steps_per_epoch, num_examples=pipe.num_train,
                    global_batch_size=global_batch_size, validation_data=pipe.validation,
                    callbacks=callbacks, verbose=verbose if chief else 0)
    else:
        net.fit(
            train_data,
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=pipe.steps_per_epoch,
            validation_data=pipe.validation,
            callbacks=callbacks,
            verbose=verbose,
            shuffle=False,  # the pipeline shuffles (seeded)
        )
    seconds = time.perf_counter() - start
    if logger.diverged:
        raise TrainingDiverged(
            f"{config['model']} on {config['dataset']}: {logger.diverged} (epoch "
            f"{len(logger.history)}); lower the learning rate (--learning-rate), "
            f"check the data, or try another seed. History so far: {out / 'history.csv'}"
        )
    test = evaluate_test()
    results = dict(
        test_loss=float(test["loss"]),
        test_accuracy=float(test["accuracy"]),
        test_error_percent=100 * (1 - float(test["accuracy"])),
        epochs=logger.history[-1]["epoch"] + 1 if logger.history else initial_epoch,
        seconds_this_process=round(seconds, 1),
        gates={g.name: g.g for g in gate_layers(net)},
        params=zoo.summarize(net)["params"],
    )
    if not chief:
        return Run(out=None, config=config, model=net, history=logger.history,
                   results=results)
    with atomic_path(out / "model.keras") as tmp:
        inference_copy(net).save(tmp)
    plots.plot_history(out / "history.csv", out / "history.png",
                       title=f"{net.name} on {config['dataset']}")
    if gate_layers(net):
        plots.plot_gates_over_epochs(logger.gates, out / "gates.png", title=net.name)
    write_json(out / "results.json", results)
    # The backup goes last: a kill before results.json resumes with no epoch
    # left to train and only writes the files again.
    _remove_backup(out)
    return Run(out=out, config=config, model=net, history=logger.history, results=results)


def _load_model_file(path):
    """A ``.keras`` file, loaded with ``safe_mode=True`` (no code from the
    file runs); ``ValueError`` naming the file when Keras cannot read it."""
    try:
        return keras.saving.load_model(path, safe_mode=True)
    except (ValueError, TypeError, KeyError, OSError, AttributeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path}: not a loadable .keras model ({type(error).__name__}: "
                         f"{first[:300]})") from None


def load_run(path):
    """``(model, config)`` of a finished run folder, or ``(model, None)`` of a
    ``.keras`` file."""
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{str(path)!r} has no config.json: not a keras-gresnet run folder")
        config = _read_config(path / "config.json")
        if not (path / "model.keras").exists():
            raise ValueError(
                f"{str(path)!r} has no model.keras: not a finished run folder "
                f"(an unfinished run resumes with its train command)"
            )
        return _load_model_file(path / "model.keras"), config
    if path.suffix != ".keras" or not path.is_file():
        raise ValueError(f"expected a run folder or a .keras file, got {str(path)!r}")
    return _load_model_file(path), None


def test_data(config=None, *, dataset=None, data_dir=None, preprocessing=None, batch_size=256):
    """``(test dataset, dataset name, examples)`` as a run saw it: its dataset
    and training statistics from ``config``; without a config, ``dataset`` is
    required and ``preprocessing`` (default ``"scale"``) is fitted on the
    training split."""
    subset = None
    if config is not None:
        own = dataset in (None, config["dataset"])
        dataset = dataset or config["dataset"]
        data_dir = data_dir or config.get("data_dir")
        try:
            fitted = data.Preprocessing.from_config(config["data"]["preprocessing"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"the run's config.json has no valid data.preprocessing "
                             f"({error!r})") from None
        if own and config.get("max_test_examples"):
            # The run's own test set: its seeded subset (data.pipeline's).
            subset = (config["max_test_examples"], config["seed"])
    else:
        if dataset is None:
            raise ValueError("dataset is required for a bare .keras file (e.g. --dataset "
                             "fashion_mnist)")
        check_choice(dataset, "dataset", tuple(data.DATASETS))
        images, _ = data.load(dataset, "train", data_dir=data_dir)
        fitted = data.Preprocessing.fit(preprocessing or "scale", images)
    images, labels = data.load(dataset, "test", data_dir=data_dir)
    if subset is not None:
        index = data.test_subset(len(labels), *subset)
        images, labels = images[index], labels[index]
    dataset_ = data.make_dataset(images, labels, batch_size=batch_size, preprocessing=fitted)
    return dataset_, dataset, len(labels)


def evaluate(path, *, dataset=None, data_dir=None, batch_size=256, preprocessing=None):
    """Test loss, accuracy and error of a run folder's model (its dataset and
    training statistics from ``config.json``) or of a ``.keras`` file (give
    ``dataset``; ``preprocessing`` defaults to ``"scale"``, fitted on the
    training split)."""
    model, config = load_run(path)
    test, dataset, examples = test_data(config, dataset=dataset, data_dir=data_dir,
                                        preprocessing=preprocessing, batch_size=batch_size)
    if not model.compiled:  # published files carry no optimizer or compile state
        model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    metrics = model.evaluate(test, verbose=0, return_dict=True)
    return dict(
        dataset=dataset,
        test_loss=float(metrics["loss"]),
        test_accuracy=float(metrics["accuracy"]),
        test_error_percent=100 * (1 - float(metrics["accuracy"])),
        examples=examples,
    )
