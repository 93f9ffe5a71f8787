"""A run folder and the files around it: nothing of the user's is deleted
or written over (not through a linked subfolder either), a folder that is not
a run is refused and kept, a killed run's temporaries are cleaned up and
nobody else's; a run folder's files that cannot be read (config.json,
history.csv, a checkpoint) are one line and exit 2, and the run resumes once
they are fixed; the history records the rate each epoch trained at; four
runs at once each end finished or resumable and touch nothing else."""

import json
import os
import subprocess
import sys

import pytest

from helpers import one_error_line, tiny, train, tree
from keras_gresnet import cli, files, training


# ---------------------------------------------------------- the user's files


def test_a_folder_that_is_not_a_run_is_refused_and_kept(tmp_path, capsys):
    out = tmp_path / "thesis"
    (out / "backup").mkdir(parents=True)
    (out / "backup" / "thesis.tex").write_text("three years of work")
    before = tree(out)
    for extra in ((), ("--overwrite",)):
        assert train(out, *extra) == 2
        one_error_line(capsys, "no config.json", "backup")
        assert tree(out) == before


@pytest.mark.integration
def test_overwrite_refuses_foreign_files_and_names_them(finished, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    for name, content in tree(finished).items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(content)
    (out / "notes.txt").write_text("mine")
    before = tree(out)
    assert train(out, "--overwrite") == 2
    one_error_line(capsys, "notes.txt", "--overwrite")
    assert tree(out) == before


@pytest.mark.integration
def test_overwrite_replaces_only_the_run_and_a_foreign_config_is_refused(finished, tmp_path,
                                                                          capsys):
    out = tmp_path / "run"
    out.mkdir()
    for name, content in tree(finished).items():
        (out / name).write_bytes(content)
    (out / "backup").mkdir()
    (out / "backup" / "epoch-00001.weights.h5").write_bytes(b"an old checkpoint of ours")
    old_results = (out / "results.json").read_text()
    assert train(out, "--overwrite", "--seed", "1") == 0
    assert json.loads((out / "config.json").read_text())["seed"] == 1
    assert (out / "results.json").read_text() != old_results
    assert not (out / "backup").exists()
    capsys.readouterr()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"learning_rate": 0.1}))
    (foreign / "model.keras").write_bytes(b"somebody else's model")
    before = tree(foreign)
    assert train(foreign, "--overwrite") == 2
    one_error_line(capsys, "config.json", "not a keras-gresnet run config")
    assert tree(foreign) == before


@pytest.mark.integration
def test_a_finished_run_keeps_user_files_in_its_backup_folder(tmp_path):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    # An unfinished run of the same config, with a file of the user's in backup/.
    (out / "results.json").unlink()
    (out / "backup").mkdir()
    (out / "backup" / "keep.txt").write_text("mine")
    assert train(out) == 0
    assert (out / "backup" / "keep.txt").read_text() == "mine"
    assert list((out / "backup").iterdir()) == [out / "backup" / "keep.txt"]


@pytest.mark.integration
def test_stale_temporaries_of_a_killed_run_are_removed_live_ones_kept(tmp_path):
    out = tmp_path / "run"
    assert train(out) == 0
    (out / "results.json").unlink()  # as if killed during the final save
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = out / f".model.tmp{dead}.keras"
    live = out / f".model.tmp{os.getppid()}.keras"
    mine = out / ".model.tmpnotes.keras"
    also_mine = out / f".notes.tmp{dead}.txt"  # a temporary's shape, but not of a run file
    for path in (stale, live, mine, also_mine):
        path.write_bytes(b"partial")
    assert train(out) == 0
    assert not stale.exists() and live.exists() and mine.exists() and also_mine.exists()
    assert files.remove_stale_temporaries(out, owned=lambda name: name == "model.keras") == []


@pytest.mark.integration
@pytest.mark.parametrize("sub", ["backup", "tensorboard", "tensorboard/train"])
def test_nothing_is_written_or_deleted_through_a_linked_subfolder(finished, tmp_path, capsys,
                                                                  sub):
    out = tmp_path / "run"
    out.mkdir()
    for name in ("config.json", "history.csv", "gates.csv", "results.json"):
        (out / name).write_bytes((finished / name).read_bytes())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "epoch-00007.weights.h5").write_bytes(b"theirs")
    (elsewhere / ".epoch-00003.tmp1.weights.h5").write_bytes(b"theirs too")
    (elsewhere / "events.out.tfevents.1.host").write_bytes(b"their logs")
    link = out / sub
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    before = tree(elsewhere)
    for extra in (("--overwrite",), ()):
        assert train(out, *extra) == 2
        one_error_line(capsys, "symbolic link", sub.split("/")[-1])
    assert tree(elsewhere) == before


def test_out_that_is_a_file_or_under_a_file(tmp_path, capsys):
    file = tmp_path / "a_file"
    file.write_text("x")
    assert train(file) == 2
    one_error_line(capsys, "is a file")
    assert train(file / "run") == 2
    one_error_line(capsys, "is a file")
    assert file.read_text() == "x"


# ------------------------------------------- a run folder's files, read back


@pytest.mark.parametrize("content, words", [
    ("{not json", ["config.json", "JSON"]),
    ("[1, 2]", ["config.json", "object"]),
])
def test_corrupt_run_config_is_one_line(finished, tmp_path, capsys, content, words):
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.keras").write_bytes((finished / "model.keras").read_bytes())
    (run / "config.json").write_text(content)
    for command in (["evaluate", str(run)], ["gates", str(run)], ["prune", str(run),
                                                                   "--count", "1"]):
        assert cli.main(command) == 2
        one_error_line(capsys, *words)
    (run / "config.json").unlink()
    assert cli.main(["evaluate", str(run)]) == 2
    one_error_line(capsys, "no config.json")


@pytest.mark.integration
def test_corrupt_history_names_the_file_and_the_run_resumes_once_fixed(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out) == 0
    (out / "results.json").unlink()
    good = (out / "history.csv").read_text()
    (out / "history.csv").write_text("epoch,loss\nzero,abc\n")
    before = tree(out)
    assert train(out) == 2
    one_error_line(capsys, "history.csv")
    assert tree(out) == before
    header, first = good.splitlines()[:2]
    loss = header.split(",").index("loss")
    assert first.startswith("1,")  # epochs count from 1, as the console's
    for rows, words in (([first, first], "epoch 1 after 1"),
                        ([first.replace("1,", "-5,", 1)], "epoch -5"),
                        ([",".join("inf" if i == loss else v for i, v in
                                   enumerate(first.split(",")))], "loss is infinite")):
        (out / "history.csv").write_text("\n".join([header, *rows]) + "\n")
        before = tree(out)
        assert train(out) == 2
        one_error_line(capsys, "history.csv", words)
        assert tree(out) == before
    (out / "history.csv").write_text(good)
    assert train(out) == 0


@pytest.mark.parametrize("key,value", [("data_dir", 12345), ("seed", "zz"),
                                       ("max_test_examples", "abc"), ("model_kwargs", [1])])
def test_a_config_with_values_of_the_wrong_type_is_one_line(finished, tmp_path, capsys,
                                                           key, value):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    config = json.loads((run / "config.json").read_text())
    config[key] = value
    (run / "config.json").write_text(json.dumps(config))
    assert cli.main(["evaluate", str(run)]) == 2
    one_error_line(capsys, "config.json", key)
    (run / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert cli.main(["evaluate", str(run)]) == 2
    one_error_line(capsys, "config.json")
    config = json.loads((finished / "config.json").read_text())
    config["data"]["preprocessing"]["mean"] = [float("inf")]  # json writes Infinity
    (run / "config.json").write_text(json.dumps(config))
    assert cli.main(["evaluate", str(run)]) == 2
    one_error_line(capsys, "config.json", "Infinity")


def test_a_checkpoint_counting_more_epochs_than_the_run_is_one_line(tmp_path):
    from types import SimpleNamespace

    from keras_gresnet.training import runner

    recipe = training.get_recipe("gr_mnist", epochs=3)
    pipe = SimpleNamespace(steps_per_epoch=10, train_epochs=lambda start, stop: (start, stop))
    assert runner._epochs(recipe, pipe, 2, tmp_path / "backup") == (3, (2, 3))
    with pytest.raises(ValueError, match=r"backup: its newest checkpoint counts 99 finished "
                                         r"epochs, more than the run's 3"):
        runner._epochs(recipe, pipe, 99, tmp_path / "backup")


# ---------------------------------------------------------- what is recorded


@pytest.mark.integration
def test_history_records_the_rate_each_epoch_trained_at(tmp_path):
    out = tmp_path / "run"
    assert train(out, "--epochs", "3", "--lr-milestones", "(1,)",
                 "--lr-milestone-unit", "epoch") == 0
    lines = (out / "history.csv").read_text().splitlines()
    column = lines[0].split(",").index("lr")
    rates = [float(line.split(",")[column]) for line in lines[1:]]
    assert rates == pytest.approx([0.002, 0.0002, 0.0002])


def test_evaluate_uses_the_runs_own_test_subset(finished, capsys):
    assert cli.main(["evaluate", str(finished)]) == 0
    result = json.loads(capsys.readouterr().out)
    recorded = json.loads((finished / "results.json").read_text())
    assert result["examples"] == 200
    # the same count: one of the 200 images is 0.5 points, far above 1e-6
    assert result["test_error_percent"] == pytest.approx(recorded["test_error_percent"],
                                                         abs=1e-6)
    assert cli.main(["evaluate", str(finished), "--dataset", "mnist"]) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 10000  # another dataset: all


# ---------------------------------------------------------------- under load


@pytest.mark.integration
def test_four_runs_under_load_end_finished_or_resumable_and_touch_nothing_else(tmp_path):
    """Four ``train`` processes at once, sharing one ``KERAS_HOME``: one runs
    through, one is SIGKILLed mid-run and restarted, one meets a disk that
    fills (a file-size limit: EFBIG, the ENOSPC path), and one runs through
    with another seed. Every run ends finished (after the same command
    again where it stopped), with each epoch once in its history, and no run
    touches a file of another: the finished runs' files are unchanged by the
    others' kills, failures and restarts."""
    import resource
    import signal
    import time

    home = tmp_path / "keras_home"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_HOME": str(home)}
    epochs = ["--epochs", "3"]

    def command(name, *extra):
        return [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth",
                "2", *tiny(*epochs, *extra), *epochs, *extra, "--out", str(tmp_path / name)]

    def small_files():  # in the child: files over 200 KB cannot be written
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    def start(name, *extra, limit=None):
        return subprocess.Popen(command(name, *extra), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=limit)

    # the killed run is longer (16 steps an epoch), so that the kill lands mid-run
    longer = ["--max-train-examples", "2048", "--batch-size", "128"]
    procs = dict(plain=start("plain"), killed=start("killed", *longer),
                 full=start("full", limit=small_files), seeded=start("seeded", "--seed", "1"))
    backup = tmp_path / "killed" / "backup"
    deadline = time.monotonic() + 600
    while not any(backup.glob("epoch-*.weights.h5")) and procs["killed"].poll() is None:
        assert time.monotonic() < deadline, "no epoch finished in 600 s"
        time.sleep(0.05)
    procs["killed"].send_signal(signal.SIGKILL)  # mid-run: after an epoch, before the end
    codes = {name: proc.wait(timeout=600) for name, proc in procs.items()}
    errors = {name: proc.stderr.read() for name, proc in procs.items()}
    assert codes["plain"] == 0 and codes["seeded"] == 0, errors
    assert codes["killed"] == -signal.SIGKILL, errors["killed"][-2000:]
    assert codes["full"] == 2 and "File too large" in errors["full"].splitlines()[-1]
    assert "Traceback" not in errors["full"]
    finished = {name: tree(tmp_path / name) for name in ("plain", "seeded")}
    for name, extra in (("killed", longer), ("full", [])):  # the same command resumes
        again = subprocess.run(command(name, *extra), env=env, capture_output=True, text=True,
                               timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
    for name in ("plain", "killed", "full", "seeded"):
        out = tmp_path / name
        assert (out / "results.json").exists() and not (out / "backup").exists(), name
        assert training.read_history(out)["epoch"] == [1, 2, 3], name
        assert sorted(p.name for p in out.iterdir()) == sorted(
            ["config.json", "history.csv", "gates.csv", "model.keras", "history.png",
             "gates.png", "results.json"]), name
    assert {name: tree(tmp_path / name) for name in finished} == finished
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "full", "keras_home", "killed", "plain", "seeded"]
