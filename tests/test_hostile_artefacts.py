"""An exported artefact handed to ``keras-gresnet predict`` is data, never a
program (issue 50): a SavedModel or LiteRT file whose graph reads, writes or
lists files is refused before its runtime sees it, with nothing written; a
malformed or hostile artefact of every kind is one line and exit 2, never a
traceback; a contract is read bounded. TensorFlow writes the crafted files."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_gresnet import artefact_checks, cli, export

tf = pytest.importorskip("tensorflow")  # the crafted SavedModel / TFLite files need it
pytestmark = pytest.mark.tensorflow_only


@pytest.fixture
def png(tmp_path):
    from PIL import Image

    path = tmp_path / "p.png"
    Image.fromarray(np.full((28, 28), 128, np.uint8)).save(path)
    return path


def _one_line_refusal(capsys, argv, *needles):
    """``keras-gresnet ARGV`` exits 2 with one line on stderr that holds
    every needle, and no traceback."""
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    for needle in needles:
        assert needle in captured.err, captured.err
    return captured.err


def _contract(path):
    """A valid contract for the crafted artefacts (raw 0-255, 28x28x1)."""
    return {"pixels": "raw 0-255", "input_layout": "NHWC", "input_shape": [28, 28, 1],
            "class_names": [str(i) for i in range(10)]}


class FileOps(tf.Module):
    """A serving function that reads /etc/hostname, lists /etc and writes
    what it read beside ``target``: the probe's crafted SavedModel."""

    def __init__(self, target):
        super().__init__()
        self.target = str(target)

    @tf.function(input_signature=[tf.TensorSpec([None, 28, 28, 1], tf.float32)])
    def serve(self, x):
        secret = tf.io.read_file("/etc/hostname")
        tf.io.write_file(self.target, secret)
        listed = tf.io.matching_files("/etc/*")
        return tf.nn.softmax(tf.zeros([tf.shape(x)[0], 10]) +
                             0.0 * tf.cast(tf.size(listed), tf.float32))


def _saved_model_with_file_ops(folder, target):
    module = FileOps(target)
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    (folder / "assets.extra").mkdir(exist_ok=True)
    (folder / "assets.extra" / export.CONTRACT_FILE).write_text(json.dumps(_contract(folder)))
    return folder


class Dense(tf.Module):
    """A SavedModel of inference ops alone (Reshape, MatMul, Softmax)."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.zeros([784, 10]))

    @tf.function(input_signature=[tf.TensorSpec([None, 28, 28, 1], tf.float32)])
    def serve(self, x):
        return tf.nn.softmax(tf.matmul(tf.reshape(x, [-1, 784]), self.w))


def _saved_model_dense(folder):
    module = Dense()
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    (folder / "assets.extra").mkdir(exist_ok=True)
    (folder / "assets.extra" / export.CONTRACT_FILE).write_text(json.dumps(_contract(folder)))
    return folder


def _files_under(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*"))


def test_a_saved_model_with_file_operations_is_refused_with_nothing_written(
        tmp_path, png, capsys):
    """The probe's critical case: predict used to run the graph (read
    /etc/hostname, list /etc, write two files, exit 0)."""
    target = tmp_path / "written-by-the-artefact"
    folder = _saved_model_with_file_ops(tmp_path / "evil", target)
    # the module itself does what the probe said when TensorFlow runs it
    tf.saved_model.load(str(folder)).serve(tf.zeros([1, 28, 28, 1]))
    assert target.read_bytes() == Path("/etc/hostname").read_bytes()
    target.unlink()
    before = _files_under(tmp_path)
    error = _one_line_refusal(capsys, ["predict", str(folder), str(png)], "ReadFile",
                              "WriteFile", "not run")
    assert _files_under(tmp_path) == before and not target.exists()
    with pytest.raises(export.ForeignOp, match="MatchingFiles"):
        export.load_exported(folder)


def _flex_tflite(path, target):
    """A LiteRT file whose graph writes a file through a Flex (TensorFlow)
    op: the converter's SELECT_TF_OPS."""

    class Writer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 28, 28, 1], tf.float32)])
        def serve(self, x):
            tf.io.write_file(str(target), tf.strings.as_string(tf.reduce_sum(x)))
            return tf.nn.softmax(tf.zeros([1, 10]) + tf.reduce_sum(x) * 0.0)

    module = Writer()
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.serve.get_concrete_function()], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                           tf.lite.OpsSet.SELECT_TF_OPS]
    path.write_bytes(converter.convert())
    export._write_contract(path, "litert", _contract(path))
    return path


@pytest.mark.integration  # the LiteRT converter takes seconds
def test_a_litert_file_with_a_flex_write_file_is_refused_with_nothing_written(
        tmp_path, png, capsys):
    target = tmp_path / "written-by-the-artefact"
    path = _flex_tflite(tmp_path / "evil.tflite", target)
    assert "FlexWriteFile" in artefact_checks._litert_op_names(path.read_bytes()).__repr__()
    before = _files_under(tmp_path)
    _one_line_refusal(capsys, ["predict", str(path), str(png)], "CUSTOM:Flex", "not run")
    assert _files_under(tmp_path) == before and not target.exists()


def _onnx_model(nodes, inputs, outputs, initializers=()):
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in _contract(None).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value if isinstance(value, str) else json.dumps(value)
    return onnx, model


def _onnx_flatten(path):
    """A valid ONNX artefact of allowed ops: Reshape to (batch, 784), MatMul
    to 10 classes, Softmax."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 28, 28, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 10])
    shape = numpy_helper.from_array(np.array([-1, 784], np.int64), "shape")
    weights = numpy_helper.from_array(np.zeros((784, 10), np.float32), "w")
    onnx, model = _onnx_model(
        [helper.make_node("Reshape", ["x", "shape"], ["flat"]),
         helper.make_node("MatMul", ["flat", "w"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["y"])], [x], [y], [shape, weights])
    onnx.save(model, str(path))
    return path


def _malformed(kind, tmp_path):
    """The probe's malformed artefacts, one per kind: ``(path, needle)``."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    if kind == "garbage onnx":
        path = tmp_path / "g.onnx"
        path.write_bytes(os.urandom(4096))
        return path, "g.onnx"
    if kind == "truncated onnx":
        path = _onnx_flatten(tmp_path / "t.onnx")
        path.write_bytes(path.read_bytes()[:-1500])
        return path, "t.onnx"
    if kind == "contract not json":
        path = _onnx_flatten(tmp_path / "c.onnx")
        model = onnx.load(str(path))
        model.metadata_props[3].value = "[not json"
        onnx.save(model, str(path))
        return path, "not valid JSON"
    if kind == "contract not an object":
        folder = _saved_model_dense(tmp_path / "sm")
        (folder / "assets.extra" / export.CONTRACT_FILE).write_text("[1, 2, 3]")
        return folder, "JSON object"
    if kind == "contract of 3 GB":
        folder = _saved_model_dense(tmp_path / "big")
        with open(folder / "assets.extra" / export.CONTRACT_FILE, "r+b") as f:
            f.truncate(3 * 2**30)  # sparse: 3 GB declared, nothing on the disk
        return folder, "not read"
    if kind == "garbage saved model":
        folder = tmp_path / "garbage"
        folder.mkdir()
        (folder / "saved_model.pb").write_bytes(b"\x0a\xff\xff\xff\xff" + os.urandom(500))
        return folder, "not a SavedModel"
    if kind == "onnx external data outside its folder":
        (tmp_path / "ext").mkdir()
        path = _onnx_flatten(tmp_path / "ext" / "e.onnx")
        model = onnx.load(str(path))
        weights = model.graph.initializer[1]
        weights.ClearField("raw_data")
        weights.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "../../../etc/hostname"), ("offset", "0"),
                           ("length", "31360")):
            entry = weights.external_data.add()
            entry.key, entry.value = key, value
        onnx.save(model, str(path))
        return path, "external data"
    if kind in ("onnx allocation bomb", "onnx allocation bomb of an allowed op"):
        # 4 TB asked for: by an op no export holds (Expand: refused by name),
        # or by one PyTorch's exports hold (ConstantOfShape: the runtime fails)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 28, 28, 1])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        shape = numpy_helper.from_array(np.array([2**40], np.int64), "shape")
        one = numpy_helper.from_array(np.ones(1, np.float32), "one")
        node = helper.make_node("Expand", ["one", "shape"], ["y"]) if kind.endswith("bomb") \
            else helper.make_node("ConstantOfShape", ["shape"], ["y"])
        _, model = _onnx_model([node], [x], [y], [shape, one])
        path = tmp_path / "bomb.onnx"
        onnx.save(model, str(path))
        return path, "Expand" if kind.endswith("bomb") else "bomb.onnx"
    if kind == "onnx allocation by allowed ops":  # a Pad of 2**31 rows: the runtime refuses
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 28, 28, 1])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        pads = numpy_helper.from_array(np.array([0, 2**31, 0, 0, 0, 2**31, 0, 0], np.int64),
                                       "pads")
        _, model = _onnx_model([helper.make_node("Pad", ["x", "pads"], ["y"])], [x], [y],
                               [pads])
        path = tmp_path / "pad.onnx"
        onnx.save(model, str(path))
        return path, "pad.onnx"
    if kind == "tflite custom op":
        path = tmp_path / "custom.tflite"
        path.write_bytes(_custom_op_tflite())
        return path, "CUSTOM:MyPythonOp"
    if kind == "truncated tflite":
        path = tmp_path / "cut.tflite"
        path.write_bytes(b"\x1c\x00\x00\x00TFL3\x00\x00")
        return path, "cut.tflite"
    raise AssertionError(kind)


def _custom_op_tflite():
    """A LiteRT model whose operator list names a custom op."""
    import flatbuffers

    b = flatbuffers.Builder(0)
    name = b.CreateString("MyPythonOp")
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(1, name, 0)
    b.PrependInt8Slot(0, export.LITERT_CUSTOM, 0)
    b.PrependInt32Slot(3, export.LITERT_CUSTOM, 0)
    code = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(code)
    codes = b.EndVector()
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(1, codes, 0)
    b.Finish(b.EndObject(), file_identifier=b"TFL3")
    return bytes(b.Output())


MALFORMED = ["garbage onnx", "truncated onnx", "contract not json", "contract not an object",
             "contract of 3 GB", "garbage saved model", "onnx external data outside its folder",
             "onnx allocation bomb", "onnx allocation bomb of an allowed op",
             "onnx allocation by allowed ops", "tflite custom op",
             "truncated tflite"]


@pytest.mark.parametrize("kind", MALFORMED)
def test_a_malformed_artefact_is_one_line_and_exit_2(kind, tmp_path, png, capsys):
    path, needle = _malformed(kind, tmp_path)
    _one_line_refusal(capsys, ["predict", str(path), str(png)], needle)


@pytest.mark.parametrize("kind", ["onnx", "saved model"])
def test_the_crafted_files_unharmed_run_so_the_refusals_above_are_their_harm(
        kind, tmp_path, png, capsys):
    """The same hand-made ONNX file and SavedModel of inference ops, unharmed,
    predict (exit 0): the refusals above are the files' faults, not the
    craft's."""
    pytest.importorskip("onnxruntime")
    path = _onnx_flatten(tmp_path / "ok.onnx") if kind == "onnx" else \
        _saved_model_dense(tmp_path / "ok")
    assert cli.main(["predict", str(path), str(png)]) == 0
    assert "10.0%" in capsys.readouterr().out  # zero weights: ten equal classes


def test_a_class_name_from_a_contract_is_escaped(tmp_path, png, capsys):
    """Names from a contract never reach the terminal raw: no escape
    sequence, no newline forging a second line."""
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    path = _onnx_flatten(tmp_path / "names.onnx")
    model = onnx.load(str(path))
    names = [f"c{i}" for i in range(10)]
    names[0] = "\x1b[31mred\nforged: line"
    next(e for e in model.metadata_props if e.key == "class_names").value = json.dumps(names)
    onnx.save(model, str(path))
    assert cli.main(["predict", str(path), str(png), "--top", "10"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and out.count("\n") == 1 and "\\x1b[31mred\\nforged" in out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
