"""Downloads and the weights cache under faults and concurrency: servers that
never answer or stall (timeouts), SIGTERM mid-download, progress output,
several processes repairing the same corrupt cached file, a cache folder
that cannot be written, temporaries left by killed downloads, and
``weights verify`` over every copy. Only loopback servers are contacted."""

import contextlib
import functools
import hashlib
import http.server
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request  # noqa: F401 (imported before a test drops root privileges)
from pathlib import Path
from types import SimpleNamespace

import pytest

from keras_gresnet import cli, weights

from helpers import http_server, registry_entry

NAME = "tiny_net"
FILE = "tiny_net.weights.h5"
TIMEOUT_ENV = "KERAS_GRESNET_DOWNLOAD_TIMEOUT"
KERAS_VERSION = "3.0.0"  # the entries' (any: nothing here loads a model)


def _parts(folder):
    return sorted(p.name for p in Path(folder).glob(".*.part*"))


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# Every test here: anything but the loopback is refused and fails the test.
pytestmark = pytest.mark.usefixtures("network_guard")


@pytest.fixture
def registry(registry, monkeypatch):
    """conftest's temporary registry, with a served folder ``registry.files``
    (``registry.publish`` puts a file there and its entry in the registry)
    and the default timeout."""
    files = registry.tmp / "release"
    files.mkdir()
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)

    def publish(name=NAME, file=FILE, data=None):
        """Put a file in the served folder and its entry in the registry."""
        target = files / file
        target.write_bytes(os.urandom(100_000) if data is None else data)
        entry = registry_entry(name, target, keras_version=KERAS_VERSION)
        others = [e for e in json.loads(registry.path.read_text()) if e["name"] != name]
        registry.write(others + [entry])
        return entry

    return SimpleNamespace(**vars(registry), publish=publish, files=files)


@pytest.fixture
def server(registry, monkeypatch):
    """A loopback HTTP server of ``registry.files``; ``requests`` lists every
    path asked for. $KERAS_GRESNET_WEIGHTS_URL points at it."""
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    with http_server(functools.partial(Handler, directory=str(registry.files))) as url:
        monkeypatch.setenv(weights.URL_ENV, url)
        yield SimpleNamespace(url=url, requests=requests)


class _RawServer:
    """A loopback TCP server that accepts and then, ``mode="hang"``, never
    answers, or, ``mode="stall"``, sends the headers of a large file and a
    few bytes, then nothing. Closing it closes every connection."""

    def __init__(self, mode):
        self.mode, self.connections = mode, []
        self.sent, self.stop = threading.Event(), threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections.append(conn)
            if self.mode == "stall":
                try:
                    conn.settimeout(5)
                    conn.recv(65536)  # the request
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10485760\r\n\r\n"
                                 + b"x" * 100)
                    self.sent.set()
                except OSError:
                    pass
            elif self.mode in ("endless", "trickle"):
                threading.Thread(target=self._send_forever, args=(conn,), daemon=True).start()

    def _send_forever(self, conn):
        """``endless``: no Content-Length, 64 KiB blocks until the client
        hangs up; ``trickle``: a 100,000-byte file, one byte every 0.2 s."""
        try:
            conn.settimeout(5)
            conn.recv(65536)
            if self.mode == "endless":
                conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            self.sent.set()
            for _ in range(100_000):
                if self.stop.is_set():
                    return
                if self.mode == "endless":
                    conn.sendall(b"x" * 65536)
                else:
                    conn.sendall(b"x")
                    time.sleep(0.2)
        except OSError:
            pass

    def close(self):
        self.stop.set()
        self.thread.join(5)
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.sock.close()


@pytest.fixture
def raw_server():
    servers = []

    def start(mode):
        servers.append(_RawServer(mode))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _within(seconds, call):
    """``call()`` in a thread, which must end within ``seconds`` (a hang
    fails the test instead of hanging it): ``(result, error, wall seconds)``."""
    out = {}

    def run():
        try:
            out["result"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            out["error"] = error

    start = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    wall = time.monotonic() - start
    assert not thread.is_alive(), f"still downloading after {seconds} s: no timeout"
    return out.get("result"), out.get("error"), wall


# A process that loads the weights: the registry and shipped folder come
# from the environment; with TEST_SYNC it waits for the go file, so that
# several start at once. The file it gets must be whole and verify.
CHILD = r"""
import hashlib, os, sys, time
from pathlib import Path
from keras_gresnet import weights
weights.registry.REGISTRY_FILE = Path(os.environ["TEST_REGISTRY"])
weights.download.SHIPPED_DIR = Path(os.environ["TEST_SHIPPED"])
sync = os.environ.get("TEST_SYNC")
if sync:
    Path(sync, f"ready{os.getpid()}").touch()
    while not os.path.exists(os.path.join(sync, "go")):
        time.sleep(0.001)
path = weights.weights_path(sys.argv[1])
with open(path, "rb") as f:
    data = f.read()
assert hashlib.sha256(data).hexdigest() == weights.get_weights(sys.argv[1])["sha256"], path
print(path)
"""


def _child_env(registry, **extra):
    package_root = str(Path(weights.__file__).resolve().parents[1])
    env = dict(os.environ, TEST_REGISTRY=str(registry.path),
               TEST_SHIPPED=str(registry.path.parent / "weights"),
               PYTHONPATH=os.pathsep.join(
                   [package_root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.update(extra)
    return env


def _wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# ---------------------------------------------------------------- timeouts


@pytest.mark.parametrize("mode", ["hang", "stall"])
def test_a_server_that_stops_answering_fails_fast(registry, raw_server, monkeypatch, mode):
    entry = registry.publish()
    stuck = raw_server(mode)
    monkeypatch.setenv(weights.URL_ENV, stuck.url)
    monkeypatch.setenv(TIMEOUT_ENV, "1")
    _, error, wall = _within(20, lambda: weights.weights_path(NAME))
    assert wall < 10
    assert isinstance(error, weights.WeightsError), repr(error)
    message = str(error)
    assert stuck.url + FILE in message and TIMEOUT_ENV in message
    assert "by hand" in message and entry["sha256"] in message
    assert len(message.splitlines()) == 1
    if mode == "stall":
        assert stuck.sent.is_set()
    assert _parts(registry.cache) == [] and not (registry.cache / FILE).exists()


@pytest.mark.parametrize("mode,words", [
    ("endless", "sent more than the 100,000 bytes"),
    ("trickle", "slower than 32 KiB/s"),
])
def test_an_endless_or_trickling_download_stops_at_the_entrys_size_and_deadline(
        registry, raw_server, monkeypatch, mode, words):
    """A server streaming without end stops at the entry's recorded size; a
    trickle (one byte every 0.2 s: no read ever times out) stops at the
    whole-file deadline (timeout + size at 32 KiB/s: 1 + 3 s here)."""
    registry.publish()  # 100,000 bytes
    bad = raw_server(mode)
    monkeypatch.setenv(weights.URL_ENV, bad.url)
    monkeypatch.setenv(TIMEOUT_ENV, "1")
    _, error, wall = _within(30, lambda: weights.weights_path(NAME))
    assert isinstance(error, weights.WeightsError), repr(error)
    message = str(error)
    assert words in message and bad.url + FILE in message and len(message.splitlines()) == 1
    assert wall < 15
    assert _parts(registry.cache) == [] and not (registry.cache / FILE).exists()


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_timeout_is_a_one_line_error_naming_the_variable(registry, server,
                                                               monkeypatch, capsys, value):
    registry.publish()
    monkeypatch.setenv(TIMEOUT_ENV, value)
    with pytest.raises(weights.WeightsError, match=TIMEOUT_ENV + ".*positive number"):
        weights.weights_path(NAME)
    assert cli.main(["weights", "download", NAME]) == 2
    err = capsys.readouterr().err.strip()
    assert TIMEOUT_ENV in err and len(err.splitlines()) == 1
    assert server.requests == [] and not registry.cache.exists()
    monkeypatch.setenv(TIMEOUT_ENV, "2.5")  # a good value downloads
    assert weights.weights_path(NAME) == registry.cache / FILE


def test_http_error_names_the_url_and_leaves_nothing(registry, server):
    entry = registry.publish()
    (registry.files / FILE).unlink()  # the server answers 404
    with pytest.raises(weights.WeightsError) as error:
        weights.weights_path(NAME)
    message = str(error.value)
    assert server.url + FILE in message and "404" in message
    assert "by hand" in message and entry["sha256"] in message and weights.URL_ENV in message
    assert _parts(registry.cache) == [] and not (registry.cache / FILE).exists()


@pytest.mark.integration
def test_sigterm_during_a_download_leaves_no_part_file(registry, raw_server):
    registry.publish()
    stuck = raw_server("stall")
    env = _child_env(registry, **{weights.URL_ENV: stuck.url, TIMEOUT_ENV: "120"})
    child = subprocess.Popen([sys.executable, "-c", CHILD, NAME], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: stuck.sent.is_set() and _parts(registry.cache)
                  or child.poll() is not None, 120, "the download to start")
        assert child.poll() is None, child.communicate()
        time.sleep(0.3)  # reading the body
        child.send_signal(signal.SIGTERM)
        code = child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
    assert code in (128 + signal.SIGTERM, -signal.SIGTERM)
    assert _parts(registry.cache) == [] and not (registry.cache / FILE).exists()


def test_the_sigterm_handler_is_restored(registry, server):
    registry.publish()
    seen = []

    def mine(signum, frame):
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        weights.weights_path(NAME)
        assert signal.getsignal(signal.SIGTERM) is mine
        (registry.files / FILE).unlink()
        with pytest.raises(weights.WeightsError):
            weights.weights_path(NAME, cache_dir=registry.tmp / "other")
        assert signal.getsignal(signal.SIGTERM) is mine and seen == []
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------- progress


def test_progress_goes_to_stderr_and_only_to_a_terminal(registry, server, monkeypatch,
                                                        capfd):
    registry.publish()
    registry.publish("tiny_net2", "tiny_net2.weights.h5")
    weights.weights_path(NAME)
    out, err = capfd.readouterr()
    assert out == "" and "\r" not in err and "%" not in err

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    weights.weights_path("tiny_net2")
    assert capfd.readouterr().out == ""
    shown = terminal.getvalue()
    assert "\r" in shown and "100%" in shown and "tiny_net2.weights.h5" in shown
    assert shown.endswith("\n") and "\x1b" not in shown


# -------------------------------------------------- corrupt and racing copies


def test_a_corrupt_cached_copy_is_replaced_not_deleted(registry, server):
    registry.publish()
    registry.cache.mkdir(parents=True)
    (registry.cache / FILE).write_bytes(b"corrupt")
    (registry.files / FILE).rename(registry.files / "elsewhere")  # the download fails
    with pytest.raises(weights.WeightsError, match="404"):
        weights.weights_path(NAME)
    assert (registry.cache / FILE).read_bytes() == b"corrupt"  # not deleted by a load
    (registry.files / "elsewhere").rename(registry.files / FILE)
    assert weights.weights_path(NAME) == registry.cache / FILE
    assert _sha(registry.cache / FILE) == _sha(registry.files / FILE)
    assert len(server.requests) == 2 and _parts(registry.cache) == []


def test_a_file_that_vanishes_while_it_is_checked_is_downloaded(registry, server,
                                                               monkeypatch):
    registry.publish()
    registry.cache.mkdir(parents=True)
    (registry.cache / FILE).write_bytes(b"corrupt")
    real = weights.download.sha256_of
    vanished = []

    def sha256_of(path):  # another process removes the file between the checks
        if not vanished:
            vanished.append(path)
            Path(path).unlink()
        return real(path)

    monkeypatch.setattr(weights.download, "sha256_of", sha256_of)
    assert weights.weights_path(NAME) == registry.cache / FILE
    assert vanished and _sha(registry.cache / FILE) == _sha(registry.files / FILE)


def test_the_final_file_is_verified_again_after_the_move(registry, server, monkeypatch):
    registry.publish()
    target = registry.cache / FILE
    real, moves = os.replace, []

    def replace(src, dst, *args, **kwargs):  # another process writes garbage over it
        real(src, dst, *args, **kwargs)
        if Path(dst).name == FILE:
            moves.append(dst)
            if len(moves) == 1 or always_bad:
                Path(dst).write_bytes(b"garbage")

    monkeypatch.setattr(os, "replace", replace)
    always_bad = False
    assert weights.weights_path(NAME) == target
    assert _sha(target) == _sha(registry.files / FILE) and len(server.requests) == 2
    always_bad = True
    with pytest.raises(weights.WeightsError, match="another program writes"):
        weights.weights_path(NAME, cache_dir=registry.tmp / "other")
    assert len(server.requests) == 4


@pytest.mark.integration
def test_processes_repairing_the_same_corrupt_copy_all_succeed(registry, server):
    entry = registry.publish(data=os.urandom(4 << 20))
    registry.cache.mkdir(parents=True)
    target = registry.cache / FILE
    for round_ in range(5):
        target.write_bytes(os.urandom(entry["size"]))  # corrupt, slow enough to hash
        sync = registry.tmp / f"sync{round_}"
        sync.mkdir()
        children = [subprocess.Popen([sys.executable, "-c", CHILD, NAME],
                                     env=_child_env(registry, TEST_SYNC=str(sync)),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for _ in range(4)]
        try:
            _wait_for(lambda: len(list(sync.glob("ready*"))) == 4
                      or any(c.poll() is not None for c in children), 120, "4 processes")
            (sync / "go").touch()
            results = [(c.wait(120), *c.communicate()) for c in children]
        finally:
            for c in children:
                if c.poll() is None:
                    c.kill()
                    c.communicate()
        for code, out, err in results:
            assert code == 0, f"round {round_}: {err}"
            assert out.strip().splitlines()[-1] == str(target)  # the path it loaded
        assert _sha(target) == entry["sha256"] and _parts(registry.cache) == []
    assert 5 <= len(server.requests) <= 5 * 4 * 2


# ------------------------------------------------------ an unwritable cache


@contextlib.contextmanager
def _unprivileged(folder, monkeypatch):
    """Writes into ``folder`` fail for real: it is read-only, and root (whom
    permissions do not stop) becomes the user nobody meanwhile. Where root
    may not change its user, creating files in ``folder`` fails instead."""
    folder.chmod(0o555)
    try:
        if os.name != "posix" or os.geteuid() != 0:
            yield
            return
        try:
            os.seteuid(65534)
        except PermissionError:  # no CAP_SETUID: simulate the refusal
            real_open = os.open

            def refuse(path, flags, *args, **kwargs):
                if Path(path).parent == folder and flags & os.O_CREAT:
                    raise PermissionError(13, "Permission denied", str(path))
                return real_open(path, flags, *args, **kwargs)

            monkeypatch.setattr(os, "open", refuse)
            yield
            monkeypatch.setattr(os, "open", real_open)
            return
        try:
            yield
        finally:
            os.seteuid(0)
    finally:
        folder.chmod(0o755)


def test_a_read_only_cache_with_a_corrupt_copy_is_a_one_line_error(registry, monkeypatch,
                                                                  capsys):
    # Everything the user nobody must read lives in a world-readable folder
    # (pytest's own temporary folders are private to root).
    base = Path(tempfile.mkdtemp(prefix="gresnet-readonly-"))
    try:
        base.chmod(0o755)
        data = os.urandom(1000)
        (base / FILE).write_bytes(data)
        path = base / "weights.json"
        entry = registry_entry(NAME, base / FILE, keras_version=KERAS_VERSION)
        path.write_text(json.dumps([entry]))
        monkeypatch.setattr(weights.registry, "REGISTRY_FILE", path)
        monkeypatch.setattr(weights.download, "SHIPPED_DIR", None)
        monkeypatch.setenv("KERAS_HOME", str(base / "home"))
        with socket.socket() as s:  # nothing is downloaded: a port nobody listens on
            s.bind(("127.0.0.1", 0))
            monkeypatch.setenv(weights.URL_ENV, f"http://127.0.0.1:{s.getsockname()[1]}/")
        cache = base / "home" / "models"
        cache.mkdir(parents=True)
        (cache / FILE).write_bytes(b"corrupt")
        for p in (base, base / "home", cache):
            p.chmod(0o755)
        for p in (path, base / FILE, cache / FILE):
            p.chmod(0o644)
        with _unprivileged(cache, monkeypatch):
            with pytest.raises(weights.WeightsError) as error:
                weights.weights_path(NAME)
            assert cli.main(["weights", "download", NAME]) == 2
        message = str(error.value)
        assert str(cache) in message and "cache_dir" in message and "--cache-dir" in message
        assert len(message.splitlines()) == 1
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
        assert (cache / FILE).read_bytes() == b"corrupt" and _parts(cache) == []
    finally:
        for p in base.rglob("*"):
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_a_cache_folder_that_cannot_be_made_is_a_one_line_error(registry):
    registry.publish()
    blocker = registry.tmp / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(weights.WeightsError) as error:
        weights.weights_path(NAME, cache_dir=blocker / "cache")
    message = str(error.value)
    assert str(blocker / "cache" / "models") in message and "--cache-dir" in message
    assert len(message.splitlines()) == 1


# -------------------------------------------------------- stale temporaries


@pytest.mark.integration
def test_part_files_of_dead_processes_are_removed(registry, server):
    registry.publish()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        registry.cache.mkdir(parents=True)
        stale = [registry.cache / f".{FILE}.part{dead.pid}",
                 registry.cache / f".{FILE}.part{dead.pid}-1"]
        kept = [registry.cache / f".{FILE}.part{alive.pid}",  # still downloading
                registry.cache / f".other.weights.h5.part{dead.pid}"]  # another file's
        for p in stale + kept:
            p.write_bytes(b"partial")
        assert weights.weights_path(NAME) == registry.cache / FILE
        assert not any(p.exists() for p in stale)
        assert all(p.exists() for p in kept)
    finally:
        alive.kill()
        alive.wait()


# ----------------------------------------------------------- weights verify


def test_verify_checks_every_copy_and_deletes_only_cached_ones(registry, monkeypatch,
                                                              capsys):
    a = registry.publish("net_a", "net_a.weights.h5")
    b = registry.publish("net_b", "net_b.weights.h5")
    registry.publish("net_c", "net_c.weights.h5")
    shipped = registry.tmp / "zoo" / "weights"
    shipped.mkdir()
    registry.cache.mkdir(parents=True)
    (registry.cache / "net_a.weights.h5").write_bytes(b"corrupt")
    (shipped / "net_a.weights.h5").write_bytes((registry.files / "net_a.weights.h5").read_bytes())
    (registry.cache / "net_b.weights.h5").write_bytes((registry.files / "net_b.weights.h5")
                                                      .read_bytes())
    (shipped / "net_b.weights.h5").write_bytes(b"tampered")
    report = weights.verify_cache()
    assert report == [
        ("net_a", registry.cache / "net_a.weights.h5", "MISMATCH (removed)"),
        ("net_a", shipped / "net_a.weights.h5", "OK"),
        ("net_b", registry.cache / "net_b.weights.h5", "OK"),
        ("net_b", shipped / "net_b.weights.h5", "MISMATCH (ignored)"),
        ("net_c", registry.cache / "net_c.weights.h5", "missing"),
    ]
    assert not (registry.cache / "net_a.weights.h5").exists()
    assert (shipped / "net_b.weights.h5").read_bytes() == b"tampered"  # never deleted
    assert weights.weights_path("net_a") == shipped / "net_a.weights.h5"  # no download
    assert weights.weights_path("net_b") == registry.cache / "net_b.weights.h5"

    (registry.cache / "net_b.weights.h5").write_bytes(b"corrupt")
    assert cli.main(["weights", "verify"]) == 2
    captured = capsys.readouterr()
    rows = [line for line in captured.out.splitlines() if line.startswith("net_")]
    assert len(rows) == 4
    assert any("MISMATCH (removed)" in r and "net_b" in r for r in rows)
    assert any("MISMATCH (ignored)" in r and str(shipped) in r for r in rows)
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "removed: net_b" in err and "left in place" in err
    assert (shipped / "net_b.weights.h5").exists()

    (shipped / "net_b.weights.h5").unlink()
    (registry.cache / "net_b.weights.h5").write_bytes((registry.files / "net_b.weights.h5")
                                                      .read_bytes())
    assert cli.main(["weights", "verify", "net_b"]) == 0
    assert " OK " in capsys.readouterr().out
    assert a["sha256"] != b["sha256"]


def test_without_a_checkout_folder_verify_and_load_use_the_cache(registry, server,
                                                                 monkeypatch):
    registry.publish()
    monkeypatch.setattr(weights.download, "SHIPPED_DIR", None)  # an installed wheel
    assert weights.verify_cache() == [(NAME, registry.cache / FILE, "missing")]
    assert weights.weights_path(NAME) == registry.cache / FILE
    assert weights.verify_cache() == [(NAME, registry.cache / FILE, "OK")]
    registry.cache.joinpath(FILE).write_bytes(b"corrupt")
    assert weights.verify_cache() == [(NAME, registry.cache / FILE, "MISMATCH (removed)")]
    assert weights.verify_cache() == [(NAME, registry.cache / FILE, "missing")]
