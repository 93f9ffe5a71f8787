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
from keras_gresnet.files import on_sigterm_raise, pid_alive, read_bounded

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
    dict; ``{}`` for an artefact exported without one."""
    import json

    path = Path(path)
    format = _guess_format(path)
    if format == "tf_saved_model":
        file = path / "assets.extra" / CONTRACT_FILE
        return json.loads(file.read_text()) if file.is_file() else {}
    if format == "onnx":
        import onnx

        contract = {}
        for entry in onnx.load(str(path), load_external_data=False).metadata_props:
            value = entry.value  # lists and objects were written as JSON
            contract[entry.key] = json.loads(value) if value[:1] in ("[", "{") else value
        return contract
    import struct

    if importlib.util.find_spec("flatbuffers") is None:  # TensorFlow and ai-edge-litert bring it
        raise ValueError(f"reading the contract of {path} (a LiteRT file) needs the flatbuffers "
                         f"package: pip install flatbuffers")
    try:
        data = _litert_metadata(read_bounded(path, MAX_LITERT_BYTES), LITERT_METADATA)
        return {} if data is None else json.loads(data)
    except (IndexError, struct.error, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a LiteRT model this package can read the contract "
                         f"of ({type(error).__name__}: {error})") from None


MAX_LITERT_BYTES = 2**31  # a flatbuffer's offsets are 32-bit: no LiteRT file is larger


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
    :data:`FORMATS`; default from ``path`` (a folder is a SavedModel)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"path {str(path)!r} does not exist")
    format = _guess_format(path) if format is None else format
    if format not in FORMATS:
        raise ValueError(f"Unknown format {format!r}; accepted: {_accepted()}")
    runtime = _require(RUNTIMES[format], f"loading format={format!r}")
    if format == "tf_saved_model":
        return _saved_model_function(path)
    if format == "onnx":
        return _onnx_function(path)
    return _litert_function(path, runtime)


def _saved_model_function(path):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))
    serve = getattr(loaded, "serve", None) or loaded.signatures["serving_default"]

    def predict(x, _loaded=loaded):  # _loaded: serve holds its variables weakly
        y = serve(tf.constant(np.asarray(x, dtype="float32")))
        if isinstance(y, dict):  # a signature returns {name: tensor}
            (y,) = y.values()
        return np.asarray(y)

    return predict


def _onnx_function(path):
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]

    def predict(x):
        return session.run(None, {name: np.asarray(x, dtype="float32")})[0]

    return predict


def _litert_function(path, runtime):
    if runtime == "ai_edge_litert":
        from ai_edge_litert.interpreter import Interpreter
    else:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    # every core this process may use: the interpreter's default, one
    # thread, ran the conv net at about half the speed (docs/benchmarks.md)
    interpreter = Interpreter(model_path=str(path), num_threads=cores())
    (inputs,), (outputs,) = interpreter.get_input_details(), interpreter.get_output_details()
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
