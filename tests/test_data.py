"""Tests of keras_gresnet.data: sources, preprocessing, augmentation, pipelines.

Offline: tfds goes through ``tfds.testing.mock_data``; the IDX path reads the
real Fashion-MNIST of Debian's ``dataset-fashion-mnist``; other raw files are
written by the tests.
"""

import dataclasses
import gzip
import http.server
import os
import re
import socket
import struct
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_gresnet import data
from keras_gresnet.data import synthetic

DEBIAN_FASHION = "/usr/share/datasets/fashion-mnist"


# --------------------------------------------------------------------------
# Helpers: the datasets' own formats are written by data.synthetic.


def write_mnist(folder, train, test):
    """``train``/``test``: (images N x 28 x 28, labels) into the four files."""
    synthetic.write_dataset("mnist", folder, {"train": train, "test": test})


def indexed_images(n, shape=(28, 28), offset=0):
    """Images that carry their own index (pixels [0, 0] and [0, 1]) over noise."""
    rng = np.random.default_rng(n + offset)
    images = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    index = np.arange(n) + offset
    images[:, 0, 0], images[:, 0, 1] = index % 256, index // 256
    return images


def decode_index(batch_images):
    """Inverse of :func:`indexed_images` on "scale"-preprocessed batches."""
    pixels = np.rint(np.asarray(batch_images)[:, 0, :2, 0] * 255).astype(int)
    return pixels[:, 0] + 256 * pixels[:, 1]


@pytest.fixture
def mnist_dir(tmp_path):
    """A tiny MNIST in data_dir format: 100 train, 30 test images, known pixels,
    train and test with different statistics."""
    rng = np.random.default_rng(0)
    train = (indexed_images(100), rng.integers(0, 10, 100))
    test = ((rng.integers(100, 256, (30, 28, 28))), rng.integers(0, 10, 30))
    write_mnist(tmp_path, train, test)
    return tmp_path, train, test


@pytest.fixture
def no_debian(monkeypatch, tmp_path):
    """Hide Debian's Fashion-MNIST (a folder that does not exist) and the
    MNIST that `make data` installs (an empty Keras home)."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "empty-keras-home"))
    missing = str(tmp_path / "no-such-folder")
    info = dataclasses.replace(data.DATASETS["fashion_mnist"], system_dirs=(missing,))
    monkeypatch.setitem(data.DATASETS, "fashion_mnist", info)
    return missing


def first_batch(dataset):
    x, y = dataset[0] if isinstance(dataset, keras.utils.PyDataset) else next(iter(dataset))
    return np.asarray(x), np.asarray(y)


def all_batches(dataset):
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in dataset])
    return np.concatenate(xs), np.concatenate(ys)


# --------------------------------------------------------------------------
# tfds path (mocked), every dataset.


@pytest.mark.parametrize("name", list(data.DATASETS))
def test_pipeline_from_tfds_mock(name, tmp_path, no_debian):
    info = data.DATASETS[name]
    with tfds.testing.mock_data(num_examples=24):
        p = data.pipeline(name, data_dir=str(tmp_path), batch_size=8, augment=True, seed=3)
        raw_images, raw_labels = data.load(name, "train", data_dir=str(tmp_path))
    assert p.config["source"] == {"train": "tensorflow_datasets", "test": "tensorflow_datasets"}
    assert raw_images.dtype == np.uint8 and raw_images.shape == (24, *info.image_shape)
    assert raw_labels.dtype == np.int32
    assert (p.num_train, p.num_test, p.steps_per_epoch) == (24, 24, 3)
    assert p.input_shape == info.image_shape and p.num_classes == info.num_classes
    for dataset in (p.train, p.test):
        x, y = first_batch(dataset)
        assert x.shape == (8, *info.image_shape) and x.dtype == np.float32
        assert y.shape == (8,) and y.dtype == np.int32
        assert 0 <= y.min() and y.max() < info.num_classes
        assert 0.0 <= x.min() and x.max() <= 1.0  # "scale"
    _, train_labels = all_batches(p.train)
    np.testing.assert_array_equal(np.sort(train_labels), np.sort(raw_labels))


@pytest.fixture
def silent_server():
    """A loopback port that accepts connections and never answers (a proxy
    that swallows requests); its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/cifar-10-binary.tar.gz"
    finally:
        listener.close()


def _closed_port_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/cifar-10-binary.tar.gz"  # nothing listens there now


@pytest.mark.parametrize("where", ["silent", "refused", "no_dns"])
def test_no_network_fails_in_seconds_and_leaves_nothing(where, silent_server, tmp_path,
                                                        monkeypatch, network_guard):
    """tfds' own retries took 3.5 min offline and left incomplete folders in
    its data dir: a HEAD request with a timeout comes first, and nothing is
    written when it gets no answer."""
    url = {"silent": silent_server, "refused": _closed_port_url(),
           "no_dns": "https://no-such-host.invalid/cifar-10-binary.tar.gz"}[where]
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(data.sources, "REACH_TIMEOUT", 1)
    monkeypatch.setitem(data.DATASETS, "cifar10",
                        dataclasses.replace(data.DATASETS["cifar10"], tfds_url=url))
    start = time.monotonic()
    with pytest.raises(data.DatasetNotFoundError, match=f"cannot reach {re.escape(url)} "
                                                       r"within 1 s.*no download was started"):
        data.load("cifar10", "train")
    assert time.monotonic() - start < 30  # tfds was never let retry (minutes)
    assert not (tmp_path / "home" / "tensorflow_datasets").exists()
    network_guard[:] = [h for h in network_guard if h != "no-such-host.invalid"]


def test_any_http_answer_counts_as_reachable(tmp_path):
    """A 404 or 405 shows the network is there: tfds then reports the error
    of the download itself."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200 if self.path.endswith("ok") else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        for path in ("ok", "missing"):
            data.sources.check_reachable(f"http://127.0.0.1:{httpd.server_port}/{path}", 5)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("method", data.PREPROCESSINGS)
def test_preprocessing_values_cifar(method, tmp_path):
    with tfds.testing.mock_data(num_examples=40):
        p = data.pipeline("cifar10", data_dir=str(tmp_path), preprocessing=method, batch_size=16)
        raw, _ = data.load("cifar10", "train", data_dir=str(tmp_path))
    x, _ = all_batches(p.train)
    mean, std = (raw / 255.0).mean(axis=(0, 1, 2)), (raw / 255.0).std(axis=(0, 1, 2))
    # Recorded statistics are the training images' own, per channel.
    config = p.config["preprocessing"]
    assert config["method"] == method and len(config["mean"]) == 3
    if method == "scale":
        assert x.min() >= 0 and x.max() <= 1 and x.max() > 0.9
        assert config["mean"] == [0.0] * 3 and config["std"] == [1.0] * 3
    else:
        # float64 statistics, histogram vs numpy (~4e4 terms): round-off ~1e-12, inside 1e-9
        np.testing.assert_allclose(config["mean"], mean, rtol=1e-9)
        # float32 pixels (one multiply-add each) averaged in float32: a few 1e-7 about 0
        np.testing.assert_allclose(x.mean(axis=(0, 1, 2)), 0.0, atol=1e-5)
        expected_std = std if method == "meanstd" else np.ones(3)
        # float64, as the mean: round-off ~1e-12
        np.testing.assert_allclose(config["std"], expected_std, rtol=1e-9)
        # std of ~4e4 float32 values, summed in float32: ~1e-6 relative; 1e-4 leaves 100x
        np.testing.assert_allclose(x.std(axis=(0, 1, 2)), std / expected_std, rtol=1e-4)


def test_statistics_come_from_train_split_not_test(mnist_dir):
    folder, (train_images, _), (test_images, _) = mnist_dir
    p = data.pipeline("mnist", data_dir=str(folder), preprocessing="meanstd", batch_size=7)
    mean, std = (train_images / 255).mean(), (train_images / 255).std()
    assert abs((test_images / 255).mean() - mean) > 0.1  # the splits do differ
    # float64 statistics, histogram vs numpy's mean and std: round-off ~1e-15, inside 1e-9
    np.testing.assert_allclose(p.preprocessing.mean, [mean], rtol=1e-9)
    np.testing.assert_allclose(p.preprocessing.std, [std], rtol=1e-9)
    x, _ = all_batches(p.test)
    # float32 x * scale + offset vs the float64 formula: a few ulps of |x| <= ~4 (~1e-6)
    np.testing.assert_allclose(x[..., 0], (test_images / 255 - mean) / std, rtol=1e-5, atol=1e-5)
    assert p.config["source"]["test"] == str(folder)


def test_preprocessing_config_round_trip_and_validation():
    images = np.array([[[[0, 255]], [[255, 255]]]], dtype=np.uint8)  # 1 x 2 x 1 x 2
    fitted = data.Preprocessing.fit("meanstd", images)
    np.testing.assert_allclose(fitted.mean, [0.5, 1.0])
    np.testing.assert_allclose(fitted.std, [0.5, 1.0])  # a constant channel: std 1
    assert data.Preprocessing.from_config(fitted.get_config()) == fitted
    np.testing.assert_allclose(fitted(images)[0, :, 0, 0], [-1.0, 1.0])
    with pytest.raises(ValueError, match=r"preprocessing='center'.*'scale', 'mean', 'meanstd'"):
        data.Preprocessing.fit("center", images)
    with pytest.raises(ValueError, match="std > 0"):
        data.Preprocessing("mean", (0.0,), (0.0,))


# --------------------------------------------------------------------------
# Offline sources: Debian's real Fashion-MNIST, data_dir IDX and CIFAR files.


@pytest.fixture(scope="module")
def fashion():
    return {split: data.load("fashion_mnist", split) for split in data.SPLITS}


def test_real_fashion_mnist_from_debian(fashion):
    (x, y), (xt, yt) = fashion["train"], fashion["test"]
    assert x.shape == (60000, 28, 28, 1) and xt.shape == (10000, 28, 28, 1)
    assert x.dtype == np.uint8 and y.dtype == np.int32
    assert x.max() == 255 and x.min() == 0
    np.testing.assert_array_equal(np.bincount(y), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(yt), [1000] * 10)
    # Same arrays through data_dir= (source 1) as through the package folder.
    x2, y2 = data.load("fashion_mnist", "test", data_dir=DEBIAN_FASHION)
    np.testing.assert_array_equal(x2, xt)
    np.testing.assert_array_equal(y2, yt)


def test_fashion_pipeline_records_debian_source():
    p = data.pipeline("fashion_mnist", flatten=True, batch_size=1000, validation_split=0.1)
    assert p.config["source"]["train"] == DEBIAN_FASHION
    assert (p.num_train, p.num_validation, p.num_test) == (54000, 6000, 10000)
    x, y = first_batch(p.validation)
    assert x.shape == (1000, 784) and p.input_shape == (784,)
    assert y.dtype == np.int32


def test_data_dir_subfolder_and_partial_files(tmp_path):
    rng = np.random.default_rng(1)
    split = (rng.integers(0, 256, (5, 28, 28)), rng.integers(0, 10, 5))
    write_mnist(tmp_path / "mnist", split, split)
    images, labels = data.load("mnist", "test", data_dir=str(tmp_path))
    np.testing.assert_array_equal(images[..., 0], split[0])
    np.testing.assert_array_equal(labels, split[1])
    os.remove(tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz")
    missing = r"missing \['t10k-labels-idx1-ubyte.gz'\]"
    with pytest.raises(data.DatasetNotFoundError, match=missing):
        data.load("mnist", "test", data_dir=str(tmp_path))


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_python_batches(name, tmp_path):
    info = data.DATASETS[name]
    folder = tmp_path / info.folder
    written = synthetic.write_synthetic(name, tmp_path, 3 * len(info.files["train"]), 3,
                                        seed=2)
    images, labels = data.load(name, "train", data_dir=str(tmp_path))
    assert images.shape == (3 * len(info.files["train"]), 32, 32, 3)
    np.testing.assert_array_equal(images, written["train"][0])
    np.testing.assert_array_equal(labels, written["train"][1])
    # The folder itself works as data_dir too.
    test_images, _ = data.load(name, "test", data_dir=str(folder))
    np.testing.assert_array_equal(test_images, written["test"][0])


def test_read_idx_round_trip_any_compression(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    for compress in (True, False):
        synthetic.write_idx(tmp_path / "a", array, compress=compress)
        np.testing.assert_array_equal(data.read_idx(tmp_path / "a", magic=0x803), array)
    with pytest.raises(ValueError, match="magic number 0x00000803, expected 0x00000801"):
        data.read_idx(tmp_path / "a", magic=0x801)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x1f\x8b\x08\x00garbage", "bad gzip data"),
        # a cut stream; mtime=0: the same bytes (the test's id) in every pytest-xdist worker
        (gzip.compress(b"\x00\x00\x08\x03\x00\x00\x00\x02", mtime=0)[:-6], "bad gzip data"),
        (b"PK\x03\x04 a zip file", "bad magic number"),
        (
            bytes([0, 0, 8, 1]) + struct.pack(">I", 10) + bytes(9),  # 10 labels, 9 bytes
            r"17 bytes, expected 18 for shape \(10,\)",
        ),
        (bytes([0, 0, 8, 3, 0, 0]), "truncated header"),
    ],
)
def test_corrupt_idx_file(tmp_path, content, message):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as error:
        data.read_idx(path)
    assert "Corrupt IDX file" in str(error.value) and str(path) in str(error.value)


def test_an_idx_gzip_bomb_is_refused_by_its_header_before_decompressing(tmp_path, monkeypatch):
    """A header declaring more than an MNIST-family file holds is refused
    before the body is decompressed; a valid header followed by gigabytes of
    padding is read only one byte past its declared size."""
    path = tmp_path / "train-images-idx3-ubyte.gz"
    huge = bytes([0, 0, 8, 3]) + struct.pack(">3I", 7_000_000, 28, 28)
    path.write_bytes(gzip.compress(huge + bytes(1 << 20)))
    with pytest.raises(ValueError, match=r"declares shape \(7000000, 28, 28\).*refused"):
        data.read_idx(path)
    read = []
    original = gzip.GzipFile.read

    def counted(self, size=-1):
        chunk = original(self, size)
        read.append(len(chunk))
        return chunk

    monkeypatch.setattr(gzip.GzipFile, "read", counted)
    labels = bytes([0, 0, 8, 1]) + struct.pack(">I", 10) + bytes(10)
    path.write_bytes(gzip.compress(labels + bytes(64 << 20)))  # 64 MB of padding, 64 KB file
    with pytest.raises(ValueError, match="over 19 bytes, expected 18"):
        data.read_idx(path)
    assert sum(read) <= 19


def test_corrupt_file_in_data_dir_is_reported(mnist_dir):
    folder = mnist_dir[0]
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(ValueError, match="Corrupt IDX file .*train-labels"):
        data.load("mnist", "train", data_dir=str(folder))


def test_tensorflow_datasets_never_writes_into_the_users_folder(tmp_path, monkeypatch):
    """tfds prepares its files in the package's cache ($KERAS_HOME), not in
    the data_dir the user passed (which a later image-folder reader would
    see as more classes)."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    mine = tmp_path / "mine"
    mine.mkdir()
    with pytest.raises(data.DatasetNotFoundError) as error:
        data.load("cifar10", "train", data_dir=str(mine), download=False)
    assert list(mine.iterdir()) == []
    assert str(tmp_path / "keras_home" / "tensorflow_datasets") in str(error.value)
    with tfds.testing.mock_data(num_examples=8):
        data.load("cifar10", "train", data_dir=str(mine))
    assert list(mine.iterdir()) == []


def test_missing_source_message(tmp_path):
    with pytest.raises(data.DatasetNotFoundError) as error:
        data.load("cifar10", "train", data_dir=str(tmp_path), download=False)
    message = str(error.value)
    for expected in (
        "'cifar10'",
        "data_batch_1",
        str(tmp_path / "cifar-10-batches-py"),
        "tensorflow_datasets.load('cifar10'",
        "could not find data",  # tfds' own reason
        "network",
        "pass data_dir=",
    ):
        assert expected in message
    assert "apt-get" not in message
    assert isinstance(error.value, FileNotFoundError)


def test_missing_fashion_mnist_suggests_debian_package(tmp_path, no_debian):
    with pytest.raises(data.DatasetNotFoundError) as error:
        data.load("fashion_mnist", "test", download=False, data_dir=str(tmp_path))
    message = str(error.value)
    assert "apt-get install dataset-fashion-mnist" in message
    assert no_debian in message
    assert "t10k-images-idx3-ubyte.gz" in message


# --------------------------------------------------------------------------
# Augmentation.


def test_crop_and_flip_known_offsets():
    images = np.arange(2 * 5 * 6 * 2, dtype=np.float32).reshape(2, 5, 6, 2) + 1
    def run(offsets, flips):
        return data.crop_and_flip(images, np.array(offsets), np.array(flips), padding=2).numpy()
    # Centre crop (offset = padding), no flip: the image itself.
    np.testing.assert_array_equal(run([[2, 2], [2, 2]], [False, False]), images)
    # Centre crop + flip: mirrored left-right; flipping again gives it back.
    np.testing.assert_array_equal(run([[2, 2], [2, 2]], [True, True]), images[:, :, ::-1])
    # Offset (0, 0): shifted down-right by 2 with zero padding at top-left;
    # per-example offsets: the second image is shifted up-left instead.
    out = run([[0, 0], [4, 4]], [False, False])
    np.testing.assert_array_equal(out[0, 2:, 2:], images[0, :-2, :-2])
    assert not out[0, :2].any() and not out[0, :, :2].any()
    np.testing.assert_array_equal(out[1, :-2, :-2], images[1, 2:, 2:])
    assert not out[1, -2:].any() and not out[1, :, -2:].any()
    # Crop then flip: the flipped crop of the shifted image.
    out = run([[0, 1], [2, 2]], [True, False])
    shifted = np.pad(images[0], ((2, 2), (2, 2), (0, 0)))[0:5, 1:7]
    np.testing.assert_array_equal(out[0], shifted[:, ::-1])


@pytest.mark.parametrize("crop_and_flip", [data.tfdata.crop_and_flip,
                                           data.numpydata.crop_and_flip])
def test_a_reflected_crop_is_numpys_reflect_pad_cropped(crop_and_flip):
    """WRN's reflection padding (scripts/train_cifar.sh, train.lua:103-117;
    nn.SpatialReflectionPadding does not repeat the border pixel) is
    ``np.pad(mode="reflect")``, in both pipelines."""
    rng = np.random.default_rng(2)
    images = rng.normal(size=(3, 7, 6, 2)).astype(np.float32)
    offsets, flips = np.array([[0, 0], [4, 1], [2, 2]]), np.array([False, True, False])
    out = np.asarray(crop_and_flip(images, offsets, flips, 2, "reflect"))
    for image, (row, col), flip, crop in zip(images, offsets, flips, out):
        expected = np.pad(image, ((2, 2), (2, 2), (0, 0)), mode="reflect")[row:row + 7,
                                                                          col:col + 6]
        np.testing.assert_array_equal(crop, expected[:, ::-1] if flip else expected)
    assert out[0, 0, 0, 0] == images[0, 2, 2, 0]  # the corner mirrors row 2, column 2
    # Zero padding differs at the border and nowhere else.
    zero = np.asarray(crop_and_flip(images, offsets, flips, 2))
    assert not zero[0, :2].any() and zero[0, :2].shape == out[0, :2].shape
    assert np.abs(out[0, :2]).min() > 0
    np.testing.assert_array_equal(zero[2], out[2])  # the centre crop: no padding seen
    with pytest.raises(ValueError, match="pad_mode='edge'; accepted: 'zero', 'reflect'"):
        data.make_dataset(images, np.zeros(3), pad_mode="edge")


def test_pipeline_passes_pad_mode_and_records_it(tmp_path):
    synthetic.write_synthetic("cifar10", tmp_path, 10, 4, seed=1)
    batches = {}
    for pad_mode in ("zero", "reflect"):
        p = data.pipeline("cifar10", data_dir=str(tmp_path), augment=True, batch_size=50,
                          pad_mode=pad_mode, seed=0)
        assert p.config["pad_mode"] == pad_mode
        batches[pad_mode] = first_batch(p.train)
    np.testing.assert_array_equal(batches["zero"][1], batches["reflect"][1])  # same order
    assert not np.array_equal(batches["zero"][0], batches["reflect"][0])


def test_augmentation_params_are_uniform_and_seeded():
    offsets, flips = data.augmentation_params(4000, tf.constant([1, 2]), padding=4)
    offsets, flips = offsets.numpy(), flips.numpy()
    np.testing.assert_array_equal(np.unique(offsets), np.arange(9))  # 0..2p, all hit
    assert 0.45 < flips.mean() < 0.55
    assert abs(np.corrcoef(offsets[:, 0], offsets[:, 1])[0, 1]) < 0.1
    again = data.augmentation_params(4000, tf.constant([1, 2]), padding=4)
    np.testing.assert_array_equal(again[0].numpy(), offsets)
    other = data.augmentation_params(4000, tf.constant([1, 3]), padding=4)
    assert (other[0].numpy() != offsets).any()


def explain(original, augmented, padding):
    """The (row, col, flip) whose crop_and_flip of ``original`` is ``augmented``."""
    candidates = [
        (r, c, f) for r in range(2 * padding + 1) for c in range(2 * padding + 1) for f in (0, 1)
    ]
    n = len(candidates)
    crops = data.crop_and_flip(
        np.repeat(original[None], n, axis=0),
        np.array([(r, c) for r, c, _ in candidates]),
        np.array([bool(f) for *_, f in candidates]),
        padding,
    ).numpy()
    matches = np.flatnonzero(np.all(np.isclose(crops, augmented), axis=(1, 2, 3)))
    return [candidates[i] for i in matches]


def test_pipeline_augmentation_is_a_crop_and_flip_of_the_same_example(tmp_path):
    with tfds.testing.mock_data(num_examples=16):
        kwargs = dict(data_dir=str(tmp_path), batch_size=16, seed=5, preprocessing="mean")
        plain = data.pipeline("cifar10", **kwargs)
        augmented = data.pipeline("cifar10", augment=True, **kwargs)
    x, y = first_batch(plain.train)
    xa, ya = first_batch(augmented.train)
    np.testing.assert_array_equal(ya, y)  # same shuffle, labels kept
    assert not np.allclose(xa, x)  # really changed
    found = [explain(x[i], xa[i], padding=4) for i in range(len(x))]
    assert all(found), "every augmented image is a pad-4 crop (+flip) of its own original"
    assert len({f[0][2] for f in found}) == 2  # both flipped and unflipped occur


@pytest.mark.parametrize("input_pipeline", ["tf_data", "numpy"])
def test_mnist_is_never_flipped_and_fashion_mnist_is(mnist_dir, input_pipeline):
    """``augment=True`` is the dataset's label-keeping augmentation: crops and
    flips on Fashion-MNIST (a mirrored shirt is a shirt), crops alone on MNIST
    (a mirrored 2 is no digit); the config records which."""
    folder = str(mnist_dir[0])
    kwargs = dict(data_dir=folder, batch_size=32, seed=5, input_pipeline=input_pipeline)
    plain = data.pipeline("mnist", **kwargs)
    augmented = data.pipeline("mnist", augment=True, **kwargs)
    assert augmented.config["augment"] == "crop"
    x, _ = first_batch(plain.train)
    xa, _ = first_batch(augmented.train)
    assert not np.allclose(xa, x)  # cropped
    found = [explain(x[i], xa[i], padding=4) for i in range(len(x))]
    assert all(found) and not any(flip for f in found for *_, flip in f)
    # Fashion-MNIST (Debian's real files) keeps its flips
    fashion = data.pipeline("fashion_mnist", augment=True, batch_size=64, seed=5,
                            max_train_examples=64, input_pipeline=input_pipeline)
    assert fashion.config["augment"] is True
    x = data.pipeline("fashion_mnist", batch_size=64, seed=5, max_train_examples=64,
                      input_pipeline=input_pipeline)
    x, _ = first_batch(x.train)
    xa, _ = first_batch(fashion.train)
    found = [explain(x[i], xa[i], padding=4) for i in range(len(x))]
    assert all(found) and any(flip for f in found for *_, flip in f)


def test_augment_crop_only_keeps_the_crops_of_crop_and_flip():
    """``augment="crop"`` draws the same crops as ``True`` (one epoch plan)
    and never mirrors; a bad value is refused naming the argument."""
    images = np.random.default_rng(0).integers(0, 256, (40, 8, 8, 1), dtype=np.uint8)
    labels = np.arange(40)

    def batches(augment, maker):
        dataset = maker(images, labels, batch_size=40, shuffle=True, augment=augment,
                        padding=2, seed=1, epochs=(0, 1))
        return [(np.asarray(x), np.asarray(y)) for x, y in dataset]

    from keras_gresnet.data import numpydata, tfdata

    for maker in (tfdata.make_dataset, numpydata.make_dataset):
        (xc, yc), = batches("crop", maker)
        (xf, yf), = batches(True, maker)
        np.testing.assert_array_equal(yc, yf)
        mirrored = [not np.array_equal(xc[i], xf[i]) for i in range(40)]
        assert 5 < sum(mirrored) < 35  # the flipped half differs...
        for i in np.flatnonzero(mirrored):  # ...by exactly the mirror
            np.testing.assert_array_equal(xc[i], xf[i][:, ::-1])
        with pytest.raises(ValueError, match="augment must be one of"):
            batches("flip", maker)


def test_pipeline_is_deterministic_under_seed(mnist_dir):
    folder = str(mnist_dir[0])

    def epochs(seed, count=2):
        p = data.pipeline("mnist", data_dir=folder, batch_size=32, augment=True, seed=seed)
        return [all_batches(p.train) for _ in range(count)]

    first, second = epochs(7), epochs(7)
    for (x1, y1), (x2, y2) in zip(first, second):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    # A new order and new crops each epoch, and with another seed.
    assert not np.array_equal(first[0][1], first[1][1])
    assert not np.array_equal(first[0][0], epochs(8, 1)[0][0])


def test_train_epochs_are_a_function_of_seed_and_epoch():
    """The stream training reads: epoch e's order and crops depend on (seed, e)
    only, so a run resumed at epoch 2 (or another worker) reads what the
    uninterrupted run reads in its epoch 2."""
    images = np.random.default_rng(0).integers(0, 256, (100, 8, 8, 1), dtype=np.uint8)
    labels = np.arange(100)  # the label names the example

    def stream(epochs, seed=3):
        dataset = data.make_dataset(images, labels, batch_size=32, shuffle=True, augment=True,
                                    padding=2, seed=seed, epochs=epochs)
        return [(x.numpy(), y.numpy()) for x, y in dataset]

    whole = stream((0, 3))
    assert [len(y) for _, y in whole] == [32, 32, 32, 4] * 3
    orders = [np.concatenate([y for _, y in whole[4 * e:4 * e + 4]]) for e in range(3)]
    for order in orders:  # every example once per epoch
        np.testing.assert_array_equal(np.sort(order), labels)
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])
    for (x1, y1), (x2, y2) in zip(stream((2, 3)), whole[8:], strict=True):
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(x1, x2)  # the same crops and flips too
    again = stream(3)  # epochs=3 means (0, 3); a second pass is the same
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(again, whole, strict=True))
    assert not np.array_equal(stream((0, 1), seed=4)[0][1], whole[0][1])
    for bad in ((3, 1), (-1, 2)):
        with pytest.raises(ValueError, match="epochs"):
            data.make_dataset(images, labels, epochs=bad)


def test_tf_data_streams_run_without_the_autotuning_model():
    """Every stream make_dataset builds (a process's share of it too) has
    tf.data's autotuning model off: where Keras' fit drops the iterator of
    a long stream, TensorFlow waits for the model thread's sleep of up to
    60 s (tfdata.without_autotuning)."""
    from keras_gresnet.data.tfdata import batch_share

    images = np.zeros((40, 4, 4, 1), np.uint8)
    labels = np.arange(40)
    for options in (dict(shuffle=True, augment=True, padding=2, epochs=(0, 2)), dict()):
        dataset = data.make_dataset(images, labels, batch_size=8, input_pipeline="tf_data",
                                    **options)
        assert dataset.options().autotune.enabled is False
        assert batch_share(dataset, 0, 2).options().autotune.enabled is False
    assert tf.data.Dataset.range(3).options().autotune.enabled is not False  # TF's default


@pytest.mark.parametrize("options", [
    dict(shuffle=True, augment=True, padding=2, epochs=(1, 3)),
    dict(shuffle=True, augment=True, padding=4, drop_remainder=True, epochs=(0, 2)),
    dict(shuffle=True, augment=True, padding=3, pad_mode="reflect", epochs=(0, 2)),
    dict(shuffle=True, flatten=True, epochs=(5, 6)),
    dict(),  # a test set: one pass, in order
])
def test_the_numpy_pipeline_yields_the_tf_data_batches(options):
    """The TensorFlow-free twin (data/numpydata.py): the same arguments give
    the same batches, to the bit: order, mean/std normalisation, crops,
    flips, the last partial batch."""
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (70, 8, 6, 3), dtype=np.uint8)
    labels = np.arange(70)  # the label names the example
    fitted = data.Preprocessing.fit("meanstd", images)
    common = dict(batch_size=16, preprocessing=fitted, seed=9, **options)
    tf_batches = [(x.numpy(), y.numpy()) for x, y in
                  data.make_dataset(images, labels, input_pipeline="tf_data", **common)]
    numpy_dataset = data.make_dataset(images, labels, input_pipeline="numpy", **common)
    assert isinstance(numpy_dataset, keras.utils.PyDataset)
    numpy_batches = [numpy_dataset[i] for i in range(len(numpy_dataset))]
    assert len(tf_batches) == len(numpy_batches) > 1
    for (x1, y1), (x2, y2) in zip(tf_batches, numpy_batches, strict=True):
        assert x1.dtype == x2.dtype == np.float32 and y1.dtype == y2.dtype == np.int32
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(x1, x2)
    x, y = numpy_batches[0]
    plain = fitted(images[y]).reshape(x.shape)
    if options.get("augment"):  # cropped and flipped: not the plain normalised images
        assert not np.array_equal(x, plain)
    else:
        np.testing.assert_array_equal(x, plain)
    if not options.get("shuffle"):
        np.testing.assert_array_equal(y, np.arange(16))


def test_the_numpy_one_pass_reshuffles_every_epoch():
    images = np.zeros((40, 2, 2, 1), np.uint8)
    labels = np.arange(40)
    dataset = data.make_dataset(images, labels, batch_size=40, shuffle=True, seed=1,
                                input_pipeline="numpy")
    first = dataset[0][1]
    dataset.on_epoch_end()  # what model.fit calls between epochs
    second = dataset[0][1]
    np.testing.assert_array_equal(np.sort(first), labels)
    np.testing.assert_array_equal(np.sort(second), labels)
    assert not np.array_equal(first, second) and not np.array_equal(first, labels)
    with pytest.raises(IndexError):
        dataset[1]  # noqa: B018


def test_input_pipeline_choice():
    assert data.resolve_input_pipeline("auto") == "tf_data"  # TensorFlow is installed here
    with pytest.raises(ValueError, match="input_pipeline='torch'"):
        data.resolve_input_pipeline("torch")


def test_pipeline_train_epochs_covers_the_training_split(mnist_dir):
    folder = str(mnist_dir[0])
    pipe = data.pipeline("mnist", data_dir=folder, batch_size=32, seed=1)
    batches = list(pipe.train_epochs(1, 3))
    assert len(batches) == 2 * pipe.steps_per_epoch
    seen = decode_index(np.concatenate([x for x, _ in batches[:pipe.steps_per_epoch]]))
    np.testing.assert_array_equal(np.sort(seen), np.sort(decode_index(
        np.concatenate([x for x, _ in pipe.train]))))


# --------------------------------------------------------------------------
# Validation split, batching options, argument checks.


def test_validation_split_disjoint_and_deterministic(mnist_dir):
    folder = str(mnist_dir[0])

    def indices(seed):
        p = data.pipeline("mnist", data_dir=folder, batch_size=16, validation_split=0.2, seed=seed)
        train = decode_index(all_batches(p.train)[0])
        validation = decode_index(all_batches(p.validation)[0])
        return p, train, validation

    p, train, validation = indices(3)
    assert (p.num_train, p.num_validation, len(train), len(validation)) == (80, 20, 80, 20)
    assert not set(train) & set(validation)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, validation])), np.arange(100))
    np.testing.assert_array_equal(validation, indices(3)[2])  # same seed, same split
    assert set(validation) != set(indices(4)[2])
    np.testing.assert_array_equal(data.split_indices(100, 0.2, seed=3)[1], validation)


def test_drop_remainder_flatten_and_steps(mnist_dir):
    folder = str(mnist_dir[0])
    kept = data.pipeline("mnist", data_dir=folder, batch_size=32)
    dropped = data.pipeline(
        "mnist", data_dir=folder, batch_size=32, drop_remainder=True, flatten=True
    )
    assert [len(y) for _, y in kept.train] == [32, 32, 32, 4] and kept.steps_per_epoch == 4
    assert [len(y) for _, y in dropped.train] == [32, 32, 32] and dropped.steps_per_epoch == 3
    assert [len(y) for _, y in dropped.test] == [30]  # evaluation keeps every example
    x, _ = first_batch(dropped.train)
    assert x.shape == (32, 784)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(name="svhn"), "name='svhn'; accepted: 'mnist', 'fashion_mnist', 'cifar10', 'cif"),
        (dict(preprocessing="zca"), r"preprocessing='zca'; accepted: 'scale', 'mean', 'meanstd'"),
        (dict(batch_size=0), r"batch_size must be an integer >= 1, got 0"),
        (dict(batch_size=12.5), r"batch_size must be an integer >= 1"),
        (dict(batch_size=True), r"batch_size must be an integer >= 1"),
        (dict(validation_split=1.0), r"validation_split must be a number in \[0, 1\), got 1.0"),
        (dict(validation_split=-0.1), r"validation_split must be a number in \[0, 1\)"),
        (dict(padding=-1), r"padding must be an integer >= 0"),
        (dict(pad_mode="wrap"), r"pad_mode='wrap'; accepted: 'zero', 'reflect'"),
    ],
)
def test_pipeline_argument_errors(kwargs, message):
    kwargs = {"name": "mnist", **kwargs}
    with pytest.raises(ValueError, match=message):
        data.pipeline(kwargs.pop("name"), data_dir="/nonexistent", **kwargs)


def test_load_and_make_dataset_argument_errors():
    with pytest.raises(ValueError, match=r"split='valid'; accepted: 'train', 'test'"):
        data.load("mnist", "valid")
    images = np.zeros((4, 8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="labels \\(N,\\)"):
        data.make_dataset(images, np.zeros(3))
    with pytest.raises(ValueError, match="preprocessing must be a Preprocessing"):
        data.make_dataset(images, np.zeros(4), preprocessing="mean")
    with pytest.raises(ValueError, match="1 channels, images have 3"):
        gray = data.Preprocessing.fit("mean", images[..., :1])
        data.make_dataset(images, np.zeros(4), preprocessing=gray)
    with pytest.raises(ValueError, match="empty train or validation set"):
        data.split_indices(4, 0.1)


# --------------------------------------------------------------------------
# HE's ImageNet data (fb.resnet.torch), through tfds' mock imagenet2012.


@pytest.mark.tensorflow_only
def test_imagenet_pipeline_on_tfds_mock_data(tmp_path):
    with tfds.testing.mock_data(num_examples=6):
        p = data.pipeline("imagenet2012", data_dir=str(tmp_path), preprocessing="meanstd",
                          batch_size=4, augment=True, seed=1, max_train_examples=6,
                          max_test_examples=5)
        again = data.pipeline("imagenet2012", data_dir=str(tmp_path), preprocessing="meanstd",
                              batch_size=4, augment=True, seed=1, max_train_examples=6,
                              max_test_examples=5)
        train = [(x.numpy(), y.numpy()) for x, y in p.train]
        epochs = [(x.numpy(), y.numpy()) for x, y in p.train_epochs(0, 2)]
        repeat = [(x.numpy(), y.numpy()) for x, y in again.train_epochs(0, 2)]
        test = [(x.numpy(), y.numpy()) for x, y in p.test]
    assert (p.num_train, p.num_test, p.steps_per_epoch, p.num_classes) == (6, 5, 2, 1000)
    assert p.input_shape == (224, 224, 3) and p.validation is None
    assert [x.shape for x, _ in train] == [(4, 224, 224, 3), (2, 224, 224, 3)]
    assert [x.shape for x, _ in test] == [(4, 224, 224, 3), (1, 224, 224, 3)]
    for x, y in train + test:
        assert x.dtype == np.float32 and y.dtype == np.int32 and 0 <= y.min() <= y.max() < 1000
    # fb's fixed statistics: pixels in [0, 1], (x - mean) / std.
    assert p.config["preprocessing"] == {"method": "meanstd", "mean": [0.485, 0.456, 0.406],
                                         "std": [0.229, 0.224, 0.225]}
    from keras_gresnet.data import imagenet

    with tfds.testing.mock_data(num_examples=6):
        raw = next(iter(tfds.load("imagenet2012", split="validation", data_dir=str(tmp_path))))
    expected = (imagenet.center_crop(raw["image"]).numpy() / 255 - np.array(imagenet.MEAN)) \
        / np.array(imagenet.STD)
    # float32 x * scale + offset vs float64 (x / 255 - mean) / std: ulps of |x| < 2.7, ~1e-6
    np.testing.assert_allclose(test[0][0][0], expected, atol=1e-4)
    assert test[0][1][0] == raw["label"].numpy()
    # Epochs: a function of (seed, epoch); each epoch sees every example once.
    assert len(epochs) == 4
    for (x1, y1), (x2, y2) in zip(epochs, repeat, strict=True):
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(x1, x2)
    labels = [np.sort(np.concatenate([y for _, y in epochs[i:i + 2]])) for i in (0, 2)]
    np.testing.assert_array_equal(labels[0], labels[1])
    assert not np.array_equal(epochs[0][0], epochs[2][0])  # new crops / order each epoch
    # The test crops are not augmented: the same in every pass.
    with tfds.testing.mock_data(num_examples=6):
        np.testing.assert_array_equal(first_batch(p.test)[0], test[0][0])


@pytest.mark.tensorflow_only
def test_imagenet_crops_follow_fb_resnet_torch():
    from keras_gresnet.data import imagenet

    image = np.arange(300 * 256 * 3, dtype=np.float32).reshape(300, 256, 3) % 251
    # Test: shorter side 256 (already), central 224.
    centre = imagenet.center_crop(tf.constant(image)).numpy()
    # bicubic at scale 1: weights 1 and 0 up to float32 round-off, ulps of pixels <= 250
    np.testing.assert_allclose(centre, image[38:262, 16:240], atol=1e-3)
    assert imagenet.center_crop(tf.constant(image), 320).shape == (320, 320, 3)
    # Train: seeded, 224 x 224, and not the centre crop.
    seed = tf.constant([3, 4], tf.int64)
    crop = imagenet.random_sized_crop(tf.constant(image), seed).numpy()
    np.testing.assert_array_equal(crop, imagenet.random_sized_crop(tf.constant(image),
                                                                  seed).numpy())
    assert crop.shape == (224, 224, 3) and not np.allclose(crop, centre)
    crops = [imagenet.random_sized_crop(tf.constant(image), tf.constant([s, 0], tf.int64))
             for s in range(5)]
    assert len({float(tf.reduce_sum(c)) for c in crops}) == 5


def test_imagenet_without_its_files_names_manual_dir(tmp_path):
    with pytest.raises(ValueError, match=r"manual_dir=.*manual' lacks ILSVRC2012_img_train.tar, "
                                         r"ILSVRC2012_img_val.tar"):
        data.pipeline("imagenet2012", data_dir=str(tmp_path / "tfds"), preprocessing="meanstd",
                      manual_dir=str(tmp_path / "manual"))
    for kwargs, message in ((dict(preprocessing="mean"), "ImageNet takes 'meanstd'"),
                            (dict(preprocessing="meanstd", validation_split=0.1),
                             "validation_split and flatten are not available")):
        with pytest.raises(ValueError, match=message):
            data.pipeline("imagenet2012", data_dir=str(tmp_path / "tfds"), **kwargs)
    assert not (tmp_path / "manual").exists()


def test_a_tfds_download_that_stalls_after_its_first_bytes_is_stopped(tmp_path, monkeypatch):
    """A server that sent the first bytes and went silent: tfds' reads have
    no timeout, so the download would hang forever. Nothing written for
    STALL_SECONDS stops it with one line, and its partial files go; the
    files that were there before stay."""
    import tensorflow_datasets as tfds

    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(data.sources, "STALL_SECONDS", 1)
    monkeypatch.setattr(data.sources, "check_reachable", lambda url: None)  # the HEAD answered
    folder = data.sources.tfds_folder()
    kept = folder / "downloads" / "old.tmp.1" / "someone-elses"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"x")
    partial = folder / "downloads" / "cifar10.tmp.abc" / "cifar-10-python.tar.gz"

    def stalled_load(*args, **kwargs):  # tfds' download: first bytes, then silence
        partial.parent.mkdir(parents=True)
        partial.write_bytes(b"\x1f\x8b")
        while True:
            time.sleep(0.01)

    monkeypatch.setattr(tfds, "load", stalled_load)
    start = time.monotonic()
    with pytest.raises(data.DatasetNotFoundError, match="download of cifar10 stalled: nothing "
                                                        "was written under .* for 1 s"):
        data.load("cifar10", "train")
    assert time.monotonic() - start < 30
    assert not partial.exists() and kept.exists()


@pytest.mark.integration  # starts a process
def test_a_stalled_call_is_stopped_where_sigint_is_ignored():
    """A job a shell started in the background (or under nohup) ignores
    SIGINT, which is how the stall watcher interrupts the main thread: it
    installs Python's handler for the body, and puts the ignoring back."""
    import signal
    import subprocess
    import sys

    code = ("import signal, time\n"
            "from keras_gresnet.files import Stopped, stop_when\n"
            "try:\n"
            "    with stop_when(lambda s: 'stalled' if s > 0.5 else None, interval=0.1):\n"
            "        while True:\n"
            "            time.sleep(0.01)\n"
            "except Stopped as error:\n"
            "    print('stopped:', error)\n"
            "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.stdout.split() == ["stopped:", "stalled", "True"], done.stderr[-2000:]
