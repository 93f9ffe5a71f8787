"""A labelled folder handed to ``evaluate`` is a test set (issue 49, item 2):
every picture scored, class folders matched to the model's classes by name
("T-shirt_top" is "T-shirt/top"), folders 0..N-1 as indices, a subset of the
classes fine, an unknown name one line listing the model's names."""

import json

import numpy as np
import pytest
from PIL import Image

from keras_gresnet import cli, data, training, weights, zoo

CONV = "gresnet_cifar5_fashion_mnist"
pytestmark = pytest.mark.integration  # real Fashion-MNIST pictures, the published net


@pytest.fixture(scope="module")
def pictures():
    """Two real Fashion-MNIST test pictures of each class, and the
    published conv net's own answers on them (through its name)."""
    images, labels = data.load("fashion_mnist", "test")
    index = np.concatenate([np.flatnonzero(labels == c)[:2] for c in range(10)])
    model = zoo.raw_pixels_model(zoo.resolve(CONV))
    predicted = model.predict(images[index].astype("float32"), verbose=0).argmax(1)
    return images[index], labels[index], predicted


def _folder(root, images, labels, name):
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = root / name(int(label))
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image[..., 0], "L").save(folder / f"{i}.png")
    return root


def _evaluate(folder, capsys):
    code = cli.main(["evaluate", CONV, "--dataset", "folder", "--data-dir", str(folder)])
    out, err = capsys.readouterr()
    return code, out, err


NAMES = weights.get_weights(CONV)["class_names"]


@pytest.mark.parametrize("spelling", ["names", "lower case", "indices"])
def test_every_picture_is_scored_with_its_class_by_name(spelling, pictures, tmp_path, capsys):
    images, labels, predicted = pictures
    name = {"names": lambda c: NAMES[c].replace("/", "_"),
            "lower case": lambda c: NAMES[c].replace("/", "_").lower(),
            "indices": str}[spelling]
    code, out, err = _evaluate(_folder(tmp_path, images, labels, name), capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["examples"] == 20  # every picture, not a seeded fifth
    assert result["test_accuracy"] == pytest.approx(np.mean(predicted == labels))
    assert result["test_accuracy"] >= 0.9  # the net's own, not 100% error by folder order
    assert ("index" if spelling == "indices" else "by name") in result["classes"]


def test_a_subset_of_the_classes_and_a_train_test_layout(pictures, tmp_path, capsys):
    images, labels, predicted = pictures
    keep = np.isin(labels, [1, 9])  # Trouser, Ankle boot
    _folder(tmp_path / "test", images[keep], labels[keep], lambda c: NAMES[c])
    _folder(tmp_path / "train", images[:4], labels[:4], lambda c: NAMES[c].replace("/", "_"))
    code, out, err = _evaluate(tmp_path, capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["examples"] == 4  # the held-out part, whole
    assert result["test_accuracy"] == pytest.approx(np.mean(predicted[keep] == labels[keep]))


def test_unknown_class_folders_are_one_line_naming_the_models_classes(pictures, tmp_path,
                                                                     capsys):
    images, labels, _ = pictures
    code, out, err = _evaluate(_folder(tmp_path, images, labels, lambda c: f"kind{c}"), capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "name no class of" in err and "Ankle boot" in err and "kind0" in err


def test_the_python_door_matches_by_name_too(pictures, tmp_path):
    images, labels, predicted = pictures
    folder = _folder(tmp_path, images, labels, lambda c: NAMES[c].replace("/", "_"))
    result = training.evaluate(CONV, dataset="folder", data_dir=str(folder))
    assert result["examples"] == 20
    assert result["test_accuracy"] == pytest.approx(np.mean(predicted == labels))
