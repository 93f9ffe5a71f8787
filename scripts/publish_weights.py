"""Publish trained run folders as registry entries (``zoo/weights.json``) with
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
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

from keras_gresnet import _io, data, training, weights, zoo  # noqa: E402

CLASS_NAMES = {
    "fashion_mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                      "Shirt", "Sneaker", "Bag", "Ankle boot"],
    "mnist": [str(i) for i in range(10)],
    "cifar10": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                "ship", "truck"],
}
# The papers' models this machine cannot train (no CIFAR, no ImageNet, no GPU):
# (name, builder, builder_kwargs, dataset, input_shape, classes, recipe, command).
NOT_YET_TRAINED = [
    ("gresnet_cifar5_cifar10", "gresnet_cifar", {"n": 5}, "cifar10", [32, 32, 3], 10, "mean",
     "keras-gresnet train gresnet_cifar --n 5 --dataset cifar10  # GR Table 3: 6.67%"),
    ("resnet_cifar5_cifar10", "resnet_cifar", {"n": 5}, "cifar10", [32, 32, 3], 10, "mean",
     "keras-gresnet train resnet_cifar --n 5 --dataset cifar10  # GR Table 3: 7.16%"),
    ("preact_resnet110_cifar10", "preact_resnet110", {}, "cifar10", [32, 32, 3], 10, "mean",
     "keras-gresnet train preact_resnet110 --dataset cifar10 --recipe preact_cifar_he  # HE: 6.37%"),
    ("preact_resnet164_cifar10", "preact_resnet164", {}, "cifar10", [32, 32, 3], 10, "mean",
     "keras-gresnet train preact_resnet164 --dataset cifar10 --recipe preact_cifar_he  # HE: 5.46%"),
    ("preact_resnet1001_cifar10", "preact_resnet1001", {}, "cifar10", [32, 32, 3], 10, "mean",
     "keras-gresnet train preact_resnet1001 --dataset cifar10 --recipe preact_cifar_he  # HE: 4.92%"),
    ("wide_gresnet28_10_cifar10", "wide_gresnet", {"n": 4, "widen_factor": 10}, "cifar10",
     [32, 32, 3], 10, "meanstd",
     "keras-gresnet train wide_gresnet --n 4 --widen-factor 10 --dataset cifar10  # GR: 3.65%"),
    ("wide_gresnet28_10_cifar100", "wide_gresnet", {"n": 4, "widen_factor": 10}, "cifar100",
     [32, 32, 3], 100, "meanstd",
     "keras-gresnet train wide_gresnet --n 4 --widen-factor 10 --dataset cifar100  # GR: 18.27%"),
    ("preact_resnet200_imagenet", "preact_resnet200", {}, "imagenet", [224, 224, 3], 1000,
     "mean", "HE's ImageNet recipe (lr 0.1, /10 at epochs 30 and 60, batch 256): no ImageNet "
     "pipeline in keras_gresnet.data yet  # HE: 20.7% top-1 at 320 crop"),
]


def train_command(config):
    args = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in config["model_kwargs"].items())
    return (f"keras-gresnet train {config['model']} {args} --dataset {config['dataset']} "
            f"--epochs {config['recipe']['epochs']} --seed {config['seed']}").replace("  ", " ")


def published_entry(run, today):
    config = json.loads((run / "config.json").read_text())
    results = json.loads((run / "results.json").read_text())
    if "test_accuracy" not in results:
        raise ValueError(f"{run}: not a finished run ({results})")
    kwargs = config["model_kwargs"]
    # gresnet_mlp + {"depth": 20} -> gresnet_mlp20_fashion_mnist
    name = config["model"] + "".join(str(v) for v in kwargs.values()) + "_" + config["dataset"]
    target = weights.SHIPPED_DIR / f"{name}.keras"
    target.parent.mkdir(parents=True, exist_ok=True)
    with _io.atomic_path(target) as tmp:  # weights only: no optimizer state
        training.inference_copy(keras.saving.load_model(run / "model.keras")).save(tmp)
    info = data.DATASETS[config["dataset"]]
    return dict(
        name=name, builder=config["model"], builder_kwargs=kwargs, dataset=config["dataset"],
        input_shape=list(info.image_shape), classes=info.num_classes,
        class_names=CLASS_NAMES[config["dataset"]],
        preprocessing=config["data"]["preprocessing"],
        test_error_percent=round(results["test_error_percent"], 4),
        command=train_command(config), params=results["params"], file=target.name,
        size=target.stat().st_size, sha256=weights.sha256_of(target),
        keras_version=config["versions"]["keras"], date=today, status=weights.PUBLISHED,
    )


def untrained_entry(name, builder, kwargs, dataset, shape, classes, method, command):
    params = zoo.summarize(zoo.get_model(builder, **kwargs, input_shape=tuple(shape),
                                         classes=classes))["params"]
    keras.backend.clear_session()
    return dict(name=name, builder=builder, builder_kwargs=kwargs, dataset=dataset,
                input_shape=shape, classes=classes, class_names=CLASS_NAMES.get(dataset, []),
                preprocessing={"method": method}, command=command, params=params,
                status=weights.NOT_TRAINED)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="finished run folders")
    parser.add_argument("--untrained", action="store_true",
                        help="(re)write the 'not yet trained' entries too")
    args = parser.parse_args(argv)
    path = Path(weights.REGISTRY_FILE)
    entries = {e["name"]: e for e in json.loads(path.read_text())} if path.exists() else {}
    today = datetime.date.today().isoformat()
    for run in args.runs:
        entry = published_entry(run, today)
        entries[entry["name"]] = entry
        print(f"published {entry['name']}: {entry['test_error_percent']:.2f}% "
              f"({entry['size']} bytes)", file=sys.stderr)
    if args.untrained:
        for spec in NOT_YET_TRAINED:
            entries[spec[0]] = untrained_entry(*spec)
    _io.write_text(path, json.dumps(sorted(entries.values(), key=lambda e: e["name"]),
                                    indent=2) + "\n")
    weights.list_weights()  # the registry reads back and validates


if __name__ == "__main__":
    main()
