"""The run folder: its files, how they are written and read back, and which
folders a run may use.

============== ===========================================================
config.json    the resolved config (written first)
history.csv    per-epoch loss/accuracy (train, validation, test) and the lr of the
               epoch's first step; ``epoch`` 1 is the first (the console's count)
gates.csv      per-epoch ``k`` and ``g(k)`` of every gate (epoch 0: initial)
model.keras    the final model, without optimizer state
               (:func:`keras_gresnet.training.inference_copy`)
history.png    training / test curves; gates.png: ``k`` per block over epochs
results.json   final test metrics; written last, so it marks a finished run
backup/        ``epoch-NNNNN.weights.h5`` checkpoints while a run is unfinished
tensorboard/   TensorBoard event files, with ``tensorboard=True``
               (:mod:`keras_gresnet.training.tensorboard`; appended to by
               ``tf.summary``, the one exception to the atomic writes)
run.lock       while a process trains into the folder: its pid, host and
               start (:class:`keras_gresnet.runlock.RunLock`); a second trainer, or an
               ``--overwrite``, is refused while the holder lives
============== ===========================================================

Every file is written atomically (temporary file + ``os.replace``).
:class:`RunLogger` and :class:`EpochBackup` write the files of each epoch;
:func:`check_folder` decides whether a folder may hold a run (and whether it
resumes one), :func:`prepare_folder` and :func:`finish` write the rest, and
:func:`load_run` reads a finished run back.
"""

import csv
import errno
import io
import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import keras

from keras_gresnet import plots
from keras_gresnet._checks import check_int
from keras_gresnet.files import (
    atomic_path, read_bounded, read_json, remove_stale_temporaries, temporary_target,
    write_csv, write_json,
)
from keras_gresnet.layers import ZooModel, gate_layers
from keras_gresnet.runlock import LOCK, RunLock
from keras_gresnet.weights.loading import weights_file_bytes
from keras_gresnet.zoo.cards import run_card
from keras_gresnet.zoo.resolver import resolve
from keras_gresnet.zoo.run_config import read_run_config
from keras_gresnet.training.tensorboard import RUNS as TENSORBOARD_RUNS
from keras_gresnet.training.tensorboard import TENSORBOARD

CONFIG, HISTORY, GATES, MODEL, RESULTS = (
    "config.json", "history.csv", "gates.csv", "model.keras", "results.json")
BACKUP = "backup"
RUN_FILES = (RESULTS, CONFIG, HISTORY, GATES, MODEL, "history.png", "gates.png")
HISTORY_COLUMNS = ("epoch", "loss", "accuracy")
GATES_COLUMNS = ("epoch", "index", "block", "k", "g")
# Keys every config.json of this package holds: how a folder is known as a
# run folder before anything in it is replaced.
_CONFIG_SCHEMA = ("model", "model_kwargs", "dataset", "recipe", "seed", "strategy")
# Keys of config.json that may differ when a run is resumed.
_VOLATILE = ("command", "versions")
# Keys added to the config since the first runs: a config.json without one
# was trained with its value here.
_ADDED = {"dtype_policy": "float32"}
_CHECKPOINT = re.compile(r"^epoch-\d{5,}\.weights\.h5$")
_PRUNED = re.compile(r"^pruned-\d+\.keras$")  # what `keras-gresnet prune RUN` writes
_EVENTS = re.compile(r"^events\.out\.tfevents\.\d+\..+$")  # tf.summary's file names


def run_folder(config, out=None):
    """``out``, or the default folder of ``config``'s run:
    ``runs/{model}-{dataset}-seed{seed}``."""
    return Path(out or f"runs/{config['model']}-{config['dataset']}-seed{config['seed']}")


# --------------------------------------------------------------------------
# Reading the CSV logs.


def _in_run(path, name):
    """``path``, or its file ``name`` when ``path`` is a run folder."""
    return Path(path) / name if isinstance(path, (str, os.PathLike)) and os.path.isdir(path) \
        else path


def _read_csv(path, required):
    """``(columns, rows)`` of ``path``, rows as dicts of strings, after
    checking its header holds every ``required`` column."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a file path, got {path!r}")
    try:
        text = read_bounded(path).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{os.fspath(path)}: not UTF-8 text ({error.reason})") from None
    with io.StringIO(text, newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        missing = [c for c in required if c not in columns]
        if missing:
            raise ValueError(
                f"{os.fspath(path)}: missing column(s) {', '.join(missing)} "
                f"(header: {','.join(columns) or 'empty'})"
            )
        return columns, list(reader)


def _number(text, cast, path, line, column):
    # A value missing at some epoch: empty (RunLogger) or "NA" (Keras' CSVLogger).
    if cast is float and text in ("", "NA", "nan"):
        return math.nan
    try:
        return cast(text)
    except (TypeError, ValueError):
        raise ValueError(
            f"{os.fspath(path)}, line {line}: column {column} is {text!r}, not a number"
        ) from None


def read_history(path):
    """A ``history.csv`` (or a run folder's) as ``{column: [values per epoch]}``.

    Every column is read as numbers (``epoch`` as int, the others as float;
    ``NA`` or empty as NaN), whatever their order. ``epoch``, ``loss`` and
    ``accuracy`` are required; ``val_*`` / ``test_*`` are optional.

    Raises:
        ValueError: a required column is missing (the message names the file
            and the column) or a value is not a number.
    """
    path = _in_run(path, HISTORY)
    columns, rows = _read_csv(path, HISTORY_COLUMNS)
    history = {
        column: [
            _number(row[column], int if column == "epoch" else float, path, line, column)
            for line, row in enumerate(rows, start=2)
        ]
        for column in columns
    }
    epochs = history["epoch"]
    old = bool(epochs) and epochs[0] == 0  # written before epochs counted from 1
    bad = next((i for i, e in enumerate(epochs)
                if e < (0 if old else 1) or (i and e <= epochs[i - 1])), None)
    if bad is not None:  # in the file's own numbers
        raise ValueError(f"{path}, line {bad + 2}: epoch {epochs[bad]} after "
                         f"{epochs[bad - 1] if bad else 'none'}; a history's epochs count up "
                         f"from 1, once each")
    if old:
        epochs[:] = [e + 1 for e in epochs]
    return history


def read_gates(path):
    """A ``gates.csv`` (or a run folder's) as a list of ``{"epoch", "index",
    "block", "k", "g"}`` dicts (``epoch``, ``index`` ints; ``k``, ``g`` floats).
    ``epoch`` counts the epochs trained: 0 is before training, 1 after the
    first (a file written when the initial gates were epoch -1 is read so).

    Raises:
        ValueError: a required column is missing (the message names the file
            and the column) or a value is not a number.
    """
    path = _in_run(path, GATES)
    casts = {"epoch": int, "index": int, "block": str, "k": float, "g": float}
    rows = [
        {c: _number(row[c], cast, path, line, c) for c, cast in casts.items()}
        for line, row in enumerate(_read_csv(path, GATES_COLUMNS)[1], start=2)
    ]
    if rows and min(r["epoch"] for r in rows) == -1:  # written before epochs counted from 1
        for row in rows:
            row["epoch"] += 1
    return rows


def _history_rows(path):
    """The rows of an earlier process's ``history.csv`` (none if absent)."""
    if not path.exists():
        return []
    columns = read_history(path)
    # A run resumes only from finite epochs: this package stops a run at the
    # first non-finite loss, so an infinite value was not written by it.
    for column, values in columns.items():
        infinite = next((i for i, v in enumerate(values) if math.isinf(v)), None)
        if infinite is not None:
            raise ValueError(f"{path}, line {infinite + 2}: {column} is infinite; a run "
                             f"resumes from finite epochs only")
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def read_results(out):
    """The ``results.json`` of the run folder ``out``, or ``None`` while the
    run is unfinished."""
    path = Path(out) / RESULTS
    return read_json(path) if path.exists() else None


def write_results(out, results):
    """Write ``results`` as the ``results.json`` of ``out``: the run counts as
    finished from then on, and is not trained again unless overwritten."""
    write_json(Path(out) / RESULTS, results)


# --------------------------------------------------------------------------
# The files of every epoch.


def gate_rows(model, epoch):
    """``(epoch, index, block, k, g)`` for every gate of ``model``; ``epoch``:
    the epochs trained (0 before training)."""
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

    GATE_COLUMNS = GATES_COLUMNS

    def __init__(self, out, test=None, resume=True):
        super().__init__()
        self.out = None if out is None else Path(out)
        self.test = test
        # An earlier process's rows (read now, before anything is written:
        # a corrupt file is an error naming it, and the folder is untouched).
        read = self.out is not None and resume
        self.history = _history_rows(self.out / HISTORY) if read else []
        gates = self.out / GATES if read else None
        self.gates = read_gates(gates) if gates and gates.exists() else []
        self.diverged = None
        self._trimmed = False
        self._epoch_start = None

    # Epochs are counted as the console counts them ("Epoch 1/10"): a row's
    # epoch is the number of epochs trained when it was written (Keras'
    # callbacks get the 0-based index of the epoch), the gates' first rows
    # (before training) are epoch 0.

    def on_train_begin(self, logs=None):
        if not self.gates:
            self.gates = [dict(zip(self.GATE_COLUMNS, r)) for r in gate_rows(self.model, 0)]

    def on_epoch_begin(self, epoch, logs=None):
        if not self._trimmed:  # the first epoch of this process: `epoch` were trained
            self.history = [r for r in self.history if r["epoch"] <= epoch]
            self.gates = [r for r in self.gates if r["epoch"] <= epoch]
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
        row = {"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}}
        row["seconds"] = round(time.perf_counter() - self._epoch_start, 3)
        row["lr"] = self._epoch_lr
        if self.test is not None and not self.diverged:
            row.update({f"test_{k}": float(v) for k, v in self.test().items()})
            # A net can train on finite batch statistics while the moving
            # statistics that testing (and the saved model) use are not
            # finite any more (seen on JAX): that is divergence too.
            if not math.isfinite(row.get("test_loss", 0.0)):
                self.diverged = (f"the test loss became {row['test_loss']} after epoch "
                                 f"{epoch + 1}")
                self.model.stop_training = True
        self.history.append(row)
        self.gates += [dict(zip(self.GATE_COLUMNS, r))
                       for r in gate_rows(self.model, epoch + 1)]
        if self.out is not None:
            self.write()

    def write(self):
        columns = ["epoch"] + sorted({k for r in self.history for k in r} - {"epoch"})
        write_csv(self.out / HISTORY, columns,
                  [[r.get(c, "") for c in columns] for r in self.history])
        write_csv(self.out / GATES, self.GATE_COLUMNS,
                  [[r[c] for c in self.GATE_COLUMNS] for r in self.gates])


def _nbytes(variable):
    """The bytes of a variable's values: its size times its dtype's width
    (the bits in its name, e.g. float32, bfloat16; a byte for bool)."""
    bits = "".join(c for c in keras.backend.standardize_dtype(variable.dtype) if c.isdigit())
    return math.prod(variable.shape) * (int(bits) // 8 if bits else 1)


class RaiseInterrupt(keras.callbacks.Callback):
    """Raises a Ctrl-C that ``interrupt`` (a :class:`~keras_gresnet.files.
    interrupt_kept`) saw but that never reached the run (C code swallowed
    it) after the next training batch or epoch: the run stops as a Ctrl-C
    stops it. No test-batch hook: one would turn off Keras' asynchronous
    dispatch of every callback's test-batch hooks during validation (where a
    backend has it); a Ctrl-C swallowed there is raised at the epoch's end."""

    def __init__(self, interrupt):
        super().__init__()
        self.interrupt = interrupt

    def on_train_batch_end(self, batch, logs=None):
        self.interrupt.check()

    def on_epoch_end(self, epoch, logs=None):
        self.interrupt.check()


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

    def __init__(self, folder, keep=2, diverged=None):
        super().__init__()
        self.diverged = diverged  # a callable: has the run diverged (test loss too)?
        self.folder = Path(folder)
        self.keep = check_int(keep, "keep", 1)

    # HDF5's own bytes per variable (its dataset header and group entry) and
    # per file, above the values: generous upper bounds (the first backup of
    # `train gresnet_mlp --depth 2`, 597,952 bytes, was estimated at 825,768).
    H5_BYTES_PER_VARIABLE = 4096
    H5_BYTES_PER_FILE = 65536

    def _check_space(self, path):
        """Refuse (``OSError`` ENOSPC naming ``path``) a backup the disk cannot
        hold, before HDF5 opens the file: h5py cannot recover from a full disk
        in the middle of a write (it crashes the process as the half-written
        file is released). The bound: the last backup's size or the values of
        the model and its optimizer plus HDF5's overhead, whichever is larger."""
        variables = list(self.model.variables)
        if self.model.optimizer is not None:
            variables += list(self.model.optimizer.variables)
        need = self.H5_BYTES_PER_FILE + sum(
            self.H5_BYTES_PER_VARIABLE + _nbytes(v) for v in variables)
        found = self.checkpoints()
        if found:
            need = max(need, found[-1][1].stat().st_size + self.H5_BYTES_PER_FILE)
        free = shutil.disk_usage(self.folder).free
        if free < need:
            raise OSError(errno.ENOSPC, f"No space left on device (the epoch backup needs "
                                        f"{need:,} bytes, {free:,} are free)", str(path))

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
        if self.diverged is not None and self.diverged():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"epoch-{epoch + 1:05d}.weights.h5"
        self._check_space(path)
        data = weights_file_bytes(self.model)  # HDF5 in memory: a failing disk cannot reach h5py
        try:
            with atomic_path(path) as tmp:
                tmp.write_bytes(data)
        except OSError as error:  # name the file: a write's error carries none
            raise OSError(error.errno, error.strerror, str(path)) from None
        for _, path in self.checkpoints()[:-self.keep]:
            path.unlink(missing_ok=True)


# --------------------------------------------------------------------------
# Which folders hold a run, and which files are a run's own.


def read_config(path):
    """A run folder's ``config.json`` (a dict of this package's schema, the
    settings older versions kept elsewhere where they are now:
    :func:`_builder_settings`); ``ValueError`` naming the file otherwise."""
    config = read_run_config(path)  # the values a reader relies on, checked
    missing = [k for k in _CONFIG_SCHEMA if k not in config]
    if missing or not isinstance(config.get("recipe"), dict):
        raise ValueError(f"{path} is not a keras-gresnet run config (it lacks "
                         f"{missing or ['recipe']}); this folder is not a run folder")
    return _builder_settings(config)


def _builder_settings(config):
    """``config`` with the architecture settings an older version kept in
    the recipe (:data:`~keras_gresnet.training.recipes.BUILDER_SETTINGS`)
    moved to ``model_kwargs`` where they differ from the builder's default
    (the same model, so a run of then resumes with the same arguments now)."""
    import inspect

    from keras_gresnet.training.recipes import BUILDER_SETTINGS
    from keras_gresnet.zoo import list_models, model_builder

    recipe, kwargs = config["recipe"], config["model_kwargs"]
    known = config["model"] in list_models()
    params = inspect.signature(model_builder(config["model"])).parameters if known else {}
    for key in BUILDER_SETTINGS:
        if key not in recipe:
            continue
        value = recipe.pop(key)
        if key in params and key not in kwargs and value != params[key].default:
            kwargs[key] = value
    return config


def _is_run_name(name):
    """Whether a file named ``name`` in a run folder is one this package writes
    (a temporary of one of them included)."""
    name = temporary_target(name) or name
    return (name in RUN_FILES or name == LOCK or bool(_CHECKPOINT.match(name))
            or bool(_PRUNED.match(name)))


def _is_run_file(path):
    """Whether ``path`` (in a run folder) is one this package writes."""
    if path.is_dir():
        if path.name == TENSORBOARD:
            return all(_is_event_folder(p) for p in path.iterdir())
        return path.name == BACKUP and all(_is_run_file(p) for p in path.iterdir())
    return _is_run_name(path.name)


def _is_event_folder(path):
    """Whether ``path`` (in ``tensorboard/``) is a folder of a run's event files."""
    return path.is_dir() and path.name in TENSORBOARD_RUNS and all(
        p.is_file() and _EVENTS.match(p.name) for p in path.iterdir())


def check_folder(out, config, overwrite):
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
    RunLock(out).check()
    entries = sorted(p for p in out.iterdir() if p.name != LOCK)
    if not entries:
        return False
    _refuse_links(out)
    previous = out / CONFIG
    if not previous.is_file():
        names = ", ".join(p.name for p in entries[:5]) + ("..." if len(entries) > 5 else "")
        raise ValueError(
            f"out={str(out)!r} is not empty and holds no keras-gresnet run (no config.json; "
            f"it holds {names}); pick a new or empty folder")
    old = read_config(previous)
    if overwrite:
        foreign = [p.name for p in entries if not _is_run_file(p)]
        if foreign:
            raise ValueError(
                f"out={str(out)!r} holds files that are not a run's own ({', '.join(foreign)}); "
                f"--overwrite replaces only a run's files: move them away, or pick another out")
        return False
    if (out / RESULTS).exists():
        raise ValueError(
            f"out={str(out)!r} holds a finished run (results.json); pass "
            f"overwrite=True / --overwrite to train it again, or another out"
        )
    new = json.loads(json.dumps(config))
    differ = sorted(k for k in new
                    if k not in _VOLATILE and old.get(k, _ADDED.get(k)) != new[k])
    if differ:
        raise ValueError(
            f"out={str(out)!r} holds an unfinished run with another config "
            f"(differs in {differ}); resume it with the same arguments or pick "
            f"another out"
        )
    return True


def _refuse_links(out):
    """A run folder's ``backup`` and ``tensorboard`` folders (and the event
    folders in it) are the run's own: one that is a symbolic link points at
    something this program did not make, which it must neither write into
    nor delete from."""
    linked = [p for p in (out / BACKUP, out / TENSORBOARD) if p.is_symlink()]
    if (out / TENSORBOARD).is_dir() and not (out / TENSORBOARD).is_symlink():
        linked += [p for p in (out / TENSORBOARD).iterdir() if p.is_symlink()]
    if linked:
        raise ValueError(
            f"out={str(out)!r}: {linked[0]} is a symbolic link (to {os.readlink(linked[0])}); "
            f"a run keeps its own {linked[0].name} folder and never writes or deletes "
            f"through a link: remove the link or pick another out")


def _remove_run_files(out):
    """Delete a run's own files in ``out`` (checked by :func:`check_folder`)
    and nothing else; the backup folder goes only once empty."""
    for path in out.iterdir() if out.is_dir() else ():
        if path.is_file() and not path.is_symlink() and _is_run_file(path):
            path.unlink(missing_ok=True)
    _remove_backup(out)
    _remove_tensorboard(out)


def _remove_tensorboard(out):
    """Delete the run's event files in ``out/tensorboard`` (the logs of the
    run that is overwritten), and the folders once empty."""
    folder = out / TENSORBOARD
    if not folder.is_dir() or folder.is_symlink():
        return
    for run in folder.iterdir():
        if not run.is_symlink() and _is_event_folder(run):
            for path in run.iterdir():
                path.unlink(missing_ok=True)
            run.rmdir()
    try:
        folder.rmdir()
    except OSError:
        pass  # something of the user's is in it: it stays


def _remove_backup(out):
    """Delete the run's checkpoints (and its temporaries) in ``out/backup``;
    the folder itself only once nothing else is in it."""
    folder = out / BACKUP
    if not folder.is_dir() or folder.is_symlink():
        return
    for path in folder.iterdir():
        if path.is_file() and not path.is_symlink() and _CHECKPOINT.match(temporary_target(path.name) or path.name):
            path.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        pass  # something of the user's is in it: it stays


# --------------------------------------------------------------------------
# Writing the folder before and after training.


def prepare_folder(out, config, *, overwrite, resumed):
    """Make ``out`` ready for training, once :func:`check_folder` has accepted
    it: the folder's :class:`RunLock` taken (returned: release it when the run
    ends), a run's old files gone (``overwrite``), the temporaries of a killed
    process of ours removed, and ``config.json`` written (unless ``resumed``)."""
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out)
    lock.take()
    try:
        _prepare_held_folder(out, config, overwrite=overwrite, resumed=resumed)
    except BaseException:
        lock.release()
        raise
    return lock


def _prepare_held_folder(out, config, *, overwrite, resumed):
    if overwrite:
        _remove_run_files(out)
    for folder in (out, out / BACKUP):  # left by a killed process of ours
        remove_stale_temporaries(folder, owned=_is_run_name)
    if not resumed:
        write_json(out / CONFIG, config)


def finish(out, model, results, gates, dataset, config=None):
    """Write a trained run's last files: ``model.keras`` (``model``, as it is
    published, with the run's card when ``config`` is given), the figures of
    its history and its ``gates`` rows, ``results.json``; then remove the
    backup."""
    if config is not None and isinstance(model, ZooModel):
        model.remember(model.builder, model.builder_kwargs, run_card(config, results))
    with atomic_path(out / MODEL) as tmp:
        model.save(tmp)
    plots.plot_history(read_history(out / HISTORY), out / "history.png",
                       title=f"{model.name} on {dataset}")
    if gate_layers(model):
        plots.plot_gates_over_epochs(gates, out / "gates.png", title=model.name)
    write_results(out, results)
    # The backup goes last: a kill before results.json resumes with no epoch
    # left to train and only writes the files again.
    _remove_backup(out)


# --------------------------------------------------------------------------
# Reading a finished run.


def load_run(path):
    """``(model, config)`` of a finished run folder, or ``(model, None)`` of
    any other source :func:`keras_gresnet.zoo.resolve` takes."""
    resolved = resolve(path)
    return resolved.model, resolved.config
