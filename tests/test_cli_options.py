"""Where the command line's free options go: recipe fields to the recipe,
everything else to the builder; each setting has one owner. Bad input (the
command line's, a preset's, finetune()'s) is refused in one line, exit 2,
before the first write; an error inside Keras keeps its traceback; what the
command line prints is standard JSON without TensorFlow's start-up lines."""

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

from helpers import TINY, one_error_line, train, tree
from keras_gresnet import cli, training, zoo
from keras_gresnet.training import runs


def _recipe_fields():
    return {f.name for f in dataclasses.fields(training.Recipe)} - {"name", "citation"}


def test_no_name_is_both_a_recipe_field_and_a_builder_argument():
    # One owner per setting: an option goes to the recipe or to the builder
    # by its name alone, for every registered builder.
    for name in zoo.list_models():
        both = _recipe_fields() & set(inspect.signature(zoo.model_builder(name)).parameters)
        assert not both, (name, both)
    assert {"learning_rate", "weight_decay", "epochs"} <= _recipe_fields()


def test_free_options_go_to_their_one_owner():
    overrides, builder = cli.split_options(cli.parse_extra(
        ["--n", "1", "--dropout", "0.3", "--bn-momentum", "0.5", "--lr", "0.5",
         "--epochs", "3"]))
    assert overrides == {"learning_rate": 0.5, "epochs": 3}
    assert builder == {"n": 1, "dropout": 0.3, "bn_momentum": 0.5}


def test_the_builder_owns_bn_momentum_and_dropout():
    config = training.resolve_config("wide_resnet", model_kwargs=dict(n=1, bn_momentum=0.5))
    assert config["model_kwargs"] == {"n": 1, "bn_momentum": 0.5}  # nothing added
    assert not {"bn_momentum", "dropout"} & set(config["recipe"])
    model = training.build_model(config, (8, 8, 3), 10)
    batch_norms = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    assert batch_norms and {l.momentum for l in batch_norms} == {0.5}
    assert model.builder_kwargs["bn_momentum"] == 0.5
    assert model.builder_kwargs["dropout"] == 0.3  # WRN's, the builder's default
    assert any(isinstance(l, keras.layers.Dropout) for l in model.layers)
    with pytest.raises(ValueError, match=r"Unknown Recipe field\(s\) \['dropout'\]"):
        training.get_recipe("wrn_cifar", dropout=0.3)  # not the recipe's


def test_an_old_config_with_the_settings_in_its_recipe_reads_and_resumes(tmp_path):
    # Configs written before the builder owned them held bn_momentum and
    # dropout in the recipe: read into model_kwargs where they differ from
    # the builder's default, so the run resumes with the same arguments.
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2))
    old = json.loads(json.dumps(config))
    old["recipe"].update(bn_momentum=0.99, dropout=0.0)  # gr_mnist's, the builder's default
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(old))
    assert runs.check_folder(out, config, overwrite=False) is True  # resumes
    assert runs.read_config(out / "config.json") == json.loads(json.dumps(config))
    old["recipe"]["bn_momentum"] = 0.9  # not the MLP's default: the builder's argument now
    (out / "config.json").write_text(json.dumps(old))
    assert runs.read_config(out / "config.json")["model_kwargs"] == {"depth": 2,
                                                                     "bn_momentum": 0.9}
    with pytest.raises(ValueError, match=r"differs in \['model_kwargs'\]"):
        runs.check_folder(out, config, overwrite=False)
    again = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2, bn_momentum=0.9))
    assert runs.check_folder(out, again, overwrite=False) is True


def test_train_command_reproduces_a_config():
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=20),
                                     dataset="mnist", seed=3, epochs=7)
    assert cli.train_command(config) == (
        "keras-gresnet train gresnet_mlp --depth 20 --dataset mnist --epochs 7 --seed 3")
    assert cli.parse_extra(cli.train_command(config).split()[3:5]) == {"depth": 20}
    # A changed recipe field is part of the command; the default recipe is not.
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2),
                                     dataset="fashion_mnist", optimizer_name="nadam", epochs=20)
    command = cli.train_command(config)
    assert command == ("keras-gresnet train gresnet_mlp --depth 2 --dataset fashion_mnist "
                       "--optimizer-name nadam --epochs 20 --seed 0")
    options = cli.parse_extra(command.split()[3:])
    dataset, seed = options.pop("dataset"), options.pop("seed")  # the CLI's own options
    overrides, builder = cli.split_options(options)
    again = training.resolve_config("gresnet_mlp", model_kwargs=builder, dataset=dataset,
                                    seed=seed, **overrides)
    assert again["recipe"] == config["recipe"] and again["dataset"] == "fashion_mnist"


def test_run_options_are_declared_once_for_the_parser_the_config_and_the_command():
    # Every RunOptions field is a train option, and the command written from a
    # config parses back into the same config.
    parser = cli.build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    dests = {action.dest for action in train._actions}
    assert set(training.RunOptions.names()) <= dests
    config = training.resolve_config(
        "gresnet_mlp", model_kwargs=dict(depth=2), dataset="fashion_mnist", seed=7,
        validation_split=0.25, max_train_examples=300, max_test_examples=200,
        dtype_policy="mixed_bfloat16", epochs=3, learning_rate=0.01)
    command = cli.train_command(config)
    assert command.startswith("keras-gresnet train gresnet_mlp --depth 2 --dataset "
                              "fashion_mnist ") and command.endswith("--epochs 3 --seed 7")
    args, extra = parser.parse_known_args(command.split()[1:])
    overrides, builder = cli.split_options(cli.parse_extra(extra))
    again = training.resolve_config(args.model, model_kwargs=builder, **overrides,
                                    **training.RunOptions.from_namespace(args).config())
    volatile = ("command", "versions")
    assert {k: v for k, v in again.items() if k not in volatile} == {
        k: v for k, v in config.items() if k not in volatile}
    with pytest.raises(ValueError, match="validation_split must be a number in"):
        training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2), validation_split=1)
    with pytest.raises(ValueError, match=r"Unknown Recipe field\(s\) \['max_train'\]"):
        training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2), max_train=3)


def test_the_recorded_command_names_the_console_script_not_its_path(monkeypatch):
    # A run folder's command is one to copy: the console script's absolute path
    # (a venv's bin/) is written `keras-gresnet`; a script's path is kept.
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/keras-gresnet", "train", "gresnet_mlp",
                                      "--depth", "2"])
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2))
    assert config["command"] == ["keras-gresnet", "train", "gresnet_mlp", "--depth", "2"]
    monkeypatch.setattr(sys, "argv", ["scripts/reproduce/reproduce_gr_mnist.py", "--seeds", "3"])
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2))
    assert config["command"] == ["scripts/reproduce/reproduce_gr_mnist.py", "--seeds", "3"]


def test_list_build_prints_every_paper_configuration(capsys):
    assert cli.main(["list", "gresnet_mlp", "--build"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[1], r[3]) for r in rows] == [("depth=2", "1"), ("depth=10", "5"),
                                            ("depth=20", "10"), ("depth=50", "25"),
                                            ("depth=100", "50")]
    assert all(r[0] == "gresnet_mlp" and r[4].endswith("M") for r in rows)


@pytest.mark.parametrize("words,message", [
    (["gresnet_cifar", "--epoch", "3"],
     "--epoch is not an option of train gresnet_cifar (did you mean --epochs"),
    (["gresnet_cifr"], "unknown model 'gresnet_cifr' (did you mean gresnet_cifar"),
    (["gresnet_cifar", "--n", "1", "--bogus", "2"], "--bogus is not an option of train"),
    (["gresnet_cifar", "--data-dir", "{pets}"], "holds class folders of pictures; add "
                                                "--dataset folder"),
])
def test_train_refuses_typos_before_keras_is_imported(tmp_path, words, message):
    """One line, exit 2, and neither Keras nor TensorFlow imported (the
    check takes a fraction of the seconds their import takes)."""
    import subprocess

    from PIL import Image

    for name in ("cat", "dog"):
        (tmp_path / "pets" / name).mkdir(parents=True)
        Image.new("L", (4, 4)).save(tmp_path / "pets" / name / "0.png")
    words = [w.replace("{pets}", str(tmp_path / "pets")) for w in words]
    code = ("import sys; from keras_gresnet import cli; code = cli.main(['train', *sys.argv[1:]]);"
            " print('keras' in sys.modules, 'tensorflow' in sys.modules); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code, *words], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout.split() == ["False", "False"]
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def _exit_code(argv):
    """``cli.main``'s exit code, argparse's own refusals (``SystemExit``) included."""
    try:
        return cli.main(argv)
    except SystemExit as ended:
        return ended.code


@pytest.mark.parametrize("words,message", [
    (["--lr", "0.1", "--learning-rate", "0.2"], "--lr 0.1 and --learning-rate 0.2 give one "
                                                "option two values through two spellings; "
                                                "give it once"),
    (["--learning-rate", "0.2", "--lr=0.1"], "--learning-rate 0.2 and --lr 0.1 give one "
                                             "option two values"),
    (["--batch-size", "4", "--batch_size=8"], "--batch-size 4 and --batch_size 8 give one "
                                              "option two values"),
])
def test_an_option_given_twice_with_two_values_is_refused_before_the_run_folder(
        tmp_path, capsys, words, message):
    """Aliases (--lr, --learning-rate) or spellings (--batch-size,
    --batch_size) of one option with two values: one line naming both, exit
    2, and no run folder."""
    argv = ["train", "gresnet_mlp", "--depth", "2", *words, "--out", str(tmp_path / "run")]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_an_option_given_twice_with_one_value_is_that_value():
    options = cli.parse_extra(["--lr", "0.1", "--learning-rate", "1e-1", "--depth", "2",
                               "--depth=2"])
    assert cli.split_options(options) == ({"learning_rate": 0.1}, {"depth": 2})
    args, extra = cli.build_parser().parse_known_args(
        ["train", "gresnet_mlp", "--seed", "3", "--seed=3"])
    assert args.seed == 3 and extra == []


def test_the_same_spelling_again_overrides_as_argparse_does():
    """A script that appends an option to a command line overrides it:
    argparse's own rule, kept for the run's options and the free ones."""
    args, _ = cli.build_parser().parse_known_args(["train", "gresnet_mlp", "--seed", "1",
                                                   "--seed=2"])
    assert args.seed == 2
    assert cli.parse_extra(["--lr", "0.1", "--lr", "0.2"]) == {"lr": 0.2}


@pytest.mark.parametrize("argv", [
    ["prune", "any-model", "--count", "1", "--order", "random", "--seed", "-1"],
    ["train", "gresnet_mlp", "--seed", "-1"],
    ["train", "gresnet_mlp", "--seed", str(2**31)],
])
def test_a_negative_or_too_large_seed_is_one_line_naming_the_option(capsys, argv):
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "error: argument --seed: expected an integer in [0, 2147483647], got '" in err


def test_a_random_removal_order_checks_its_seed():
    from keras_gresnet import analysis

    model = zoo.gresnet_mlp(depth=4)
    assert len(analysis.removal_order(model, "random", 2**31 - 1)) == 2
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2147483647\], got -1"):
        analysis.removal_order(model, "random", -1)


def test_a_long_value_is_echoed_shortened(tmp_path, capsys):
    """A 100,000-character value: its first 100 characters and its length."""
    argv = ["train", "gresnet_mlp", "--depth", "2", "--units", "1" * 100_000,
            "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 300, err[:500]
    assert f"units must be an integer >= 1, got '{'1' * 99} ... (100002 characters)" in err
    assert not (tmp_path / "run").exists()
    # argparse's own echo too (its message is not ours): cut at 1,000 characters
    assert _exit_code(["predict", "model", "p.png", "--top", "x" * 100_000]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(100002 characters)" in err and len(err) < 1200


def test_texts_from_outside_are_escaped_and_echoes_shortened(capsys):
    from keras_gresnet import _text, weights

    assert _text.printable("cat\x1b[31m\nforged line") == "cat\\x1b[31m\\nforged line"
    assert _text.shown("x" * 500) == "'" + "x" * 99 + " ... (502 characters)"
    assert _text.shown([1, "a"]) == "[1, 'a']"
    assert _text.shown(int("f" * 5000, 16)).startswith("0xffff")  # past str()'s 4,300 digits
    assert cli._one_line("a\n  b\x1b[2J") == "a b\\x1b[2J"
    cli._print_table([("cat\x1b[2J", 1), ("dog\nforged", 2)], ("name", "n"))
    out = capsys.readouterr().out
    assert "\x1b" not in out and len(out.splitlines()) == 4 and "cat\\x1b[2J" in out
    entry = weights.list_weights()[0]
    card = weights.model_card(dict(entry, license="MIT\n- forged: line", command="\x1b[2J"))
    assert "\x1b" not in card and card.count("\n") == weights.model_card(entry).count("\n")


# ----------------------- bad input: one line, exit 2, before the first write


@pytest.mark.integration
def test_bad_numbers_are_refused_before_the_first_write(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--epochs", "99999999999999999999999") == 2
    one_error_line(capsys, "epochs")
    assert not out.exists()
    for value in ("1e400", "-1e999", "nan", "inf", "(0.1, 1e400)"):
        assert train(out, "--lr", value) == 2
        one_error_line(capsys, "finite")
        assert not out.exists()
    assert train(out) == 0  # the corrected command runs


@pytest.mark.integration
@pytest.mark.parametrize("extra,words", [
    (("--optimizer-kwargs", '{"beta_1": "abc"}'), ("beta_1", "a number >= 0 and < 1")),
    (("--optimizer-kwargs", '{"beta_1": 5}'), ("beta_1", "< 1")),
    (("--optimizer-kwargs", "[1,2]"), ("optimizer_kwargs", "a mapping")),
    (("--optimizer-kwargs", "5"), ("optimizer_kwargs", "a mapping")),
    (("--optimizer-kwargs", '{"name": 5}'), ("'name'", "a non-empty string")),
    (("--recipe", "preact_cifar", "--optimizer-kwargs", '{"momentum": "abc"}'),
     ("momentum",)),
    (("--recipe", "preact_cifar", "--optimizer-kwargs", '{"momentum": 0.9, "nesterov": 3}'),
     ("nesterov", "true or false")),
    (("--lr-milestone-unit", "epoch", "--lr-milestones", "(1e300,)"), ("lr_milestones",)),
    (("--lr-milestones", "abc"), ("lr_milestones", "a sequence")),
])
def test_bad_recipe_values_write_nothing_and_the_corrected_command_runs(tmp_path, capsys,
                                                                       extra, words):
    out = tmp_path / "run"
    assert train(out, *extra) == 2
    one_error_line(capsys, *words)
    assert not out.exists()


@pytest.mark.integration
def test_json_spellings_and_a_bare_milestone_are_understood(tmp_path):
    assert cli._literal('{"nesterov": true, "momentum": 0.9}') == {"nesterov": True,
                                                                  "momentum": 0.9}
    with pytest.raises(ValueError, match="finite"):
        cli._literal('{"momentum": NaN}')
    recipe = training.get_recipe("preact_cifar", lr_milestones=0.5)
    assert recipe.lr_milestones == (0.5,)
    out = tmp_path / "run"
    assert train(out, "--recipe", "preact_cifar", "--optimizer-kwargs",
                 '{"momentum": 0.9, "nesterov": true}', "--lr-milestones", "0.5") == 0
    recorded = json.loads((out / "config.json").read_text())["recipe"]
    assert recorded["optimizer_kwargs"] == {"momentum": 0.9, "nesterov": True}
    assert recorded["lr_milestones"] == [0.5]


def test_sizes_that_cannot_be_built_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, model=("gresnet_mlp", "--depth", "100000000")) == 2
    one_error_line(capsys, "50,000,000 blocks", "at most 5,000")
    assert train(out, model=("wide_gresnet", "--n", "4", "--widen-factor", "1000")) == 2
    one_error_line(capsys, "parameters")
    assert not out.exists()
    with pytest.raises(ValueError, match="parameters"):
        zoo.gresnet_mlp(depth=2, units=100_000)
    # the head and the input count too, before anything is built
    with pytest.raises(ValueError, match="classes=100,000,000 give about 5,100,000,000"):
        zoo.gresnet_mlp(depth=2, classes=100_000_000)
    with pytest.raises(ValueError, match="classes=1,000,000,000 give"):
        zoo.get_model("gresnet_cifar", n=1, classes=10**9)
    for builder, shape in (("gresnet_mlp", (100_000, 100_000)),
                           ("gresnet_cifar", (100_000, 100_000, 3))):
        with pytest.raises(ValueError, match="values an example; this package builds inputs"):
            zoo.get_model(builder, **({"depth": 2} if builder == "gresnet_mlp" else {"n": 1}),
                          input_shape=shape)


def test_empty_names_are_refused_not_taken_for_the_default(tmp_path, capsys):
    for extra, word in ((("--dataset", ""), "dataset"), (("--recipe", ""), "recipe")):
        assert train(tmp_path / "run", *extra) == 2
        one_error_line(capsys, word, "''")
        assert not (tmp_path / "run").exists()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert cli.main(["train", "gresnet_mlp", "--depth", "2", *TINY, "--out", ""]) == 2
        one_error_line(capsys, "out=''")
        assert list(tmp_path.iterdir()) == []  # no runs/ default folder either
    finally:
        os.chdir(cwd)


def test_keras_files_keras_cannot_read_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.keras"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("config.json", json.dumps({"class_name": 3, "config": []}))
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
    junk = tmp_path / "junk.keras"
    junk.write_bytes(b"not a zip")
    deep = tmp_path / "deep.keras"  # a config nested 100,000 deep
    with zipfile.ZipFile(deep, "w") as archive:
        archive.writestr("config.json", "[" * 100_000 + "]" * 100_000)
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
    device = tmp_path / "device.keras"
    device.symlink_to("/dev/zero")
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(bad.read_bytes()[:40])
    for path in (bad, junk, deep, device, truncated):
        assert cli.main(["evaluate", str(path), "--dataset", "fashion_mnist"]) == 2
        one_error_line(capsys, path.name)
        assert cli.main(["export", str(path), "--out", str(tmp_path / "out.onnx")]) == 2
        one_error_line(capsys, path.name)
        assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("args, words", [
    (["--count", "-1"], ["--count -1"]),
    (["--count", "0"], ["--count 0"]),
    (["--blocks", "block1,block1"], ["block1", "more than once"]),
    (["--blocks", "block1,0"], ["more than once"]),
    (["--count", "1", "--out", "x.h5"], [".keras"]),
])
def test_prune_refuses_bad_counts_and_repeated_blocks(finished, capsys, args, words):
    before = tree(finished)
    assert cli.main(["prune", str(finished), *args]) == 2
    one_error_line(capsys, *words)
    assert tree(finished) == before


def test_prune_never_writes_over_a_users_file(finished, tmp_path, capsys):
    mine = tmp_path / "thesis.keras"
    mine.write_bytes(b"my model")
    assert cli.main(["prune", str(finished), "--count", "1", "--out", str(mine)]) == 2
    one_error_line(capsys, "thesis.keras", "exists")
    assert mine.read_bytes() == b"my model"


def test_prune_into_a_missing_folder_or_a_too_long_name_is_one_line(finished, tmp_path, capsys):
    assert cli.main(["prune", str(finished), "--count", "1",
                     "--out", str(tmp_path / "nodir" / "x.keras")]) == 2
    one_error_line(capsys, "nodir")
    assert not (tmp_path / "nodir").exists()
    assert train(tmp_path / ("r" * 300)) == 2
    one_error_line(capsys, "File name too long")


def test_non_finite_learning_rates_are_refused():
    from keras_gresnet import finetune

    for bad in (float("inf"), float("nan"), -1.0, 0.0):
        with pytest.raises(ValueError, match="head_lr must be a finite number > 0"):
            finetune.finetune("gresnet_mlp2_fashion_mnist", (np.zeros((4, 28, 28, 1)),
                                                            np.zeros(4, int)),
                              classes=10, head_lr=bad)


def test_a_preset_cannot_name_other_weights(tmp_path):
    model = zoo.gresnet_mlp(depth=2)
    preset = zoo.save_preset(model, tmp_path / "preset", builder="gresnet_mlp",
                                 builder_kwargs={"depth": 2})
    config = json.loads((preset / "config.json").read_text())
    for value in (str(preset), "gresnet_mlp2_fashion_mnist", "/etc/passwd"):
        config["config"]["builder_kwargs"]["weights"] = value
        (preset / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=r"builder_kwargs may not set \['weights'\]"):
            zoo.from_preset(preset)


def test_an_error_inside_keras_keeps_its_traceback(monkeypatch):
    """Only this package's own checks are 'bad input'; a ValueError raised
    deep in Keras or TensorFlow is a bug and is not turned into exit 2."""
    import keras

    def broken(*args, **kwargs):
        keras.layers.Dense(-1)  # Keras' own check raises the ValueError

    monkeypatch.setattr(training, "train", broken)
    with pytest.raises(ValueError):
        train(Path("unused"))


# ---------------------------------------------- what the command line prints


def test_evaluate_prints_standard_json_for_a_diverged_net(monkeypatch, capsys, tmp_path):
    """A diverged net's loss is NaN, which Python's json writes as a bare NaN
    that JSON parsers refuse: it is null in the output."""
    monkeypatch.setattr(training, "evaluate",
                        lambda *a, **k: {"test_loss": float("nan"), "test_accuracy": 0.1})
    assert cli.main(["evaluate", str(tmp_path)]) == 0

    def strict(name):
        raise ValueError(f"not standard JSON: {name}")

    printed = json.loads(capsys.readouterr().out, parse_constant=strict)
    assert printed == {"test_loss": None, "test_accuracy": 0.1}


@pytest.mark.integration
def test_tensorflow_start_up_lines_stay_off_the_terminal(finished):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-m", "keras_gresnet.cli", "gates", str(finished)],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert "gates, mean g(k)" in result.stdout
    for noise in ("cudart_stub", "absl::InitializeLog", "cuInit", "oneDNN"):
        assert noise not in result.stderr, result.stderr
