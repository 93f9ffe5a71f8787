"""One table of doors (issue 49, item 5): every kind of source against every
door, each cell either the net's answer (the same outputs, class names and
pixel contract as the net itself) or the one-line refusal written in the
table. A new door or a new kind of source joins ``TABLE``: the test fails on
a cell left out, so no door can skip the contract again."""

import json

import keras
import numpy as np
import pytest

import keras_gresnet
from keras_gresnet import cli, export, finetune, zoo
from keras_gresnet.layers import ZooModel
from helpers import outputs
from test_hub import _cached_repo, hf_cache  # noqa: F401 (a fixture)
from test_resolver import (  # noqa: F401 (fixtures)
    CLASSES, NAMES, SHAPE, STATISTICS, _expected, tiny_published, sources,
)

BACKEND = keras.backend.backend()
# The artefacts each backend writes (docs/export.md), by format.
WRITTEN = {"tensorflow": ("tf_saved_model", "onnx", "litert"), "jax": ("tf_saved_model",),
           "torch": ("onnx",)}[BACKEND]
# Every kind of source; the exported artefacts those this backend writes.
SOURCES = ("model", "published", "keras_file", "run", "preset", "hub", *WRITTEN)
DOORS = ("load_model", "load_model(compile=False)", "keras.saving.load_model", "from_preset",
         "weights=", "preprocess_input", "decode_predictions", "data_config", "evaluate",
         "predict", "gates", "prune", "finetune", "export")
ANSWER = "the net's answer"
ARTEFACT = "is an exported artefact"  # the resolver's one line: it holds no Keras model
# The doors an artefact answers at (issue 52): its runtime runs it, its contract
# gives the class names and the data config; the commands it cannot use say why.
ARTEFACT_DOORS = ("decode_predictions", "data_config", "evaluate", "predict")
NO_GATES = "an exported artefact has no gates"
NOT_PRUNED = "an exported artefact cannot be pruned"
KERAS_ONLY = "Keras' own loader takes a .keras file"  # Keras' refusal, a ValueError
IN_MEMORY = "not a door: a model in memory is no command-line argument nor a file"
# A preset is a KerasHub preset (issue 52): Keras' own loader reads its
# config.json and model.weights.h5 as a Keras folder, the zoo body.
BACKBONE = "Keras' own loader gives the preset's KerasHub backbone"
COMMANDS = ("evaluate", "predict", "gates", "prune")


def _row(kind):
    if kind in ("tf_saved_model", "onnx", "litert"):
        row = {door: ANSWER if door in ARTEFACT_DOORS else ARTEFACT for door in DOORS}
        row.update({"keras.saving.load_model": KERAS_ONLY, "gates": NO_GATES,
                    "prune": NOT_PRUNED})
        return row
    row = dict.fromkeys(DOORS, ANSWER)
    if kind != "keras_file":
        row["keras.saving.load_model"] = KERAS_ONLY
    if kind in ("preset", "hub"):
        row["keras.saving.load_model"] = BACKBONE
    if kind == "model":
        row.update(dict.fromkeys((*COMMANDS, "keras.saving.load_model"), IN_MEMORY))
    return row


# The table: source kind -> door -> what the cell gives.
TABLE = {kind: _row(kind) for kind in SOURCES}


def test_the_table_has_every_cell():
    assert set(TABLE) == set(SOURCES)
    assert all(set(row) == set(DOORS) for row in TABLE.values())


@pytest.fixture(scope="module")
def artefacts(sources, tmp_path_factory):
    """The tiny net exported to every format this backend writes (raw 0-255
    pixels in, its card's contract inside)."""
    root = tmp_path_factory.mktemp("artefacts")
    return {format: export.export(sources.net, root / f"net{export.SUFFIXES[format]}",
                                  format=format) for format in WRITTEN}


@pytest.fixture
def source_of(sources, tiny_published, artefacts, hf_cache):  # noqa: F811
    _cached_repo(hf_cache, "owner/tiny", sources.root / "preset")

    def source(kind):
        if kind in export.FORMATS:
            return str(artefacts[kind])
        return {"model": sources.net, "published": "tiny_folder",
                "keras_file": str(sources.root / "net.keras"), "run": str(sources.root / "run"),
                "preset": str(sources.root / "preset"), "hub": "hf://owner/tiny"}[kind]

    return source


def _answer_of_a_model(model, sources):
    """The model of a Python door gives the net's outputs on the net's
    pixels, and carries its card (class names, preprocessing)."""
    x = zoo.preprocess_input(sources.raw, model)
    np.testing.assert_allclose(outputs(model, x), _expected(sources), rtol=1e-5, atol=1e-6)
    assert isinstance(model, ZooModel)
    assert model.card["class_names"] == NAMES and model.card["preprocessing"] == STATISTICS


def _door(door, source, sources, tmp_path, capsys):
    """Open ``door`` with ``source``: returns nothing when the cell gives the
    net's answer (asserted here), raises ValueError on a refusal."""
    folder = str(sources.root / "pictures")
    if door in COMMANDS:
        pictures = sorted(str(p) for p in (sources.root / "pictures" / "test").rglob("*.png"))
        argv = {"evaluate": ["evaluate", str(source), "--dataset", "folder", "--data-dir",
                             folder],
                "predict": ["predict", str(source), *pictures[:3], "--top", "1"],
                "gates": ["gates", str(source)],
                "prune": ["prune", str(source), "--count", "1", "--out",
                          str(tmp_path / "pruned.keras"), "--dataset", "folder",
                          "--data-dir", folder]}[door]
        code = cli.main(argv)
        out, err = capsys.readouterr()
        if code == 2:
            assert err.count("\n") == 1, err  # one line
            raise ValueError(err)
        assert code == 0, err
        expected = _expected(sources)
        if door == "evaluate":
            labels = np.repeat(np.arange(CLASSES), 4)
            assert json.loads(out)["test_accuracy"] == pytest.approx(
                np.mean(expected.argmax(1) == labels))
        elif door == "predict":  # the pictures in the net's own order (cat, dog, eel)
            lines = out.splitlines()
            assert len(lines) == 3
            for line, row in zip(lines, expected[:3]):
                assert line.split(": ")[1].startswith(NAMES[int(row.argmax())] + " ")
        elif door == "gates":
            assert "3 gates" in out
        else:
            assert "removed 1 blocks" in out
        return
    if door in ("load_model", "load_model(compile=False)"):
        model = keras_gresnet.load_model(source, compile=door == "load_model")
    elif door == "keras.saving.load_model":
        if not (isinstance(source, str) and source.endswith(".keras")):
            with pytest.raises(Exception):  # Keras' own error, whichever it raises
                keras.saving.load_model(source)
            raise ValueError(KERAS_ONLY)
        model = keras.saving.load_model(source)
    elif door == "from_preset":
        model = zoo.from_preset(source)
    elif door == "weights=":
        model = zoo.gresnet_cifar(n=1, classes=CLASSES, input_shape=SHAPE, weights=source)
    elif door == "preprocess_input":
        x = keras_gresnet.preprocess_input(sources.raw, source)
        np.testing.assert_allclose(x, (sources.raw / 255 - 0.4) / 0.25, rtol=1e-6, atol=1e-6)
        return
    elif door == "decode_predictions":
        top = keras_gresnet.decode_predictions(_expected(sources), source, top=1)
        assert [row[0][0] for row in top] == [NAMES[i] for i in _expected(sources).argmax(1)]
        return
    elif door == "data_config":
        config = zoo.data_config(source)
        assert config["input_size"] == list(SHAPE) and config["classes"] == CLASSES
        assert config["mean"] == STATISTICS["mean"] and config["std"] == STATISTICS["std"]
        return
    elif door == "finetune":
        labels = np.repeat(np.arange(CLASSES), 4)
        model, _ = finetune.finetune(source, (sources.raw.astype("uint8"), labels),
                                  classes=CLASSES, head_epochs=1, full_epochs=0,
                                  batch_size=12, verbose=0)
        # raw pixels in: the source's normalisation inside, its pixel contract kept
        assert model.card["preprocessing"] == STATISTICS
        return
    else:  # export: the artefact computes the net on raw pixels
        format = WRITTEN[0]
        out = export.export(source, tmp_path / f"out{export.SUFFIXES[format]}", format=format)
        np.testing.assert_allclose(export.load_exported(out)(sources.raw), _expected(sources),
                                   atol=1e-4)  # another runtime: float32 sums in other orders
        return
    _answer_of_a_model(model, sources)


@pytest.mark.integration  # every door of every kind: commands, exports, fine-tuning
@pytest.mark.parametrize("kind", SOURCES)
def test_every_source_at_every_door(kind, source_of, sources, tmp_path, capsys):
    source = source_of(kind)
    answered, refused = [], {}
    for number, (door, cell) in enumerate(TABLE[kind].items()):
        folder = tmp_path / f"door{number}"  # each door's own outputs
        folder.mkdir()
        if cell == IN_MEMORY:
            continue
        if cell == BACKBONE:
            backbone = keras.saving.load_model(source)
            assert type(backbone).__name__ == "GResNetBackbone"
            weighted = [layer for layer in backbone.layers if layer.weights]
            assert weighted and len(weighted) == len(
                [layer for layer in sources.net.layers if layer.weights]) - 1  # all but the head
            for layer in weighted:
                for mine, net in zip(layer.get_weights(),
                                     sources.net.get_layer(layer.name).get_weights()):
                    np.testing.assert_array_equal(mine, net)
            answered.append(door)
            continue
        if cell == ANSWER:
            _door(door, source, sources, folder, capsys)
            answered.append(door)
        else:
            with pytest.raises(ValueError) as refusal:
                _door(door, source, sources, folder, capsys)
            message = str(refusal.value)
            assert cell in message, (door, message)
            assert "\n" not in message.rstrip("\n"), (door, message)
            refused[door] = cell
    assert answered  # every kind answers somewhere
