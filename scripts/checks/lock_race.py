"""Race takers over a stale ``run.lock``: in each trial, a fresh folder holds
the lock record of a dead process on this host, and ``--racers`` processes,
released together by a barrier, each call :meth:`RunLock.take
<keras_gresnet.runlock.RunLock.take>` on it; every winner holds the lock
until all racers have tried, then releases it. A correct lock has exactly
one taker in every trial. Prints each trial's taker count and a summary
line; exits 1 when a trial had another count, a racer failed otherwise, or
a released lock was left behind.

    python scripts/checks/lock_race.py [--trials 200] [--racers 6]
"""

import argparse
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from keras_gresnet.runlock import LOCK, RunLock  # noqa: E402

TOOK, REFUSED, FAILED = 1, 0, -1


def _racer(index, racers, folders, start, done, results, errors):
    for trial, folder in enumerate(folders):
        lock = RunLock(folder)
        try:
            start.wait()
        except threading.BrokenBarrierError:
            return
        try:
            lock.take()
            code = TOOK
        except ValueError:
            code = REFUSED
        except Exception as error:  # noqa: BLE001 - reported, and the run fails
            code = FAILED
            errors.put(f"trial {trial + 1}, racer {index}: {type(error).__name__}: {error}")
        results[trial * racers + index] = code
        try:
            done.wait()  # a winner holds the lock until every racer has tried
        except threading.BrokenBarrierError:
            return
        finally:
            lock.release()


def dead_pid():
    """The pid of a process that has ended (a fresh one, so not yet reused)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def race(root, trials, racers, timeout=60):
    """``(taker counts per trial, errors)`` of ``trials`` races of ``racers``
    processes over stale locks in folders under ``root``."""
    stale = json.dumps(dict(pid=dead_pid(), host=socket.gethostname(), start=None,
                            since="a dead process"))
    folders = []
    for trial in range(trials):
        folder = Path(root) / f"trial{trial + 1}"
        folder.mkdir()
        (folder / LOCK).write_text(stale)
        folders.append(str(folder))
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    start, done = context.Barrier(racers, timeout=timeout), context.Barrier(racers,
                                                                            timeout=timeout)
    results = context.Array("i", [FAILED] * (trials * racers), lock=False)
    errors = context.Queue()
    processes = [context.Process(target=_racer,
                                 args=(i, racers, folders, start, done, results, errors))
                 for i in range(racers)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    found = []
    while not errors.empty():
        found.append(errors.get())
    found += [f"racer {i} exited with {p.exitcode}" for i, p in enumerate(processes)
              if p.exitcode != 0]
    counts = [sum(results[t * racers + i] == TOOK for i in range(racers))
              for t in range(trials)]
    failed = [t + 1 for t in range(trials)
              if any(results[t * racers + i] == FAILED for i in range(racers))]
    found += [f"trial {t}: a racer did not finish" for t in failed]
    left = [t + 1 for t, folder in enumerate(folders)
            if counts[t] and (Path(folder) / LOCK).exists()]
    found += [f"trial {t}: the lock was released but {LOCK} is still there" for t in left]
    return counts, found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--racers", type=int, default=6)
    args = parser.parse_args(argv)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lock_race") as root:
        counts, errors = race(root, args.trials, args.racers)
    for trial, count in enumerate(counts, 1):
        print(f"trial {trial}: {count} taker{'s' if count != 1 else ''}")
    for error in errors:
        print(f"error: {error}")
    one = sum(count == 1 for count in counts)
    print(f"trials: {args.trials}, exactly one taker: {one} ({args.racers} racers, "
          f"{time.monotonic() - began:.1f} s)")
    return 0 if one == args.trials and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
