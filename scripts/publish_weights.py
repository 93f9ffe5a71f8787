"""Publish trained run folders as registry entries
(``keras_gresnet/published_weights.json``) with
their files in ``zoo/weights/``, and list the recipes of the models that
cannot be trained here as "not yet trained".

    python scripts/publish_weights.py zoo/results/fashion_mnist/runs/*-seed0

Each run folder's ``model.keras`` is saved, without optimizer state, to
``zoo/weights/{name}.keras``; its entry records the builder and arguments,
dataset, input shape, preprocessing statistics, class names, the test error
from ``results.json``, the exact training command, parameter count, file size
and sha256, Keras version and date. Entries are replaced by name, so the
script can be run again.
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

from keras_gresnet import cli, data, files, training, weights, zoo  # noqa: E402
from keras_gresnet.layers import ZooModel  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "zoo" / "weights"  # the release assets
# The weights are the output of this package's code, under its licence.
LICENSE = f"{importlib.metadata.metadata('keras-gresnet')['License']} (keras-gresnet's licence)"


def card_fields(entry):
    """The model-card fields of ``entry``: the weights' licence, the
    dataset's terms (the dataset table's), and the epochs and seed of the
    command that trained it."""
    info = data.DATASETS.get(entry["dataset"])
    options = cli.parse_extra(entry["command"].split("#")[0].split()[3:])
    card = dict(license=LICENSE)
    if info is not None and info.terms:
        card["dataset_terms"] = info.terms
    card.update({key: options[key] for key in ("epochs", "seed") if key in options})
    return card

# The papers' models this machine cannot train (no CIFAR, no ImageNet, no GPU);
# what the papers report for them is keras_gresnet.papers' (the cards show it).
NOT_YET_TRAINED = [
    dict(name="gresnet_cifar5_cifar10", builder="gresnet_cifar", builder_kwargs={"n": 5},
         dataset="cifar10", preprocessing="mean",
         command="keras-gresnet train gresnet_cifar --n 5 --dataset cifar10"),
    dict(name="resnet_cifar5_cifar10", builder="resnet_cifar", builder_kwargs={"n": 5},
         dataset="cifar10", preprocessing="mean",
         command="keras-gresnet train resnet_cifar --n 5 --dataset cifar10"),
    dict(name="preact_resnet110_cifar10", builder="preact_resnet110", builder_kwargs={},
         dataset="cifar10", preprocessing="meanstd",
         command="keras-gresnet train preact_resnet110 --dataset cifar10 --recipe "
                 "preact_cifar_he"),
    dict(name="preact_resnet164_cifar10", builder="preact_resnet164", builder_kwargs={},
         dataset="cifar10", preprocessing="meanstd",
         command="keras-gresnet train preact_resnet164 --dataset cifar10 --recipe "
                 "preact_cifar_he"),
    dict(name="preact_resnet1001_cifar10", builder="preact_resnet1001", builder_kwargs={},
         dataset="cifar10", preprocessing="meanstd",
         command="keras-gresnet train preact_resnet1001 --dataset cifar10 --recipe "
                 "preact_cifar_he"),
    dict(name="wide_gresnet28_10_cifar10", builder="wide_gresnet",
         builder_kwargs={"n": 4, "widen_factor": 10}, dataset="cifar10", preprocessing="meanstd",
         command="keras-gresnet train wide_gresnet --n 4 --widen-factor 10 --dataset cifar10"),
    dict(name="wide_gresnet28_10_cifar100", builder="wide_gresnet",
         builder_kwargs={"n": 4, "widen_factor": 10}, dataset="cifar100", preprocessing="meanstd",
         command="keras-gresnet train wide_gresnet --n 4 --widen-factor 10 --dataset cifar100"),
    dict(name="preact_resnet200_imagenet", builder="preact_resnet200", builder_kwargs={},
         dataset="imagenet", input_shape=[224, 224, 3], classes=1000, preprocessing="meanstd",
         command="keras-gresnet train preact_resnet200 --dataset imagenet2012"),
]


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
    # gresnet_mlp + {"depth": 20} -> gresnet_mlp20_fashion_mnist
    name = config["model"] + "".join(str(v) for v in kwargs.values()) + "_" + config["dataset"]
    target = SHIPPED / f"{name}.keras"
    target.parent.mkdir(parents=True, exist_ok=True)
    info = data.DATASETS[config["dataset"]]
    entry = dict(
        name=name, builder=config["model"], builder_kwargs=kwargs, dataset=config["dataset"],
        input_shape=list(info.image_shape), classes=info.num_classes,
        class_names=list(info.class_names),
        preprocessing=config["data"]["preprocessing"],
        test_error_percent=round(results["test_error_percent"], 4),
        command=recorded_command(config), params=results["params"], file=target.name,
        keras_version=config["versions"]["keras"], date=today, status=weights.PUBLISHED,
        license=LICENSE, dataset_terms=info.terms, epochs=config["recipe"]["epochs"],
        seed=config["seed"],
    )
    save_published(zoo.resolve(run).model, entry, target)
    return {**entry, "size": target.stat().st_size, "sha256": weights.sha256_of(target)}


def save_published(model, entry, target):
    """``model`` saved to ``target`` as the published file of ``entry``: a
    ``ZooModel`` (its builder and arguments in its config) carrying the
    entry's card (class names, preprocessing, source, licence: everything
    but the file's own digest, which the registry holds), without optimizer
    state; ``keras.saving.load_model`` gives it back with its card."""
    card = {k: v for k, v in zoo.resolver.entry_card(entry).items() if k != "weights_sha256"}
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


def untrained_entry(spec):
    """The registry entry of a ``NOT_YET_TRAINED`` model: its architecture,
    dataset and recipe, no file."""
    info = data.DATASETS.get(spec["dataset"])
    shape = spec.get("input_shape") or list(info.image_shape)
    classes = spec.get("classes") or info.num_classes
    params = zoo.summarize(zoo.get_model(spec["builder"], **spec["builder_kwargs"],
                                         input_shape=tuple(shape), classes=classes))["params"]
    keras.backend.clear_session()
    return dict(name=spec["name"], builder=spec["builder"],
                builder_kwargs=spec["builder_kwargs"], dataset=spec["dataset"],
                input_shape=shape, classes=classes,
                class_names=list(info.class_names) if info else [],
                preprocessing={"method": spec["preprocessing"]}, command=spec["command"],
                params=params, status=weights.NOT_TRAINED)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="finished run folders")
    parser.add_argument("--untrained", action="store_true",
                        help="(re)write the 'not yet trained' entries too")
    parser.add_argument("--republish", action="store_true",
                        help="save every published file again as a ZooModel carrying its "
                        "card (weights identical to the bit, checked); size and sha256 updated")
    parser.add_argument("--cards", action="store_true",
                        help="fill the model-card fields (licence, dataset terms, epochs, "
                        "seed) of every published entry from its command and dataset")
    args = parser.parse_args(argv)
    entries = {e["name"]: e for e in weights.list_weights()}
    today = datetime.date.today().isoformat()
    for run in args.runs:
        entry = published_entry(run, today)
        entries[entry["name"]] = entry
        print(f"published {entry['name']}: {entry['test_error_percent']:.2f}% "
              f"({entry['size']} bytes)", file=sys.stderr)
    if args.untrained:
        for spec in NOT_YET_TRAINED:
            entries[spec["name"]] = untrained_entry(spec)
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


if __name__ == "__main__":
    main()
