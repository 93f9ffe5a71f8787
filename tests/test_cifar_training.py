"""A conv net trained end to end with the pre-activation CIFAR recipe
(``preact_cifar``: lr /10 at 50% and 75% of the epochs, mean subtraction,
pad-4 crop + flip augmentation, HE and GR Table 3) on CIFAR-10 files in
the official python-batch format (synthetic pixels: no CIFAR exists here)."""

import json

import keras
import numpy as np
import pytest

from keras_gresnet import data, training
from keras_gresnet.data import synthetic

from helpers import read_csv

pytestmark = pytest.mark.integration


def test_preact_cifar_end_to_end_on_cifar10_files(tmp_path):
    arrays = synthetic.write_synthetic("cifar10", tmp_path / "data", 5 * 64, 64, seed=1)
    out = tmp_path / "run"
    run = training.train("gresnet_cifar", model_kwargs=dict(n=1), dataset="cifar10",
                         data_dir=tmp_path / "data", epochs=4, batch_size=64, out=out, verbose=0)
    config = json.loads((out / "config.json").read_text())
    recipe = config["recipe"]
    assert recipe["name"] == "preact_cifar" and recipe["augment"] is True
    assert recipe["preprocessing"] == "mean"
    # The schedule: lr 0.1, divided by 10 at 50% and 75% of the epochs.
    history = read_csv(out / "history.csv")
    assert [float(r["lr"]) for r in history] == pytest.approx([0.1, 0.1, 0.01, 0.001])
    # Mean subtraction with the training set's per-channel mean, std 1.
    images, _ = arrays["train"]
    stats = config["data"]["preprocessing"]
    # float64 means in two orders (histogram vs numpy): ~1e-15 apart; 1e-6 is loose, harmless
    np.testing.assert_allclose(stats["mean"], (images / 255.0).mean(axis=(0, 1, 2)), atol=1e-6)
    assert stats["std"] == [1.0, 1.0, 1.0] and stats["method"] == "mean"
    # What augment=True feeds: padded random crops and flips of the same
    # images (each batch's pixels differ from the unaugmented ones').
    batches = [next(iter(data.pipeline("cifar10", data_dir=tmp_path / "data", preprocessing="mean",
                                       augment=augment, batch_size=64, seed=0).train))[0]
               for augment in (True, False)]
    augmented, plain = (keras.ops.convert_to_numpy(b) for b in batches)
    assert augmented.shape == plain.shape == (64, 32, 32, 3)
    assert np.abs(augmented - plain).max() > 0.1
    # The reported test accuracy is what the published model.keras scores.
    model = keras.saving.load_model(out / "model.keras", safe_mode=True)
    assert model.input_shape == (None, 32, 32, 3) and model.output_shape == (None, 10)
    reloaded = training.evaluate(out)["test_accuracy"]
    # an accuracy over 64 test images: 1e-6 is below one image, so the same count
    assert reloaded == pytest.approx(run.results["test_accuracy"], abs=1e-6)
    assert run.results["epochs"] == 4


def test_wrn_cifar_trains_with_reflected_crops_and_meanstd(tmp_path):
    """WRN's recipe reaches the pipeline a run trains on: reflection-padded
    crops (WRN scripts/train_cifar.sh) and mean/std normalisation."""
    synthetic.write_synthetic("cifar10", tmp_path / "data", 5 * 16, 32, seed=2)
    out = tmp_path / "run"
    training.train("wide_resnet", model_kwargs=dict(n=1, widen_factor=1), dataset="cifar10",
                   data_dir=tmp_path / "data", epochs=4, batch_size=40, out=out, verbose=0)
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"]["name"] == "wrn_cifar"
    assert config["data"]["pad_mode"] == "reflect" and config["data"]["augment"] is True
    assert config["data"]["preprocessing"]["method"] == "meanstd"
