"""The command line's exit codes, end to end (a real ``keras-gresnet``
process): 0 done, 2 bad input (one line, nothing written), 3 the loss
diverged, 130 interrupted (Ctrl-C). Exit 4 (a worker lost) is
``test_distributed.py``'s ``test_a_killed_worker_is_survived_by_resuming``."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

TINY = ["--dataset", "fashion_mnist", "--max-train-examples", "256",
        "--max-test-examples", "128", "--epochs", "2"]


def keras_gresnet(*args, cwd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "keras_gresnet.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path):
    result = keras_gresnet("train", "gresnet_mlp", "--depth", "2", *TINY,
                           "--strategy", "tpu", "--out", "run", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("keras-gresnet train: error: ") and "strategy='tpu'" in lines[-1]
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_diverged_run_exits_3_and_publishes_nothing(tmp_path):
    result = keras_gresnet("train", "plain_mlp", "--depth", "2", *TINY,
                           "--optimizer-name", "sgd", "--optimizer-kwargs", "{}",
                           "--learning-rate", "1e12", "--out", "run", cwd=tmp_path)
    assert result.returncode == 3, result.stderr[-3000:]
    assert "loss became" in result.stderr and "Traceback" not in result.stderr
    run = tmp_path / "run"
    assert (run / "config.json").exists()
    assert not (run / "model.keras").exists() and not (run / "results.json").exists()


def test_a_finished_run_exits_0(tmp_path):
    result = keras_gresnet("train", "gresnet_mlp", "--depth", "2", *TINY, "--out", "run",
                           cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "results.json").exists()


@pytest.mark.integration
def test_ctrl_c_is_one_line_saying_how_to_resume(tmp_path):
    import signal
    import time

    out = tmp_path / "run"
    command = [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth",
               "2", "--dataset", "fashion_mnist", "--max-train-examples", "2048",
               "--max-test-examples", "200", "--epochs", "50", "--out", str(out)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}

    def foreground():
        # A terminal's Ctrl-C: SIGINT handled and unblocked, as a shell in the
        # foreground leaves it (a test run started in the background would
        # pass it on ignored; a harness may pass it on blocked).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=foreground)
    deadline = time.monotonic() + 300
    while not list((out / "backup").glob("epoch-*.weights.h5")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out_text, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (err, out_text[-2000:])
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "keras-gresnet train: interrupted (the same command resumes the run)")
