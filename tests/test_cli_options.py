"""Where the command line's free options go: recipe fields, builder
arguments, and the names that are both (``--model.NAME`` / ``--recipe.NAME``)."""

import pytest

from keras_gresnet import cli, training, zoo


def test_a_name_both_sides_take_must_say_which():
    options = cli.parse_extra(["--n", "1", "--dropout", "0.3"])
    with pytest.raises(ValueError, match=r"--dropout is both a recipe field and an argument "
                                         r"of wide_resnet: write --model.dropout .* "
                                         r"--recipe.dropout"):
        cli.split_options(options, zoo.wide_resnet)
    overrides, builder = cli.split_options(
        cli.parse_extra(["--n", "1", "--model.dropout", "0.3"]), zoo.wide_resnet)
    assert overrides == {} and builder == {"n": 1, "dropout": 0.3}
    overrides, builder = cli.split_options(
        cli.parse_extra(["--n", "1", "--recipe.dropout", "0.3", "--recipe.lr", "0.5"]),
        zoo.wide_resnet)
    assert overrides == {"dropout": 0.3, "learning_rate": 0.5} and builder == {"n": 1}


def test_a_name_only_the_recipe_takes_goes_to_the_recipe():
    # The MLPs have no dropout argument: --dropout is the recipe's, as it was.
    overrides, builder = cli.split_options(cli.parse_extra(["--depth", "2", "--dropout", "0.1",
                                                            "--epochs", "3"]), zoo.gresnet_mlp)
    assert overrides == {"dropout": 0.1, "epochs": 3} and builder == {"depth": 2}
    with pytest.raises(ValueError, match="--recipe.depth: not a recipe field"):
        cli.split_options({"recipe.depth": 2}, zoo.gresnet_mlp)


def test_the_command_line_refuses_an_ambiguous_option_before_writing(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["train", "wide_resnet", "--n", "1", "--widen-factor", "1", "--dropout",
                     "0.3", "--dataset", "cifar10", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--model.dropout" in err
    assert not out.exists()


def test_a_builder_bn_momentum_would_be_replaced_by_the_recipe_so_it_is_refused():
    with pytest.raises(ValueError, match=r"may not set bn_momentum.*--recipe.bn-momentum"):
        training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2, bn_momentum=0.5))
    config = training.resolve_config("gresnet_mlp", model_kwargs=dict(depth=2),
                                     bn_momentum=0.5)
    assert config["recipe"]["bn_momentum"] == 0.5


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
    overrides, builder = cli.split_options(options, zoo.gresnet_mlp)
    again = training.resolve_config("gresnet_mlp", model_kwargs=builder, dataset=dataset,
                                    seed=seed, **overrides)
    assert again["recipe"] == config["recipe"] and again["dataset"] == "fashion_mnist"


def test_list_build_prints_every_paper_configuration(capsys):
    assert cli.main(["list", "gresnet_mlp", "--build"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[1], r[3]) for r in rows] == [("depth=2", "1"), ("depth=10", "5"),
                                            ("depth=20", "10"), ("depth=50", "25"),
                                            ("depth=100", "50")]
    assert all(r[0] == "gresnet_mlp" and r[4].endswith("M") for r in rows)
