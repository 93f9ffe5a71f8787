"""`keras-gresnet finetune` and `finetune(seed=)`: a published net (GR's
depth-2 MLP, pretrained on MNIST) fine-tuned on a small class folder of real
Fashion-MNIST pictures (PNGs), into a run folder as `train` writes one:
repeatable to the bit with one seed, resumable after any epoch of either
phase, bad input refused in one line before anything is written."""

from pathlib import Path

import keras
import numpy as np
import pytest

from helpers import read_csv, swallow_a_ctrl_c, tree
from keras_gresnet import cli, data, finetune, training
from keras_gresnet.finetune_run import finetune_run

SOURCE = "gresnet_mlp2_mnist"  # published: 44,504 weights
CLASSES = {0: "tshirt", 1: "trouser", 7: "sneaker"}
PER_CLASS = 8  # 0.2 held out: 2 test and 6 training pictures of each class
PHASES = dict(head_epochs=2, full_epochs=3)  # 5 epochs, two of the head, three of the body


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """A class folder of real Fashion-MNIST test pictures, PER_CLASS of each
    of CLASSES, as grey PNGs."""
    from PIL import Image

    root = tmp_path_factory.mktemp("shots")
    images, labels = data.load("fashion_mnist", "test")
    for label, name in CLASSES.items():
        (root / name).mkdir()
        for i in np.flatnonzero(labels == label)[:PER_CLASS]:
            Image.fromarray(images[i][..., 0], "L").save(root / name / f"{i}.png")
    return root


def weights_of(out):
    return [np.asarray(w) for w in keras.saving.load_model(Path(out) / "model.keras").weights]


def max_difference(a, b):
    assert [w.shape for w in a] == [w.shape for w in b]
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def without_seconds(rows):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


@pytest.fixture(scope="module")
def uninterrupted(shots, tmp_path_factory):
    """A finished run of seed 3 (the tests compare against it, never change it)."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    finetune_run(SOURCE, data_dir=shots, out=out, seed=3, verbose=0, **PHASES)
    return out


@pytest.mark.integration
def test_one_seed_gives_the_same_weights_to_the_bit(shots, uninterrupted, tmp_path):
    again = finetune_run(SOURCE, data_dir=shots, out=tmp_path / "again", seed=3, verbose=0,
                         **PHASES)
    first = weights_of(uninterrupted)
    assert max_difference(first, weights_of(again.out)) == 0.0
    assert without_seconds(read_csv(uninterrupted / "history.csv")) == \
        without_seconds(read_csv(again.out / "history.csv"))
    other = finetune_run(SOURCE, data_dir=shots, out=tmp_path / "other", seed=4, verbose=0,
                         **PHASES)
    # another seed: another head, another split and order; the weights move apart
    assert max_difference(first, weights_of(other.out)) > 1e-3


@pytest.mark.integration
def test_finetune_seed_repeats_in_python(shots):
    def tuned():
        model, history = finetune.finetune(SOURCE, str(shots), classes=3, seed=5, verbose=0,
                                           head_epochs=1, full_epochs=2)
        assert len(history["head"]["loss"]) == 1 and len(history["full"]["loss"]) == 2
        return [np.asarray(w) for w in model.weights]

    first = tuned()
    keras.utils.set_random_seed(99)  # whatever the global state, the seed decides
    assert max_difference(first, tuned()) == 0.0


@pytest.mark.integration
def test_run_folder_holds_model_card_history_and_results(uninterrupted, shots):
    names = {p.name for p in uninterrupted.iterdir()}
    assert {"config.json", "history.csv", "gates.csv", "model.keras", "results.json",
            "history.png", "gates.png"} <= names
    assert "backup" not in names and "run.lock" not in names
    history = read_csv(uninterrupted / "history.csv")
    assert [int(r["epoch"]) for r in history] == [1, 2, 3, 4, 5]
    assert [int(r["epoch"]) for r in read_csv(uninterrupted / "gates.csv")] == [0, 1, 2, 3, 4, 5]
    results = training.read_results(uninterrupted)
    assert results["epochs"] == 5
    # the card: the folder's classes (sorted), the source, raw pixels in
    model = keras.saving.load_model(uninterrupted / "model.keras")
    assert model.card["class_names"] == sorted(CLASSES.values())
    assert model.card["source"] == f"fine-tuned from {SOURCE}"
    assert model.card["test_error_percent"] == pytest.approx(results["test_error_percent"],
                                                             abs=1e-3)
    config = training.runs.read_config(uninterrupted / "config.json")
    assert config["recipe"]["name"] == "finetune" and config["seed"] == 3
    # `evaluate RUN` tests on the run's own held-out pictures: 2 per class,
    # the same 6 as the last epoch's test_* columns
    own = training.evaluate(uninterrupted)
    assert own["examples"] == 3 * 2
    assert own["test_accuracy"] == pytest.approx(results["test_accuracy"], abs=1e-6)
    assert float(history[-1]["test_accuracy"]) == pytest.approx(results["test_accuracy"],
                                                                abs=1e-6)


class Killed(Exception):
    """Stands for a kill after an epoch's checkpoint."""


@pytest.mark.integration
@pytest.mark.parametrize("killed_after", [1, 2, 4], ids=["head", "between", "full"])
def test_a_killed_run_resumes_and_ends_as_the_uninterrupted_one(
        shots, uninterrupted, tmp_path, monkeypatch, killed_after):
    out = tmp_path / "run"
    save = training.EpochBackup.on_epoch_end

    def save_then_die(self, epoch, logs=None):
        save(self, epoch, logs)
        if epoch + 1 == killed_after:
            raise Killed

    monkeypatch.setattr(training.EpochBackup, "on_epoch_end", save_then_die)
    with pytest.raises(Killed):
        finetune_run(SOURCE, data_dir=shots, out=out, seed=3, verbose=0, **PHASES)
    monkeypatch.undo()
    before = read_csv(out / "history.csv")
    assert len(before) == killed_after and not (out / "results.json").exists()
    left = tree(out)
    with pytest.raises(ValueError, match=r"an unfinished run with another config \(differs "
                                         r"in \['seed'\]\)"):
        finetune_run(SOURCE, data_dir=shots, out=out, seed=4, verbose=0, **PHASES)
    assert tree(out) == left  # refused before any write
    run = finetune_run(SOURCE, data_dir=shots, out=out, seed=3, verbose=0, **PHASES)
    history = read_csv(out / "history.csv")
    assert [int(r["epoch"]) for r in history] == [1, 2, 3, 4, 5]
    assert history[:killed_after] == before  # the epochs before the kill are kept
    assert run.results["epochs"] == 5 and not (out / "backup").exists()
    # the checkpoint holds the phase's optimizer, each epoch's batches are
    # (seed, epoch)'s: the resumed run ends as the uninterrupted one, to the bit
    assert max_difference(weights_of(uninterrupted), weights_of(out)) == 0.0
    assert without_seconds(history) == without_seconds(read_csv(uninterrupted / "history.csv"))


@pytest.mark.integration
def test_a_swallowed_ctrl_c_stops_a_finetune_run_resumable(shots, uninterrupted, tmp_path,
                                                          monkeypatch, python_sigint):
    """A Ctrl-C that C code swallows in epoch 3 (the body's first) stops the
    run after that batch, as a Ctrl-C does; the same call ends as the
    uninterrupted run."""
    out = tmp_path / "run"
    batch_end = training.RunLogger.on_train_batch_end
    fired = []

    def ctrl_c_swallowed(self, batch, logs=None):
        if len(self.history) == 2 and not fired:
            fired.append(swallow_a_ctrl_c())
        return batch_end(self, batch, logs)

    monkeypatch.setattr(training.RunLogger, "on_train_batch_end", ctrl_c_swallowed)
    with pytest.raises(KeyboardInterrupt):
        finetune_run(SOURCE, data_dir=shots, out=out, seed=3, verbose=0, **PHASES)
    monkeypatch.undo()
    assert fired == [True] and not (out / "results.json").exists()
    assert len(read_csv(out / "history.csv")) == 2
    run = finetune_run(SOURCE, data_dir=shots, out=out, seed=3, verbose=0, **PHASES)
    assert run.results["epochs"] == 5
    assert max_difference(weights_of(uninterrupted), weights_of(out)) == 0.0


def one_line_exit_2(capsys, argv, *words):
    try:
        code = cli.main(argv)
    except SystemExit as exit:  # argparse's own refusals
        code = exit.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    for word in words:
        assert word in err[0], err[0]


def test_cli_bad_input_is_one_line_and_writes_nothing(shots, tmp_path, capsys):
    out = tmp_path / "run"
    command = ["finetune", SOURCE, "--dataset", "folder", "--data-dir", str(shots),
               "--out", str(out)]
    one_line_exit_2(capsys, command[:5] + [str(tmp_path / "none")] + command[6:],
                    "--data-dir", "no such folder")
    one_line_exit_2(capsys, command[:3] + ["mnist"] + command[4:], "--dataset", "folder")
    artefact = tmp_path / "model.onnx"
    artefact.write_bytes(b"not read")
    one_line_exit_2(capsys, ["finetune", str(artefact)] + command[2:],
                    "exported artefact", "cannot be fine-tuned")
    with pytest.raises(ValueError, match="exported artefact, which cannot be fine-tuned"):
        finetune.finetune(str(artefact), str(shots), classes=3)
    one_line_exit_2(capsys, command + ["--seed", "-1"], "--seed")
    assert not out.exists()


@pytest.mark.integration
def test_cli_writes_a_run_and_keeps_a_finished_one(shots, tmp_path, capsys):
    out = tmp_path / "run"
    command = ["finetune", SOURCE, "--dataset", "folder", "--data-dir", str(shots),
               "--out", str(out), "--seed", "3", "--head-epochs", "1", "--full-epochs", "1"]
    assert cli.main(command) == 0
    said = capsys.readouterr().out
    assert "fine-tuned on 3 classes" in said and "after 2 epochs" in said
    finished = tree(out)
    one_line_exit_2(capsys, command, "finished run", "--overwrite")
    assert tree(out) == finished
    assert cli.main(command + ["--overwrite"]) == 0
    assert read_csv(out / "history.csv")[-1]["epoch"] == "2"
