"""Resolution without bypasses: what a source declares (``resolve(...,
load=False)``: its card, its input shape) is what loading it gives, read
without loading a model; ``card_of``, ``declared_input_shape`` and
``data_config`` answer through it; a builder's ``weights=`` hands its
registry entry on, never its name to be looked up again."""

import pytest

from keras_gresnet import zoo
from keras_gresnet.zoo import pixels, resolver
from test_resolver import KINDS, SHAPE, _source, sources, tiny_published  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("network_guard")


def _no_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    for name in ("load_model_file", "_preset_model", "_entry_model", "load_exact"):
        monkeypatch.setattr(resolver, name, refuse)


@pytest.mark.parametrize("kind", KINDS)
def test_a_source_declares_what_loading_it_gives(kind, sources, tiny_published, monkeypatch):
    source = _source(kind, sources)
    loaded = zoo.resolve(source)
    with monkeypatch.context() as patch:
        if kind != "model":
            _no_loading(patch)
        declared = zoo.resolve(source, load=False)
        card = resolver.card_of(source)
        shape = resolver.declared_input_shape(source)
        statistics = pixels.recorded_statistics(source)
    assert (declared.model is None) == (kind != "model")
    assert declared.card == loaded.card == card
    assert declared.input_shape == loaded.input_shape == shape == SHAPE
    assert declared.kind == loaded.kind
    assert statistics == pixels.recorded_statistics(loaded)
    # a declared source loads once asked: the same net
    assert zoo.resolve(declared).card == loaded.card
    assert [w.path for w in zoo.resolve(declared).model.weights] == \
        [w.path for w in loaded.model.weights]


def test_a_published_name_is_data_without_a_model(sources, tiny_published, monkeypatch):
    _no_loading(monkeypatch)
    declared = zoo.resolve("tiny_folder", load=False)
    assert declared.entry["name"] == "tiny_folder" and declared.model is None
    assert zoo.data_config("tiny_folder")["input_size"] == list(SHAPE)
    # not yet trained: its card and shape are declared; loading says what trains it
    untrained = zoo.resolve("tiny_untrained", load=False)
    assert untrained.card["source"] == "tiny_untrained"
    with pytest.raises(ValueError, match="not yet trained"):
        zoo.resolve(untrained)


def test_a_builders_weights_name_is_looked_up_once(sources, tiny_published, monkeypatch):
    """``weights="tiny_folder"`` checks the call against the entry, then
    the entry itself is loaded: the resolver never looks the name up again."""
    lookups = []
    entry_of = resolver._entry
    monkeypatch.setattr(resolver, "_entry", lambda *a: lookups.append(a) or entry_of(*a))
    model = zoo.gresnet_cifar(n=1, input_shape=SHAPE, classes=3, weights="tiny_folder")
    assert lookups == []
    assert model.card["source"] == "tiny_folder"
    assert [w.tobytes() for w in model.get_weights()] == \
        [w.tobytes() for w in zoo.resolve("tiny_folder").model.get_weights()]


def test_an_unfinished_run_declares_its_card(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(
        '{"model": "gresnet_cifar", "dataset": "fashion_mnist", "seed": 3}')
    declared = zoo.resolve(run, load=False)
    assert declared.model is None and declared.input_shape is None
    assert declared.card["class_names"][1] == "Trouser"
    assert declared.card["source"].endswith("seed 3")
    with pytest.raises(ValueError, match="not finished"):
        zoo.resolve(run)
