"""Writes that fail part-way: the previous file stays intact and nothing
partial appears under the final name (the JSON/CSV/text writers, the epoch
backup, a run's ``model.keras``, a preset)."""

import json
import pathlib

import keras
import numpy as np
import pytest

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
    assert json.loads((preset / "config.json").read_text())["builder"] == "gresnet_mlp"


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


def test_sigterm_swallowed_by_a_gc_callback_is_raised_again_before_the_result_is_kept():
    """A handler that runs inside a garbage-collection callback (JAX's
    ``_xla_gc_callback`` under an export, seen in CI) has its exception
    printed and dropped: ``check()`` raises it again before the result
    replaces anything, and the block ends with exit 143."""
    import gc
    import os
    import signal

    from keras_gresnet.files import on_sigterm_raise

    def in_gc(phase, info):  # the signal is handled while this callback runs
        if phase == "start":
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000):
                pass

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
