"""One model, every way in: the resolver (``zoo.resolve``) turns each kind of
source (a model, a published name, a ``.keras`` file, a run folder, a
preset) into the same model with the same card, and every door (the Python
entries and the commands ``evaluate``, ``predict``, ``gates``, ``prune``,
``export``) takes every kind and gives the same answer on the same raw
pixels."""

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import pytest
from PIL import Image

import keras_gresnet
from keras_gresnet import cli, finetune, weights, zoo
from keras_gresnet.layers import gate_layers

SHAPE = (8, 8, 1)
CLASSES = 3
NAMES = ["cat", "dog", "eel"]
STATISTICS = {"method": "meanstd", "mean": [0.4], "std": [0.25]}
KINDS = ("model", "published", "keras_file", "run", "preset")

pytestmark = pytest.mark.usefixtures("network_guard")


def _net():
    """A tiny CIFAR GResNet whose every weight is random (BatchNorm
    statistics and gates too), so that a load that missed one shows."""
    model = zoo.gresnet_cifar(n=1, input_shape=SHAPE, classes=CLASSES)
    rng = np.random.default_rng(3)
    for w in model.weights:
        value = rng.uniform(0.5, 1.5, w.shape) if "variance" in w.path else \
            rng.normal(0, 0.4, w.shape)
        w.assign(value.astype("float32"))
    for i, gate in enumerate(gate_layers(model)):
        gate.k.assign(0.2 + 0.3 * i)
    return model


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same trained net as every kind of source, and a picture folder of
    its classes (raw 8x8 grey PNGs, a test/ split)."""
    root = tmp_path_factory.mktemp("sources")
    net = _net()
    card = {"source": "tiny", "class_names": NAMES, "preprocessing": STATISTICS,
            "dataset": "folder"}
    net.remember(net.builder, net.builder_kwargs, card)
    net.save(root / "net.keras")
    zoo.save_preset(net, root / "preset")
    # A run folder as an older version wrote it: a plain functional model.keras
    # (no builder, no card), the card's facts in config.json.
    plain = keras.Model(net.inputs, net.outputs, name=net.name)
    run = root / "run"
    run.mkdir()
    plain.save(run / "model.keras")
    (run / "config.json").write_text(json.dumps({
        "model": "gresnet_cifar", "model_kwargs": {"n": 1}, "dataset": "folder",
        "seed": 0, "data_dir": str(root / "pictures"),
        "data": {"preprocessing": STATISTICS, "class_names": NAMES, "image_shape": list(SHAPE),
                 "seed": 0}}))
    # The published file: a plain .keras (as the published files are).
    plain.save(root / "published.keras")
    rng = np.random.default_rng(4)
    raw = rng.integers(0, 256, size=(12, *SHAPE)).astype("uint8")
    for split in ("train", "test"):
        for c, name in enumerate(NAMES):
            (root / "pictures" / split / name).mkdir(parents=True)
            for i in range(4):
                Image.fromarray(raw[4 * c + i, ..., 0], "L").save(
                    root / "pictures" / split / name / f"{i}.png")
    return SimpleNamespace(root=root, net=net, raw=raw.astype("float32"))


@pytest.fixture
def tiny_published(sources, registry):
    """A registry (conftest's) holding the tiny net as ``tiny_folder`` (and
    an untrained ``tiny_untrained``), its file shipped beside it."""
    registry.shipped.mkdir()
    body = (sources.root / "published.keras").read_bytes()
    (registry.shipped / "tiny_folder.keras").write_bytes(body)
    entry = dict(
        name="tiny_folder", builder="gresnet_cifar", builder_kwargs={"n": 1}, dataset="folder",
        input_shape=list(SHAPE), classes=CLASSES, class_names=NAMES, preprocessing=STATISTICS,
        test_error_percent=50.0, command="keras-gresnet train gresnet_cifar --n 1",
        params=1, file="tiny_folder.keras", size=len(body),
        sha256=hashlib.sha256(body).hexdigest(), keras_version=keras.__version__,
        date="2026-12-04", status="published", license="test licence")
    untrained = {k: v for k, v in entry.items() if k not in weights.FILE_FIELDS}
    untrained.update(name="tiny_untrained", builder_kwargs={"n": 2}, dataset="cifar10",
                     status=weights.NOT_TRAINED)
    registry.write([entry, untrained])
    return entry


def _source(kind, sources):
    return {"model": sources.net, "published": "tiny_folder",
            "keras_file": str(sources.root / "net.keras"), "run": str(sources.root / "run"),
            "preset": str(sources.root / "preset")}[kind]


def _expected(sources):
    """The net's output on the raw pictures, normalised by hand:
    (x / 255 - 0.4) / 0.25."""
    x = ((sources.raw / 255 - 0.4) / 0.25).astype("float32")
    return keras.ops.convert_to_numpy(sources.net(x, training=False))


def test_source_kind_tells_every_kind_apart(sources, tiny_published, tmp_path):
    kind = weights.arguments.source_kind
    assert kind("tiny_folder") == "published"
    assert kind("hf://owner/name") == "hub"
    assert kind(str(sources.root / "net.keras")) == "keras_file"
    assert kind(sources.root / "run") == "run"
    assert kind(str(sources.root / "preset")) == "preset"
    (tmp_path / "w.weights.h5").write_bytes(b"x")
    assert kind(tmp_path / "w.weights.h5") == "weights_file"
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="not finished .*resumes with its train command"):
        kind(tmp_path / "unfinished")
    with pytest.raises(ValueError, match="a folder holding neither"):
        kind(tmp_path)
    with pytest.raises(ValueError, match="no such file"):
        kind(str(tmp_path / "missing.keras"))
    with pytest.raises(ValueError, match="model must be a keras.Model or a published"):
        kind(3)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_resolves_to_the_same_net_and_card(kind, sources, tiny_published):
    resolved = zoo.resolve(_source(kind, sources))
    assert resolved.kind == kind
    assert resolved.class_names == NAMES and resolved.preprocessing == STATISTICS
    # a zoo model wherever its builder is known: a plain file is rebuilt by it
    assert resolved.model.builder == "gresnet_cifar" and resolved.model.card == resolved.card
    out = keras.ops.convert_to_numpy(
        resolved.model(zoo.preprocess_input(sources.raw, resolved), training=False))
    np.testing.assert_allclose(out, _expected(sources), rtol=1e-5, atol=1e-6)  # float32 only
    raw_model = zoo.raw_pixels_model(resolved)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(raw_model(sources.raw)), out,
                               rtol=1e-5, atol=1e-6)  # the same arithmetic, in the graph


def test_a_published_file_given_by_path_has_its_entry_card(sources, tiny_published):
    path = Path(weights.download.SHIPPED_DIR) / "tiny_folder.keras"
    resolved = zoo.resolve(str(path))
    assert resolved.card["source"] == "tiny_folder" and resolved.card["license"] == "test licence"
    assert resolved.card["weights_sha256"] == tiny_published["sha256"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_python_door_takes_every_kind(kind, sources, tiny_published):
    source = _source(kind, sources)
    expected = _expected(sources)
    x = zoo.preprocess_input(sources.raw, source)
    assert np.array_equal(x, keras_gresnet.preprocess_input(sources.raw, source))
    for model in (keras_gresnet.load_model(source, compile=False), zoo.from_preset(source),
                  zoo.gresnet_cifar(n=1, classes=CLASSES, weights=source)):
        assert tuple(model.input_shape[1:]) == SHAPE  # the source's input, not the default
        np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x, training=False)),
                                   expected, rtol=1e-5, atol=1e-6)  # float32 only
        assert keras_gresnet.decode_predictions(expected, model, top=1)[0][0][0] in NAMES
    assert finetune.source_info(source)["class_names"] == NAMES
    copy = finetune.new_head(source, 2)
    assert copy.get_layer("predictions").units == 2


def _cli(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "model"])
def test_every_command_takes_every_kind(kind, sources, tiny_published, capsys, tmp_path):
    source = _source(kind, sources)
    folder = str(sources.root / "pictures")
    # evaluate: the folder's test pictures, raw, through the recorded normalisation
    code, out, err = _cli(["evaluate", source, "--dataset", "folder", "--data-dir", folder],
                          capsys)
    assert code == 0, err
    result = json.loads(out)
    labels = np.repeat(np.arange(CLASSES), 4)
    expected = _expected(sources)
    assert result["examples"] == 12
    assert result["test_accuracy"] == pytest.approx(np.mean(expected.argmax(1) == labels))
    code, out, err = _cli(["gates", source], capsys)
    assert code == 0 and "3 gates" in out, err
    pictures = sorted(str(p) for p in (sources.root / "pictures" / "test").rglob("*.png"))
    code, out, err = _cli(["predict", source, *pictures[:2], "--top", "1"], capsys)
    assert code == 0, err
    for line, row in zip(out.splitlines(), expected[:2]):
        assert line.split(": ")[1].startswith(NAMES[int(row.argmax())] + " ")
    out_file = tmp_path / "pruned.keras"
    code, out, err = _cli(["prune", source, "--count", "1", "--out", str(out_file),
                           "--dataset", "folder", "--data-dir", folder], capsys)
    assert code == 0, err
    assert "removed 1 blocks: conv2_block1" in out and "test accuracy after" in out
    assert out_file.is_file()


def test_the_folder_trained_runs_own_test_set_is_the_default(sources, capsys):
    code, out, err = _cli(["evaluate", str(sources.root / "run")], capsys)
    assert code == 0, err
    assert json.loads(out)["dataset"] == "folder" and json.loads(out)["examples"] == 12


def test_evaluate_on_the_first_test_pictures_only(sources, capsys):
    code, out, err = _cli(["evaluate", str(sources.root / "run"), "--max-examples", "5"], capsys)
    assert code == 0, err
    assert json.loads(out)["examples"] == 5
    code, out, err = _cli(["evaluate", str(sources.root / "run"), "--max-examples", "0"], capsys)
    assert code == 2 and not out and err.strip() == (
        "keras-gresnet evaluate: error: --max-examples 0: evaluate at least 1 test picture (an "
        "integer >= 1)")


def test_a_recorded_preprocessing_is_not_overridden(sources, capsys):
    code, _, err = _cli(["evaluate", str(sources.root / "net.keras"), "--dataset", "folder",
                         "--data-dir", str(sources.root / "pictures"), "--preprocessing",
                         "scale"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "records its own, 'meanstd'" in err


def test_not_yet_trained_says_so_at_every_door(tiny_published):
    for call in (lambda: zoo.resolve("tiny_untrained"),
                 lambda: zoo.from_preset("tiny_untrained"),
                 lambda: zoo.gresnet_cifar(n=2, weights="cifar10"),
                 lambda: zoo.gresnet_cifar(n=2, weights="tiny_untrained")):
        with pytest.raises(ValueError, match="'tiny_untrained' are not yet trained.*produced "
                           "by: keras-gresnet train gresnet_cifar"):
            call()


def test_an_unknown_name_offers_the_close_ones(tiny_published):
    with pytest.raises(ValueError, match="did you mean 'tiny_folder'"):
        zoo.resolve("tiny_foldr")
    with pytest.raises(ValueError, match="'gresnet_cifar' is a builder: "
                       r"zoo.gresnet_cifar\(weights=...\)"):
        zoo.resolve("gresnet_cifar")


def test_a_new_input_shape_follows_one_rule(sources, tiny_published):
    # Keras Applications': another size without the head (or with a new one: other
    # classes, tests/test_channels.py), in builders and from_preset alike
    for build in (lambda **kw: zoo.gresnet_cifar(n=1, weights="tiny_folder", classes=CLASSES,
                                                 **kw),
                  lambda **kw: zoo.from_preset("tiny_folder", **kw)):
        body = build(include_top=False, input_shape=(16, 16, 1))
        assert tuple(body.input_shape[1:]) == (16, 16, 1)
        source = sources.net.get_layer("conv1_conv").get_weights()[0]
        np.testing.assert_array_equal(body.get_layer("conv1_conv").get_weights()[0], source)
        with pytest.raises(ValueError, match=r"include_top=False"):
            build(input_shape=(16, 16, 1))


def test_preprocess_input_is_the_pipelines_arithmetic(sources):
    from keras_gresnet import data

    pipeline = data.Preprocessing.from_config(STATISTICS)
    np.testing.assert_array_equal(zoo.preprocess_input(sources.raw, sources.net),
                                  pipeline(sources.raw.astype("uint8")))
    # a model with its own normalisation takes the raw pixels unchanged
    raw_model = zoo.raw_pixels_model(sources.net)
    np.testing.assert_array_equal(zoo.preprocess_input(sources.raw, raw_model), sources.raw)
    assert zoo.raw_pixels_model(raw_model) is raw_model


def test_a_bare_weights_file_is_refused_as_a_model(tmp_path, sources):
    sources.net.save_weights(tmp_path / "w.weights.h5")
    with pytest.raises(ValueError, match="a bare .weights.h5 holds no architecture"):
        zoo.resolve(str(tmp_path / "w.weights.h5"))
    model = zoo.gresnet_cifar(n=1, input_shape=SHAPE, classes=CLASSES,
                              weights=str(tmp_path / "w.weights.h5"))
    x = zoo.preprocess_input(sources.raw, sources.net)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model(x, training=False)),
                                  keras.ops.convert_to_numpy(sources.net(x, training=False)))


PUBLISHED_CONV = "gresnet_cifar5_fashion_mnist"
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration  # real Fashion-MNIST, the published net on its full test set
def test_the_published_conv_net_gives_one_answer_through_every_way_in(tmp_path):
    """The published name on the whole test set gives the recorded error;
    its file, its run folder and a preset saved from it give the name's
    answer, to the bit, on the first 1,000 test pictures (the same pixels
    through each door's own resolution and preprocessing)."""
    preset = zoo.save_preset(zoo.resolve(PUBLISHED_CONV).model, tmp_path / "preset")
    from keras_gresnet import training

    whole = training.evaluate(PUBLISHED_CONV, dataset="fashion_mnist")
    published = weights.get_weights(PUBLISHED_CONV)["test_error_percent"]
    assert whole["examples"] == 10_000
    assert whole["test_error_percent"] == pytest.approx(published, abs=1e-6)
    results = [training.evaluate(source, dataset="fashion_mnist", max_examples=1000)
               for source in (
        PUBLISHED_CONV, str(ROOT / "zoo" / "weights" / f"{PUBLISHED_CONV}.keras"),
        str(ROOT / "zoo" / "results" / "fashion_mnist_conv" / "runs" / "gresnet-seed0"),
        str(preset))]
    for result in results:  # the same net, the same pixels: the same answer at every door
        assert result == results[0]
        assert result["examples"] == 1000
    # 94.32% is no count out of 1,000: the subset is not the whole set
    assert results[0]["test_accuracy"] != whole["test_accuracy"]


@pytest.mark.integration  # real Fashion-MNIST pictures this project did not make
@pytest.mark.tensorflow_only  # ONNX through tf2onnx, the converter the export suite runs
def test_the_published_conv_nets_onnx_takes_raw_pictures_and_names_its_classes(tmp_path):
    from keras_gresnet import data, export

    out = export.export(PUBLISHED_CONV, tmp_path / "net.onnx", format="onnx")
    images, labels = data.load("fashion_mnist", "test")
    predict = export.load_exported(out)  # onnxruntime
    probabilities = predict(images[:20].astype("float32"))  # raw 0-255 pixels
    assert np.sum(probabilities.argmax(1) == labels[:20]) >= 19
    contract = export.read_contract(out)
    assert contract["pixels"] == "raw 0-255" and contract["input_layout"] == "NHWC"
    assert contract["input_shape"] == [28, 28, 1] and contract["class_names"][9] == "Ankle boot"
    assert contract["source"] == PUBLISHED_CONV and contract["preprocessing"]["method"] == "mean"
    assert contract["license"]
