"""Tests of keras_gresnet.training.recipes: the papers' recipes, schedules, weight decay."""

import dataclasses
import inspect
import json

import keras
import numpy as np
import pytest

from helpers import sgd_step_changes, zero_loss
from keras_gresnet import zoo
from keras_gresnet.layers import gate_layers
from keras_gresnet.optimizers import Keras1Nadam
from keras_gresnet.zoo.resnets import IMAGENET_LAYOUTS
from keras_gresnet.training import recipes
from keras_gresnet.training.recipes import RECIPES, Recipe, get_recipe


def lr_at(schedule, steps):
    return [float(schedule(step)) for step in steps]


# --------------------------------------------------------------------------
# The recipes' numbers, as the papers state them: GR's MNIST runs (GR Tables
# 1-2: Nadam, lr 0.002, 100 epochs, batch 128); GR's CIFAR runs (GR Table 3, after
# HE: SGD, Nesterov momentum 0.9, lr 0.1 /10 at 50% and 75%, decay 1e-4, batch 128);
# HE's own CIFAR training (lr 0.01 for 400 iterations, then 0.1 /10 at 32k and
# 48k iterations, stop at 64k; fb.resnet.torch's per-channel mean/std); WRN's
# (lr x0.2 when 1-based epochs 60, 120, 160 of 200 start, decay 5e-4, dropout 0.3,
# reflection padding); HE's ImageNet (fb.resnet.torch: /10 every 30 epochs, 90
# epochs, batch 256). The papers' code decays every parameter (Torch's optim.sgd).


SGD_NESTEROV = dict(optimizer_name="sgd", optimizer_kwargs={"momentum": 0.9, "nesterov": True})
CIFAR = dict(SGD_NESTEROV, learning_rate=0.1, batch_size=128, augment=True, decay="all")
HE_CIFAR = dict(CIFAR, warmup_steps=400, warmup_lr=0.01)
PAPER_NUMBERS = {
    "gr_mnist": dict(
        optimizer_name="keras1_nadam", optimizer_kwargs={"beta_1": 0.9}, learning_rate=0.002,
        epochs=100, batch_size=128, weight_decay=0.0, preprocessing="scale", augment=False,
        lr_milestones=(), warmup_steps=0,
    ),
    "preact_cifar": dict(
        CIFAR, weight_decay=1e-4, preprocessing="mean", epochs=164,
        lr_milestones=(0.5, 0.75), lr_milestone_unit="fraction", lr_factor=0.1,
        warmup_steps=0, pad_mode="zero",
    ),
    # GR's CIFAR recipe on the MNIST family: only its length differs (40
    # epochs, chosen for a 2-hour run here: see its comment in recipes.py)
    "preact_mnist": dict(
        CIFAR, weight_decay=1e-4, preprocessing="mean", epochs=40,
        lr_milestones=(0.5, 0.75), lr_milestone_unit="fraction", lr_factor=0.1,
        warmup_steps=0, pad_mode="zero",
    ),
    "he_cifar": dict(
        HE_CIFAR, weight_decay=1e-4, preprocessing="meanstd", epochs=164,
        lr_milestones=(0.5, 0.75), lr_milestone_unit="fraction", lr_factor=0.1,
        pad_mode="zero",
    ),
    "preact_cifar_he": dict(
        HE_CIFAR, weight_decay=1e-4, preprocessing="meanstd", max_steps=64000,
        lr_milestones=(32000, 48000), lr_milestone_unit="step", lr_factor=0.1,
        pad_mode="zero",
    ),
    "wrn_cifar": dict(
        CIFAR, weight_decay=5e-4, preprocessing="meanstd", epochs=200,
        lr_milestones=(59 / 200, 119 / 200, 159 / 200), lr_milestone_unit="fraction",
        lr_factor=0.2, warmup_steps=0, pad_mode="reflect",
    ),
    "he_imagenet": dict(
        SGD_NESTEROV, learning_rate=0.1, batch_size=256, epochs=90, weight_decay=1e-4,
        decay="all", lr_milestones=(30, 60), lr_milestone_unit="epoch", lr_factor=0.1,
        warmup_steps=0, preprocessing="meanstd", augment=True,
    ),
}


def test_the_builders_hold_the_papers_architecture_settings():
    # BatchNorm momentum and dropout are the builders' (one owner per
    # setting, recipes.BUILDER_SETTINGS), with the papers' values: Keras'
    # 0.99 for GR's MLPs (GR trained in Keras), fb.resnet.torch's 0.1 (Keras'
    # 0.9) for the conv nets, WRN's dropout 0.3.
    assert not set(recipes.BUILDER_SETTINGS) & {f.name for f in dataclasses.fields(Recipe)}
    for name in zoo.list_models():
        builder = zoo.model_builder(name)
        params = inspect.signature(builder).parameters
        momentum = params["bn_momentum"].default
        if builder.default_recipe == "gr_mnist":
            assert momentum == 0.99, name
        elif momentum is None:  # the ImageNet layout's unit preset: HE's
            assert IMAGENET_LAYOUTS["he"][0].bn_momentum == 0.9
        else:
            assert momentum == 0.9, name
        dropout = params["dropout"].default if "dropout" in params else 0.0
        assert dropout == (0.3 if builder.default_recipe == "wrn_cifar" else 0.0), name


@pytest.mark.parametrize("name", PAPER_NUMBERS)
def test_recipes_hold_the_papers_numbers(name):
    recipe = RECIPES[name]
    config = recipe.get_config()
    config["lr_milestones"] = tuple(config["lr_milestones"])
    for field, value in PAPER_NUMBERS[name].items():
        assert getattr(recipe, field) == value, field
    assert not recipe.k_decay  # GR: k decay hurts
    assert recipe.citation and recipe.name == name
    assert set(PAPER_NUMBERS) == set(RECIPES)


def test_gr_mnist_config_is_what_its_recorded_runs_hold():
    """GR's MNIST recipe is unchanged: its config has no new field, so a
    recorded run resumes with today's defaults. Its BatchNorm momentum,
    which the recipe held then, is the builders' default now: reading the
    recorded configs moves nothing into their builder arguments."""
    import pathlib

    from keras_gresnet.training import runs

    results = pathlib.Path(__file__).resolve().parents[1] / "zoo" / "results"
    paths = sorted(results.glob("*/runs/*/config.json"))
    assert len(paths) >= 28  # MNIST, Fashion-MNIST and conv runs
    for path in paths:
        with open(path) as f:
            raw = json.load(f)
        config = runs.read_config(path)
        assert config["model_kwargs"] == raw["model_kwargs"], path
        assert not set(recipes.BUILDER_SETTINGS) & set(config["recipe"]), path
        recorded = config["recipe"]
        if recorded["name"] == "gr_mnist" and recorded["epochs"] == 100:
            expected = RECIPES["gr_mnist"].get_config()
            if "--optimizer-kwargs" in raw.get("command", []):  # another reading, on its
                expected["optimizer_kwargs"] = recorded["optimizer_kwargs"]  # command line
            assert expected == recorded, path


def test_old_configs_keep_their_meaning():
    """A config recorded before ``decay`` and ``pad_mode`` existed was trained
    with kernel-only decay and zero padding: it loads so, and a recipe that
    holds those values writes the config it had."""
    old = RECIPES["wrn_cifar"].get_config()
    del old["decay"], old["pad_mode"]
    recipe = recipes.Recipe.from_config(old)
    assert (recipe.decay, recipe.pad_mode) == ("kernels", "zero")
    # Written out where wrn_cifar's defaults differ (a command line keeps them).
    assert (recipe.get_config()["decay"], recipe.get_config()["pad_mode"]) == ("kernels", "zero")
    assert recipes.Recipe.from_config(recipe.get_config()) == recipe
    new = RECIPES["wrn_cifar"].get_config()
    assert (new["decay"], new["pad_mode"]) == ("all", "reflect")
    assert recipes.Recipe.from_config(new) == RECIPES["wrn_cifar"]
    # GR's MNIST recipe, and one of no registered name, write neither.
    assert not {"decay", "pad_mode"} & set(RECIPES["gr_mnist"].get_config())
    mine = dataclasses.replace(RECIPES["gr_mnist"], name="mine")
    assert "decay" not in mine.get_config()
    assert recipes.Recipe.from_config(mine.get_config()) == mine
    assert get_recipe("gr_mnist", decay="all").get_config()["decay"] == "all"


# --------------------------------------------------------------------------
# Learning-rate schedules.


def test_preact_schedule_fractions_of_the_run():
    schedule = get_recipe("preact_cifar", epochs=10).learning_rate_schedule(100)
    assert isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule)
    np.testing.assert_allclose(
        lr_at(schedule, [0, 499, 500, 749, 750, 999, 5000]),
        [0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.001],
        rtol=1e-6,  # float32 rate vs float64 literal: one rounding, 2**-24 ~ 6e-8
    )
    # Default length: 164 epochs of 391 steps, drops at epochs 82 and 123.
    assert RECIPES["preact_cifar"].milestone_steps(391) == (82 * 391, 123 * 391)


def test_wrn_schedule_drops_when_its_epochs_60_120_160_start():
    """WRN's train.lua:173-181 multiplies by 0.2 when the 1-based epoch 60
    starts: after 59 epochs (0-based epoch 59)."""
    recipe = RECIPES["wrn_cifar"]
    assert recipe.milestone_steps(10) == (590, 1190, 1590)
    assert recipe.milestone_steps(391) == (59 * 391, 119 * 391, 159 * 391)
    np.testing.assert_allclose(
        lr_at(recipe.learning_rate_schedule(10), [0, 589, 590, 1189, 1190, 1589, 1590, 1999]),
        [0.1, 0.1, 0.02, 0.02, 0.004, 0.004, 0.0008, 0.0008],
        rtol=1e-6,  # float32 rate vs float64 literal: one rounding, 2**-24 ~ 6e-8
    )


def test_he_iteration_schedule_and_length():
    recipe = RECIPES["preact_cifar_he"]
    # Iteration milestones do not depend on the epoch length; HE's warm-up
    # (lr 0.01 for the first 400 iterations, HE appendix) comes first.
    for steps_per_epoch in (391, 100):
        schedule = recipe.learning_rate_schedule(steps_per_epoch)
        steps = [0, 399, 400, 31999, 32000, 47999, 48000, 63999]
        expected = [0.01, 0.01, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001]
        # float32 rate vs float64 literal: one rounding, 2**-24 ~ 6e-8
        np.testing.assert_allclose(lr_at(schedule, steps), expected, rtol=1e-6)
        assert [recipe.learning_rate_at(s, steps_per_epoch) for s in steps] == \
            pytest.approx(expected)
    assert recipe.total_steps(391) == 64000 and recipe.fit_epochs(391) == 164  # ~164 epochs


def test_he_cifar_warms_up_then_drops_at_half_and_three_quarters():
    recipe = RECIPES["he_cifar"]
    assert recipe.milestone_steps(391) == (82 * 391, 123 * 391)
    np.testing.assert_allclose(
        lr_at(recipe.learning_rate_schedule(391),
              [0, 399, 400, 82 * 391 - 1, 82 * 391, 123 * 391 - 1, 123 * 391]),
        [0.01, 0.01, 0.1, 0.1, 0.01, 0.01, 0.001],
        rtol=1e-6,  # float32 rate vs float64 literal: one rounding, 2**-24 ~ 6e-8
    )
    # No warm-up in GR's form of the recipe (GR does not state one).
    assert lr_at(RECIPES["preact_cifar"].learning_rate_schedule(391), [0, 399]) == \
        pytest.approx([0.1, 0.1])


def test_warmup_then_schedule():
    recipe = get_recipe("preact_cifar_he", warmup_steps=200, warmup_lr=0.02)
    np.testing.assert_allclose(
        lr_at(recipe.learning_rate_schedule(391), [0, 100, 199, 200, 31999, 32000, 48000]),
        [0.02, 0.02, 0.02, 0.1, 0.1, 0.01, 0.001],
        rtol=1e-6,  # float32 rate vs float64 literal: one rounding, 2**-24 ~ 6e-8
    )
    with pytest.raises(ValueError, match="warmup_lr=None: expected a number"):
        get_recipe("preact_cifar", warmup_steps=400)
    # A milestone inside the warm-up (a short run) shows when the warm-up ends.
    recipe = get_recipe("preact_cifar", epochs=10, warmup_steps=600, warmup_lr=0.01)
    np.testing.assert_allclose(
        lr_at(recipe.learning_rate_schedule(100), [0, 599, 600, 749, 750, 999]),
        [0.01, 0.01, 0.01, 0.01, 0.001, 0.001],
        rtol=1e-6,  # float32 rate vs float64 literal: one rounding, 2**-24 ~ 6e-8
    )


def test_constant_schedule_and_epoch_milestones():
    schedule = RECIPES["gr_mnist"].learning_rate_schedule(469)
    # float32 rate vs float64 literal: one rounding, 2**-24 ~ 6e-8
    np.testing.assert_allclose(lr_at(schedule, [0, 1, 46899, 10**7]), [0.002] * 4, rtol=1e-6)
    # ImageNet-style epoch milestones (HE: /10 at epochs 30 and 60).
    recipe = get_recipe(
        "preact_cifar", lr_milestones=(30, 60), lr_milestone_unit="epoch", epochs=90
    )
    np.testing.assert_allclose(
        lr_at(recipe.learning_rate_schedule(5), [149, 150, 299, 300]),
        [0.1, 0.01, 0.01, 0.001],
        rtol=1e-6,  # float32 rate vs float64 literal: one rounding, 2**-24 ~ 6e-8
    )


def test_short_run_merges_colliding_milestones():
    """A run too short to give each milestone its own step (issue 39: a
    1-step run of preact_mnist) merges them: the step they share gets the
    product of their factors, and a milestone that rounds to step 0 comes at
    step 1 (the first step is at the recipe's learning rate)."""
    # WRN's 59/200, 119/200, 159/200 of 2 steps round to steps 1, 1, 2.
    recipe = get_recipe("wrn_cifar", epochs=1)
    assert recipe.milestone_steps(2) == (1, 1, 2)
    schedule = recipe.learning_rate_schedule(2)
    assert list(schedule.boundaries) == [0, 1]  # strictly increasing: one per distinct step
    np.testing.assert_allclose(lr_at(schedule, [0, 1, 2, 3]), [0.1, 0.004, 0.0008, 0.0008],
                               rtol=1e-6)  # float32 rate vs float64 literal
    assert recipe.schedule_note(2) == (
        "Recipe 'wrn_cifar': lr_milestones (0.295, 0.595, 0.795) (fraction) fall on steps "
        "(1, 1, 2) of a 2-step run, merged: learning rate 0.1 x0.04 from step 1, x0.2 from step 2")
    # preact_mnist's 50% and 75% of 1 step round to steps 0 and 1: both from step 1.
    recipe = get_recipe("preact_mnist", epochs=1)
    assert recipe.milestone_steps(1) == (1, 1)
    np.testing.assert_allclose(lr_at(recipe.learning_rate_schedule(1), [0, 1]), [0.1, 0.001],
                               rtol=1e-6)  # float32 rate vs float64 literal
    assert "fall on steps (0, 1) of a 1-step run" in recipe.schedule_note(1)


@pytest.mark.parametrize("name", ["wrn_cifar", "preact_cifar", "he_cifar"])
@pytest.mark.parametrize("total", range(1, 13))
def test_short_run_rate_is_the_product_of_every_milestone_passed(name, total):
    """At every step of runs of 1 to 12 steps, the Keras schedule's rate is
    the (warm-up's, else) learning rate times the factor of every milestone
    whose rounded step (at least 1) is at or before that step; its
    boundaries strictly increase."""
    recipe = get_recipe(name, epochs=total, warmup_steps=min(RECIPES[name].warmup_steps, 3))
    schedule = recipe.learning_rate_schedule(1)
    boundaries = list(schedule.boundaries)
    assert boundaries == sorted(set(boundaries))
    starts = [max(1, round(m * total)) for m in recipe.lr_milestones]
    for step in range(total + 2):
        if step < recipe.warmup_steps:
            expected = recipe.warmup_lr
        else:
            expected = recipe.learning_rate * np.prod(
                [recipe.lr_factor for start in starts if start <= step])
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-6), step
        assert recipe.learning_rate_at(step, 1) == pytest.approx(expected), step


def test_normal_run_schedule_is_unchanged_and_unnoted():
    # The schedules of the recipes' own lengths (and of a 10-epoch run):
    # the steps and boundaries they had before short runs were merged.
    cases = [
        (RECIPES["preact_cifar"], 391, (82 * 391, 123 * 391)),
        (RECIPES["wrn_cifar"], 391, (59 * 391, 119 * 391, 159 * 391)),
        (RECIPES["preact_mnist"], 469, (20 * 469, 30 * 469)),
        (get_recipe("preact_cifar", epochs=10), 100, (500, 750)),
        (RECIPES["preact_cifar_he"], 391, (32000, 48000)),
        (RECIPES["he_imagenet"], 5005, (30 * 5005, 60 * 5005)),
    ]
    for recipe, steps_per_epoch, steps in cases:
        assert recipe.milestone_steps(steps_per_epoch) == steps
        warmup = (recipe.warmup_steps,) if recipe.warmup_steps else ()
        assert list(recipe.learning_rate_schedule(steps_per_epoch).boundaries) == \
            [s - 1 for s in warmup + steps]
        assert recipe.schedule_note(steps_per_epoch) is None
    assert RECIPES["gr_mnist"].schedule_note(469) is None  # no milestones


def test_schedule_needs_steps():
    with pytest.raises(ValueError, match="steps_per_epoch=0"):
        RECIPES["wrn_cifar"].learning_rate_schedule(0)


def test_schedule_serializes():
    recipe = get_recipe("preact_cifar_he", warmup_steps=400, warmup_lr=0.01)
    schedule = recipe.learning_rate_schedule(391)
    config = keras.optimizers.schedules.serialize(schedule)
    restored = keras.optimizers.schedules.deserialize(json.loads(json.dumps(config)))
    steps = [0, 399, 400, 32000, 48000]
    np.testing.assert_allclose(lr_at(restored, steps), lr_at(schedule, steps))


def test_optimizers():
    sgd = get_recipe("preact_cifar", epochs=10).optimizer(100)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.nesterov and sgd.momentum == 0.9
    sgd.iterations.assign(500)
    assert float(sgd.learning_rate) == pytest.approx(0.01)
    nadam = RECIPES["gr_mnist"].optimizer(469)
    assert isinstance(nadam, Keras1Nadam) and nadam.beta_1 == 0.9
    assert nadam.schedule_decay == 0.004 and nadam.epsilon == 1e-8  # Keras 1's
    assert float(nadam.learning_rate) == pytest.approx(0.002)
    keras3 = get_recipe("gr_mnist", optimizer_name="nadam").optimizer(469)
    # Keras 3's own Nadam (on PyTorch, its torch subclass), not Keras 1's.
    assert isinstance(keras3, keras.optimizers.Nadam) and not isinstance(keras3, Keras1Nadam)


# --------------------------------------------------------------------------
# get_recipe, validation, serialization.


def test_overrides_replace_fields_without_touching_the_registry():
    recipe = get_recipe("wrn_cifar", epochs=2, k_decay=True, batch_size=64)
    assert (recipe.epochs, recipe.k_decay, recipe.batch_size) == (2, True, 64)
    assert recipe.weight_decay == 5e-4
    assert RECIPES["wrn_cifar"].epochs == 200 and not RECIPES["wrn_cifar"].k_decay
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.epochs = 3
    with pytest.raises(TypeError):
        recipe.optimizer_kwargs["momentum"] = 0.5


def test_unknown_names_and_fields():
    with pytest.raises(ValueError, match=r"recipe name='resnet_imagenet'; accepted: 'gr_mnist'"):
        get_recipe("resnet_imagenet")
    unknown = r"Unknown Recipe field\(s\) \['epoch', 'lr'\]; accepted: \['name'"
    with pytest.raises(ValueError, match=unknown):
        get_recipe("gr_mnist", epoch=3, lr=0.1)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(optimizer_name="sgdw"), "optimizer_name='sgdw': expected one of"),
        (dict(optimizer_kwargs={"momentun": 0.9}), r"\['momentun'\]: expected arguments of SGD"),
        (dict(lr_milestone_unit="iter"), "unit='iter': expected one of 'fraction', 'epoch', 'st"),
        (dict(lr_milestones=(0.75, 0.5)), "expected increasing values"),
        (dict(lr_milestones=(0.5, 1.5)), "lr_milestones=1.5: expected a number > 0 and < 1"),
        (dict(preprocessing="zca"), "preprocessing='zca': expected one of 'scale', 'mean', 'mea"),
        (dict(batch_size=0), "batch_size=0: expected an integer >= 1"),
        (dict(epochs=1.5), "epochs=1.5: expected an integer >= 1"),
        (dict(weight_decay=-1e-4), "weight_decay=-0.0001: expected a number >= 0"),
        (dict(lr_factor=-1), "lr_factor=-1: expected a number > 0"),
        (dict(learning_rate="0.1"), "learning_rate='0.1': expected a number"),
        (dict(decay="bn"), "Recipe field decay='bn': expected one of 'all', 'kernels'"),
        (dict(pad_mode="edge"), "Recipe field pad_mode='edge': expected one of 'zero', 'reflect'"),
    ],
)
def test_invalid_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        get_recipe("preact_cifar", **overrides)


def test_config_round_trip_through_json():
    for recipe in RECIPES.values():
        config = json.loads(json.dumps(recipe.get_config()))
        assert recipes.Recipe.from_config(config) == recipe
    assert len({hash(r) for r in RECIPES.values()}) == len(RECIPES)


# --------------------------------------------------------------------------
# Weight decay.


@pytest.fixture
def tiny_gresnet():
    """gresnet_mlp(depth=4) on 6 inputs, 3 units, with known weights:
    kernels filled with 0.1 * (i + 1), gate k set to 2 and 3."""
    keras.utils.set_random_seed(0)
    model = zoo.gresnet_mlp(depth=4, units=3, input_shape=(6,), classes=4)
    kernels = [v for v in model.weights if v.name == "kernel"]
    for i, kernel in enumerate(kernels):
        kernel.assign(np.full(kernel.shape, 0.1 * (i + 1), np.float32))
    gates = gate_layers(model)
    for gate, k in zip(gates, (2.0, 3.0)):
        gate.k.assign(k)
    return model, kernels, gates


def decay_loss(model):
    return float(sum(float(loss) for loss in model.losses))


def test_decay_loss_is_half_wd_times_sum_of_kernel_squares(tiny_gresnet):
    model, kernels, gates = tiny_gresnet
    assert len(gates) == 2 and len(kernels) == 6  # stem, 2 x 2 block layers, classifier
    hand_sum = sum(np.size(k) * (0.1 * (i + 1)) ** 2 for i, k in enumerate(kernels))
    decayed = recipes.apply_weight_decay(model, 1e-2, decay="kernels")
    assert {v.path for v in decayed} == {v.path for v in kernels}  # no gate, bias, BN
    # float32 kernels (0.1 * i rounded) and float32 sums of squares vs float64: ~1e-6
    assert decay_loss(model) == pytest.approx(1e-2 / 2 * hand_sum, rel=1e-5)
    recipes.apply_weight_decay(model, 1e-2, k_decay=True, decay="kernels")
    assert decay_loss(model) == pytest.approx(1e-2 / 2 * (hand_sum + 2.0**2 + 3.0**2), rel=1e-5)
    # Idempotent, and k decay / all decay can be switched off again.
    recipes.apply_weight_decay(model, 1e-2, decay="kernels")
    assert decay_loss(model) == pytest.approx(1e-2 / 2 * hand_sum, rel=1e-5)  # as above
    recipes.apply_weight_decay(model, 0.0)
    assert model.losses == []


@pytest.mark.parametrize("k_decay", [False, True])
def test_decay_gradient_on_k(tiny_gresnet, k_decay):
    model, kernels, gates = tiny_gresnet
    recipes.apply_weight_decay(model, 0.1, k_decay=k_decay)
    start_kernel, start_k = kernels[0].numpy().copy(), float(gates[0].k.numpy())
    # One SGD step (lr 1) on a zero loss: the step is minus the decay's gradient.
    changes = sgd_step_changes(model, np.zeros((2, 6), "float32"), np.zeros(2), loss=zero_loss)
    # d/dw (wd / 2 * w^2) = wd * w: the papers' gradient.
    # read back as new - old: half an ulp of w (4e-9) on a step of 0.1 w (1e-2): < 1e-6
    np.testing.assert_allclose(-changes[kernels[0].path], 0.1 * start_kernel, rtol=1e-5)
    assert -changes[gates[0].k.path] == pytest.approx(0.1 * start_k if k_decay else 0.0)


def test_fit_step_under_decay_shrinks_kernels_not_gates():
    """One SGD step of model.fit: decay changes each kernel by exactly
    -lr * wd * w, and leaves gates (default), biases and BN untouched."""
    x = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
    y = np.arange(16) % 4

    def one_step(weight_decay, k_decay=False):
        keras.utils.set_random_seed(1)
        model = zoo.gresnet_mlp(depth=2, units=5, input_shape=(6,), classes=4)
        initial = {v.path: v.numpy() for v in model.weights}
        recipes.apply_weight_decay(model, weight_decay, k_decay=k_decay, decay="kernels")
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
        return initial, {v.path: v.numpy() for v in model.weights}

    initial, plain = one_step(0.0)
    _, decayed = one_step(0.2)
    _, k_decayed = one_step(0.2, k_decay=True)
    assert initial.keys() == plain.keys()
    for path, w0 in initial.items():
        difference = decayed[path] - plain[path]
        if path.endswith("/kernel"):
            # two float32 steps w0 - lr * grad, each within an ulp of |w| < 1 (1.2e-7)
            np.testing.assert_allclose(difference, -0.5 * 0.2 * w0, atol=1e-6)
            assert np.linalg.norm(decayed[path]) < np.linalg.norm(plain[path])
        else:
            np.testing.assert_array_equal(difference, 0, err_msg=path)
    gate = next(p for p in initial if p.endswith("/k"))
    # the same for k ~ 1: each step rounds within an ulp of 1 (1.2e-7)
    assert k_decayed[gate] - plain[gate] == pytest.approx(-0.5 * 0.2 * initial[gate], abs=1e-6)


@pytest.mark.parametrize("decay", ["kernels", "all"])
def test_decay_survives_keras_save_and_load(tmp_path, tiny_gresnet, decay):
    model, _, _ = tiny_gresnet
    for v in model.trainable_weights:  # BN's beta and the biases start at 0
        v.assign(v + 0.5)
    recipes.apply_weight_decay(model, 1e-3, decay=decay)
    path = tmp_path / "m.keras"
    model.save(path)
    restored = keras.saving.load_model(path, safe_mode=True)
    # the same weights (a copy) and the same sums: equal up to summation order
    assert decay_loss(restored) == pytest.approx(decay_loss(model), rel=1e-6)
    assert decay_loss(model) > 0
    # "all" decays more than the kernels.
    kernels = sum(float(np.sum(v.numpy() ** 2)) for v in model.weights if v.name == "kernel")
    assert (decay_loss(model) > 1e-3 / 2 * kernels * 1.01) == (decay == "all")


def test_the_papers_code_decays_every_parameter_but_gates_and_statistics():
    """Torch's optim.sgd decays model:getParameters() (fb.resnet.torch
    train.lua:20-29): kernels, biases, BN gamma and beta; not the moving
    statistics; GR's gates only with k_decay. One SGD step on a zero loss is
    minus the decay's gradient, wd * x."""
    keras.utils.set_random_seed(0)
    model = zoo.gresnet_cifar(n=1, input_shape=(8, 8, 3), classes=3)
    for v in model.weights:
        v.assign(np.full(v.shape, 0.5, np.float32))
    gates = {gate.k.path for gate in gate_layers(model)}
    kinds = {v.path.rsplit("/", 1)[-1] for v in model.weights}
    assert {"kernel", "bias", "gamma", "beta", "moving_mean", "moving_variance"} <= kinds
    assert gates
    for k_decay in (False, True):
        recipe = get_recipe("preact_cifar", weight_decay=0.1, k_decay=k_decay)
        recipe.apply_to(model)
        before = {v.path: v.numpy().copy() for v in model.weights}
        changes = sgd_step_changes(model, np.zeros((2, 8, 8, 3), "float32"), np.zeros(2),
                                   loss=zero_loss)
        for v in model.weights:
            name = v.path.rsplit("/", 1)[-1]
            decayed = name not in ("moving_mean", "moving_variance") and (
                v.path not in gates or k_decay)
            if v.path in changes:
                expected = -0.1 * before[v.path] if decayed else 0.0
                # 0.5 - 0.05 rounds within an ulp of 0.45 (3e-8) on 0.05; undecayed: exactly 0
                np.testing.assert_allclose(changes[v.path], expected, rtol=1e-5, atol=1e-7,
                                           err_msg=v.path)
            else:
                assert not v.trainable, v.path
    # Kernels only, the option.
    decayed = recipes.apply_weight_decay(model, 0.1, decay="kernels")
    assert {v.name for v in decayed} == {"kernel"}
    assert {v.path for v in recipes.decay_variables(model)} == \
        {v.path for v in model.trainable_weights} - gates
    with pytest.raises(ValueError, match="decay must be one of 'all', 'kernels', got 'bn'"):
        recipes.apply_weight_decay(model, 0.1, decay="bn")


def test_weight_decay_argument_check(tiny_gresnet):
    with pytest.raises(ValueError, match="weight_decay must be a number >= 0, got -1"):
        recipes.apply_weight_decay(tiny_gresnet[0], -1)


# --------------------------------------------------------------------------
# Recipe.apply_to.


def test_apply_to_attaches_the_weight_decay_and_leaves_the_builders_settings():
    model = zoo.gresnet_cifar(n=1, input_shape=(16, 16, 3), classes=10, bn_momentum=0.5)
    batch_norms = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    recipe = get_recipe("preact_cifar", k_decay=True)
    assert recipe.apply_to(model) is model
    assert batch_norms and {l.momentum for l in batch_norms} == {0.5}  # the builder's
    decayed = model.trainable_weights  # the papers' code: every parameter
    assert len(model.losses) == len(decayed)
    expected = 1e-4 / 2 * sum(float(np.sum(v.numpy() ** 2)) for v in decayed)
    # float32 sums of squares vs float64 of the same float32 values: ~1e-7 * log2(n)
    assert decay_loss(model) == pytest.approx(expected, rel=1e-5)
