"""The layout of keras_gresnet.data: the dataset table (class names too), what
each module may import, the public names, and the synthetic-dataset writer."""

import ast
import filecmp
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_gresnet import data
from keras_gresnet.data import synthetic

PACKAGE = Path(data.__file__).parent
# Each module of data/ -> the package modules it may import (one way, no cycles).
ALLOWED = {
    "datasets": set(),
    "readers": {"limits"},
    "folders": {"_text", "limits"},
    "sources": {"_checks", "_paths", "files", "data.datasets", "data.readers"},
    "preprocessing": {"_checks", "_pixels"},
    "tfdata": {"data.preprocessing"},
    "numpydata": {"data.preprocessing"},
    "devicedata": {"data.numpydata"},
    "pipelines": {"_checks", "data.datasets", "data.preprocessing", "data.sources",
                  "data", "data.tfdata", "data.numpydata", "data.folders"},
    "synthetic": {"data.datasets"},
}
THIRD_PARTY = {"numpy", "tensorflow", "tensorflow_datasets", "keras", "PIL", "jax"}
# Imports a module makes only when called (the input pipeline asked for).
LAZY = {("pipelines", "keras_gresnet.data")}


@pytest.mark.parametrize("name", list(data.DATASETS))
def test_every_dataset_names_each_class_once(name):
    info = data.DATASETS[name]
    assert len(info.class_names) == info.num_classes
    assert len(set(info.class_names)) == info.num_classes
    assert all(isinstance(c, str) and c for c in info.class_names)


def test_class_names_in_label_order():
    assert data.DATASETS["cifar10"].class_names[:2] == ("airplane", "automobile")
    cifar100 = data.DATASETS["cifar100"].class_names
    assert (cifar100[0], cifar100[91], cifar100[99]) == ("apple", "trout", "worm")
    assert data.DATASETS["fashion_mnist"].class_names[9] == "Ankle boot"


def imports_of(path):
    """``(module, at module level)`` of every import statement in ``path``
    (module level: not inside a function)."""
    tree = ast.parse(path.read_text())
    in_functions = {id(inner) for node in ast.walk(tree)
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) not in in_functions) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module, id(node) not in in_functions))
    return found


@pytest.mark.parametrize("module", list(ALLOWED))
def test_modules_import_only_what_comes_before_them(module):
    for name, at_top in imports_of(PACKAGE / f"{module}.py"):
        root = name.split(".")[0]
        if root == "keras_gresnet":
            assert name.removeprefix("keras_gresnet.") in ALLOWED[module], name
        elif root in THIRD_PARTY:
            allowed = {"numpy": module not in ("datasets",),
                       "tensorflow": module == "tfdata",
                       "keras": module in ("numpydata", "devicedata"),
                       "jax": module == "devicedata" and not at_top,
                       "tensorflow_datasets": module == "sources" and not at_top,
                       "PIL": module == "folders" and not at_top}
            assert allowed[root], f"{module} imports {name}"
        else:
            assert root in sys.stdlib_module_names, f"{module} imports {name}"
        if root not in ("tensorflow_datasets", "PIL", "jax") and (module, name) not in LAZY:
            assert at_top, f"{module} imports {name} inside a function"


def test_the_dataset_table_imports_no_numpy_keras_or_tensorflow():
    code = ("import sys; from keras_gresnet.data.datasets import DATASETS; "
            "from keras_gresnet.data import DATASETS as again; assert again is DATASETS; "
            "print(sorted({'numpy', 'keras', 'tensorflow'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_every_public_name_resolves():
    for name in data.__all__:
        assert getattr(data, name) is not None
        assert name in dir(data)
    assert data.load is data.sources.load and data.pipeline is data.pipelines.pipeline
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        data.nothing  # noqa: B018


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
@pytest.mark.parametrize("compress", [True, False])
def test_synthetic_idx_files_load_back(name, compress, tmp_path):
    written = synthetic.write_synthetic(name, tmp_path, 7, 3, seed=4, compress=compress)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f for pair in data.DATASETS[name].files.values() for f in pair)
    assert (tmp_path / files[0]).read_bytes()[:2] == (b"\x1f\x8b" if compress else b"\x00\x00")
    for split, (images, labels) in written.items():
        loaded = data.load(name, split, data_dir=str(tmp_path), download=False)
        np.testing.assert_array_equal(loaded[0], images)
        np.testing.assert_array_equal(loaded[1], labels)
        assert images.shape[1:] == (28, 28, 1)


def test_synthetic_cifar_layout_and_seed(tmp_path):
    first = synthetic.write_synthetic("cifar10", tmp_path / "a", 12, 2, seed=1)
    synthetic.write_synthetic("cifar10", tmp_path / "b", 12, 2, seed=1)
    folder = tmp_path / "a" / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"])
    # Same seed, same files, byte for byte.
    for file in folder.iterdir():
        assert filecmp.cmp(file, tmp_path / "b" / folder.name / file.name, shallow=False)
    sizes = [len(data.readers.read_cifar_split(folder, [f"data_batch_{i}"], "labels")[1])
             for i in range(1, 6)]
    assert sizes == [3, 3, 2, 2, 2]
    images, labels = data.load("cifar10", "train", data_dir=str(tmp_path / "a"))
    np.testing.assert_array_equal(images, first["train"][0])
    np.testing.assert_array_equal(labels, first["train"][1])
    synthetic.write_synthetic("cifar10", tmp_path / "c", 1, 0)
    assert data.load("cifar10", "test", data_dir=str(tmp_path / "c"))[0].shape == (0, 32, 32, 3)
    other = synthetic.synthetic_arrays("cifar10", 12, 2, seed=2)
    assert not np.array_equal(other["train"][0], first["train"][0])


def test_synthetic_cifar100_batch_holds_what_the_website_ships():
    images = np.zeros((2, 32, 32, 3), np.uint8)
    images[1, 0, 0] = (1, 2, 3)
    batch = synthetic.cifar_batch(images, [7, 99], "fine_labels", "training batch 1 of 1")
    assert set(batch) == {b"batch_label", b"fine_labels", b"coarse_labels", b"data",
                          b"filenames"}
    assert batch[b"data"].shape == (2, 3072) and batch[b"data"].dtype == np.uint8
    assert batch[b"data"][1, [0, 1024, 2048]].tolist() == [1, 2, 3]  # R, G, B planes
    assert batch[b"fine_labels"] == [7, 99] and batch[b"coarse_labels"] == [1, 19]


U8 = np.uint8


@pytest.mark.parametrize("arrays, message", [
    ({"valid": (np.zeros((1, 28, 28), U8), [0])}, "splits"),
    ({"train": (np.zeros((1, 32, 32, 3), U8), [0])}, r"expected \(N, 28, 28, 1\)"),
    ({"train": (np.zeros((2, 28, 28), U8), [0])}, r"and \(N,\)"),
    ({"train": (np.zeros((1, 28, 28), U8), [10])}, r"labels must be integers in \[0, 10\)"),
    ({"train": (np.full((1, 28, 28), 256), [0])}, r"integers in \[0, 255\], got values"),
    ({"train": (np.zeros((1, 28, 28), np.float32), [0])}, "got dtype float32"),
])
def test_synthetic_writer_refuses_what_the_format_cannot_hold(arrays, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        synthetic.write_dataset("mnist", tmp_path, arrays)
    assert not list(tmp_path.iterdir())
