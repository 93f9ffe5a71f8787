"""The published registry (keras_gresnet/published_weights.json) against its files: hashes,
sizes, parameter counts, and the recorded test errors on the real test set."""

import hashlib

import keras
import numpy as np
import pytest

from keras_gresnet import data, weights, zoo

pytestmark = pytest.mark.integration  # every test reads the real MNIST / Fashion-MNIST

PUBLISHED = [e for e in weights.list_weights() if e["status"] == weights.PUBLISHED]
UNTRAINED = [e for e in weights.list_weights() if e["status"] == weights.NOT_TRAINED]


def test_registry_publishes_the_fashion_mnist_models():
    names = {e["name"] for e in PUBLISHED}
    assert [e["name"] for e in zoo.list_weights("gresnet_mlp*")] == sorted(
        n for n in names if n.startswith("gresnet_mlp"))
    for kind in ("plain", "resnet", "gresnet"):
        for depth in (2, 10, 20, 50, 100):
            assert f"{kind}_mlp{depth}_fashion_mnist" in names
    # The models no machine here can train are listed, never as published.
    assert {"gresnet_cifar5_cifar10", "wide_gresnet28_10_cifar10",
            "preact_resnet200_imagenet"} <= {e["name"] for e in UNTRAINED}
    for entry in UNTRAINED:
        assert "file" not in entry and "sha256" not in entry
        with pytest.raises(ValueError, match="not yet trained"):
            weights.weights_path(entry["name"])


@pytest.mark.parametrize("entry", PUBLISHED, ids=lambda e: e["name"])
def test_file_matches_its_entry(entry):
    path = weights.download.SHIPPED_DIR / entry["file"]
    content = path.read_bytes()
    assert len(content) == entry["size"]
    assert hashlib.sha256(content).hexdigest() == entry["sha256"]
    model = zoo.get_model(entry["builder"], **entry["builder_kwargs"],
                          input_shape=tuple(entry["input_shape"]), classes=entry["classes"])
    assert zoo.summarize(model)["params"] == entry["params"]
    # the command that trained it: a train command, or the recorded script and backend
    assert entry["command"].startswith(f"keras-gresnet train {entry['builder']} ") or \
        entry["command"].startswith("KERAS_BACKEND=") and " python scripts/reproduce" in \
        entry["command"]


@pytest.fixture(scope="module")
def test_sets():
    """Each published dataset's real test split, read once."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = data.load(name, "test")
        return cache[name]

    return get


SMALL = [e for e in PUBLISHED if e["builder_kwargs"].get("depth", 99) <= 10
         or e["builder"].endswith("_cifar")]
# The d <= 10 MLPs and the conv nets (10k test images through GResNet-32:
# seconds) in every run; the deeper MLPs with `pytest -m slow`.
EVERY = [e if e in SMALL else pytest.param(e, marks=pytest.mark.slow) for e in PUBLISHED]


@pytest.mark.parametrize("entry", EVERY, ids=lambda e: e["name"] if isinstance(e, dict) else None)
def test_loading_gives_the_recorded_test_error(entry, test_sets, monkeypatch, tmp_path):
    images, labels = test_sets(entry["dataset"])  # before KERAS_HOME hides ~/.keras's MNIST
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))  # no cache: the shipped file
    monkeypatch.setenv(weights.URL_ENV, "http://127.0.0.1:9/never-contacted/")
    model = zoo.get_model(entry["builder"], **entry["builder_kwargs"], weights=entry["name"])
    preprocessing = data.Preprocessing.from_config(entry["preprocessing"])
    test = data.make_dataset(images, labels, batch_size=1000, preprocessing=preprocessing)
    predicted = np.concatenate([np.argmax(keras.ops.convert_to_numpy(model(x)), axis=-1)
                                for x, _ in test])
    error = 100 * np.mean(predicted != labels)
    # 10 of 10,000 test images: argmax near-ties flipped by another backend's round-off
    assert error == pytest.approx(entry["test_error_percent"], abs=0.1)


def test_dataset_name_resolves_like_keras_applications(monkeypatch, tmp_path):
    """``weights="fashion_mnist"`` (as Keras' ``weights="imagenet"``) picks
    the published entry of this builder and these arguments."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    by_dataset = zoo.gresnet_mlp(depth=2, weights="fashion_mnist")
    by_name = zoo.gresnet_mlp(depth=2, weights="gresnet_mlp2_fashion_mnist")
    for a, b in zip(by_dataset.get_weights(), by_name.get_weights()):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"no published fashion_mnist weights of "
                                         r"gresnet_mlp fit.*gresnet_mlp\(depth=2\)"):
        zoo.gresnet_mlp(depth=4, weights="fashion_mnist")
    with pytest.raises(ValueError, match="weights='cifar10' has no registry entry"):
        zoo.gresnet_mlp(depth=2, weights="cifar10")


CONV = [e for e in PUBLISHED if e["builder"].endswith("_cifar")]


@pytest.mark.parametrize("entry", CONV, ids=lambda e: e["name"])
def test_conv_weights_build_at_their_shape_and_take_raw_pixels(entry, test_sets, monkeypatch,
                                                              tmp_path):
    """GR Table 3's nets trained on 28x28 grey images: ``weights="fashion_mnist"``
    (a variant such as k decay: its name) builds at the entry's shape (Keras
    Applications' rule), and with ``include_preprocessing=True`` the net
    takes the raw test pixels and predicts what the plain net predicts on
    the preprocessed ones."""
    images, labels = test_sets(entry["dataset"])
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setenv(weights.URL_ENV, "http://127.0.0.1:9/never-contacted/")
    builder = getattr(zoo, entry["builder"])
    variant = bool(entry.get(weights.RECIPE_OPTIONS))
    asked = entry["name"] if variant else entry["dataset"]
    plain = builder(**entry["builder_kwargs"], weights=asked)
    assert plain.input_shape == (None, *entry["input_shape"]) == (None, 28, 28, 1)
    assert plain.card["source"] == entry["name"]  # the dataset name picks no variant
    raw = builder(**entry["builder_kwargs"], weights=asked, include_preprocessing=True)
    preprocessing = data.Preprocessing.from_config(entry["preprocessing"])
    x = images[:500]
    a = np.argmax(keras.ops.convert_to_numpy(plain(preprocessing(x), training=False)), -1)
    b = np.argmax(keras.ops.convert_to_numpy(raw(x.astype("float32"), training=False)), -1)
    # The same float32 arithmetic (x * scale + offset) inside and outside the
    # net: equal predictions but for a top-2 tie within round-off.
    assert np.mean(a == b) >= 0.998
    refused = (rf"^weights {entry['name']!r} were trained for .* input_shape \(28, 28, 1\); "
               rf"they do not fit" if variant else
               r"^weights='fashion_mnist': no published .* input_shape \(28, 28, 1\)\)$")
    with pytest.raises(ValueError, match=refused):
        builder(**entry["builder_kwargs"], weights=asked, input_shape=(32, 32, 3))
