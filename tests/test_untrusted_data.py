"""Untrusted data files: a CIFAR python batch is a pickle, and a crafted one
must not run code through any entry point (``data.load``, ``data.pipeline``,
``keras-gresnet train --data-dir``, ``evaluate RUN`` and ``prune RUN``, the
last two reading ``data_dir`` from the run's config.json). Genuine batches
(Python 2 cPickle protocol 2, as the CIFAR website ships them, and files
written by Python 3 at protocols 2, 4 and 5) still load; they are written by
``data.synthetic``, here with a pickler that writes Python 2's bytes."""

import builtins
import codecs
import json
import os
import pickle
import pickletools
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from keras_gresnet import cli, data
from keras_gresnet.data import synthetic

ROOT = Path(__file__).resolve().parents[1]
REFUSED_TAIL = ("a CIFAR python batch holds only dicts, strings, lists of ints and numpy "
                "uint8 arrays")


# --------------------------------------------------------------------------
# Writers of genuine batches.


class Py2Pickler(pickle._Pickler):
    """Writes what Python 2's ``cPickle.dump(batch, f, 2)`` wrote for the
    CIFAR website: every string as a Python 2 ``str`` (SHORT_BINSTRING /
    BINSTRING, no unicode, no ``_codecs.encode``) and numpy's helpers under
    their numpy 1 module ``numpy.core.multiarray``."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj):
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str
    # Python 2 numpy's own strings (the dtype "u1", the byte order "|") were str too.
    dispatch[str] = lambda self, obj: self.save_py2_str(obj.encode("latin1"))

    def save_global(self, obj, name=None):
        module = getattr(obj, "__module__", "") or ""
        if module.startswith("numpy._core."):
            module = "numpy.core." + module[len("numpy._core."):]
            name = name or obj.__name__
            self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode("ascii"))
            self.memoize(obj)
            return
        super().save_global(obj, name)


def _label_key(batch):
    return b"fine_labels" if b"fine_labels" in batch else b"labels"


class NumpyLabelsPickler(pickle.Pickler):
    """Pickles a batch as Python 3 code may have saved it again: the labels
    an int64 array, ``data`` a plain list."""

    def dump(self, batch):
        key = _label_key(batch)
        super().dump({**batch, key: np.asarray(batch[key], dtype=np.int64),
                      b"data": batch[b"data"].tolist()})


class NumpyScalarLabelsPickler(pickle.Pickler):
    """Pickles a batch whose labels are a list of numpy int64 scalars (what
    ``list(labels)`` of an array gives)."""

    def dump(self, batch):
        key = _label_key(batch)
        super().dump({**batch, key: list(np.asarray(batch[key], dtype=np.int64))})


# A genuine batch's style -> the protocol and pickler data.synthetic writes it with.
STYLES = {
    "py2": (2, Py2Pickler),
    "protocol2": (2, pickle.Pickler),
    "protocol4": (4, pickle.Pickler),
    "protocol5": (5, pickle.Pickler),
    "py3_numpy_labels": (4, NumpyLabelsPickler),
    "py3_numpy_scalar_labels": (4, NumpyScalarLabelsPickler),
}


def write_batch(path, images, labels, label_key, style, index=1):
    """One batch file as the CIFAR website's files hold it (Python 2 ``str``
    keys and values, labels a list of ints, ``data`` N x 3072 uint8)."""
    protocol, pickler = STYLES[style]
    batch = synthetic.cifar_batch(images, labels, label_key, f"training batch {index} of 5")
    synthetic.write_cifar_batch(path, batch, protocol=protocol, pickler=pickler)


def write_dataset(root, name, style, per_file=3, seed=0):
    """Every batch file of ``name`` under ``root/<CIFAR folder>``; returns
    ``{split: (images, labels)}`` as written."""
    protocol, pickler = STYLES[style]
    num_train = per_file * len(data.DATASETS[name].files["train"])
    return synthetic.write_synthetic(name, root, num_train, per_file, seed=seed,
                                     protocol=protocol, pickler=pickler)


def test_py2_writer_writes_what_python2_wrote(tmp_path):
    images = np.zeros((2, 32, 32, 3), np.uint8)
    write_batch(tmp_path / "b", images, [1, 2], "labels", "py2")
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops((tmp_path / "b").read_bytes())]
    names = {name for name, _ in ops}
    assert ops[0] == ("PROTO", 2)
    assert {"SHORT_BINSTRING", "BINSTRING"} <= names  # keys, and the 6 KiB of pixels
    assert not names & {"BINUNICODE", "SHORT_BINUNICODE", "BINBYTES", "SHORT_BINBYTES"}
    globals_ = {arg for name, arg in ops if name == "GLOBAL"}
    assert globals_ == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}


@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_genuine_batches_load(name, style, tmp_path):
    written = write_dataset(tmp_path, name, style)
    for split in ("train", "test"):
        images, labels = data.load(name, split, data_dir=str(tmp_path), download=False)
        assert images.dtype == np.uint8 and images.shape[1:] == (32, 32, 3)
        np.testing.assert_array_equal(images, written[split][0])
        np.testing.assert_array_equal(labels, written[split][1])  # CIFAR-100: fine labels


# --------------------------------------------------------------------------
# Malicious batches.


class Call:
    """Pickles as ``function(*args)``: what a crafted batch runs on load."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def payloads(marker):
    """``{name: (object to pickle, what the refusal names)}``; each that runs
    code creates ``marker``."""
    flat = np.zeros((1, 3072), np.uint8)
    return {
        "os.system": ({b"data": flat, b"labels": [0], b"batch_label": Call(
            os.system, f"touch '{marker}'")}, "system"),
        "builtins.eval": (Call(builtins.eval, f"open({str(marker)!r}, 'w').close()"), "eval"),
        "subprocess.Popen": ({b"data": flat, b"labels": [Call(
            subprocess.Popen, ["touch", str(marker)])]}, "Popen"),
        "object array of code": ({b"data": np.array([Call(
            os.system, f"touch '{marker}'")], dtype=object), b"labels": [0]}, "dtype object"),
        "object array": ({b"data": np.zeros((1, 3072), dtype=object), b"labels": [0]},
                         "dtype object"),
        "codecs.encode": ({b"data": flat, b"labels": [0], b"batch_label": Call(
            codecs.encode, "abc", "rot13")}, "rot13"),
    }


RUNS_CODE = ("os.system", "builtins.eval", "subprocess.Popen")


def write_malicious(folder, name, payload, protocol=2):
    """Every batch file of ``name`` in ``folder`` holds ``payload``."""
    folder.mkdir(parents=True, exist_ok=True)
    for files in data.DATASETS[name].files.values():
        for file in files:
            with open(folder / file, "wb") as f:
                pickle.dump(payload, f, protocol=protocol)
    return folder


def wait_for(path, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


@pytest.mark.parametrize("kind", RUNS_CODE)
def test_payloads_are_armed(kind, tmp_path):
    """Plain pickle runs them: the refusals below are not vacuous."""
    marker = tmp_path / "pwned"
    payload, _ = payloads(marker)[kind]
    pickle.loads(pickle.dumps(payload, protocol=2))
    assert wait_for(marker)


def assert_refused(message, path, names):
    assert message.startswith(f"Refused CIFAR batch {path}: "), message
    assert "\n" not in message and names in message and message.endswith(REFUSED_TAIL)


@pytest.mark.parametrize("protocol", [2, 5])
@pytest.mark.parametrize("kind", list(payloads("x")))
def test_malicious_batch_is_refused_by_load(kind, protocol, tmp_path):
    marker = tmp_path / "pwned"
    payload, names = payloads(marker)[kind]
    folder = write_malicious(tmp_path / "cifar-10-batches-py", "cifar10", payload, protocol)
    with pytest.raises(ValueError) as error:
        data.load("cifar10", "train", data_dir=str(tmp_path), download=False)
    assert_refused(str(error.value), folder / "data_batch_1", names)
    with pytest.raises(ValueError) as error:
        data.load("cifar10", "test", data_dir=str(folder), download=False)
    assert_refused(str(error.value), folder / "test_batch", names)
    time.sleep(0.2)  # a Popen would have had time to run
    assert not marker.exists()


def test_malicious_cifar100_batch_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    payload = {b"data": np.zeros((1, 3072), np.uint8), b"fine_labels": [0],
               b"coarse_labels": [Call(os.system, f"touch '{marker}'")]}
    folder = write_malicious(tmp_path / "cifar-100-python", "cifar100", payload)
    with pytest.raises(ValueError) as error:
        data.load("cifar100", "train", data_dir=str(tmp_path), download=False)
    assert_refused(str(error.value), folder / "train", "system")
    assert not marker.exists()


def test_malicious_batch_is_refused_by_pipeline(tmp_path):
    marker = tmp_path / "pwned"
    payload, _ = payloads(marker)["os.system"]
    folder = write_malicious(tmp_path / "cifar-10-batches-py", "cifar10", payload)
    with pytest.raises(ValueError, match="^Refused CIFAR batch .*data_batch_1: it references"):
        data.pipeline("cifar10", data_dir=str(folder), download=False)
    assert not marker.exists()


def test_refused_global_names_are_one_line(tmp_path):
    """A protocol 4 global's names can hold any character, newlines too."""
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    evil = (pickle.PROTO + b"\x04" + pickle.SHORT_BINUNICODE + b"\x08os\nfake\n"
            + pickle.SHORT_BINUNICODE + b"\x06system" + pickle.STACK_GLOBAL + pickle.STOP)
    for file in data.DATASETS["cifar10"].files["train"]:
        (folder / file).write_bytes(evil)
    with pytest.raises(ValueError) as error:
        data.load("cifar10", "train", data_dir=str(folder), download=False)
    assert_refused(str(error.value), folder / "data_batch_1", "system")


@pytest.mark.parametrize("stream, names", [
    # BUILD on an allowed function would set its attributes for every later load.
    (b"cnumpy\ndtype\n}X\x0c\x00\x00\x00__defaults__N" + pickle.SETITEM + b"b.",
     "modifies"),
    # bytes(10**12): a terabyte of zeros, not a copy of bytes.
    (b"c__builtin__\nbytes\n\x8a\x05\x00\x10\xa5\xd4\xe8\x85R.", "bytes()"),
    (b"Pid\n.", "persistent id"),
    (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\ndtype\n)U\x01b\x87R.",
     "not a numpy.ndarray"),
])
def test_crafted_streams_are_refused(stream, names, tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for file in data.DATASETS["cifar10"].files["train"]:
        (folder / file).write_bytes(pickle.PROTO + b"\x02" + stream)
    with pytest.raises(ValueError) as error:
        data.load("cifar10", "train", data_dir=str(folder), download=False)
    assert_refused(str(error.value), folder / "data_batch_1", names)


@pytest.mark.parametrize("content, found", [
    (b"", "EOFError"),
    (b"garbage that is no pickle", "UnpicklingError"),
    ("truncated", "UnpicklingError|EOFError"),
    ({b"data": np.zeros((1, 3072), np.uint8)}, "no 'labels' entry"),
    ([1, 2, 3], "a list, expected a dict"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, r"labels has shape \(1,\)"),
    ({b"data": np.zeros((1, 100), np.uint8), b"labels": [0]}, r"data has shape \(1, 100\)"),
    ({b"data": np.zeros((1, 3072), np.float32), b"labels": [0]}, "data has dtype float32"),
    ({b"data": [[300] * 3072], b"labels": [0]}, r"outside \[0, 255\]"),
])
def test_corrupt_batches_are_reported_as_corrupt(content, found, tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    if content == "truncated":
        images = np.zeros((2, 32, 32, 3), np.uint8)
        write_batch(folder / "x", images, [0, 1], "labels", "py2")
        content = (folder / "x").read_bytes()[:-100]
    elif not isinstance(content, bytes):
        content = pickle.dumps(content, protocol=2)
    for file in data.DATASETS["cifar10"].files["train"]:
        (folder / file).write_bytes(content)
    path = re.escape(str(folder / "data_batch_1"))
    with pytest.raises(ValueError, match=f"^Corrupt CIFAR batch {path}: "
                       f".*({found})") as error:
        data.load("cifar10", "train", data_dir=str(folder), download=False)
    assert "\n" not in str(error.value)


# --------------------------------------------------------------------------
# The command line: train --data-dir, evaluate RUN, prune RUN.


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """A tiny finished gresnet_cifar run (gated, so `prune --count 1` ranks
    its blocks) trained on benign synthetic CIFAR-10."""
    root = tmp_path_factory.mktemp("good_run")
    write_dataset(root / "good", "cifar10", "py2", per_file=4)
    run = root / "run"
    code = cli.main(["train", "gresnet_cifar", "--n", "1", "--dataset", "cifar10",
                     "--data-dir", str(root / "good"), "--epochs", "1", "--batch-size", "2",
                     "--out", str(run)])
    assert code == 0 and (run / "model.keras").exists()
    return run


def malicious_run(good_run, tmp_path):
    """A copy of ``good_run`` whose config.json points data_dir at a folder of
    malicious batches; returns ``(run, marker)``."""
    marker = tmp_path / "pwned"
    payload, _ = payloads(marker)["os.system"]
    bad = write_malicious(tmp_path / "bad", "cifar10", payload)
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    config = json.loads((run / "config.json").read_text())
    config["data_dir"] = str(bad)
    (run / "config.json").write_text(json.dumps(config))
    return run, marker, bad


def assert_one_line_refusal(err, command, path):
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"keras-gresnet {command}: error: Refused CIFAR batch {path}: ")
    assert "Traceback" not in err


@pytest.mark.integration
def test_cli_train_refuses_a_malicious_data_dir(tmp_path):
    """`python -m keras_gresnet.cli train ... --data-dir BAD` in a process of its own."""
    marker = tmp_path / "pwned"
    payload, _ = payloads(marker)["os.system"]
    bad = write_malicious(tmp_path / "bad", "cifar10", payload)
    out = tmp_path / "run"
    # The command's own TF_CPP_MIN_LOG_LEVEL default (2) silences TensorFlow's
    # start-up lines; no GPU, so that no driver complains on stderr either.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    result = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "train", "resnet_cifar", "--n", "1",
         "--dataset", "cifar10", "--data-dir", str(bad), "--epochs", "1", "--out", str(out)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 2, result.stderr
    assert_one_line_refusal(result.stderr, "train", bad / "data_batch_1")
    assert not marker.exists() and not out.exists()


@pytest.mark.integration
def test_cli_train_in_process_refuses_and_leaves_no_run_folder(tmp_path, capsys):
    marker = tmp_path / "pwned"
    payload, _ = payloads(marker)["subprocess.Popen"]
    bad = write_malicious(tmp_path / "bad", "cifar10", payload, protocol=5)
    out = tmp_path / "run"
    code = cli.main(["train", "resnet_cifar", "--n", "1", "--dataset", "cifar10",
                     "--data-dir", str(bad), "--epochs", "1", "--out", str(out)])
    assert code == 2
    assert_one_line_refusal(capsys.readouterr().err, "train", bad / "data_batch_1")
    time.sleep(0.2)
    assert not marker.exists() and not out.exists()


@pytest.mark.integration
def test_cli_evaluate_refuses_a_run_whose_data_dir_is_malicious(good_run, tmp_path, capsys):
    run, marker, bad = malicious_run(good_run, tmp_path)
    capsys.readouterr()
    assert cli.main(["evaluate", str(run)]) == 2
    assert_one_line_refusal(capsys.readouterr().err, "evaluate", bad / "test_batch")
    assert not marker.exists()


@pytest.mark.integration
def test_cli_prune_refuses_a_run_whose_data_dir_is_malicious(good_run, tmp_path, capsys):
    run, marker, bad = malicious_run(good_run, tmp_path)
    capsys.readouterr()
    assert cli.main(["prune", str(run), "--count", "1"]) == 2
    assert_one_line_refusal(capsys.readouterr().err, "prune", bad / "test_batch")
    assert not marker.exists()


@pytest.mark.integration
def test_cli_evaluate_of_the_benign_run_still_works(good_run, capsys):
    assert cli.main(["evaluate", str(good_run)]) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 4
