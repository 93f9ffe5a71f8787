"""Shared test helpers (importable: pytest puts tests/ on sys.path)."""

import contextlib
import csv
import hashlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import keras
import numpy as np
import pytest

RNG = np.random.default_rng(0)


def randomize_bn(model, scale=0.1):
    """Non-trivial BN statistics so that an identity cannot pass by accident."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            for w in (layer.moving_mean, layer.beta):
                w.assign(RNG.normal(size=w.shape, scale=scale).astype("float32"))


def random_inputs(model, batch=3):
    """A random float32 batch of the model's input shape."""
    return RNG.normal(size=(batch, *model.input.shape[1:])).astype("float32")


def outputs(model, x):
    """The model's inference outputs on ``x``, as numpy."""
    return keras.ops.convert_to_numpy(model(x, training=False))


LOOPBACK = {"127.0.0.1", "localhost"}


def guard_network(monkeypatch):
    """Record every host contacted and refuse anything but the loopback;
    returns the list of hosts (a fixture's body: ``yield`` it, then
    :func:`assert_loopback_only`)."""
    hosts = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(sock, address):
        if isinstance(address, tuple):
            hosts.append(address[0])
            if address[0] not in LOOPBACK:
                raise OSError(f"test: network access to {address[0]} refused")
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        hosts.append(host)
        if host not in LOOPBACK:
            raise OSError(f"test: name lookup of {host} refused")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return hosts


def assert_loopback_only(hosts):
    assert set(hosts) <= LOOPBACK, f"contacted {set(hosts) - LOOPBACK}"


@contextlib.contextmanager
def http_server(handler):
    """A threaded HTTP server of ``handler`` on the loopback: yields its base
    URL (``http://127.0.0.1:PORT/``), shut down on leaving."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def registry_entry(name, path, **overrides):
    """A published registry entry of a tiny MLP for the bytes of ``path``
    (the load path only hashes them: any bytes do); ``overrides`` replace
    its fields."""
    data = Path(path).read_bytes()
    entry = dict(
        name=name, builder="gresnet_mlp", builder_kwargs={"depth": 2}, dataset="fashion_mnist",
        input_shape=[4, 4, 1], classes=10, class_names=[f"class{i}" for i in range(10)],
        preprocessing={"method": "scale", "mean": [0.0], "std": [1.0]},
        test_error_percent=12.5, command="keras-gresnet train gresnet_mlp --depth 2",
        params=1234, file=Path(path).name, size=len(data),
        sha256=hashlib.sha256(data).hexdigest(), keras_version=keras.__version__,
        date="2025-01-01", status="published",
    )
    entry.update(overrides)
    return entry


def sgd_step_changes(model, x, y, loss="sparse_categorical_crossentropy", lr=1.0):
    """One plain SGD step of ``model`` on ``(x, y)`` through Keras' own
    ``train_on_batch`` (any backend, no tf.GradientTape): ``{variable path:
    new - old}`` of every trainable variable, so ``-change / lr`` is the
    gradient of the loss plus ``model.losses`` (the regularisers)."""
    before = {v.path: np.array(v.numpy()) for v in model.trainable_variables}
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr), loss=loss)
    model.train_on_batch(x, y)
    return {v.path: np.array(v.numpy()) - before[v.path] for v in model.trainable_variables}


def zero_loss(y_true, y_pred):
    """A loss of 0 that keeps the graph connected: the step follows
    ``model.losses`` (the regularisers) alone."""
    return keras.ops.mean(y_pred) * 0.0


def seed_everything(seed):
    """Seed Python, numpy and the backend; where TensorFlow runs (its backend
    or its tf.data), make its ops deterministic too."""
    import sys

    keras.utils.set_random_seed(seed)
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        tf.config.experimental.enable_op_determinism()


# --------------------------------------------------------------------------
# Jobs of worker processes (the cluster tests): each a subprocess with a
# deadline, killed (SIGKILL) in a ``finally`` whatever happens. TensorFlow
# ignores SIGTERM while a worker waits for its peers.

DEADLINE = 300  # seconds for one job of workers; measured here: 10-35 s


def _env(extra=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", **(extra or {})}
    env.pop("TF_CONFIG", None)
    return env


class Job:
    """Worker processes, each with its own folder and log."""

    def __init__(self, commands, folders, env=None):
        self.folders = [Path(f) for f in folders]
        self.logs = [f / "worker.log" for f in self.folders]
        self.processes = []
        for command, folder, log in zip(commands, self.folders, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as out:
                self.processes.append(subprocess.Popen(
                    command, cwd=folder, env=_env(env), stdout=out, stderr=subprocess.STDOUT))

    def output(self, index):
        return self.logs[index].read_text(errors="replace")

    def wait(self, timeout=DEADLINE):
        """Every worker's exit code; a worker still running at the deadline fails."""
        end = time.monotonic() + timeout
        for i, p in enumerate(self.processes):
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker {i} still running after {timeout} s:\n"
                            f"{self.output(i)[-3000:]}")
        return [p.returncode for p in self.processes]

    def kill(self):
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.processes:
            p.wait()


@contextlib.contextmanager
def job(commands, folders, env=None):
    """:class:`Job` of ``commands`` (``env``: variables added to this
    process's environment), killed on leaving."""
    running = Job(commands, folders, env)
    try:
        yield running
    finally:
        running.kill()


def kill_a_worker_after_a_backup(commands, folders, env=None):
    """Start the job, SIGKILL worker 1 once the chief (worker 0, writing
    ``folders[0]/run``) has backed up an epoch, and check that the chief
    stops with exit code 4 and says how to resume."""
    backup = Path(folders[0]) / "run" / "backup"
    with job(commands, folders, env) as workers:
        deadline = time.monotonic() + DEADLINE
        while not list(backup.glob("epoch-*.weights.h5")):
            assert time.monotonic() < deadline and workers.processes[0].poll() is None, \
                workers.output(0)[-3000:]
            time.sleep(0.02)
        workers.processes[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        codes = workers.wait(timeout=120)
        chief_output = workers.output(0)
    assert codes == [4, -signal.SIGKILL], chief_output[-3000:]
    assert "lost contact with another worker" in chief_output
    assert "Start every worker again with the same command" in chief_output
    print(f"the chief stopped {time.monotonic() - killed:.1f} s after the kill")


# --------------------------------------------------------------------------
# Tiny runs through the command line (in this process), and what they leave.

TINY = ["--dataset", "fashion_mnist", "--max-train-examples", "256",
        "--max-test-examples", "200", "--epochs", "1"]


def tiny(*extra):
    """TINY's options less those ``extra`` gives again (an option given twice
    with two values is refused)."""
    given = {word.split("=")[0] for word in extra if word.startswith("--")}
    return [word for option, value in zip(TINY[::2], TINY[1::2]) if option not in given
            for word in (option, value)]


def train(out, *extra, model=("gresnet_mlp", "--depth", "2")):
    """``keras-gresnet train`` of a tiny run into ``out``: its exit code."""
    from keras_gresnet import cli

    return cli.main(["train", *model, *tiny(*extra), "--out", str(out), *extra])


# The line a run prints once its checks passed, before its first epoch (its
# strategy, replicas and devices): an error found while training follows it.
STARTED = re.compile(r"^\S+ on \S+: strategy \S+, \d+ replicas?\b")


def one_error_line(capsys, *words):
    """The one line on stderr (besides STARTED's), holding every word."""
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not STARTED.match(line)]
    assert len(err) == 1, err
    for word in words:
        assert word in err[0], err[0]
    return err[0]


def tree(folder):
    """Every file under ``folder`` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------
# The repository's scripts.

ROOT = Path(__file__).resolve().parents[1]


def load_script(path):
    """The module of the script at ``path`` (from the repository root,
    e.g. ``scripts/release/write_catalog.py``), loaded by path."""
    import importlib.util

    path = ROOT / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args, timeout, check=False):
    """``python ARGS`` from the repository root (a script of scripts/ and its
    options), quiet TensorFlow; with ``check``, exit 0 is asserted."""
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


# --------------------------------------------------------------------------
# Reading what a run or a worker wrote.


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def report(path):
    """A worker's ``report.json`` (the cluster checks write one)."""
    return json.loads((path / "report.json").read_text())


def trainable(path):
    """A worker's trainable variables after training, ``weights.npz``."""
    return dict(np.load(path / "weights.npz"))


def events(folder):
    """``{(run, tag): [(step, value), ...]}`` of every event file under
    ``folder`` (``run``: its subfolder), in the order written; scalars as
    floats, histograms as arrays."""
    import tensorflow as tf

    found = {}
    for path in sorted(folder.glob("*/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                array = tf.make_ndarray(value.tensor)
                found.setdefault((path.parent.name, value.tag), []).append(
                    (event.step, float(array) if array.ndim == 0 else array))
    return found


def steps(found, run, tag):
    return [step for step, _ in found.get((run, tag), [])]


def scalars(found, run, tag):
    return [value for _, value in found.get((run, tag), [])]


def swallow_a_ctrl_c():
    """Send this process a SIGINT and drop the ``KeyboardInterrupt`` it
    raises, as C code that clears every pending exception drops it
    (numpy/numpy#20596); returns True once it was raised and dropped."""
    import os
    import signal

    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000_000):
            pass
    except KeyboardInterrupt:
        return True
    raise AssertionError("the SIGINT raised nothing (is SIGINT under Python's handler?)")
