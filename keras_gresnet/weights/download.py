"""Weight files on disk: the cache (``$KERAS_HOME/models``), a checkout's
``zoo/weights/``, and sha256-verified downloads with timeouts.

A file is looked for, in order, in the cache, in a source checkout's
``zoo/weights/`` (absent from an installed wheel), and at
``$KERAS_GRESNET_WEIGHTS_URL`` + file name. Every file is re-hashed before
use: a cached file whose sha256 differs is replaced by a verified download
(never deleted while another process may be reading it), and a download that
does not verify leaves nothing in the cache.
"""

import hashlib
import http.client
import logging
import math
import os
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from keras_gresnet.files import on_sigterm_raise, pid_alive
from keras_gresnet._paths import keras_home
from keras_gresnet.weights.registry import (
    NOT_TRAINED, PUBLISHED, WeightsError,
    get_weights, list_weights, published,
)

logger = logging.getLogger(__name__)


def _checkout_weights():
    """A source checkout's ``zoo/weights/`` (the release assets), or ``None``
    for an installed package, whose parent folder is site-packages."""
    root = Path(__file__).resolve().parents[2]
    folder = root / "zoo" / "weights"
    return folder if (root / "pyproject.toml").is_file() and folder.is_dir() else None


# Weight files shipped with a repository checkout (looked for before a download).
SHIPPED_DIR = _checkout_weights()
# The project's release URL, where published weight files are downloaded from.
# A placeholder: no release exists yet, so a download from it fails with a
# message that says how to install a file by hand. A mirror, or any folder
# served over HTTP laid out as zoo/weights/ (the files, flat, and SHA256SUMS),
# is set with $KERAS_GRESNET_WEIGHTS_URL.
DEFAULT_BASE_URL = "https://github.com/keras-gresnet/keras-gresnet/releases/download/weights/"
URL_ENV = "KERAS_GRESNET_WEIGHTS_URL"
CACHE_SUBDIR = "models"  # as keras.applications caches its weights


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_folder(cache_dir=None):
    """Where weight files are cached: ``{cache_dir or $KERAS_HOME}/models``."""
    return (Path(cache_dir).expanduser() if cache_dir else keras_home()) / CACHE_SUBDIR


def base_url():
    """``$KERAS_GRESNET_WEIGHTS_URL`` (a mirror), else :data:`DEFAULT_BASE_URL`."""
    url = os.environ.get(URL_ENV) or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


def _check(path, sha256):
    """``"OK"``, ``"MISMATCH"`` or ``"missing"`` for the file ``path``; a file
    that vanishes while it is read (another process replaced or removed it)
    counts as missing."""
    try:
        if not path.is_file():
            return "missing"
        return "OK" if sha256_of(path) == sha256 else "MISMATCH"
    except (FileNotFoundError, NotADirectoryError):
        return "missing"


def _verified(path, entry, *, remove=False, bad="ignored"):
    """Whether ``path`` holds the entry's bytes. A file that does not is only
    skipped (logged with ``bad``), never deleted, unless ``remove`` (the
    explicit ``weights verify`` of the cache): loading never deletes a cached
    file, which another process may have just renamed into place."""
    status = _check(path, entry["sha256"])
    if status == "MISMATCH":
        if remove:
            path.unlink(missing_ok=True)
            bad = "removed it"
        logger.warning("%s does not have sha256 %s: %s", path, entry["sha256"], bad)
    return status == "OK"


def weights_path(name, cache_dir=None):
    """The verified local file of the published weights ``name``: from the
    cache, the repository's ``zoo/weights/``, or downloaded into the cache.

    A cached file that does not verify is replaced atomically (``os.replace``)
    by a verified download, never deleted first: processes loading the same
    weights at once each see a whole file. The final path is re-verified, and
    the download retried once if another process replaced it in between."""
    entry = published(get_weights(name))
    folder = cache_folder(cache_dir)
    cached = folder / entry["file"]
    if _verified(cached, entry, bad="replacing it with a verified download"):
        return cached
    if SHIPPED_DIR is not None:
        shipped = Path(SHIPPED_DIR) / entry["file"]
        if _verified(shipped, entry, bad="ignored (a checkout's file is never changed)"):
            return shipped
    for _ in range(2):
        _download(entry, folder)
        if _verified(cached, entry, bad="replaced by another process; downloading again"):
            return cached
    raise WeightsError(
        f"weights {entry['name']!r}: {cached} was replaced by a file without sha256 "
        f"{entry['sha256']} right after each of two verified downloads: another program "
        f"writes to {folder}; pass cache_dir (--cache-dir) to use a folder of your own"
    )


# How long a download may wait to connect, and then for each read.
TIMEOUT_ENV = "KERAS_GRESNET_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUT = 30.0  # seconds
_CHUNK = 1 << 20  # bytes read, hashed and written at a time
# The slowest transfer a download waits for: its whole-file deadline is the
# timeout plus its size at this rate (a server that trickles a byte every
# few seconds never trips the per-read timeout).
MIN_RATE = 32 * 1024  # bytes per second


def _download_timeout():
    """``$KERAS_GRESNET_DOWNLOAD_TIMEOUT`` (seconds, a positive number), else
    :data:`DEFAULT_TIMEOUT`; a bad value is a one-line ``WeightsError``."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise WeightsError(f"{TIMEOUT_ENV}={value!r} must be a positive number of seconds "
                           f"(the download timeout; default {DEFAULT_TIMEOUT:g})")
    return seconds


def _remove_stale_parts(folder, file):
    """Remove ``.{file}.part<pid>`` temporaries whose process is gone (killed
    mid-download); those of a live process, this one's included, stay."""
    prefix = f".{file}.part"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        match = re.fullmatch(r"(\d+)(?:-\d+)?", name[len(prefix):]) if name.startswith(
            prefix) else None
        if match is None or int(match.group(1)) == os.getpid() or pid_alive(
                int(match.group(1))):
            continue
        try:
            (folder / name).unlink(missing_ok=True)
            logger.info("removed %s, left by a download that was killed", folder / name)
        except OSError:
            pass


def _new_part(folder, file):
    """Create this process's temporary ``.{file}.part<pid>`` (``-N`` added
    when a thread of this process has one open): ``(path, fd)``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for n in range(1000):
        path = folder / f".{file}.part{os.getpid()}{f'-{n}' if n else ''}"
        try:
            return path, os.open(path, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: too many .{file}.part{os.getpid()}-N files")


class _Progress:
    """A one-line ``\\r`` percentage on stderr, only when stderr is a terminal
    (nothing when piped or logged; nothing ever on stdout)."""

    def __init__(self, file, total):
        self.stream, self.file, self.total, self.shown = sys.stderr, file, total, None
        try:
            self.on = bool(self.stream is not None and self.stream.isatty())
        except (AttributeError, ValueError):
            self.on = False

    def _write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.on = False

    def update(self, size):
        if not self.on:
            return
        shown = (f"{100 * size // self.total:3d}%" if self.total
                 else f"{size / 2**20:.1f} MiB")
        if shown != self.shown:
            self.shown = shown
            self._write(f"\rdownloading {self.file}: {shown}")

    def close(self):
        if self.on and self.shown is not None:
            self._write("\n")


class _WriteError(Exception):
    """Writing the temporary file failed (not the network)."""


class _TooMuch(Exception):
    """The server sent more than the file can be, or too slowly."""


def _stream(origin, out, timeout, file, expected_size):
    """GET ``origin`` into the open file ``out``, at most ``_CHUNK`` bytes at
    a time, hashed on the way: ``(sha256, size, declared length or None)``.
    Never more than ``expected_size`` bytes (or a smaller Content-Length) are
    taken, and the whole transfer has a deadline of ``timeout`` plus the size
    at :data:`MIN_RATE` (:class:`_TooMuch` otherwise)."""
    digest, size = hashlib.sha256(), 0
    deadline = time.monotonic() + timeout + expected_size / MIN_RATE
    with urllib.request.urlopen(origin, timeout=timeout) as response:
        length = response.headers.get("Content-Length", "").strip()
        total = int(length) if length.isdigit() else None
        limit = expected_size if total is None else min(total, expected_size)
        progress = _Progress(file, total)
        try:
            while True:
                # read1: what arrived, after at most one wait of `timeout`
                block = response.read1(min(_CHUNK, limit + 1 - size))
                if not block:
                    break
                if size + len(block) > limit:
                    raise _TooMuch(f"it sent more than the {limit:,} bytes the file has")
                if time.monotonic() > deadline:
                    raise _TooMuch(
                        f"{size + len(block):,} of {limit:,} bytes after "
                        f"{timeout + expected_size / MIN_RATE:.0f} s, slower than "
                        f"{MIN_RATE // 1024} KiB/s")
                digest.update(block)
                size += len(block)
                try:
                    out.write(block)
                except OSError as error:
                    raise _WriteError(error) from error
                progress.update(size)
        finally:
            progress.close()
    return digest.hexdigest(), size, total


def _reason(error, timeout):
    """One line on why a download failed."""
    cause = error.reason if isinstance(error, urllib.error.URLError) and not isinstance(
        error, urllib.error.HTTPError) else error
    if isinstance(cause, TimeoutError):
        return f"no answer within {timeout:g} s; {TIMEOUT_ENV} sets the timeout"
    return " ".join(str(cause).split()) or type(cause).__name__


def _download(entry, folder):
    """Download the entry's file into ``folder``: streamed (with connect and
    read timeouts) into a temporary ``.{file}.part<pid>``, hashed on the way,
    and moved over the cached file (``os.replace``, atomic) only once its
    sha256 is right. A failed, timed-out or interrupted (SIGTERM) download
    leaves nothing in the cache; temporaries of killed downloads are removed."""
    file, sha256 = entry["file"], entry["sha256"]
    origin = base_url() + file
    by_hand = (
        f"To install it by hand, put {file} (sha256 {sha256}, {entry['size']} bytes) "
        f"in {folder}; to download from a mirror, set {URL_ENV} to the URL of the "
        f"folder that holds it."
    )

    def unwritable(error):
        return WeightsError(
            f"weights {entry['name']!r}: cannot write to the cache folder {folder} "
            f"({' '.join(str(error).split())}); pass cache_dir (--cache-dir on the "
            f"command line) to cache in a writable folder")

    timeout = _download_timeout()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise unwritable(error) from None
    _remove_stale_parts(folder, file)
    tmp = None
    with on_sigterm_raise("the download", WeightsError) as sigterm:
        try:
            try:
                tmp, fd = _new_part(folder, file)
            except OSError as error:
                raise unwritable(error) from None
            with os.fdopen(fd, "wb") as out:
                try:
                    digest, size, total = _stream(origin, out, timeout, file, entry["size"])
                except _WriteError as error:
                    raise unwritable(error.__cause__) from None
                except _TooMuch as error:
                    raise WeightsError(
                        f"weights {entry['name']!r}: stopped downloading {file} from "
                        f"{origin}: {error}; nothing was kept. {by_hand}") from None
                except (OSError, http.client.HTTPException, ValueError) as error:
                    raise WeightsError(
                        f"weights {entry['name']!r}: could not download {file} from "
                        f"{origin} ({_reason(error, timeout)}). {by_hand}"
                    ) from None
            if total is not None and size != total:
                raise WeightsError(
                    f"weights {entry['name']!r}: could not download {file} from {origin} "
                    f"(the connection closed after {size} of {total} bytes). {by_hand}")
            if digest != sha256:
                raise WeightsError(
                    f"weights {entry['name']!r}: the download of {file} from {origin} does "
                    f"not have sha256 {sha256} ({size} bytes, {entry['size']} expected); "
                    f"nothing was kept. {by_hand}"
                )
            sigterm.check()  # a SIGTERM whose exception a callback swallowed
            try:
                os.replace(tmp, folder / file)
            except OSError as error:
                raise unwritable(error) from None
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
    return folder / file


def verify_cache(pattern="*", cache_dir=None):
    """Re-hash every copy of the published entries matching ``pattern`` that
    loading would use, the cached file and a checkout's ``zoo/weights/`` one:
    ``[(name, path, status)]``, one row per copy, with status ``"OK"``,
    ``"MISMATCH (removed)"`` (a bad cached file is deleted: the next load
    downloads it again), ``"MISMATCH (ignored)"`` (a bad shipped file: never
    deleted, loading skips it), ``"missing"`` (no copy at all; the path is the
    cache's) or ``"not yet trained"`` (path ``None``)."""
    folder = cache_folder(cache_dir)
    report = []
    for entry in list_weights(pattern):
        if entry["status"] != PUBLISHED:
            report.append((entry["name"], None, NOT_TRAINED))
            continue
        rows = []
        cached = folder / entry["file"]
        status = _check(cached, entry["sha256"])
        if status == "MISMATCH":
            cached.unlink(missing_ok=True)
            logger.warning("removed %s from the cache: its sha256 is not %s", cached,
                           entry["sha256"])
            status = "MISMATCH (removed)"
        if status != "missing":
            rows.append((entry["name"], cached, status))
        if SHIPPED_DIR is not None:
            shipped = Path(SHIPPED_DIR) / entry["file"]
            status = _check(shipped, entry["sha256"])
            if status != "missing":
                rows.append((entry["name"], shipped,
                             "MISMATCH (ignored)" if status == "MISMATCH" else status))
        report.extend(rows or [(entry["name"], cached, "missing")])
    return report
