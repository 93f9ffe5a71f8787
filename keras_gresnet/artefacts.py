"""What an exported artefact is, read as data with nothing in it run: its
format (:data:`FORMATS`, :func:`is_artefact`), the package each format's
toolchain needs (:class:`ToolchainNotInstalled`), the contract it carries
(:func:`read_contract`: a SavedModel's JSON file, ONNX's ``metadata_props``,
a LiteRT file's metadata through a flatbuffer reader of its own), and
:class:`ArtefactRefused`, the one line refusing a file this package will not
read or run. :mod:`keras_gresnet.artefact_checks` checks an artefact's ops,
:mod:`keras_gresnet.artefact_runtime` runs it, :mod:`keras_gresnet.export`
writes it.
"""

import importlib.util
import os
from pathlib import Path

from keras_gresnet._text import printable, shortened
from keras_gresnet.files import read_bounded
from keras_gresnet.limits import MAX_CONTRACT_BYTES, MAX_LITERT_BYTES, MAX_ONNX_BYTES

FORMATS = ("tf_saved_model", "onnx", "litert")
# What each format is: a folder, or a file with this suffix.
SUFFIXES = {"tf_saved_model": "", "onnx": ".onnx", "litert": ".tflite"}
# The compute dtypes each format's ops take (None: any Keras computes in):
# ONNX's Conv, Gemm and BatchNormalization have no bfloat16 (onnxruntime
# refuses the graph: INVALID_GRAPH), LiteRT's builtin ops no bfloat16 or
# float16 (the converter falls back to TensorFlow's Flex ops, which no
# export of this package holds). A model computing in another dtype is
# exported computing in float32 (:func:`keras_gresnet.export.export`).
COMPUTE_DTYPES = {"tf_saved_model": None, "onnx": ("float16", "float32", "float64"),
                  "litert": ("float32",)}


class ToolchainNotInstalled(ImportError, ValueError):
    """A format's converter or runtime is not installed; the message names
    the pip package. A ``ValueError`` too, so the command line prints it as
    one line."""


def _installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _require(modules, what):
    """The first ``(module, package)`` of ``modules`` that is installed;
    :class:`ToolchainNotInstalled` naming every package when none is."""
    for module, package in modules:
        if _installed(module):
            return module
    packages = " or ".join(f"`pip install {package}`" for _, package in modules)
    raise ToolchainNotInstalled(f"{what} needs {packages}")


def _accepted():
    return ", ".join(map(repr, FORMATS))


class ArtefactRefused(ValueError):
    """An artefact this package will not run or read (one line naming it)."""


def _shown(path):
    """A path from the user, as an error line shows it (escaped, shortened)."""
    return shortened(printable(path), 300)


def is_artefact(source):
    """Whether ``source`` is a path to an artefact
    :func:`keras_gresnet.artefact_runtime.load_exported` runs: a ``.onnx``
    or ``.tflite`` file, or a SavedModel folder (with its ``saved_model.pb``;
    a preset or run folder has none)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    path = Path(source)
    if path.is_dir():
        return (path / "saved_model.pb").is_file()
    return path.is_file() and path.name.endswith(tuple(filter(None, SUFFIXES.values())))


def _guess_format(path):
    if path.is_dir():
        return "tf_saved_model"
    for format, suffix in SUFFIXES.items():
        if suffix and path.name.endswith(suffix):
            return format
    raise ValueError(f"cannot tell the format of {str(path)!r}; pass format, one of "
                     f"{_accepted()}")


CONTRACT_FILE = "keras_gresnet.json"  # a SavedModel's assets.extra/ holds it
LITERT_METADATA = "keras_gresnet_contract"  # a LiteRT model's metadata entry


def read_contract(path):
    """The contract an artefact carries
    (:func:`keras_gresnet.export.artefact_contract`), as a dict; ``{}`` for
    an artefact exported without one. Read as data, each part bounded
    (:data:`keras_gresnet.limits.MAX_CONTRACT_BYTES`) and its fields' types
    checked; one ``ValueError`` naming the artefact otherwise."""
    import struct

    from keras_gresnet.files import read_json

    path = Path(path)
    format = _guess_format(path)
    if format == "tf_saved_model":
        file = path / "assets.extra" / CONTRACT_FILE
        if not (file.exists() or file.is_symlink()):
            return {}
        return _checked_contract(path, read_json(file, dict, MAX_CONTRACT_BYTES))
    if format == "onnx":
        _require((("onnx", "onnx"),), "reading an ONNX artefact's contract")
        contract = {}
        for entry in _onnx_proto(path).metadata_props:
            value = entry.value  # lists and objects were written as JSON
            if len(value) > MAX_CONTRACT_BYTES:
                raise ArtefactRefused(f"{_shown(path)}: its metadata {entry.key[:50]!r} holds "
                                      f"{len(value):,} characters, more than a contract's "
                                      f"{MAX_CONTRACT_BYTES:,}; not read")
            contract[entry.key] = _json_value(path, value) if value[:1] in ("[", "{") \
                else value
        return _checked_contract(path, contract)
    if importlib.util.find_spec("flatbuffers") is None:  # TensorFlow and ai-edge-litert bring it
        raise ValueError(f"reading the contract of {path} (a LiteRT file) needs the flatbuffers "
                         f"package: pip install flatbuffers")
    try:
        data = _litert_metadata(read_bounded(path, MAX_LITERT_BYTES), LITERT_METADATA)
    except (IndexError, struct.error, UnicodeDecodeError, TypeError) as error:
        raise ArtefactRefused(f"{_shown(path)} is not a LiteRT model this package can read the "
                              f"contract of ({type(error).__name__}: {error})") from None
    if data is None:
        return {}
    if len(data) > MAX_CONTRACT_BYTES:
        raise ArtefactRefused(f"{_shown(path)}: its contract holds {len(data):,} bytes, more "
                              f"than {MAX_CONTRACT_BYTES:,}; not read")
    return _checked_contract(path, _json_value(path, data))


def _json_value(path, text):
    import json

    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        raise ArtefactRefused(f"{_shown(path)}: its contract is not valid JSON "
                              f"({type(error).__name__})") from None


def _no_constant(name):
    raise ValueError(f"{name} is not a number a contract holds")


# The input dtypes a contract may state (``input_dtype``); an artefact whose
# contract states none takes float32, as every export before the field did.
INPUT_DTYPES = ("float32", "float16", "float64", "uint8")
DEFAULT_INPUT_DTYPE = "float32"

# The contract's fields and the types a reader relies on.
CONTRACT_TYPES = {
    "pixels": (lambda v: isinstance(v, str), "a string"),
    "input_layout": (lambda v: isinstance(v, str), "a string"),
    "input_shape": (lambda v: isinstance(v, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and 0 < d <= 2**16
        for d in v if d is not None), "a list of sizes (null: any)"),
    "class_names": (lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v),
                    "a list of strings"),
    "input_dtype": (lambda v: v in INPUT_DTYPES, "one of " + ", ".join(INPUT_DTYPES)),
    "dtype_policy": (lambda v: isinstance(v, str), "a string"),
    "preprocessing": (lambda v: isinstance(v, dict) and isinstance(v.get("method"), str) and all(
        v.get(key) is None or (isinstance(v[key], list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v[key]))
        for key in ("mean", "std")), "an object with a method and lists of numbers"),
    **{key: (lambda v: isinstance(v, str), "a string") for key in ("source", "dataset", "license")},
}


def _checked_contract(path, contract):
    """``contract`` if it is an object whose known fields have the types
    :data:`CONTRACT_TYPES` gives; one ``ValueError`` naming ``path`` otherwise."""
    if not isinstance(contract, dict):
        raise ArtefactRefused(f"{_shown(path)}: its contract must be a JSON object, got "
                              f"{type(contract).__name__}")
    for key, (valid, accepted) in CONTRACT_TYPES.items():
        if key in contract and contract[key] is not None and not valid(contract[key]):
            raise ArtefactRefused(f"{_shown(path)}: its contract's {key} is not {accepted}")
    return contract


def _litert_metadata(buffer, name):
    """The bytes of a LiteRT model's metadata entry ``name`` (``None``
    without one), read with the ``flatbuffers`` runtime alone (no
    TensorFlow): the schema's root ``Model`` table, its ``metadata`` vector
    (field 6) of ``{name, buffer}`` tables and its ``buffers`` vector (field
    4) of tables whose ``data`` (field 0) holds the bytes."""
    from flatbuffers import number_types, table
    from flatbuffers.encode import Get

    def field(tab, index):  # a field's offset in its table, 0 when absent
        return tab.Offset(4 + 2 * index)

    def tables(tab, index):
        offset = field(tab, index)
        if not offset:
            return []
        start = tab.Vector(offset)
        return [table.Table(tab.Bytes, tab.Indirect(start + 4 * i))
                for i in range(tab.VectorLen(offset))]

    buffer = bytearray(buffer)
    model = table.Table(buffer, Get(number_types.UOffsetTFlags.packer_type, buffer, 0))
    for entry in tables(model, 6):
        offset = field(entry, 0)
        if offset and entry.String(offset + entry.Pos) == name.encode():
            index = entry.Get(number_types.Uint32Flags, field(entry, 1) + entry.Pos) \
                if field(entry, 1) else 0
            data = tables(model, 4)[index]
            offset = field(data, 0)
            if not offset:
                return None
            start = data.Vector(offset)
            return bytes(buffer[start:start + data.VectorLen(offset)])
    return None


def _onnx_proto(path):
    """The ONNX file ``path`` parsed as data (bounded; its external data never
    read)."""
    from google.protobuf.message import DecodeError

    import onnx

    data = read_bounded(path, MAX_ONNX_BYTES)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as error:
        raise ValueError(f"{_shown(path)} is not an ONNX model ({type(error).__name__}); "
                         f"not run") from None
    if not proto.HasField("graph"):
        raise ValueError(f"{_shown(path)} is not an ONNX model (it holds no graph); not run")
    return proto


def contract_picture(path, contract):
    """``(layout, (height, width, channels))``: the picture the artefact at
    ``path`` takes by its ``contract`` (``"NHWC"``, ``"NCHW"``, or
    ``"flat"``: a square grey picture's pixels in a row), by the folders'
    rule (:func:`keras_gresnet.data.folders.checked_image_shape`); one
    ``ValueError`` naming the artefact where the contract gives no picture
    input."""
    from keras_gresnet.data.folders import checked_image_shape

    layout, shape = contract.get("input_layout"), tuple(contract.get("input_shape") or ())
    try:
        if layout == "NCHW" and len(shape) == 3:
            return layout, checked_image_shape((shape[1], shape[2], shape[0]))
        if layout in ("NHWC", "flat"):
            return layout, checked_image_shape(shape)
    except ValueError:
        pass
    raise ArtefactRefused(f"{_shown(path)}: its contract gives no picture input (input_layout "
                          f"{printable(str(layout))[:20]!r}, input_shape {list(shape)})")
