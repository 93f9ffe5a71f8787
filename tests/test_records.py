"""A model is declared once: its record (``register_model`` beside its
literal ``def``) gives the papers' numbers, the weights it names but no run
has produced, its tiny test build and its rows of the generated tables. A
new variant is one edit; ``scripts/release/write_catalog.py`` derives the
rest (the catalog test keeps the committed files current)."""

import importlib.util
from pathlib import Path

import pytest

from keras_gresnet import _catalog, data, papers, weights, zoo
from keras_gresnet.zoo import builders

ROOT = Path(__file__).resolve().parents[1]


def _writer():
    spec = importlib.util.spec_from_file_location(
        "write_catalog", ROOT / "scripts" / "release" / "write_catalog.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def scratch_variant(monkeypatch):
    """A new variant, declared by one edit: the record beside its def
    (forgotten afterwards)."""
    monkeypatch.setattr(builders, "_MODELS", dict(builders._MODELS))

    @builders.register_model(
        family="resnet_cifar",
        results=[builders.paper("a paper's Table 9", 4.2, "cifar10", n=3)],
        pretrained=[builders.untrained("cifar10", n=3, preprocessing="mean")],
        tiny=dict(n=1, input_shape=(16, 16, 3)),
    )
    def scratch_gresnet(n=3, *, include_top=True, weights=None, input_tensor=None,
                        input_shape=None, pooling=None, classes=10,
                        classifier_activation="softmax", include_preprocessing=False,
                        name="scratch_gresnet"):
        """A scratch GResNet: the one edit that declares a model."""
        return zoo.gresnet_cifar(n=n, include_top=include_top, weights=weights,
                                 input_tensor=input_tensor, input_shape=input_shape,
                                 pooling=pooling, classes=classes,
                                 classifier_activation=classifier_activation,
                                 include_preprocessing=include_preprocessing, name=name)

    return scratch_gresnet


def test_a_new_variant_is_one_record(scratch_variant, monkeypatch):
    writer = _writer()
    name = "scratch_gresnet"
    builder = zoo.model_builder(name)
    assert builder.paper_configs == [{"n": 3}] and builder.default_recipe == "preact_cifar"

    # its tiny build, as the every-builder tests build it
    model = zoo.get_model(name, **builder.tiny)
    assert model.input_shape == (None, 16, 16, 3) and model.builder == name

    # the catalog's derived facts: the paper's number, the weights not yet trained
    defaults = writer.model_defaults(builder)
    results = writer.paper_results({**{n: {} for n in zoo.list_models()}, name: defaults})[name]
    (entry,) = writer.record_entries(name)
    assert entry["name"] == "scratch_gresnet3_cifar10"
    assert entry["command"] == "keras-gresnet train scratch_gresnet --n 3 --dataset cifar10"
    assert entry["params"] == zoo.summarize(scratch_variant(n=3))["params"]
    monkeypatch.setattr(_catalog, "MODEL_DEFAULTS",
                        {**_catalog.MODEL_DEFAULTS, name: tuple(defaults.items())})
    monkeypatch.setattr(_catalog, "PAPER_RESULTS", {**_catalog.PAPER_RESULTS, name: results})
    monkeypatch.setattr(_catalog, "UNTRAINED", (*_catalog.UNTRAINED, entry))
    monkeypatch.setitem(_catalog.MODELS, name, builder.__doc__.splitlines()[0])

    # ... which the Keras-free readers answer from
    assert papers.paper_error(name, {"n": 3}, "cifar10") == ("a paper's Table 9", 4.2)
    assert papers.paper_error(name, {"n": 3, "include_top": True}, "cifar10") is not None
    assert papers.paper_error(name, {"n": 4}, "cifar10") is None
    listed = weights.get_weights("scratch_gresnet3_cifar10")
    assert listed["status"] == weights.NOT_TRAINED
    assert listed["class_names"] == list(data.DATASETS["cifar10"].class_names)
    assert listed["dataset_terms"] == data.DATASETS["cifar10"].terms
    assert listed["license"] == weights.registry.LICENSE
    card = weights.model_card(listed)
    assert "a paper's Table 9 (CIFAR-10): 4.20% test error" in card
    assert "to train it: `keras-gresnet train scratch_gresnet --n 3 --dataset cifar10`" in card
    with pytest.raises(ValueError, match="not yet trained.*keras-gresnet train scratch_gresnet"):
        scratch_variant(weights="scratch_gresnet3_cifar10")

    # ... and the generated tables
    assert writer._paper_cell(name, builder) == "a paper's Table 9 (CIFAR-10): 4.20%"
    assert writer._weights_cell(name, builder, [weights.registry.completed(entry)]) == \
        "CIFAR-10: not yet trained"


def test_the_registry_file_holds_only_what_runs_produced():
    """Published entries only, without what the dataset table and the
    package know (class names, terms, licence); the not-yet-trained ones
    come from the records."""
    import json

    stored = json.loads(weights.registry.REGISTRY_FILE.read_text())
    assert stored and all(e["status"] == weights.PUBLISHED for e in stored)
    assert not [e["name"] for e in stored if set(weights.registry.DERIVED) & set(e)]
    declared = {e["name"] for e in _catalog.UNTRAINED}
    listed = {e["name"]: e for e in weights.list_weights()}
    assert declared <= set(listed) and len(listed) == len(stored) + len(declared)
    for entry in listed.values():  # every entry complete: its card has them all
        assert entry["license"] == weights.registry.LICENSE
        info = data.DATASETS.get(entry["dataset"])
        assert entry["class_names"] == (list(info.class_names) if info else [])


def test_a_stated_field_is_kept_and_a_derived_one_not_stored():
    entry = dict(name="x", dataset="mnist", class_names=["a"] * 10, status=weights.PUBLISHED)
    assert weights.registry.completed(entry)["class_names"] == ["a"] * 10
    assert weights.registry._stored(entry)["class_names"] == ["a"] * 10
    derived = weights.registry.completed(dict(name="x", dataset="mnist"))
    assert derived["class_names"] == [str(i) for i in range(10)]
    assert set(weights.registry._stored(derived)) == {"name", "dataset"}


def test_every_builder_has_a_record():
    """Every zoo builder declares its tiny build, and every paper result
    and untrained entry of the catalog is its record's."""
    for name in zoo.list_models():
        builder = zoo.model_builder(name)
        assert isinstance(builder.tiny, dict), name
        assert len(_catalog.PAPER_RESULTS.get(name, ())) == len(builder.results), name
        assert [e["name"] for e in _catalog.UNTRAINED if e["builder"] == name] == sorted(
            p["name"] for p in builder.pretrained), name
