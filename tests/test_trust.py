"""Install and trust (the user's files, bad input, the command line's
promises): nothing of the user's is deleted, bad input is one line and exit
2 before the first write, bugs keep their traceback, the history records
the rate each epoch trained at, and listing needs no TensorFlow."""

import dataclasses
import errno
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from keras_gresnet import _catalog, cli, data, files, training, weights, zoo

TINY = ["--dataset", "fashion_mnist", "--max-train-examples", "256",
        "--max-test-examples", "200", "--epochs", "1"]


def tiny(*extra):
    """TINY's options less those ``extra`` gives again (an option given twice
    with two values is refused)."""
    given = {word.split("=")[0] for word in extra if word.startswith("--")}
    return [word for option, value in zip(TINY[::2], TINY[1::2]) if option not in given
            for word in (option, value)]


def train(out, *extra, model=("gresnet_mlp", "--depth", "2")):
    return cli.main(["train", *model, *tiny(*extra), "--out", str(out), *extra])


# The line a run prints once its checks passed, before its first epoch (its
# strategy, replicas and devices): an error found while training follows it.
STARTED = re.compile(r"^\S+ on \S+: strategy \S+, \d+ replicas?\b")


def one_error_line(capsys, *words):
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not STARTED.match(line)]
    assert len(err) == 1, err
    for word in words:
        assert word in err[0], err[0]
    return err[0]


def tree(folder):
    """Every file under ``folder`` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run folder (not to be modified by the tests)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert train(out) == 0
    return out


# ---------------------------------------------------------------- user files


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


# ----------------------------------------------------------------- bad input


@pytest.mark.integration
def test_bad_numbers_are_refused_before_the_first_write(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--epochs", "99999999999999999999999") == 2
    one_error_line(capsys, "epochs")
    assert not out.exists()
    for value in ("1e400", "-1e999", "nan", "inf", "(0.1, 1e400)"):
        assert train(out, "--lr", value) == 2
        one_error_line(capsys, "finite")
        assert not out.exists()
    assert train(out) == 0  # the corrected command runs


@pytest.mark.integration
@pytest.mark.parametrize("extra,words", [
    (("--optimizer-kwargs", '{"beta_1": "abc"}'), ("beta_1", "a number >= 0 and < 1")),
    (("--optimizer-kwargs", '{"beta_1": 5}'), ("beta_1", "< 1")),
    (("--optimizer-kwargs", "[1,2]"), ("optimizer_kwargs", "a mapping")),
    (("--optimizer-kwargs", "5"), ("optimizer_kwargs", "a mapping")),
    (("--optimizer-kwargs", '{"name": 5}'), ("'name'", "a non-empty string")),
    (("--recipe", "preact_cifar", "--optimizer-kwargs", '{"momentum": "abc"}'),
     ("momentum",)),
    (("--recipe", "preact_cifar", "--optimizer-kwargs", '{"momentum": 0.9, "nesterov": 3}'),
     ("nesterov", "true or false")),
    (("--lr-milestone-unit", "epoch", "--lr-milestones", "(1e300,)"), ("lr_milestones",)),
    (("--lr-milestones", "abc"), ("lr_milestones", "a sequence")),
])
def test_bad_recipe_values_write_nothing_and_the_corrected_command_runs(tmp_path, capsys,
                                                                       extra, words):
    out = tmp_path / "run"
    assert train(out, *extra) == 2
    one_error_line(capsys, *words)
    assert not out.exists()


@pytest.mark.integration
def test_json_spellings_and_a_bare_milestone_are_understood(tmp_path):
    assert cli._literal('{"nesterov": true, "momentum": 0.9}') == {"nesterov": True,
                                                                  "momentum": 0.9}
    with pytest.raises(ValueError, match="finite"):
        cli._literal('{"momentum": NaN}')
    recipe = training.get_recipe("preact_cifar", lr_milestones=0.5)
    assert recipe.lr_milestones == (0.5,)
    out = tmp_path / "run"
    assert train(out, "--recipe", "preact_cifar", "--optimizer-kwargs",
                 '{"momentum": 0.9, "nesterov": true}', "--lr-milestones", "0.5") == 0
    recorded = json.loads((out / "config.json").read_text())["recipe"]
    assert recorded["optimizer_kwargs"] == {"momentum": 0.9, "nesterov": True}
    assert recorded["lr_milestones"] == [0.5]


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


def test_sizes_that_cannot_be_built_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, model=("gresnet_mlp", "--depth", "100000000")) == 2
    one_error_line(capsys, "50,000,000 blocks", "at most 5,000")
    assert train(out, model=("wide_gresnet", "--n", "4", "--widen-factor", "1000")) == 2
    one_error_line(capsys, "parameters")
    assert not out.exists()
    with pytest.raises(ValueError, match="parameters"):
        zoo.gresnet_mlp(depth=2, units=100_000)
    # the head and the input count too, before anything is built
    with pytest.raises(ValueError, match="classes=100,000,000 give about 5,100,000,000"):
        zoo.gresnet_mlp(depth=2, classes=100_000_000)
    with pytest.raises(ValueError, match="classes=1,000,000,000 give"):
        zoo.get_model("gresnet_cifar", n=1, classes=10**9)
    for builder, shape in (("gresnet_mlp", (100_000, 100_000)),
                           ("gresnet_cifar", (100_000, 100_000, 3))):
        with pytest.raises(ValueError, match="values an example; this package builds inputs"):
            zoo.get_model(builder, **({"depth": 2} if builder == "gresnet_mlp" else {"n": 1}),
                          input_shape=shape)


def test_out_that_is_a_file_or_under_a_file(tmp_path, capsys):
    file = tmp_path / "a_file"
    file.write_text("x")
    assert train(file) == 2
    one_error_line(capsys, "is a file")
    assert train(file / "run") == 2
    one_error_line(capsys, "is a file")
    assert file.read_text() == "x"


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


def test_keras_files_keras_cannot_read_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.keras"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("config.json", json.dumps({"class_name": 3, "config": []}))
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
    junk = tmp_path / "junk.keras"
    junk.write_bytes(b"not a zip")
    deep = tmp_path / "deep.keras"  # a config nested 100,000 deep
    with zipfile.ZipFile(deep, "w") as archive:
        archive.writestr("config.json", "[" * 100_000 + "]" * 100_000)
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
    device = tmp_path / "device.keras"
    device.symlink_to("/dev/zero")
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(bad.read_bytes()[:40])
    for path in (bad, junk, deep, device, truncated):
        assert cli.main(["evaluate", str(path), "--dataset", "fashion_mnist"]) == 2
        one_error_line(capsys, path.name)
        assert cli.main(["export", str(path), "--out", str(tmp_path / "out.onnx")]) == 2
        one_error_line(capsys, path.name)
        assert not (tmp_path / "out.onnx").exists()


@pytest.mark.integration
def test_disk_full_is_one_line_and_the_run_resumes(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"

    def full(path, obj):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(training.runs, "write_json", full)
    assert train(out) == 2
    one_error_line(capsys, "No space left on device", "config.json")
    monkeypatch.undo()
    assert train(out) == 0 and (out / "results.json").exists()


@pytest.mark.integration
def test_a_disk_too_full_for_the_epoch_backup_is_one_line_before_hdf5(tmp_path, capsys,
                                                                      monkeypatch):
    """h5py crashes the process (exit 139) when the disk fills in the middle of
    a weights file: the backup is refused before HDF5 opens it, in one line,
    and the run resumes once there is room."""
    out = tmp_path / "run"
    real = training.runs.shutil.disk_usage

    def usage(path):
        found = real(path)
        return found._replace(free=1000) if Path(path).name == "backup" else found

    monkeypatch.setattr(training.runs.shutil, "disk_usage", usage)
    assert train(out) == 2
    one_error_line(capsys, "epoch-00001.weights.h5", "No space left on device", "bytes")
    assert sorted(p.name for p in (out / "backup").iterdir()) == []  # nothing half-written
    monkeypatch.undo()
    assert train(out) == 0 and (out / "results.json").exists()


@pytest.mark.integration
def test_a_disk_that_fills_during_the_backup_write_is_one_line_and_resumes(tmp_path):
    """The space check cannot see another process filling the disk between
    the check and the write: a write that fails half-way (a file-size limit
    here, EFBIG; ENOSPC is the same path) is one line naming the file, exit
    2, no half-written backup and no crash (h5py writing to a failing disk
    segfaulted: the backup is made in memory and written by Python), and the
    same command resumes to finished."""
    import resource

    out = tmp_path / "run"
    command = [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth",
               "2", *TINY, "--out", str(out)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}

    def small_files():  # in the child: files over 200 KB cannot be written
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    limited = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600,
                             preexec_fn=small_files)
    assert limited.returncode == 2, limited.stderr[-3000:]
    lines = [line for line in limited.stderr.splitlines() if line.strip()]
    assert lines[-1] == (f"keras-gresnet train: error: cannot use "
                         f"{out / 'backup' / 'epoch-00001.weights.h5'}: File too large")
    assert "Traceback" not in limited.stderr and "ref count" not in limited.stderr
    assert list((out / "backup").iterdir()) == []  # nothing half-written
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "results.json").exists()


@pytest.mark.parametrize("args, words", [
    (["--count", "-1"], ["--count -1"]),
    (["--count", "0"], ["--count 0"]),
    (["--blocks", "block1,block1"], ["block1", "more than once"]),
    (["--blocks", "block1,0"], ["more than once"]),
    (["--count", "1", "--out", "x.h5"], [".keras"]),
])
def test_prune_refuses_bad_counts_and_repeated_blocks(finished, capsys, args, words):
    before = tree(finished)
    assert cli.main(["prune", str(finished), *args]) == 2
    one_error_line(capsys, *words)
    assert tree(finished) == before


def test_prune_never_writes_over_a_users_file(finished, tmp_path, capsys):
    mine = tmp_path / "thesis.keras"
    mine.write_bytes(b"my model")
    assert cli.main(["prune", str(finished), "--count", "1", "--out", str(mine)]) == 2
    one_error_line(capsys, "thesis.keras", "exists")
    assert mine.read_bytes() == b"my model"


def test_prune_into_a_missing_folder_or_a_too_long_name_is_one_line(finished, tmp_path, capsys):
    assert cli.main(["prune", str(finished), "--count", "1",
                     "--out", str(tmp_path / "nodir" / "x.keras")]) == 2
    one_error_line(capsys, "nodir")
    assert not (tmp_path / "nodir").exists()
    assert train(tmp_path / ("r" * 300)) == 2
    one_error_line(capsys, "File name too long")


def test_empty_names_are_refused_not_taken_for_the_default(tmp_path, capsys):
    for extra, word in ((("--dataset", ""), "dataset"), (("--recipe", ""), "recipe")):
        assert train(tmp_path / "run", *extra) == 2
        one_error_line(capsys, word, "''")
        assert not (tmp_path / "run").exists()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert cli.main(["train", "gresnet_mlp", "--depth", "2", *TINY, "--out", ""]) == 2
        one_error_line(capsys, "out=''")
        assert list(tmp_path.iterdir()) == []  # no runs/ default folder either
    finally:
        os.chdir(cwd)


def test_non_finite_learning_rates_are_refused():
    from keras_gresnet import finetune

    for bad in (float("inf"), float("nan"), -1.0, 0.0):
        with pytest.raises(ValueError, match="head_lr must be a finite number > 0"):
            finetune.finetune("gresnet_mlp2_fashion_mnist", (np.zeros((4, 28, 28, 1)),
                                                            np.zeros(4, int)),
                              classes=10, head_lr=bad)


@pytest.mark.integration
def test_ctrl_c_is_one_line_saying_how_to_resume(tmp_path):
    import signal
    import time

    out = tmp_path / "run"
    command = [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_mlp", "--depth",
               "2", "--dataset", "fashion_mnist", "--max-train-examples", "2048",
               "--max-test-examples", "200", "--epochs", "50", "--out", str(out)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    # A terminal's Ctrl-C: SIGINT handled as a shell in the foreground leaves
    # it (a test run started in the background would pass it on ignored).
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                      signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not list((out / "backup").glob("epoch-*.weights.h5")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "keras-gresnet train: interrupted (the same command resumes the run)")


def test_a_preset_cannot_name_other_weights(tmp_path):
    model = zoo.gresnet_mlp(depth=2)
    preset = zoo.save_preset(model, tmp_path / "preset", builder="gresnet_mlp",
                                 builder_kwargs={"depth": 2})
    config = json.loads((preset / "config.json").read_text())
    for value in (str(preset), "gresnet_mlp2_fashion_mnist", "/etc/passwd"):
        config["builder_kwargs"]["weights"] = value
        (preset / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=r"builder_kwargs may not set \['weights'\]"):
            zoo.from_preset(preset)


def test_an_error_inside_keras_keeps_its_traceback(monkeypatch):
    """Only this package's own checks are 'bad input'; a ValueError raised
    deep in Keras or TensorFlow is a bug and is not turned into exit 2."""
    import keras

    def broken(*args, **kwargs):
        keras.layers.Dense(-1)  # Keras' own check raises the ValueError

    monkeypatch.setattr(training, "train", broken)
    with pytest.raises(ValueError):
        train(Path("unused"))


# ------------------------------------------------------------- what is recorded


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


# ----------------------------------------------------------- the command line


def _write_catalog():
    spec = importlib.util.spec_from_file_location(
        "write_catalog", Path(__file__).parent.parent / "scripts" / "write_catalog.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_catalog_is_generated_from_the_registry_and_the_recipes():
    """``_catalog.py`` (what ``list`` and ``train --help`` show without Keras)
    and the tables of models in ``docs/models.md`` and ``README.md`` are
    exactly what ``scripts/write_catalog.py`` generates today."""
    expected = {name: (zoo.model_builder(name).__doc__ or "").strip().splitlines()[0]
                for name in zoo.list_models()}
    assert _catalog.MODELS == expected
    assert _catalog.RECIPES == tuple(training.RECIPES)
    fields = {f.name for f in dataclasses.fields(training.Recipe)} - {"name", "citation"}
    assert set(_catalog.RECIPE_FIELDS) == fields
    assert all(meaning.strip() for meaning in _catalog.RECIPE_FIELDS.values())
    for name in zoo.list_models():  # what train takes by default exists
        builder = zoo.model_builder(name)
        assert builder.default_recipe in training.RECIPES, name
        assert builder.default_dataset in (*data.DATASETS, "imagenet2012"), name
    writer = _write_catalog()
    assert Path(_catalog.__file__).read_text() == writer.catalog_text(), (
        "keras_gresnet/_catalog.py is out of date: run python scripts/write_catalog.py")
    # docs/models.md's table of models is generated too, one row per builder
    assert writer.DOCS.read_text() == writer.docs_text(), (
        "docs/models.md's table is out of date: run python scripts/write_catalog.py")
    rows = [line for line in writer.models_table().splitlines()[2:]]
    assert [row.split("`")[1] for row in rows] == zoo.list_models()
    # and the README's table of the papers' models: every builder with weights in
    # the registry has its row, and the row shows each published file's error
    assert writer.README.read_text() == writer.readme_text(), (
        "README.md's table of models is out of date: run python scripts/write_catalog.py")
    rows = {row.split("`")[1]: row
            for row in writer.models_table(paper_models_only=True).splitlines()[2:]}
    for entry in weights.list_weights():
        shown = (f"{entry['test_error_percent']:.2f}%" if entry["status"] == weights.PUBLISHED
                 else "not yet trained")
        assert shown in rows[entry["builder"]], (entry["name"], rows[entry["builder"]])
    assert "GR Table 3, n=5, 32 layers (CIFAR-10): 6.67%" in rows["gresnet_cifar"]


def test_train_help_lists_every_recipe_field_recipe_and_dataset(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = capsys.readouterr().out
    for name in _catalog.RECIPE_FIELDS:
        assert f"--{name.replace('_', '-')}" in text
    assert "--learning-rate / --lr" in text
    for name in (*training.RECIPES, *data.DATASETS):
        assert name in text


@pytest.mark.integration
def test_listing_imports_neither_keras_nor_tensorflow():
    code = ("import sys\nfrom keras_gresnet.cli import main\n"
            "assert main(['list']) == 0 and main(['weights', 'list']) == 0\n"
            "assert main(['list', '*cifar*']) == 0\n"
            "bad = sorted(m for m in ('keras', 'tensorflow', 'h5py') if m in sys.modules)\n"
            "assert not bad, bad\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "gresnet_cifar" in result.stdout and "gresnet_mlp20_fashion_mnist" in result.stdout


@pytest.mark.integration
def test_tensorflow_start_up_lines_stay_off_the_terminal(finished):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-m", "keras_gresnet.cli", "gates", str(finished)],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert "gates, mean g(k)" in result.stdout
    for noise in ("cudart_stub", "absl::InitializeLog", "cuInit", "oneDNN"):
        assert noise not in result.stderr, result.stderr


def test_evaluate_prints_standard_json_for_a_diverged_net(monkeypatch, capsys, tmp_path):
    """A diverged net's loss is NaN, which Python's json writes as a bare NaN
    that JSON parsers refuse: it is null in the output."""
    monkeypatch.setattr(training, "evaluate",
                        lambda *a, **k: {"test_loss": float("nan"), "test_accuracy": 0.1})
    assert cli.main(["evaluate", str(tmp_path)]) == 0

    def strict(name):
        raise ValueError(f"not standard JSON: {name}")

    printed = json.loads(capsys.readouterr().out, parse_constant=strict)
    assert printed == {"test_loss": None, "test_accuracy": 0.1}


# ------------------------------------------------------------------ under load


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


# ------------------------------------------------------------- one trainer a folder


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
    while not (out / "run.lock").exists():
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


# ------------------------------------------------------------ bounded reads, one line


def test_json_and_csv_files_are_read_bounded_and_regular_only(tmp_path):
    """A user's JSON or CSV (a run's config.json, history.csv, a preset's
    files) larger than the bound is refused before it is read; a named pipe
    is refused without being opened (it would block)."""
    from keras_gresnet import files

    big = tmp_path / "config.json"
    big.write_text('{"a": "' + "x" * 5000 + '"}')
    assert files.read_json(big)["a"] == "x" * 5000
    with pytest.raises(ValueError, match=r"config.json holds 5,009 bytes, more than the 1,000"):
        files.read_json(big, max_bytes=1000)
    with pytest.raises(ValueError, match="holds 5,009 bytes"):
        files.read_bounded(big, 1000)
    os.mkfifo(tmp_path / "history.csv")
    with pytest.raises(ValueError, match="history.csv is not a regular file"):
        training.read_history(tmp_path / "history.csv")
    with pytest.raises(ValueError, match="cannot read it"):
        files.read_json(tmp_path / "missing.json")


def test_broken_weights_and_model_files_are_one_line(tmp_path):
    """A preset whose model.weights.h5 is corrupt, a weights file whose
    variables declare far more bytes than it holds, and random bytes named
    .keras: one line each, naming the file."""
    import h5py

    zoo.save_preset(zoo.gresnet_mlp(depth=2), tmp_path / "preset")
    weights = tmp_path / "preset" / "model.weights.h5"
    intact = weights.read_bytes()
    weights.write_bytes(b"garbage" * 100)
    with pytest.raises(ValueError, match="model.weights.h5: not a readable Keras weights file") \
            as error:
        zoo.resolve(str(tmp_path / "preset"))
    assert "\n" not in str(error.value)
    weights.write_bytes(intact)
    with h5py.File(tmp_path / "bomb.weights.h5", "w") as f:  # 400 MB of zeros, compressed
        f.create_dataset("v", shape=(10**8,), dtype="float32", compression="gzip",
                         chunks=(10**6,))
    with pytest.raises(ValueError, match=r"declare 400,000,000 bytes from .* on disk"):
        from keras_gresnet.weights.loading import load_exact

        load_exact(zoo.gresnet_mlp(depth=2), tmp_path / "bomb.weights.h5")
    (tmp_path / "random.keras").write_bytes(os.urandom(4096))
    with pytest.raises(ValueError, match=r"random.keras: not a .keras model \(a .keras file is "
                                         r"a zip archive"):
        zoo.resolve(str(tmp_path / "random.keras"))


def test_a_checkpoint_counting_more_epochs_than_the_run_is_one_line(tmp_path):
    from types import SimpleNamespace

    from keras_gresnet.training import runner

    recipe = training.get_recipe("gr_mnist", epochs=3)
    pipe = SimpleNamespace(steps_per_epoch=10, train_epochs=lambda start, stop: (start, stop))
    assert runner._epochs(recipe, pipe, 2, tmp_path / "backup") == (3, (2, 3))
    with pytest.raises(ValueError, match=r"backup: its newest checkpoint counts 99 finished "
                                         r"epochs, more than the run's 3"):
        runner._epochs(recipe, pipe, 99, tmp_path / "backup")


@pytest.mark.integration
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing(tmp_path):
    """Writes that fail half way (here a file-size limit, EFBIG: the same
    path as a full disk's ENOSPC, which a test cannot make without mounting
    a filesystem): ``save_preset`` (h5py used to crash the process: exit
    139) and an ONNX export each raise one OSError naming the file the user
    asked for, and leave nothing behind."""
    code = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
from keras_gresnet import export, zoo
model = zoo.gresnet_cifar(n=5)  # 1.8 MB of weights
for write in (lambda: zoo.save_preset(model, sys.argv[1] + "/preset"),
              lambda: export.export(model, sys.argv[1] + "/net.onnx", format="onnx")):
    try:
        write()
    except OSError as error:
        print(type(error).__name__, error.errno, error.filename)
"""
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    import errno

    assert done.stdout.split("\n")[:2] == [
        f"OSError {errno.EFBIG} {tmp_path}/preset/model.weights.h5",
        f"OSError {errno.EFBIG} {tmp_path}/net.onnx"], done.stdout + done.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []
