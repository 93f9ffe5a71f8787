"""One trainer per run folder: the folder's lock file (``run.lock``: the
holder's pid, host and process start time). Keras-free, so the command line
refuses a second trainer before Keras and TensorFlow are imported;
:mod:`keras_gresnet.training.runs` takes and releases it around a run."""

import json
import os
import socket
import time
from pathlib import Path

from keras_gresnet.files import pid_alive

LOCK = "run.lock"


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


class RunLock:
    """The lock of a run folder: ``run.lock`` holds the trainer's pid, host
    and process start time, created with ``O_EXCL`` before the run's first
    write and removed when the run ends (finished, diverged or interrupted).
    A lock whose process is gone on this host (SIGKILL, a reboot) is stale
    and taken over; one held by a live process, or by another host (which
    cannot be asked), refuses a second trainer and an ``--overwrite`` in one
    line naming the holder."""

    MAX_BYTES = 4096  # a lock file is a short JSON line; a larger one is not ours

    def __init__(self, out):
        self.path = Path(out) / LOCK
        self.held = False

    @staticmethod
    def _record():
        pid = os.getpid()
        return dict(pid=pid, host=socket.gethostname(), start=_process_start(pid),
                    since=time.strftime("%Y-%m-%d %H:%M:%S"))

    def holder(self):
        """The lock's record, ``None`` without a lock; an unreadable lock file
        is a holder that cannot be checked."""
        try:
            with open(self.path, "rb") as f:
                text = f.read(self.MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return {"unreadable": "a folder"}
        try:
            record = json.loads(text) if len(text) <= self.MAX_BYTES else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
            return {"unreadable": "not a lock this program wrote"}
        return record

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

    def check(self):
        """Refuse (one line) when a live process holds the folder. Reads only."""
        record = self.holder()
        if record is not None and not (record.get("pid") == os.getpid() and self.held) \
                and not self._stale(record):
            raise self._refusal(record)

    def take(self):
        """Create the lock, whole: its record is written to a temporary file
        first and hard-linked into place (``link`` fails when the lock exists,
        as ``O_EXCL`` does, and no reader ever sees a lock half written). A
        stale one is moved aside (one rename: of two processes taking it
        over, one wins) and removed."""
        stem, _, suffix = LOCK.partition(".")  # .run.tmpPID.lock: a temporary of ours
        tmp = self.path.with_name(f".{stem}.tmp{os.getpid()}.{suffix}")
        with open(tmp, "w") as f:
            json.dump(self._record(), f)
        try:
            for _ in range(3):
                try:
                    os.link(tmp, self.path)
                except FileExistsError:
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

    def release(self):
        """Remove the lock if this process holds it."""
        if not self.held:
            return
        record = self.holder()
        if record is not None and record.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False
