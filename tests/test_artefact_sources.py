"""An exported artefact is a source wherever a door can use one (issue 52):
``evaluate`` runs it, ``decode_predictions`` and ``data_config`` read its
contract (its ops checked first), its runtime takes the raw uint8 pixels a
user decodes pictures into and refuses another kind of array in one line;
and ``data_config`` gives one answer for a net through every source. The
door table (``tests/test_doors.py``) holds the refusals (``gates``,
``prune``)."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_gresnet
from keras_gresnet import cli, export, zoo
from test_resolver import (  # noqa: F401 (a fixture)
    CLASSES, NAMES, SHAPE, STATISTICS, _expected, sources,
)

BACKEND = keras.backend.backend()
ROOT = Path(__file__).resolve().parents[1]
# The first format each backend writes (docs/export.md).
FORMAT = {"tensorflow": "onnx", "jax": "tf_saved_model", "torch": "onnx"}[BACKEND]
PUBLISHED_CONV = "gresnet_cifar5_fashion_mnist"


@pytest.fixture(scope="module")
def artefact(sources, tmp_path_factory):  # noqa: F811
    """The tiny net exported (raw 0-255 pixels in, its card's contract inside)."""
    root = tmp_path_factory.mktemp("artefact")
    return export.export(sources.net, root / f"net{export.SUFFIXES[FORMAT]}", format=FORMAT)


def test_an_artefact_takes_raw_uint8_pixels_and_refuses_another_kind_of_array(
        artefact, sources):  # noqa: F811
    assert export.read_contract(artefact)["input_dtype"] == "float32"
    run = export.load_exported(artefact)
    pixels = sources.raw.astype("uint8")  # as a user decodes pictures
    from_uint8 = run(pixels)
    # cast to the contract's float32: the very numbers the float32 array gives
    np.testing.assert_array_equal(from_uint8, run(sources.raw))
    # another runtime: float32 sums in other orders, ~1e-6 relative per layer
    np.testing.assert_allclose(from_uint8, _expected(sources), atol=1e-4)
    with pytest.raises(ValueError, match=r"takes float32 pixels .* got an array of dtype bool"):
        run(pixels > 127)
    with pytest.raises(ValueError, match=r"takes float32 pixels .* dtype <U1"):
        run(np.full(pixels.shape, "a"))


def _with_contract(artefact, tmp_path, **changes):
    """A copy of ``artefact`` whose contract has ``changes``."""
    import shutil

    copy = tmp_path / artefact.name
    if FORMAT == "tf_saved_model":
        shutil.copytree(artefact, copy)
        path = copy / "assets.extra" / export.CONTRACT_FILE
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    else:
        import onnx

        proto = onnx.load(str(artefact))
        for entry in proto.metadata_props:
            if entry.key in changes:
                entry.value = changes[entry.key]
        onnx.save(proto, str(copy))
    return copy


def test_a_contract_naming_a_dtype_no_export_takes_is_refused(artefact, tmp_path):
    wrong = _with_contract(artefact, tmp_path, input_dtype="complex64")
    with pytest.raises(ValueError, match="its contract's input_dtype is not one of float32"):
        export.load_exported(wrong)
    with pytest.raises(ValueError, match="input_dtype is not one of"):
        zoo.data_config(str(wrong))


def test_an_artefact_answers_data_config_and_decode_predictions_from_its_contract(
        artefact, sources):  # noqa: F811
    declared = zoo.resolve(str(artefact), load=False)
    assert declared.kind == "artefact" and declared.model is None
    assert declared.class_names == NAMES and declared.preprocessing == STATISTICS
    with pytest.raises(ValueError, match="is an exported artefact .* holds no Keras model"):
        zoo.resolve(str(artefact))  # no Keras model to load

    config, of_the_net = zoo.data_config(str(artefact)), zoo.data_config(sources.net)
    assert keras_gresnet.data_config(str(artefact)) == config
    assert config["input_size"] == list(SHAPE) == of_the_net["input_size"]
    assert config["classes"] == CLASSES
    assert (config["mean"], config["std"]) == (STATISTICS["mean"], STATISTICS["std"])
    # what the artefact takes: raw pixels, its normalisation inside
    assert config["pixels"] == "raw 0-255" and "inside the artefact" in config["model_input"]
    same = ("input_size", "channels", "layout", "preprocessing", "mean", "std",
            "interpolation", "crop", "classes")
    assert {k: config[k] for k in same} == {k: of_the_net[k] for k in same}

    probabilities = export.load_exported(artefact)(sources.raw.astype("uint8"))
    top = keras_gresnet.decode_predictions(probabilities, str(artefact), top=2)
    assert top == keras_gresnet.decode_predictions(probabilities, sources.net, top=2)
    assert [row[0][0] for row in top] == [NAMES[i] for i in probabilities.argmax(1)]


def test_evaluate_runs_an_artefact_on_its_test_folder(artefact, sources, capsys):  # noqa: F811
    folder = str(sources.root / "pictures")
    argv = ["--dataset", "folder", "--data-dir", folder]
    assert cli.main(["evaluate", str(artefact), *argv]) == 0
    of_the_artefact = json.loads(capsys.readouterr().out)
    assert cli.main(["evaluate", str(sources.root / "net.keras"), *argv]) == 0
    of_the_net = json.loads(capsys.readouterr().out)
    assert of_the_artefact["examples"] == of_the_net["examples"] == 12
    assert of_the_artefact["test_accuracy"] == of_the_net["test_accuracy"]
    # the loss of float32 probabilities against Keras' from the logits
    assert of_the_artefact["test_loss"] == pytest.approx(of_the_net["test_loss"], rel=1e-4)
    # the artefact normalises the pixels itself: another method is refused
    assert cli.main(["evaluate", str(artefact), *argv, "--preprocessing", "scale"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is an exported artefact with its normalisation" in err


def test_data_config_is_one_answer_for_the_published_conv_net_through_every_source():
    """The name, its .keras file, its run folder and the model object: one
    data config (issue 52's must-show)."""
    configs = {
        "name": keras_gresnet.data_config(PUBLISHED_CONV),
        "keras_file": keras_gresnet.data_config(
            str(ROOT / "zoo" / "weights" / f"{PUBLISHED_CONV}.keras")),
        "run": keras_gresnet.data_config(
            str(ROOT / "zoo" / "results" / "fashion_mnist_conv" / "runs" / "gresnet-seed0")),
        "model": keras_gresnet.data_config(keras_gresnet.load_model(PUBLISHED_CONV)),
        "built": keras_gresnet.data_config(zoo.gresnet_cifar(n=5, weights="fashion_mnist")),
    }
    for kind, config in configs.items():
        assert config == configs["name"], kind
    config = configs["name"]
    assert config["input_size"] == [28, 28, 1] and config["classes"] == 10
    assert config["preprocessing"] == "mean" and config["std"] == [1.0]
    assert config["mean"][0] == pytest.approx(0.2860, abs=1e-4)  # Fashion-MNIST's mean / 255


@pytest.mark.integration  # real Fashion-MNIST, the published net exported to ONNX
@pytest.mark.tensorflow_only  # ONNX through tf2onnx, the converter the export suite runs
def test_the_published_conv_nets_onnx_evaluates_as_its_name(tmp_path, capsys):
    """``evaluate model.onnx`` gives the published name's figures on the same
    1,000 test pictures (issue 52's must-show)."""
    out = str(tmp_path / "model.onnx")
    assert cli.main(["export", PUBLISHED_CONV, "--out", out]) == 0
    capsys.readouterr()
    results = []
    for source in (out, PUBLISHED_CONV):
        assert cli.main(["evaluate", source, "--dataset", "fashion_mnist",
                         "--max-examples", "1000"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    onnx, keras_net = results
    assert onnx["examples"] == keras_net["examples"] == 1000
    assert onnx["test_accuracy"] == keras_net["test_accuracy"]
    assert onnx["test_error_percent"] == keras_net["test_error_percent"]
    assert onnx["test_loss"] == pytest.approx(keras_net["test_loss"], rel=1e-4)
    # the dataset the contract records is the default test set
    assert cli.main(["evaluate", out, "--max-examples", "1000"]) == 0
    assert json.loads(capsys.readouterr().out) == onnx
