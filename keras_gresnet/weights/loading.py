"""Putting weights into a built model: Keras' exact loading of a file saved
from the same architecture, and copying layer by layer by name.

Keras and h5py are imported here only: the registry and the downloads
(:mod:`keras_gresnet.weights.registry`, :mod:`~keras_gresnet.weights.download`)
stay importable without them.
"""

import logging
import os
import stat
import warnings
import zipfile

import h5py

from keras_gresnet.files import write_bytes

# Keras writes weights uncompressed: a file whose datasets declare far more
# bytes than it holds inflates a compressed payload (a bomb).
MAX_H5_INFLATION = 4
HEAD = "predictions"  # the classifier's name in every zoo model (Keras Applications)

logger = logging.getLogger(__name__)


def _h5_variable_count(path):
    """The datasets (variables) of the weights file ``path``; a file HDF5
    cannot read (corrupt, truncated, not HDF5) is one ``ValueError`` naming
    it, as is one whose datasets declare more bytes than it could hold
    (a compressed bomb: checked before anything is inflated)."""
    try:
        with h5py.File(path, "r") as f:
            sizes = []
            f.visititems(lambda _, obj: sizes.append(obj.size * obj.dtype.itemsize)
                         if isinstance(obj, h5py.Dataset) else None)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path}: not a readable Keras weights file ({first[:200]})") from None
    on_disk = os.path.getsize(path)
    if sum(sizes) > max(MAX_H5_INFLATION * on_disk, 2**20):
        raise ValueError(f"{path}: its variables declare {sum(sizes):,} bytes from {on_disk:,} "
                         f"on disk (Keras writes them uncompressed); not loaded")
    return len(sizes)


def load_exact(model, path, *, without_top=False):
    """Keras' ``load_weights`` of a file saved from this very architecture
    (``without_top``: from it with a ``predictions`` head). Keras matches
    variables by layer order and ignores extra ones, so the variable count is
    checked first."""
    stored = _h5_variable_count(path)
    expected = len(model.weights) + (2 if without_top else 0)  # the head's kernel, bias
    if stored != expected:
        raise ValueError(
            f"{path} holds {stored} variables, {model.name} "
            f"{'with a head ' if without_top else ''}has {expected}: it was saved from "
            f"another architecture (a .keras file or a preset loads by layer name)"
        )
    try:
        with warnings.catch_warnings():
            # A load that fails also warns about Keras' internal groups; the
            # ValueError below says what is wrong.
            warnings.filterwarnings("ignore", "Skipping nested container", UserWarning)
            model.load_weights(path)
    except ValueError as error:  # Keras' message goes on to print the arrays
        raise ValueError(f"{path} does not fit {model.name}: "
                         f"{str(error).strip().splitlines()[0]}") from None
    return model


def transfer_weights(source, target, *, skip_missing=True, exclude=()):
    """Copy weights from ``source`` to ``target`` layer by layer, matched by
    name (the zoo's names are systematic, so a gated model and its ungated
    twin, or a model and its pruned copy, share them).

    Layers of ``target`` absent from ``source`` (e.g. the gates) keep their
    weights when ``skip_missing``; otherwise they raise. Layers named in
    ``exclude`` (e.g. a new ``predictions`` head) are left as they are.
    Returns the names of the layers copied. Shapes must agree.
    """
    copied = []
    source_layers = {layer.name: layer for layer in source.layers}
    for layer in target.layers:
        if not layer.weights or layer.name in exclude:
            continue
        src = source_layers.get(layer.name)
        if src is None:
            if skip_missing:
                continue
            raise ValueError(f"source model has no layer named {layer.name!r}")
        src_shapes = [tuple(w.shape) for w in src.weights]
        dst_shapes = [tuple(w.shape) for w in layer.weights]
        if src_shapes != dst_shapes:
            raise ValueError(
                f"layer {layer.name!r}: source weights {src_shapes} do not fit "
                f"target weights {dst_shapes}"
            )
        layer.set_weights(src.get_weights())
        copied.append(layer.name)
    return copied


def head_layer(model):
    """The ``predictions`` layer of ``model``, or ``None``."""
    return next((layer for layer in model.layers if layer.name == HEAD), None)


def copy_weights(source, model, *, include_top, classes, what):
    """Copy every weighted layer of the body of ``source`` into ``model`` by
    name; the head too when ``include_top`` and the class counts agree (else
    the fresh head stays, and one log line says so). Every weighted layer of
    the body must match by name and shape (``what`` names the weights in the
    errors). Returns ``model``."""
    source_head = head_layer(source)
    exclude = set()
    if include_top and source_head is not None and source_head.units != classes:
        exclude.add(HEAD)
        logger.warning(
            "%s: loaded the body of %s; the head 'predictions' (%d classes) stays freshly "
            "initialised (the weights have %d classes)",
            model.name, what, classes, source_head.units,
        )
    try:
        copied = transfer_weights(source, model, skip_missing=False, exclude=exclude)
    except ValueError as error:
        raise ValueError(f"the weights {what!r} ({source.name}) do not fit "
                         f"{model.name}, another architecture: {error}") from None
    unused = sorted(
        layer.name for layer in source.layers
        if layer.weights and layer.name not in copied and layer.name != HEAD
    )
    if unused:
        raise ValueError(
            f"the weights {what!r} ({source.name}) do not fit {model.name}, "
            f"another architecture: it has no layers named "
            f"{unused[:5]}{'...' if len(unused) > 5 else ''}"
        )
    return model


def weights_file_bytes(model):
    """The bytes of ``model.save_weights(...)``'s ``.weights.h5`` file (the
    model's and its optimizer's variables), made in memory.

    The file is then written with plain Python I/O: a disk that fills or a
    file-size limit in the middle of the write is an ``OSError`` like any
    other, the temporary file is removed, and the run resumes from the last
    backup. h5py writing to disk cannot recover from such a failure: it
    crashes the process (``Can't decrement id ref count``, then a segfault)
    as the half-written file is released. Keras' own writer does the work
    (``H5IOStore`` takes an ``io.BytesIO``, as for ``.keras`` archives); the
    bytes are what ``save_weights`` writes, and ``load_weights`` reads them."""
    import io

    from keras.src.saving import saving_lib

    buffer = io.BytesIO()
    store = saving_lib.H5IOStore(buffer, mode="w")
    try:
        saving_lib._save_state(model, weights_store=store, assets_store=None, inner_path="",
                               visited_saveables=set())
    finally:
        store.close()
    return buffer.getvalue()


def save_weights(model, path):
    """``model.save_weights(path)``, the file made in memory
    (:func:`weights_file_bytes`) and written atomically with plain Python I/O:
    a full disk is one ``OSError`` naming ``path`` and nothing is left
    behind, where h5py writing to disk crashes the process."""
    write_bytes(path, weights_file_bytes(model))


def load_model_file(path, compile=True):
    """A ``.keras`` file, loaded with ``safe_mode=True`` (no code from the
    file runs): the one safe loader every command uses. The package's layers
    and optimizers are registered first. ``ValueError`` naming the file when
    it is not a regular file or Keras cannot read it (text, a truncated zip,
    a Lambda layer, a config nested 100k deep, a link to a device).
    ``compile``: Keras' own (also restore the optimizer, loss and metrics)."""
    import keras

    import keras_gresnet.layers  # noqa: F401 (registers the package's layers)
    import keras_gresnet.optimizers  # noqa: F401 (and optimizers)

    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise ValueError(f"{path}: cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path}: not a regular file (a device, a folder or a pipe); a "
                         f".keras model is a zip file")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path}: not a .keras model (a .keras file is a zip archive; this "
                         f"one is not)")
    try:
        return keras.saving.load_model(path, compile=compile, safe_mode=True)
    except (ValueError, TypeError, KeyError, OSError, AttributeError, RecursionError,
            MemoryError, UnicodeDecodeError, zipfile.BadZipFile) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path}: not a loadable .keras model ({type(error).__name__}: "
                         f"{first[:300]})") from None
