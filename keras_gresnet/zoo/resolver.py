"""The one resolver: any source of a model becomes the model and its card.

A source is a ``keras.Model``, a published weights name, ``hf://owner/name``,
a preset folder, a finished run folder or a ``.keras`` file
(:func:`keras_gresnet.weights.arguments.source_kind` tells them apart, in one
place). :func:`resolve` turns each into a :class:`Resolved`: the model, a
:class:`~keras_gresnet.layers.ZooModel` wherever its builder is known, and
its card (where the weights come from, the dataset, its class names, the
preprocessing, the test error, the licence), as timm's ``create_model``
with its ``pretrained_cfg`` and KerasHub's ``from_preset`` give them. Every
command (``evaluate``, ``predict``, ``export``, ``gates``, ``prune``) and
every Python entry (``keras_gresnet.load_model``, ``zoo.from_preset``, a
builder's ``weights=``, ``finetune``) calls it, so each accepts what the
others accept.

The card's ``preprocessing`` is the model's pixel contract: a zoo model
takes the normalised pixels its training pipeline fed it (as Keras
Applications' models do), unless it has its own ``PixelNormalization``
layer; :func:`preprocess_input` turns raw 0-255 pixels into what a source's
model takes, and :func:`raw_pixels_model` puts the normalisation inside.
Every door that takes pictures calls one of the two.
"""

import dataclasses
import json
import os
import stat
import zipfile
from pathlib import Path

import keras
import numpy as np

from keras_gresnet._checks import did_you_mean
from keras_gresnet._pixels import scale_offset
from keras_gresnet.data.datasets import DATASETS
from keras_gresnet.files import read_json
from keras_gresnet.layers import ZooModel, model_card, takes_raw_pixels
from keras_gresnet.layers.inputs import model_input, pixel_statistics
from keras_gresnet.limits import MAX_CONFIG_BYTES  # noqa: F401 (re-exported)
from keras_gresnet.weights import get_weights, list_weights, published, weights_path
from keras_gresnet.weights import data_config as registry_data_config
from keras_gresnet.weights.download import sha256_of
from keras_gresnet.weights.arguments import (
    ACCEPTED, PRESET_CONFIG, RUN_CONFIG, RUN_MODEL, source_kind,
)
from keras_gresnet.weights.loading import (
    check_archive_members, compile_as_saved, copy_weights, head_layer, load_exact,
    load_model_file,
)
from keras_gresnet.zoo import hub, presets
from keras_gresnet.zoo.builders import get_model, list_models

# What a source records of the pixels where it records nothing: pixels / 255.
DEFAULT_PREPROCESSING = {"method": "scale", "mean": [0.0], "std": [1.0]}


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A model with its contract: what :func:`resolve` returns.

    Attributes:
        model: the ``keras.Model`` (a ``ZooModel`` wherever its builder is
            known, with ``card`` in it).
        card: :data:`keras_gresnet.layers.model.CARD_FIELDS`.
        kind: ``"model"`` or a :data:`keras_gresnet.weights.arguments.KINDS` kind.
        source: what was given, as text (for messages).
        config: a run folder's ``config.json``, else ``None``.
    """

    model: keras.Model
    card: dict
    kind: str
    source: str
    config: dict | None = None

    @property
    def class_names(self):
        """The class names the card records, or ``None``."""
        return self.card.get("class_names")

    @property
    def preprocessing(self):
        """The recorded ``{"method", "mean", "std"}``, or ``None``."""
        return self.card.get("preprocessing")

    @property
    def takes_raw_pixels(self):
        """Whether the model normalises raw 0-255 pixels itself."""
        return takes_raw_pixels(self.model)

    def preprocess(self, x):
        """:func:`preprocess_input` of raw 0-255 pixels ``x`` for this model."""
        return preprocess_input(x, self)


def resolve(source, *, cache_dir=None, argument="model", compile=False):
    """The model ``source`` names, with its card (:class:`Resolved`).

    ``source``: a ``keras.Model`` (as it is; its card if it is a zoo
    model), a published weights name (its file, downloaded and verified,
    into its builder; a name not yet trained says so, with the command that
    trains it), ``hf://owner/name[@revision]``, a preset folder, a finished
    run folder (its ``model.keras``; the card from its ``config.json``) or a
    ``.keras`` file (its card, or the registry entry whose file it is, by
    sha256). Files load with ``safe_mode=True``: no code from them runs.
    ``cache_dir``: the published weights' cache. ``compile``: a ``.keras``
    file's or run's model also compiled as the file records (Keras' own
    ``compile=True``; a file saved before models carried their card: the
    rebuilt zoo model compiled from the file's compile config). Anything
    else is one ``ValueError`` naming ``argument`` and what would be
    accepted."""
    if isinstance(source, Resolved):
        return source
    if isinstance(source, keras.Model):
        return Resolved(source, model_card(source), "model", source.name)
    kind = source_kind(source, argument)
    if kind == "weights_file":
        raise ValueError(
            f"{argument}={os.fspath(source)!r}: a bare .weights.h5 holds no architecture; "
            f"build the model with its zoo builder (weights=this file), or pass its .keras "
            f"file, preset or run folder")
    model, card, config, rebuild = _load(source, kind, cache_dir, argument, compile)
    if rebuild is not None and not isinstance(model, ZooModel):
        model = _as_zoo_model(model, *rebuild, card)
        if compile and kind in ("keras_file", "run") and isinstance(model, ZooModel):
            path = Path(source) / RUN_MODEL if kind == "run" else Path(source)
            model = compile_as_saved(model, path)
    if isinstance(model, ZooModel):
        model.remember(model.builder, model.builder_kwargs, card)
    return Resolved(model, card, kind, os.fspath(source), config)


def _load(source, kind, cache_dir, argument, compile=False):
    """``(model, card, run config or None, (builder, kwargs) or None)`` of
    ``source`` of ``kind``: the model as its file holds it."""
    text = os.fspath(source)
    if kind == "published":
        entry = published(_entry(text, argument))
        model = _entry_model(entry, weights_path(entry["name"], cache_dir))
        return model, entry_card(entry), None, _entry_builder(entry)
    if kind in ("preset", "hub"):
        folder = Path(hub.download_preset(text)) if kind == "hub" else Path(source)
        model = presets.load_preset_folder(folder)
        card = dict(model_card(model))
        if kind == "hub":
            card.setdefault("source", text)
        return model, card, None, None
    if kind == "run":
        folder = Path(source)
        config = read_run_config(folder / RUN_CONFIG)
        model = load_model_file(_bounded_keras(folder / RUN_MODEL), compile=compile)
        results = folder / "results.json"
        card = {**run_card(config, read_json(results) if results.is_file() else {}),
                **model_card(model)}
        kwargs = dict(config.get("model_kwargs") or {})
        return model, card, config, (config["model"], _shape_and_head(model, kwargs))
    model = load_model_file(_bounded_keras(Path(source)), compile=compile)  # a .keras file
    entry = published_entry_of(Path(source))  # a published file: its entry's card, as by name
    if entry is not None:
        return model, entry_card(entry), None, _entry_builder(entry)
    return model, model_card(model) or {"source": text}, None, None


def _entry(name, argument):
    """The registry entry ``name``; an unknown name's error offers the close
    names, and a builder's name says how builders take weights."""
    try:
        return get_weights(name)
    except ValueError:
        entries = list_weights()
        names = [e["name"] for e in entries]
        if name in list_models():
            own = [e["name"] for e in entries if e["builder"] == name]
            hint = (f"{name!r} is a builder: zoo.{name}(weights=...) builds it with weights "
                    f"(its published names: {', '.join(own) or 'none yet'})")
        else:
            hint = did_you_mean(name, names, spell=repr).strip(" ()") or \
                "`keras-gresnet weights list` shows the published names"
        raise ValueError(f"{argument}={name!r} is not a published weights name, nor a path: "
                         f"{hint}; {argument} accepts {ACCEPTED}") from None


def _entry_builder(entry):
    return entry["builder"], dict(entry["builder_kwargs"], input_shape=list(entry["input_shape"]),
                                  classes=entry["classes"])


def _shape_and_head(model, kwargs):
    """``kwargs`` with the input shape and head of the loaded ``model``."""
    kwargs = dict(kwargs, input_shape=list(model.input_shape[1:]))
    head = head_layer(model)
    if head is None:
        kwargs.setdefault("include_top", False)
    else:
        kwargs["classes"] = head.units
    return kwargs


def _entry_model(entry, path):
    """The model the entry's file was saved from, loaded from ``path``."""
    if path.name.endswith(".keras"):
        return load_model_file(path, compile=False)
    return load_exact(get_model(entry["builder"], **_entry_builder(entry)[1]), path)


def _as_zoo_model(model, builder, kwargs, card):
    """``model`` (a plain functional model of a zoo builder's layers, e.g. a
    file saved before models carried their builder) rebuilt by ``builder``
    with its weights, so that it carries ``card`` and rebuilds by name; as
    it is where the builder does not rebuild it exactly."""
    try:
        twin = get_model(builder, **kwargs)
        head = head_layer(twin)
        copy_weights(model, twin, include_top=head is not None,
                     classes=head.units if head is not None else None, what=model.name)
    except (ValueError, TypeError):
        return model
    if [(w.path, tuple(w.shape)) for w in twin.weights] != \
            [(w.path, tuple(w.shape)) for w in model.weights] or \
            len(twin.layers) != len(model.layers):
        return model
    return twin.remember(twin.builder, twin.builder_kwargs, card)


def published_entry_of(path):
    """The published registry entry whose file ``path`` is (same size and
    sha256 as its file, or as one it was published as before: its
    ``earlier_files``, the same weights), or ``None``: a published ``.keras``
    file has its entry's card. The digest is computed once, and only when
    some entry has the file's size."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    digest = None
    for entry in list_weights():
        files = [entry, *entry.get("earlier_files", [])]
        if any(f.get("size") == size for f in files):
            digest = digest or sha256_of(path)
            if any(f.get("size") == size and f.get("sha256") == digest for f in files):
                return entry
    return None


def _bounded_keras(path):
    """``path``, a ``.keras`` file whose members are checked against their
    bounds (:func:`keras_gresnet.weights.loading.check_archive_members`:
    ``config.json`` at most :data:`MAX_CONFIG_BYTES`, no member a bomb)
    before anything in it is inflated (a device, a pipe, a folder or a file
    that is not a zip is left to the loader's own one line, unopened)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return path
        with zipfile.ZipFile(path) as archive:
            check_archive_members(archive, path)
    except (OSError, zipfile.BadZipFile):
        return path  # not a zip: the loader's own one line
    return path


# The types of a run config's values that reading a run relies on.
RUN_CONFIG_TYPES = (
    ("model", lambda v: isinstance(v, str) and v != "", "a model name"),
    ("dataset", lambda v: isinstance(v, str) and v != "", "a dataset name"),
    ("model_kwargs", lambda v: isinstance(v, dict), "a mapping of builder arguments"),
    ("seed", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
     "an integer >= 0"),
    ("data_dir", lambda v: v is None or isinstance(v, str), "null or a folder"),
    ("max_train_examples", lambda v: v is None or (isinstance(v, int) and not isinstance(
        v, bool) and v >= 1), "null or an integer >= 1"),
    ("max_test_examples", lambda v: v is None or (isinstance(v, int) and not isinstance(
        v, bool) and v >= 1), "null or an integer >= 1"),
    ("data", lambda v: isinstance(v, dict), "an object"),
)


def read_run_config(path):
    """A run folder's ``config.json``, the values a reader relies on checked
    (:data:`RUN_CONFIG_TYPES`; ``model`` and ``dataset`` required; a
    ``data.preprocessing`` the pipeline's ``{method, mean, std}``); one
    ``ValueError`` naming the file otherwise."""
    config = read_json(path)
    missing = [k for k in ("model", "dataset") if k not in config]
    if missing:
        raise ValueError(f"{path} is not a keras-gresnet run config (it lacks {missing}); "
                         f"this folder is not a run folder")
    for key, kind, accepted in RUN_CONFIG_TYPES:
        value = config.get(key)
        if key in config and not kind(value):
            raise ValueError(f"{path}: {key}={value!r} is not {accepted}; this config was "
                             f"not written by keras-gresnet (or was edited)")
    statistics = (config.get("data") or {}).get("preprocessing")
    if statistics is not None:
        try:
            pixel_statistics(statistics["method"], statistics.get("mean"), statistics.get("std"))
        except (TypeError, KeyError, AttributeError, ValueError) as error:
            raise ValueError(f"{path}: data.preprocessing {statistics!r} is not the pipeline's "
                             f"{{method, mean, std}} ({error})") from None
    return config


def run_card(config, results):
    """The card of a finished run of ``config``: its dataset, class names,
    the pipeline's preprocessing and the test error."""
    data = config.get("data") or {}
    names = data.get("class_names")
    if names is None and config.get("dataset") in DATASETS:
        names = list(DATASETS[config["dataset"]].class_names)
    return {key: value for key, value in dict(
        source=f"keras-gresnet run: {config.get('model')} on {config.get('dataset')}, seed "
               f"{config.get('seed')}",
        dataset=config.get("dataset"), class_names=names,
        preprocessing=data.get("preprocessing"),
        test_error_percent=results.get("test_error_percent"),
    ).items() if value is not None}


def entry_card(entry):
    """The card of a published registry entry."""
    return {key: value for key, value in dict(
        source=entry["name"], dataset=entry.get("dataset"),
        class_names=entry.get("class_names") or None, preprocessing=entry.get("preprocessing"),
        test_error_percent=entry.get("test_error_percent"), license=entry.get("license"),
        weights_sha256=entry.get("sha256"),
    ).items() if value is not None}


def head_card(card, head_kept):
    """``card`` for a model whose head is the card's (``head_kept``), or a
    fresh one: its class names and test error are then not the model's."""
    card = dict(card)
    if not head_kept:
        card.pop("class_names", None)
        card.pop("test_error_percent", None)
    return card


def data_config(source):
    """What the model of ``source`` takes, as timm's ``resolve_data_config``
    gives it (:func:`keras_gresnet.weights.data_config`'s fields: input
    size, channels, layout, pixels, preprocessing with its mean and std,
    interpolation, crop, classes), for any source :func:`resolve` takes: a
    registry entry or published name from the registry alone (no Keras
    model built), anything else from its model and card."""
    if isinstance(source, dict) or (isinstance(source, str) and not isinstance(
            source, Resolved) and source_kind(source, "source") == "published"):
        return registry_data_config(source if isinstance(source, dict) else _entry(
            source, "source"))
    resolved = resolve(source, argument="source")
    head = head_layer(resolved.model)
    return registry_data_config(dict(
        input_shape=list(resolved.model.input_shape[1:]),
        preprocessing=resolved.preprocessing or DEFAULT_PREPROCESSING,
        classes=head.units if head is not None else None))


def declared_input_shape(source):
    """The input shape a source's model was saved with, read from what it
    declares (a preset's or run's config, a ``.keras`` file's config)
    without loading it; ``None`` where that would take a download."""
    if isinstance(source, keras.Model):
        return tuple(source.input_shape[1:])
    kind = source_kind(source, "weights")
    path = Path(source) if kind not in ("published", "hub") else None
    if kind == "preset":
        shape = read_json(path / PRESET_CONFIG).get("builder_kwargs", {}).get("input_shape")
        return tuple(shape) if isinstance(shape, list) else None
    if kind in ("run", "keras_file"):
        path = path / RUN_MODEL if kind == "run" else path
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                return None  # a device or a pipe: the loader refuses it, unopened
            with zipfile.ZipFile(_bounded_keras(path)) as archive:
                config = json.loads(archive.read("config.json"))
            layer = config["config"]["layers"][0]
            return tuple(layer["config"]["batch_shape"][1:])
        except (OSError, KeyError, IndexError, TypeError, ValueError, zipfile.BadZipFile):
            return None
    return None


def load_into(model, weights, *, include_top=None, classes=None, cache_dir=None):
    """Load weights, layer by layer by name, into the built zoo ``model``.

    ``weights``: a registry entry or anything :func:`resolve` takes, or a
    bare ``.weights.h5`` (saved from this very architecture). With
    ``include_top`` and ``classes`` other than the weights', the body is
    loaded and the fresh ``predictions`` layer kept (one log line says so);
    without ``include_top`` only the body is loaded. Every weighted layer of
    the body must match by name and shape. Returns ``model``."""
    head = head_layer(model)
    include_top = head is not None if include_top is None else include_top
    if include_top and head is None:
        raise ValueError(f"include_top=True but {model.name} has no 'predictions' layer")
    classes = head.units if classes is None and head is not None else classes
    if isinstance(weights, dict):  # a resolved registry entry
        weights = weights["name"]
    kind = source_kind(weights, "weights") if not isinstance(weights, keras.Model) else "model"
    if kind == "weights_file":  # Keras' own loading, exact layout
        try:
            load_exact(model, Path(weights), without_top=not include_top)
        except ValueError as error:
            raise ValueError(f"{error}. A bare .weights.h5 holds no architecture: it "
                             f"loads into the model it was saved from (or that model "
                             f"with include_top=False) only") from None
        return _remember(model, {"source": str(weights)})
    if kind == "model":
        source, card = weights, model_card(weights)
    else:
        source, card, _, _ = _load(weights, kind, cache_dir, "weights")
    copy_weights(source, model, include_top=include_top, classes=classes, what=str(weights))
    source_head = head_layer(source)
    kept = include_top and source_head is not None and source_head.units == classes
    return _remember(model, head_card(card, kept))


def _remember(model, card):
    if isinstance(model, ZooModel):
        model.remember(model.builder, model.builder_kwargs, card)
    return model


# What from_preset may change of a source's builder arguments: the head and
# the input, as the builders themselves take them with weights=.
PRESET_OVERRIDES = ("include_top", "classes", "input_shape", "pooling",
                    "classifier_activation", "name")


def from_preset(preset, cache_dir=None, **overrides):
    """The model of any source :func:`resolve` takes (a preset folder,
    ``hf://owner/name``, a published name, a run folder, a ``.keras``
    file), rebuilt by its builder with its weights loaded, as KerasHub's
    ``from_preset``. ``cache_dir``: the published weights' cache only.

    ``overrides``: the builders' ``include_top``, ``classes``,
    ``input_shape``, ``pooling``, ``classifier_activation``, ``name``, on
    the builders' rules: a head of other classes, or none, loads the body
    and keeps a fresh head; another ``input_shape`` only with
    ``include_top=False`` (Keras Applications')."""
    unknown = sorted(set(overrides) - set(PRESET_OVERRIDES))
    if unknown:
        raise ValueError(f"from_preset takes no {unknown}; overrides accepted: "
                         f"{', '.join(PRESET_OVERRIDES)}")
    resolved = resolve(preset, cache_dir=cache_dir, argument="preset")
    model = resolved.model
    if not overrides:
        return model
    if not isinstance(model, ZooModel) or model.builder is None:
        raise ValueError(f"preset={resolved.source!r}: its model records no zoo builder, so "
                         f"it cannot be rebuilt with {sorted(overrides)}")
    kwargs = {**model.builder_kwargs, **overrides}
    shape = overrides.get("input_shape")
    if shape is not None and tuple(shape) != tuple(model.input_shape[1:]) and \
            kwargs.get("include_top", True) is not False:
        raise ValueError(f"input_shape={tuple(shape)} is not the preset's "
                         f"{tuple(model.input_shape[1:])}: another size is taken with "
                         f"include_top=False (Keras Applications' rule)")
    rebuilt = get_model(model.builder, **kwargs)
    head, old_head = head_layer(rebuilt), head_layer(model)
    copy_weights(model, rebuilt, include_top=head is not None,
                 classes=head.units if head is not None else None, what=resolved.source)
    kept = head is not None and old_head is not None and head.units == old_head.units
    return _remember(rebuilt, head_card(resolved.card, kept))


def weights_preset(name, directory, *, overwrite=False, cache_dir=None):
    """The published registry entry ``name`` as a preset (a folder or
    ``hf://owner/name``, as :func:`keras_gresnet.zoo.save_preset`), its
    metadata naming the entry and its file's sha256: on the Hub its README
    is the entry's model card plus the preset's facts."""
    entry = published(_entry(name, "name"))
    if hub.is_hub_uri(directory):
        hub.check_upload_uri(directory, "directory")
        hub.hub_module()
    model, card, _, (builder, kwargs) = _load(name, "published", cache_dir, "name")
    return presets.save_preset(model, directory, builder=builder, builder_kwargs=kwargs,
                               metadata=dict(card, weights=entry["name"]), overwrite=overwrite)


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
    (its card's; pixels / 255, ``"scale"``, where it records none)."""
    statistics = resolve(source, argument="source").preprocessing or DEFAULT_PREPROCESSING
    method, mean, std = pixel_statistics(statistics["method"], statistics.get("mean"),
                                         statistics.get("std"))
    return {"method": method, "mean": list(mean), "std": list(std)}


def card_of(source):
    """The card of ``source`` (anything :func:`resolve` takes): a published
    name's from its registry entry and an unfinished run's from its
    ``config.json``, without loading a model."""
    kind = source_kind(source, "source", finished=False) if isinstance(
        source, (str, os.PathLike)) else None
    if kind == "published":
        return entry_card(_entry(os.fspath(source), "source"))
    if kind == "run" and not (Path(source) / RUN_MODEL).is_file():  # its config says
        return run_card(read_run_config(Path(source) / RUN_CONFIG), {})
    return resolve(source, argument="source").card


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
