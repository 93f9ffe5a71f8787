"""The catalog (``keras_gresnet/_catalog.py``: what ``list`` and ``train
--help`` show without Keras, and the tables of models of docs/models.md and
the README) is what ``scripts/release/write_catalog.py`` generates today,
and listing needs neither Keras nor TensorFlow."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import load_script
from keras_gresnet import _catalog, cli, data, training, weights, zoo


def test_catalog_is_generated_from_the_registry_and_the_recipes():
    """``_catalog.py`` (what ``list`` and ``train --help`` show without Keras)
    and the tables of models in ``docs/models.md`` and ``README.md`` are
    exactly what ``scripts/release/write_catalog.py`` generates today."""
    expected = {name: (zoo.model_builder(name).__doc__ or "").strip().splitlines()[0]
                for name in zoo.list_models()}
    assert _catalog.MODELS == expected
    assert _catalog.RECIPES == tuple(training.RECIPES)
    fields = {f.name for f in dataclasses.fields(training.Recipe)} - {"name", "citation"}
    assert set(_catalog.RECIPE_FIELDS) == fields
    assert all(meaning.strip() for meaning in _catalog.RECIPE_FIELDS.values())
    for name in zoo.list_models():  # what train takes by default exists
        builder = zoo.model_builder(name)
        assert builder.default_recipe in training.RECIPES, name
        assert builder.default_dataset in (*data.DATASETS, "imagenet2012"), name
    writer = load_script("scripts/release/write_catalog.py")
    assert Path(_catalog.__file__).read_text() == writer.catalog_text(), (
        "keras_gresnet/_catalog.py is out of date: run python scripts/release/write_catalog.py")
    # docs/models.md's table of models is generated too, one row per builder
    assert writer.DOCS.read_text() == writer.docs_text(), (
        "docs/models.md's table is out of date: run python scripts/release/write_catalog.py")
    rows = [line for line in writer.models_table().splitlines()[2:]]
    assert [row.split("`")[1] for row in rows] == zoo.list_models()
    # and the README's table of the papers' models: every builder with weights in
    # the registry has its row, and the row shows each published file's error
    assert writer.README.read_text() == writer.readme_text(), (
        "README.md's table of models is out of date: run python scripts/release/write_catalog.py")
    rows = {row.split("`")[1]: row
            for row in writer.models_table(paper_models_only=True).splitlines()[2:]}
    for entry in weights.list_weights():
        shown = (f"{entry['test_error_percent']:.2f}%" if entry["status"] == weights.PUBLISHED
                 else "not yet trained")
        if entry.get(weights.RECIPE_OPTIONS) == {"k_decay": True}:  # a variant says which
            shown = f"with k decay {shown}"
        assert shown in rows[entry["builder"]], (entry["name"], rows[entry["builder"]])
    assert "GR Table 3, n=5, 32 layers (CIFAR-10): 6.67%" in rows["gresnet_cifar"]
    # every paper configuration has its figures (a new one is built above, and
    # the catalog is out of date until written)
    assert {name: [dict(c[0]) for c in rows] for name, rows in _catalog.PAPER_CONFIGS.items()} \
        == {name: zoo.model_builder(name).paper_configs for name in zoo.list_models()}


def test_the_catalogs_parameter_counts_are_those_of_a_real_build():
    """``list --build`` prints the catalog's counts; those of every cheap
    paper configuration (at most 32 layers and a million parameters: the
    MLPs of depth 2 to 20, the CIFAR nets n=5, gated and not) equal a build
    of it now."""
    checked = 0
    for name, rows in _catalog.PAPER_CONFIGS.items():
        for arguments, layers, gates, params in rows:
            if layers > 32 or params > 1_000_000:
                continue
            summary = zoo.summarize(zoo.get_model(name, **dict(arguments)))
            assert (summary["depth"], summary["gates"], summary["params"]) == (
                layers, gates, params), (name, arguments)
            checked += 1
    assert checked == 14  # 4 MLP builders x 3 depths, 2 CIFAR nets


def test_train_help_lists_every_recipe_field_recipe_and_dataset(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = capsys.readouterr().out
    for name in _catalog.RECIPE_FIELDS:
        assert f"--{name.replace('_', '-')}" in text
    assert "--learning-rate / --lr" in text
    for name in (*training.RECIPES, *data.DATASETS):
        assert name in text


@pytest.mark.integration
def test_listing_imports_neither_keras_nor_tensorflow():
    code = ("import sys\nfrom keras_gresnet.cli import main\n"
            "assert main(['list']) == 0 and main(['weights', 'list']) == 0\n"
            "assert main(['list', '*cifar*']) == 0 and main(['list', '--build']) == 0\n"
            "bad = sorted(m for m in ('keras', 'tensorflow', 'h5py') if m in sys.modules)\n"
            "assert not bad, bad\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "gresnet_cifar" in result.stdout and "gresnet_mlp20_fashion_mnist" in result.stdout
    assert "36.479M" in result.stdout  # WRN-28-10's parameters, from the catalog
