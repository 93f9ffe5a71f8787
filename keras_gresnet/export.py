"""Export a model for inference without Keras: a TensorFlow SavedModel, an
ONNX file or a LiteRT (TFLite) flatbuffer, through Keras' ``model.export``,
and :func:`load_exported` to run an artefact with its own runtime::

    from keras_gresnet import export
    export.export("gresnet_mlp20_mnist", "gresnet20.onnx", format="onnx")
    predict = export.load_exported("gresnet20.onnx")    # onnxruntime
    probabilities = predict(images)                      # numpy in, numpy out

The artefact is written under a temporary name beside ``out`` and renamed
into place: it is complete or absent, and an existing ``out`` is refused.
"""

import contextlib
import errno
import importlib.util
import os
import re
import shutil
from pathlib import Path

import numpy as np

from keras_gresnet._cpu import cores
from keras_gresnet._text import printable, shortened
from keras_gresnet.files import on_sigterm_raise, pid_alive, read_bounded
from keras_gresnet.limits import (
    MAX_CONTRACT_BYTES, MAX_LITERT_BYTES, MAX_ONNX_BYTES, MAX_SAVED_MODEL_PB_BYTES,
)

FORMATS = ("tf_saved_model", "onnx", "litert")
# What each format is: a folder, or a file with this suffix.
SUFFIXES = {"tf_saved_model": "", "onnx": ".onnx", "litert": ".tflite"}
# The runtime that loads each format back: alternatives, first found wins.
RUNTIMES = {
    "tf_saved_model": (("tensorflow", "tensorflow"),),
    "onnx": (("onnxruntime", "onnxruntime"),),
    "litert": (("ai_edge_litert", "ai-edge-litert"), ("tensorflow", "tensorflow")),
}


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


def check_format(format, backend=None, argument="format"):
    """``format`` must be one of :data:`FORMATS` and exportable on
    ``backend`` (default: Keras' backend), its converter installed;
    ``argument`` is the name the error gives it."""
    import keras

    if format not in FORMATS:
        raise ValueError(f"Unknown {argument} {format!r}; accepted: {_accepted()}")
    from keras_gresnet.training.backends import exports  # each backend's toolchains

    backend = backend or keras.backend.backend()
    backends = exports()[format]
    if backend not in backends:
        raise ValueError(
            f"{argument} {format!r} exports on the {' or '.join(backends)} backend only, not "
            f"{backend}: run with KERAS_BACKEND={next(iter(backends))}")
    for module, package in backends[backend]:
        _require(((module, package),), f"{argument} {format!r} on the {backend} backend")
    return format


def check_out(out, format, argument="out"):
    """``out`` must not exist and must fit ``format`` (a folder, or a file
    with the format's suffix); returns it as a Path."""
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise ValueError(f"{argument} {str(out)!r} exists; an export is never written over "
                         f"a file: pick another {argument}")
    suffix = SUFFIXES[format]
    if suffix and not out.name.endswith(suffix):
        raise ValueError(f"{argument} must end in {suffix} for format {format!r}, got "
                         f"{str(out)!r}")
    if not suffix and out.suffix in (".onnx", ".tflite", ".keras", ".h5"):
        raise ValueError(f"{argument} is the SavedModel's folder for format {format!r}, got "
                         f"the file name {str(out)!r}")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{argument} {str(out)!r}: {parent} is not a folder")
    return out


@contextlib.contextmanager
def _created_parents(path):
    """Create ``path``'s missing parent folders; on failure remove those
    that were created (and are still empty)."""
    missing = [p for p in reversed(path.parents) if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for folder in reversed(missing):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _move_into_place(source, out):
    """Rename ``source`` to ``out``, never over something that appeared at
    ``out`` meanwhile."""
    if out.exists() or out.is_symlink():
        raise ValueError(f"out {str(out)!r} appeared during the export; it is left as it is")
    if source.is_dir():
        os.rename(source, out)
        return
    try:
        os.link(source, out)  # fails if out exists: no overwrite, even in a race
    except FileExistsError:
        raise ValueError(f"out {str(out)!r} appeared during the export; it is left as "
                         f"it is") from None
    except OSError:  # a file system without hard links
        os.replace(source, out)
    else:
        source.unlink()


def export(model, out, format="tf_saved_model", *, include_preprocessing=True, **kwargs):
    """Export ``model`` for inference to ``out``; returns ``out`` as a Path.

    Args:
        model: a ``keras.Model``, a published weights name, a ``.keras`` file,
            a preset folder or a training run folder (files load with
            ``safe_mode=True``).
        out: the artefact, which must not exist: a folder for
            ``"tf_saved_model"``, a ``.onnx`` or ``.tflite`` file.
        format: one of :data:`FORMATS`; :func:`keras_gresnet.training.backends.exports`
            lists the backends and packages each needs.
        include_preprocessing: the artefact takes raw 0-255 pixels, the
            model's recorded normalisation inside
            (:func:`keras_gresnet.zoo.raw_pixels_model`; default); ``False``:
            the model as it is, taking the normalised pixels its card
            records. Either way the artefact carries its contract
            (:func:`read_contract`): class names, input layout and size,
            which pixels it takes, the preprocessing, source and licence, in
            ONNX's ``metadata_props`` and in a SavedModel's
            ``assets.extra/keras_gresnet.json``.
        **kwargs: passed to ``model.export`` (``input_signature``,
            ``opset_version``, LiteRT converter options...).
    """
    import keras

    from keras_gresnet import zoo

    check_format(format)
    out = check_out(out, format)
    if not isinstance(include_preprocessing, bool):
        raise ValueError(f"include_preprocessing must be True or False, got "
                         f"{include_preprocessing!r}")
    resolved = zoo.resolve(model)
    model = zoo.raw_pixels_model(resolved) if include_preprocessing else resolved.model
    contract = artefact_contract(resolved, model)
    kwargs.setdefault("verbose", False)
    if "input_signature" not in kwargs and len(getattr(model, "inputs", None) or ()) == 1:
        # The model's own input, given: ONNX on torch refuses a model loaded
        # from a file and never called ("The model provided has never called").
        (x,) = model.inputs
        kwargs["input_signature"] = [keras.InputSpec(shape=x.shape, dtype=x.dtype)]
    with _created_parents(out), on_sigterm_raise(f"the export to {out}") as sigterm:
        _remove_stale_exports(out)
        tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            artefact = tmp / out.name  # out's own name, so the converter sees its suffix
            model.export(str(artefact), format=format, **kwargs)
            if not artefact.exists():
                raise RuntimeError(f"model.export(format={format!r}) wrote no {artefact}")
            _write_contract(artefact, format, contract)
            sigterm.check()  # a SIGTERM whose exception a callback swallowed: keep nothing
            _move_into_place(artefact, out)
        except Exception as error:
            disk = _disk_error(error, tmp, out)
            if disk is None:
                raise
            raise disk from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _disk_error(error, tmp, out):
    """The ``OSError`` naming ``out`` that a full disk (or a file-size limit)
    met while the artefact was written in ``tmp`` should be, or None for any
    other error: the converters report it without the file (ONNX, LiteRT) or
    as TensorFlow's ``ResourceExhaustedError`` (a SavedModel's variables)."""
    codes = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
    if isinstance(error, OSError) and error.errno in codes:
        inside = error.filename is None or str(error.filename).startswith(str(tmp))
        return OSError(error.errno, error.strerror, str(out)) if inside else None
    if type(error).__name__ == "ResourceExhaustedError" and \
            "No space left on device" in str(error) and str(tmp) in str(error):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out))
    return None


def artefact_contract(resolved, model):
    """What an artefact of ``model`` (exported from ``resolved``) takes and
    gives, as plain JSON-ready values: its pixels (``"raw 0-255"`` or
    ``"normalised"``), input layout and shape, the preprocessing, class
    names, source, dataset, licence and this package's version."""
    import keras

    from keras_gresnet._version import __version__
    from keras_gresnet.layers import takes_raw_pixels

    shape = list(model.input_shape[1:])
    layout = "flat" if len(shape) == 1 else (
        "NCHW" if keras.config.image_data_format() == "channels_first" else "NHWC")
    card = resolved.card
    return {key: value for key, value in dict(
        pixels="raw 0-255" if takes_raw_pixels(model) else "normalised",
        input_layout=layout, input_shape=shape,
        preprocessing=card.get("preprocessing"), class_names=card.get("class_names"),
        source=card.get("source") or resolved.source, dataset=card.get("dataset"),
        license=card.get("license"), keras_gresnet_version=__version__,
    ).items() if value is not None}


CONTRACT_FILE = "keras_gresnet.json"  # a SavedModel's assets.extra/ holds it


LITERT_METADATA = "keras_gresnet_contract"  # a LiteRT model's metadata entry


def _write_contract(artefact, format, contract):
    """Put ``contract`` into the artefact: ONNX ``metadata_props`` (each
    value a string; lists and objects as JSON), a SavedModel's
    ``assets.extra/keras_gresnet.json``, a LiteRT model's ``metadata``
    entry :data:`LITERT_METADATA` (the flatbuffer schema's own name -> buffer
    list, where the converter keeps its ``min_runtime_version``: the JSON as
    the buffer's bytes; written with TensorFlow's ``flatbuffer_utils``,
    which the LiteRT converter comes with)."""
    import json

    if format == "litert":
        from tensorflow.lite.python import schema_py_generated as schema
        from tensorflow.lite.tools import flatbuffer_utils

        tflite = flatbuffer_utils.read_model(str(artefact))
        tflite.metadata = [m for m in (tflite.metadata or [])
                           if m.name not in (LITERT_METADATA, LITERT_METADATA.encode())]
        buffer = schema.BufferT()
        buffer.data = list(json.dumps(contract).encode())
        tflite.buffers.append(buffer)
        entry = schema.MetadataT()
        entry.name, entry.buffer = LITERT_METADATA, len(tflite.buffers) - 1
        tflite.metadata.append(entry)
        flatbuffer_utils.write_model(tflite, str(artefact))
        return

    if format == "onnx":
        import onnx

        proto = onnx.load(str(artefact))
        del proto.metadata_props[:]
        for key, value in contract.items():
            entry = proto.metadata_props.add()
            entry.key = key
            entry.value = value if isinstance(value, str) else json.dumps(value)
        onnx.save(proto, str(artefact))
    elif format == "tf_saved_model":
        extra = artefact / "assets.extra"
        extra.mkdir(exist_ok=True)
        (extra / CONTRACT_FILE).write_text(json.dumps(contract, indent=2) + "\n")


def read_contract(path):
    """The contract an artefact carries (:func:`artefact_contract`), as a
    dict; ``{}`` for an artefact exported without one. Read as data, each
    part bounded (:data:`keras_gresnet.limits.MAX_CONTRACT_BYTES`) and its
    fields' types checked; one ``ValueError`` naming the artefact otherwise."""
    import json
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


# The contract's fields and the types a reader relies on.
CONTRACT_TYPES = {
    "pixels": (lambda v: isinstance(v, str), "a string"),
    "input_layout": (lambda v: isinstance(v, str), "a string"),
    "input_shape": (lambda v: isinstance(v, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and 0 < d <= 2**16
        for d in v if d is not None), "a list of sizes (null: any)"),
    "class_names": (lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v),
                    "a list of strings"),
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


def _remove_stale_exports(out):
    """Remove the ``.{out.name}.tmp{pid}`` folders that killed exports to
    ``out`` left (their process gone); a live export's stays."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.tmp(\d+)$")
    if not out.parent.is_dir():
        return
    for path in out.parent.iterdir():
        match = pattern.match(path.name)
        if match and not path.is_symlink() and path.is_dir() and not pid_alive(
                int(match[1])):
            shutil.rmtree(path, ignore_errors=True)


# The ops of every artefact keras-gresnet export writes (every zoo model kind:
# MLPs, CIFAR, wide and ImageNet nets, gates, every shortcut, pooling, with
# and without the raw-pixels layer; NHWC and NCHW; each backend that writes
# the format), as `python scripts/artefact_ops.py` lists them;
# tests/test_export.py checks every fresh export against them.
SAVED_MODEL_OPS = frozenset({
    # inference
    "AddV2", "BiasAdd", "Conv2D", "FusedBatchNormV3", "MatMul", "Max", "MaxPool", "Mean",
    "Mul", "Pad", "Relu", "Reshape", "Rsqrt", "Softmax", "StridedSlice", "Sub",
    "Pack", "Shape",  # a flat input's reshape of a dynamic batch
    # graph plumbing, variables (resources held in memory, no files)
    "AssignVariableOp", "Const", "Identity", "IdentityN", "NoOp", "Placeholder",
    "ReadVariableOp", "StatefulPartitionedCall", "VarHandleOp", "VarIsInitializedOp",
    # the JAX backend's export: the net as one StableHLO module (no file,
    # process or network operation exists in StableHLO; the TensorFlow
    # functions it may call, its function_list, are checked as any other)
    "XlaCallModule",
})
# The checkpoint saver's own functions (the graph's save and restore nodes,
# which loading and inference never run) may also hold these.
SAVED_MODEL_SAVER_OPS = frozenset({
    "DisableCopyOnRead", "MergeV2Checkpoints", "Pack", "RestoreV2", "SaveV2", "Select",
    "ShardedFilename", "StaticRegexFullMatch", "StringJoin",
})
LITERT_CUSTOM = 32  # the schema's BuiltinOperator.CUSTOM: a custom or Flex op
# The LiteRT builtins of the exports, by the schema's BuiltinOperator number.
LITERT_BUILTINS = {
    0: "ADD", 3: "CONV_2D", 9: "FULLY_CONNECTED", 17: "MAX_POOL_2D", 18: "MUL",
    22: "RESHAPE", 25: "SOFTMAX", 34: "PAD", 40: "MEAN", 45: "STRIDED_SLICE",
    82: "REDUCE_MAX",
}
LITERT_OPS = frozenset(LITERT_BUILTINS.values())
ONNX_OPS = frozenset(f"ai.onnx:{op}" for op in (
    "Add", "BatchNormalization", "Conv", "GlobalAveragePool", "GlobalMaxPool", "MatMul",
    "MaxPool", "Mul", "Pad", "Relu", "Reshape", "Slice", "Softmax", "Squeeze", "Transpose",
    # PyTorch's exporter (the torch backend) adds shape arithmetic
    "Cast", "Concat", "Constant", "ConstantOfShape", "Div", "Gather", "Identity", "ReduceMax",
    "ReduceMean", "Shape", "Sub", "Unsqueeze",
))

# -- an artefact is data, never a program ------------------------------------
# Before a runtime is handed an artefact, every op in it is checked against the
# ops this package's own exports use (collected from every zoo model kind and
# every backend that writes the format: scripts/artefact_ops.py rewrites these
# lists, tests/test_export.py checks they are current). Anything else (file,
# process, network or Python ops, TFLite's Flex and custom ops, ONNX ops of
# other domains) is refused in one line naming the op: docs/export.md argues it.


class ArtefactRefused(ValueError):
    """An artefact this package will not run or read (one line naming it)."""


class ForeignOp(ArtefactRefused):
    """An artefact holds an op this package's exports never use."""


# Named first when an artefact is refused: ops that reach outside the process.
_OUTSIDE = re.compile(r"File|Save|Restore|Write|Read|Print|Py|Flex|CUSTOM|Dataset|Rpc|"
                      r"Checkpoint|Matching|Delete|Rename|Directory|Shell|Exec", re.I)


def _refuse_ops(path, found, allowed, what):
    foreign = sorted(set(found) - set(allowed), key=lambda op: (not _OUTSIDE.search(op), op))
    if foreign:
        shown = ", ".join(repr(op)[:80] for op in foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ForeignOp(
            f"{_shown(path)}: its {what} holds {shown}, which no artefact of keras-gresnet "
            f"export holds; an artefact is run only with the inference ops this package's "
            f"exports use (docs/export.md): not run")


def _shown(path):
    """A path from the user, as an error line shows it (escaped, shortened)."""
    return shortened(printable(path), 300)


def _func_names(attr):
    """The function names an op's ``AttrValue`` calls (``f``, branches, a
    loop's body and condition, lists of them)."""
    names = [attr.func.name] if attr.HasField("func") else []
    if attr.HasField("list"):
        names += [f.name for f in attr.list.func]
    return names


def _saved_model_graph(path):
    """``{"run": ops, "saver": ops}`` of the SavedModel folder ``path``,
    read from ``saved_model.pb`` as data (nothing loaded into TensorFlow):
    ``"saver"`` the ops of the functions only the checkpoint saver reaches
    (the graph's save and restore nodes, which TensorFlow's loader never
    runs: it restores variables with its own reader), ``"run"`` every other
    op of the graph and its function library, wherever it may be called
    from (a signature, the object graph, an initializer)."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    data = read_bounded(path / "saved_model.pb", MAX_SAVED_MODEL_PB_BYTES)
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as error:
        raise ValueError(f"{_shown(path)}: saved_model.pb is not a SavedModel "
                         f"({type(error).__name__}); not run") from None
    if not proto.meta_graphs:
        raise ValueError(f"{_shown(path)}: saved_model.pb holds no graph; not run")
    run, saver = set(), set()
    for meta in proto.meta_graphs:
        graph = meta.graph_def
        functions = {f.signature.name: f for f in graph.library.function}

        def calls(nodes):
            out = set()
            for node in nodes:
                if node.op in functions:
                    out.add(node.op)
                for attr in node.attr.values():
                    out.update(_func_names(attr))
            return out

        def closure(roots):
            seen, todo = set(), list(roots)
            while todo:
                name = todo.pop()
                if name in seen or name not in functions:
                    continue
                seen.add(name)
                todo += calls(functions[name].node_def)
            return seen

        saver_nodes = {name.split(":")[0].lstrip("^") for name in (
            meta.saver_def.save_tensor_name, meta.saver_def.restore_op_name) if name}
        saver_graph = [n for n in graph.node if n.name in saver_nodes]
        other_graph = [n for n in graph.node if n.name not in saver_nodes]
        by_saver = closure(calls(saver_graph))
        objects = meta.object_graph_def
        named = set(objects.concrete_functions)
        for node in objects.nodes:
            named.update(node.function.concrete_functions)
            if node.bare_concrete_function.concrete_function_name:
                named.add(node.bare_concrete_function.concrete_function_name)
        by_others = closure(calls(other_graph) | named | (set(functions) - by_saver))
        saver_only = by_saver - by_others
        run.update(n.op for n in other_graph)
        saver.update(n.op for n in saver_graph)
        for name, function in functions.items():
            ops = {n.op for n in function.node_def if n.op not in functions}
            (saver if name in saver_only else run).update(ops)
    return {"run": run, "saver": saver}


def check_saved_model(path):
    """Refuse (:class:`ForeignOp`, one line) a SavedModel folder holding an
    op outside :data:`SAVED_MODEL_OPS` (or, in the saver's own functions,
    :data:`SAVED_MODEL_SAVER_OPS`), before TensorFlow loads it."""
    graph = _saved_model_graph(Path(path))
    _refuse_ops(path, graph["run"], SAVED_MODEL_OPS, "graph")
    _refuse_ops(path, graph["saver"], SAVED_MODEL_OPS | SAVED_MODEL_SAVER_OPS,
                "checkpoint saver")


def _litert_op_names(buffer):
    """The operator names of a LiteRT flatbuffer (the schema's ``Model``
    field 1, ``operator_codes``: a builtin's name, or ``"CUSTOM:<code>"``
    for a custom or Flex op), read with the ``flatbuffers`` runtime alone."""
    from flatbuffers import number_types, table
    from flatbuffers.encode import Get

    buffer = bytearray(buffer)
    model = table.Table(buffer, Get(number_types.UOffsetTFlags.packer_type, buffer, 0))
    offset = model.Offset(4 + 2 * 1)
    names = set()
    if not offset:
        return names
    start = model.Vector(offset)
    for i in range(model.VectorLen(offset)):
        code = table.Table(buffer, model.Indirect(start + 4 * i))
        deprecated = code.Get(number_types.Int8Flags, code.Offset(4) + code.Pos) \
            if code.Offset(4) else 0
        builtin = code.Get(number_types.Int32Flags, code.Offset(10) + code.Pos) \
            if code.Offset(10) else 0
        number = max(deprecated, builtin)  # the schema's rule (deprecated below 127)
        custom = code.String(code.Offset(6) + code.Pos).decode("utf-8", "replace") \
            if code.Offset(6) else ""
        names.add(f"CUSTOM:{custom}" if number == LITERT_CUSTOM or custom
                  else LITERT_BUILTINS.get(number, f"BUILTIN:{number}"))
    return names


def check_litert(path, buffer=None):
    """Refuse (:class:`ForeignOp`, one line) a LiteRT file holding a custom
    or Flex op (TensorFlow ops, file operations among them) or a builtin
    outside :data:`LITERT_OPS`, before an interpreter loads it."""
    import struct

    buffer = read_bounded(path, MAX_LITERT_BYTES) if buffer is None else buffer
    try:
        names = _litert_op_names(buffer)
    except (IndexError, struct.error, UnicodeDecodeError, TypeError) as error:
        raise ValueError(f"{_shown(path)} is not a LiteRT model this package can read "
                         f"({type(error).__name__}); not run") from None
    _refuse_ops(path, names, LITERT_OPS, "operator list")


def _onnx_graphs(graph):
    """``graph`` and every subgraph of its nodes' attributes (If, Loop, Scan)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            subgraphs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
            for sub in subgraphs:
                yield from _onnx_graphs(sub)


def _onnx_op_types(path, proto=None):
    """``"domain:op_type"`` of every node of an ONNX file (its graph, the
    subgraphs and the local functions), the default domain written ``ai.onnx``."""
    if proto is None:
        proto = _onnx_proto(path)
    graphs = list(_onnx_graphs(proto.graph))
    nodes = [n for g in graphs for n in g.node] + [n for f in proto.functions for n in f.node]
    return {f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in nodes}


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


def check_onnx(path, proto=None):
    """Refuse (one line) an ONNX file with an op outside :data:`ONNX_OPS`
    (:class:`ForeignOp`) or with external data (this package writes none:
    onnxruntime would read files beside it, or outside its folder)."""
    _require((("onnx", "onnx"),), "checking an ONNX artefact's ops")
    proto = _onnx_proto(path) if proto is None else proto
    from onnx import TensorProto

    tensors = [t for g in _onnx_graphs(proto.graph) for t in g.initializer] + [
        a.t for g in _onnx_graphs(proto.graph) for n in g.node for a in n.attribute
        if a.HasField("t")]
    if any(t.data_location == TensorProto.EXTERNAL for t in tensors):
        raise ValueError(f"{_shown(path)}: its tensors point to external data files, which "
                         f"no artefact of keras-gresnet export has; not run")
    _refuse_ops(path, _onnx_op_types(path, proto), ONNX_OPS, "graph")


def is_artefact(source):
    """Whether ``source`` is a path to an artefact :func:`load_exported`
    runs: a ``.onnx`` or ``.tflite`` file, or a SavedModel folder (with its
    ``saved_model.pb``; a preset or run folder has none)."""
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


def load_exported(path, format=None):
    """A function ``f(x) -> numpy array``: the artefact at ``path`` run by its
    own runtime (``tf.saved_model.load``, ``onnxruntime``, the LiteRT
    interpreter), on one float32 input batch. ``format``: one of
    :data:`FORMATS`; default from ``path`` (a folder is a SavedModel).

    An artefact is data, never a program: before its runtime sees it, every
    op in it is checked against the ops this package's exports use
    (:func:`check_saved_model`, :func:`check_litert`, :func:`check_onnx`),
    and anything else is refused in one line naming the op. A file the
    runtime cannot load or run (corrupt, truncated, an allocation it
    refuses) is one ``ValueError`` naming it, not the runtime's traceback."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"path {_shown(path)!r} does not exist")
    format = _guess_format(path) if format is None else format
    if format not in FORMATS:
        raise ValueError(f"Unknown format {format!r}; accepted: {_accepted()}")
    runtime = _require(RUNTIMES[format], f"loading format={format!r}")
    check_artefact(path, format)  # every op checked before the runtime sees the file
    with _runtime_errors(path, "loaded"):
        if format == "tf_saved_model":
            function = _saved_model_function(path)
        elif format == "onnx":
            function = _onnx_function(path)
        else:
            function = _litert_function(path, runtime)

    def predict(x):
        with _runtime_errors(path, "run"):
            return function(x)

    return predict


def check_artefact(path, format=None):
    """Refuse (one line) the artefact at ``path`` unless every op in it is one
    this package's exports use: :func:`check_saved_model`,
    :func:`check_onnx` or :func:`check_litert`, by ``format`` (default: from
    the path). Reads the file as data; nothing in it runs."""
    path = Path(path)
    format = _guess_format(path) if format is None else format
    if format == "tf_saved_model" and not (path / "saved_model.pb").is_file():
        raise ArtefactRefused(f"{_shown(path)} is not a SavedModel folder (it holds no "
                              f"saved_model.pb)")
    {"tf_saved_model": check_saved_model, "onnx": check_onnx, "litert": check_litert}[
        format](path)


@contextlib.contextmanager
def _runtime_errors(path, what):
    """An artefact's runtime failing on it (a corrupt or hostile file: TF's
    ``OpError``, onnxruntime's ``Fail``/``InvalidGraph``/``RuntimeException``,
    the LiteRT interpreter's ``RuntimeError``/``ValueError``, an allocation it
    cannot make) becomes one ``ValueError`` naming the artefact."""
    try:
        yield
    except ArtefactRefused:
        raise
    except (ValueError, RuntimeError, MemoryError, OSError, TypeError, KeyError, IndexError,
            AttributeError) as error:
        raise _runtime_error(path, what, error) from None
    except Exception as error:  # TF's OpError and onnxruntime's errors derive from Exception
        if not type(error).__module__.startswith(("tensorflow", "onnxruntime", "google",
                                                  "ai_edge_litert", "flatbuffers")):
            raise
        raise _runtime_error(path, what, error) from None


def _runtime_error(path, what, error):
    first = " ".join((str(error).strip().splitlines() or [""])[0].split()) or \
        type(error).__name__
    first = printable(first)
    return ValueError(f"{_shown(path)}: its runtime could not be {what} on it "
                      f"({type(error).__name__}: {first[:200]})")


def _saved_model_function(path):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))
    serve = getattr(loaded, "serve", None)
    if serve is None:
        signatures = getattr(loaded, "signatures", None) or {}
        serve = signatures.get("serving_default") if hasattr(signatures, "get") else None
    if serve is None:
        raise ArtefactRefused(f"{_shown(path)}: the SavedModel has no serve function nor a "
                              f"serving_default signature")

    def predict(x, _loaded=loaded):  # _loaded: serve holds its variables weakly
        y = serve(tf.constant(np.asarray(x, dtype="float32")))
        if isinstance(y, dict):  # a signature returns {name: tensor}
            (y,) = y.values()
        return np.asarray(y)

    return predict


def _onnx_function(path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: a refused file is our one line
    session = onnxruntime.InferenceSession(str(path), options,
                                           providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    if len(inputs) != 1:
        raise ArtefactRefused(f"{_shown(path)}: an artefact takes one input, this one "
                              f"{len(inputs)}")
    (name,) = inputs

    def predict(x):
        return session.run(None, {name: np.asarray(x, dtype="float32")})[0]

    return predict


def _litert_function(path, runtime):
    import warnings

    if runtime == "ai_edge_litert":
        from ai_edge_litert.interpreter import Interpreter
    else:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    # every core this process may use: the interpreter's default, one
    # thread, ran the conv net at about half the speed (docs/benchmarks.md)
    with warnings.catch_warnings():
        # TensorFlow's interpreter warns, in several lines, that it moves to
        # ai-edge-litert (the RUNTIMES list prefers that package when installed)
        warnings.filterwarnings("ignore", category=UserWarning,
                                message=r"(?s).*tf\.lite\.Interpreter is deprecated")
        interpreter = Interpreter(model_path=str(path), num_threads=cores())
    details = interpreter.get_input_details(), interpreter.get_output_details()
    if len(details[0]) != 1 or len(details[1]) != 1:
        raise ArtefactRefused(f"{_shown(path)}: an artefact takes one input and gives one "
                              f"output")
    (inputs,), (outputs,) = details
    batch = int(inputs["shape_signature"][0])  # -1: any batch size

    def run(x):
        if tuple(interpreter.get_input_details()[0]["shape"]) != x.shape:
            interpreter.resize_tensor_input(inputs["index"], x.shape)
        interpreter.allocate_tensors()
        interpreter.set_tensor(inputs["index"], x)
        interpreter.invoke()
        return np.array(interpreter.get_tensor(outputs["index"]))

    def predict(x):
        x = np.asarray(x, dtype="float32")
        if batch < 0:
            return run(x)
        # A fixed batch (LiteRT from the torch backend): run it in chunks.
        chunks = []
        for start in range(0, len(x), batch):
            part = x[start:start + batch]
            padded = np.concatenate([part, np.zeros((batch - len(part), *x.shape[1:]),
                                                    "float32")])
            chunks.append(run(padded)[:len(part)])
        return np.concatenate(chunks)

    return predict
