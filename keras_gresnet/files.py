"""Atomic file writing (a file appears complete or not at all), the
temporaries a killed writer leaves, and a watchdog for a library call that
may stall: public, so that scripts write as the package does."""

import _thread
import contextlib
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

from keras_gresnet.limits import MAX_TEXT_BYTES  # the bounds' one place


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path`` (same folder, same suffixes,
    e.g. ``.weights.h5``, so Keras and matplotlib accept it); on success it
    replaces ``path`` in one ``os.replace``, on failure it is removed and
    ``path`` is left untouched."""
    path = Path(path)
    stem, dot, suffixes = path.name.partition(".")
    tmp = path.with_name(f".{stem}.tmp{os.getpid()}{dot}{suffixes}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as error:
        if error.filename is not None or error.errno is None:
            raise
        # a write's error (a full disk: ENOSPC, a size limit: EFBIG) names no
        # file; the caller's one line names the one being written
        error.filename = str(path)
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes(path, data):
    """``data`` into ``path`` atomically, with plain Python I/O (a full disk
    is an ``OSError`` naming ``path``, the temporary removed)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_text(path, text):
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path, obj):
    write_text(path, json.dumps(obj, indent=2, default=str) + "\n")  # insertion order: gates in network order


def _no_constant(name):
    """JSON's non-standard NaN / Infinity, which this package never writes:
    refused as a JSON error."""
    raise json.JSONDecodeError(f"{name} is not a number this package writes", name, 0)




def read_bounded(path, max_bytes=MAX_TEXT_BYTES):
    """The bytes of the regular file ``path``, refused in one ``ValueError``
    naming it before it is read when it is larger than ``max_bytes`` (or
    grows past it while read), or is not a regular file (a named pipe would
    block, a device never end)."""
    import stat

    try:
        info = os.stat(path)
    except OSError as error:
        raise ValueError(f"{path}: cannot read it ({error.strerror or error})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file (a folder, a named pipe or a device)")
    if info.st_size > max_bytes:
        raise ValueError(f"{path} holds {info.st_size:,} bytes, more than the {max_bytes:,} "
                         f"such a file may hold; not read")
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path} grew past {max_bytes:,} bytes while it was read; not read")
    return data


def read_json(path, kind=dict, max_bytes=MAX_TEXT_BYTES):
    """The JSON file ``path`` (one this package wrote, or a user's: read as
    data, nothing in it runs), which must hold a ``kind``; ``ValueError``
    naming the file otherwise (unreadable, larger than ``max_bytes``, not a
    regular file, bad UTF-8, not JSON, NaN, too deep, another type)."""
    text = read_bounded(path, max_bytes)
    try:
        value = json.loads(text.decode("utf-8"), parse_constant=_no_constant)
    except (OSError, ValueError, RecursionError) as error:  # ValueError: bad UTF-8, bad JSON
        first = " ".join(((str(error).splitlines() or [""])[0] or type(error).__name__).split())
        raise ValueError(f"{path}: not a readable JSON file ({first[:200]})") from None
    if not isinstance(value, kind):
        raise ValueError(f"{path}: must hold a JSON {'object' if kind is dict else kind.__name__}, "
                         f"got {type(value).__name__}")
    return value


def write_csv(path, columns, rows):
    """``rows``: iterables in ``columns`` order; floats written in full."""
    lines = [",".join(columns)]
    lines += [",".join(_cell(v) for v in row) for row in rows]
    write_text(path, "\n".join(lines) + "\n")


def _cell(value):
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if any(c in text for c in ',"\n'):
        text = '"' + text.replace('"', '""') + '"'
    return text


# The temporary names atomic_path gives: ".{stem}.tmp{pid}{suffixes}".
_TEMPORARY = re.compile(r"^\.(?P<stem>[^.]+)\.tmp(?P<pid>\d+)(?P<suffixes>\..*)?$")


def pid_alive(pid):
    """Whether process ``pid`` may be running (``True`` when unsure)."""
    if pid <= 0 or os.name == "nt":  # on Windows os.kill(pid, 0) would end the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # PermissionError: another user's
        return True
    return True


def _take_signal(signum, handler, takes):
    """Set ``handler`` for ``signum`` if this is the main thread (the only
    one that may set handlers) and ``takes(the current handler)``; returns
    the handler it replaced (restore it afterwards), ``None`` if it left the
    signal as it was (another thread, a handler not taken, no signals)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        previous = signal.getsignal(signum)
        if not takes(previous):
            return None
        signal.signal(signum, handler)
    except (ValueError, OSError, AttributeError):  # no signals here
        return None
    return previous


class _Terminated(BaseException):
    """SIGTERM arrived while a temporary was open (raised so that ``finally``
    cleans up)."""


class on_sigterm_raise:
    """While ``what`` (a download, an export) writes its temporaries in the
    main thread, SIGTERM raises, so that they are removed; then it acts as
    before: ``SystemExit(143)`` under the default action; a previous Python
    handler is called (and ``error`` is raised if it returns). An ignored
    SIGTERM stays ignored; other threads cannot set handlers and are left as
    they are."""

    def __init__(self, what, error=RuntimeError):
        self.what, self.error = what, error
        self.fired = None

    def __enter__(self):
        self.fired = None
        # set outside Python (None), or ignored: left as it is
        self.previous = _take_signal(signal.SIGTERM, self._raise,
                                     lambda now: now is not None and now != signal.SIG_IGN)
        return self

    def check(self):
        """Raise now if SIGTERM came and its exception was swallowed (a
        handler that runs in a garbage-collection callback, e.g. JAX's,
        only prints it): call it before the result replaces anything."""
        if self.fired is not None:
            raise _Terminated(*self.fired)

    def _raise(self, signum, frame):
        # Remembered too: code between the signal and this block's end may
        # catch the exception and raise another one of its own, or swallow
        # it (an exception in a gc callback is printed and dropped: seen with
        # JAX's _xla_gc_callback under an export); check() raises it again.
        self.fired = (signum, frame)
        raise _Terminated(signum, frame)

    def __exit__(self, kind, error, traceback):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        if kind is _Terminated or (kind is not None and self.fired is not None):
            if callable(self.previous):  # the program's own handler decides
                self.previous(*self.fired)
                raise self.error(f"{self.what} was interrupted by SIGTERM; nothing "
                                 f"was kept") from None
            raise SystemExit(128 + signal.SIGTERM) from None
        return False


class interrupt_kept:
    """While a run trains in the main thread, a Ctrl-C is remembered as well
    as raised, so that one swallowed on its way up is raised again at
    :meth:`check` (call it where the run can stop: after a batch, after an
    epoch). C code that clears every pending exception swallows a
    ``KeyboardInterrupt`` raised while it runs Python code (numpy/numpy#20596,
    pybind/pybind11#2862); the run would then go on to its end. Only
    Python's own handler is replaced: a program's handler, an ignored or
    default SIGINT, and other threads are left as they are."""

    def __init__(self):
        self.fired = False
        self.previous = None

    def __enter__(self):
        self.fired = False
        self.previous = _take_signal(signal.SIGINT, self._raise,
                                     lambda now: now is signal.default_int_handler)
        return self

    def _raise(self, signum, frame):
        self.fired = True
        signal.default_int_handler(signum, frame)

    def check(self):
        """Raise ``KeyboardInterrupt`` if a Ctrl-C came (and was swallowed)."""
        if self.fired:
            raise KeyboardInterrupt

    def __exit__(self, kind, error, traceback):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False


def remove_stale_temporaries(folder, owned=lambda name: True):
    """Remove the temporaries :func:`atomic_path` left in ``folder`` when its
    process was killed (a pid that no longer runs) and whose final name
    ``owned(name)`` accepts; a live process's are left alone, and so is every
    other file. Returns the removed paths."""
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        match = _TEMPORARY.match(path.name)
        if match and path.is_file() and not path.is_symlink() \
                and owned(temporary_target(path.name)) \
                and not pid_alive(int(match["pid"])):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def temporary_target(name):
    """The final name an :func:`atomic_path` temporary ``name`` stands for
    (``.model.tmp12.keras`` -> ``model.keras``), or ``None``."""
    match = _TEMPORARY.match(name)
    return None if match is None else match["stem"] + (match["suffixes"] or "")


class Stopped(RuntimeError):
    """:func:`stop_when` stopped the call in its body; the message says why."""


@contextlib.contextmanager
def stop_when(check, interval=0.05):
    """Run the body (a library call that may stall or run away: a download
    that never ends, a trickle that never trips a read timeout) while a
    watcher thread calls ``check(seconds_elapsed)`` every ``interval``
    seconds; the first time it returns a reason (a string), the main thread
    is interrupted and :class:`Stopped` is raised with that reason. A Ctrl-C
    of the user's stays a ``KeyboardInterrupt``. Only in the main thread
    (Python interrupts only that one); elsewhere the body runs unwatched."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    done, tripped, start = threading.Event(), [], time.monotonic()
    # The watcher interrupts the main thread with a simulated SIGINT, which
    # does nothing where SIGINT is ignored (a job a shell started in the
    # background, nohup): Python's own handler stands in for the body.
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def watch():
        while not done.wait(interval):
            try:
                why = check(time.monotonic() - start)
            except OSError:  # a file renamed or removed while looked at
                continue
            if why:
                tripped.append(why)
                _thread.interrupt_main()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        try:
            yield
        finally:
            done.set()
            watcher.join()
            if previous in (signal.SIG_IGN, signal.SIG_DFL, None):
                signal.signal(signal.SIGINT, previous or signal.SIG_DFL)
    except KeyboardInterrupt:
        if not tripped:
            raise
    if tripped:
        raise Stopped(tripped[0])
