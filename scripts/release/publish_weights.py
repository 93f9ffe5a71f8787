"""Publish trained run folders as registry entries
(``keras_gresnet/published_weights.json``) with
their files in ``zoo/weights/``. (The weights a model's record names but no
run has produced are listed from the record: ``register_model(pretrained=...)``.)

    python scripts/release/publish_weights.py zoo/results/fashion_mnist/runs/*-seed0

Each run folder's ``model.keras`` is saved, without optimizer state, to
``zoo/weights/{name}.keras``; its entry records the builder and arguments,
dataset, input shape, preprocessing statistics, class names, the test error
from ``results.json``, the exact training command, parameter count, file size
and sha256, Keras version and date; a run trained with a variant's option
(GR's k decay) is named and marked as that variant
(``gresnet_cifar5_k_decay_fashion_mnist``, ``recipe_options``), asked for by
its name, never by a dataset name. Entries are replaced by name, so the
script can be run again. The model cards (``zoo/cards``), the catalog and
the models tables are then written anew from the registry.
"""

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

from keras_gresnet import cli, data, files, training, weights, zoo  # noqa: E402
from keras_gresnet.layers import ZooModel  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[2] / "zoo" / "weights"  # the release assets


def card_fields(entry):
    """The model-card fields of ``entry`` its command gives: the epochs and
    seed it was trained with (licence and dataset terms are the registry's:
    :func:`keras_gresnet.weights.registry.completed`)."""
    options = cli.parse_extra(entry["command"].split("#")[0].split()[3:])
    return {key: options[key] for key in ("epochs", "seed") if key in options}


def recorded_command(config):
    """The command that trained a run, as it ran: a script's recorded argv
    with its backend (``KERAS_BACKEND=torch python scripts/...``), else the
    ``keras-gresnet train`` line of its config."""
    words = config.get("command") or []
    if words and words[0].startswith("scripts/"):
        backend = config.get("versions", {}).get("backend") or "tensorflow"
        return f"KERAS_BACKEND={backend} python " + " ".join(words)
    return cli.train_command(config)


def published_entry(run, today):
    config = json.loads((run / "config.json").read_text())
    results = json.loads((run / "results.json").read_text())
    if "test_accuracy" not in results:
        raise ValueError(f"{run}: not a finished run ({results})")
    kwargs = config["model_kwargs"]
    # A variant's training options (GR's k decay): part of its name and entry.
    options = {option: True for option in weights.VARIANTS if config["recipe"].get(option)}
    name = zoo.builders.weights_name(config["model"], kwargs, config["dataset"], options)
    target = SHIPPED / f"{name}.keras"
    target.parent.mkdir(parents=True, exist_ok=True)
    info = data.DATASETS[config["dataset"]]
    entry = dict(
        name=name, builder=config["model"], builder_kwargs=kwargs, dataset=config["dataset"],
        input_shape=list(info.image_shape), classes=info.num_classes,
        preprocessing=config["data"]["preprocessing"],
        test_error_percent=round(results["test_error_percent"], 4),
        command=recorded_command(config), params=results["params"], file=target.name,
        keras_version=config["versions"]["keras"], date=today, status=weights.PUBLISHED,
        epochs=config["recipe"]["epochs"],
        seed=config["seed"],
        **({weights.RECIPE_OPTIONS: options} if options else {}),
    )
    save_published(zoo.resolve(run).model, entry, target)
    return {**entry, "size": target.stat().st_size, "sha256": weights.sha256_of(target)}


def save_published(model, entry, target):
    """``model`` saved to ``target`` as the published file of ``entry``: a
    ``ZooModel`` (its builder and arguments in its config) carrying the
    entry's card (class names, preprocessing, source, licence: everything
    but the file's own digest, which the registry holds), without optimizer
    state; ``keras.saving.load_model`` gives it back with its card."""
    # the entry as the registry gives it back: with the fields it derives
    # (class names, licence, the dataset's terms), which a new entry lacks
    card = {k: v for k, v in zoo.cards.entry_card(weights.registry.completed(entry)).items()
            if k != "weights_sha256"}
    model = zoo.resolver._as_zoo_model(model, *zoo.resolver._entry_builder(entry), card) \
        if not isinstance(model, ZooModel) else model
    if not isinstance(model, ZooModel):
        raise ValueError(f"{entry['name']}: its builder does not rebuild the model exactly")
    model.remember(entry["builder"], model.builder_kwargs, card)
    with files.atomic_path(target) as tmp:  # weights only: no optimizer state
        training.inference_copy(model).save(tmp)


def republish(entry):
    """Save a published entry's file again as :func:`save_published` writes
    it, its weights identical to the bit (checked array by array); returns
    the entry with the new file's size and sha256."""
    target = SHIPPED / entry["file"]
    old = zoo.resolve(entry["name"]).model
    before = [w.copy() for w in old.get_weights()]
    save_published(old, entry, target)
    new = keras.saving.load_model(target, compile=False, safe_mode=True)
    after = new.get_weights()
    if not (isinstance(new, ZooModel) and new.card.get("class_names") == entry["class_names"]):
        raise RuntimeError(f"{target}: the saved file does not carry its card")
    if len(before) != len(after) or not all(
            a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
            for a, b in zip(before, after)):
        raise RuntimeError(f"{target}: the weights changed when saved again")
    earlier = [*entry.get("earlier_files", []),
               {"sha256": entry["sha256"], "size": entry["size"]}]
    return {**entry, "size": target.stat().st_size, "sha256": weights.sha256_of(target),
            "keras_version": keras.__version__, "earlier_files": earlier}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="finished run folders")
    parser.add_argument("--republish", action="store_true",
                        help="save every published file again as a ZooModel carrying its "
                        "card (weights identical to the bit, checked); size and sha256 updated")
    parser.add_argument("--cards", action="store_true",
                        help="fill the model-card fields epochs and seed of every published "
                        "entry from its command")
    args = parser.parse_args(argv)
    entries = {e["name"]: e for e in weights.list_weights()}
    today = datetime.date.today().isoformat()
    for run in args.runs:
        entry = published_entry(run, today)
        entries[entry["name"]] = entry
        print(f"published {entry['name']}: {entry['test_error_percent']:.2f}% "
              f"({entry['size']} bytes)", file=sys.stderr)
    if args.republish:
        for name, entry in entries.items():
            if entry["status"] == weights.PUBLISHED:
                entries[name] = republish(entry)
                print(f"republished {name}: {entries[name]['sha256'][:12]}", file=sys.stderr)
    if args.cards:
        for name, entry in entries.items():
            if entry["status"] == weights.PUBLISHED:
                entries[name] = {**entry, **card_fields(entry)}
    weights.write_registry(list(entries.values()))
    # What follows from the registry: the model cards, the catalog and the tables.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import write_catalog
    import write_model_cards

    write_model_cards.main([])
    write_catalog.main([])


if __name__ == "__main__":
    main()
