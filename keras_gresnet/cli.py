"""The ``keras-gresnet`` command line.

    keras-gresnet list ['*gresnet*'] [--build]
    keras-gresnet train MODEL [--depth 20 ...builder arguments] [--dataset ...]
                        [--recipe ...] [--epochs ... any recipe field] [--seed ...]
                        [--out ...] [--strategy ...] [--tensorboard]
                        [--input-pipeline auto|tf_data|numpy|device]
                        [--steps-per-execution auto|N]
                        [--mixed-precision mixed_float16|mixed_bfloat16]
                        [--workers host:port,... --worker-index i]
    keras-gresnet finetune SOURCE --dataset folder --data-dir DIR --out RUN [--seed N]
    keras-gresnet evaluate RUN_FOLDER_OR_MODEL_FILE
    keras-gresnet weights list ['*mlp*'] | download NAME | verify [NAME]
                          [--cache-dir DIR]

Options that are not training options are the builder's arguments
(``--depth 20``, ``--n 5``, ``--widen-factor 4``, ``--unit original``), and
every field of the recipe can be overridden (``--epochs``, ``--batch-size``,
``--learning-rate``/``--lr``, ``--weight-decay``, ``--k-decay``...).
"""

import argparse
import ast
import contextlib
import dataclasses
import errno
import importlib.util
import inspect
import json
import math
import os
import sys
from pathlib import Path

from keras_gresnet._cpu import split_cpu_for_jax
from keras_gresnet.artefacts import is_artefact
from keras_gresnet._text import LONGEST_ECHO, printable, shortened, shown

_PACKAGE_DIR = Path(__file__).resolve().parent
# The longest word an error line shows: a value echoed whole by a message that
# did not shorten it (shown()) is cut here; a path or an address is shorter.
_LONGEST_WORD = 10 * LONGEST_ECHO


def _one_line(text):
    """``text`` as one line of the terminal: runs of whitespace (newlines
    included) as one space, each word past ``_LONGEST_WORD`` characters
    :func:`~keras_gresnet._text.shortened`, control characters escaped."""
    return printable(" ".join(shortened(word, _LONGEST_WORD) for word in str(text).split()))


def _given_once(given, name, spelling, value):
    """Record in ``given`` (``{name: (spelling, value)}``) that the option
    ``name`` was given as ``spelling`` (``--lr``, ``--learning-rate``) with
    ``value``; given before through another spelling (an alias) with another
    value, it is a ``ValueError`` naming both spellings. The same value
    twice is fine, and the same spelling again overrides (argparse's rule,
    which scripts appending an option rely on)."""
    before, earlier = given.setdefault(name, (spelling, value))
    if before != spelling and earlier != value:
        raise ValueError(f"{shortened(before)} {shown(earlier)} and {shortened(spelling)} "
                         f"{shown(value)} give one option two values through two spellings; "
                         f"give it once")
    given[name] = (spelling, value)


class _StoreOnce(argparse.Action):
    """argparse's ``store``, refusing an option given twice with two values
    (:func:`_given_once`): every parser's default action (:class:`_Parser`),
    so every option of every command has it."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string is not None:  # an option, not a positional argument
            try:
                _given_once(vars(namespace).setdefault("_given_options", {}), self.dest,
                            option_string, values)
            except ValueError as error:
                raise argparse.ArgumentError(None, str(error)) from None
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    """The command line's parser (its commands' too): every option stored
    once (:class:`_StoreOnce`), and a bad one, like any bad input, one line
    and exit 2 (argparse's usage lines left out: ``--help`` prints them)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {_one_line(message)}\n")


def _print_table(rows, columns, text_columns=1):
    """A plain-text table; the first ``text_columns`` left-aligned; each
    cell :func:`~keras_gresnet._text.printable` (names from files)."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(columns)]
    line = "  ".join(f"{{:{'<' if i < text_columns else '>'}{w}}}" for i, w in enumerate(widths))
    print(line.format(*columns))
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*row))


def _steps_per_execution(text):
    """``--steps-per-execution``: ``auto`` or a whole number >= 1."""
    if text == "auto":
        return text
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"give auto or a whole number of steps >= 1, not {text!r}")
    return int(text)


def _wrapped(text, indent=""):
    import shutil
    import textwrap

    width = min(shutil.get_terminal_size().columns, 100) - 2
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent)


def _recipe_fields_help(fields):
    """``train --help``'s list of every recipe field (from the catalog, so
    generated from the ``Recipe`` dataclass), as options."""
    lines = ["recipe fields (each recipe sets them all; any may be overridden, e.g. "
             "--epochs 10 --lr 0.05):"]
    for name, meaning in fields.items():
        option = f"--{name.replace('_', '-')}" + (" / --lr" if name == "learning_rate" else "")
        lines.append(f"  {option}")
        lines.append(_wrapped(meaning, indent=" " * 6))
    return "\n".join(lines)


def cmd_list(args):
    """List the zoo's builders; with --build, every paper configuration with
    its layers, gates and parameters, counted by building it when the
    catalog was written (``_catalog.PAPER_CONFIGS``). Both from the catalog:
    no Keras, no TensorFlow, no model built."""
    import fnmatch

    from keras_gresnet._catalog import MODELS

    names = sorted(n for n in MODELS if fnmatch.fnmatchcase(n, args.pattern))
    if not names:
        raise ValueError(f"no model matches pattern={shown(args.pattern)}; try "
                         f"`keras-gresnet list`")
    if not args.build:
        for name in names:
            print(f"{name:20s} {MODELS[name]}")
        return
    from keras_gresnet._catalog import PAPER_CONFIGS

    rows = [(name, ", ".join(f"{k}={v!r}" for k, v in arguments), layers, gates,
             f"{params / 1e6:.3f}M")
            for name in names for arguments, layers, gates, params in PAPER_CONFIGS[name]]
    _print_table(rows, ("builder", "arguments", "layers", "gates", "params"), text_columns=2)


def _finite(value):
    """Whether every number in ``value`` (nested tuples, lists, dicts) is finite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, complex):
        return False
    if isinstance(value, (tuple, list)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _literal(text, option="value"):
    """``"20"`` -> 20, ``"0.1"`` -> 0.1, ``"(1,2)"`` -> (1, 2), ``"true"`` ->
    True; anything else stays a string. A number that is not finite, however
    written (``1e400``, ``-1e999``), is refused."""
    lowered = text.lower()
    if lowered in ("true", "false", "none"):
        return {"true": True, "false": False, "none": None}[lowered]
    if lowered.lstrip("+-") in ("inf", "infinity", "nan"):
        raise ValueError(f"--{option} {shortened(text)}: not a finite number")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        try:  # JSON's spelling of the same values: {"nesterov": true}
            value = json.loads(text) if text.lstrip()[:1] in ("{", "[") else text
        except (ValueError, RecursionError):
            return text
    if not _finite(value):
        raise ValueError(f"--{option} {shortened(text)}: not a finite number")
    return value


# Another spelling of a free option: --lr is --learning-rate.
_ALIASES = {"lr": "learning_rate"}


def parse_extra(tokens):
    """``["--depth", "20", "--k-decay", "--unit=original"]`` ->
    ``{"depth": 20, "k_decay": True, "unit": "original"}`` (a flag with no
    value is ``True``). An option given twice with two values, however
    spelled (``--lr`` and ``--learning-rate``, ``--batch-size`` and
    ``--batch_size``), is refused (:func:`_given_once`)."""
    options, given, i = {}, {}, 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or token == "--":
            raise ValueError(f"unexpected argument {shown(token)}; options look like --name value")
        key, eq, value = token[2:].partition("=")
        if not eq:
            if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                value, i = tokens[i + 1], i + 1
            else:
                value = "true"
        name, value = key.replace("-", "_"), _literal(value, key)
        _given_once(given, _ALIASES.get(name, name), f"--{key}", value)
        options[name] = value
        i += 1
    return options


def split_options(options):
    """``(recipe overrides, builder arguments)`` of the free options: a
    recipe field (``--lr`` is ``learning_rate``) goes to the recipe, any
    other name to the builder, which checks it. No name is both (each
    setting has one owner: the builder's BatchNorm momentum and dropout,
    the recipe's optimisation; a test keeps it so)."""
    from keras_gresnet.training.recipes import Recipe

    fields = {f.name for f in dataclasses.fields(Recipe)} - {"name", "citation"}
    overrides, builder_kwargs = {}, {}
    for key, value in options.items():
        key = _ALIASES.get(key, key)
        (overrides if key in fields else builder_kwargs)[key] = value
    return overrides, builder_kwargs


def train_command(config):
    """The ``keras-gresnet train`` command line that reproduces a run's
    config: model, its arguments, dataset, recipe (when not the model's
    default), the recipe fields it changed, the run's other options where
    they are not the default (:class:`~keras_gresnet.training.RunOptions`),
    epochs and seed."""
    from keras_gresnet import training
    from keras_gresnet._options import RunOptions

    recipe = config["recipe"]
    options = RunOptions.command_words(config)
    words = ["keras-gresnet", "train", config["model"]]
    for key, value in config["model_kwargs"].items():
        if isinstance(value, (list, tuple)):  # --input-shape 32,32,3
            value = ",".join(map(str, value))
        words += [f"--{key.replace('_', '-')}", str(value)]
    words += options.pop("dataset")
    if recipe["name"] != training.default_recipe(config["model"], config["dataset"]):
        words += ["--recipe", recipe["name"]]
    default = training.get_recipe(recipe["name"]).get_config()
    for key, value in recipe.items():
        if key not in ("name", "citation", "epochs") and value != default.get(key) and \
                isinstance(value, (str, int, float)):
            words += [f"--{key.replace('_', '-')}", str(value)]
    seed = options.pop("seed")
    for option_words in options.values():
        words += option_words
    return " ".join(words + ["--epochs", str(recipe["epochs"])] + seed)


def precheck_train(args, extra):
    """What a train command can be refused for before Keras (and TensorFlow)
    is imported, in a fraction of a second: an unknown model (did you mean),
    an option that is neither a recipe field nor the builder's argument (did
    you mean), and a picture folder given as --data-dir without --dataset
    folder (which would be read as the model's own dataset), and an --out
    folder that another live trainer holds (its lock; checked again, and
    taken, once the run starts)."""
    from keras_gresnet import _catalog
    from keras_gresnet._checks import did_you_mean

    # the package's models, and those a program registered before calling main()
    zoo = sys.modules.get("keras_gresnet.zoo")
    models = {*_catalog.MODELS, *(zoo.list_models() if zoo is not None else ())}
    if args.model not in models:
        raise ValueError(f"unknown model {shown(args.model)}"
                         f"{did_you_mean(args.model, models)}; `keras-gresnet list` shows "
                         f"the {len(models)} models")
    arguments = _catalog.MODEL_ARGUMENTS.get(args.model) or tuple(
        inspect.signature(zoo.model_builder(args.model)).parameters)
    known = {*_catalog.RECIPE_FIELDS, *arguments, *_ALIASES}
    for key in parse_extra(extra):
        if key not in known:
            flag = f"--{key.replace('_', '-')}"
            flags = [*args.flags, *(f"--{k.replace('_', '-')}" for k in sorted(known))]
            raise ValueError(f"{shortened(flag)} is not an option of train {args.model}"
                             f"{did_you_mean(flag, flags)}; options: the run's (--help), the "
                             f"recipe's fields (--help lists them) and the builder's arguments")
    if args.out is not None and os.path.isdir(args.out):
        from keras_gresnet.runlock import RunLock

        RunLock(args.out).check()
    if args.dataset is None and args.data_dir is not None:
        from keras_gresnet.data.folders import looks_like_picture_folder

        if looks_like_picture_folder(args.data_dir):
            raise ValueError(f"--data-dir {shortened(args.data_dir)} holds class folders of "
                             f"pictures; add --dataset folder to train on them (without it, "
                             f"--data-dir is where {args.model}'s own dataset's files are)")


def cmd_train(args, extra):
    from keras_gresnet import training
    from keras_gresnet._options import RunOptions

    overrides, builder_kwargs = split_options(parse_extra(extra))
    options = RunOptions.from_namespace(args)
    note = training.precision_note(options.dtype_policy)
    if note:
        print(note, file=sys.stderr)
    run = training.train(
        args.model, out=args.out, overwrite=args.overwrite, model_kwargs=builder_kwargs,
        workers=args.workers, worker_index=args.worker_index, tensorboard=args.tensorboard,
        input_pipeline=args.input_pipeline, steps_per_execution=args.steps_per_execution,
        verbose="auto" if sys.stdout.isatty() else 2, **options.config(), **overrides)
    r = run.results
    where = f"run folder {printable(run.out)}" if run.out else "the chief writes the run folder"
    print(f"{printable(run.config['model'])} on {printable(run.config['dataset'])}: test error "
          f"{r['test_error_percent']:.2f}% (loss {r['test_loss']:.4f}) after "
          f"{r['epochs']} epoch{'' if r['epochs'] == 1 else 's'}; {where}")
    if r["gates"]:
        ks = list(r["gates"].values())
        print(f"gates: {len(ks)}, mean g(k) {sum(ks) / len(ks):.3f}, "
              f"min {min(ks):.3f}, max {max(ks):.3f}")
    if args.tensorboard and run.out:
        print(f"TensorBoard logs: tensorboard --logdir "
              f"{printable(run.out / training.TENSORBOARD)}")


def precheck_finetune(args, extra):
    """What a finetune command is refused for before any backend is
    imported: extra words, a dataset other than a picture folder, a
    --data-dir that is no folder, an exported artefact as SOURCE, and an
    --out folder another live process holds (its lock)."""
    from keras_gresnet.artefacts import is_artefact

    if extra:
        raise ValueError(f"unexpected arguments {shown(extra)}")
    if args.dataset != "folder":
        raise ValueError(f"--dataset {shown(args.dataset)}: finetune reads a picture folder, "
                         f"--dataset folder --data-dir DIR (one subfolder per class)")
    if not os.path.isdir(args.data_dir):
        raise ValueError(f"--data-dir {shown(args.data_dir)}: no such folder; give a folder "
                         f"of pictures with one subfolder per class")
    if is_artefact(args.source):
        raise ValueError(f"{shown(args.source)} is an exported artefact, which cannot be "
                         f"fine-tuned: fine-tune the .keras file, run folder, preset or "
                         f"published name it was exported from")
    if os.path.isdir(args.out):
        from keras_gresnet.runlock import RunLock

        RunLock(args.out).check()


def cmd_finetune(args, extra):
    """Fine-tune SOURCE on a picture folder into a run folder
    (:func:`keras_gresnet.finetune_run.finetune_run`)."""
    from keras_gresnet.finetune_run import finetune_run

    run = finetune_run(
        args.source, data_dir=args.data_dir, out=args.out, seed=args.seed,
        overwrite=args.overwrite, head_epochs=args.head_epochs, full_epochs=args.full_epochs,
        head_lr=args.head_lr, full_lr=args.full_lr, optimizer=args.optimizer,
        batch_size=args.batch_size, schedule=args.schedule,
        verbose="auto" if sys.stdout.isatty() else 2)
    r = run.results
    print(f"{printable(args.source)} fine-tuned on {len(run.config['data']['class_names'])} "
          f"classes of {printable(args.data_dir)}: test error {r['test_error_percent']:.2f}% "
          f"(loss {r['test_loss']:.4f}) on its {run.config['data']['num_test']} held-out "
          f"pictures after {r['epochs']} epochs; run folder {printable(run.out)}")


def cmd_evaluate(args, extra):
    from keras_gresnet import training

    if extra:
        raise ValueError(f"unexpected arguments {shown(extra)}")
    if args.max_examples is not None and args.max_examples < 1:
        raise ValueError(f"--max-examples {shown(args.max_examples)}: evaluate at least 1 "
                         f"test picture (an integer >= 1)")
    result = training.evaluate(args.path, dataset=args.dataset, data_dir=args.data_dir,
                               preprocessing=args.preprocessing, max_examples=args.max_examples)
    # Standard JSON: a non-finite number (a diverged net's loss) is null.
    print(json.dumps({k: v if not isinstance(v, float) or math.isfinite(v) else None
                      for k, v in result.items()}, indent=2, allow_nan=False))


def cmd_gates(args, extra):
    from keras_gresnet import analysis, zoo

    if extra:
        raise ValueError(f"unexpected arguments {shown(extra)}")
    if is_artefact(args.path):
        raise ValueError(f"{shown(args.path)}: an exported artefact has no gates (its ops hold "
                         f"the net's arithmetic, not its layers): run gates on the model it "
                         f"was exported from")
    model = zoo.resolve(args.path).model
    values = analysis.gate_values(model)
    if not values:
        print(f"{printable(model.name)} has no gates")
        return
    _print_table([(v["index"], v["block"], f"{v['k']:.4f}", f"{v['g']:.4f}") for v in values],
                 ("index", "block", "k", "g(k)"), text_columns=2)
    ks = [v["g"] for v in values]
    print(f"{len(ks)} gates, mean g(k) {sum(ks) / len(ks):.4f}")


def _pruned_out(args, resolved, count):
    """Where ``prune`` writes: ``--out``, else inside a run folder (its own
    ``pruned-N.keras``), beside a ``.keras`` file or preset folder, or in
    the working folder for a published name or ``hf://``; never over a
    file of the user's."""
    from pathlib import Path

    if args.out:
        return Path(args.out), False
    if resolved.kind == "run":
        return Path(args.path) / f"pruned-{count}.keras", True
    if resolved.kind in ("keras_file", "preset"):
        source = Path(args.path)
        stem = source.name[:-len(".keras")] if resolved.kind == "keras_file" else source.name
        return source.with_name(f"{stem}-pruned{count}.keras"), False
    name = resolved.source.rstrip("/").rsplit("/", 1)[-1].replace("@", "-")
    return Path(f"{name}-pruned{count}.keras"), False


def cmd_prune(args, extra):
    from keras_gresnet import analysis, files, training, zoo

    if extra:
        raise ValueError(f"unexpected arguments {shown(extra)}")
    if sum((args.blocks is not None, args.count is not None, args.zero_gates)) != 1:
        raise ValueError("give one of --blocks NAME,NAME..., --count N (with --order) or "
                         "--zero-gates")
    if args.count is not None and args.count < 1:
        raise ValueError(f"--count {shown(args.count)}: remove at least 1 block (an integer >= 1)")
    blocks = None
    if args.blocks is not None:
        blocks = [int(b) if b.isdigit() else b for b in args.blocks.split(",") if b]
        if not blocks:
            raise ValueError(f"--blocks {shown(args.blocks)}: name at least one block")
        twice = sorted({shortened(b) for b in blocks if blocks.count(b) > 1})
        if twice:
            raise ValueError(f"--blocks names {', '.join(twice)} more than once; name each "
                             f"block once")
    if args.out and not args.out.endswith(".keras"):
        raise ValueError(f"--out must end in .keras, got {shown(args.out)}")
    if is_artefact(args.path):
        raise ValueError(f"{shown(args.path)}: an exported artefact cannot be pruned (it holds "
                         f"no Keras blocks): prune the model it was exported from, then export "
                         f"the pruned .keras")
    resolved = zoo.resolve(args.path)
    model = resolved.model
    if args.zero_gates:
        blocks = analysis.closed_blocks(model)
        if not blocks:
            raise ValueError(f"{shown(resolved.source)} has no removable block whose gate is "
                             f"exactly closed (g(k) = 0): nothing to remove")
    elif blocks is None:
        order = analysis.removal_order(model, args.order, args.seed)
        if args.count > len(order):
            raise ValueError(f"--count {shown(args.count)}: only {len(order)} blocks can be "
                             f"removed")
        blocks = order[: args.count]
    out, ours = _pruned_out(args, resolved, len(blocks))
    if out.exists() and not ours:
        raise ValueError(f"--out {shown(str(out))} exists; the pruned model is never written over "
                         f"a file of yours: pick another --out")
    pruned = analysis.prune(model, blocks)
    names = [b.name if isinstance(b, analysis.Block) else b for b in blocks]
    accuracies = []
    if resolved.config is not None or args.dataset or resolved.card.get("dataset"):
        images, labels, _, _ = training.test_set(resolved, dataset=args.dataset,
                                                 data_dir=args.data_dir)
        for m in (model, pruned):
            raw = zoo.raw_pixels_model(zoo.Resolved(m, resolved.card, "model", m.name))
            accuracies.append(analysis.accuracy(raw, (training.fitted_pixels(images, raw),
                                                      labels)))
    with files.atomic_path(out) as tmp:
        pruned.save(tmp)
    print(f"removed {len(names)} blocks: {', '.join(map(printable, names))}")
    for label, value in zip(("before", "after"), accuracies):
        print(f"test accuracy {label}: {100 * value:.2f}%")
    print(f"saved {printable(out)}")


def precheck_predict(args, extra):
    """``(paths, problems)`` of a predict command's pictures, checked before
    any backend is imported: nothing to predict is one line."""
    from keras_gresnet.data.folders import picture_paths

    if extra:
        raise ValueError(f"unexpected arguments {shown(extra)}")
    if args.top < 1:
        raise ValueError(f"--top {shown(args.top)}: expected an integer >= 1")
    paths, problems = picture_paths(args.images)
    if not paths:
        raise ValueError(problems[0])
    return paths, problems


def cmd_predict(args, extra):
    """The top classes of each picture, with probabilities, from a model
    (anything :func:`keras_gresnet.zoo.resolve` takes): the raw pictures
    fitted to its input and normalised as its card records
    (:func:`keras_gresnet.zoo.preprocess_input`); or from an exported
    artefact, run by its own runtime, its contract giving the input and
    class names (:func:`keras_gresnet.predictions.exported_predictor`)."""
    import numpy as np

    from keras_gresnet import export, predictions, zoo

    # main() listed the pictures before the backend was imported
    paths, problems = getattr(args, "prechecked", None) or precheck_predict(args, extra)
    if export.is_artefact(args.model):  # its own runtime; the contract gives the rest
        shape, names, run = predictions.exported_predictor(args.model)
        resolved = None
    else:
        resolved = zoo.resolve(args.model)
        shape, names = predictions.model_input_shape(resolved.model), resolved.class_names
    read = []
    for path in paths:  # a bad picture is reported, the others predicted
        try:
            read.append((path, predictions.read_pictures([path], shape)[0]))
        except ValueError as error:
            problems.append(str(error))
    for problem in problems:
        print(f"keras-gresnet predict: skipped {_one_line(problem)}", file=sys.stderr)
    if not read:
        return 2
    pictures = np.stack([picture for _, picture in read])
    if resolved is None:
        probabilities = run(pictures)
    else:
        model = zoo.inference_model(resolved)  # BatchNorms folded
        x = zoo.preprocess_input(pictures, resolved)
        if len(model.input_shape) == 2:  # a flat input (GR's MLPs take 784 pixels)
            x = x.reshape(len(x), -1)
        probabilities = np.asarray(model.predict(x, verbose=0))
    names = names or [str(i) for i in range(probabilities.shape[1])]
    top = min(args.top, probabilities.shape[1])
    rows = predictions.decode_predictions(probabilities, names, top)
    for (path, _), row in zip(read, rows):
        print(f"{printable(path)}: "
              + ", ".join(f"{printable(name)} {100 * p:.1f}%" for name, p in row))
    if resolved is not None and resolved.preprocessing is None and not resolved.takes_raw_pixels:
        print("note: the source records no preprocessing; pixels were scaled to [0, 1]",
              file=sys.stderr)
    return 1 if problems else 0


def cmd_export(args, extra):
    """Export a model (a published weights name, a .keras file, a preset or a
    run folder) for inference: a SavedModel folder, an ONNX or a LiteRT file."""
    from keras_gresnet import export

    if extra:
        raise ValueError(f"unexpected arguments {shown(extra)}")
    if args.format is None:  # the suffix says which; check_out refuses a contradiction
        args.format = {".onnx": "onnx", ".tflite": "litert"}.get(
            os.path.splitext(args.out)[1], "tf_saved_model")
    export.check_format(args.format, argument="--format")
    export.check_out(args.out, args.format, argument="--out")
    out = export.export(args.model, args.out, format=args.format,
                        include_preprocessing=not args.no_preprocessing,
                        fold_batchnorm=not args.no_fold)
    takes = "normalised pixels" if args.no_preprocessing else "raw 0-255 pixels"
    policy = export.read_contract(out).get("dtype_policy")  # float32 for a bf16 net's ONNX
    print(f"exported {printable(args.model)} as {args.format} (takes {takes}, computes "
          f"under {policy}): {printable(out)}")


def _size(size):
    if size is None:
        return ""
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


def cmd_weights(args, extra):
    """The published weights: list them, show a model card, download one,
    verify the cache."""
    from keras_gresnet import weights

    if extra:
        raise ValueError(f"unexpected arguments {shown(extra)}")
    if args.action == "list":
        entries = weights.list_weights(args.pattern)
        if not entries and not weights.list_weights():
            print(f"no published weights yet (registry: "
                  f"{printable(weights.registry.REGISTRY_FILE)})")
            return
        if not entries:
            raise ValueError(f"no published weights match pattern={shown(args.pattern)} "
                             f"(registry: {weights.registry.REGISTRY_FILE})")
        from keras_gresnet.papers import paper_error

        def paper(entry):  # what the paper reports on the entry's dataset
            found = paper_error(entry["builder"], entry["builder_kwargs"], entry["dataset"],
                                entry.get(weights.RECIPE_OPTIONS))
            return "" if found is None else f"{found[1]:.2f}% ({found[0].split(',')[0]})"

        rows = [(e["name"], e["builder"],
                 ", ".join(f"{k}={v!r}" for k, v in sorted(e["builder_kwargs"].items())),
                 e["dataset"],
                 "" if e.get("test_error_percent") is None else f"{e['test_error_percent']:.2f}%",
                 paper(e), _size(e.get("size")), e["status"]) for e in entries]
        _print_table(rows, ("name", "builder", "args", "dataset", "test error", "paper", "size",
                            "status"), text_columns=4)
    elif args.action == "download":
        print(printable(weights.weights_path(args.name, cache_dir=args.cache_dir)))
    elif args.action == "show":
        print(weights.model_card(weights.get_weights(args.name)), end="")
    else:
        if args.name is not None:
            weights.get_weights(args.name)  # an unknown name is an error, not "no match"
        report = weights.verify_cache(args.name or "*", cache_dir=args.cache_dir)
        if not report:
            print(f"no published weights (registry: "
                  f"{printable(weights.registry.REGISTRY_FILE)})")
            return
        _print_table([(name, status, "" if path is None else str(path))
                      for name, path, status in report], ("name", "status", "file"),
                     text_columns=3)
        removed = [name for name, _, status in report if status == "MISMATCH (removed)"]
        ignored = [str(path) for _, path, status in report if status == "MISMATCH (ignored)"]
        problems = []
        if removed:
            problems.append(f"{len(removed)} cached file(s) did not match their sha256 and "
                            f"were removed: {', '.join(removed)}; `keras-gresnet weights "
                            f"download NAME` fetches them again")
        if ignored:
            problems.append(f"{len(ignored)} shipped file(s) did not match their sha256 "
                            f"and were left in place (loading skips them): "
                            f"{', '.join(ignored)}")
        if problems:
            raise ValueError("; ".join(problems))


_SOURCE_HELP = ("anything a model comes from: a published weights name, a run folder, a "
                "preset folder, a .keras file or hf://owner/name")


def build_parser():
    parser = _Parser(
        prog="keras-gresnet",
        description="Gated (GResNet) and pre-activation residual networks for Keras 3.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of every error")
    from keras_gresnet._version import __version__

    parser.add_argument("--version", action="version", version=f"keras-gresnet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the zoo's models")
    p.add_argument("pattern", nargs="?", default="*", help="shell wildcard, e.g. '*gresnet*'")
    p.add_argument("--build", action="store_true",
                   help="every paper configuration with its layers, gates and parameters "
                   "(counted by building it when the package's catalog was written)")
    p.set_defaults(func=lambda a, extra: cmd_list(a))

    from keras_gresnet import _catalog

    p = sub.add_parser(
        "train",
        help="train a zoo model with its paper's recipe",
        description=_wrapped(
            "Train MODEL (any `keras-gresnet list` name). Other --options are recipe fields "
            "(below) or builder arguments (--depth 20, --n 5, --unit original, ...: see "
            "help(keras_gresnet.zoo.MODEL); the builder owns the architecture's settings, "
            "--bn-momentum and --dropout included)."),
        epilog=_recipe_fields_help(_catalog.RECIPE_FIELDS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="a zoo model's name (`keras-gresnet list` shows them)")
    from keras_gresnet._options import RunOptions, seed_option
    from keras_gresnet.data.datasets import DATASETS

    RunOptions.add_arguments(p, datasets=[*DATASETS, "imagenet2012"], recipes=_catalog.RECIPES)
    p.add_argument("--out", help="run folder (default runs/MODEL-DATASET-seedSEED)")
    p.add_argument("--overwrite", action="store_true", help="retrain a finished run folder")
    p.add_argument("--workers", help="multi-worker cluster: every worker's host:port, "
                   "comma-separated, the same on every worker (writes TF_CONFIG; on JAX "
                   "the first is the coordinator)")
    p.add_argument("--worker-index", type=int,
                   help="this worker's position in --workers (0 is the chief)")
    p.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard logs (loss, accuracy, test metrics, g(k) of "
                   "every gate) into RUN/tensorboard (needs tensorflow and tensorboard)")
    p.add_argument("--input-pipeline", default="auto",
                   help="what feeds the batches, all the same batches: device (JAX: the "
                   "pixels on the device, each batch cut there), tf_data, numpy (default "
                   "auto: device on JAX with a GPU, else tf_data where TensorFlow is installed, "
                   "else numpy)")
    p.add_argument("--steps-per-execution", default="auto", type=_steps_per_execution,
                   help="training steps a host call runs (default auto: 16 on the device "
                   "pipeline, compiled as one program where JAX has a GPU or TPU; 1 on the "
                   "others); "
                   "with the device pipeline on one JAX device, N > 1 runs N steps as one "
                   "compiled program (float32 rounding of its own)")
    p.set_defaults(func=cmd_train, precheck=precheck_train,
                   flags=tuple(f for f in p._option_string_actions if f.startswith("--")))

    p = sub.add_parser(
        "finetune", help="fine-tune a pretrained model on a picture folder, into a run folder",
        description=_wrapped(
            "Fine-tune SOURCE on the classes of a picture folder (one subfolder per class) in "
            "Keras' two phases (a new head on the frozen body, then the body), into a run "
            "folder as train writes one (resumable: the same command continues an "
            "unfinished run). With one --seed, two runs on one machine give the same "
            "weights to the bit."))
    p.add_argument("source", help=_SOURCE_HELP + " (not an exported artefact)")
    p.add_argument("--dataset", default="folder", help="folder (the only one: a picture folder)")
    p.add_argument("--data-dir", required=True,
                   help="the picture folder; its test part (0.2 of each class, by the seed) is "
                   "held out, or its test/ folder beside train/")
    p.add_argument("--out", required=True, help="the run folder")
    p.add_argument("--seed", type=seed_option, default=0,
                   help="seeds the new head, the held-out split and every epoch's order "
                   "(default 0)")
    p.add_argument("--overwrite", action="store_true", help="fine-tune a finished run again")
    p.add_argument("--head-epochs", type=int, default=5, help="phase 1's epochs (default 5)")
    p.add_argument("--full-epochs", type=int, help="phase 2's epochs (default: 25 for a conv "
                   "net, 50 for an MLP)")
    p.add_argument("--head-lr", type=float, default=1e-2, help="phase 1's rate (default 0.01)")
    p.add_argument("--full-lr", type=float, help="phase 2's rate (default: 0.001 for a conv "
                   "net, 0.02 for an MLP)")
    p.add_argument("--optimizer", default="adam", help="a Keras optimizer name (default adam)")
    p.add_argument("--batch-size", type=int, default=32, help="default 32")
    p.add_argument("--schedule", default="cosine", help="cosine (default) or constant")
    p.set_defaults(func=cmd_finetune, precheck=precheck_finetune)

    p = sub.add_parser("evaluate", help="test error of a model on raw pictures of its test set")
    p.add_argument("path", metavar="model", help=_SOURCE_HELP + ", or an artefact of "
                   "`keras-gresnet export` (.onnx, .tflite, SavedModel folder), run by its own "
                   "runtime")
    p.add_argument("--dataset", help="the test set (default: a run's own, else the dataset the "
                   "model's card records): mnist, fashion_mnist, cifar10, cifar100, folder")
    p.add_argument("--data-dir", help="where the dataset's files (or a picture folder) are")
    p.add_argument("--preprocessing", help="only for a model that records none: scale, mean "
                   "or meanstd, fitted on the dataset's training split")
    p.add_argument("--max-examples", type=int, metavar="N",
                   help="only the first N test pictures (a quick check, not the test error)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("gates", help="k and g(k) of every gate of a model")
    p.add_argument("path", metavar="model", help=_SOURCE_HELP)
    p.set_defaults(func=cmd_gates)

    p = sub.add_parser("prune", help="remove residual blocks (GR's layer pruning)")
    p.add_argument("path", metavar="model", help=_SOURCE_HELP)
    p.add_argument("--blocks", help="comma-separated block names or indices, e.g. block7,block9")
    p.add_argument("--count", type=int, help="remove this many blocks in --order")
    p.add_argument("--zero-gates", action="store_true",
                   help="remove every block whose gate is exactly closed, g(k) = 0: the "
                   "same predictions, faster")
    p.add_argument("--order", default="greedy", help="greedy (smallest g(k) first) or random")
    p.add_argument("--seed", type=seed_option, default=0,
                   help="seed of the random order (default 0)")
    p.add_argument("--out", help="the pruned model (.keras); default in a run folder, beside "
                   "a file or preset, else in the working folder")
    p.add_argument("--dataset", help="the test set of the before/after accuracy (default: a "
                   "run's own, else the one the model's card records)")
    p.add_argument("--data-dir", help="where the dataset's files (or a picture folder) are")
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser("predict", help="the top classes of pictures, with probabilities")
    p.add_argument("model", help=_SOURCE_HELP + ", or an artefact of `keras-gresnet export` "
                   "(.onnx, .tflite, SavedModel folder), run by its own runtime: onnxruntime "
                   "is the fastest on a CPU (docs/benchmarks.md)")
    p.add_argument("images", nargs="+",
                   help="picture files (PNG, JPEG, ...), folders of them, or globs "
                        "('shots/*.jpg'); a picture that cannot be read is reported, the "
                        "others predicted, and the exit code is 1")
    p.add_argument("--top", type=int, default=5, help="classes shown per picture (default 5)")
    p.set_defaults(func=cmd_predict, precheck=precheck_predict)

    p = sub.add_parser("export", help="export for inference: SavedModel, ONNX or LiteRT")
    p.add_argument("model", help=_SOURCE_HELP)
    p.add_argument("--format", default=None,
                   help="tf_saved_model (a folder), onnx (.onnx) or litert (.tflite); "
                   "default: from --out's suffix (.onnx, .tflite, else a SavedModel folder)")
    p.add_argument("--out", required=True, help="the artefact; must not exist")
    p.add_argument("--no-preprocessing", action="store_true",
                   help="leave the model's pixel normalisation out: the artefact then takes "
                   "normalised pixels (default: raw 0-255 pixels, the normalisation inside)")
    p.add_argument("--no-fold", action="store_true",
                   help="keep every BatchNorm as trained (default: each one after a conv or "
                   "dense layer folded into it, docs/benchmarks.md)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("weights", help="published weights: list, download, verify the cache")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("list", help="the registry (published_weights.json, in the package)")
    a.add_argument("pattern", nargs="?", default="*", help="shell wildcard, e.g. '*mlp*'")
    a = actions.add_parser("show", help="the model card of one entry (data, training, "
                           "test error, file, licences)")
    a.add_argument("name")
    a = actions.add_parser("download", help="fetch (or find) one file, verified by sha256")
    a.add_argument("name")
    a.add_argument("--cache-dir", help="cache root (files go in CACHE_DIR/models; "
                   "default $KERAS_HOME, else ~/.keras)")
    a = actions.add_parser("verify", help="re-hash the cached files; a mismatch is removed")
    a.add_argument("name", nargs="?")
    a.add_argument("--cache-dir", help="cache root, as for download")
    p.set_defaults(func=cmd_weights)
    return parser


@contextlib.contextmanager
def _stderr_silenced():
    """File descriptor 2 to /dev/null (what C++ libraries write too), for
    the duration; Python's own exceptions still reach the terminal, after."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _import_tensorflow_quietly():
    """Import TensorFlow (where it is Keras' backend) with its start-up lines
    off the terminal: ``cudart_stub`` and absl print before
    ``TF_CPP_MIN_LOG_LEVEL`` is read, so only a silenced descriptor keeps them
    off. An import error is raised again once the descriptor is back."""
    # On JAX and PyTorch too: the tf.data input pipeline imports TensorFlow
    # wherever it is installed.
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    error = None
    with _stderr_silenced():
        try:
            import tensorflow  # noqa: F401
        except ImportError as caught:
            error = caught
    if error is not None:
        raise error


# Each Keras backend's package and the command that installs it.
_BACKEND_INSTALLS = {"tensorflow": ("tensorflow", "pip install tensorflow"),
                     "jax": ("jax", "pip install jax jaxlib"),
                     "torch": ("torch", "pip install torch")}


def _missing_backend():
    """One line when ``KERAS_BACKEND`` names a backend whose package is not
    installed (else ``None``)."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    package, install = _BACKEND_INSTALLS.get(backend, (None, None))
    if package is None or importlib.util.find_spec(package) is not None:
        return None
    return f"KERAS_BACKEND={backend} needs {package}, which is not installed: {install}"


# Commands that need Keras (and so its backend); the others only read JSON.
_NEEDS_KERAS = ("train", "finetune", "evaluate", "gates", "prune", "export", "predict")
# Errors of the environment, not of the program: one line, exit 2.
_ENVIRONMENT_ERRNOS = frozenset(
    getattr(errno, name) for name in
    ("ENOSPC", "EACCES", "EROFS", "EPERM", "ENOTDIR", "EISDIR", "EEXIST", "ENOENT", "EDQUOT",
     "ENAMETOOLONG", "EFBIG")
    if hasattr(errno, name)
)


def _raised_here(error):
    """Whether ``error`` was raised by this package's own code (a check that
    names the user's argument), not deep inside Keras or TensorFlow (a bug,
    which keeps its traceback)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE_DIR)


def main(argv=None):
    # TensorFlow's C++ log lines (cuInit, oneDNN notes) off the terminal;
    # a user's own setting wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "list":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    debug = args.debug
    precheck = getattr(args, "precheck", None)
    if precheck is not None:  # before any backend is imported; its result kept for the command
        try:
            args.prechecked = precheck(args, extra)
        except ValueError as error:
            if debug:
                raise
            return _error(args.command, error)
    if args.command in _NEEDS_KERAS:
        missing = _missing_backend()
        if missing:
            return _error(args.command, missing)
        try:
            split_cpu_for_jax()  # KERAS_GRESNET_CPU_DEVICES, before JAX is imported
        except ValueError as error:
            return _error(args.command, error)
        _import_tensorflow_quietly()
    try:
        code = args.func(args, extra)
    except BrokenPipeError:  # `keras-gresnet weights list | head`: the reader left
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit finds no pipe
        return 0
    except KeyboardInterrupt:
        if debug:
            raise
        # Every file a run wrote is complete (atomic writes): say how to go on.
        again = " (the same command resumes the run)" \
            if args.command in ("train", "finetune") else ""
        print(f"\nkeras-gresnet {args.command}: interrupted{again}", file=sys.stderr)
        return 130
    except FileNotFoundError as error:
        # data.DatasetNotFoundError: what was looked for, and how to get it.
        if not debug and type(error).__name__ == "DatasetNotFoundError":  # lines by design
            lines = "\n".join(printable(line) for line in str(error).splitlines())
            print(f"keras-gresnet {args.command}: error: {lines}", file=sys.stderr)
            return 2
        if debug or error.errno not in _ENVIRONMENT_ERRNOS:
            raise
        return _environment_error(args.command, error)
    except ValueError as error:  # bad input: one clear line, no traceback
        if debug or not _raised_here(error):
            raise
        return _error(args.command, error)
    except OSError as error:
        # A full disk, a read-only or missing folder: the environment, named.
        if debug or error.errno not in _ENVIRONMENT_ERRNOS:
            raise
        return _environment_error(args.command, error)
    except RuntimeError as error:
        # Exit 3: the loss diverged; 4: a worker was lost (rerun to resume).
        codes = {"TrainingDiverged": 3, "WorkerLost": 4}
        if type(error).__name__ not in codes:
            raise
        print(f"keras-gresnet {args.command}: {_one_line(error)}", file=sys.stderr)
        if type(error).__name__ == "WorkerLost" and _joined_jax_cluster():
            # JAX's shutdown at exit would wait for the lost process, then
            # abort (SIGABRT) after its heartbeat timeout; every file the run
            # wrote is complete (atomic writes), so leave now.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(codes["WorkerLost"])
        return codes[type(error).__name__]
    return code or 0


def _error(command, text):
    """Print ``keras-gresnet COMMAND: error: TEXT`` on one line
    (:func:`_one_line`: the user's values shortened, names from files
    escaped); returns 2, bad input's exit code."""
    print(f"keras-gresnet {command}: error: {_one_line(text)}", file=sys.stderr)
    return 2


def _environment_error(command, error):
    """A full disk, a read-only or missing folder, a name too long: the
    environment, named in one line; exit 2."""
    where = f" {error.filename}" if error.filename else ""
    return _error(command, f"cannot use{where}: {error.strerror}")


def _joined_jax_cluster():
    """Whether this process joined a JAX cluster (without importing the
    training package when it was never imported)."""
    jax_backend = sys.modules.get("keras_gresnet.training.backends.jax")
    return jax_backend is not None and jax_backend.joined_cluster()


if __name__ == "__main__":
    sys.exit(main())
