"""Export a model for inference without Keras: a TensorFlow SavedModel, an
ONNX file or a LiteRT (TFLite) flatbuffer, through Keras' ``model.export``,
each carrying its contract (:func:`artefact_contract`)::

    from keras_gresnet import export
    export.export("gresnet_mlp20_mnist", "gresnet20.onnx", format="onnx")
    predict = export.load_exported("gresnet20.onnx")    # onnxruntime
    probabilities = predict(images)                      # numpy in, numpy out

The artefact is written under a temporary name beside ``out`` and renamed
into place: it is complete or absent, and an existing ``out`` is refused.
This module writes artefacts; reading one back is
:mod:`keras_gresnet.artefacts` (its format and contract),
:mod:`keras_gresnet.artefact_checks` (its ops) and
:mod:`keras_gresnet.artefact_runtime` (:func:`load_exported`), whose public
names are importable from here too.
"""

import contextlib
import errno
import os
import re
import shutil
from pathlib import Path

from keras_gresnet.artefact_checks import (  # noqa: F401 (re-exported)
    LITERT_BUILTINS, LITERT_CUSTOM, LITERT_OPS, ONNX_OPS, SAVED_MODEL_OPS,
    SAVED_MODEL_SAVER_OPS, ForeignOp, check_artefact, check_litert, check_onnx,
    check_saved_model,
)
from keras_gresnet.artefact_runtime import RUNTIMES, load_exported  # noqa: F401 (re-exported)
from keras_gresnet.artefacts import (  # noqa: F401 (the public names re-exported)
    COMPUTE_DTYPES, CONTRACT_FILE, CONTRACT_TYPES, FORMATS, LITERT_METADATA, SUFFIXES,
    ArtefactRefused, ToolchainNotInstalled, _accepted, _require, is_artefact, read_contract,
)
from keras_gresnet.files import on_sigterm_raise, pid_alive


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


def export(model, out, format="tf_saved_model", *, include_preprocessing=True,
           fold_batchnorm=True, **kwargs):
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
        fold_batchnorm: fold each BatchNorm that follows a conv or dense
            layer into it (:func:`keras_gresnet.zoo.inference_model`;
            default); ``False``: the graph as trained.
        **kwargs: passed to ``model.export`` (``input_signature``,
            ``opset_version``, LiteRT converter options...).

    A model computing in a dtype the format's ops do not take
    (:data:`COMPUTE_DTYPES`: bfloat16 in ONNX, bfloat16 and float16 in
    LiteRT) is exported computing in float32 (its weights the same numbers:
    a mixed-precision net's variables are float32); the contract's
    ``dtype_policy`` says what the artefact computes in.
    """
    import keras

    from keras_gresnet import zoo

    for argument, value in (("include_preprocessing", include_preprocessing),
                            ("fold_batchnorm", fold_batchnorm)):
        if not isinstance(value, bool):
            raise ValueError(f"{argument} must be True or False, got {value!r}")
    check_format(format)
    out = check_out(out, format)
    resolved = zoo.resolve(model)
    model = zoo.raw_pixels_model(resolved) if include_preprocessing else resolved.model
    model = zoo.inference_model(model, fold_batchnorm=fold_batchnorm,
                                dtype_policy=format_dtype_policy(model, format))
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


def format_dtype_policy(model, format):
    """``"float32"`` where a layer of ``model`` computes in a dtype that
    ``format``'s ops do not take (:data:`COMPUTE_DTYPES`), else ``None``
    (each layer as it is)."""
    takes = COMPUTE_DTYPES[format]
    if takes is None or all(layer.dtype_policy.compute_dtype in takes
                            for layer in model.layers):
        return None
    return "float32"


def _dtype_policy(model):
    """The dtype policy most of ``model``'s layers with weights compute
    under (``"mixed_bfloat16"`` for a net whose classifier alone is
    float32), the model's own where none has weights."""
    import collections

    names = collections.Counter(layer.dtype_policy.name for layer in model.layers
                                if layer.weights)
    return names.most_common(1)[0][0] if names else model.dtype_policy.name


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
    ``"normalised"``), input layout, shape and dtype (``input_dtype``: what
    its runtime is fed; :func:`load_exported` casts raw uint8 pixels to it),
    the dtype policy it computes under (``dtype_policy``), the
    preprocessing, class names, source, dataset, licence and this package's
    version."""
    import keras

    from keras_gresnet._version import __version__
    from keras_gresnet.layers import takes_raw_pixels

    shape = list(model.input_shape[1:])
    dtype = keras.backend.standardize_dtype(model.inputs[0].dtype)
    layout = "flat" if len(shape) == 1 else (
        "NCHW" if keras.config.image_data_format() == "channels_first" else "NHWC")
    card = resolved.card
    return {key: value for key, value in dict(
        pixels="raw 0-255" if takes_raw_pixels(model) else "normalised",
        input_layout=layout, input_shape=shape, input_dtype=dtype,
        dtype_policy=_dtype_policy(model),
        preprocessing=card.get("preprocessing"), class_names=card.get("class_names"),
        source=card.get("source") or resolved.source, dataset=card.get("dataset"),
        license=card.get("license"), keras_gresnet_version=__version__,
    ).items() if value is not None}


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

