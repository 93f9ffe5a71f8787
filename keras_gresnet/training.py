"""Train any zoo model with its paper's recipe, on one device or many.

:func:`train` resolves a full config (model, builder arguments, dataset,
recipe with overrides, seed, strategy), builds the model under the
``tf.distribute`` strategy, trains it with ``model.fit`` and leaves a run
folder behind:

============== ===========================================================
config.json    the resolved config (written first)
history.csv    per-epoch loss/accuracy (train, validation, test) and lr
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
import shutil
import sys
import time
from pathlib import Path

import keras
import tensorflow as tf

from keras_gresnet import data, plots, recipes, zoo
from keras_gresnet._checks import check_choice, check_int, check_rate
from keras_gresnet._io import atomic_path, write_csv, write_json
from keras_gresnet.layers import gate_layers

STRATEGIES = ("auto", "default", "one_device", "mirrored")

# The paper each model family comes from decides its default recipe and data.
DEFAULT_RECIPES = (("*_mlp", "gr_mnist"), ("wide_*", "wrn_cifar"), ("*", "preact_cifar"))
DEFAULT_DATASETS = (("*_mlp", "mnist"), ("*", "cifar10"))
# Keys of config.json that may differ when a run is resumed.
_VOLATILE = ("command", "versions")


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


def make_strategy(name="auto"):
    """A ``tf.distribute`` strategy by name.

    ``"auto"``: ``MirroredStrategy`` when more than one GPU is visible, else
    the default (single-device) strategy. ``"mirrored"``: one replica per GPU,
    or per logical CPU device when there is no GPU (e.g. set up with
    ``tf.config.set_logical_device_configuration``).
    """
    check_choice(name, "strategy", STRATEGIES)
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        name = "mirrored" if len(gpus) > 1 else "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    return tf.distribute.MirroredStrategy(devices)


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
    **overrides,
):
    """The full, JSON-ready config of a training run; every argument checked.

    ``overrides`` replace fields of the recipe (``epochs=2``,
    ``learning_rate=0.01``, ``k_decay=True``...).
    """
    builder = zoo.model_builder(model)
    dataset = dataset or default_dataset(model)
    check_choice(dataset, "dataset", tuple(data.DATASETS))
    recipe = recipes.get_recipe(recipe or default_recipe(model), **overrides)
    check_int(seed, "seed", 0)
    check_choice(strategy, "strategy", STRATEGIES)
    check_rate(validation_split, "validation_split")
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
        command=list(sys.argv),
        versions=dict(keras=keras.__version__, tensorflow=tf.__version__),
    )


def build_model(config, input_shape, num_classes):
    """The config's zoo model with the recipe's decay and BN momentum."""
    model = zoo.get_model(
        config["model"], input_shape=input_shape, classes=num_classes, **config["model_kwargs"]
    )
    recipes.Recipe.from_config(config["recipe"]).apply_to(model)
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

    On a resumed run, rows of epochs that are trained again are dropped, so
    the history never holds an epoch twice.
    """

    GATE_COLUMNS = ("epoch", "index", "block", "k", "g")

    def __init__(self, out, test_data=None):
        super().__init__()
        self.out = Path(out)
        self.test_data = test_data
        self.history = _history_rows(self.out / "history.csv")
        gates = self.out / "gates.csv"
        self.gates = plots.read_gates(gates) if gates.exists() else []
        self.diverged = None
        self._trimmed = False

    def on_train_begin(self, logs=None):
        if not self.gates:
            self.gates = [dict(zip(self.GATE_COLUMNS, r)) for r in gate_rows(self.model, -1)]

    def on_epoch_begin(self, epoch, logs=None):
        if not self._trimmed:  # the first epoch of this process
            self.history = [r for r in self.history if r["epoch"] < epoch]
            self.gates = [r for r in self.gates if r["epoch"] < epoch]
            self._trimmed = True

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.diverged = f"the training loss became {float(loss)} at batch {batch}"
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        row = {"epoch": epoch, **{k: float(v) for k, v in (logs or {}).items()}}
        row["lr"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        if self.test_data is not None and not self.diverged:
            test = self.model.evaluate(self.test_data, verbose=0, return_dict=True)
            row.update({f"test_{k}": float(v) for k, v in test.items()})
        self.history.append(row)
        self.gates += [dict(zip(self.GATE_COLUMNS, r)) for r in gate_rows(self.model, epoch)]
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


@dataclasses.dataclass
class Run:
    """What :func:`train` returns."""

    out: Path
    config: dict
    model: keras.Model
    history: list
    results: dict


RUN_FILES = ("results.json", "config.json", "history.csv", "gates.csv", "model.keras",
             "history.png", "gates.png")


def _check_run_folder(out, config, overwrite):
    """Refuse a finished run (unless ``overwrite``) or a folder holding a
    different run; return ``True`` when an unfinished run is resumed.
    Touches nothing."""
    if (out / "results.json").exists() and not overwrite:
        raise ValueError(
            f"out={str(out)!r} holds a finished run (results.json); pass "
            f"overwrite=True / --overwrite to train it again, or another out"
        )
    if overwrite:
        return False
    previous = out / "config.json"
    if not previous.exists():
        return False
    old = json.loads(previous.read_text())
    new = json.loads(json.dumps(config))
    differ = sorted(k for k in new if k not in _VOLATILE and old.get(k) != new[k])
    if differ:
        raise ValueError(
            f"out={str(out)!r} holds an unfinished run with another config "
            f"(differs in {differ}); resume it with the same arguments or pick "
            f"another out"
        )
    return True


def train(model, *, out=None, overwrite=False, verbose="auto", **kwargs):
    """Train the zoo model ``model`` with its paper's recipe; returns a :class:`Run`.

    Args:
        model: a :func:`keras_gresnet.zoo.list_models` name.
        out: the run folder (default ``runs/{model}-{dataset}-seed{seed}``).
            An unfinished run there is resumed; a finished one is refused
            unless ``overwrite``.
        verbose: Keras' ``fit`` verbosity (``"auto"``: a progress bar).
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
            ``max_test_examples`` (seeded subsets, for quick runs), and any
            recipe field (``epochs``, ``batch_size``, ``learning_rate``,
            ``weight_decay``, ``k_decay``...).

    Raises:
        TrainingDiverged: the loss became NaN or infinite (the run folder keeps
            its history and backup, no model.keras).
    """
    config = resolve_config(model, **kwargs)
    seed = config["seed"]
    recipe = recipes.Recipe.from_config(config["recipe"])
    out = Path(out or f"runs/{config['model']}-{config['dataset']}-seed{seed}")
    resumed = _check_run_folder(out, config, overwrite)

    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()
    dist = make_strategy(config["strategy"])
    replicas = dist.num_replicas_in_sync
    pipe = data.pipeline(
        config["dataset"],
        data_dir=config["data_dir"],
        preprocessing=recipe.preprocessing,
        batch_size=recipe.batch_size * replicas,
        validation_split=config["validation_split"],
        augment=recipe.augment,
        seed=seed,
        max_train_examples=config["max_train_examples"],
        max_test_examples=config["max_test_examples"],
    )
    config["data"] = pipe.config
    config["replicas"] = replicas
    config["global_batch_size"] = recipe.batch_size * replicas
    with dist.scope():
        net = build_model(config, pipe.input_shape, pipe.num_classes)
        net.compile(
            optimizer=recipe.optimizer(pipe.steps_per_epoch),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )

    # Only now that every argument has proved good does the folder change.
    if overwrite:
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "backup", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    if not resumed:
        write_json(out / "config.json", config)
    logger = RunLogger(out, test_data=pipe.test)
    backup = keras.callbacks.BackupAndRestore(out / "backup", double_checkpoint=True)
    start = time.perf_counter()
    fit = net.fit(
        pipe.train,
        epochs=recipe.fit_epochs(pipe.steps_per_epoch),
        validation_data=pipe.validation,
        callbacks=[backup, logger],
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
    del fit
    test = net.evaluate(pipe.test, verbose=0, return_dict=True)
    results = dict(
        test_loss=float(test["loss"]),
        test_accuracy=float(test["accuracy"]),
        test_error_percent=100 * (1 - float(test["accuracy"])),
        epochs=len(logger.history),
        seconds_this_process=round(seconds, 1),
        gates={g.name: g.g for g in gate_layers(net)},
        params=zoo.summarize(net)["params"],
    )
    with atomic_path(out / "model.keras") as tmp:
        inference_copy(net).save(tmp)
    plots.plot_history(out / "history.csv", out / "history.png",
                       title=f"{net.name} on {config['dataset']}")
    if gate_layers(net):
        plots.plot_gates_over_epochs(logger.gates, out / "gates.png", title=net.name)
    write_json(out / "results.json", results)
    return Run(out=out, config=config, model=net, history=logger.history, results=results)


def load_run(path):
    """``(model, config)`` of a finished run folder, or ``(model, None)`` of a
    ``.keras`` file."""
    path = Path(path)
    if path.is_dir():
        if not (path / "model.keras").exists():
            raise ValueError(
                f"{str(path)!r} has no model.keras: not a finished run folder "
                f"(an unfinished run resumes with its train command)"
            )
        config = json.loads((path / "config.json").read_text())
        return keras.saving.load_model(path / "model.keras"), config
    if path.suffix != ".keras" or not path.exists():
        raise ValueError(f"expected a run folder or a .keras file, got {str(path)!r}")
    return keras.saving.load_model(path), None


def test_data(config=None, *, dataset=None, data_dir=None, preprocessing=None, batch_size=256):
    """``(test dataset, dataset name, examples)`` as a run saw it: its dataset
    and training statistics from ``config``; without a config, ``dataset`` is
    required and ``preprocessing`` (default ``"scale"``) is fitted on the
    training split."""
    if config is not None:
        dataset = dataset or config["dataset"]
        data_dir = data_dir or config.get("data_dir")
        fitted = data.Preprocessing.from_config(config["data"]["preprocessing"])
    else:
        if dataset is None:
            raise ValueError("dataset is required for a bare .keras file (e.g. --dataset "
                             "fashion_mnist)")
        check_choice(dataset, "dataset", tuple(data.DATASETS))
        images, _ = data.load(dataset, "train", data_dir=data_dir)
        fitted = data.Preprocessing.fit(preprocessing or "scale", images)
    images, labels = data.load(dataset, "test", data_dir=data_dir)
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
