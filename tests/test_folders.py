"""Your own pictures: a folder of class subfolders as a dataset (both input
pipelines, the same batches), training and fine-tuning from it, readable
predictions, and one line for every bad folder; nothing is ever written into
the user's folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

import keras_gresnet
from keras_gresnet import cli, data, finetune, predictions, zoo
from keras_gresnet.layers import PixelNormalization

from helpers import tree

ROOT = Path(__file__).resolve().parents[1]


def picture(path, size=(8, 6), value=100, mode="RGB"):
    """A PNG of ``size`` (width, height) whose pixels are ``value`` plus the
    column index (so a crop or a flip shows)."""
    width, height = size
    channels = 3 if mode == "RGB" else 1
    array = (value + np.arange(width)[None, :, None] + np.zeros((height, 1, channels))).astype(
        np.uint8)
    Image.fromarray(array[..., 0] if mode == "L" else array, mode).save(path)


@pytest.fixture
def pets(tmp_path):
    """cat/ (grey, 8x6) and dog/ (RGB, 8x6, one 12x6): 6 pictures each."""
    root = tmp_path / "pets"
    for name, mode, value in (("cat", "L", 10), ("dog", "RGB", 200)):
        (root / name).mkdir(parents=True)
        for i in range(6):
            picture(root / name / f"{i}.png", size=(12, 6) if (name, i) == ("dog", 5) else (8, 6),
                    value=value + i, mode=mode)
    (root / "README.txt").write_text("a stray file beside the classes is ignored")
    (root / "cat" / ".DS_Store").write_bytes(b"\0hidden files are skipped")
    return root


def test_a_folder_reads_as_classes_sizes_and_a_seeded_split(pets):
    before = tree(pets)
    folder = data.read_image_folder(pets, seed=3)
    assert folder["class_names"] == ["cat", "dog"]
    assert folder["image_shape"] == (6, 8, 3)  # the most common size; RGB present
    (x, y), (xt, yt) = folder["train"], folder["test"]
    assert x.dtype == np.uint8 and x.shape[1:] == (6, 8, 3) and y.dtype == np.int32
    assert sorted(np.bincount(np.concatenate([y, yt]))) == [6, 6]
    assert np.bincount(yt).tolist() == [1, 1]  # 0.2 of 6, rounded, per class
    again = data.read_image_folder(pets, seed=3)
    np.testing.assert_array_equal(again["test"][0], xt)
    assert tree(pets) == before  # nothing written into the user's folder
    # grey pictures converted to RGB: three equal channels
    cats = np.concatenate([x[y == 0], xt[yt == 0]])
    assert np.all(cats[..., 0] == cats[..., 2])


def test_pictures_are_centre_cropped_then_resized_to_a_models_input(pets):
    folder = data.read_image_folder(pets, image_shape=(6, 8, 1))
    images = np.concatenate([folder["train"][0], folder["test"][0]])
    assert images.shape[1:] == (6, 8, 1)
    # dog 5 is 12x6: its centre 8 columns (2..9) of value 205 + column
    wide = Image.open(pets / "dog" / "5.png").convert("L")
    expected = np.asarray(wide)[:, 2:10]
    assert any(np.array_equal(image[..., 0], expected) for image in images)
    flat = data.read_image_folder(pets, image_shape=(36,))  # an MLP's 6x6 grey pixels
    assert flat["image_shape"] == (6, 6, 1)


def test_train_and_test_subfolders_are_the_split(tmp_path):
    root = tmp_path / "digits"
    for split, count in (("train", 3), ("test", 2)):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                picture(root / split / name / f"{i}.png", mode="L")
    folder = data.read_image_folder(root)
    assert len(folder["train"][1]) == 6 and len(folder["test"][1]) == 4
    assert folder["image_shape"] == (6, 8, 1)  # all grey: one channel
    (root / "test" / "c").mkdir()
    picture(root / "test" / "c" / "0.png")
    with pytest.raises(ValueError, match=r"train/ has classes \['a', 'b'\] and test/"):
        data.read_image_folder(root)


def five_cats(root):
    """cat/ with 5 pictures, beside bird/ with 5 (a classifier needs 2 classes)."""
    for name in ("bird", "cat"):
        (root / name).mkdir()
        for i in range(5):
            picture(root / name / f"{i}.png")
    return root / "cat"


@pytest.mark.parametrize("make,words", [
    (lambda root: None, "holds no class folders"),
    (lambda root: (root / "cat").mkdir(), "holds no pictures"),
    (lambda root: (five_cats(root) / "a.png").write_text("not a png"), "a.png is not a picture"),
    (lambda root: os.symlink("/etc/hostname", five_cats(root) / "x.png"), "is a link out of"),
    (lambda root: (five_cats(root), picture(root / "dog.png"), (root / "dog").mkdir()),
     "dog holds no pictures"),
])
def test_bad_folders_are_one_line_naming_the_file(tmp_path, make, words):
    root = tmp_path / "bad"
    root.mkdir()
    make(root)
    before = tree(root)
    with pytest.raises(ValueError, match=words) as error:
        data.read_image_folder(root)
    assert "\n" not in str(error.value)
    assert tree(root) == before
    with pytest.raises(ValueError, match="does not exist or is not a folder"):
        data.read_image_folder(tmp_path / "missing")


def test_both_pipelines_cut_the_same_batches_from_a_folder(pets):
    kwargs = dict(data_dir=str(pets), batch_size=4, preprocessing="mean", augment=True, seed=2)
    tf_data = data.pipeline("folder", input_pipeline="tf_data", **kwargs)
    numpy = data.pipeline("folder", input_pipeline="numpy", **kwargs)
    assert tf_data.config["class_names"] == ["cat", "dog"] and tf_data.num_classes == 2
    assert tf_data.input_shape == (6, 8, 3)
    a = [(np.asarray(x), np.asarray(y)) for x, y in tf_data.train_epochs(0, 2)]
    b = [numpy.train_epochs(0, 2)[i] for i in range(len(numpy.train_epochs(0, 2)))]
    assert len(a) == len(b) == 2 * tf_data.steps_per_epoch
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, np.asarray(xb))
        np.testing.assert_array_equal(ya, np.asarray(yb))


def test_decode_predictions_from_names_weights_and_a_run(tmp_path):
    preds = np.array([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3]])
    assert keras_gresnet.decode_predictions(preds, ["a", "b", "c"], top=2) == [
        [("b", 0.7), ("c", 0.2)], [("a", 0.5), ("c", 0.3)]]
    ten = np.eye(10)[[9]]
    assert keras_gresnet.decode_predictions(ten, "gresnet_mlp20_fashion_mnist", top=1) == [
        [("Ankle boot", 1.0)]]
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(  # what a run on a folder records
        {"model": "gresnet_mlp", "model_kwargs": {"depth": 2}, "dataset": "folder",
         "recipe": {"name": "gr_mnist"}, "seed": 0, "strategy": "one_device",
         "data": {"class_names": ["x", "y", "z"], "preprocessing": None}}))
    assert keras_gresnet.decode_predictions(preds, str(run), top=1)[0] == [("y", 0.7)]
    with pytest.raises(ValueError, match="preds have 3 classes"):
        keras_gresnet.decode_predictions(preds, "gresnet_mlp20_fashion_mnist")


@pytest.fixture
def fed(monkeypatch):
    """What ``model.fit`` is fed first: ``fed["x"]`` once a fit has run."""
    seen = {}
    fit = finetune.keras.Model.fit

    def spy(self, x=None, y=None, **kwargs):
        seen.setdefault("x", np.asarray(x))
        return fit(self, x, y, **kwargs)

    monkeypatch.setattr(finetune.keras.Model, "fit", spy)
    return seen


def test_finetune_from_a_folder_applies_the_sources_preprocessing(pets, fed):
    """Raw pictures go in raw, and the weights' preprocessing (GR's MNIST
    nets: / 255) becomes the returned model's first layer: it takes the
    folder's pixels, scaled once, and knows the folder's class names. The
    commonest mistakes are one line each."""
    model, _ = finetune.finetune("gresnet_mlp2_fashion_mnist", str(pets), classes=2,
                                 head_epochs=1, full_epochs=0, verbose=0)
    x = fed["x"]
    grey = data.read_image_folder(pets, image_shape=(28, 28, 1))["train"][0]
    assert x.dtype == np.uint8 and x.max() > 1  # the folder's own pixels
    np.testing.assert_array_equal(np.sort(x.ravel()), np.sort(grey.ravel()))
    layer = model.get_layer("preprocessing")
    assert isinstance(layer, PixelNormalization) and layer.method == "scale"
    assert [layer.name for layer in model.layers][:3] == ["input", "preprocessing", "flatten"]
    scaled = np.asarray(keras.Model(model.input, layer.output)(grey[:2].astype(np.float32)))
    # x * float32(1/255) vs x / 255: each within 1.5 ulps of x/255, so <= 1 ulp (6e-8) apart
    np.testing.assert_allclose(scaled, grey[:2] / np.float32(255), rtol=0, atol=1e-7)
    assert model.output_shape == (None, 2)
    assert model.card["class_names"] == ["cat", "dog"]
    assert model.card["source"] == "fine-tuned from gresnet_mlp2_fashion_mnist"
    top = keras_gresnet.decode_predictions(model.predict(grey[:1], verbose=0), model, top=2)[0]
    assert sorted(name for name, _ in top) == ["cat", "dog"]
    with pytest.raises(ValueError, match="has 2 classes"):
        finetune.finetune("gresnet_mlp2_fashion_mnist", str(pets), classes=3, verbose=0)
    rgb = (np.zeros((4, 28, 28, 3), np.uint8), np.zeros(4, int))
    with pytest.raises(ValueError, match="images have 3 channel"):
        finetune.finetune("gresnet_mlp2_fashion_mnist", rgb, classes=2, verbose=0)
    one_hot = (np.zeros((4, 28, 28, 1), np.uint8), np.eye(2)[[0, 1, 1, 0]])
    finetune.finetune("gresnet_mlp2_fashion_mnist", one_hot, classes=2, head_epochs=1,
                      full_epochs=0, verbose=0)  # one-hot labels accepted


def test_raw_float_pixels_get_the_layer_and_preprocessed_ones_do_not(fed):
    """0-255 floats (``image_dataset_from_directory``'s) are raw pixels: the
    source's preprocessing becomes a layer; floats up to 16 are taken as
    preprocessed and go into a model without one; a mix, or preprocessed
    pixels into a net that scales them itself, is refused in one line."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (8, 28, 28, 1)).astype(np.float32)
    labels = np.arange(8) % 2
    raw, _ = finetune.finetune("gresnet_mlp2_fashion_mnist", (pixels, labels), classes=2,
                               head_epochs=1, full_epochs=0, verbose=0)
    assert "preprocessing" in [layer.name for layer in raw.layers]
    assert fed["x"].max() > 16  # fed raw
    import tensorflow as tf  # image_dataset_from_directory's batches: 0-255 floats

    batches = tf.data.Dataset.from_tensor_slices((pixels, labels)).batch(4)
    tuned, _ = finetune.finetune("gresnet_mlp2_fashion_mnist", batches, classes=2,
                                 head_epochs=1, full_epochs=0, verbose=0)
    assert "preprocessing" in [layer.name for layer in tuned.layers]
    scaled, _ = finetune.finetune("gresnet_mlp2_fashion_mnist", (pixels / 255, labels),
                                  classes=2, head_epochs=1, full_epochs=0, verbose=0)
    assert "preprocessing" not in [layer.name for layer in scaled.layers]
    # the same weights: the layer does what the caller did
    scaled.set_weights(raw.get_weights())
    # inputs <= 1 ulp apart (above), then the same float32 net: outputs within ~1e-6
    np.testing.assert_allclose(raw.predict(pixels, verbose=0),
                               scaled.predict(pixels / np.float32(255), verbose=0),
                               rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="give both the same way"):
        finetune.finetune("gresnet_mlp2_fashion_mnist", (pixels, labels), classes=2,
                          validation_data=(pixels / 255, labels), verbose=0)
    layered = zoo.gresnet_mlp(depth=2, weights="fashion_mnist", include_preprocessing=True)
    with pytest.raises(ValueError, match="takes raw 0-255 pixels"):
        finetune.finetune(layered, (pixels / 255, labels), classes=2, verbose=0)


def test_a_net_with_its_own_preprocessing_layer_gets_raw_pixels_once(pets, fed):
    """include_preprocessing=True puts the weights' scaling into the net: the
    folder's pixels reach it raw (0-255), not scaled a second time, and no
    second layer is added."""
    model = zoo.gresnet_mlp(depth=2, weights="fashion_mnist", include_preprocessing=True)
    tuned, _ = finetune.finetune(model, str(pets), classes=2, head_epochs=1, full_epochs=0,
                                 verbose=0)
    x = fed["x"]
    assert x.max() > 1  # raw pixels: the net scales them
    grey = data.read_image_folder(pets, image_shape=(28, 28, 1))["train"][0]
    np.testing.assert_array_equal(np.sort(x.ravel()), np.sort(grey.ravel()))
    assert sum(isinstance(layer, PixelNormalization) for layer in tuned.layers) == 1


@pytest.mark.integration
def test_folder_to_train_to_predict(pets, tmp_path):
    """The newcomer's path: train on the folder, then predict its pictures
    with class names and probabilities."""
    run = tmp_path / "run"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    train = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "train", "gresnet_cifar", "--n", "1",
         "--dataset", "folder", "--data-dir", str(pets), "--epochs", "2", "--batch-size", "4",
         "--input-shape", "4,4,3", "--out", str(run)],
        capture_output=True, text=True, env=env, timeout=600)
    assert train.returncode == 0, train.stderr[-2000:]
    assert ("Found 10 training and 2 test pictures in 2 classes (cat, dog), brought to 4x4x3"
            in train.stdout)
    config = json.loads((run / "config.json").read_text())
    assert config["data"]["class_names"] == ["cat", "dog"]
    assert config["data"]["image_shape"] == config["model_kwargs"]["input_shape"] == [4, 4, 3]
    assert "--data-dir" in config["command"]
    assert "--input-shape 4,4,3" in cli.train_command(config)
    shown = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "predict", str(run),
         str(pets / "cat" / "0.png"), str(pets / "dog" / "1.png"), "--top", "2"],
        capture_output=True, text=True, env=env, timeout=600)
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = shown.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(str(pets / "cat" / "0.png") + ": ")
    shares = [float(part.split()[-1].rstrip("%")) for part in lines[0].split(": ")[1].split(",")]
    assert {part.split()[0] for part in lines[0].split(": ")[1].split(", ")} == {"cat", "dog"}
    assert abs(sum(shares) - 100) < 0.2
    missing = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "predict", str(run), "nope.png"],
        capture_output=True, text=True, env=env, timeout=600)
    assert missing.returncode == 2 and "nope.png: no such picture file" in missing.stderr
    # a folder, a glob and a bad file: the good pictures predicted, the bad one
    # reported, exit 1
    (tmp_path / "bad.png").write_text("not a picture")
    mixed = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "predict", str(run), str(pets / "cat"),
         str(pets / "dog" / "[01].png"), str(tmp_path / "bad.png"), "--top", "1"],
        capture_output=True, text=True, env=env, timeout=600)
    assert mixed.returncode == 1, mixed.stderr[-2000:]
    shown = [line.split(": ")[0] for line in mixed.stdout.strip().splitlines()]
    assert shown == [str(pets / "cat" / f"{i}.png") for i in range(6)] + [
        str(pets / "dog" / f"{i}.png") for i in range(2)]
    assert "skipped " + str(tmp_path / "bad.png") + " is not a picture" in mixed.stderr
    assert "image folder" not in mixed.stderr



@pytest.mark.integration
def test_finetuned_model_file_predicts_raw_pictures_with_the_folders_names(pets, tmp_path):
    """Fine-tune on the folder, save the model as a .keras file, and predict
    with it: the file carries the preprocessing (a layer: the pictures go in
    raw, scaled once) and the folder's class names (its card)."""
    model, _ = finetune.finetune("gresnet_mlp2_fashion_mnist", str(pets), classes=2,
                                 head_epochs=1, full_epochs=1, verbose=0)
    model.save(tmp_path / "pets.keras")
    files = [str(pets / "cat" / "0.png"), str(pets / "dog" / "1.png")]
    raw = data.read_image_folder(pets, image_shape=(28, 28, 1))
    expected = model.predict(predictions.read_pictures(files, (28, 28, 1)).astype("float32"),
                             verbose=0)  # raw 0-255 pixels: the model normalises them
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    shown = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "predict", str(tmp_path / "pets.keras"),
         *files, "--top", "1"], capture_output=True, text=True, env=env, timeout=600)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "no preprocessing" not in shown.stderr
    lines = shown.stdout.strip().splitlines()
    names = raw["class_names"]
    for line, row in zip(lines, expected):
        name, share = line.split(": ")[1].split()
        assert name == names[int(row.argmax())]
        # printed to 0.1 %: the same probabilities as the model's on raw pixels
        assert abs(float(share.rstrip("%")) - 100 * float(row.max())) <= 0.05 + 1e-6


def test_version_is_the_packages(capsys):
    from keras_gresnet import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"keras-gresnet {keras_gresnet.__version__}\n"


def _gradient(height=6, width=8, seed=0):
    """RGB uint8 pixels with every value different enough to show a swap."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("mode,suffix", [
    ("RGB", "png"), ("L", "png"), ("RGBA", "png"), ("LA", "png"), ("P", "png"),
    ("1", "png"), ("CMYK", "tif"), ("RGB", "webp"), ("P", "gif"), ("RGB", "tif"),
    ("RGB", "bmp"),
])
def test_every_picture_mode_reads_as_keras_load_img(tmp_path, mode, suffix):
    """8-bit modes (and palettes, bilevel, CMYK, transparency) read to the
    same pixels as Keras' ``load_img`` gives, in RGB and in grey."""
    path = tmp_path / f"x.{suffix}"
    image = Image.fromarray(_gradient()).convert(mode)
    image.save(path, **({"lossless": True} if suffix == "webp" else {}))
    for channels, color_mode in ((3, "rgb"), (1, "grayscale")):
        ours = predictions.read_pictures([path], (6, 8, channels))[0]
        theirs = keras.utils.img_to_array(keras.utils.load_img(path, color_mode=color_mode),
                                          dtype="uint8")
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{mode} {suffix} {color_mode}")


@pytest.mark.parametrize("mode,suffix", [("I;16", "png"), ("I", "tif")])
def test_sixteen_bit_grey_is_scaled_not_clipped(tmp_path, mode, suffix):
    """A 16-bit PNG of a picture reads as its 8-bit original (value * 257
    back to value), so a model sees the same pixels (the same prediction);
    before, every value above 255 was clipped to white."""
    eight = _gradient()[..., 0]
    path = tmp_path / f"deep.{suffix}"
    deep = eight.astype(np.uint16) * 257
    Image.fromarray(deep if mode == "I;16" else deep.astype(np.int32)).save(path)
    assert Image.open(path).mode.startswith("I")
    np.testing.assert_array_equal(predictions.read_pictures([path], (6, 8, 1))[0, ..., 0], eight)
    rgb = predictions.read_pictures([path], (6, 8, 3))[0]
    np.testing.assert_array_equal(rgb, np.repeat(eight[..., None], 3, axis=-1))
    # between the 8-bit levels: value / 257, rounded
    Image.fromarray(np.array([[0, 128, 129, 65535]], np.uint16)).save(path)
    assert predictions.read_pictures([path], (1, 4, 1)).ravel().tolist() == [0, 0, 1, 255]


def test_exif_orientation_is_applied(tmp_path):
    """A phone photo's EXIF orientation (6: rotate 90 degrees clockwise) is
    applied, as Pillow's ``exif_transpose`` does: 8x6 stored, 6x8 seen."""
    from PIL import ImageOps

    path = tmp_path / "phone.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(_gradient()).save(path, exif=exif, quality=100)
    expected = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
    assert expected.shape == (8, 6, 3)
    np.testing.assert_array_equal(predictions.read_pictures([path], (8, 6, 3))[0], expected)


def test_a_large_jpeg_is_decoded_reduced_and_too_large_pictures_are_refused_unread(
        tmp_path, monkeypatch):
    from keras_gresnet.data import folders

    path = tmp_path / "big.jpg"
    Image.fromarray(np.full((1200, 1600, 3), 90, np.uint8)).save(path, quality=95)
    decoded = []
    real_fitted = folders._fitted
    monkeypatch.setattr(folders, "_fitted", lambda image, *shape: (
        decoded.append(image.size), real_fitted(image, *shape))[1])
    picture = predictions.read_pictures([path], (32, 32, 3))[0]
    assert decoded == [(200, 150)]  # 1/8 of 1600x1200 still covers 32x32
    assert np.abs(picture.astype(int) - 90).max() <= 2  # JPEG's rounding
    monkeypatch.setattr(folders, "MAX_DECODED_BYTES", 1600 * 1200 * 3 - 1)
    with pytest.raises(ValueError, match=r"big.jpg declares 1600x1200 RGB pixels"):
        predictions.read_pictures([path], (32, 32, 3))


def test_pipes_and_other_files_are_skipped_counted_and_never_opened(tmp_path):
    root = tmp_path / "pets"
    root.mkdir()
    five_cats(root)
    os.mkfifo(root / "cat" / "fifo.png")  # opening it would block forever
    (root / "cat" / "Thumbs.db").write_bytes(b"\0\1")
    (root / "bird" / "README.txt").write_text("notes")
    folder = data.read_image_folder(root)
    assert len(folder["train"][1]) + len(folder["test"][1]) == 10
    assert "skipped: 2 not pictures by their name, 1 not regular files" in folder["summary"]
    with pytest.raises(ValueError, match="fifo.png is not a regular file"):
        predictions.read_pictures([root / "cat" / "fifo.png"], (6, 8, 3))
    os.symlink("loop.png", root / "cat" / "loop.png")
    with pytest.raises(ValueError, match="loop.png is a symbolic link loop"):
        data.read_image_folder(root)


def test_folder_habits_validation_folders_one_class_and_unprintable_names(tmp_path):
    root = tmp_path / "digits"
    for split in ("train", "validation"):
        for name in ("a", "b\x1b[2J"):
            (root / split / name).mkdir(parents=True)
            for i in range(2):
                picture(root / split / name / f"{i}.png", mode="L")
    folder = data.read_image_folder(root, verbose=False)
    assert folder["source"]["test"] == str(root.resolve() / "validation")
    assert len(folder["test"][1]) == 4
    assert "\x1b" not in folder["summary"] and "b\\x1b[2J" in folder["summary"]
    lonely = tmp_path / "lonely"
    (lonely / "cat").mkdir(parents=True)
    picture(lonely / "cat" / "0.png")
    with pytest.raises(ValueError, match=r"holds one class folder \('cat'\); a classifier "
                                         r"needs at least 2 classes"):
        data.read_image_folder(lonely)


def test_the_size_to_train_at_is_chosen_or_a_large_one_refused(tmp_path):
    from keras_gresnet.training import config

    root = tmp_path / "photos"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.zeros((600, 800, 3), np.uint8)).save(root / name / f"{i}.jpg")
    with pytest.raises(ValueError, match="mostly 800x600 .* --input-shape H,W,C"):
        data.read_image_folder(root)
    folder = data.read_image_folder(root, image_shape=(24, 32, 3))
    assert folder["train"][0].shape[1:] == (24, 32, 3)
    assert folder["summary"].endswith("brought to 24x32x3; converted: 6 resized")  # 4:3 both
    resolved = config.resolve_config("gresnet_cifar", model_kwargs=dict(n=1, input_shape=(24, 32, 3)),
                                     dataset="folder", data_dir=str(root))
    assert resolved["model_kwargs"]["input_shape"] == [24, 32, 3]
    for bad in ((24, 32, 2), (24, 32), "24,32,3", (0, 32, 3)):
        with pytest.raises(ValueError, match="input_shape|image_shape"):
            config.resolve_config("gresnet_cifar", model_kwargs=dict(input_shape=bad),
                                  dataset="folder", data_dir=str(root))
    with pytest.raises(ValueError, match=r"may not set \['input_shape'\].*for --dataset folder"):
        config.resolve_config("gresnet_cifar", model_kwargs=dict(input_shape=(32, 32, 3)),
                              dataset="cifar10")


def test_predict_prints_one_escaped_line_per_picture(tmp_path, capsys):
    """Class names from a preset's metadata (a file: they can hold anything)
    reach the terminal escaped: an escape sequence cannot colour it, a
    newline cannot forge a second line for a picture."""
    model = zoo.gresnet_mlp(depth=2)
    names = ["zero\nforged line", *(f"red\x1b[31m{i}" for i in range(1, 10))]
    preset = zoo.save_preset(model, tmp_path / "preset", builder="gresnet_mlp",
                             builder_kwargs=dict(depth=2), metadata={"class_names": names})
    pictures = [tmp_path / "p0.png", tmp_path / "p1.png"]
    for path, value in zip(pictures, (10, 200)):
        picture(path, size=(28, 28), value=value, mode="L")
    assert cli.main(["predict", str(preset), *map(str, pictures), "--top", "10"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 2 and "\x1b" not in out
    assert [line.split(": ")[0] for line in lines] == list(map(str, pictures))
    assert all("zero\\nforged line" in line and "red\\x1b[31m9" in line for line in lines)


def test_a_picture_past_pillows_bomb_limit_is_refused_in_one_line(tmp_path, monkeypatch):
    """Past Pillow's MAX_IMAGE_PIXELS Pillow warns (two lines), past twice
    it it refuses: both are refused here, in one line, with no warning."""
    import warnings

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    root = tmp_path / "pets"
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        for i in range(2):
            picture(root / name / f"{i}.png", size=(20, 20))
    warned, refused = root / "cat" / "warned.png", tmp_path / "refused.png"
    picture(warned, size=(40, 30))  # 1,200 pixels: Pillow's warning
    picture(refused, size=(50, 50))  # 2,500 pixels: Pillow's error
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path in (warned, refused):
            with pytest.raises(ValueError) as error:
                predictions.read_pictures([path], (8, 8, 3))
            assert str(error.value) == (
                f"{path} has more than 1,000 pixels, Pillow's decompression-bomb limit "
                f"(PIL.Image.MAX_IMAGE_PIXELS); pictures of at most that many pixels are read")
        with pytest.raises(ValueError, match="warned.png has more than 1,000 pixels"):
            data.read_image_folder(root)
        assert predictions.read_pictures([root / "dog" / "0.png"], (8, 8, 3)).shape == (
            1, 8, 8, 3)
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]
