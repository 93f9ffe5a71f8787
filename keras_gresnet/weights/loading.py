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

HEAD = "predictions"  # the classifier's name in every zoo model (Keras Applications)

logger = logging.getLogger(__name__)


def _h5_variable_count(path):
    with h5py.File(path, "r") as f:
        count = []
        f.visititems(lambda _, obj: count.append(1) if isinstance(obj, h5py.Dataset) else None)
    return len(count)


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
    try:
        return keras.saving.load_model(path, compile=compile, safe_mode=True)
    except (ValueError, TypeError, KeyError, OSError, AttributeError, RecursionError,
            MemoryError, UnicodeDecodeError, zipfile.BadZipFile) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path}: not a loadable .keras model ({type(error).__name__}: "
                         f"{first[:300]})") from None
