"""Tests of keras_gresnet.plots: every plot's PNG, argument checks and the
atomic write; and of the run logs' CSV readers that feed them
(keras_gresnet.training.read_history, read_gates)."""

import os

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from keras_gresnet import plots
from keras_gresnet.training import read_gates, read_history

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Columns in CSVLogger's alphabetical order, but shuffled here to check that
# the reader goes by the header; "NA" is what CSVLogger writes for a gap.
HISTORY_CSV = """\
loss,epoch,val_accuracy,accuracy,lr,val_loss,test_accuracy,test_loss
2.30,0,0.20,0.15,0.1,2.10,0.21,2.05
1.50,1,0.45,0.40,0.1,1.60,0.44,1.55
0.90,2,NA,0.65,0.01,1.00,0.62,1.02
"""

GATES_CSV = """\
epoch,index,block,k,g
-1,0,conv2_block1_gate,1.0,1.0
-1,1,conv2_block2_gate,1.0,1.0
0,0,conv2_block1_gate,0.8,0.8
0,1,conv2_block2_gate,1.2,1.2
1,0,conv2_block1_gate,-0.1,0.0
1,1,conv2_block2_gate,1.5,1.5
"""


def history_dict(epochs=4, val=True, test=False):
    history = {
        "epoch": list(range(epochs)),
        "loss": list(np.linspace(2.3, 0.5, epochs)),
        "accuracy": list(np.linspace(0.1, 0.9, epochs)),
    }
    if val:
        history["val_loss"] = list(np.linspace(2.2, 0.7, epochs))
        history["val_accuracy"] = list(np.linspace(0.15, 0.8, epochs))
    if test:
        history["test_loss"] = list(np.linspace(2.2, 0.8, epochs))
        history["test_accuracy"] = list(np.linspace(0.1, 0.75, epochs))
    return history


def write(path, text):
    path.write_text(text)
    return str(path)


def assert_png(path):
    """``path`` is a PNG that decodes to a non-blank image."""
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image[..., :3].std() > 0


def assert_no_temp_files(folder):
    assert [name for name in os.listdir(folder) if name.endswith(".tmp")] == []


# --------------------------------------------------------------------------
# CSV readers.


def test_read_history_parses_columns_in_any_order(tmp_path):
    history = read_history(write(tmp_path / "history.csv", HISTORY_CSV))
    assert set(history) == {
        "epoch", "loss", "accuracy", "lr", "val_loss", "val_accuracy",
        "test_loss", "test_accuracy",
    }
    assert history["epoch"] == [1, 2, 3]  # a file counting from 0 (before 1-based files)
    assert history["loss"] == [2.30, 1.50, 0.90]
    assert history["lr"] == [0.1, 0.1, 0.01]
    assert history["val_accuracy"][:2] == [0.20, 0.45]
    assert np.isnan(history["val_accuracy"][2])  # "NA"


def test_read_gates_parses_rows(tmp_path):
    """Epochs count as the console does (0: the initial gates); a file from
    before, whose initial rows were epoch -1, reads the same."""
    rows = read_gates(write(tmp_path / "gates.csv", GATES_CSV))
    assert len(rows) == 6
    assert rows[0] == {"epoch": 0, "index": 0, "block": "conv2_block1_gate", "k": 1.0, "g": 1.0}
    assert rows[4] == {"epoch": 2, "index": 0, "block": "conv2_block1_gate", "k": -0.1, "g": 0.0}
    shifted = "epoch,index,block,k,g\n" + "".join(
        f"{int(line.split(',')[0]) + 1},{line.split(',', 1)[1]}\n"
        for line in GATES_CSV.splitlines()[1:])
    assert read_gates(write(tmp_path / "new.csv", shifted)) == rows
    new_history = HISTORY_CSV.replace(",0,0.20", ",1,0.20").replace(",1,0.45", ",2,0.45") \
        .replace(",2,NA", ",3,NA")
    assert read_history(write(tmp_path / "h.csv", new_history))["epoch"] == [1, 2, 3]


@pytest.mark.parametrize(
    "reader, text, column",
    [
        (read_history, "epoch,loss,val_loss\n0,1.0,1.1\n", "accuracy"),
        (read_history, "loss,accuracy\n1.0,0.5\n", "epoch"),
        (read_gates, "epoch,index,block,g\n0,0,block1_gate,1.0\n", "k"),
        (read_gates, "epoch,block,k,g\n0,block1_gate,1.0,1.0\n", "index"),
    ],
)
def test_readers_reject_missing_column(tmp_path, reader, text, column):
    path = write(tmp_path / "log.csv", text)
    with pytest.raises(ValueError, match=rf"log\.csv.*missing column\(s\) {column}\b"):
        reader(path)


def test_readers_reject_non_numbers(tmp_path):
    path = write(tmp_path / "gates.csv", "epoch,index,block,k,g\n0,zero,b_gate,1.0,1.0\n")
    with pytest.raises(ValueError, match="line 2: column index is 'zero'"):
        read_gates(path)


# --------------------------------------------------------------------------
# Every plot writes a valid, non-blank PNG and returns its path.


def test_plot_history_from_dict_and_from_csv(tmp_path):
    csv_history = read_history(write(tmp_path / "history.csv", HISTORY_CSV))
    for history in (history_dict(test=True), csv_history):
        path = str(tmp_path / "history.png")
        assert plots.plot_history(history, path, title="ResNet n=5") == path
        assert_png(path)
        os.remove(path)
    assert_no_temp_files(tmp_path)


def test_plot_history_without_validation_or_epoch_column(tmp_path):
    history = history_dict(val=False)
    del history["epoch"]
    path = plots.plot_history(history, str(tmp_path / "train_only.png"))
    assert_png(path)


def test_plot_gates_over_epochs_few_blocks_from_csv(tmp_path):
    gates = read_gates(write(tmp_path / "gates.csv", GATES_CSV))
    assert_png(plots.plot_gates_over_epochs(gates, str(tmp_path / "gates.png"), title="k"))


def test_plot_gates_over_epochs_many_blocks_colorbar(tmp_path):
    rows = [
        {"epoch": e, "index": i, "block": f"block{i}_gate", "k": 1.0 - 0.01 * e * i, "g": 0.0}
        for e in range(-1, 5)
        for i in range(15)
    ]
    assert_png(plots.plot_gates_over_epochs(rows, tmp_path / "gates.png"))


def test_plot_k_per_block_with_highlight(tmp_path):
    blocks = [f"conv{s}_block{b}_gate" for s in (2, 3, 4) for b in (1, 2, 3, 4)]
    ks = list(np.linspace(-0.2, 1.5, len(blocks)))
    path = plots.plot_k_per_block(
        blocks, ks, str(tmp_path / "k.png"), title="WRN (4,10)", highlight=[0, 4, 8]
    )
    assert_png(path)


def test_plot_k_per_block_of_several_seeds(tmp_path):
    blocks = [f"block{i}" for i in range(1, 11)]
    series = {f"seed {s}": list(np.linspace(1 - s / 4, -0.5, 10)) for s in range(3)}
    assert_png(plots.plot_k_per_block(blocks, series, str(tmp_path / "seeds.png"),
                                      title="k per block over seeds"))
    with pytest.raises(ValueError, match=r"ks\['seed 0'\]"):
        plots.plot_k_per_block(blocks, {"seed 0": [1.0, 2.0]}, str(tmp_path / "bad.png"))
    with pytest.raises(ValueError, match="labels"):
        plots.plot_k_per_block(blocks, {}, str(tmp_path / "empty.png"))
    # The blocks whose shortcut changes dimension, shaded behind the seeds' lines.
    shaded = plots.plot_k_per_block(blocks, series, str(tmp_path / "shaded.png"),
                                    title="k per block over seeds", highlight=[0, 5],
                                    highlight_label="shortcut changes dimension", ylabel="g(k)")
    assert_png(shaded)
    assert (tmp_path / "shaded.png").read_bytes() != (tmp_path / "seeds.png").read_bytes()
    with pytest.raises(ValueError, match="highlight must hold block positions in"):
        plots.plot_k_per_block(blocks, series, str(tmp_path / "bad.png"), highlight=[10])


def test_plot_mean_k_vs_depth_with_reference_and_labels(tmp_path):
    depths = [2, 10, 20, 50, 100]
    path = plots.plot_mean_k_vs_depth(
        depths,
        [5.0, 2.6, 1.8, 1.1, 0.7],
        str(tmp_path / "mean_k.png"),
        labels=[f"d={d}" for d in depths],
        reference={"GR Table 2": (depths, [5.58, 2.54, 1.73, 1.04, 0.67])},
    )
    assert_png(path)
    # A bare (depths, mean_ks) pair is a reference too.
    assert_png(plots.plot_mean_k_vs_depth(
        [2], [5.0], str(tmp_path / "pair.png"), reference=([2, 10], [5.58, 2.54])
    ))


def test_plot_pruning_curves(tmp_path):
    removed = list(range(0, 26, 5))
    curves = {
        "GResNet greedy": (removed, [0.98, 0.98, 0.97, 0.96, 0.94, 0.9]),
        "GResNet random": (removed, [0.98, 0.97, 0.95, 0.93, 0.9, 0.85]),
        "ResNet random": (removed, [0.98, 0.6, 0.3, 0.2, 0.1, 0.1]),
    }
    assert_png(plots.plot_pruning_curves(curves, str(tmp_path / "pruning.png"), title="GR Fig. 5"))


def test_plot_training_curves_grid(tmp_path):
    csv_history = read_history(write(tmp_path / "history.csv", HISTORY_CSV))
    runs = {
        50: {"plain": history_dict(), "ResNet": history_dict(test=True)},
        100: {"plain": history_dict(6), "GResNet": csv_history},
    }
    assert_png(plots.plot_training_curves_grid(runs, str(tmp_path / "grid.png")))


def test_plots_differ_with_data(tmp_path):
    """The image depends on the data (not a fixed placeholder)."""
    a = plots.plot_k_per_block(["a", "b"], [1.0, 0.0], str(tmp_path / "a.png"))
    b = plots.plot_k_per_block(["a", "b"], [0.0, 1.0], str(tmp_path / "b.png"))
    assert not np.array_equal(imread(a), imread(b))


# --------------------------------------------------------------------------
# Argument checks: ValueError naming the argument, before any file is written.


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda p: plots.plot_k_per_block(["a", "b", "c"], [1.0, 0.5], p), "ks"),
        (lambda p: plots.plot_k_per_block(["a", "b"], [1.0, 0.5], p, highlight=[2]), "highlight"),
        (lambda p: plots.plot_k_per_block(["a"], ["x"], p), "ks"),
        (lambda p: plots.plot_k_per_block(["a"], [1.0], p, title=3), "title"),
        (lambda p: plots.plot_mean_k_vs_depth([2, 10], [1.0], p), "mean_ks"),
        (lambda p: plots.plot_mean_k_vs_depth([2], [1.0], p, labels=["a", "b"]), "labels"),
        (lambda p: plots.plot_mean_k_vs_depth([2], [1.0], p, reference={"GR": [1]}), "reference"),
        (lambda p: plots.plot_pruning_curves({}, p), "curves"),
        (lambda p: plots.plot_pruning_curves({"g": ([0, 1], [0.9])}, p), "curves"),
        (lambda p: plots.plot_history({"loss": [1.0]}, p), "history.*accuracy"),
        (lambda p: plots.plot_history({"loss": [1.0, 0.5], "accuracy": [0.5]}, p), "history"),
        (lambda p: plots.plot_gates_over_epochs([], p), "gates"),
        (lambda p: plots.plot_gates_over_epochs([{"epoch": 0, "index": 0}], p), "gates"),
        (lambda p: plots.plot_gates_over_epochs(
            [{"epoch": 0, "index": "0", "block": "b", "k": 1.0}], p), "gates.*integer index"),
        (lambda p: plots.plot_training_curves_grid({}, p), "runs"),
        (lambda p: plots.plot_training_curves_grid({2: {"plain": history_dict(val=False)}}, p),
         r"runs\[2\]\['plain'\].*val_accuracy"),
    ],
)
def test_bad_arguments_raise_value_error(tmp_path, call, match):
    with pytest.raises(ValueError, match=match):
        call(str(tmp_path / "out.png"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("path", ["plot.jpg", "missing_folder/plot.png", 3])
def test_bad_path_raises_value_error(tmp_path, path):
    if isinstance(path, str):
        path = str(tmp_path / path)
    with pytest.raises(ValueError, match="path"):
        plots.plot_k_per_block(["a"], [1.0], path)
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------
# Atomic write.


def test_failed_render_leaves_no_file(tmp_path, monkeypatch):
    def broken_savefig(self, fname, **kwargs):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")  # a partial write, then the failure
        raise RuntimeError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    path = tmp_path / "k.png"
    with pytest.raises(RuntimeError, match="disk full"):
        plots.plot_k_per_block(["a", "b"], [1.0, 0.5], str(path))
    assert os.listdir(tmp_path) == []


def test_failed_render_keeps_previous_png(tmp_path, monkeypatch):
    path = plots.plot_history(history_dict(), str(tmp_path / "history.png"))
    before = open(path, "rb").read()

    def broken_savefig(self, fname, **kwargs):
        raise KeyboardInterrupt  # an interrupted call, not only an Exception

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(KeyboardInterrupt):
        plots.plot_history(history_dict(8), path)
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["history.png"]
