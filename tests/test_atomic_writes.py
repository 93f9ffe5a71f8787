"""Writes that fail part-way: the previous file stays intact and nothing
partial appears under the final name (the JSON/CSV/text writers, the epoch
backup, a run's ``model.keras``, a preset). A full disk, end to end: one line
naming the file, nothing half-written, and the same command resumes."""

import errno
import json
import os
import pathlib
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from helpers import TINY, one_error_line, swallow_a_ctrl_c, train
from keras_gresnet import files, training, zoo
from keras_gresnet.training import runs


class Interrupted(OSError):
    pass


def _half_then_fail(*args, **kwargs):
    """A stand-in for a writer (``save(path)``, ``Path.write_bytes(self,
    data)``, ``Path.write_text(self, text)``) that puts part of its bytes at
    the path and then fails, as a full disk or a kill would."""
    path = next(a for a in args if isinstance(a, (str, pathlib.PurePath)))
    with open(path, "wb") as file:  # not Path.write_bytes: it may be the stand-in
        file.write(b"partial")
    raise Interrupted(28, "No space left on device")


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in pathlib.Path(folder).rglob("*"))


@pytest.mark.parametrize("writer,payload", [
    (files.write_text, "new text\n"),
    (files.write_json, {"new": 1}),
    (lambda path, rows: files.write_csv(path, ["a", "b"], rows), [(1, 2)]),
])
def test_a_failed_text_write_keeps_the_previous_file(tmp_path, monkeypatch, writer, payload):
    target = tmp_path / "out.json"
    target.write_text("previous\n")
    monkeypatch.setattr(pathlib.Path, "write_text", _half_then_fail)
    with pytest.raises(Interrupted):
        writer(target, payload)
    assert target.read_text() == "previous\n"
    assert _listing(tmp_path) == ["out.json"]  # no temporary left either


def _compiled_net():
    net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    net.compile(optimizer="adam", loss="mse")
    net.optimizer.build(net.trainable_variables)
    return net


def test_a_failed_epoch_backup_keeps_the_last_good_one(tmp_path, monkeypatch):
    net, folder = _compiled_net(), tmp_path / "backup"
    backup = training.EpochBackup(folder)
    backup.set_model(net)
    backup.on_epoch_end(0, {"loss": 1.0})
    good = (folder / "epoch-00001.weights.h5").read_bytes()
    # the backup is made in memory, then written by Path.write_bytes
    monkeypatch.setattr(pathlib.Path, "write_bytes", _half_then_fail)
    with pytest.raises(OSError, match="No space left on device"):
        backup.on_epoch_end(1, {"loss": 1.0})
    monkeypatch.undo()
    assert _listing(folder) == ["epoch-00001.weights.h5"]
    assert (folder / "epoch-00001.weights.h5").read_bytes() == good
    fresh = _compiled_net()
    assert backup.restore(fresh) == 1


def test_a_failed_model_save_leaves_no_model_keras(tmp_path, monkeypatch):
    """``runs.finish`` writes ``model.keras`` first: a failure there leaves
    the run unfinished (no ``model.keras``, no ``results.json``)."""
    model = zoo.gresnet_mlp(depth=2)
    monkeypatch.setattr(model, "save", _half_then_fail)
    (tmp_path / "history.csv").write_text("epoch,loss\n0,1.0\n")
    with pytest.raises(Interrupted):
        runs.finish(tmp_path, model, results={}, gates=[], dataset="mnist")
    assert _listing(tmp_path) == ["history.csv"]


PRESET = dict(builder="gresnet_mlp", builder_kwargs={"depth": 2})


def test_a_failed_preset_save_keeps_the_previous_preset(tmp_path, monkeypatch):
    model = zoo.gresnet_mlp(depth=2)
    preset = tmp_path / "preset"
    zoo.save_preset(model, preset, **PRESET)
    before = {name: (preset / name).read_bytes() for name in _listing(preset)}
    # the weights file is made in memory, then written with plain I/O
    from keras_gresnet.weights import loading

    monkeypatch.setattr(loading, "write_bytes", _half_then_fail)
    with pytest.raises(Interrupted):
        zoo.save_preset(model, preset, overwrite=True, **PRESET)
    assert {name: (preset / name).read_bytes() for name in _listing(preset)} == before
    assert _listing(tmp_path) == ["preset", *(f"preset/{n}" for n in before)]
    loaded = zoo.from_preset(preset)
    x = np.ones((1, 784), "float32")
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert json.loads((preset / "config.json").read_text())["config"]["builder"] == "gresnet_mlp"


def test_sigterm_caught_and_replaced_by_a_library_still_ends_the_export():
    """A library between the signal and the block's end (TensorFlow's C++
    callbacks) may catch the exception the handler raises and raise its
    own: the block still ends as SIGTERM asks (exit 143), not as that
    library's error (exit 1)."""
    import os
    import signal

    from keras_gresnet.files import on_sigterm_raise

    def library_call():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000):  # the handler runs between bytecodes
                pass
        except BaseException as error:  # what a wrapping library does
            raise RuntimeError("UnknownError: an operation was cancelled") from error

    with pytest.raises(SystemExit) as ended:
        with on_sigterm_raise("an export"):
            library_call()
    assert ended.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # restored


def _swallowing_gc_callback(signum):
    """A gc callback in which ``signum`` is handled: CPython prints and drops
    the exception its handler raises there (as C code that clears every
    pending exception drops it)."""
    import os

    def in_gc(phase, info):
        if phase == "start":
            os.kill(os.getpid(), signum)
            for _ in range(10_000):
                pass
    return in_gc


def test_sigterm_swallowed_by_a_gc_callback_is_raised_again_before_the_result_is_kept():
    """A handler that runs inside a garbage-collection callback (JAX's
    ``_xla_gc_callback`` under an export, seen in CI) has its exception
    printed and dropped: ``check()`` raises it again before the result
    replaces anything, and the block ends with exit 143."""
    import gc
    import signal

    from keras_gresnet.files import on_sigterm_raise

    in_gc = _swallowing_gc_callback(signal.SIGTERM)  # the signal is handled in it
    kept = []
    gc.callbacks.append(in_gc)
    try:
        with pytest.raises(SystemExit) as ended:
            with on_sigterm_raise("an export") as sigterm:
                gc.collect()  # the exception is raised in the callback, and dropped
                gc.callbacks.remove(in_gc)
                sigterm.check()
                kept.append("the result")
    finally:
        if in_gc in gc.callbacks:
            gc.callbacks.remove(in_gc)
    assert ended.value.code == 128 + signal.SIGTERM and kept == []


def test_a_swallowed_ctrl_c_is_raised_again_at_check(python_sigint):
    import gc
    import signal

    from keras_gresnet.files import interrupt_kept

    in_gc = _swallowing_gc_callback(signal.SIGINT)
    gc.callbacks.append(in_gc)
    try:
        with interrupt_kept() as interrupt:
            gc.collect()  # KeyboardInterrupt raised in the callback, and dropped
            gc.callbacks.remove(in_gc)
            with pytest.raises(KeyboardInterrupt):
                interrupt.check()
    finally:
        if in_gc in gc.callbacks:
            gc.callbacks.remove(in_gc)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_interrupt_kept_raises_at_once_and_leaves_a_program_s_own_handler(python_sigint):
    import os
    import signal

    from keras_gresnet.files import interrupt_kept

    with pytest.raises(KeyboardInterrupt):  # not swallowed: raised where it came
        with interrupt_kept() as interrupt:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1_000_000):
                pass
            raise AssertionError("the Ctrl-C did not stop the block")
    assert interrupt.fired
    seen = []
    signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    with interrupt_kept() as interrupt:
        assert signal.getsignal(signal.SIGINT) is not interrupt._raise
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1_000_000):
            if seen:
                break
        interrupt.check()  # the program's handler had it: nothing to raise
    assert seen == [signal.SIGINT]


@pytest.mark.integration
def test_a_ctrl_c_swallowed_during_training_stops_the_run_resumable(tmp_path, monkeypatch,
                                                                     python_sigint):
    """A Ctrl-C that C code swallows in the middle of an epoch stops the run
    after that batch, as a Ctrl-C does: no results, the backups kept, and the
    same call resumes it to the end."""
    import os
    import signal

    out = tmp_path / "run"
    kwargs = dict(model_kwargs=dict(depth=2), dataset="fashion_mnist", epochs=3,
                  max_train_examples=512, max_test_examples=64, out=out, verbose=0)
    batch_end = runs.RunLogger.on_train_batch_end
    fired = []

    def ctrl_c_swallowed(self, batch, logs=None):
        if len(self.history) == 1 and not fired:  # epoch 2's first batch (or steps)
            fired.append(swallow_a_ctrl_c())
        return batch_end(self, batch, logs)

    monkeypatch.setattr(runs.RunLogger, "on_train_batch_end", ctrl_c_swallowed)
    with pytest.raises(KeyboardInterrupt):
        training.train("gresnet_mlp", **kwargs)
    assert fired == [True]
    assert not (out / "results.json").exists()
    assert [p.name for p in (out / "backup").iterdir()] == ["epoch-00001.weights.h5"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.undo()
    run = training.train("gresnet_mlp", **kwargs)
    assert run.results["epochs"] == 3 and (out / "results.json").exists()


# --------------------------------------------------- a full disk, end to end


@pytest.mark.integration
def test_disk_full_is_one_line_and_the_run_resumes(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"

    def full(path, obj):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(training.runs, "write_json", full)
    assert train(out) == 2
    one_error_line(capsys, "No space left on device", "config.json")
    monkeypatch.undo()
    assert train(out) == 0 and (out / "results.json").exists()


@pytest.mark.integration
def test_a_disk_too_full_for_the_epoch_backup_is_one_line_before_hdf5(tmp_path, capsys,
                                                                      monkeypatch):
    """h5py crashes the process (exit 139) when the disk fills in the middle of
    a weights file: the backup is refused before HDF5 opens it, in one line,
    and the run resumes once there is room."""
    out = tmp_path / "run"
    real = training.runs.shutil.disk_usage

    def usage(path):
        found = real(path)
        return found._replace(free=1000) if Path(path).name == "backup" else found

    monkeypatch.setattr(training.runs.shutil, "disk_usage", usage)
    assert train(out) == 2
    one_error_line(capsys, "epoch-00001.weights.h5", "No space left on device", "bytes")
    assert sorted(p.name for p in (out / "backup").iterdir()) == []  # nothing half-written
    monkeypatch.undo()
    assert train(out) == 0 and (out / "results.json").exists()


@pytest.mark.integration
def test_a_disk_that_fills_during_the_backup_write_is_one_line_and_resumes(tmp_path):
    """The space check cannot see another process filling the disk between
    the check and the write: a write that fails half-way (a file-size limit
    here, EFBIG; ENOSPC is the same path) is one line naming the file, exit
    2, no half-written backup and no crash (h5py writing to a failing disk
    segfaulted: the backup is made in memory and written by Python), and the
    same command resumes to finished."""
    import resource

    out = tmp_path / "run"
    command = [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth",
               "2", *TINY, "--out", str(out)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}

    def small_files():  # in the child: files over 200 KB cannot be written
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    limited = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600,
                             preexec_fn=small_files)
    assert limited.returncode == 2, limited.stderr[-3000:]
    lines = [line for line in limited.stderr.splitlines() if line.strip()]
    assert lines[-1] == (f"keras-gresnet train: error: cannot use "
                         f"{out / 'backup' / 'epoch-00001.weights.h5'}: File too large")
    assert "Traceback" not in limited.stderr and "ref count" not in limited.stderr
    assert list((out / "backup").iterdir()) == []  # nothing half-written
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "results.json").exists()


@pytest.mark.integration
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing(tmp_path):
    """Writes that fail half way (here a file-size limit, EFBIG: the same
    path as a full disk's ENOSPC, which a test cannot make without mounting
    a filesystem): ``save_preset`` (h5py used to crash the process: exit
    139) and an ONNX export each raise one OSError naming the file the user
    asked for, and leave nothing behind."""
    code = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
from keras_gresnet import export, zoo
model = zoo.gresnet_cifar(n=5)  # 1.8 MB of weights
for write in (lambda: zoo.save_preset(model, sys.argv[1] + "/preset"),
              lambda: export.export(model, sys.argv[1] + "/net.onnx", format="onnx")):
    try:
        write()
    except OSError as error:
        print(type(error).__name__, error.errno, error.filename)
"""
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    import errno

    assert done.stdout.split("\n")[:2] == [
        f"OSError {errno.EFBIG} {tmp_path}/preset/model.weights.h5",
        f"OSError {errno.EFBIG} {tmp_path}/net.onnx"], done.stdout + done.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []
