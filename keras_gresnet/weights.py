"""Published weights: the registry (``published_weights.json``, package data
that every wheel carries), the cache, sha256-verified downloads, loading into
zoo models, and presets.

A builder's ``weights=`` goes through here::

    model = zoo.gresnet_mlp(depth=20, weights="gresnet_mlp20_fashion_mnist")
    model = zoo.gresnet_mlp(depth=20, weights="run/model.keras")   # any saved file
    weights.list_weights("*mlp*")

A weight file is looked for, in order, in the cache (``$KERAS_HOME/models``,
Keras' convention, or ``cache_dir/models``), in a source checkout's
``zoo/weights/`` (the release assets; absent from an installed wheel), and at
``$KERAS_GRESNET_WEIGHTS_URL`` + file name (default :data:`DEFAULT_BASE_URL`).
Every file is re-hashed before use: a cached file whose sha256 differs is
replaced by a verified download (never deleted while another process may be
reading it), and a download that does not verify leaves nothing in the cache.

Reading the registry imports neither Keras nor TensorFlow (``keras-gresnet
weights list`` stays fast); loading does.

The zoo builders call into this module; it reaches the builders through
``keras_gresnet.zoo``, imported on use (the zoo imports this module).
"""

import fnmatch
import hashlib
import http.client
import inspect
import json
import logging
import math
import numbers
import os
import re
import shutil
import signal
import sys
import threading
import urllib.error
import urllib.request
import warnings
from pathlib import Path

from keras_gresnet import __version__
from keras_gresnet._checks import PREPROCESSINGS
from keras_gresnet._io import pid_alive, write_json
from keras_gresnet._paths import keras_home

logger = logging.getLogger(__name__)

# The registry of published weight files, one entry per file: package data,
# so an installed wheel has it (as Keras Applications keep their hash table
# and timm its default_cfgs in the package).
REGISTRY_FILE = Path(__file__).resolve().with_name("published_weights.json")


def _checkout_weights():
    """A source checkout's ``zoo/weights/`` (the release assets), or ``None``
    for an installed package, whose parent folder is site-packages."""
    root = Path(__file__).resolve().parents[1]
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

PUBLISHED = "published"
NOT_TRAINED = "not yet trained"
STATUSES = (PUBLISHED, NOT_TRAINED)
SUFFIXES = (".keras", ".weights.h5")

# Fields of every entry; a "published" entry also has FILE_FIELDS.
FIELDS = (
    "name", "builder", "builder_kwargs", "dataset", "input_shape", "classes",
    "class_names", "preprocessing", "command", "params", "status",
)
FILE_FIELDS = ("test_error_percent", "file", "size", "sha256", "keras_version", "date")

# Builder arguments that do not decide the architecture a weight file fits.
_NOT_ARCHITECTURE = frozenset({
    "include_top", "weights", "input_tensor", "input_shape", "pooling", "classes",
    "classifier_activation", "name", "builder",
})
# Set by the entry's own fields (or by loading), never by its builder_kwargs.
_RESERVED = frozenset({"include_top", "weights", "input_tensor", "input_shape", "classes"})
# Arguments that only act in training: k is loaded, BN momentum and dropout
# change nothing at inference.
_TRAINING_ONLY = frozenset({"k_initial", "bn_momentum", "dropout"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

PRESET_CONFIG = "config.json"
PRESET_WEIGHTS = "model.weights.h5"
PRESET_METADATA = "metadata.json"


class WeightsError(ValueError):
    """A weight file that cannot be had (not cached, download failed) or does
    not verify (sha256)."""


# --------------------------------------------------------------- registry


def _validate(entry, where):
    """Check one registry entry; ``ValueError`` naming the entry and field."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: an entry must be a JSON object, got {entry!r}")
    name = entry.get("name")
    where = f"{where} ({name!r})" if isinstance(name, str) else where
    status = entry.get("status")
    required = FIELDS + (FILE_FIELDS if status == PUBLISHED else ())
    for field in required:
        if field not in entry or entry[field] is None:
            raise ValueError(f"{where}: field {field!r} is missing")

    def bad(field, what):
        raise ValueError(f"{where}: field {field!r} must be {what}, got {entry[field]!r}")

    if not isinstance(name, str) or not _NAME.match(name):
        bad("name", "a name of letters, digits, '_', '.' and '-'")
    if status not in STATUSES:
        bad("status", f"one of {STATUSES}")
    for field in ("builder", "dataset", "command"):
        if not isinstance(entry[field], str) or not entry[field]:
            bad(field, "a non-empty string")
    if not isinstance(entry["builder_kwargs"], dict):
        bad("builder_kwargs", "an object of builder arguments")
    reserved = sorted(_RESERVED & set(entry["builder_kwargs"]))
    if reserved:
        bad("builder_kwargs", f"the architecture arguments only (not {reserved}: "
            f"the entry's own fields give them)")
    shape = entry["input_shape"]
    if not isinstance(shape, list) or not shape or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
    ):
        bad("input_shape", "a list of positive sizes, e.g. [28, 28, 1]")
    for field in ("classes", "params"):
        if isinstance(entry[field], bool) or not isinstance(entry[field], int) or entry[field] < 1:
            bad(field, "an integer >= 1")
    # An untrained entry may leave what only training decides: the class
    # names of its dataset's files (ImageNet's) and the training statistics.
    untrained = status == NOT_TRAINED
    names = entry["class_names"]
    if not isinstance(names, list) or len(names) not in (
        (entry["classes"], 0) if untrained else (entry["classes"],)
    ) or not all(isinstance(n, str) for n in names):
        bad("class_names", f"a list of {entry['classes']} strings (one per class)")
    preprocessing = entry["preprocessing"]
    if untrained and isinstance(preprocessing, dict) and set(preprocessing) == {"method"}:
        if preprocessing["method"] not in PREPROCESSINGS:
            bad("preprocessing", f"a method in {PREPROCESSINGS}")
    elif not isinstance(preprocessing, dict) or set(preprocessing) != {"method", "mean", "std"}:
        bad("preprocessing", "an object with method, mean and std (Preprocessing.get_config())")
    elif not _valid_statistics(preprocessing):
        bad("preprocessing", f"a method in {PREPROCESSINGS} with one finite mean and one "
            f"std > 0 per channel")
    if status == NOT_TRAINED:
        given = [f for f in FILE_FIELDS if entry.get(f) is not None]
        if given:
            raise ValueError(
                f"{where}: a {NOT_TRAINED!r} entry carries no file; drop {given} "
                f"or set status to {PUBLISHED!r}"
            )
        return entry
    file = entry["file"]
    if not isinstance(file, str) or Path(file).name != file or not file.endswith(SUFFIXES):
        bad("file", f"a bare file name ending in {' or '.join(SUFFIXES)}")
    if not isinstance(entry["sha256"], str) or not _SHA256.match(entry["sha256"]):
        bad("sha256", "64 lowercase hex digits")
    if isinstance(entry["size"], bool) or not isinstance(entry["size"], int) or entry["size"] < 1:
        bad("size", "the file size in bytes")
    error = entry["test_error_percent"]
    if isinstance(error, bool) or not isinstance(error, numbers.Real) or not 0 <= error <= 100:
        bad("test_error_percent", "a number in [0, 100]")
    for field in ("keras_version", "date"):
        if not isinstance(entry[field], str) or not entry[field]:
            bad(field, "a non-empty string")
    return entry


def _valid_statistics(preprocessing):
    """``data.Preprocessing.get_config()``'s form, checked without importing
    TensorFlow."""
    mean, std = preprocessing["mean"], preprocessing["std"]

    def numbers_list(values):
        return isinstance(values, list) and values and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            for v in values)

    return (preprocessing["method"] in PREPROCESSINGS and numbers_list(mean)
            and numbers_list(std) and len(mean) == len(std) and all(v > 0 for v in std))


def _read_registry():
    """``{name: entry}`` of :data:`REGISTRY_FILE`, every entry validated."""
    path = Path(REGISTRY_FILE)
    if not path.exists():
        return {}
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: must hold a JSON list of entries, got {type(entries).__name__}")
    registry = {}
    for i, entry in enumerate(entries):
        _validate(entry, f"{path}: entry {i}")
        if entry["name"] in registry:
            raise ValueError(f"{path}: entry {i}: name {entry['name']!r} appears twice")
        registry[entry["name"]] = entry
    return registry


def list_weights(pattern="*"):
    """Registry entries (dicts) whose name matches the shell wildcard
    ``pattern``, sorted by name, e.g. ``list_weights("*mlp*")``."""
    if not isinstance(pattern, str):
        raise ValueError(f"pattern must be a shell wildcard string, got {pattern!r}")
    registry = _read_registry()
    return [registry[n] for n in sorted(registry) if fnmatch.fnmatchcase(n, pattern)]


def get_weights(name):
    """The registry entry ``name``."""
    registry = _read_registry()
    if name in registry:
        return registry[name]
    close = [n for n in sorted(registry) if isinstance(name, str) and name.lower() in n.lower()]
    accepted = ", ".join(map(repr, close or sorted(registry))) or "none yet"
    raise ValueError(
        f"Unknown weights name={name!r}; {'similar' if close else 'published'}: {accepted} "
        f"(see keras_gresnet.weights.list_weights() or `keras-gresnet weights list`)"
    )


def _published(entry):
    if entry["status"] != PUBLISHED:
        raise ValueError(
            f"weights {entry['name']!r} are {NOT_TRAINED}: there is no file to load. "
            f"They are produced by: {entry['command']}"
        )
    return entry


# ------------------------------------------------------------------ files


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
    entry = _published(get_weights(name))
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


class _Terminated(BaseException):
    """SIGTERM arrived during a download (raised so that ``finally`` cleans up)."""


class _on_sigterm_raise:
    """While downloading in the main thread, SIGTERM raises (so that the
    temporary file is removed), then acts as before: ``SystemExit(143)`` under
    the default action; a previous Python handler is called (and the download
    fails with ``WeightsError`` if it returns). An ignored SIGTERM stays
    ignored; other threads cannot set handlers and are left as they are."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is not threading.main_thread():
            return self
        try:
            previous = signal.getsignal(signal.SIGTERM)
            if previous is None or previous == signal.SIG_IGN:
                return self  # set outside Python, or ignored: leave it
            signal.signal(signal.SIGTERM, self._raise)
        except (ValueError, OSError, AttributeError):  # no signals here
            return self
        self.previous = previous
        return self

    @staticmethod
    def _raise(signum, frame):
        raise _Terminated(signum, frame)

    def __exit__(self, kind, error, traceback):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        if kind is _Terminated:
            if callable(self.previous):  # the program's own handler decides
                self.previous(*error.args)
                raise WeightsError("the download was interrupted by SIGTERM; nothing "
                                   "was kept") from None
            raise SystemExit(128 + signal.SIGTERM) from None
        return False


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


def _stream(origin, out, timeout, file):
    """GET ``origin`` into the open file ``out``, ``_CHUNK`` bytes at a time,
    hashed on the way: ``(sha256, size, declared length or None)``."""
    digest, size = hashlib.sha256(), 0
    with urllib.request.urlopen(origin, timeout=timeout) as response:
        length = response.headers.get("Content-Length", "").strip()
        total = int(length) if length.isdigit() else None
        progress = _Progress(file, total)
        try:
            while True:
                block = response.read(_CHUNK)
                if not block:
                    break
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
    with _on_sigterm_raise():
        try:
            try:
                tmp, fd = _new_part(folder, file)
            except OSError as error:
                raise unwritable(error) from None
            with os.fdopen(fd, "wb") as out:
                try:
                    digest, size, total = _stream(origin, out, timeout, file)
                except _WriteError as error:
                    raise unwritable(error.__cause__) from None
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


# ----------------------------------------------------- fitting and loading


def _canonical(value):
    """JSON's view of a value (tuples are lists), for comparisons."""
    return json.loads(json.dumps(value, default=repr))


def _architecture(builder, builder_kwargs):
    """The arguments of ``builder`` that decide its weights, without those
    given at the builder's own default."""
    from keras_gresnet import zoo

    params = inspect.signature(zoo.model_builder(builder)).parameters
    arch = {}
    for key, value in builder_kwargs.items():
        if key in _NOT_ARCHITECTURE or key in _TRAINING_ONLY:
            continue
        default = params[key].default if key in params else inspect.Parameter.empty
        if default is inspect.Parameter.empty or _canonical(value) != _canonical(default):
            arch[key] = _canonical(value)
    return arch


def _call(builder, kwargs):
    return f"{builder}({', '.join(f'{k}={v!r}' for k, v in sorted(kwargs.items()))})"


def check_fits(entry, builder, builder_kwargs, input_shape=None):
    """Refuse (``ValueError`` naming both) weights that do not fit the
    requested ``builder(**builder_kwargs)`` with ``input_shape`` (``None``:
    the entry's). ``entry``: a registry name or entry. Made before anything
    is downloaded.

    Arguments that only act in training (``k_initial``, ``bn_momentum``,
    ``dropout``) may differ; any other must equal the entry's (an argument
    left out counts as the builder's default)."""
    if isinstance(entry, str):
        entry = get_weights(entry)
    trained_shape = tuple(entry["input_shape"])
    problems = []
    if builder != entry["builder"]:
        problems.append(f"builder {builder!r} is not {entry['builder']!r}")
    else:
        trained = _architecture(entry["builder"], entry["builder_kwargs"])
        requested = _architecture(builder, dict(builder_kwargs or {}))
        for key in sorted(trained.keys() | requested.keys()):
            want, have = requested.get(key, "(default)"), trained.get(key, "(default)")
            if want != have:
                problems.append(f"{key}={want!r} is not {key}={have!r}")
    if input_shape is not None:
        try:
            shape = tuple(None if d is None else int(d) for d in input_shape)
        except (TypeError, ValueError):
            shape = input_shape
        if shape != trained_shape:
            problems.append(f"input_shape {shape} is not {trained_shape}")
    if problems:
        asked = {k: v for k, v in (builder_kwargs or {}).items() if k not in _NOT_ARCHITECTURE}
        shape = "" if input_shape is None else f" with input_shape {tuple(input_shape)}"
        raise ValueError(
            f"weights {entry['name']!r} were trained for "
            f"{_call(entry['builder'], entry['builder_kwargs'])} with input_shape "
            f"{trained_shape}; they do not fit the requested {_call(builder, asked)}{shape}: "
            f"{'; '.join(problems)}"
        )
    return entry


def _is_path(weights):
    """A path (``.keras``, ``.weights.h5``, a preset folder), not a name."""
    return isinstance(weights, os.PathLike) or (
        isinstance(weights, str)
        and (weights.endswith(SUFFIXES) or os.sep in weights or _is_preset(Path(weights)))
    )


def _is_preset(path):
    return path.is_dir() and (path / PRESET_CONFIG).is_file()


def check_argument(weights, builder):
    """Check a builder's ``weights=`` before anything is built: ``None``, a
    published name of ``builder``, a ``.keras`` / ``.weights.h5`` file, or a
    preset folder. Returns the registry entry for a name, else ``None``."""
    if weights is None:
        return None
    if _is_path(weights):
        path = Path(weights)
        if not (path.is_file() and path.name.endswith(SUFFIXES)) and not _is_preset(path):
            raise ValueError(
                f"weights={str(weights)!r}: no such .keras or .weights.h5 file or preset "
                f"folder (weights accepts None, a published name, or such a path)"
            )
        return None
    registry = _read_registry() if isinstance(weights, str) else {}
    entry = registry.get(weights)
    if entry is None or entry["builder"] != builder:
        names = sorted(n for n, e in registry.items()
                       if e["builder"] == builder and e["status"] == PUBLISHED)
        raise ValueError(
            f"weights={weights!r} has no registry entry for {builder}; accepted: "
            f"None{''.join(', ' + repr(n) for n in names)}, or a path to a .keras or "
            f".weights.h5 file"
        )
    return _published(entry)


def check_call(builder, args, kwargs):
    """``check_fits`` for a public builder call ``builder(*args, **kwargs)``
    whose ``weights=`` names a registry entry or a dataset (the zoo's
    registry calls it for the outermost builder, which sees the arguments as
    the entry lists them). Returns the entry's name (``weights="fashion_mnist"``
    resolves to the published entry that fits), or ``None`` for anything
    else, which is left to the builder's own checks."""
    weights = kwargs.get("weights")
    if not isinstance(weights, str) or _is_path(weights):
        return None
    registry = _read_registry()
    entry = registry.get(weights)
    # A dataset name, as Keras Applications take weights="imagenet": the
    # published entry of this builder, these arguments and that dataset.
    candidates = [e for e in registry.values() if e["builder"] == builder.__name__
                  and e["dataset"] == weights and e["status"] == PUBLISHED]
    if entry is None and not candidates:
        return None
    try:
        bound = inspect.signature(builder).bind(*args, **kwargs)
    except TypeError:
        return None  # the builder reports its own bad call
    call = {}
    for key, value in bound.arguments.items():
        kind = bound.signature.parameters[key].kind
        call.update(value if kind is inspect.Parameter.VAR_KEYWORD else {key: value})
    input_shape = call.get("input_shape")
    if input_shape is None and call.get("input_tensor") is not None:
        input_shape = tuple(call["input_tensor"].shape[1:])
    if entry is not None:
        check_fits(entry, builder.__name__, call, input_shape)
        return weights
    for candidate in candidates:
        try:
            check_fits(candidate, builder.__name__, call, input_shape)
        except ValueError:
            continue
        return candidate["name"]
    raise ValueError(
        f"weights={weights!r}: no published {weights} weights of {builder.__name__} fit "
        f"these arguments; published: "
        + ", ".join(f"{c['name']} ({_call(builder.__name__, c['builder_kwargs'])})"
                    for c in candidates)
    )


def _h5_variable_count(path):
    import h5py  # on use: reading the registry needs neither h5py nor Keras

    with h5py.File(path, "r") as f:
        count = []
        f.visititems(lambda _, obj: count.append(1) if isinstance(obj, h5py.Dataset) else None)
    return len(count)


def _load_exact(model, path, *, without_top=False):
    """Keras' ``load_weights`` of a file saved from this very architecture
    (``without_top``: from it with a ``predictions`` head). Keras matches
    variables by layer order and ignores extra ones, so the variable count is
    checked first."""
    stored = _h5_variable_count(path)
    expected = len(model.weights) + (2 if without_top else 0)  # the head's kernel, bias
    if stored != expected:
        raise ValueError(
            f"{path} holds {stored} variables, {model.name} "
            f"{'with a head ' if without_top else ''}has {expected}: it was saved from "
            f"another architecture (a .keras file or a preset loads by layer name)"
        )
    try:
        with warnings.catch_warnings():
            # A load that fails also warns about Keras' internal groups; the
            # ValueError below says what is wrong.
            warnings.filterwarnings("ignore", "Skipping nested container", UserWarning)
            model.load_weights(path)
    except ValueError as error:  # Keras' message goes on to print the arrays
        raise ValueError(f"{path} does not fit {model.name}: "
                         f"{str(error).strip().splitlines()[0]}") from None
    return model


def _entry_model(entry, path):
    """The model the entry's file was saved from, loaded from ``path``."""
    import keras  # on use: the registry alone loads without TensorFlow

    if path.name.endswith(".keras"):
        return keras.saving.load_model(path, compile=False, safe_mode=True)
    from keras_gresnet import zoo

    model = zoo.get_model(
        entry["builder"], **entry["builder_kwargs"],
        input_shape=tuple(entry["input_shape"]), classes=entry["classes"],
    )
    return _load_exact(model, path)


def _source_model(name_or_path, cache_dir=None):
    """The full model (with its head) behind a registry name, a ``.keras``
    file or a preset folder; ``None`` for a bare ``.weights.h5``."""
    import keras  # on use: the registry alone loads without TensorFlow

    if not _is_path(name_or_path):
        entry = _published(get_weights(name_or_path))
        return _entry_model(entry, weights_path(entry["name"], cache_dir))
    path = Path(name_or_path)
    if _is_preset(path) or (path.name == PRESET_WEIGHTS and _is_preset(path.parent)):
        return from_preset(path if path.is_dir() else path.parent)
    if path.is_file() and path.name.endswith(".keras"):
        return keras.saving.load_model(path, compile=False, safe_mode=True)
    if path.is_file() and path.name.endswith(".weights.h5"):
        return None
    raise ValueError(
        f"{str(name_or_path)!r} is not a published name, a .keras or .weights.h5 "
        f"file, or a preset folder"
    )


def _head(model):
    layers = {layer.name: layer for layer in model.layers}
    return layers.get("predictions")


def load_into(model, name_or_path, *, include_top=None, classes=None, cache_dir=None):
    """Load weights, layer by layer by name, into the built zoo ``model``.

    ``name_or_path``: a registry name, a ``.keras`` file, a preset folder, or
    a bare ``.weights.h5`` (saved from this very architecture). With
    ``include_top`` and ``classes`` other than the weights', the body is
    loaded and the fresh ``predictions`` layer kept (one log line says so);
    without ``include_top`` only the body is loaded. Every weighted layer of
    the body must match by name and shape. Returns ``model``.
    """
    from keras_gresnet.zoo import transfer_weights

    head = _head(model)
    include_top = head is not None if include_top is None else include_top
    if include_top and head is None:
        raise ValueError(f"include_top=True but {model.name} has no 'predictions' layer")
    classes = head.units if classes is None and head is not None else classes
    source = _source_model(name_or_path, cache_dir)
    if source is None:  # a bare .weights.h5: Keras' own loading, exact layout
        try:
            return _load_exact(model, Path(name_or_path), without_top=not include_top)
        except ValueError as error:
            raise ValueError(f"{error}. A bare .weights.h5 holds no architecture: it "
                             f"loads into the model it was saved from (or that model "
                             f"with include_top=False) only") from None
    source_head = _head(source)
    exclude = set()
    if include_top and source_head is not None and source_head.units != classes:
        exclude.add("predictions")
        logger.warning(
            "%s: loaded the body of %s; the head 'predictions' (%d classes) stays freshly "
            "initialised (the weights have %d classes)",
            model.name, name_or_path, classes, source_head.units,
        )
    try:
        copied = transfer_weights(source, model, skip_missing=False, exclude=exclude)
    except ValueError as error:
        raise ValueError(f"the weights {str(name_or_path)!r} ({source.name}) do not fit "
                         f"{model.name}, another architecture: {error}") from None
    unused = sorted(
        layer.name for layer in source.layers
        if layer.weights and layer.name not in copied and layer.name != "predictions"
    )
    if unused:
        raise ValueError(
            f"the weights {str(name_or_path)!r} ({source.name}) do not fit {model.name}, "
            f"another architecture: it has no layers named "
            f"{unused[:5]}{'...' if len(unused) > 5 else ''}"
        )
    return model


# ---------------------------------------------------------------- presets


def save_preset(model, directory, *, builder, builder_kwargs, metadata=None, overwrite=False):
    """Save ``model`` as a preset folder (KerasHub style): ``config.json``
    (builder, its arguments, versions), ``model.weights.h5`` and
    ``metadata.json``. The folder is written under a temporary name and
    renamed into place: a preset is complete or absent. ``builder_kwargs``
    must rebuild ``model`` (checked first); the model's input shape is added
    when missing. Returns the folder."""
    import keras  # on use: the registry alone loads without TensorFlow

    from keras_gresnet import zoo

    directory = Path(directory)
    kwargs = dict(builder_kwargs or {})
    given = sorted({"weights", "input_tensor"} & set(kwargs))
    if given:
        raise ValueError(f"builder_kwargs of a preset may not set {given}")
    kwargs.setdefault("input_shape", list(model.input_shape[1:]))
    kwargs = _canonical(kwargs)
    twin = zoo.get_model(builder, **kwargs)
    layout = [(w.path, tuple(w.shape)) for w in model.weights]
    if [(w.path, tuple(w.shape)) for w in twin.weights] != layout:
        raise ValueError(
            f"{_call(builder, kwargs)} does not rebuild {model.name} (its weights differ "
            f"in names or shapes): pass the builder_kwargs the model was built with"
        )
    # The twin is uncompiled: its weights file holds no optimizer variables,
    # which from_preset (loading into a fresh build) would refuse.
    twin.set_weights(model.get_weights())
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict (JSON-ready), got {metadata!r}")
    if directory.exists() and not overwrite:
        raise ValueError(f"{directory} exists; pass overwrite=True to replace the preset")
    config = dict(builder=builder, builder_kwargs=kwargs, keras_version=keras.__version__,
                  keras_gresnet_version=__version__)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.tmp{os.getpid()}")
    old = directory.with_name(f".{directory.name}.old{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        write_json(tmp / PRESET_CONFIG, config)
        twin.save_weights(tmp / PRESET_WEIGHTS)
        write_json(tmp / PRESET_METADATA, metadata or {})
        if directory.exists():
            os.replace(directory, old)
            try:
                os.replace(tmp, directory)
            except BaseException:
                os.replace(old, directory)  # the old preset stays whole
                raise
        else:
            os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return directory


def _read_preset_config(directory):
    path = directory / PRESET_CONFIG
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{directory} is not a preset: {path} unreadable ({error})") from None
    if not isinstance(config, dict) or not isinstance(config.get("builder"), str) or not isinstance(
        config.get("builder_kwargs"), dict
    ):
        raise ValueError(f"{path} must hold an object with 'builder' and 'builder_kwargs'")
    # What save_preset refuses to write, from_preset refuses to read: a
    # preset's weights are its own file, never another path, name or preset.
    given = sorted({"weights", "input_tensor"} & set(config["builder_kwargs"]))
    if given:
        raise ValueError(f"{path}: builder_kwargs may not set {given} (a preset's weights "
                         f"are its {PRESET_WEIGHTS})")
    if not (directory / PRESET_WEIGHTS).is_file():
        raise ValueError(f"{directory} is not a preset: {PRESET_WEIGHTS} is missing")
    return config


def from_preset(preset, cache_dir=None):
    """The model of a preset folder (:func:`save_preset`) or of a published
    registry name, rebuilt by its builder with its weights loaded."""
    from keras_gresnet import zoo

    if _is_path(preset):
        directory = Path(preset)
        if not directory.is_dir():
            raise ValueError(f"preset {str(preset)!r}: no such folder")
        config = _read_preset_config(directory)
        model = zoo.get_model(config["builder"], **config["builder_kwargs"])
        return _load_exact(model, directory / PRESET_WEIGHTS)
    return _source_model(preset, cache_dir)
