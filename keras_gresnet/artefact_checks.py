"""Every op of a user's artefact checked against the ops this package's own
exports use, before any runtime sees the file: the allow-lists
(:data:`SAVED_MODEL_OPS`, :data:`LITERT_OPS`, :data:`ONNX_OPS`), each
format's op list read as data (a SavedModel's graph and function library,
a LiteRT file's operator list through a flatbuffer reader of its own, an
ONNX graph with its subgraphs and functions), and :func:`check_artefact`,
which refuses anything else in one line naming the op (:class:`ForeignOp`).
"""

import re
from pathlib import Path

from keras_gresnet.artefacts import (
    ArtefactRefused, _guess_format, _onnx_proto, _require, _shown, read_contract,
)
from keras_gresnet.files import read_bounded
from keras_gresnet.limits import MAX_LITERT_BYTES, MAX_SAVED_MODEL_PB_BYTES

# -- an artefact is data, never a program ------------------------------------
# Before a runtime is handed an artefact, every op in it is checked against the
# ops this package's own exports use (collected from every zoo model kind and
# every backend that writes the format: scripts/checks/artefact_ops.py rewrites
# these lists, tests/test_export.py checks they are current). Anything else
# (file, process, network or Python ops, TFLite's Flex and custom ops, ONNX ops
# of other domains) is refused in one line naming the op: docs/export.md argues
# it.

# The ops of every artefact keras-gresnet export writes (every zoo model kind:
# MLPs, CIFAR, wide and ImageNet nets, gates, every shortcut, pooling, with
# and without the raw-pixels layer; NHWC and NCHW; each backend that writes
# the format), as `python scripts/checks/artefact_ops.py` lists them;
# tests/test_export.py checks every fresh export against them.
SAVED_MODEL_OPS = frozenset({
    # inference
    "AddV2", "BiasAdd", "Conv2D", "FusedBatchNormV3", "MatMul", "Max", "MaxPool", "Mean",
    "Mul", "Pad", "Relu", "Reshape", "Rsqrt", "Softmax", "StridedSlice", "Sub",
    "Pack", "Shape",  # a flat input's reshape of a dynamic batch
    "Squeeze",  # Keras' BiasAdd of a conv's bias (a folded BatchNorm's)
    "Cast",  # a mixed-precision model's float32 <-> bfloat16
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



def checked_contract(path, format=None):
    """The contract the artefact at ``path`` carries
    (:func:`keras_gresnet.artefacts.read_contract`), read once every op in
    it has passed :func:`check_artefact`: an artefact a door reads or runs
    is checked first, whatever it claims."""
    check_artefact(path, format)
    return read_contract(path)
