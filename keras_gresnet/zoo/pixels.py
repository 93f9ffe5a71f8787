"""The pixel contract: a zoo model takes the normalised pixels its training
pipeline fed it (as Keras Applications' models do), unless it has its own
``PixelNormalization`` layer. :func:`preprocess_input` turns raw 0-255
pixels into what a source's model takes, :func:`raw_pixels_model` puts the
normalisation inside, :func:`data_config` says what a source's model takes
(timm's ``resolve_data_config``). Every door that takes pictures calls one
of them."""

import keras
import numpy as np

from keras_gresnet._pixels import scale_offset
from keras_gresnet.artefacts import DEFAULT_INPUT_DTYPE, contract_picture
from keras_gresnet.layers import ZooModel
from keras_gresnet.layers.inputs import model_input, pixel_statistics
from keras_gresnet.weights import data_config as registry_data_config
from keras_gresnet.weights.loading import head_layer
from keras_gresnet.zoo.resolver import resolve

# What a source records of the pixels where it records nothing: pixels / 255.
DEFAULT_PREPROCESSING = {"method": "scale", "mean": [0.0], "std": [1.0]}


def preprocess_input(x, source):
    """Raw 0-255 pixels ``x`` (uint8 or float, ``(..., channels)``) as the
    model of ``source`` takes them: Keras Applications'
    ``preprocess_input``, with the statistics the source records
    (``(x / 255 - mean) / std`` per channel, in float32, the training
    pipeline's arithmetic); unchanged (as float32) for a model that has its
    own ``PixelNormalization``; ``x / 255`` where the source records no
    preprocessing. ``source``: anything :func:`resolve` takes."""
    resolved = resolve(source, argument="source")
    if isinstance(x, (np.ndarray, list, tuple, int, float)):
        x = np.asarray(x, np.float32)
        if resolved.takes_raw_pixels:
            return x
        scale, offset = _scale_offset(resolved)
        return (x * scale + offset).astype(np.float32)
    x = keras.ops.cast(x, "float32")
    if resolved.takes_raw_pixels:
        return x
    scale, offset = _scale_offset(resolved)
    return x * keras.ops.convert_to_tensor(scale) + keras.ops.convert_to_tensor(offset)


def _scale_offset(resolved):
    statistics = recorded_statistics(resolved)
    return scale_offset(statistics["mean"], statistics["std"])


def recorded_statistics(source):
    """``{"method", "mean", "std"}`` the model of ``source`` was trained on
    (its card's; pixels / 255, ``"scale"``, where it records none), read
    without loading a model where the source declares it."""
    statistics = resolve(source, argument="source", load=False).preprocessing or \
        DEFAULT_PREPROCESSING
    method, mean, std = pixel_statistics(statistics["method"], statistics.get("mean"),
                                         statistics.get("std"))
    return {"method": method, "mean": list(mean), "std": list(std)}


def raw_pixels_model(source):
    """The model of ``source`` taking raw 0-255 pixels: as it is where it
    has its own ``PixelNormalization``, else with one named
    ``"preprocessing"`` in front (the card's statistics, pixels / 255 where
    it records none), one flat graph with the same layers and weights. It
    keeps the card (and a ``ZooModel``'s builder, with
    ``include_preprocessing``)."""
    resolved = resolve(source)
    model = resolved.model
    if resolved.takes_raw_pixels:
        return model
    statistics = recorded_statistics(resolved)
    inputs, x = model_input(None, tuple(model.input_shape[1:]), statistics)
    net = ZooModel(inputs, model.call(x), name=model.name)
    builder = model.builder if isinstance(model, ZooModel) else None
    kwargs = dict(model.builder_kwargs, include_preprocessing=statistics) if builder else None
    return net.remember(builder, kwargs, {**resolved.card, "preprocessing": statistics})


def data_config(source):
    """What the model of ``source`` takes, as timm's ``resolve_data_config``
    gives it (:func:`keras_gresnet.weights.data_config`'s fields: input
    size, channels, layout, pixels, preprocessing with its mean and std,
    interpolation, crop, classes), for any source :func:`resolve` takes: a
    registry entry or published name (or its ``.keras`` file) from the
    registry alone (no Keras model built), an exported artefact from its
    contract (:func:`artefact_data_config`), anything else from its model
    and card. The same net gives the same answer through every source: its
    name, its file, its run folder, the model object."""
    resolved = resolve(source, argument="source", load=False)
    if resolved.entry is not None:
        return registry_data_config(resolved.entry)
    if resolved.kind == "artefact":
        return artefact_data_config(resolved)
    resolved = resolve(resolved, argument="source")
    head = head_layer(resolved.model)
    return registry_data_config(dict(
        input_shape=list(resolved.model.input_shape[1:]),
        preprocessing=resolved.preprocessing or DEFAULT_PREPROCESSING,
        classes=head.units if head is not None else None))


def artefact_data_config(resolved):
    """:func:`data_config` of an exported artefact (``resolved``: the
    resolver's declared artefact, its contract read once its ops were
    checked): the net's input size as ``(height, width, channels)`` whatever
    the artefact's ``layout`` (``NHWC``, ``NCHW`` or ``flat``), the
    ``pixels`` it takes (``"raw 0-255"``: the normalisation inside, the
    export's default; else ``"normalised"``), the preprocessing it records,
    and as many ``classes`` as its class names (``None`` where it names
    none)."""
    contract = resolved.contract
    layout, picture = contract_picture(resolved.source, contract)
    names = resolved.class_names
    config = registry_data_config(dict(
        input_shape=list(contract["input_shape"]) if layout == "flat" else list(picture),
        preprocessing=recorded_statistics(resolved),
        classes=len(names) if names else None))
    dtype = contract.get("input_dtype", DEFAULT_INPUT_DTYPE)
    raw = contract.get("pixels") == "raw 0-255"
    config.update(layout=layout, pixels=contract.get("pixels"),
                  model_input=f"raw 0-255 pixels as {dtype} (a uint8 array is cast): the "
                  f"normalisation is inside the artefact" if raw else
                  f"(pixels / 255 - mean) / std as {dtype}")
    return config
