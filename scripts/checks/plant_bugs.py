"""Plant known bugs, one at a time, in a copy of the working tree, and show
that the tests catch each one:

    python scripts/checks/plant_bugs.py            # every bug (about 20 minutes on 2 cores)
    python scripts/checks/plant_bugs.py --list
    python scripts/checks/plant_bugs.py gate_on_shortcut nan_exit_code

Each bug is an exact text edit of one source file (it must apply exactly
once, so a refactor that moves the code makes this script fail loudly, not
pass quietly) and the tests that should catch it. First the tests run on the
unchanged copy (they must pass), then on each planted copy (they must fail).
The table printed at the end is the evidence; exit 1 if any bug survived.
The first six are the bugs a review planted that the suite let through; the
rest change a fidelity default (issue 15) back to what it was before.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# name: (file, text, planted text, tests that must catch it, what it is)
BUGS = {
    "gate_on_shortcut": (
        "keras_gresnet/layers/merges.py", "return g * fx + x", "return fx + g * x",
        ["tests/test_layers.py", "tests/test_zoo.py::test_each_gate_computes_gr_s_merge_of_the_ungated_branch"],
        "the gate scales the shortcut, not the residual branch"),
    "gate_ignores_k": (
        "keras_gresnet/layers/merges.py", "g = self.activation(self.k)",
        "g = self.activation(keras.ops.convert_to_tensor(self.k_initial))",
        ["tests/test_layers.py"],
        "the gate reads its initial value, not its variable k"),
    "wrn_dropout_zero": (
        "keras_gresnet/layers/units.py",
        'f = keras.layers.Dropout(spec.dropout, name=f"{name}{i}_dropout")(f)',
        'f = keras.layers.Dropout(0.0, name=f"{name}{i}_dropout")(f)',
        ["tests/test_zoo.py::test_wrn_units_drop_out_between_their_convs"],
        "WRN units drop nothing (the range check of dropout kept)"),
    "non_atomic_writes": (
        "keras_gresnet/files.py", "        yield tmp\n        os.replace(tmp, path)\n",
        "        yield path\n",
        ["tests/test_atomic_writes.py"],
        "writes go straight to the final name"),
    "nan_exit_code": (
        "keras_gresnet/cli.py", '"TrainingDiverged": 3', '"TrainingDiverged": 1',
        ["tests/test_exit_codes.py::test_a_diverged_run_exits_3_and_publishes_nothing"],
        "a diverged run exits 1, not 3"),
    "sync_batchnorm_noop": (
        "keras_gresnet/training/backends/__init__.py", "        layer.synchronized = bool(synchronized)\n",
        "        pass\n",
        ["tests/test_training.py::test_mirrored_strategy_matches_a_single_device"],
        "MirroredStrategy's BatchNorm statistics are not shared"),
    # The fidelity defaults (issue 15), each changed back to what it was.
    "decay_kernels_only": (
        "keras_gresnet/training/recipes.py",
        'if (k_decay if id(v) in gates else decay == "all" or v.name == "kernel")',
        'if (k_decay if id(v) in gates else v.name == "kernel")',
        ["tests/test_recipes.py::test_the_papers_code_decays_every_parameter_but_gates_and_statistics"],
        "weight decay on kernels only, not every parameter (fb.resnet.torch, WRN)"),
    "no_he_warmup": (
        "keras_gresnet/training/recipes.py", "    warmup_steps=400,\n", "    warmup_steps=0,\n",
        ["tests/test_recipes.py::test_he_cifar_warms_up_then_drops_at_half_and_three_quarters"],
        "HE's CIFAR recipe without the 400-iteration warm-up at lr 0.01"),
    "wrn_zero_padding": (
        "keras_gresnet/training/recipes.py", '    pad_mode="reflect",  # WRN',
        '    pad_mode="zero",  # WRN',
        ["tests/test_recipes.py", "tests/test_cifar_training.py::test_wrn_cifar_trains_with_reflected_crops_and_meanstd"],
        "WRN's crops zero-padded, not reflected"),
    "pad_mode_not_passed": (
        "keras_gresnet/training/runner.py", "        pad_mode=recipe.pad_mode,\n", "",
        ["tests/test_cifar_training.py::test_wrn_cifar_trains_with_reflected_crops_and_meanstd"],
        "train() does not hand the recipe's padding to the pipeline"),
    "tfdata_ignores_reflect": (
        "keras_gresnet/data/tfdata.py", 'mode="CONSTANT" if pad_mode == "zero" else "REFLECT"',
        'mode="CONSTANT"',
        ["tests/test_data.py::test_a_reflected_crop_is_numpys_reflect_pad_cropped"],
        "the tf.data pipeline zero-pads a reflect crop"),
    "wrn_drops_at_60": (
        "keras_gresnet/training/recipes.py", "lr_milestones=(59 / 200, 119 / 200, 159 / 200)",
        "lr_milestones=(0.3, 0.6, 0.8)",
        ["tests/test_recipes.py::test_wrn_schedule_drops_when_its_epochs_60_120_160_start"],
        "WRN's lr drops one epoch late"),
    "shortcut_dropout_rescaled": (
        "keras_gresnet/layers/units.py",
        'h = ShortcutDropout(spec.shortcut_dropout, name=f"{name}shortcut_dropout")(h)',
        'h = keras.layers.Dropout(spec.shortcut_dropout, name=f"{name}shortcut_dropout")(h)',
        ["tests/test_layers.py::test_dropout_shortcut_scales_h_by_one_half_as_he_describes",
         "tests/test_layers.py::test_shortcut_dropout_expectation_is_half_in_training_and_inference"],
        "HE Table 1's dropout shortcut rescaled by Keras' Dropout (expectation 1, not 0.5)"),
    "bottleneck_stride_on_3x3": (
        "keras_gresnet/zoo/resnets.py", 'stride_on = "1x1" if bottleneck else "3x3"',
        'stride_on = "3x3"',
        ["tests/test_zoo.py::test_he_cifar_bottleneck_nets_follow_resnet_pre_act_lua"],
        "HE's CIFAR bottleneck nets stride the 3x3, not the first 1x1 (resnet-pre-act.lua)"),
    "shortcut_takes_raw_input": (
        "keras_gresnet/zoo/resnets.py", 'shared = b == 0 if both_preact == "first" else changes',
        "shared = changes",
        ["tests/test_zoo.py::test_fb_cifar_preact_net_follows_preresnet_lua"],
        "a stage's first unit adds the raw input, not the BN-ReLU'd one (fb 'both_preact')"),
    "conv_projection_everywhere": (
        "keras_gresnet/zoo/resnets.py", 'shortcut_projection = "conv" if bottleneck else "zero_pad"',
        'shortcut_projection = "conv"',
        ["tests/test_zoo.py::test_cifar_layout_follows_he",
         "tests/test_zoo.py::test_parameter_counts_are_pinned"],
        "basic CIFAR nets project with 1x1 convs, not fb's zero-padded shortcut (type A)"),
    "imagenet_extra_preact": (
        "keras_gresnet/zoo/resnets.py", "if s == 0 and b == 0 and stem_bn:",
        "if s == 0 and b == 0 and stem_bn and not spec.preact:",
        ["tests/test_zoo.py::test_he_imagenet_net_follows_fb_preresnet_lua"],
        "a second BN-ReLU after the ImageNet max-pool (fb: 'no_preact')"),
    "fan_in_initializer": (
        "keras_gresnet/layers/units.py",
        "return keras.initializers.VarianceScaling(**CONV_INITIALIZERS[identifier])",
        "return keras.initializers.HeNormal()",
        ["tests/test_layers.py::test_kernel_initializer_is_fb_fan_out_by_default"],
        "Keras' truncated fan-in He normal, not Torch's fan-out normal"),
    "imagenet_cifar_recipe": (
        "keras_gresnet/zoo/resnets.py", 'recipe="he_imagenet",', 'recipe="preact_cifar",',
        ["tests/test_training.py"],
        "the ImageNet builders train with a CIFAR recipe"),
}


def copy_tree(destination):
    """The working tree's tracked and untracked-but-not-ignored files (as
    they are now, uncommitted edits included) under ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run_tests(tree, tests):
    """pytest's exit code for ``tests`` in ``tree``, importing the package
    from ``tree`` (not the installed checkout), and the seconds it took."""
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="3")
    where = subprocess.run([sys.executable, "-c", "import keras_gresnet; print(keras_gresnet.__file__)"],
                           cwd=tree, env=env, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(tree), where.stdout
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                             *tests], cwd=tree, env=env, capture_output=True, text=True)
    return result.returncode, time.monotonic() - start, result.stdout[-1500:]


def plant(tree, file, text, planted):
    path = tree / file
    source = path.read_text()
    count = source.count(text)
    if count != 1:
        raise SystemExit(f"{file}: the text to plant a bug in occurs {count} times, not once: "
                         f"{text!r}; update scripts/checks/plant_bugs.py")
    path.write_text(source.replace(text, planted))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bugs", nargs="*", help=f"some of {sorted(BUGS)} (default: all)")
    parser.add_argument("--list", action="store_true", help="list the bugs and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, (file, *_, what) in BUGS.items():
            print(f"{name:22} {file:40} {what}")
        return 0
    unknown = sorted(set(args.bugs) - set(BUGS))
    if unknown:
        parser.error(f"unknown bugs {unknown}; known: {sorted(BUGS)}")
    chosen = args.bugs or list(BUGS)
    rows, survived = [], []
    with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
        clean = Path(tmp) / "clean"
        copy_tree(clean)
        tests = sorted({t for name in chosen for t in BUGS[name][3]})
        code, seconds, tail = run_tests(clean, tests)
        if code != 0:
            print(tail)
            raise SystemExit(f"the tests fail on the unchanged tree (exit {code}): fix that first")
        print(f"unchanged tree: {len(tests)} test selections pass ({seconds:.0f} s)")
        for name in chosen:
            file, text, planted, bug_tests, what = BUGS[name]
            tree = Path(tmp) / name
            shutil.copytree(clean, tree)
            plant(tree, file, text, planted)
            code, seconds, tail = run_tests(tree, bug_tests)
            caught = code == 1  # test failures (not a collection or usage error)
            if not caught:
                survived.append(name)
                print(tail)
            failed = [line.split(" ")[1] for line in tail.splitlines() if line.startswith("FAILED")]
            rows.append((name, what, "caught" if caught else f"SURVIVED (pytest exit {code})",
                         failed[0] if failed else "-", f"{seconds:.0f}"))
            shutil.rmtree(tree)
    print("\n| bug | what | result | first failing test | s |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
