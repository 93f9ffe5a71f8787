"""The contract inside the model (issue 49, item 1): a zoo model's card is in
what Keras saves, so every loader gives the same model with the same card:
``keras_gresnet.load_model`` in both compile modes, ``keras.saving.load_model``
after ``import keras_gresnet``; the published files carry it (weights
identical to the bit to the files they replace, which still load as theirs)."""

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_gresnet
from keras_gresnet import weights, zoo
from keras_gresnet.layers import ZooModel, gate_layers

from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = [e for e in weights.list_weights() if e["status"] == weights.PUBLISHED]
CONV = "gresnet_cifar5_fashion_mnist"


@pytest.mark.parametrize("entry", PUBLISHED, ids=lambda e: e["name"])
def test_every_published_file_is_a_zoo_model_carrying_its_entrys_card(entry):
    """Read as data (no Keras): the file's config is a ZooModel whose card
    holds the entry's class names, preprocessing, source and licence."""
    with zipfile.ZipFile(ROOT / "zoo" / "weights" / entry["file"]) as archive:
        config = json.loads(archive.read("config.json"))
    assert config["registered_name"] == "keras_gresnet>ZooModel"
    card = config["config"]["card"]
    assert card["class_names"] == entry["class_names"]
    assert card["preprocessing"] == entry["preprocessing"]
    assert card["source"] == entry["name"] and card["license"] == entry["license"]
    assert config["config"]["builder"] == entry["builder"]


def _doors(path):
    """The model through each loader a user meets."""
    return {"load_model": keras_gresnet.load_model(path),
            "load_model(compile=False)": keras_gresnet.load_model(path, compile=False),
            "keras.saving.load_model": keras.saving.load_model(path)}


def test_every_loader_gives_the_published_conv_net_with_its_card():
    entry = weights.get_weights(CONV)
    path = ROOT / "zoo" / "weights" / entry["file"]
    raw = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1)).astype("float32")
    outputs = {}
    for door, model in _doors(path).items():
        assert isinstance(model, ZooModel), door
        assert model.card["preprocessing"] == entry["preprocessing"], door
        assert keras_gresnet.decode_predictions(np.eye(10)[[9]], model)[0][0][0] == "Ankle boot"
        x = keras_gresnet.preprocess_input(raw, model)  # the recorded mean, not x / 255 alone
        expected = (raw / 255 - entry["preprocessing"]["mean"][0]).astype("float32")
        np.testing.assert_allclose(x, expected, atol=1e-6)  # float32 rounding of one subtract
        outputs[door] = keras.ops.convert_to_numpy(model(x, training=False))
    first = next(iter(outputs.values()))
    for door, y in outputs.items():
        assert np.array_equal(y, first), door  # one model: the same bits


@pytest.mark.integration  # a fresh interpreter
def test_keras_own_loader_reads_the_card_after_import_keras_gresnet_alone():
    """``import keras_gresnet`` starts without Keras; Keras' loader still
    finds the zoo's classes once Keras is imported, whoever imports it."""
    code = (f"import sys, keras_gresnet; assert 'keras' not in sys.modules; import keras; "
            f"m = keras.saving.load_model({str(ROOT / 'zoo' / 'weights' / (CONV + '.keras'))!r});"
            f" print(type(m).__name__, m.card['class_names'][9])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "ZooModel Ankle boot"


def _plain_twin(tmp_path, compile):
    """A zoo net saved as an older version of this package wrote it: a plain
    functional model (no builder, no card), compiled or not."""
    net = zoo.gresnet_cifar(n=1, input_shape=(8, 8, 1), classes=3)
    rng = np.random.default_rng(5)
    for w in net.weights:
        w.assign(rng.normal(0, 0.3, w.shape).astype("float32") if "variance" not in w.path
                 else rng.uniform(0.5, 1.5, w.shape).astype("float32"))
    for gate in gate_layers(net):
        gate.k.assign(0.7)
    plain = keras.Model(net.inputs, net.outputs, name=net.name)
    if compile:
        plain.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    path = tmp_path / "old.keras"
    plain.save(path)
    return path, plain


@pytest.fixture
def shipped(registry):
    """A registry (conftest's) and a shipped folder of the test's own."""
    registry.shipped.mkdir()
    return registry.shipped


def test_republishing_keeps_every_bit_and_the_old_file_stays_the_entrys(tmp_path, shipped,
                                                                       monkeypatch):
    old, plain = _plain_twin(tmp_path, compile=False)
    body = old.read_bytes()
    (shipped / "tiny.keras").write_bytes(body)
    entry = dict(
        name="tiny", builder="gresnet_cifar", builder_kwargs={"n": 1}, dataset="folder",
        input_shape=[8, 8, 1], classes=3, class_names=["a", "b", "c"],
        preprocessing={"method": "meanstd", "mean": [0.4], "std": [0.25]},
        test_error_percent=10.0, command="keras-gresnet train gresnet_cifar --n 1", params=1,
        file="tiny.keras", size=len(body), sha256=hashlib.sha256(body).hexdigest(),
        keras_version=keras.__version__, date="2026-12-05", status="published",
        license="test licence")
    weights.write_registry([entry])
    publish = load_script("scripts/release/publish_weights.py")
    monkeypatch.setattr(publish, "SHIPPED", shipped)
    new_entry = publish.republish(entry)
    weights.write_registry([new_entry])
    new = keras.saving.load_model(shipped / "tiny.keras")
    assert isinstance(new, ZooModel) and new.card["class_names"] == ["a", "b", "c"]
    for a, b in zip(plain.get_weights(), new.get_weights(), strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()  # to the bit
    assert new_entry["sha256"] != entry["sha256"]
    assert new_entry["earlier_files"] == [{"sha256": entry["sha256"], "size": entry["size"]}]
    # the old file, handed over by path, is still the entry's: its card
    resolved = zoo.resolve(str(old))
    assert resolved.card["source"] == "tiny" and resolved.card["class_names"] == ["a", "b", "c"]
    assert isinstance(keras_gresnet.load_model(old), ZooModel)


def test_compile_true_on_an_old_plain_file_is_the_zoo_model_compiled_as_saved(
        tmp_path, shipped):
    """One load path: the resolved zoo model with its card, compiled from
    the file's compile config (optimizer, loss, metrics)."""
    path, _ = _plain_twin(tmp_path, compile=True)
    run = tmp_path / "run"
    run.mkdir()
    path.rename(run / "model.keras")
    (run / "config.json").write_text(json.dumps({
        "model": "gresnet_cifar", "model_kwargs": {"n": 1}, "dataset": "folder", "seed": 0,
        "data": {"preprocessing": {"method": "meanstd", "mean": [0.4], "std": [0.25]},
                 "class_names": ["a", "b", "c"], "image_shape": [8, 8, 1]}}))
    model = keras_gresnet.load_model(run)
    assert isinstance(model, ZooModel) and model.card["class_names"] == ["a", "b", "c"]
    assert model.compiled and isinstance(model.optimizer, keras.optimizers.SGD)
    assert float(model.optimizer.momentum) == pytest.approx(0.9)
    assert np.array_equal(keras.ops.convert_to_numpy(model(np.zeros((1, 8, 8, 1)))),
                          keras.ops.convert_to_numpy(
                              keras_gresnet.load_model(run, compile=False)(np.zeros((1, 8, 8, 1)))))


def test_a_new_publication_carries_its_entrys_card_and_variant(tmp_path, shipped, monkeypatch):
    """``publish_weights.py`` on a finished run folder: the saved file's card
    has the class names, licence and source the registry gives the entry
    (a new entry has no derived fields yet: the card is the completed
    entry's), and a run trained with k decay is published as that variant."""
    run = tmp_path / "run"
    run.mkdir()
    net = zoo.gresnet_cifar(n=1, input_shape=(28, 28, 1), classes=10)
    net.save(run / "model.keras")
    preprocessing = {"method": "mean", "mean": [0.25], "std": [1.0]}
    (run / "config.json").write_text(json.dumps({
        "model": "gresnet_cifar", "model_kwargs": {"n": 1}, "dataset": "fashion_mnist",
        "seed": 0, "data": {"preprocessing": preprocessing},
        "recipe": {"epochs": 2, "k_decay": True},
        "versions": {"keras": keras.__version__, "backend": "torch"},
        "command": ["scripts/reproduce/reproduce_gr_conv.py", "--runs", "x"]}))
    (run / "results.json").write_text(json.dumps({
        "test_accuracy": 0.5, "test_error_percent": 50.0, "params": net.count_params()}))
    publish = load_script("scripts/release/publish_weights.py")
    monkeypatch.setattr(publish, "SHIPPED", shipped)
    entry = publish.published_entry(run, "2026-12-06")
    assert entry["name"] == "gresnet_cifar1_k_decay_fashion_mnist"
    assert entry["recipe_options"] == {"k_decay": True}
    assert entry["command"] == ("KERAS_BACKEND=torch python scripts/reproduce/"
                                "reproduce_gr_conv.py --runs x")
    weights.write_registry([entry])
    listed = weights.get_weights(entry["name"])
    with zipfile.ZipFile(shipped / entry["file"]) as archive:
        card = json.loads(archive.read("config.json"))["config"]["card"]
    assert card["class_names"] == listed["class_names"] and card["class_names"][9] == "Ankle boot"
    assert card["license"] == listed["license"] and card["source"] == entry["name"]
    assert card["preprocessing"] == preprocessing
