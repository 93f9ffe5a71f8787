"""The papers' training recipes as data.

A :class:`Recipe` holds one paper's optimizer, learning-rate schedule,
length, batch size, weight decay, preprocessing and augmentation::

    from keras_gresnet.training import recipes
    recipe = recipes.get_recipe("preact_cifar", epochs=10)  # a quick run
    recipe.apply_to(model)                # weight decay
    model.compile(optimizer=recipe.optimizer(steps_per_epoch), ...)

Weight decay convention. The papers' frameworks (Caffe, Torch) add
``weight_decay * w`` to each decayed weight's gradient: coupled L2, which
passes through the momentum like the data gradient. That is the gradient of
``weight_decay / 2 * sum(w ** 2)``, so
:func:`~keras_gresnet.training.regularization.apply_weight_decay` attaches
``keras.regularizers.L2(weight_decay / 2)`` (Keras' ``L2(l)`` adds
``l * sum(w ** 2)``, gradient ``2 l w``). A recipe's ``weight_decay`` is
therefore the number printed in the papers (HE 1e-4, WRN 5e-4), with the
papers' effect; ``L2(weight_decay)`` would decay twice as hard.

What is decayed. Torch's ``optim.sgd`` adds ``weightDecay * x`` to the whole
flat parameter vector of ``model:getParameters()``: every kernel, bias and
BatchNorm ``gamma``/``beta`` (fb.resnet.torch train.lua:20-29, WRN
train.lua:24, 231-236). ``decay="all"`` (the CIFAR and ImageNet recipes) does
that; ``decay="kernels"`` decays conv/dense kernels only. Moving statistics
are not parameters; GR's gates ``k`` only with ``k_decay``.

Old configs. A recorded config without a field added since
(:data:`LEGACY_FIELDS`) was trained with the value there, so
:meth:`Recipe.from_config` fills it in; :meth:`Recipe.get_config` leaves such
a field out where the recipe and the registry's recipe of its name both hold
the legacy value (``gr_mnist``'s config is what its recorded runs hold).
"""

import collections.abc
import dataclasses
import inspect
import math
import types

import keras

from keras_gresnet._checks import (  # noqa: F401 (MAX_COUNT: the largest count a field takes)
    MAX_COUNT, PREPROCESSINGS, check_count, check_listed, check_number, fail, is_real,
)
from keras_gresnet._text import shown
from keras_gresnet.data.preprocessing import PAD_MODES
from keras_gresnet.optimizers import OPTIMIZERS
from keras_gresnet.training.regularization import (  # noqa: F401 (decay_variables: re-exported)
    DECAYS, apply_weight_decay, decay_variables,
)

MILESTONE_UNITS = ("fraction", "epoch", "step")
# Fields added since the first recorded runs, with the value those ran with.
LEGACY_FIELDS = {"decay": "kernels", "pad_mode": "zero"}
# Settings a paper states with its training recipe that are the architecture's
# own, so the builder owns them (an argument with the paper's value as its
# default, recorded with the model): configs written before that hold them in
# the recipe (keras_gresnet.training.runs reads them into model_kwargs).
BUILDER_SETTINGS = ("dropout", "bn_momentum")


def _optimizer_classes():
    """Every Keras optimizer by lower-case class name (``"sgd"``, ``"nadam"``...),
    and this package's (``"keras1_nadam"``, :mod:`keras_gresnet.optimizers`)."""
    return {
        **{
            cls.__name__.lower(): cls
            for cls in vars(keras.optimizers).values()
            if isinstance(cls, type)
            and issubclass(cls, keras.optimizers.Optimizer)
            and cls is not keras.optimizers.Optimizer
        },
        **OPTIMIZERS,
    }


# Optimizer arguments and what they accept (beyond their default's type):
# averaging factors in [0, 1), a positive epsilon, counts.
_UNIT_INTERVAL = ("beta_1", "beta_2", "momentum", "ema_momentum", "rho")
_POSITIVE = ("epsilon", "schedule_decay", "loss_scale_factor", "clipnorm", "clipvalue",
             "global_clipnorm")
_COUNTS = ("gradient_accumulation_steps", "ema_overwrite_frequency")


def _check_optimizer_kwargs(cls, kwargs):
    """Each of ``kwargs`` a value ``cls`` can train with, checked before
    anything is written (a bad one used to fail inside the first step)."""
    defaults = {k: p.default for k, p in inspect.signature(cls).parameters.items()}
    for key, value in kwargs.items():
        argument = f"{_field('optimizer_kwargs')}[{key!r}]"
        default = defaults.get(key)
        if value is None and default is None:
            continue
        if isinstance(default, bool):
            if not isinstance(value, bool):
                fail(argument, value, "true or false")
        elif key == "name":
            if not isinstance(value, str) or not value:
                fail(argument, value, "a non-empty string")
        elif key in _UNIT_INTERVAL:
            if not is_real(value) or not 0 <= value < 1:
                fail(argument, value, "a number >= 0 and < 1")
        elif key in _POSITIVE:
            check_number(value, argument, 0)
        elif key in _COUNTS:
            check_count(value, argument, 1)
        elif is_real(default) or key == "weight_decay":
            check_number(value, argument)


def _field(name):
    """How an error names the recipe's field ``name``."""
    return f"Recipe field {name}"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One paper's training recipe.

    Attributes:
        name: the recipe's name in :data:`RECIPES`.
        optimizer_name: a Keras optimizer class name, case-insensitive.
        optimizer_kwargs: its arguments but ``learning_rate`` (read-only).
        learning_rate: the initial learning rate.
        lr_milestones: where the learning rate is multiplied by ``lr_factor``,
            in ``lr_milestone_unit``.
        lr_milestone_unit: ``"fraction"`` of the whole run (GR: 50%, 75%),
            ``"epoch"``, or ``"step"`` (iterations: HE's 32k, 48k).
        lr_factor: the multiplier at each milestone (0.1 HE, 0.2 WRN).
        warmup_steps: iterations at ``warmup_lr`` before ``learning_rate``
            (HE: 400 at 0.01; ResNet v1's ResNet-110, and HE's appendix as we
            recall it for all its CIFAR runs: see ``he_cifar``). A milestone
            inside the warm-up takes effect when the warm-up ends.
        warmup_lr: the warm-up learning rate.
        epochs: length of the run in epochs.
        max_steps: length in iterations instead (HE: 64k), or ``None``.
        batch_size: examples per step.
        weight_decay: the papers' weight decay (see the module docstring).
        decay: what it decays: ``"all"`` parameters (Torch's ``optim.sgd``
            in the papers' code) or ``"kernels"`` only.
        k_decay: decay GR's gates ``k`` too (GR Table 3: it hurts).
        preprocessing: ``"scale"``, ``"mean"`` or ``"meanstd"``
            (:class:`keras_gresnet.data.Preprocessing`).
        augment: pad-4 random crop + horizontal flip.
        pad_mode: the crop's padding: ``"zero"`` (fb.resnet.torch) or
            ``"reflect"`` (WRN's scripts).
        citation: where the numbers come from.
    """

    name: str
    optimizer_name: str
    optimizer_kwargs: dict = dataclasses.field(hash=False)  # a mapping is unhashable
    learning_rate: float
    epochs: int
    lr_milestones: tuple = ()
    lr_milestone_unit: str = "fraction"
    lr_factor: float = 0.1
    warmup_steps: int = 0
    warmup_lr: float = None
    max_steps: int = None
    batch_size: int = 128
    weight_decay: float = 0.0
    decay: str = "all"
    k_decay: bool = False
    preprocessing: str = "scale"
    augment: bool = False
    pad_mode: str = "zero"
    citation: str = ""

    def __post_init__(self):
        # Normalise (lists from a JSON config; read-only kwargs), then check.
        if not isinstance(self.optimizer_kwargs, collections.abc.Mapping) or not all(
                isinstance(key, str) for key in self.optimizer_kwargs):
            fail(_field("optimizer_kwargs"), self.optimizer_kwargs,
                 "a mapping of optimizer argument names to values, e.g. {\"momentum\": 0.9}")
        object.__setattr__(
            self, "optimizer_kwargs", types.MappingProxyType(dict(self.optimizer_kwargs))
        )
        milestones = self.lr_milestones
        if is_real(milestones):  # one milestone, written as a bare number
            milestones = (milestones,)
        if isinstance(milestones, (str, bytes)) or not isinstance(
                milestones, collections.abc.Iterable):
            fail(_field("lr_milestones"), milestones, "a sequence of numbers, e.g. (0.5, 0.75)")
        object.__setattr__(self, "lr_milestones", tuple(milestones))
        classes = _optimizer_classes()
        cls = classes.get(str(self.optimizer_name).lower())
        if cls is None:
            fail(_field("optimizer_name"), self.optimizer_name, f"one of {sorted(classes)}")
        accepted = set(inspect.signature(cls).parameters) - {"learning_rate", "kwargs"}
        unknown = sorted(set(self.optimizer_kwargs) - accepted)
        if unknown:
            fail(_field("optimizer_kwargs"), unknown, f"arguments of {cls.__name__}: {sorted(accepted)}")
        _check_optimizer_kwargs(cls, self.optimizer_kwargs)
        check_listed(self.lr_milestone_unit, _field("lr_milestone_unit"), MILESTONE_UNITS)
        check_listed(self.preprocessing, _field("preprocessing"), PREPROCESSINGS)
        check_listed(self.decay, _field("decay"), DECAYS)
        check_listed(self.pad_mode, _field("pad_mode"), PAD_MODES)
        for field, low, high in (
            ("learning_rate", 0, None),
            ("lr_factor", 0, None),
            ("weight_decay", None, None),
        ):
            check_number(getattr(self, field), _field(field), low, high)
        for field, minimum in (("epochs", 1), ("batch_size", 1), ("warmup_steps", 0)):
            check_count(getattr(self, field), _field(field), minimum)
        if self.max_steps is not None:
            check_count(self.max_steps, _field("max_steps"), 1)
        if self.warmup_steps:
            check_number(self.warmup_lr, _field("warmup_lr"), 0)
        milestones = self.lr_milestones
        fraction = self.lr_milestone_unit == "fraction"
        for m in milestones:
            check_number(m, _field("lr_milestones"), 0, 1 if fraction else MAX_COUNT)
        if any(b <= a for a, b in zip(milestones, milestones[1:])):
            fail(_field("lr_milestones"), milestones, "increasing values")

    # -- length and schedule -------------------------------------------------

    def total_steps(self, steps_per_epoch):
        """Iterations in the whole run: ``max_steps``, else ``epochs`` epochs."""
        return self.max_steps or self.epochs * steps_per_epoch

    def fit_epochs(self, steps_per_epoch):
        """Epochs to pass to ``model.fit`` to cover :meth:`total_steps`."""
        return math.ceil(self.total_steps(steps_per_epoch) / steps_per_epoch)

    def _milestone_rounded(self, steps_per_epoch):
        """Each milestone's iteration, rounded, before any merging."""
        per_unit = {
            "fraction": self.total_steps(steps_per_epoch),
            "epoch": steps_per_epoch,
            "step": 1,
        }[self.lr_milestone_unit]
        return tuple(round(m * per_unit) for m in self.lr_milestones)

    def milestone_steps(self, steps_per_epoch):
        """The first iteration (0-based, Keras' ``optimizer.iterations``) of
        each learning-rate drop, one per milestone, non-decreasing. On a run
        too short to give each its own step, milestones share one (their
        factors multiply from it), and one that rounds to step 0 comes at
        step 1: the first step is always at ``learning_rate``
        (:meth:`schedule_note` says so)."""
        return tuple(max(1, s) for s in self._milestone_rounded(steps_per_epoch))

    def schedule_note(self, steps_per_epoch):
        """One line saying how a run too short for the milestones applies
        them (merged on one step, or moved from step 0 to step 1), or ``None``
        where each milestone has its own step after step 0."""
        rounded = self._milestone_rounded(steps_per_epoch)
        steps = self.milestone_steps(steps_per_epoch)
        if rounded == steps and len(set(steps)) == len(steps):
            return None
        drops = ", ".join(f"x{self.lr_factor ** steps.count(s):g} from step {s}"
                          for s in sorted(set(steps)))
        return (f"Recipe {self.name!r}: lr_milestones {self.lr_milestones} "
                f"({self.lr_milestone_unit}) fall on steps {rounded} of a "
                f"{self.total_steps(steps_per_epoch)}-step run, merged: learning rate "
                f"{self.learning_rate:g} {drops}")

    def learning_rate_at(self, step, steps_per_epoch):
        """The learning rate of iteration ``step`` (0-based): ``warmup_lr``
        during the warm-up, then ``learning_rate`` times ``lr_factor`` per
        milestone passed."""
        if step < self.warmup_steps:
            return self.warmup_lr
        passed = sum(step >= s for s in self.milestone_steps(steps_per_epoch))
        return self.learning_rate * self.lr_factor**passed

    def learning_rate_schedule(self, steps_per_epoch):
        """The recipe's step schedule as a (built-in, serializable)
        ``keras.optimizers.schedules.PiecewiseConstantDecay``, warm-up included."""
        check_count(steps_per_epoch, _field("steps_per_epoch"), 1)
        milestones = self.milestone_steps(steps_per_epoch)
        # Each rate starts at a milestone or at the warm-up's end (a milestone
        # inside the warm-up shows when it ends); milestones sharing a step
        # (a short run) are one boundary, as Keras needs them increasing.
        starts = tuple(sorted({s for s in milestones if s > self.warmup_steps}
                              | ({self.warmup_steps} if self.warmup_steps else set())))
        values = [self.learning_rate_at(s, steps_per_epoch) for s in (0,) + starts]
        if not starts:
            # A constant rate: Keras' PiecewiseConstantDecay needs one boundary.
            starts, values = (1,), values * 2
        # Keras keeps values[i] while step <= boundaries[i]: the boundary is the
        # last step at the old rate.
        return keras.optimizers.schedules.PiecewiseConstantDecay(
            [s - 1 for s in starts], values
        )

    def optimizer(self, steps_per_epoch):
        """A new Keras optimizer with the recipe's arguments and schedule."""
        cls = _optimizer_classes()[self.optimizer_name.lower()]
        return cls(
            learning_rate=self.learning_rate_schedule(steps_per_epoch),
            **self.optimizer_kwargs,
        )

    # -- model ---------------------------------------------------------------

    def apply_to(self, model):
        """Attach the recipe's weight decay to ``model`` (before ``compile``);
        returns ``model``. The architecture's own settings (BatchNorm
        momentum, dropout) are the builder's arguments, whose defaults are
        the papers' (:data:`BUILDER_SETTINGS`)."""
        apply_weight_decay(model, self.weight_decay, k_decay=self.k_decay, decay=self.decay)
        return model

    # -- serialization -------------------------------------------------------

    def _recorded(self, field):
        """Whether :meth:`get_config` writes ``field``: always, but a
        :data:`LEGACY_FIELDS` entry that holds its legacy value where the
        registry's recipe of this name does too (or there is none)."""
        legacy = LEGACY_FIELDS.get(field, self)  # self: no legacy value
        registered = RECIPES.get(self.name)
        return getattr(self, field) != legacy or (
            registered is not None and getattr(registered, field) != legacy)

    def get_config(self):
        """The recipe as a JSON-ready dict, without a :data:`LEGACY_FIELDS`
        entry that holds its legacy value as the registry's recipe does (the
        config it had before the field existed)."""
        config = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if self._recorded(f.name)}
        config["optimizer_kwargs"] = dict(self.optimizer_kwargs)
        config["lr_milestones"] = list(self.lr_milestones)
        return config

    @classmethod
    def from_config(cls, config):
        """The recipe of ``config``; a field it lacks from :data:`LEGACY_FIELDS`
        gets the value runs recorded before the field existed."""
        return cls(**{**LEGACY_FIELDS, **config})


RECIPES = {
    "gr_mnist": Recipe(
        name="gr_mnist",
        # Keras 1's Nadam, which GR used (momentum schedule over ~20 epochs,
        # epsilon 1e-8); optimizer_name="nadam" is Keras 3's.
        optimizer_name="keras1_nadam",
        optimizer_kwargs=dict(beta_1=0.9),
        learning_rate=0.002,
        epochs=100,
        batch_size=128,
        weight_decay=0.0,
        decay="kernels",  # no decay at all; the value its recorded runs hold
        preprocessing="scale",
        augment=False,
        citation="GR, MNIST nets (Tables 1-2): Keras 1 Nadam (schedule_decay 0.004, "
        "epsilon 1e-8), lr 0.002, beta_1 0.9, no decay, 100 epochs, batch 128",
    ),
    "preact_cifar": Recipe(
        name="preact_cifar",
        optimizer_name="sgd",
        optimizer_kwargs=dict(momentum=0.9, nesterov=True),
        learning_rate=0.1,
        lr_milestones=(0.5, 0.75),
        lr_factor=0.1,
        epochs=164,  # ~ HE's 64k iterations at 391 steps per epoch
        batch_size=128,
        weight_decay=1e-4,
        # Torch's optim.sgd decays every parameter (fb.resnet.torch train.lua:20-29).
        decay="all",
        preprocessing="mean",
        augment=True,
        pad_mode="zero",  # fb.resnet.torch datasets/transforms.lua:62-72 (RandomCrop)
        citation="GR, pre-activation ResNets on CIFAR (Table 3), HE's recipe: SGD "
        "Nesterov 0.9, lr 0.1 /10 at 50% and 75% of the epochs, wd 1e-4 on every "
        "parameter, BN momentum 0.9, mean subtraction, pad-4 crop + flip, batch 128",
    ),
}
# WRN's recipe: HE's CIFAR SGD with WRN's schedule, weight decay and
# statistics (WRN's dropout 0.3 is wide_resnet's default dropout=0.3).
RECIPES["wrn_cifar"] = dataclasses.replace(
    RECIPES["preact_cifar"], name="wrn_cifar",
    # x0.2 when WRN's 1-based epoch 60, 120, 160 starts (train.lua:173-181):
    # after 59, 119, 159 epochs of 200.
    lr_milestones=(59 / 200, 119 / 200, 159 / 200), lr_factor=0.2, epochs=200,
    weight_decay=5e-4, preprocessing="meanstd",
    pad_mode="reflect",  # WRN scripts/train_cifar.sh:9, train.lua:103-117
    citation="WRN's recipe (GR Tables 3-4; WRN's train.lua, scripts/train_cifar.sh): "
    "SGD Nesterov 0.9, lr 0.1 x0.2 at 1-based epochs 60, 120, 160 of 200, wd 5e-4 "
    "on every parameter, dropout 0.3, mean/std, pad-4 reflection crop + flip, batch 128",
)
# GR's CIFAR recipe on the MNIST family (MNIST, Fashion-MNIST: 60k 28x28 grey
# training images), the conv zoo's first real images: no CIFAR exists on the
# machines this package is developed on. Everything is preact_cifar's (SGD,
# Nesterov 0.9, lr 0.1 /10 at 50% and 75%, weight decay 1e-4 on every
# parameter as fb.resnet.torch scopes it, BN momentum 0.9, mean subtraction,
# batch 128, pad 4 + random 28x28 crop) but two things:
# - flips: augment=True is the dataset's label-keeping augmentation (data's
#   DatasetInfo.flips_keep_labels): crop + horizontal flip on Fashion-MNIST,
#   crop only on MNIST (a mirrored 2, 3 or 7 is no digit);
# - epochs: 40, chosen once so that one n=5 run takes about 2 hours here and
#   kept for every net and seed (a later, faster machine does not change it).
#   Measured 2026-12-02: `KERAS_BACKEND=torch keras-gresnet train
#   gresnet_cifar --n 5 --dataset fashion_mnist --epochs 1` took 194 s for its
#   one epoch (469 steps at 414 ms, 309 img/s, plus the 10k test pass) on
#   2 cores of an AMD EPYC with AVX-512 and AVX512-BF16, the torch backend with
#   the zoo's fused BatchNorm, nothing else running: 40 epochs = 2.2 hours.
#   GR's 164 CIFAR epochs would be 9 hours a net, 54 for the six of GR Table
#   3's question; 40 epochs of 60k images are 2.4M examples (GR: 8.2M).
RECIPES["preact_mnist"] = dataclasses.replace(
    RECIPES["preact_cifar"],
    name="preact_mnist",
    epochs=40,
    citation="GR's CIFAR recipe (Table 3; HE's) on the MNIST family at 28x28x1: SGD "
    "Nesterov 0.9, lr 0.1 /10 at 50% and 75% of 40 epochs (chosen for a 2-hour run "
    "on 2 CPU cores), wd 1e-4 on every parameter, BN momentum 0.9, mean subtraction, "
    "pad-4 crop + flip where a flip keeps the label (Fashion-MNIST, not MNIST), "
    "batch 128",
)
# HE's CIFAR recipe for HE's own CIFAR nets (resnet110..., preact_resnet110...):
# preact_cifar's epochs, with HE's warm-up (lr 0.01 for the first 400 iterations;
# HE's appendix, as we recall it, applies it to all its CIFAR runs, following
# ResNet v1's ResNet-110: the paper's text could not be checked offline here)
# and fb.resnet.torch's per-channel
# mean/std (datasets/cifar10.lua:37-48), which HE's code builds on.
RECIPES["he_cifar"] = dataclasses.replace(
    RECIPES["preact_cifar"],
    name="he_cifar",
    warmup_steps=400,
    warmup_lr=0.01,
    preprocessing="meanstd",
    citation="HE's CIFAR recipe (HE appendix; fb.resnet.torch): SGD Nesterov 0.9, "
    "lr 0.01 for 400 iterations, then 0.1 /10 at 50% and 75% of 164 epochs, wd "
    "1e-4 on every parameter, per-channel mean/std, pad-4 crop + flip, batch 128",
)
# The same in HE's own iterations (/10 at 32k and 48k, stop at 64k).
RECIPES["preact_cifar_he"] = dataclasses.replace(
    RECIPES["he_cifar"],
    name="preact_cifar_he",
    lr_milestones=(32_000, 48_000),
    lr_milestone_unit="step",
    max_steps=64_000,
    citation="HE's CIFAR recipe in iterations (HE appendix): lr 0.01 for 400 "
    "iterations, then 0.1 /10 at 32k and 48k, stop at 64k, momentum 0.9, wd 1e-4 "
    "on every parameter, batch 128 (Nesterov and per-channel mean/std as in "
    "fb.resnet.torch, which HE's code builds on)",
)
# HE's ImageNet recipe: fb.resnet.torch's (HE appendix: lr 0.1 /10 at epochs
# 30 and 60, batch 256, no warm-up). The data side (scale + aspect-ratio crops
# of 224, flip, fixed mean/std) is keras_gresnet.data.imagenet.
RECIPES["he_imagenet"] = dataclasses.replace(
    RECIPES["preact_cifar"],
    name="he_imagenet",
    learning_rate=0.1,  # for batch 256 (opts.lua:39)
    lr_milestones=(30, 60),  # floor((epoch - 1) / 30) (train.lua:177-178)
    lr_milestone_unit="epoch",
    epochs=90,  # opts.lua:77
    batch_size=256,
    weight_decay=1e-4,  # opts.lua:41
    preprocessing="meanstd",  # fb's fixed statistics (datasets/imagenet.lua:66-70)
    citation="HE's ImageNet recipe (HE appendix; fb.resnet.torch train.lua, opts.lua, "
    "datasets/imagenet.lua): SGD Nesterov 0.9, lr 0.1 /10 at epochs 30 and 60 of 90, "
    "batch 256, wd 1e-4 on every parameter, BN momentum 0.9, random-sized 224 "
    "crop + flip, mean/std",
)


def get_recipe(name, **overrides):
    """The recipe ``name`` from :data:`RECIPES`, with fields replaced by
    ``overrides`` (``get_recipe("wrn_cifar", epochs=2)``).

    Raises:
        ValueError: unknown recipe, unknown field, or an invalid value.
    """
    if name not in RECIPES:
        raise ValueError(
            f"Unknown recipe name={shown(name)}; accepted: {', '.join(map(repr, RECIPES))}"
        )
    fields = [f.name for f in dataclasses.fields(Recipe)]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"Unknown Recipe field(s) {unknown}; accepted: {fields}")
    return dataclasses.replace(RECIPES[name], **overrides)
