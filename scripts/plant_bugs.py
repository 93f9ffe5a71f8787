"""Plant known bugs, one at a time, in a copy of the working tree, and show
that the tests catch each one:

    python scripts/plant_bugs.py            # every bug (about 10 minutes on 2 cores)
    python scripts/plant_bugs.py --list
    python scripts/plant_bugs.py gate_on_shortcut nan_exit_code

Each bug is an exact text edit of one source file (it must apply exactly
once, so a refactor that moves the code makes this script fail loudly, not
pass quietly) and the tests that should catch it. First the tests run on the
unchanged copy (they must pass), then on each planted copy (they must fail).
The table printed at the end is the evidence; exit 1 if any bug survived.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

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
        'f = keras.layers.Dropout(dropout, name=f"{name}{i}_dropout")(f)',
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
        "keras_gresnet/training/strategies.py", "        layer.synchronized = bool(synchronized)\n",
        "        pass\n",
        ["tests/test_training.py::test_mirrored_strategy_matches_a_single_device"],
        "MirroredStrategy's BatchNorm statistics are not shared"),
}


def copy_tree(destination):
    """The working tree's tracked and untracked-but-not-ignored files (as
    they are now, uncommitted edits included) under ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not name.startswith("zoo/results/"):
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
                         f"{text!r}; update scripts/plant_bugs.py")
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
