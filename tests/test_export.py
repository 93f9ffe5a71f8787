"""Export (SavedModel, ONNX, LiteRT): each artefact, run by its own runtime,
computes the Keras model's function on every backend that writes it; the
others refuse with one line naming the backends that do. The command line,
and never an overwritten or half-written ``out``."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from helpers import randomize_bn
from keras_gresnet import cli, data, export, training, zoo
from keras_gresnet.layers import gate_layers

BACKEND = keras.backend.backend()
ROOT = Path(__file__).resolve().parents[1]
SUFFIX = {"tf_saved_model": "", "onnx": ".onnx", "litert": ".tflite"}
# What writes each format, as measured here (docs/export.md): the backends
# whose model.export writes it, each with the pip packages its converter
# needs; a backend not listed cannot.
CONVERTERS = {
    "tf_saved_model": {"tensorflow": [], "jax": ["tensorflow"]},
    "onnx": {"tensorflow": ["tf2onnx", "onnx"], "jax": ["jax2onnx"], "torch": ["onnx"]},
    "litert": {"tensorflow": [], "torch": ["litert-torch"]},
}


def _installed(package):
    return importlib.util.find_spec(package.replace("-", "_")) is not None


def _gates_matter(model, x, ref):
    """With every k = 1 the output changes: the exported gates are tested."""
    gates = gate_layers(model)
    saved = [float(keras.ops.convert_to_numpy(g.k)) for g in gates]
    for g in gates:
        g.k.assign(1.0)
    plain = keras.ops.convert_to_numpy(model(x, training=False))
    for g, k in zip(gates, saved):
        g.k.assign(k)
    assert np.abs(plain - ref).max() > 1e-3


def gated_cifar():
    """A 1-block-per-stage CIFAR GResNet (16x16 inputs, logits), gates and
    BN statistics away from their initial values."""
    model = zoo.gresnet_cifar(n=1, input_shape=(16, 16, 3), classifier_activation=None)
    randomize_bn(model)
    for i, gate in enumerate(gate_layers(model)):
        gate.k.assign(0.3 + 0.5 * i)
    x = np.random.default_rng(1).normal(size=(3, 16, 16, 3)).astype("float32")
    return model, x


def mlp_on_fashion():
    """GR's GResNet MLP (d = 2, softmax) on 5 real Fashion-MNIST test images."""
    model = zoo.gresnet_mlp(depth=2)
    randomize_bn(model)
    for gate in gate_layers(model):
        gate.k.assign(0.4)
    images, _ = data.load("fashion_mnist", "test")
    x = (images[:5].reshape(5, -1) / 255.0).astype("float32")
    return model, x


NETS = {"gated_cifar": gated_cifar, "mlp_fashion_mnist": mlp_on_fashion}


@pytest.mark.parametrize("net", ["gated_cifar", pytest.param(
    "mlp_fashion_mnist", marks=pytest.mark.integration)])  # real data
@pytest.mark.parametrize("format", export.FORMATS)
def test_artefact_computes_the_keras_model(format, net, tmp_path):
    model, x = NETS[net]()
    ref = keras.ops.convert_to_numpy(model(x, training=False))
    _gates_matter(model, x, ref)
    out = tmp_path / f"model{SUFFIX[format]}"
    backends = CONVERTERS[format]
    if BACKEND not in backends:
        with pytest.raises(ValueError, match=rf"'{format}' exports on the "
                           rf"{' or '.join(backends)} backend only, not {BACKEND}"):
            export.export(model, out, format=format, include_preprocessing=False)
        assert not out.exists() and not list(tmp_path.iterdir())
        return
    missing = [p for p in backends[BACKEND] if not _installed(p)]
    if missing:  # e.g. litert-torch, which pins older typing-extensions
        with pytest.raises(export.ToolchainNotInstalled, match=f"pip install {missing[0]}"):
            export.export(model, out, format=format, include_preprocessing=False)
        assert not out.exists()
        return
    # The network's own function: the artefact takes what the model takes.
    assert export.export(model, out, format=format, include_preprocessing=False) == out
    assert out.is_dir() if format == "tf_saved_model" else out.is_file()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary left
    predict = export.load_exported(out, format)
    # another runtime (TF/ONNX/LiteRT) runs the net: float32 sums in other orders, ~1e-6 each
    np.testing.assert_allclose(predict(x), ref, atol=1e-4)
    # A batch of another size: the artefact's batch is not baked in.
    np.testing.assert_allclose(predict(x[:2]), ref[:2], atol=1e-4)  # as above: runtime round-off


def _refused_here(format, export_call, tmp_path):
    """Where this backend cannot write ``format`` (another backend's, or its
    converter not installed): ``export_call()`` is refused in one line and
    leaves nothing in ``tmp_path``; True then, else False."""
    backends = CONVERTERS[format]
    if BACKEND in backends and all(map(_installed, backends[BACKEND])):
        return False
    with pytest.raises(ValueError, match=f"'{format}'|pip install"):  # refused, one line
        export_call()
    assert not list(tmp_path.iterdir())
    return True


def _working_format():
    for format, backends in CONVERTERS.items():
        if BACKEND in backends and all(map(_installed, backends[BACKEND])):
            return format
    pytest.fail(f"no export format's converter is installed on {BACKEND}")


def test_failure_part_way_leaves_no_out(tmp_path, monkeypatch):
    model, _ = gated_cifar()
    format = _working_format()
    out = tmp_path / "new" / "folder" / f"model{SUFFIX[format]}"
    written = []

    def broken_export(self, filepath, format, **kwargs):
        Path(filepath).write_bytes(b"half an artefact")
        written.append(filepath)
        raise RuntimeError("converter crashed")

    # on the class: export runs a new model, the BatchNorms folded (zoo.inference_model)
    monkeypatch.setattr(type(model), "export", broken_export)
    monkeypatch.setattr(export, "_write_contract", lambda *args: None)  # no real artefact
    with pytest.raises(RuntimeError, match="converter crashed"):  # the model as it is
        export.export(model, out, format=format, include_preprocessing=False)
    assert written and not Path(written[0]).exists()
    assert list(tmp_path.iterdir()) == []  # not out, its temporary, nor its new folders


def test_a_killed_exports_temporary_is_removed_by_the_next_export(tmp_path, monkeypatch):
    model, _ = gated_cifar()
    format = _working_format()
    out = tmp_path / f"model{SUFFIX[format]}"
    dead = tmp_path / f".{out.name}.tmp{2 ** 22 + 4321}"  # no such process
    live = tmp_path / f".{out.name}.tmp1"  # pid 1 runs: its export is not ours to clear
    for folder in (dead, live):
        folder.mkdir()
        (folder / "half").write_bytes(b"half an artefact")

    def quick_export(self, filepath, format, **kwargs):
        Path(filepath).write_bytes(b"artefact")

    monkeypatch.setattr(type(model), "export", quick_export)  # as above: the folded model's
    monkeypatch.setattr(export, "_write_contract", lambda *args: None)  # no real artefact
    export.export(model, out, format=format, include_preprocessing=False)
    assert out.read_bytes() == b"artefact"
    assert not dead.exists() and (live / "half").exists()


@pytest.mark.integration
def test_sigterm_during_an_export_leaves_no_temporary(tmp_path):
    model, _ = gated_cifar()
    model.save(tmp_path / "model.keras")
    format = _working_format()
    out = tmp_path / "new" / f"exported{SUFFIX[format]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "keras_gresnet.cli", "export", str(tmp_path / "model.keras"),
         "--format", format, "--out", str(out)],
        cwd=ROOT, env=_backend_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import signal
    import time

    deadline = time.monotonic() + 240
    while not list((tmp_path / "new").glob(".exported*.tmp*")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert not (tmp_path / "new").exists()  # its temporary and the folder it made: gone


def test_out_must_be_new_and_fit_the_format(tmp_path):
    model, _ = gated_cifar()
    format = _working_format()
    mine = tmp_path / f"mine{SUFFIX[format]}"
    mine.mkdir() if format == "tf_saved_model" else mine.write_bytes(b"my file")
    with pytest.raises(ValueError, match="exists; an export is never written over"):
        export.export(model, mine, format=format)
    assert mine.is_dir() or mine.read_bytes() == b"my file"
    with pytest.raises(ValueError, match=r"out must end in \.onnx"):
        export.check_out(tmp_path / "model.tflite", "onnx")  # on any backend's toolchain
    with pytest.raises(ValueError, match="Unknown format 'pb'; accepted: 'tf_saved_model', "
                       "'onnx', 'litert'"):
        export.export(model, tmp_path / "m", format="pb")
    out = tmp_path / f"m{SUFFIX[format]}"
    with pytest.raises(ValueError, match="bare .weights.h5"):
        model.save_weights(tmp_path / "bare.weights.h5")
        export.export(str(tmp_path / "bare.weights.h5"), out, format=format)
    assert not out.exists() and not (tmp_path / "m").exists()


def test_a_preset_folder_exports_its_model_taking_raw_pixels(tmp_path):
    model = zoo.gresnet_mlp(depth=2)
    randomize_bn(model)
    raw = np.random.default_rng(2).integers(0, 256, size=(4, 784)).astype("float32")
    statistics = {"method": "meanstd", "mean": [0.3], "std": [0.4]}
    preset = zoo.save_preset(model, tmp_path / "preset", builder="gresnet_mlp",
                             builder_kwargs=dict(depth=2),
                             metadata={"preprocessing": statistics, "class_names": list("abcdefghij")})
    format = _working_format()
    out = export.export(str(preset), tmp_path / f"m{SUFFIX[format]}", format=format)
    # raw pixels in, the preset's normalisation inside: (x / 255 - 0.3) / 0.4
    normalised = ((raw / 255 - 0.3) / 0.4).astype("float32")
    # the exported runtime vs Keras: float32 sums in other orders, ~1e-6 relative per layer
    np.testing.assert_allclose(export.load_exported(out)(raw),
                               keras.ops.convert_to_numpy(model(normalised, training=False)),
                               atol=1e-4)
    contract = export.read_contract(out)
    assert contract["pixels"] == "raw 0-255" and contract["preprocessing"] == statistics
    assert contract["class_names"] == list("abcdefghij")
    assert contract["input_shape"] == [784] and contract["input_layout"] == "flat"


def test_cli_bad_format_is_one_line(tmp_path, capsys):
    model, _ = gated_cifar()
    model.save(tmp_path / "model.keras")
    code = cli.main(["export", str(tmp_path / "model.keras"), "--format", "pb",
                     "--out", str(tmp_path / "m.pb")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "--format 'pb'" in err and "'tf_saved_model', 'onnx', 'litert'" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.keras"]


def test_cli_existing_out_is_left_untouched(tmp_path, capsys):
    model, _ = gated_cifar()
    model.save(tmp_path / "model.keras")
    format = _working_format()
    mine = tmp_path / f"mine{SUFFIX[format] or '.pb'}"
    mine.write_bytes(b"my file")
    code = cli.main(["export", str(tmp_path / "model.keras"), "--format", format,
                     "--out", str(mine)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"--out '{mine}' exists" in err
    assert mine.read_bytes() == b"my file"


def _backend_env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND=BACKEND)


@pytest.mark.integration
def test_cli_exports_a_keras_file(tmp_path):
    model, x = gated_cifar()
    model.save(tmp_path / "model.keras")
    format = _working_format()
    out = tmp_path / f"exported{SUFFIX[format]}"
    done = subprocess.run(
        [sys.executable, "-m", "keras_gresnet.cli", "export", str(tmp_path / "model.keras"),
         "--format", format, "--out", str(out), "--no-preprocessing"],
        cwd=ROOT, env=_backend_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"as {format} (takes normalised pixels, computes under float32): {out}" \
        in done.stdout
    # the exported runtime vs Keras: float32 sums in other orders, ~1e-6 relative per layer
    np.testing.assert_allclose(export.load_exported(out, format)(x),
                               keras.ops.convert_to_numpy(model(x, training=False)), atol=1e-4)


@pytest.mark.integration
def test_a_run_folder_exports_its_model(tmp_path):
    from keras_gresnet import training

    run = training.train("gresnet_mlp", model_kwargs=dict(depth=2), dataset="fashion_mnist",
                         out=tmp_path / "run", epochs=1, max_train_examples=256,
                         max_test_examples=64, verbose=0)
    trained, _ = training.load_run(run.out)
    images, _ = data.load("fashion_mnist", "test")
    raw = images[:5].astype("float32")  # raw 0-255 pixels: what the artefact takes
    format = _working_format()
    out = export.export(str(run.out), tmp_path / f"m{SUFFIX[format]}", format=format)
    # the exported runtime vs Keras: float32 sums in other orders, ~1e-6 relative per layer
    np.testing.assert_allclose(export.load_exported(out)(raw),
                               keras.ops.convert_to_numpy(trained(zoo.preprocess_input(
                                   raw, str(run.out)), training=False)), atol=1e-4)


@pytest.mark.integration
def test_import_needs_no_tensorflow():
    code = ("import sys, keras_gresnet.export as e; e.check_format('onnx', backend='torch'); "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          env=dict(_backend_env(), KERAS_BACKEND="jax"), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("format", export.FORMATS)
def test_every_artefact_takes_raw_pixels_and_says_so(format, tmp_path):
    """The default artefact takes raw 0-255 pixels (the card's normalisation
    inside), run by its own runtime; ONNX and SavedModel carry the contract."""
    model, _ = gated_cifar()
    if _refused_here(format, lambda: export.export(model, tmp_path / f"m{SUFFIX[format]}",
                                                   format=format), tmp_path):
        return
    statistics = {"method": "meanstd", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}
    model.remember(model.builder, model.builder_kwargs,
                   {"preprocessing": statistics, "class_names": [str(i) for i in range(10)]})
    raw = np.random.default_rng(5).integers(0, 256, size=(3, 16, 16, 3)).astype("float32")
    normalised = ((raw / 255 - np.array(statistics["mean"])) / np.array(statistics["std"]))
    expected = keras.ops.convert_to_numpy(model(normalised.astype("float32"), training=False))
    out = export.export(model, tmp_path / f"m{SUFFIX[format]}", format=format)
    # another runtime: float32 sums in other orders, ~1e-6 relative per layer
    np.testing.assert_allclose(export.load_exported(out)(raw), expected, atol=1e-4)
    contract = export.read_contract(out)  # every format carries it, LiteRT in its metadata
    assert contract["pixels"] == "raw 0-255" and contract["preprocessing"] == statistics
    assert contract["input_shape"] == [16, 16, 3] and contract["class_names"][3] == "3"


@pytest.mark.parametrize("dtype_policy", ["mixed_bfloat16", "mixed_float16"])
@pytest.mark.parametrize("format", export.FORMATS)
def test_a_mixed_precision_net_exports_what_its_runtime_runs(format, dtype_policy, tmp_path):
    """ONNX has no bfloat16 convolution and LiteRT's builtin ops neither
    bfloat16 nor float16: such an artefact computes in float32 (the float32
    net's outputs, its weights being the same numbers), any other in the
    net's own policy; the contract says which, and its runtime runs it."""
    model, x = gated_cifar()
    ref = keras.ops.convert_to_numpy(model(x, training=False))
    with training.dtype_policy_scope(dtype_policy):
        low, _ = gated_cifar()
    low.set_weights(model.get_weights())
    low_ref = keras.ops.convert_to_numpy(low(x, training=False)).astype(np.float32)
    scale = np.abs(ref).max()
    # 16-bit arithmetic keeps 8 (bfloat16) or 11 (float16) significant bits, 2**-12
    # relative a rounding at best: ~2e-4 at these outputs' scale (~1), ~10 roundings in
    # sequence, 30 outputs: off by more than the float32 check's 1e-4 below, which can tell
    assert np.abs(low_ref - ref).max() > 1e-4
    out = tmp_path / f"m{SUFFIX[format]}"
    if _refused_here(format, lambda: export.export(low, out, format=format,
                                                   include_preprocessing=False), tmp_path):
        return
    export.export(low, out, format=format, include_preprocessing=False)
    contract = export.read_contract(out)
    y = export.load_exported(out)(x)
    takes = export.COMPUTE_DTYPES[format]
    if takes is None or keras.dtype_policies.get(dtype_policy).compute_dtype in takes:
        assert contract["dtype_policy"] == dtype_policy
        # 16-bit arithmetic in another runtime's order: within the net's own rounding
        # (~10 roundings of 2**-9 relative in sequence for bfloat16: a few % of the scale)
        assert np.abs(y - ref).max() < 0.05 * scale
    else:
        assert contract["dtype_policy"] == "float32"
        np.testing.assert_allclose(y, ref, atol=1e-4)  # float32 in another runtime's order
        assert not list(tmp_path.glob(".*"))  # no temporary left


def _flatbuffer_model(entries):
    """A LiteRT ``Model`` flatbuffer with only its ``buffers`` (field 4) and
    ``metadata`` (field 6): ``entries`` ``{name: bytes}``, buffer 0 empty as
    the converter leaves it. Built with the flatbuffers runtime alone."""
    import flatbuffers

    b = flatbuffers.Builder(0)
    buffers = []
    for payload in [None, *entries.values()]:
        data = None if payload is None else b.CreateByteVector(payload)
        b.StartObject(3)
        if data is not None:
            b.PrependUOffsetTRelativeSlot(0, data, 0)
        buffers.append(b.EndObject())
    names = [b.CreateString(name) for name in entries]
    metadata = []
    for index, name in enumerate(names, start=1):
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, name, 0)
        b.PrependUint32Slot(1, index, 0)
        metadata.append(b.EndObject())
    vectors = []
    for items in (buffers, metadata):
        b.StartVector(4, len(items), 4)
        for item in reversed(items):
            b.PrependUOffsetTRelative(item)
        vectors.append(b.EndVector())
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(4, vectors[0], 0)
    b.PrependUOffsetTRelativeSlot(6, vectors[1], 0)
    b.Finish(b.EndObject(), file_identifier=b"TFL3")
    return bytes(b.Output())


def test_a_litert_contract_is_read_with_flatbuffers_alone_and_a_corrupt_file_is_one_line(
        tmp_path):
    """The reader on a flatbuffer built here (any backend, no converter):
    the contract entry found among others, none without it; a file that is
    not a flatbuffer is one ValueError naming it."""
    contract = {"pixels": "raw 0-255", "class_names": ["T-shirt/top", "Ankle boot"]}
    path = tmp_path / "m.tflite"
    path.write_bytes(_flatbuffer_model({"min_runtime_version": b"1.5.0",
                                        export.LITERT_METADATA: json.dumps(contract).encode()}))
    assert export.read_contract(path) == contract
    path.write_bytes(_flatbuffer_model({"min_runtime_version": b"1.5.0"}))
    assert export.read_contract(path) == {}
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x10\x00\x00\x00TFL3" + b"\xff" * 40)
    with pytest.raises(ValueError, match="bad.tflite is not a LiteRT model"):
        export.read_contract(bad)


def _predicted(capsys, argv):
    """``{picture: [(class, percent), ...]}`` that ``keras-gresnet predict``
    printed (exit 0)."""
    assert cli.main(["predict", *argv]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        path, _, classes = line.rpartition(": ")
        rows[path] = [(c.rsplit(" ", 1)[0], float(c.rsplit(" ", 1)[1].rstrip("%")))
                      for c in classes.split(", ")]
    return rows


def test_predict_runs_an_exported_artefact_as_the_keras_model(tmp_path, capsys):
    """``keras-gresnet predict ARTEFACT PICTURES``: the artefact's own
    runtime, its contract's size and class names, the same top classes and
    probabilities as the Keras model it came from (printed to 0.1%: the
    runtimes' float32 round-off, ~1e-6, can move a last digit by one)."""
    from PIL import Image

    model = zoo.gresnet_cifar(n=1, input_shape=(16, 16, 3))
    randomize_bn(model)
    for i, gate in enumerate(gate_layers(model)):
        gate.k.assign(0.3 + 0.5 * i)
    statistics = {"method": "meanstd", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}
    preset = zoo.save_preset(model, tmp_path / "preset", builder="gresnet_cifar",
                             builder_kwargs=dict(n=1),
                             metadata={"preprocessing": statistics,
                                       "class_names": [f"class{i}" for i in range(10)]})
    rng = np.random.default_rng(7)
    pictures = [str(tmp_path / f"p{i}.png") for i in range(3)]
    for path in pictures:
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)
    keras_rows = _predicted(capsys, [str(preset), *pictures, "--top", "3"])
    assert sorted(keras_rows) == sorted(pictures)
    ran = []
    for format, backends in CONVERTERS.items():
        if BACKEND not in backends or not all(map(_installed, backends[BACKEND])):
            continue  # what each backend exports is test_artefact_computes_the_keras_model's
        out = export.export(str(preset), tmp_path / f"m{SUFFIX[format]}", format=format)
        assert export.is_artefact(out)
        rows = _predicted(capsys, [str(out), *pictures, "--top", "3"])
        for path in pictures:
            assert [c for c, _ in rows[path]] == [c for c, _ in keras_rows[path]]
            assert all(c.startswith("class") for c, _ in rows[path])
            np.testing.assert_allclose([p for _, p in rows[path]],
                                       [p for _, p in keras_rows[path]], atol=0.1 + 1e-9)
        ran.append(format)
    assert ran, f"no export format's converter is installed on {BACKEND}"
    # an artefact taking normalised pixels: one line naming it, exit 2
    format = ran[0]
    bare = export.export(model, tmp_path / f"bare{SUFFIX[format]}", format=format,
                         include_preprocessing=False)
    assert cli.main(["predict", str(bare), pictures[0]]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "raw 0-255" in error and bare.name in error
    # a preset or run folder is no artefact (no saved_model.pb)
    assert not export.is_artefact(preset) and not export.is_artefact(tmp_path / "none.onnx")
