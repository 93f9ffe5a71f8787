"""Few-shot transfer between MNIST and Fashion-MNIST: finetune() against training from scratch.

For each depth (``--depths``), direction (a published ``gresnet_mlp`` of one
dataset fine-tuned on the other), number of labelled training images per
class (``--shots``) and seed (``--seeds``: it draws the images and seeds the
training), three nets are trained on the same seeded images, pixels / 255,
and tested on the target's full 10,000-image test set:

- old: :func:`keras_gresnet.finetune.finetune` with the defaults it had
  before (Keras' guide: Adam, batch 32, the head 10 epochs at 1e-3, then
  everything but BatchNorm 10 epochs at 1e-5, constant rates);
- new: ``finetune()`` with no arguments (its current defaults, read from its
  signature);
- scratch: the same architecture, randomly initialised, trained with GR's
  optimizer and learning rate (Keras 1 Nadam, 0.002, the ``gr_mnist``
  recipe) for the new defaults' budget: ``head_epochs + full_epochs`` passes
  over the same images at finetune's default batch size, i.e. the same
  steps. (GR's batch of 128 would give 1 step per epoch on 100 images, and
  was worse at the same number of epochs.)

Prints a Markdown table of the test error, mean and range over the seeds,
and writes it (with the command) to ``zoo/results/finetune/table.md``. Every
finished net's error is kept in ``results.json`` beside it, keyed by
everything that defines the net (its settings included), so a killed run
resumes where it stopped and a change of defaults retrains only the new
column::

    python scripts/finetune_example.py                      # the table
    python scripts/finetune_example.py --depths 2 --shots 100 --seeds 0
"""

import argparse
import inspect
import json
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_gresnet import data, files, finetune, training, zoo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DIRECTIONS = {  # name -> (pretrained on, fine-tuned and tested on)
    "fashion_mnist_to_mnist": ("fashion_mnist", "mnist"),
    "mnist_to_fashion_mnist": ("mnist", "fashion_mnist"),
}
TITLES = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}
CLASSES = 10
# finetune()'s defaults before they were measured: Keras' guide's.
OLD_DEFAULTS = dict(head_epochs=10, full_epochs=10, head_lr=1e-3, full_lr=1e-5,
                    optimizer="adam", batch_size=32, schedule="constant")
SETTINGS = tuple(OLD_DEFAULTS)
METHODS = ("old", "new", "scratch")
SCRATCH_RECIPE = "gr_mnist"


def new_defaults():
    """finetune()'s current defaults, as the ``SETTINGS`` of OLD_DEFAULTS."""
    parameters = inspect.signature(finetune.finetune).parameters
    return {name: parameters[name].default for name in SETTINGS}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 20],
                        help="gresnet_mlp depths with published weights (2, 10, 20, 50, 100)")
    parser.add_argument("--shots", type=int, nargs="+", default=[10, 100],
                        help="labelled training images per class")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--directions", nargs="+", choices=list(DIRECTIONS),
                        default=list(DIRECTIONS))
    parser.add_argument("--out", type=Path, default=ROOT / "zoo" / "results" / "finetune",
                        help="folder of table.md and results.json")
    parser.add_argument("--fresh", action="store_true",
                        help="retrain every net instead of reusing results.json")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if min(args.shots) < 1:
        parser.error("--shots must be >= 1")
    return args


class Data:
    """The datasets' splits as float arrays (pixels / 255), loaded once."""

    def __init__(self, data_dir):
        self.data_dir, self.splits = data_dir, {}

    def __call__(self, name, split):
        if (name, split) not in self.splits:
            images, labels = data.load(name, split, data_dir=self.data_dir)
            self.splits[name, split] = (images.astype("float32") / 255, labels)
        return self.splits[name, split]

    def shots(self, name, shots, seed):
        """``shots`` seeded random training images of each class."""
        images, labels = self(name, "train")
        rng = np.random.default_rng(seed)
        index = np.concatenate([
            rng.choice(np.flatnonzero(labels == c), shots, replace=False)
            for c in range(CLASSES)
        ])
        return images[index], labels[index]


def test_error(model, images, labels):
    predicted = model.predict(images, batch_size=1000, verbose=0).argmax(axis=1)
    return float(np.mean(predicted != labels))


def scratch(depth, x, y, epochs, batch_size):
    """``gresnet_mlp`` from random weights, trained with GR's recipe (its
    optimizer and learning rate) for ``epochs`` passes at ``batch_size``."""
    recipe = training.get_recipe(SCRATCH_RECIPE, epochs=epochs, batch_size=batch_size)
    model = recipe.apply_to(zoo.gresnet_mlp(depth=depth, input_shape=x.shape[1:],
                                            classes=CLASSES))
    model.compile(optimizer=recipe.optimizer(-(-len(y) // batch_size)),
                  loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, shuffle=True)
    return model


def cell_key(depth, direction, shots, seed, method, settings):
    return json.dumps(dict(depth=depth, direction=direction, shots=shots, seed=seed,
                           method=method, settings=settings), sort_keys=True)


def method_settings(method, defaults):
    if method == "old":
        return OLD_DEFAULTS
    if method == "new":
        return defaults
    return dict(recipe=SCRATCH_RECIPE, epochs=defaults["head_epochs"] + defaults["full_epochs"],
                batch_size=defaults["batch_size"])


def train_and_test(method, settings, depth, target, shots, seed, sets, pretrained):
    """The test error of one net (``method`` with ``settings``)."""
    x, y = sets.shots(target, shots, seed)
    keras.utils.set_random_seed(seed)
    if method == "old":
        model, _ = finetune.finetune(pretrained, (x, y), classes=CLASSES, **settings)
    elif method == "new":
        model, _ = finetune.finetune(pretrained, (x, y), classes=CLASSES)  # no arguments
    else:
        model = scratch(depth, x, y, settings["epochs"], settings["batch_size"])
    error = test_error(model, *sets(target, "test"))
    keras.backend.clear_session(free_memory=False)
    return error


def run(args):
    defaults = new_defaults()
    sets = Data(args.data_dir)
    path = args.out / "results.json"
    results = {} if args.fresh or not path.is_file() else json.loads(path.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    errors, reused, trained = {}, 0, 0
    for depth in args.depths:
        for direction in args.directions:
            source, target = DIRECTIONS[direction]
            pretrained = None
            for shots in args.shots:
                for seed in args.seeds:
                    for method in METHODS:
                        settings = method_settings(method, defaults)
                        key = cell_key(depth, direction, shots, seed, method, settings)
                        if key not in results:
                            if pretrained is None:  # published weights, loaded offline
                                pretrained = zoo.gresnet_mlp(
                                    depth=depth, weights=f"gresnet_mlp{depth}_{source}")
                            start = time.perf_counter()
                            results[key] = train_and_test(method, settings, depth, target,
                                                          shots, seed, sets, pretrained)
                            files.write_json(path, results)  # resumable after every net
                            trained += 1
                            print(f"d={depth} {direction} {shots} shots seed {seed} "
                                  f"{method}: {100 * results[key]:.2f}% "
                                  f"({time.perf_counter() - start:.0f} s)", flush=True)
                        else:
                            reused += 1
                        errors.setdefault((depth, direction, shots, method), []).append(
                            results[key])
    return errors, defaults, reused, trained


def spread(values):
    percent = 100 * np.asarray(values)
    return f"{percent.mean():.1f} ({percent.min():.1f}-{percent.max():.1f})"


def table(args, errors, defaults):
    seeds = ", ".join(map(str, args.seeds))
    lines = [
        f"Test error (%) on the target's 10,000 test images, mean (min-max) over seeds "
        f"{seeds}; new - scratch: the mean difference in points and its worst seed.",
        "",
        "| depth | pretrained on -> fine-tuned on | shots per class | old defaults "
        "| new defaults | scratch | new - scratch (worst seed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for depth in args.depths:
        for direction in args.directions:
            source, target = DIRECTIONS[direction]
            for shots in args.shots:
                old, new, base = (errors[depth, direction, shots, m] for m in METHODS)
                gap = 100 * (np.asarray(new) - np.asarray(base))
                lines.append(
                    f"| {depth} | {TITLES[source]} -> {TITLES[target]} | {shots} "
                    f"| {spread(old)} | {spread(new)} | {spread(base)} "
                    f"| {gap.mean():+.1f} ({gap.max():+.1f}) |"
                )
    budget = defaults["head_epochs"] + defaults["full_epochs"]
    lines += [
        "",
        f"- old defaults: `finetune({', '.join(f'{k}={v!r}' for k, v in OLD_DEFAULTS.items())})`.",
        f"- new defaults: `finetune()` with no arguments, today "
        f"`{', '.join(f'{k}={v!r}' for k, v in defaults.items())}`.",
        f"- scratch: `gresnet_mlp` from random weights, GR's optimizer and learning rate "
        f"(recipe `{SCRATCH_RECIPE}`: Keras 1 Nadam, lr 0.002), {budget} epochs at batch "
        f"{defaults['batch_size']}: the new defaults' epochs and steps on the same images.",
        "- every net: `gresnet_mlp<depth>_<source>` published weights (a fresh 10-class "
        "head), the seed's `shots` random training images per class, pixels / 255; "
        "BatchNorm frozen while fine-tuning (`keras_gresnet.finetune`).",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    tf.config.experimental.enable_op_determinism()
    errors, defaults, reused, trained = run(args)
    wall = time.perf_counter() - start
    command = shlex.join(["python", "scripts/finetune_example.py",
                          *(sys.argv[1:] if argv is None else argv)])
    text = table(args, errors, defaults)
    print(text)
    footer = (f"\nMade by `{command}` in {wall / 60:.1f} min ({trained} nets trained, "
              f"{reused} reused from results.json), on {os.cpu_count()} CPU cores.\n")
    print(footer)
    files.write_text(args.out / "table.md", "# Few-shot fine-tuning against training from "
                     "scratch\n\n" + text + footer)


if __name__ == "__main__":
    main()
