"""Putting weights into a built model: Keras' exact loading of a file saved
from the same architecture, and copying layer by layer by name.

Keras and h5py are imported here only: the registry and the downloads
(:mod:`keras_gresnet.weights.registry`, :mod:`~keras_gresnet.weights.download`)
stay importable without them.
"""

import io
import logging
import math
import os
import stat
import warnings
import zipfile
import zlib

import h5py

from keras_gresnet.files import write_bytes

from keras_gresnet.limits import (
    KERAS_MEMBER_BYTES, MAX_ARCHIVE_MEMBERS, MAX_H5_INFLATION, MAX_INFLATION,
    MAX_OTHER_MEMBER_BYTES, MIN_H5_DECLARED, MIN_INFLATION_CHECKED,
)
from keras_gresnet.weights.adapt import adapt_input_conv, hwc, input_change

HEAD = "predictions"  # the classifier's name in every zoo model (Keras Applications)
WEIGHTS_MEMBER = "model.weights.h5"  # a .keras archive's weights
JSON_MEMBERS = ("config.json", "metadata.json")

logger = logging.getLogger(__name__)


def h5_variable_count(path, file=None, size=None):
    """The datasets (variables) of the weights file ``path`` (or of ``file``,
    a file object of ``size`` bytes, named ``path`` in messages); a file
    HDF5 cannot read (corrupt, truncated, not HDF5) is one ``ValueError``
    naming it, as is one whose datasets declare more bytes than it could
    hold (Keras writes them uncompressed: a compressed bomb, checked before
    anything is inflated; :data:`keras_gresnet.limits.MAX_H5_INFLATION`)."""
    try:
        with h5py.File(path if file is None else file, "r") as f:
            sizes = []
            f.visititems(lambda _, obj: sizes.append(obj.size * obj.dtype.itemsize)
                         if isinstance(obj, h5py.Dataset) else None)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path}: not a readable Keras weights file ({first[:200]})") from None
    on_disk = os.path.getsize(path) if size is None else size
    if sum(sizes) > max(MAX_H5_INFLATION * on_disk, MIN_H5_DECLARED):
        raise ValueError(f"{path}: its variables declare {sum(sizes):,} bytes from {on_disk:,} "
                         f"on disk (Keras writes them uncompressed); not loaded")
    return len(sizes)


def check_archive_members(archive, path):
    """Refuse (one ``ValueError`` naming ``path``) a ``.keras`` zip
    ``archive`` whose members declare more than their bounds
    (:data:`keras_gresnet.limits.KERAS_MEMBER_BYTES`), inflate more than
    :data:`~keras_gresnet.limits.MAX_INFLATION` times their compressed bytes
    (a bomb: Keras stores its weights uncompressed), or are more than
    :data:`~keras_gresnet.limits.MAX_ARCHIVE_MEMBERS`; reads the zip's
    directory only. Python's zip reader never inflates a member past its
    declared size (a member whose data is longer fails its CRC check), so
    these bounds hold for what is read too."""
    members = archive.infolist()
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise ValueError(f"{path}: the archive holds {len(members):,} members, more than a "
                         f".keras model's {MAX_ARCHIVE_MEMBERS}; not loaded")
    for info in members:
        bound = KERAS_MEMBER_BYTES.get(info.filename, MAX_OTHER_MEMBER_BYTES)
        name = repr(info.filename)[1:-1][:100]
        if info.file_size > bound:
            raise ValueError(f"{path}: its member {name} declares {info.file_size:,} bytes, "
                             f"more than the {bound:,} it may hold; not loaded")
        if info.filename not in JSON_MEMBERS and info.file_size > MIN_INFLATION_CHECKED \
                and info.file_size > MAX_INFLATION * max(info.compress_size, 1):
            raise ValueError(
                f"{path}: its member {name} inflates {info.compress_size:,} compressed bytes "
                f"to {info.file_size:,} (more than {MAX_INFLATION}:1; Keras stores weights "
                f"uncompressed): a compression bomb, not loaded")


def check_keras_archive(path):
    """Refuse, before Keras reads it, a ``.keras`` file whose members break
    the bounds of :func:`check_archive_members`, or whose weights member (read
    once, at most its declared size) is not HDF5 or declares more variable
    bytes than it holds (a bomb inside the archive). One ``ValueError``
    naming ``path``."""
    try:
        with zipfile.ZipFile(path) as archive:
            check_archive_members(archive, path)
            names = archive.namelist()
            if WEIGHTS_MEMBER in names:
                with archive.open(WEIGHTS_MEMBER) as member:
                    data = member.read()  # at most its declared size (checked above)
                h5_variable_count(f"{path}: {WEIGHTS_MEMBER}", io.BytesIO(data), len(data))
    except (OSError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path}: not a readable .keras archive ({type(error).__name__}: "
                         f"{first[:200]})") from None


def load_exact(model, path, *, without_top=False):
    """Keras' ``load_weights`` of a file saved from this very architecture
    (``without_top``: from it with a ``predictions`` head). Keras matches
    variables by layer order and ignores extra ones, so the variable count is
    checked first."""
    stored = h5_variable_count(path)
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


def first_weighted_layer(model):
    """The first layer of ``model`` holding weights (a zoo net's first
    convolution or Dense layer), or ``None``."""
    return next((layer for layer in model.layers if layer.weights), None)


def input_hwc(model):
    """``model``'s input shape as ``(height, width, channels)``, in the layout
    its first weighted layer reads (a convolution's ``data_format``; an
    MLP's input as given)."""
    first = first_weighted_layer(model)
    return hwc(model.input_shape[1:], getattr(first, "data_format", None) == "channels_first")


def takes_any_size(model):
    """Whether the body of ``model`` takes any height and width: its first
    weighted layer is a convolution (an MLP's first Dense layer, after
    ``Flatten``, fixes them)."""
    kernel = getattr(first_weighted_layer(model), "kernel", None)
    return kernel is not None and len(kernel.shape) == 4


def _flat_order(model, shape):
    """Which input position (a C-order index into ``shape``) each row of
    the first Dense kernel of ``model`` reads: the order its ``Flatten``
    layer (Keras' own, whatever its ``data_format``) puts the input in."""
    import keras
    import numpy as np

    index = np.arange(math.prod(shape), dtype="int32").reshape(1, *shape)
    flatten = next((layer for layer in model.layers
                    if isinstance(layer, keras.layers.Flatten)), None)
    if flatten is None:
        return index.reshape(-1)
    return np.asarray(keras.ops.convert_to_numpy(flatten(index))).reshape(-1)


def _adapted_first_layer(source, model):
    """The weights of ``source``'s first weighted layer adapted to the input
    channels of ``model`` (timm's ``adapt_input_conv``: on a convolution's
    kernel, or on an MLP's first Dense kernel seen as ``(height, width,
    channels, units)``), or ``None`` where the two layers' weights already
    agree in shape or are not a first layer of the same name."""
    import numpy as np

    src, dst = first_weighted_layer(source), first_weighted_layer(model)
    if src is None or dst is None or src.name != dst.name:
        return None
    weights = src.get_weights()
    shapes = [tuple(w.shape) for w in dst.weights]
    if [w.shape for w in weights] == shapes:
        return None
    at = [w.name for w in src.weights].index("kernel") if hasattr(src, "kernel") else None
    if at is None:
        return None
    kernel, channels = weights[at], input_hwc(model)[-1]
    if kernel.ndim == 4:
        weights[at] = adapt_input_conv(kernel, channels, axis=-2)
    elif kernel.ndim == 2 and len(source.input_shape) == 4 == len(model.input_shape):
        # an MLP: the kernel's rows are the flattened pictures' positions
        src_shape, dst_shape = tuple(source.input_shape[1:]), tuple(model.input_shape[1:])
        units = kernel.shape[-1]
        by_position = np.empty_like(kernel)
        by_position[_flat_order(source, src_shape)] = kernel
        adapted = adapt_input_conv(by_position.reshape(*src_shape, units), channels, axis=-2)
        weights[at] = adapted.reshape(-1, units)[_flat_order(model, dst_shape)]
    if [w.shape for w in weights] != shapes:
        return None  # not the input's change: transfer_weights names the layer
    return dst, weights


def copy_weights(source, model, *, include_top, classes, what):
    """Copy every weighted layer of the body of ``source`` into ``model`` by
    name; the head too when ``include_top`` and the class counts agree (else
    the fresh head stays, and one log line says so). Every weighted layer of
    the body must match by name and shape (``what`` names the weights in the
    errors). Another input shape follows the one rule of
    :func:`keras_gresnet.weights.adapt.input_change` (another channel count
    adapts the first layer's kernel as timm's ``adapt_input_conv``; another
    size needs a new head or none, and a body that takes it). Returns what
    the card records of the input's adaptation, or ``None`` (the same
    input)."""
    source_head = head_layer(source)
    exclude = set()
    new_head = not include_top or source_head is None or source_head.units != classes
    note = input_change(input_hwc(source), input_hwc(model), new_head=new_head,
                        spatial=takes_any_size(model))
    if include_top and source_head is not None and source_head.units != classes:
        exclude.add(HEAD)
        logger.warning(
            "%s: loaded the body of %s; the head 'predictions' (%d classes) stays freshly "
            "initialised (the weights have %d classes)",
            model.name, what, classes, source_head.units,
        )
    adapted = _adapted_first_layer(source, model) if note else None
    if adapted is not None:
        layer, weights = adapted
        layer.set_weights(weights)
        exclude.add(layer.name)
    try:
        copied = transfer_weights(source, model, skip_missing=False, exclude=exclude)
        if adapted is not None:
            copied.append(adapted[0].name)
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
    return note


def weights_file_bytes(model, objects_to_skip=()):
    """The bytes of ``model.save_weights(...)``'s ``.weights.h5`` file (the
    model's and its optimizer's variables, without ``objects_to_skip``'s, as
    Keras' ``save_weights`` skips them), made in memory.

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
                               visited_saveables={id(o) for o in objects_to_skip})
    finally:
        store.close()
    return buffer.getvalue()


def save_weights(model, path, objects_to_skip=()):
    """``model.save_weights(path)``, the file made in memory
    (:func:`weights_file_bytes`) and written atomically with plain Python I/O:
    a full disk is one ``OSError`` naming ``path`` and nothing is left
    behind, where h5py writing to disk crashes the process."""
    write_bytes(path, weights_file_bytes(model, objects_to_skip))


def compile_as_saved(model, path):
    """``model`` compiled as the ``.keras`` file ``path`` records (its
    ``compile_config``: optimizer, loss, metrics), deserialised in Keras'
    safe mode; as it is when the file records none."""
    import json

    from keras.src.saving.serialization_lib import SafeModeScope

    with zipfile.ZipFile(path) as archive:  # bounded: load_model_file checked it
        config = json.loads(archive.read("config.json")).get("compile_config")
    if config:
        with SafeModeScope(True):
            model.compile_from_config(config)
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
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path}: not a .keras model (a .keras file is a zip archive; this "
                         f"one is not)")
    check_keras_archive(path)  # every member bounded before Keras inflates one
    try:
        return keras.saving.load_model(path, compile=compile, safe_mode=True)
    except (ValueError, TypeError, KeyError, OSError, AttributeError, RecursionError,
            MemoryError, UnicodeDecodeError, zipfile.BadZipFile) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path}: not a loadable .keras model ({type(error).__name__}: "
                         f"{first[:300]})") from None
