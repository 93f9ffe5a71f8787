"""Readers of the datasets' own file formats: MNIST's IDX files and CIFAR's
python-pickle batches, into numpy arrays.

CIFAR's batches are pickles; they are read by a restricted unpickler that
builds only what the official files hold, so a crafted file cannot run code.
Where the files are looked for is :mod:`keras_gresnet.data.sources`' job.
"""

import gzip
import math
import os
import pickle
import struct
import zlib

import numpy as np

from keras_gresnet.limits import IDX_MAX_BYTES  # the bounds' one place

# numpy's pickling helpers, under numpy 2's module names (numpy 1: numpy.core).
try:
    from numpy._core import multiarray as _np_multiarray
    from numpy._core import numeric as _np_numeric
except ImportError:  # numpy 1
    from numpy.core import multiarray as _np_multiarray
    from numpy.core import numeric as _np_numeric

# IDX magic numbers: 0x0000, type code 0x08 (uint8), number of dimensions.
IDX_IMAGES_MAGIC = 0x00000803
IDX_LABELS_MAGIC = 0x00000801
# IDX type code -> numpy dtype (big-endian, as the format stores it).
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


# --------------------------------------------------------------------------
# MNIST's IDX files.


# The largest IDX file read is keras_gresnet.limits.IDX_MAX_BYTES: MNIST's and
# Fashion-MNIST's training images are 47,040,016 bytes; a header that declares
# more (a 14 MB gzip can expand to gigabytes) is refused before anything is
# decompressed past it.


def read_idx(path, *, magic=None, max_bytes=IDX_MAX_BYTES):
    """Read an IDX file (the MNIST format), gzip-compressed or not.

    The header is read first; a declared size over ``max_bytes`` is refused,
    and no more than the declared size (plus one byte, to see padding) is
    ever decompressed.

    Args:
        path: the file.
        magic: the expected magic number (``0x803``: uint8 images ``N x H x W``;
            ``0x801``: uint8 labels ``N``), or ``None`` to accept any valid one.
        max_bytes: the largest file (decompressed) accepted.

    Returns:
        A numpy array of the file's type and shape, native byte order.

    Raises:
        ValueError: the file is corrupt (bad gzip stream, bad magic number,
            wrong size), too large, or its magic number is not ``magic``.
    """
    with open(path, "rb") as raw_file:
        compressed = raw_file.read(2) == b"\x1f\x8b"  # the gzip magic
        raw_file.seek(0)
        stream = gzip.GzipFile(fileobj=raw_file) if compressed else raw_file
        try:
            return _read_idx_stream(stream, path, magic, max_bytes)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(f"Corrupt IDX file {path}: bad gzip data ({err})") from err


def _read_idx_stream(stream, path, magic, max_bytes):
    raw = stream.read(4)
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] not in IDX_DTYPES:
        raise ValueError(
            f"Corrupt IDX file {path}: bad magic number 0x{raw[:4].hex()} (an IDX "
            f"file starts with 0x0000, a type code in "
            f"{[hex(c) for c in IDX_DTYPES]} and its number of dimensions)"
        )
    found_magic, ndim = struct.unpack(">I", raw[:4])[0], raw[3]
    if magic is not None and found_magic != magic:
        raise ValueError(
            f"Unexpected IDX file {path}: magic number 0x{found_magic:08x}, "
            f"expected 0x{magic:08x}"
        )
    dims = stream.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise ValueError(f"Corrupt IDX file {path}: truncated header")
    shape = struct.unpack(f">{ndim}I", dims)
    dtype = np.dtype(IDX_DTYPES[raw[2]])
    header = 4 + 4 * ndim
    expected = header + math.prod(shape) * dtype.itemsize
    if expected > max_bytes:
        raise ValueError(
            f"IDX file {path} declares shape {shape} ({expected:,} bytes), more than the "
            f"{max_bytes:,} an MNIST-family file can hold: refused before decompressing it")
    body = stream.read(expected - header + 1)
    if len(body) != expected - header:
        size = header + len(body)
        raise ValueError(
            f"Corrupt IDX file {path}: {'over ' if size > expected else ''}{size} bytes, "
            f"expected {expected} for shape {shape} (truncated or padded)"
        )
    array = np.frombuffer(body, dtype).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def read_idx_split(folder, files):
    """``(images (N, H, W, 1), labels (N,))`` of an IDX image file and its
    label file, ``files = (images file, labels file)`` in ``folder``."""
    images = read_idx(os.path.join(folder, files[0]), magic=IDX_IMAGES_MAGIC)
    labels = read_idx(os.path.join(folder, files[1]), magic=IDX_LABELS_MAGIC)
    return images[..., None], labels


# --------------------------------------------------------------------------
# CIFAR's python batches, through an unpickler that builds only their content.

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


def read_cifar_split(folder, files, label_key):
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
