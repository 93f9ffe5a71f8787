"""Synthetic datasets written in the official file formats, for tests and
benchmarks on machines without the real data.

:func:`write_synthetic` writes seeded random images and labels of a dataset's
shape as its own distribution ships them, so that
:func:`keras_gresnet.data.load` reads them as it would read the real files:

- MNIST, Fashion-MNIST: the four IDX files (gzipped or not) in ``folder``;
- CIFAR-10, CIFAR-100: the python-pickle batches (dicts of a ``data`` uint8
  array and lists of labels, file names and a batch label) in
  ``folder/cifar-10-batches-py`` or ``folder/cifar-100-python``.

:func:`write_dataset` writes given arrays the same way.
"""

import gzip
import math
import os
import pickle
import struct

import numpy as np

from keras_gresnet.data.datasets import DATASETS, SPLITS

# An IDX file's magic number: 0x0000, the type code (0x08: uint8), the number
# of dimensions (the readers' IDX_DTYPES lists the other type codes).
_IDX_UINT8 = 0x08


def write_idx(path, array, *, compress=True):
    """An IDX file of the uint8 values of ``array``, gzipped (as MNIST and
    Fashion-MNIST ship) or not."""
    array = _uint8(array, "array")
    raw = struct.pack(">4B", 0, 0, _IDX_UINT8, array.ndim)
    raw += struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    with open(path, "wb") as f:
        # mtime=0: the same arrays give the same bytes.
        f.write(gzip.compress(raw, mtime=0) if compress else raw)


def cifar_batch(images, labels, label_key, batch_label):
    """The dict one CIFAR batch file holds: ``data`` N x 3072 uint8 (each
    image's R, G then B planes, row-major), the labels, file names and batch
    label; CIFAR-100's also has ``coarse_labels``. Python 2 ``str`` keys and
    values, as the website's files were written, are ``bytes`` here."""
    images, labels = _uint8(images, "images"), np.asarray(labels)
    planes = images.transpose(0, 3, 1, 2)
    batch = {
        b"batch_label": batch_label.encode(),
        label_key.encode(): [int(y) for y in labels],
        b"data": planes.reshape(len(images), math.prod(planes.shape[1:])),
        b"filenames": [f"synthetic_{i:06d}.png".encode() for i in range(len(images))],
    }
    if label_key == "fine_labels":
        # A stand-in grouping (20 superclasses of 5), not CIFAR-100's own.
        batch[b"coarse_labels"] = [int(y) // 5 for y in labels]
    return batch


def write_cifar_batch(path, batch, *, protocol=pickle.DEFAULT_PROTOCOL, pickler=pickle.Pickler):
    """``batch`` (a dict, e.g. :func:`cifar_batch`'s) pickled into ``path``:
    ``pickle.dump`` by default; ``pickler`` (a ``pickle.Pickler`` class) lets
    a test write the bytes another Python would have written."""
    with open(path, "wb") as f:
        pickler(f, protocol=protocol).dump(batch)


def write_dataset(name, folder, arrays, *, compress=True, protocol=pickle.DEFAULT_PROTOCOL,
                  pickler=pickle.Pickler):
    """Write ``arrays`` (``{split: (images, labels)}``, any of the splits) as
    the files of dataset ``name``; returns the folder that holds them
    (``folder`` itself for IDX, its CIFAR subfolder for CIFAR).

    Images are ``(N, H, W, C)`` as :func:`keras_gresnet.data.load` returns
    them (MNIST family: ``(N, H, W)`` too, the IDX files' own shape) and
    labels ``(N,)`` in ``[0, num_classes)``. ``compress`` applies to IDX
    files; ``protocol`` and ``pickler`` to CIFAR batches
    (:func:`write_cifar_batch`). CIFAR-10's training examples are spread
    over its five batch files in order, as evenly as they go.
    """
    info = DATASETS[name]
    unknown = set(arrays) - set(SPLITS)
    if unknown:
        raise ValueError(f"arrays has splits {sorted(unknown)}; accepted: {SPLITS}")
    arrays = {split: _checked_arrays(info, split, *arrays[split]) for split in arrays}
    target = os.path.join(folder, info.folder) if info.file_format == "cifar" else folder
    os.makedirs(target, exist_ok=True)
    for split, (images, labels) in arrays.items():
        files = info.files[split]
        if info.file_format == "idx":
            write_idx(os.path.join(target, files[0]), images[..., 0], compress=compress)
            write_idx(os.path.join(target, files[1]), labels, compress=compress)
            continue
        word = "training" if split == "train" else "testing"
        parts = np.array_split(np.arange(len(labels)), len(files))
        for number, (file, part) in enumerate(zip(files, parts), 1):
            batch = cifar_batch(images[part], labels[part], info.label_key,
                                f"{word} batch {number} of {len(files)}")
            write_cifar_batch(os.path.join(target, file), batch, protocol=protocol,
                              pickler=pickler)
    return target


def synthetic_arrays(name, num_train, num_test, *, seed=0):
    """``{"train": (images, labels), "test": ...}``: uniform random uint8
    images of ``name``'s shape and uniform random int32 labels, a pure
    function of ``seed``."""
    info = DATASETS[name]
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, size in zip(SPLITS, (num_train, num_test)):
        images = rng.integers(0, 256, (size, *info.image_shape), dtype=np.uint8)
        labels = rng.integers(0, info.num_classes, size).astype(np.int32)
        arrays[split] = images, labels
    return arrays


def write_synthetic(name, folder, num_train, num_test, *, seed=0, **options):
    """:func:`synthetic_arrays` written as dataset ``name``'s files under
    ``folder`` (:func:`write_dataset`, whose ``options`` these are); returns
    the arrays written, as :func:`keras_gresnet.data.load` reads them back."""
    arrays = synthetic_arrays(name, num_train, num_test, seed=seed)
    write_dataset(name, folder, arrays, **options)
    return arrays


def _uint8(values, what):
    """``values`` as a uint8 array; integers outside [0, 255] are refused
    rather than wrapped."""
    array = np.asarray(values)
    if array.dtype == np.uint8:
        return array
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integers in [0, 255], got dtype {array.dtype}")
    if array.size and not 0 <= array.min() <= array.max() <= 255:
        raise ValueError(f"{what} must hold integers in [0, 255], got values in "
                         f"[{array.min()}, {array.max()}]")
    return array.astype(np.uint8)


def _checked_arrays(info, split, images, labels):
    """``(images (N, H, W, C) uint8, labels (N,))`` of ``info``'s shape and
    label range."""
    images, labels = _uint8(images, f"{split} images"), np.asarray(labels)
    if images.ndim == 3 and info.image_shape[-1] == 1:
        images = images[..., None]
    if images.shape[1:] != info.image_shape or labels.shape != images.shape[:1]:
        raise ValueError(
            f"{info.name} {split}: images {images.shape} and labels {labels.shape}; expected "
            f"(N, {', '.join(map(str, info.image_shape))}) and (N,)")
    if labels.size and (labels.dtype.kind not in "iu" or labels.min() < 0
                        or labels.max() >= info.num_classes):
        raise ValueError(f"{info.name} {split}: labels must be integers in "
                         f"[0, {info.num_classes})")
    return images, labels
