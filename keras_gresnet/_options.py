"""A training run's own options, declared once: :class:`RunOptions` makes
the ``keras-gresnet train`` options (:meth:`RunOptions.add_arguments`),
checks the values, and writes them into a run's config and back into its
command line (:meth:`RunOptions.command_words`). Keras-free, so that the
command line's parser is built without importing Keras.

What is not here is someone else's: the model's arguments are its builder's,
the optimisation the recipe's fields (:class:`keras_gresnet.training.Recipe`),
and where a run goes and how it reports (``out``, ``overwrite``,
``workers``, ``tensorboard``, ``verbose``) :func:`keras_gresnet.training.train`'s.
"""

import argparse
import dataclasses
import os

from keras_gresnet._checks import MAX_SEED, check_choice, check_int, check_rate, check_seed
from keras_gresnet._text import shortened, shown as _shown

# Keras' dtype policies a run trains under: the papers' float32, or Keras'
# mixed precision (float16 or bfloat16 compute, float32 variables).
DTYPE_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def seed_option(text):
    """``argparse``'s type of every ``--seed``: an integer in ``[0, MAX_SEED]``
    (:func:`keras_gresnet._checks.check_seed`), else argparse's one line
    naming the option."""
    try:
        return check_seed(int(text), "seed")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer in [0, {MAX_SEED}], got {_shown(text)}") from None


def _option(default, help, *, flag=None, metavar=None, shown="changed", parse=None):
    """A :class:`RunOptions` field: its default, its ``--help`` line (with
    ``{datasets}`` / ``{recipes}`` filled in by :meth:`RunOptions.add_arguments`),
    the command-line flag (default ``--field-name``), when a run's
    command shows it: ``"always"``, ``"changed"`` (not the default) or
    ``"never"``, and argparse's type of its text (default: the field's type)."""
    return dataclasses.field(default=default, metadata=dict(
        help=help, flag=flag, metavar=metavar, shown=shown, parse=parse))


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The options of a training run, checked when made (``ValueError``
    naming the option); ``None`` is the paper's or the machine's choice,
    resolved by :func:`keras_gresnet.training.resolve_config`.

    Attributes:
        dataset: the data (default: the model's paper's).
        recipe: the training recipe (default: the paper's).
        seed: seeds weights, shuffling and augmentation; ops are made
            deterministic, so a CPU run is repeatable.
        strategy: where it trains (:func:`keras_gresnet.training.make_strategy`);
            the recipe's ``batch_size`` is per replica.
        validation_split: held out of the training set, reported as ``val_*``.
        data_dir: a folder with the dataset's files (offline), or the picture
            folder of ``dataset="folder"``.
        max_train_examples: a seeded subset of the training set, for quick runs.
        max_test_examples: a seeded subset of the test set.
        sync_batchnorm: BatchNorm statistics over the global batch, not each
            replica's (``None``: the strategy's own way).
        dtype_policy: Keras' dtype policy, one of :data:`DTYPE_POLICIES`
            (``mixed_float16`` compiles with loss scaling; the classifier
            stays float32).
    """

    dataset: str = _option(
        None, "{datasets}, or folder (your pictures: --data-dir PATH holds one subfolder per "
        "class) (default: the paper's)", shown="always")
    recipe: str = _option(
        None, "{recipes} (default: the paper's; preact_mnist for a CIFAR conv net on mnist or "
        "fashion_mnist)", shown="never")  # the command shows a recipe other than the default
    seed: int = _option(0, "seeds weights, shuffling and augmentation (default 0)",
                        shown="always", parse=seed_option)
    strategy: str = _option(
        "auto", "auto (multi_worker with a cluster, else mirrored when >1 GPU; on JAX "
        "data_parallel when >1 device), default, one_device, mirrored, multi_worker (a "
        "cluster: TensorFlow's MultiWorkerMirroredStrategy, or JAX's DataParallel across "
        "processes), data_parallel (JAX; mirrored means it there)")
    validation_split: float = _option(0.0, "fraction of the training set held out (val_*)")
    data_dir: str = _option(None, "folder with the dataset's files (offline), or the picture "
                            "folder of --dataset folder")
    max_train_examples: int = _option(None, "a seeded subset of the training set")
    max_test_examples: int = _option(None, "a seeded subset of the test set")
    sync_batchnorm: bool = _option(
        None, "BatchNorm statistics over the global batch, not each replica's (TensorFlow; "
        "JAX's data_parallel and multi_worker always do)")
    dtype_policy: str = _option(
        "float32", "Keras' mixed precision: mixed_float16 (loss-scaled) or mixed_bfloat16; "
        "the classifier stays float32 (default: float32)",
        flag="--mixed-precision", metavar="POLICY")

    def __post_init__(self):
        for name in ("dataset", "recipe", "strategy"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a name, got {_shown(value)}")
        check_seed(self.seed, "seed")
        check_rate(self.validation_split, "validation_split")
        for name in ("max_train_examples", "max_test_examples"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, 1)
        if self.sync_batchnorm is not None and not isinstance(self.sync_batchnorm, bool):
            raise ValueError(f"sync_batchnorm must be True or False, got "
                             f"{_shown(self.sync_batchnorm)}")
        check_choice(self.dtype_policy, "dtype_policy", DTYPE_POLICIES)
        if self.data_dir is not None:
            if not isinstance(self.data_dir, (str, os.PathLike)):
                raise ValueError(f"data_dir must be a folder, got {_shown(self.data_dir)}")
            object.__setattr__(self, "data_dir", str(self.data_dir))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "validation_split", float(self.validation_split))

    @classmethod
    def names(cls):
        """The options' names (the fields)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def add_arguments(cls, parser, *, datasets, recipes):
        """Add one ``--flag`` per option to the ``argparse`` ``parser``, with
        ``datasets`` and ``recipes`` (names) in the help."""
        for field in dataclasses.fields(cls):
            meta = field.metadata
            flag = meta["flag"] or f"--{field.name.replace('_', '-')}"
            text = meta["help"].format(datasets=", ".join(datasets), recipes=", ".join(recipes))
            kwargs = dict(dest=field.name, help=text, metavar=meta["metavar"])
            if field.type == "bool" or field.type is bool:
                parser.add_argument(flag, dest=field.name, help=text, action="store_true",
                                    default=None)
                continue
            kind = meta["parse"] or {int: int, float: float, "int": int,
                                     "float": float}.get(field.type)
            if kind is not None:
                kwargs["type"] = kind
            parser.add_argument(flag, default=None, **kwargs)

    @classmethod
    def from_namespace(cls, args):
        """The options ``argparse`` parsed (an option left out: its default);
        a bad value is a ``ValueError`` naming the flag."""
        given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                 if getattr(args, f.name, None) is not None}
        try:
            return cls(**given)
        except ValueError as error:
            message = str(error).removeprefix("Unknown ")
            field = next((f for f in dataclasses.fields(cls) if message.startswith(f.name)
                          and f.metadata["flag"]), None)
            if field is None:  # the message names the option as its flag reads
                raise
            raise ValueError(f"{field.metadata['flag']} {shortened(given[field.name])}: "
                             f"{message}") from None

    def config(self):
        """The options as a run's config records them (JSON-ready)."""
        return dataclasses.asdict(self)

    @classmethod
    def command_words(cls, config):
        """``{option: its keras-gresnet train words}`` of the options a run's
        config (:meth:`config`, as resolved) holds, in declaration order:
        those always shown, and the others where they are not the default
        (``strategy`` where it is not ``"auto"``, ``sync_batchnorm`` where
        it is on)."""
        words = {}
        for field in dataclasses.fields(cls):
            shown, value = field.metadata["shown"], config.get(field.name, field.default)
            if shown == "never" or (shown == "changed" and value in (field.default, False)):
                continue
            flag = field.metadata["flag"] or f"--{field.name.replace('_', '-')}"
            words[field.name] = [flag] if value is True else [flag, str(value)]
        return words
