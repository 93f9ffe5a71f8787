"""``run.lock`` (:class:`keras_gresnet.runlock.RunLock`) under races and
planted files: exactly one taker of a stale lock among racers, no symbolic
link ever followed, a live holder refusing a second taker, a SIGKILLed one's
lock taken over, and files this program did not write left byte-identical;
two ``train`` processes on one folder: the second is refused in one line."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import TINY, tree
from keras_gresnet import runlock, training
from keras_gresnet.runlock import LOCK, RunLock

ROOT = Path(__file__).resolve().parent.parent
HOLD = ("import sys, time; from keras_gresnet.runlock import RunLock; "
        "RunLock(sys.argv[1]).take(); print('held', flush=True); time.sleep(120)")


def one_line(error, *words):
    text = str(error.value)
    assert "\n" not in text, text
    for word in words:
        assert word in text, text
    return text


def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def stale_record():
    return json.dumps(dict(pid=dead_pid(), host=socket.gethostname(), start=None,
                           since="then"))


def our_record(path):
    return json.loads(Path(path).read_text())["pid"] == os.getpid()


@pytest.fixture
def holder(tmp_path):
    """Start a process that takes ``tmp_path``'s lock and sleeps; yields the
    process once it holds the lock (it is killed at the end)."""
    started = []

    def start(folder=tmp_path):
        process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT,
                                   stdout=subprocess.PIPE, text=True)
        started.append(process)
        assert process.stdout.readline().strip() == "held", process.communicate()
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()
        process.stdout.close()


# --------------------------------------------------------------------- races


@pytest.mark.integration
def test_racers_over_a_stale_lock_have_exactly_one_taker_each_trial():
    """200 trials of 6 processes released together by a barrier over a
    stale lock (a dead pid's record on this host), each winner holding the
    lock until all have tried: exactly one taker every time, and the lock
    gone once released (``scripts/checks/lock_race.py``; about a second). The old
    read-then-rename takeover had two takers in about 2% of trials."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "checks" / "lock_race.py"),
                           "--trials", "200", "--racers", "6"],
                          capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert lines[-1].startswith("trials: 200, exactly one taker: 200 "), lines[-5:]
    assert sum(line.endswith(": 1 taker") for line in lines) == 200


# ------------------------------------------------------------- planted links


@pytest.mark.parametrize("victim_bytes", [b"precious data\n", "stale"])
def test_a_symlink_at_run_lock_is_refused_and_never_followed(tmp_path, victim_bytes):
    """``run.lock`` planted as a symbolic link to a victim file (holding
    anything, or even a stale lock record that would be taken over): take()
    and check() refuse in one line saying it is a symbolic link, holder()
    does not follow it, and the victim and the link are left as they were."""
    victim = tmp_path / "victim"
    victim.write_bytes(stale_record().encode() if victim_bytes == "stale" else victim_bytes)
    before = victim.read_bytes()
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK).symlink_to(victim)
    lock = RunLock(out)
    for call in (lock.take, lock.check):
        with pytest.raises(ValueError) as refused:
            call()
        one_line(refused, str(out / LOCK), "symbolic link", "not a lock this program wrote")
    assert "symbolic link" in lock.holder()["unreadable"]
    assert not lock.held
    assert victim.read_bytes() == before
    assert os.readlink(out / LOCK) == str(victim)
    assert sorted(p.name for p in out.iterdir()) == [LOCK]


def test_symlinks_at_temporary_names_are_not_followed(tmp_path):
    """Symbolic links planted at the temporary names the old lock wrote
    through (``.run.tmp<PID>.lock``, ``run.lock.stale-<PID>``) to a victim
    file: the lock is taken and released and the victim is byte-identical;
    with a stale lock to take over, too."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious data\n")
    out = tmp_path / "run"
    out.mkdir()
    pid = os.getpid()
    planted = [out / f".run.tmp{pid}.lock", out / f"{LOCK}.stale-{pid}"]
    for link in planted:
        link.symlink_to(victim)
    lock = RunLock(out)
    for stale in (False, True):
        if stale:
            (out / LOCK).write_text(stale_record())
        lock.take()
        assert our_record(out / LOCK) and not (out / LOCK).is_symlink()
        lock.release()
        assert not (out / LOCK).exists()
        assert victim.read_bytes() == b"precious data\n"
        assert all(os.readlink(link) == str(victim) for link in planted)


def test_a_dangling_symlink_lock_is_refused_by_check_in_one_line(tmp_path):
    """A dangling symbolic link at ``run.lock`` (what the command line's
    Keras-free check() reads): one line naming the path and saying it is a
    symbolic link, from check() and take() alike; nothing is created at the
    link's target."""
    target = tmp_path / "nowhere" / "lock"
    (tmp_path / LOCK).symlink_to(target)
    lock = RunLock(tmp_path)
    for call in (lock.check, lock.take):
        with pytest.raises(ValueError) as refused:
            call()
        text = one_line(refused, str(tmp_path / LOCK), "is a symbolic link")
        assert "changing under us" not in text
    (tmp_path / "nowhere").mkdir()
    with pytest.raises(ValueError, match="symbolic link"):
        lock.take()
    assert not target.exists() and (tmp_path / LOCK).is_symlink()


@pytest.mark.integration
def test_the_command_line_refuses_a_symlink_lock_before_keras(tmp_path):
    """``train --out`` a folder whose ``run.lock`` is a dangling link: exit
    2, one line, before Keras or TensorFlow is imported (they cannot be)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK).symlink_to(tmp_path / "gone")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['keras'] = None; "
         "sys.modules['tensorflow'] = None; from keras_gresnet.cli import main; "
         "sys.exit(main(sys.argv[1:]))", "train", "gresnet_mlp", "--depth", "2", "--out",
         str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and f"{out / LOCK} is a symbolic link" in lines[0], lines


# ------------------------------------------------------ holders, live and dead


@pytest.mark.integration
def test_a_live_holder_refuses_and_a_sigkilled_ones_lock_is_taken_over(tmp_path, holder):
    """Another process holding the lock: take() and check() refuse in one
    line naming its pid, the lock file untouched; once it is SIGKILLed (no
    release, its record left behind) the lock is taken over with our record,
    and release removes the file."""
    process = holder()
    held = (tmp_path / LOCK).read_bytes()
    assert json.loads(held)["pid"] == process.pid
    lock = RunLock(tmp_path)
    for call in (lock.take, lock.check):
        with pytest.raises(ValueError) as refused:
            call()
        one_line(refused, f"is held by process {process.pid}")
    assert (tmp_path / LOCK).read_bytes() == held and not lock.held
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (tmp_path / LOCK).read_bytes() == held  # left behind by the killed holder
    lock.check()
    lock.take()
    assert lock.held and our_record(tmp_path / LOCK)
    lock.release()
    assert not lock.held and not (tmp_path / LOCK).exists()


@pytest.mark.integration
def test_the_flock_refuses_even_when_the_record_says_the_holder_is_gone(tmp_path, holder):
    """The kernel's lock, not the record, decides: a holder whose record was
    replaced by a dead pid's (as if the pid had gone) still refuses a taker,
    and its record is not overwritten."""
    holder()
    (tmp_path / LOCK).write_text(stale_record())  # same file: the holder's flock stays
    planted = (tmp_path / LOCK).read_bytes()
    for call in (RunLock(tmp_path).take, RunLock(tmp_path).check):
        with pytest.raises(ValueError, match="still has .* open") as refused:
            call()
        one_line(refused)
    assert (tmp_path / LOCK).read_bytes() == planted


def test_a_second_lock_in_the_same_process_is_refused(tmp_path):
    """The flock belongs to one open file: a second RunLock of the folder in
    the same process is refused; taking twice with one is a no-op."""
    first = RunLock(tmp_path)
    first.take()
    first.take()
    first.check()
    with pytest.raises(ValueError, match=f"is held by process {os.getpid()}"):
        RunLock(tmp_path).take()
    first.release()
    assert not (tmp_path / LOCK).exists()
    first.release()  # again: nothing


@pytest.mark.parametrize("content", [
    b"\0" * 10, b"hello", b"[1, 2]", b'{"pid": "12"}', b"{" + b" " * 5000 + b"}",
    b'{"pid": 1, "host": "elsewhere", "since": "then"}'])
def test_a_lock_file_with_foreign_content_is_refused_and_left_byte_identical(tmp_path,
                                                                             content):
    path = tmp_path / LOCK
    path.write_bytes(content)
    lock = RunLock(tmp_path)
    for call in (lock.take, lock.check):
        with pytest.raises(ValueError) as refused:
            call()
        one_line(refused)
    assert path.read_bytes() == content and not lock.held


def test_a_hard_linked_lock_is_not_written_through(tmp_path):
    """``run.lock`` hard-linked to another file that holds a stale record
    (which would be taken over) is refused; neither name changes."""
    victim = tmp_path / "victim"
    victim.write_text(stale_record())
    before = victim.read_bytes()
    out = tmp_path / "run"
    out.mkdir()
    os.link(victim, out / LOCK)
    for call in (RunLock(out).take, RunLock(out).check):
        with pytest.raises(ValueError, match="2 hard links") as refused:
            call()
        one_line(refused)
    assert victim.read_bytes() == before == (out / LOCK).read_bytes()


def test_an_empty_lock_a_killed_creators_is_taken_over(tmp_path):
    (tmp_path / LOCK).write_bytes(b"")
    lock = RunLock(tmp_path)
    lock.check()
    lock.take()
    assert our_record(tmp_path / LOCK)
    lock.release()
    assert not (tmp_path / LOCK).exists()


def test_release_leaves_a_file_that_replaced_ours(tmp_path):
    """Someone removes our lock and puts a file of theirs there: release
    closes ours and leaves theirs."""
    lock = RunLock(tmp_path)
    lock.take()
    (tmp_path / LOCK).unlink()
    (tmp_path / LOCK).write_bytes(b"theirs")
    lock.release()
    assert (tmp_path / LOCK).read_bytes() == b"theirs" and not lock.held


def test_the_fallback_without_fcntl(tmp_path, monkeypatch):
    """Where there is no fcntl (Windows) the link-based lock still takes a
    stale lock over, refuses a live one and a symbolic link, and writes
    nothing through a link planted at a temporary name."""
    monkeypatch.setattr(runlock, "fcntl", None)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious data\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / f".run.tmp{os.getpid()}.lock").symlink_to(victim)
    lock = RunLock(out)
    (out / LOCK).write_text(stale_record())
    lock.take()
    assert our_record(out / LOCK)
    with pytest.raises(ValueError, match=f"is held by process {os.getpid()}"):
        RunLock(out).take()
    lock.release()
    assert not (out / LOCK).exists()
    (out / LOCK).symlink_to(victim)
    with pytest.raises(ValueError, match="is a symbolic link"):
        lock.take()
    assert victim.read_bytes() == b"precious data\n"


# ------------------------------------------------------ one trainer a folder


def test_a_run_lock_refuses_a_live_holder_and_takes_over_a_dead_ones(tmp_path):
    """``run.lock``: a second taker is refused while the holder lives (one
    line naming its pid), a lock whose process is gone is taken over, one
    from another host is never taken, and release removes only our own."""
    import socket

    from keras_gresnet.runlock import RunLock

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        host = socket.gethostname()
        lock = RunLock(tmp_path)
        for pid, who in ((live.pid, host), (dead.pid, host), (dead.pid, "elsewhere")):
            (tmp_path / "run.lock").write_text(json.dumps(
                dict(pid=pid, host=who, start=None, since="then")))
            if pid == dead.pid and who == host:  # stale: taken over
                lock.check()
                lock.take()
                assert json.loads((tmp_path / "run.lock").read_text())["pid"] == os.getpid()
                lock.release()
                assert not (tmp_path / "run.lock").exists()
                continue
            with pytest.raises(ValueError, match=f"is held by process {pid}") as refused:
                lock.take()
            assert "\n" not in str(refused.value) and ("elsewhere" in str(refused.value)) == (
                who == "elsewhere")
            with pytest.raises(ValueError, match=f"is held by process {pid}"):
                lock.check()
        # a lock file this program did not write is not taken over either
        (tmp_path / "run.lock").write_bytes(b"\0" * 10)
        with pytest.raises(ValueError, match="not a lock this program wrote"):
            lock.take()
        assert (tmp_path / "run.lock").read_bytes() == b"\0" * 10
        # a pid reused by a new process (another start time) is a stale lock
        (tmp_path / "run.lock").write_text(json.dumps(
            dict(pid=live.pid, host=socket.gethostname(), start=1, since="then")))
        lock.take()
        lock.release()
        assert not (tmp_path / "run.lock").exists()
    finally:
        live.kill()
        live.wait()


@pytest.mark.integration
def test_two_trainers_on_one_folder_the_second_is_refused(tmp_path):
    """Two ``train`` processes on one ``--out``, the second started once the
    first holds the folder (paused there with SIGSTOP, so that it is still
    training whatever the machine's speed): the first finishes with its own
    results; the second (and an ``--overwrite``) is refused in one line,
    exit 2, without touching the folder, and before Keras is imported (it
    cannot import Keras or TensorFlow here)."""
    import signal
    import time

    out = tmp_path / "run"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth", "2",
               *TINY[:-2], "--epochs", "4", "--out", str(out)]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    deadline = time.monotonic() + 300
    # the lock written whole (its pid in it): paused while writing, the first
    # would be refused as "writing its lock now", another true answer
    def written():
        try:
            return json.loads((out / "run.lock").read_text()).get("pid") == first.pid
        except (FileNotFoundError, ValueError):
            return False

    while not written():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)
    held = tree(out)
    without_keras = [sys.executable, "-c", "import sys; sys.modules['keras'] = None; "
                     "sys.modules['tensorflow'] = None; from keras_gresnet.cli import main; "
                     "sys.exit(main(sys.argv[1:]))", *command[3:]]
    for extra in ([], ["--overwrite"]):
        second = subprocess.run(without_keras + extra, env=env, capture_output=True, text=True,
                                timeout=300)
        assert first.poll() is None, "the first run ended before the second was refused"
        assert second.returncode == 2, second.stderr[-2000:]
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"is held by process {first.pid}" in lines[0], lines
        assert tree(out) == held
    first.send_signal(signal.SIGCONT)
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr[-2000:]
    assert not (out / "run.lock").exists()
    results = json.loads((out / "results.json").read_text())
    assert training.read_history(out)["epoch"] == [1, 2, 3, 4]
    assert f"{results['test_error_percent']:.2f}%" in stdout
