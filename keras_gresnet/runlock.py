"""One trainer per run folder: the folder's lock file (``run.lock``: the
holder's pid, host and process start time). Keras-free, so the command line
refuses a second trainer before Keras and TensorFlow are imported;
:mod:`keras_gresnet.training.runs` takes and releases it around a run.

Where :mod:`fcntl` exists (Linux, macOS), the lock is the kernel's: the
holder keeps ``run.lock`` open under an exclusive ``flock`` for the whole
run, and the JSON record inside only says who holds it. What is guaranteed,
and why:

* **One holder at a time.** The kernel grants an exclusive ``flock`` on a
  file to one open file at a time. A taker that is granted it then checks
  that the file it locked is still the one named ``run.lock`` (the same
  device and inode, from ``fstat`` of its descriptor and ``lstat`` of the
  name), and a holder's :meth:`RunLock.release` removes the name *before* it
  closes the file: a taker that locked a file just released (or replaced)
  sees that the name is gone or names another file, and starts again. So
  taking over a stale lock is no read-then-rename race: the process holding
  the ``flock`` decides alone, and the others are refused.
* **A killed holder holds nothing.** The kernel drops the ``flock`` when the
  holder's last descriptor of the file closes, which it does when the
  process ends however it ends (SIGKILL, out of memory, a crash); the lock
  is opened ``O_CLOEXEC``, so a program the run starts does not inherit it
  (a child that is forked without ``exec`` does, and holds the lock while it
  lives). What such a holder leaves, a record of a dead pid on this host, of
  a pid since reused by a process with another start time, or an empty file
  (a creator killed before it wrote), is taken over.
* **Nothing is followed or overwritten that this program did not write.**
  ``run.lock`` is created with ``O_EXCL`` and opened with ``O_NOFOLLOW``
  (:meth:`RunLock.holder` too), and is written only while flocked, only when
  it is a regular file with one link, and only when it is empty or holds a
  stale record of this program. A symbolic link (dangling or not), a folder,
  a special file, a file with other hard links, content that is not a lock
  record, the record of a live process on this host (from an older version,
  which held no ``flock``) and the record of another host (which cannot be
  asked) are refused in one line and left as they are. No temporary file is
  made.

Without :mod:`fcntl` (Windows), the record is written to a temporary file
(created ``O_EXCL``, under a random name, never through a link) and
hard-linked into place, and a stale lock is moved aside before it is
replaced; there, two processes taking over one stale lock at the same moment
may both succeed (best effort).
"""

import errno
import json
import os
import secrets
import socket
import stat
import time
from pathlib import Path

from keras_gresnet.files import pid_alive
from keras_gresnet.limits import MAX_LOCK_BYTES

try:
    import fcntl
except ImportError:  # Windows: the link-based fallback
    fcntl = None

LOCK = "run.lock"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_FOREIGN = "not a lock this program wrote"


def _process_start(pid):
    """The start time of process ``pid`` in clock ticks since boot (Linux's
    /proc), or None where it cannot be read: with the pid, it tells a live
    holder from a new process that reuses a dead one's pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read(4096).rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


class _Foreign(Exception):
    """``run.lock`` is something this program never writes (``what`` says
    what: a symbolic link, a folder...)."""

    def __init__(self, what):
        super().__init__(what)
        self.what = what


def _kind(st):
    """Why a file of status ``st`` cannot be a lock of ours, or ``None``."""
    if stat.S_ISLNK(st.st_mode):
        return f"a symbolic link, {_FOREIGN} (it is not followed)"
    if stat.S_ISDIR(st.st_mode):
        return f"a folder, {_FOREIGN}"
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file, {_FOREIGN}"
    if st.st_nlink > 1:
        return f"a file with {st.st_nlink} hard links, {_FOREIGN}"
    return None


class RunLock:
    """The lock of a run folder, ``run.lock``: taken (:meth:`take`) before
    the run's first write and released (:meth:`release`) when the run ends
    (finished, diverged or interrupted). A lock whose process is gone on this
    host (SIGKILL, a reboot) is stale and taken over; one held by a live
    process, or by another host (which cannot be asked), refuses a second
    trainer and an ``--overwrite`` in one line naming the holder. The module
    docstring says what is guaranteed and why."""

    MAX_BYTES = MAX_LOCK_BYTES  # a lock file is a short JSON line; a larger one is not ours
    TRIES = 20  # takers start again when the file they locked was removed or replaced
    PROBE_WAIT = 1.0  # seconds a taker waits out other processes' brief check()s

    def __init__(self, out):
        self.path = Path(out) / LOCK
        self.held = False
        self._fd = None  # the flocked descriptor while held (fcntl platforms)
        self._owner = None  # the pid that took it (a forked child releases nothing)

    @staticmethod
    def _record():
        pid = os.getpid()
        return dict(pid=pid, host=socket.gethostname(), start=_process_start(pid),
                    since=time.strftime("%Y-%m-%d %H:%M:%S"))

    # ------------------------------------------------------------ reading

    def _lstat(self):
        try:
            return os.lstat(self.path)
        except FileNotFoundError:
            return None

    def _same(self, st):
        """Whether ``run.lock`` still names the file of status ``st``."""
        now = self._lstat()
        return now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)

    def _open_existing(self, flags):
        """``(fd, status)`` of the existing ``run.lock``, opened without
        following a link and without blocking; :class:`_Foreign` for what is
        not a lock file of ours, ``FileNotFoundError`` when there is none."""
        st = self._lstat()
        if st is None:
            raise FileNotFoundError(errno.ENOENT, "no lock", str(self.path))
        what = _kind(st)
        if what is not None:  # not opened at all: a link is not followed, a device not touched
            raise _Foreign(what)
        try:
            fd = os.open(self.path, flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.EMLINK):  # replaced by a link meanwhile
                raise _Foreign(_kind(os.lstat(self.path)) or _FOREIGN) from None
            raise
        try:
            st = os.fstat(fd)
            what = _kind(st)
            if what is not None:
                raise _Foreign(what)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _read(self, fd):
        return os.pread(fd, self.MAX_BYTES + 1, 0)

    def _parse(self, text):
        if not text:
            return {"unreadable": "empty (its creator stopped before writing it)"}
        try:
            record = json.loads(text) if len(text) <= self.MAX_BYTES else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or type(record.get("pid")) is not int:
            return {"unreadable": _FOREIGN}
        return record

    def holder(self):
        """The lock's record (``pid``, ``host``, ``start``, ``since``), ``None``
        without a lock file. A file that is not a lock this program wrote (a
        symbolic link, which is never followed, a folder, other content), or
        an empty one, is ``{"unreadable": why}``: a holder that cannot be
        checked."""
        try:
            fd, _ = self._open_existing(os.O_RDONLY)
        except FileNotFoundError:
            return None
        except _Foreign as foreign:
            return {"unreadable": foreign.what}
        except PermissionError:
            return {"unreadable": "not readable (permission denied)"}
        try:
            return self._parse(self._read(fd))
        finally:
            os.close(fd)

    # ------------------------------------------------------------ judging

    def _stale(self, record):
        if "unreadable" in record or record.get("host") != socket.gethostname():
            return False
        if not pid_alive(record["pid"]):
            return True
        start = _process_start(record["pid"])
        return record.get("start") is not None and start is not None and start != record["start"]

    def _refusal(self, record):
        if "unreadable" in record:
            return ValueError(f"{self.path} is {record['unreadable']}: another trainer may hold "
                              f"the run folder; delete it if none does")
        if record.get("host") != socket.gethostname():
            return ValueError(
                f"{self.path.parent} is held by process {record['pid']} on host "
                f"{record.get('host')!r} since {record.get('since')}; wait for it to finish, or "
                f"delete {self.path} if that process is gone")
        return ValueError(
            f"{self.path.parent} is held by process {record['pid']} (since "
            f"{record.get('since')}), which is still training there; wait for it to finish "
            f"or stop it, or pick another out")

    def _foreign(self, what):
        return ValueError(f"{self.path} is {what}: remove it and run again")

    def _busy(self, text):
        """The refusal for a lock another open file holds flocked (``text``:
        what it holds, read without the flock)."""
        record = self._parse(text)
        if "unreadable" in record:
            return ValueError(f"{self.path.parent} is held by another trainer, which is writing "
                              f"its lock {self.path} now; wait for it to finish, or pick another "
                              f"out")
        if self._stale(record):  # its pid is gone: a process it forked still has the lock open
            return ValueError(
                f"{self.path.parent} is held by a process that process {record['pid']} (since "
                f"{record.get('since')}, now gone) started, which still has {self.path} open; "
                f"stop it, or pick another out")
        return self._refusal(record)

    def _judge(self, text):
        """Return when a lock file holding ``text`` may be taken over (empty: a
        creator killed before it wrote; a stale record); refuse otherwise."""
        if not text:
            return
        record = self._parse(text)
        if not self._stale(record):
            raise self._refusal(record)

    def _holds(self):
        """Whether this object holds the lock now, under its own name."""
        if not self.held:
            return False
        if self._fd is None:  # the fallback
            record = self.holder()
            return record is not None and record.get("pid") == os.getpid()
        return self._same(os.fstat(self._fd))

    # ------------------------------------------------------------ the API

    def check(self):
        """Refuse (one line) when the lock may not be taken: a live process
        holds the folder (its ``flock``, or a live record on this host, or any
        record of another host), or ``run.lock`` is not a lock this program
        wrote (a symbolic link, dangling or not, included). Writes nothing
        (a shared ``flock`` is held for the moment of reading the record)."""
        if self._holds():
            return
        try:
            fd, _ = self._open_existing(os.O_RDONLY)
        except FileNotFoundError:
            return
        except _Foreign as foreign:
            raise self._foreign(foreign.what) from None
        except PermissionError:
            raise ValueError(f"{self.path} cannot be read (permission denied): another trainer "
                             f"may hold the run folder; delete it if none does") from None
        try:
            busy = False
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    busy = True  # shared locks coexist: an exclusive one is held
            text = self._read(fd)
        finally:
            os.close(fd)  # drops the shared flock
        if busy:
            raise self._busy(text)
        self._judge(text)

    def take(self):
        """Take the lock, or refuse in one line (:meth:`check`'s refusals); a
        no-op while this object holds it. The flocked file stays open until
        :meth:`release` (or the process's end)."""
        if self._holds():
            return
        if self._fd is not None:  # ours was removed or replaced by someone: let it go
            os.close(self._fd)
            self._fd, self.held = None, False
        if fcntl is None:
            self._take_by_link()
        else:
            self._take_by_flock()
        self._owner = os.getpid()

    def _take_by_flock(self):
        for _ in range(self.TRIES):
            fd, created = self._open_for_taking()
            if fd is None:
                continue  # removed between lstat and open: start again
            kept = False
            try:
                if not self._flock(fd, created):
                    raise self._busy(self._read(fd))
                st = os.fstat(fd)
                if not self._same(st):
                    continue  # released or replaced before we locked it: start again
                what = _kind(st)
                if what is not None:  # a hard link made meanwhile: not written through
                    raise self._foreign(what)
                self._judge(self._read(fd))  # empty if we created it (unless a taker was first)
                self._write(fd, st)
                kept = True
            finally:
                if not kept:
                    os.close(fd)
            self._fd, self.held = fd, True
            return
        raise ValueError(f"{self.path} was removed or replaced {self.TRIES} times while this "
                         f"process tried to take it; another program is changing it: stop it, "
                         f"or pick another out")

    def _open_for_taking(self):
        """``(fd, created)``: ``run.lock`` created (``O_EXCL``: never through a
        link) or, when it exists, opened for writing without following a link;
        ``(None, False)`` when it vanished in between."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
                         0o644)
            return fd, True
        except FileExistsError:
            pass
        try:
            fd, _ = self._open_existing(os.O_RDWR)
        except FileNotFoundError:
            return None, False
        except _Foreign as foreign:
            raise self._foreign(foreign.what) from None
        except PermissionError:
            record = self.holder()
            if record is not None and not self._stale(record) and "unreadable" not in record:
                raise self._refusal(record) from None
            raise ValueError(f"{self.path} cannot be opened for writing (permission denied): "
                             f"another trainer may hold the run folder; delete it if none "
                             f"does") from None
        return fd, False

    def _flock(self, fd, created):
        """Take ``fd``'s exclusive flock without blocking: ``False`` when
        another process holds it exclusively. A shared flock (another
        process's :meth:`check`, held for a moment) is waited out, up to
        :attr:`PROBE_WAIT` seconds."""
        deadline = time.monotonic() + self.PROBE_WAIT
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    pass
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False  # an exclusive holder
                fcntl.flock(fd, fcntl.LOCK_UN)  # only shared holders: checks; wait them out
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.002)
        except OSError as error:  # a file system without flock
            if created and self._same(os.fstat(fd)):
                os.unlink(self.path)  # empty and ours
            raise ValueError(f"{self.path} cannot be locked ({error.strerror or error}); pick "
                             f"an out on a local file system") from None

    def _write(self, fd, st):
        """Write this process's record over the (empty or stale) flocked
        file; on failure the file, ours now, is removed."""
        data = json.dumps(self._record()).encode()
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], written)
            os.ftruncate(fd, len(data))
        except BaseException:
            if self._same(st):
                os.unlink(self.path)
            raise

    def release(self):
        """Remove the lock if this process holds it: the name first, while
        the file is still flocked, then the descriptor (see the module
        docstring); a file that is no longer ours under that name is left."""
        if not self.held:
            return
        fd, self._fd, self.held = self._fd, None, False
        if fd is None:  # the fallback
            record = self.holder()
            if record is not None and record.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            return
        try:
            if os.getpid() == self._owner and self._same(os.fstat(fd)):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    # ------------------------------------------------------------ without fcntl

    def _take_by_link(self):
        """The fallback: the record is written to a temporary file (``O_EXCL``
        under a random name: never through a link, never another's file) and
        hard-linked into place (``link`` fails when the lock exists, as
        ``O_EXCL`` does, and no reader sees a lock half written). A stale one
        is moved aside (one rename) and removed."""
        stem, _, suffix = LOCK.partition(".")  # .run.tmpPID.lock: a temporary of ours
        tmp = self.path.with_name(f".{stem}.tmp{os.getpid()}{secrets.token_hex(4)}.{suffix}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self._record(), f)
            for _ in range(3):
                try:
                    os.link(tmp, self.path)
                except FileExistsError:
                    st = self._lstat()
                    if st is not None and stat.S_ISLNK(st.st_mode):
                        raise self._foreign(_kind(st)) from None
                    record = self.holder()
                    if record is None:
                        continue  # released in between: try again
                    if not self._stale(record):
                        raise self._refusal(record) from None
                    aside = self.path.with_name(f"{LOCK}.stale-{os.getpid()}")
                    try:
                        os.rename(self.path, aside)
                    except FileNotFoundError:
                        continue  # another process took it over first
                    aside.unlink(missing_ok=True)
                    continue
                self.held = True
                return
            raise self._refusal(self.holder() or {"unreadable": "changing under us"})
        finally:
            tmp.unlink(missing_ok=True)
