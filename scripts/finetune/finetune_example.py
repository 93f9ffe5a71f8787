"""Few-shot transfer between MNIST and Fashion-MNIST: finetune() against training from scratch.

For each net (``--net``: GR's MLP ``gresnet_mlp`` at each of ``--depths``,
or GR's CIFAR conv net ``gresnet_cifar`` n=5), direction (a published net of
one dataset fine-tuned on the other; the conv net is published on
Fashion-MNIST only), number of labelled training images per class
(``--shots``) and seed (``--seeds``: it draws the images and seeds the
training), up to three nets (``--methods``) are trained on the same seeded
images and tested on the target's full 10,000-image test set:

- old: :func:`keras_gresnet.finetune.finetune` with the defaults it had
  before (Keras' guide: Adam, batch 32, the head 10 epochs at 1e-3, then
  everything but BatchNorm 10 epochs at 1e-5, constant rates);
- new: ``finetune()`` with no arguments (its current defaults, read from its
  signature);
- scratch: the same architecture, randomly initialised, trained with its
  paper's optimizer and learning rate (the MLP: GR's Keras 1 Nadam at 0.002,
  the ``gr_mnist`` recipe; the conv net: GR's CIFAR SGD, Nesterov 0.9, lr
  0.1 /10 at 50% and 75%, weight decay 1e-4, the ``preact_mnist`` recipe)
  for the new defaults' budget: ``head_epochs + full_epochs`` passes over
  the same images at finetune's default batch size, i.e. the same steps.
  (GR's batch of 128 would give 1 step per epoch on 100 images, and was
  worse at the same number of epochs.)

The MLPs take pixels / 255 (their weights' preprocessing); the conv net
takes raw pixels, which ``finetune`` normalises with the published weights'
statistics (mean subtraction) and the scratch net with its few images' mean.

Prints a Markdown table of the test error, mean and range over the seeds,
and writes it (with the command) to ``zoo/results/finetune/table.md``
(``zoo/results/finetune_conv/`` for the conv net). Every
finished net's error is kept in ``results.json`` beside it, keyed by
everything that defines the net (its settings included), so a killed run
resumes where it stopped and a change of defaults retrains only the new
column. Each net also keeps the SHA-256 of its weights, and ``--rebuild``
retrains the selected nets from nothing and checks that each gives the
recorded error and weights bit for bit (the same machine kind: another CPU's
float rounding may differ), so the fine-tuned nets need not be committed;
``--save-nets DIR`` keeps them as ``.keras`` files::

    python scripts/finetune/finetune_example.py                      # the MLPs' table
    python scripts/finetune/finetune_example.py --depths 2 --shots 100 --seeds 0
    python scripts/finetune/finetune_example.py --net gresnet_cifar --methods new scratch
    python scripts/finetune/finetune_example.py --net gresnet_cifar --methods new --shots 10 \
        --seeds 0 --rebuild --save-nets nets/
"""

import argparse
import hashlib
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

ROOT = Path(__file__).resolve().parents[2]
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
# The nets: builder, the size argument and sizes with published weights, the
# scratch recipe, the directions published, and whether they take raw pixels.
NETS = {
    "gresnet_mlp": dict(size="depth", sizes=(2, 10, 20, 50, 100), recipe="gr_mnist",
                        directions=tuple(DIRECTIONS), raw=False),
    "gresnet_cifar": dict(size="n", sizes=(5,), recipe="preact_mnist",
                          directions=("fashion_mnist_to_mnist",), raw=True),
}


def new_defaults(net):
    """finetune()'s current defaults for ``net``, as the ``SETTINGS`` of
    OLD_DEFAULTS (``None`` is the net's kind's: finetune.default_full_lr and
    finetune.default_full_epochs, asked of the net built without values)."""
    parameters = inspect.signature(finetune.finetune).parameters
    defaults = {name: parameters[name].default for name in SETTINGS}
    with keras.StatelessScope():  # the kind of net only: no weights needed
        model = zoo.get_model(net, **{NETS[net]["size"]: NETS[net]["sizes"][0]})
    for name, default in (("full_lr", finetune.default_full_lr),
                          ("full_epochs", finetune.default_full_epochs)):
        if defaults[name] is None:
            defaults[name] = default(model)
    return defaults


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--net", choices=list(NETS), default="gresnet_mlp")
    parser.add_argument("--depths", type=int, nargs="+", default=None,
                        help="gresnet_mlp depths with published weights (2, 10, 20, 50, 100; "
                        "default 2 20); the conv net is n=5")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--shots", type=int, nargs="+", default=[10, 100],
                        help="labelled training images per class")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--directions", nargs="+", choices=list(DIRECTIONS), default=None,
                        help="default: every direction the net is published for")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder of table.md and results.json (default "
                        "zoo/results/finetune, finetune_conv for the conv net)")
    parser.add_argument("--fresh", action="store_true",
                        help="retrain every net instead of reusing results.json")
    parser.add_argument("--rebuild", action="store_true",
                        help="retrain the selected nets and check each against its "
                        "recorded error and weights (an entry without weights gets them "
                        "when the error is the same; nothing else changes)")
    parser.add_argument("--save-nets", type=Path, default=None,
                        help="save every net trained in this run as DIR/<cell>.keras")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    net = NETS[args.net]
    if args.rebuild and args.fresh:
        parser.error("--rebuild checks the recorded nets; --fresh replaces them: give one")
    args.sizes = args.depths or ([2, 20] if args.net == "gresnet_mlp" else list(net["sizes"]))
    args.directions = args.directions or list(net["directions"])
    args.out = args.out or ROOT / "zoo" / "results" / (
        "finetune" if args.net == "gresnet_mlp" else "finetune_conv")
    if min(args.shots) < 1:
        parser.error("--shots must be >= 1")
    unpublished = [s for s in args.sizes if s not in net["sizes"]]
    if unpublished:
        parser.error(f"{args.net} has published weights at {net['size']} in {net['sizes']}, "
                     f"not {unpublished}")
    if set(args.directions) - set(net["directions"]):
        parser.error(f"{args.net} is published for {', '.join(net['directions'])} only")
    return args


class Data:
    """The datasets' splits as float arrays (pixels / 255, or the raw 0-255
    values with ``raw``), loaded once."""

    def __init__(self, data_dir, raw=False):
        self.data_dir, self.splits, self.raw = data_dir, {}, raw

    def __call__(self, name, split):
        if (name, split) not in self.splits:
            images, labels = data.load(name, split, data_dir=self.data_dir)
            images = images.astype("float32")
            self.splits[name, split] = (images if self.raw else images / 255, labels)
        return self.splits[name, split]

    def shot_index(self, name, shots, seed):
        """The training-set positions of :meth:`shots`' images."""
        labels = self(name, "train")[1]
        rng = np.random.default_rng(seed)
        return np.concatenate([
            rng.choice(np.flatnonzero(labels == c), shots, replace=False)
            for c in range(CLASSES)
        ])

    def shots(self, name, shots, seed):
        """``shots`` seeded random training images of each class."""
        images, labels = self(name, "train")
        index = self.shot_index(name, shots, seed)
        return images[index], labels[index]


def test_error(model, images, labels):
    predicted = model.predict(images, batch_size=1000, verbose=0).argmax(axis=1)
    return float(np.mean(predicted != labels))


def build(net, size, **kwargs):
    return zoo.get_model(net, **{NETS[net]["size"]: size}, **kwargs)


def scratch(net, size, x, y, epochs, batch_size):
    """``net`` from random weights, trained with its paper's recipe (its
    optimizer, learning rate and schedule, weight decay) for ``epochs``
    passes at ``batch_size``; a conv net normalises its raw pixels by their
    mean."""
    recipe = training.get_recipe(NETS[net]["recipe"], epochs=epochs, batch_size=batch_size)
    extra = dict(include_preprocessing=dict(method="mean", mean=[float(x.mean()) / 255],
                                            std=[1.0])) if NETS[net]["raw"] else {}
    model = recipe.apply_to(build(net, size, input_shape=x.shape[1:], classes=CLASSES, **extra))
    model.compile(optimizer=recipe.optimizer(-(-len(y) // batch_size)),
                  loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, shuffle=True)
    return model


def cell_key(net, size, direction, shots, seed, method, settings):
    cell = dict(direction=direction, shots=shots, seed=seed, method=method, settings=settings)
    if net == "gresnet_mlp":  # the MLPs' keys as they were first written
        cell["depth"] = size
    else:
        cell.update(net=net, size=size)
    return json.dumps(cell, sort_keys=True)


def method_settings(net, method, defaults):
    if method == "old":
        return OLD_DEFAULTS
    if method == "new":
        return defaults
    return dict(recipe=NETS[net]["recipe"],
                epochs=defaults["head_epochs"] + defaults["full_epochs"],
                batch_size=defaults["batch_size"])


def weights_digest(model):
    """SHA-256 of ``model``'s weights, in order, as float32 bytes."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(weight),
                                           dtype="float32").tobytes())
    return digest.hexdigest()


def recorded(value):
    """A results.json value as ``(error, weights digest or None)``: the first
    tables kept the error alone."""
    return (value, None) if isinstance(value, float) else (value["error"],
                                                           value["weights_sha256"])


def train_and_test(method, settings, net, size, target, shots, seed, sets, pretrained,
                   save=None):
    """The test error and weights digest of one net (``method`` with
    ``settings``), saved as ``save`` (a ``.keras`` path) if given."""
    x, y = sets.shots(target, shots, seed)
    keras.utils.set_random_seed(seed)
    if method == "old":
        model, _ = finetune.finetune(pretrained, (x, y), classes=CLASSES, **settings)
    elif method == "new":
        model, _ = finetune.finetune(pretrained, (x, y), classes=CLASSES)  # no arguments
    else:
        model = scratch(net, size, x, y, settings["epochs"], settings["batch_size"])
    error = test_error(model, *sets(target, "test"))
    digest = weights_digest(model)
    if save is not None:
        save.parent.mkdir(parents=True, exist_ok=True)
        model.save(save)
    keras.backend.clear_session(free_memory=False)
    return dict(error=error, weights_sha256=digest)


def run(args):
    net = args.net
    defaults = new_defaults(net)
    sets = Data(args.data_dir, raw=NETS[net]["raw"])
    path = args.out / "results.json"
    results = {} if args.fresh or not path.is_file() else json.loads(path.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    errors, reused, trained, differ = {}, 0, 0, []
    for size in args.sizes:
        for direction in args.directions:
            source, target = DIRECTIONS[direction]
            pretrained = None
            for shots in args.shots:
                for seed in args.seeds:
                    for method in args.methods:
                        settings = method_settings(net, method, defaults)
                        key = cell_key(net, size, direction, shots, seed, method, settings)
                        name = f"{net}{size}_{direction}_{shots}shots_seed{seed}_{method}"
                        if key not in results or args.rebuild:
                            if pretrained is None:  # published weights, loaded offline
                                pretrained = build(net, size, weights=f"{net}{size}_{source}")
                            start = time.perf_counter()
                            new = train_and_test(
                                method, settings, net, size, target, shots, seed, sets,
                                pretrained, save=args.save_nets and
                                args.save_nets / f"{name}.keras")
                            trained += 1
                            print(f"{name}: {100 * new['error']:.2f}% "
                                  f"({time.perf_counter() - start:.0f} s)", flush=True)
                            if key not in results:
                                results[key] = new
                                files.write_json(path, results)  # resumable after every net
                            else:  # --rebuild: the recorded net again?
                                error, digest = recorded(results[key])
                                same = new["error"] == error and digest in (
                                    None, new["weights_sha256"])
                                print(f"  {'rebuilt exactly' if same else 'DIFFERS'}: error "
                                      f"{100 * error:.2f}% recorded, weights "
                                      + ("not recorded" if digest is None else
                                         "equal" if digest == new["weights_sha256"]
                                         else "different"), flush=True)
                                if not same:
                                    differ.append(name)
                                elif digest is None:  # an error-only entry: now its weights too
                                    results[key] = new
                                    files.write_json(path, results)
                        else:
                            reused += 1
                        errors.setdefault((size, direction, shots, method), []).append(
                            recorded(results[key])[0])
    return errors, defaults, reused, trained, differ


def spread(values):
    if values is None:
        return "-"
    percent = 100 * np.asarray(values)
    return f"{percent.mean():.1f} ({percent.min():.1f}-{percent.max():.1f})"


def table(args, errors, defaults):
    seeds = ", ".join(map(str, args.seeds))
    lines = [
        f"Test error (%) on the target's 10,000 test images, mean (min-max) over seeds "
        f"{seeds}; new - scratch: the mean difference in points and its worst seed.",
        "",
        f"| {'depth' if args.net == 'gresnet_mlp' else 'net'} | pretrained on -> "
        f"fine-tuned on | shots per class | old defaults | new defaults | scratch "
        f"| new - scratch (worst seed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in args.sizes:
        for direction in args.directions:
            source, target = DIRECTIONS[direction]
            for shots in args.shots:
                old, new, base = (errors.get((size, direction, shots, m)) for m in METHODS)
                gap = "-" if new is None or base is None else "{:+.1f} ({:+.1f})".format(
                    *(lambda g: (g.mean(), g.max()))(100 * (np.asarray(new) - np.asarray(base))))
                name = size if args.net == "gresnet_mlp" else f"{args.net}{size}"
                lines.append(
                    f"| {name} | {TITLES[source]} -> {TITLES[target]} | {shots} "
                    f"| {spread(old)} | {spread(new)} | {spread(base)} | {gap} |"
                )
    budget = defaults["head_epochs"] + defaults["full_epochs"]
    recipe = NETS[args.net]["recipe"]
    lines.append("")
    if "old" in args.methods:
        lines.append(f"- old defaults: "
                     f"`finetune({', '.join(f'{k}={v!r}' for k, v in OLD_DEFAULTS.items())})`.")
    lines += [
        f"- new defaults: `finetune()` with no arguments, today "
        f"`{', '.join(f'{k}={v!r}' for k, v in defaults.items())}`.",
        f"- scratch: `{args.net}` from random weights, its paper's optimizer and learning "
        f"rate (recipe `{recipe}`: "
        + ("Keras 1 Nadam, lr 0.002" if recipe == "gr_mnist" else
           "SGD Nesterov 0.9, lr 0.1 /10 at 50% and 75%, weight decay 1e-4")
        + f"), {budget} epochs at batch {defaults['batch_size']}: the new defaults' epochs "
        f"and steps on the same images.",
        f"- every net: `{args.net}<size>_<source>` published weights (a fresh 10-class "
        f"head), the seed's `shots` random training images per class, "
        + ("pixels / 255" if not NETS[args.net]["raw"] else
           "raw pixels (finetune normalises them with the weights' mean, the scratch net "
           "with its images' mean)")
        + "; BatchNorm frozen while fine-tuning (`keras_gresnet.finetune`).",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    tf.config.experimental.enable_op_determinism()
    errors, defaults, reused, trained, differ = run(args)
    if args.rebuild:
        print(f"{trained - len(differ)} of {trained} nets rebuilt exactly"
              + (f"; differ: {', '.join(differ)}" if differ else ""))
        return 1 if differ else 0
    wall = time.perf_counter() - start
    command = shlex.join(["python", "scripts/finetune/finetune_example.py",
                          *(sys.argv[1:] if argv is None else argv)])
    text = table(args, errors, defaults)
    print(text)
    footer = (f"\nMade by `{command}` in {wall / 60:.1f} min ({trained} nets trained, "
              f"{reused} reused from results.json), on {os.cpu_count()} CPU cores.\n")
    print(footer)
    files.write_text(args.out / "table.md", "# Few-shot fine-tuning against training from "
                     "scratch\n\n" + text + footer)


if __name__ == "__main__":
    sys.exit(main())
