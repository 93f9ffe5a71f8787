"""A user's artefact run by its own runtime: :func:`load_exported` turns a
SavedModel folder, an ONNX file or a LiteRT file into ``f(x) -> numpy
array`` through ``tf.saved_model.load``, onnxruntime or the LiteRT
interpreter (:data:`RUNTIMES`), once
:func:`keras_gresnet.artefact_checks.check_artefact` has passed every op in
it, its input cast to the dtype its contract states (raw uint8 pixels
taken), and a runtime's failure on the file becomes one ``ValueError``
naming it; :func:`exported_predictor` takes raw pictures to probabilities
through it, by the contract.
"""

import contextlib
from pathlib import Path

import numpy as np

from keras_gresnet._cpu import cores
from keras_gresnet._text import printable
from keras_gresnet.artefact_checks import check_artefact, checked_contract
from keras_gresnet.artefacts import (
    DEFAULT_INPUT_DTYPE, FORMATS, ArtefactRefused, _accepted, _guess_format, _require, _shown,
    contract_picture, read_contract,
)

# The runtime that loads each format back: alternatives, first found wins.
RUNTIMES = {
    "tf_saved_model": (("tensorflow", "tensorflow"),),
    "onnx": (("onnxruntime", "onnxruntime"),),
    "litert": (("ai_edge_litert", "ai-edge-litert"), ("tensorflow", "tensorflow")),
}


def load_exported(path, format=None):
    """A function ``f(x) -> numpy array``: the artefact at ``path`` run by its
    own runtime (``tf.saved_model.load``, ``onnxruntime``, the LiteRT
    interpreter), on one input batch: any real-number array (raw uint8
    pixels as pictures are decoded, floats), cast to the ``input_dtype`` the
    contract states (float32 where it states none, as every export does);
    an array of another kind (bool, complex, strings, objects) is one
    ``ValueError`` naming the dtype the artefact takes. ``format``: one of
    :data:`FORMATS`; default from ``path`` (a folder is a SavedModel).

    An artefact is data, never a program: before its runtime sees it, every
    op in it is checked against the ops this package's exports use
    (:func:`keras_gresnet.artefact_checks.check_artefact`), and anything
    else is refused in one line naming the op. A file the runtime cannot
    load or run (corrupt, truncated, an allocation it refuses) is one
    ``ValueError`` naming it, not the runtime's traceback."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"path {_shown(path)!r} does not exist")
    format = _guess_format(path) if format is None else format
    if format not in FORMATS:
        raise ValueError(f"Unknown format {format!r}; accepted: {_accepted()}")
    runtime = _require(RUNTIMES[format], f"loading format={format!r}")
    check_artefact(path, format)  # every op checked before the runtime sees the file
    dtype = read_contract(path).get("input_dtype", DEFAULT_INPUT_DTYPE)
    with _runtime_errors(path, "loaded"):
        if format == "tf_saved_model":
            function = _saved_model_function(path)
        elif format == "onnx":
            function = _onnx_function(path)
        else:
            function = _litert_function(path, runtime)

    def predict(x):
        x = _input(x, dtype, path)
        with _runtime_errors(path, "run"):
            return function(x)

    return predict


def _input(x, dtype, path):
    """``x`` cast to the artefact's input ``dtype``: a real-number array
    (uint8 raw pixels, integers, floats) is; anything else is one line
    naming the dtype the artefact takes."""
    x = np.asarray(x)
    if x.dtype.kind not in "uif":  # bool, complex, strings, objects, dates
        raise ValueError(f"{_shown(path)} takes {dtype} pixels (raw 0-255; a uint8 array is "
                         f"cast to {dtype}), got an array of dtype {printable(str(x.dtype))}")
    return x.astype(dtype, copy=False)


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
        y = serve(tf.constant(x))
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
        return session.run(None, {name: x})[0]

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
        if batch < 0:
            return run(x)
        # A fixed batch (LiteRT from the torch backend): run it in chunks.
        chunks = []
        for start in range(0, len(x), batch):
            part = x[start:start + batch]
            padded = np.concatenate([part, np.zeros((batch - len(part), *x.shape[1:]),
                                                    x.dtype)])
            chunks.append(run(padded)[:len(part)])
        return np.concatenate(chunks)

    return predict


EXPORTED_BATCH = 256  # pictures per call of an exported artefact


def exported_predictor(path):
    """``(image_shape, class_names, predict)`` of an exported artefact (a
    ``.onnx``, ``.tflite`` or SavedModel folder of
    :func:`keras_gresnet.export.export`), from the contract it carries:
    ``predict(pictures)`` runs the artefact's own runtime (onnxruntime, the
    LiteRT interpreter, TensorFlow) on a batch of raw pictures ``(N, height,
    width, channels)`` (uint8, as :func:`keras_gresnet.predictions.read_pictures`
    decodes them), laid out as the contract says, and returns its outputs.
    Only an artefact that takes raw 0-255 pixels (the export's default) is
    accepted: its normalisation is inside it, so nothing is left to apply
    here."""
    contract = checked_contract(path)  # its ops first: a foreign op is refused, whatever it claims
    if contract.get("pixels") != "raw 0-255":
        raise ValueError(
            f"{_shown(path)}: predict and evaluate take an artefact exported to take raw 0-255 "
            f"pixels (keras-gresnet export's default); its contract says pixels "
            f"{printable(str(contract.get('pixels', 'nothing')))[:40]!r}")
    layout, image_shape = contract_picture(path, contract)
    run = load_exported(path)

    def predict(pictures):
        x = np.asarray(pictures)
        if layout == "NCHW":
            x = x.transpose(0, 3, 1, 2)
        elif layout == "flat":
            x = x.reshape(len(x), -1)
        return np.concatenate([run(x[i:i + EXPORTED_BATCH])
                               for i in range(0, len(x), EXPORTED_BATCH)])

    return image_shape, contract.get("class_names"), predict
