"""Predictions users can read: class names from where a model came from,
``decode_predictions`` (Keras Applications' form), and pictures in, top
classes out (``keras-gresnet predict MODEL_OR_RUN IMAGE...``).

Class names and preprocessing come from the source's card
(:func:`keras_gresnet.zoo.resolve`, the one resolver), or a list of names.
"""

from pathlib import Path

import numpy as np

from keras_gresnet.artefact_runtime import (  # noqa: F401 (re-exported)
    EXPORTED_BATCH, exported_predictor,
)
from keras_gresnet.data.folders import (  # noqa: F401 (picture_paths: re-exported)
    _decoded, _header, checked_image_shape, picture_paths,
)
from keras_gresnet.finetune import source_info


def decode_predictions(preds, source, top=5):
    """``[[(class_name, probability), ...] per row]``, best first, ``top``
    per row (Keras Applications' ``decode_predictions`` with the class names
    of ``source``: the model itself, a weights name, run or preset folder,
    an exported artefact (the class names of its contract, its ops checked
    first), or a list of names). A zoo model carries its class names in its card:
    built with weights, loaded from a preset, a run or a ``.keras`` file
    saved by this package, or fine-tuned on a picture folder or a dataset with
    ``class_names``."""
    preds = np.asarray(preds)
    if preds.ndim != 2:
        raise ValueError(f"preds must be (batch, classes) probabilities, got shape "
                         f"{preds.shape}")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be an integer >= 1, got {top!r}")
    names = source_info(source)["class_names"]
    if not names:
        raise ValueError(f"source={source!r} records no class names")
    if len(names) != preds.shape[1]:
        raise ValueError(f"preds have {preds.shape[1]} classes and source={source!r} names "
                         f"{len(names)}")
    order = np.argsort(-preds, axis=1, kind="stable")[:, :top]
    return [[(names[i], float(row[i])) for i in idx] for row, idx in zip(preds, order)]


def model_input_shape(model):
    """``(height, width, channels)`` of a model's picture input (a flat
    input of ``n`` pixels: a square grey picture), by the folders' rule
    (:func:`keras_gresnet.data.folders.checked_image_shape`)."""
    shape = tuple(model.input_shape[1:])
    try:
        return checked_image_shape(shape)
    except ValueError:
        raise ValueError(f"model input {shape} is not a picture (height, width, 1 or 3)") \
            from None


def read_pictures(paths, image_shape):
    """uint8 batch of the pictures ``paths``, raw 0-255 pixels fitted to
    ``image_shape`` (:mod:`keras_gresnet.data.folders`' rules); a model
    takes them through :func:`keras_gresnet.zoo.preprocess_input`."""
    height, width, channels = image_shape
    pictures = []
    for path in map(Path, paths):
        _header(path)  # refuses a picture too large to decode before decoding it
        pictures.append(_decoded(path, height, width, channels))
    return np.stack(pictures)

