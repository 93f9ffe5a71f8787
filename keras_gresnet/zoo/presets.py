"""Presets (KerasHub style: a folder with the builder's arguments and its
weights, locally or in a Hugging Face repository ``hf://owner/name``) and
loading weights into a built zoo model from a registry entry, a ``.keras``
file, a preset or a bare ``.weights.h5``."""

import math
import os
import shutil
import tempfile
from pathlib import Path

import keras

from keras_gresnet._version import __version__
from keras_gresnet.files import read_json, write_json, write_text
from keras_gresnet.layers.model import CARD_FIELDS, ZooModel, model_card
from keras_gresnet.weights import (
    PRESET_CONFIG, PRESET_METADATA, PRESET_WEIGHTS, get_weights, is_path, is_preset,
    list_weights, published, weights_path,
)
from keras_gresnet.weights.fitting import canonical, describe_call
from keras_gresnet.weights.loading import (
    copy_weights,
    head_layer,
    load_exact,
    load_model_file,
)
from keras_gresnet.zoo import hub
from keras_gresnet.zoo.registry import get_model


def weight_entries():
    """Published weight entries, ``{name: entry}``, each entry naming its
    ``builder`` (:func:`keras_gresnet.weights.list_weights`)."""
    return {entry["name"]: entry for entry in list_weights()}


def entry_card(entry):
    """The card (:data:`keras_gresnet.layers.model.CARD_FIELDS`) of a
    published registry entry."""
    return {key: value for key, value in dict(
        source=entry["name"], dataset=entry.get("dataset"),
        class_names=entry.get("class_names"), preprocessing=entry.get("preprocessing"),
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


def _remember_card(model, card):
    if isinstance(model, ZooModel):
        model.remember(model.builder, model.builder_kwargs, card)
    return model


def _entry_model(entry, path):
    """The model the entry's file was saved from, loaded from ``path``."""
    if path.name.endswith(".keras"):
        return load_model_file(path, compile=False)
    model = get_model(
        entry["builder"], **entry["builder_kwargs"],
        input_shape=tuple(entry["input_shape"]), classes=entry["classes"],
    )
    return load_exact(model, path)


def source_model(name_or_path, cache_dir=None):
    """The full model (with its head) behind a registry name, a ``.keras``
    file, a preset folder or ``hf://owner/name``; ``None`` for a bare
    ``.weights.h5``."""
    if hub.is_hub_uri(name_or_path):
        return from_preset(name_or_path)
    if not is_path(name_or_path):
        entry = name_or_path if isinstance(name_or_path, dict) else get_weights(name_or_path)
        entry = published(entry)
        return _entry_model(entry, weights_path(entry["name"], cache_dir))
    path = Path(name_or_path)
    if is_preset(path) or (path.name == PRESET_WEIGHTS and is_preset(path.parent)):
        return from_preset(path if path.is_dir() else path.parent)
    if path.is_file() and path.name.endswith(".keras"):
        return load_model_file(path, compile=False)
    if path.is_file() and path.name.endswith(".weights.h5"):
        return None
    raise ValueError(
        f"{str(name_or_path)!r} is not a published name, a .keras or .weights.h5 "
        f"file, or a preset folder"
    )


def resolve_model(source, cache_dir=None):
    """The ``keras.Model`` that ``source`` names, the one answer every
    command gives: a ``keras.Model`` as it is, a published weights name,
    ``hf://owner/name``, a preset folder, a ``.keras`` file or a finished run
    folder (its ``model.keras``). Files load with ``safe_mode=True``
    (:func:`keras_gresnet.weights.loading.load_model_file`); anything else is
    one ``ValueError`` saying what would be accepted."""
    if isinstance(source, keras.Model):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(
            f"model must be a keras.Model, a published weights name, hf://owner/name, a "
            f"preset folder, a .keras file or a run folder, got {type(source).__name__}")
    path = Path(source)
    if path.name.endswith(".weights.h5"):
        raise ValueError(
            f"model={str(source)!r}: a bare .weights.h5 holds no architecture; build the "
            f"model with its zoo builder (weights=this file), or pass its .keras file, "
            f"preset or run folder")
    if path.is_dir() and not (path / PRESET_WEIGHTS).is_file():  # a run folder
        if not (path / "model.keras").is_file():
            raise ValueError(
                f"{str(path)!r} holds neither model.keras nor {PRESET_WEIGHTS}: not a "
                f"finished run folder (an unfinished run resumes with its train command) "
                f"nor a preset")
        return load_model_file(path / "model.keras")
    if not is_path(source) and not hub.is_hub_uri(source):
        return from_preset(source, cache_dir)  # built by its builder: it has its card
    return source_model(source, cache_dir)


def load_into(model, weights, *, include_top=None, classes=None, cache_dir=None):
    """Load weights, layer by layer by name, into the built zoo ``model``.

    ``weights``: a registry entry or name, a ``.keras`` file, a preset
    folder or ``hf://owner/name``, or a bare ``.weights.h5`` (saved from this very architecture).
    With ``include_top`` and ``classes`` other than the weights', the body is
    loaded and the fresh ``predictions`` layer kept (one log line says so);
    without ``include_top`` only the body is loaded. Every weighted layer of
    the body must match by name and shape. Returns ``model``.
    """
    head = head_layer(model)
    include_top = head is not None if include_top is None else include_top
    if include_top and head is None:
        raise ValueError(f"include_top=True but {model.name} has no 'predictions' layer")
    classes = head.units if classes is None and head is not None else classes
    what = weights["name"] if isinstance(weights, dict) else str(weights)
    source = source_model(weights, cache_dir)
    if source is None:  # a bare .weights.h5: Keras' own loading, exact layout
        try:
            load_exact(model, Path(weights), without_top=not include_top)
        except ValueError as error:
            raise ValueError(f"{error}. A bare .weights.h5 holds no architecture: it "
                             f"loads into the model it was saved from (or that model "
                             f"with include_top=False) only") from None
        return _remember_card(model, {"source": str(weights)})
    copy_weights(source, model, include_top=include_top, classes=classes, what=what)
    if isinstance(weights, dict) or not (is_path(weights) or hub.is_hub_uri(weights)):
        card = entry_card(weights if isinstance(weights, dict) else get_weights(weights))
    else:
        card = model_card(source) or {"source": str(weights)}
    source_head = head_layer(source)
    kept = include_top and source_head is not None and source_head.units == classes
    return _remember_card(model, head_card(card, kept))


def save_preset(model, directory, *, builder=None, builder_kwargs=None, metadata=None,
                overwrite=False):
    """Save ``model`` as a preset folder (KerasHub style): ``config.json``
    (builder, its arguments, versions), ``model.weights.h5`` and
    ``metadata.json``, the model's card (source, dataset, class names,
    preprocessing, test error, licence) updated with ``metadata``. The
    folder is written under a temporary name and renamed into place: a
    preset is complete or absent. Returns the folder.

    A model built by the zoo (a :class:`~keras_gresnet.layers.ZooModel`:
    built by a builder, loaded from a ``.keras`` file, a preset or a run,
    fine-tuned) remembers its ``builder`` and ``builder_kwargs``; another
    model needs both. ``builder_kwargs`` must rebuild ``model`` (checked
    first); the model's input shape is added when missing.

    ``directory`` may be ``hf://owner/name``: the preset, with its model
    card as README.md, is uploaded to that Hugging Face repository in one
    commit (:func:`upload_preset`), and ``hf://owner/name@commit`` is
    returned."""
    if hub.is_hub_uri(directory):
        hub.check_upload_uri(directory, "directory")
        hub.hub_module()
    if builder is None and builder_kwargs is None:
        if not isinstance(model, ZooModel) or model.builder is None:
            raise ValueError(
                f"model {getattr(model, 'name', model)!r} remembers no zoo builder that "
                f"rebuilds it (built another way, or pruned): pass builder= and "
                f"builder_kwargs=")
        builder, builder_kwargs = model.builder, model.builder_kwargs
    elif builder is None:
        raise ValueError("builder_kwargs= needs builder= (the registered name they are for)")
    if metadata is None or isinstance(metadata, dict):  # else refused below, in one line
        metadata = {**model_card(model), **(metadata or {})}
    twin, config, metadata = _preset_contents(model, builder, builder_kwargs, metadata)
    if hub.is_hub_uri(directory):
        with tempfile.TemporaryDirectory(prefix="keras-gresnet-preset-") as tmp:
            folder = _write_preset(Path(tmp) / "preset", twin, config, metadata, overwrite=False)
            return _upload(directory, folder, twin, overwrite=overwrite, argument="directory")
    return _write_preset(Path(directory), twin, config, metadata, overwrite=overwrite)


def _preset_contents(model, builder, builder_kwargs, metadata):
    """The uncompiled twin of ``model`` that ``builder(**builder_kwargs)``
    builds, the preset's config and its metadata: checked, nothing written."""
    kwargs = dict(builder_kwargs or {})
    given = sorted({"weights", "input_tensor"} & set(kwargs))
    if given:
        raise ValueError(f"builder_kwargs of a preset may not set {given}")
    kwargs.setdefault("input_shape", list(model.input_shape[1:]))
    kwargs = canonical(kwargs)
    twin = get_model(builder, **kwargs)
    layout = [(w.path, tuple(w.shape)) for w in model.weights]
    if [(w.path, tuple(w.shape)) for w in twin.weights] != layout:
        raise ValueError(
            f"{describe_call(builder, kwargs)} does not rebuild {model.name} (its weights differ "
            f"in names or shapes): pass the builder_kwargs the model was built with"
        )
    # The twin is uncompiled: its weights file holds no optimizer variables,
    # which from_preset (loading into a fresh build) would refuse.
    twin.set_weights(model.get_weights())
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict (JSON-ready), got {metadata!r}")
    if isinstance(twin, ZooModel):
        twin.remember(twin.builder, twin.builder_kwargs, _card_of(metadata or {}))
    config = dict(builder=builder, builder_kwargs=kwargs, keras_version=keras.__version__,
                  keras_gresnet_version=__version__)
    return twin, config, metadata or {}


def _write_preset(directory, twin, config, metadata, *, overwrite):
    if directory.exists() and not overwrite:
        raise ValueError(f"{directory} exists; pass overwrite=True to replace the preset")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.tmp{os.getpid()}")
    old = directory.with_name(f".{directory.name}.old{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        write_json(tmp / PRESET_CONFIG, config)
        twin.save_weights(tmp / PRESET_WEIGHTS)
        write_json(tmp / PRESET_METADATA, metadata)
        if directory.exists():
            os.replace(directory, old)
            try:
                os.replace(tmp, directory)
            except BaseException:
                os.replace(old, directory)  # the old preset stays whole
                raise
        else:
            os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return directory


def _upload(uri, folder, model, *, overwrite, argument):
    """Write the card of the preset ``folder`` (ours, temporary) into it and
    upload it to ``uri``."""
    repo_id, _ = hub.parse_hub_uri(uri)
    card = hub.preset_card(folder, repo_id=repo_id, params=model.count_params(),
                           trainable_params=_trainable(model))
    write_text(folder / hub.README, card)
    return hub.upload_folder(uri, folder, overwrite=overwrite, argument=argument,
                             commit_message=f"Upload preset {model.name} (keras-gresnet {__version__})")


def _trainable(model):
    return int(sum(math.prod(w.shape) for w in model.trainable_weights))


def upload_preset(uri, preset, *, overwrite=False):
    """Upload the local preset folder ``preset`` (:func:`save_preset`) to
    ``hf://owner/name`` (KerasHub's ``keras_hub.upload_preset(uri,
    preset)``), with its model card as README.md; the folder is loaded
    first (a preset that does not load is not uploaded) and left unchanged.
    A repository already holding a preset is replaced only with
    ``overwrite``. Returns ``hf://owner/name@commit``."""
    hub.check_upload_uri(uri, "uri")
    hub.hub_module()
    if hub.is_hub_uri(preset) or not Path(preset).is_dir():
        raise ValueError(f"preset={str(preset)!r} must be a local preset folder (save_preset)")
    model = from_preset(preset)
    with tempfile.TemporaryDirectory(prefix="keras-gresnet-preset-") as tmp:
        folder = Path(tmp)
        for name in hub.PRESET_FILES:
            if (Path(preset) / name).is_file():
                shutil.copyfile(Path(preset) / name, folder / name)
        return _upload(uri, folder, model, overwrite=overwrite, argument="uri")


def weights_preset(name, directory, *, overwrite=False, cache_dir=None):
    """The published registry entry ``name`` as a preset (a folder or
    ``hf://owner/name``, as :func:`save_preset`), its metadata naming the
    entry and its file's sha256: on the Hub its README is the entry's model
    card (``keras-gresnet weights show NAME``) plus the preset's facts."""
    entry = published(get_weights(name))
    if hub.is_hub_uri(directory):
        hub.check_upload_uri(directory, "directory")
        hub.hub_module()
    model = source_model(entry, cache_dir)
    kwargs = dict(entry["builder_kwargs"], input_shape=list(entry["input_shape"]),
                  classes=entry["classes"])
    metadata = dict(entry_card(entry), weights=entry["name"])
    return save_preset(model, directory, builder=entry["builder"], builder_kwargs=kwargs,
                       metadata=metadata, overwrite=overwrite)


def _read_preset_config(directory):
    path = directory / PRESET_CONFIG
    config = read_json(path)
    if not isinstance(config.get("builder"), str) or not isinstance(
        config.get("builder_kwargs"), dict
    ):
        raise ValueError(f"{path} must hold an object with 'builder' and 'builder_kwargs'")
    # What save_preset refuses to write, from_preset refuses to read: a
    # preset's weights are its own file, never another path, name or preset.
    given = sorted({"weights", "input_tensor"} & set(config["builder_kwargs"]))
    if given:
        raise ValueError(f"{path}: builder_kwargs may not set {given} (a preset's weights "
                         f"are its {PRESET_WEIGHTS})")
    if not (directory / PRESET_WEIGHTS).is_file():
        raise ValueError(f"{directory} is not a preset: {PRESET_WEIGHTS} is missing")
    return config


def from_preset(preset, cache_dir=None, **overrides):
    """The model of a preset folder (:func:`save_preset`), of a Hugging Face
    repository ``hf://owner/name[@revision]`` (downloaded into the Hugging
    Face cache, then loaded with exactly a local folder's checks), or of a
    published registry name, rebuilt by its builder with its weights
    loaded. ``cache_dir``: the registry weights' cache only.

    ``overrides``: the builders' ``include_top``, ``classes``,
    ``input_shape``, ``pooling``, ``classifier_activation``, ``name`` (as
    KerasHub's ``from_preset`` takes a backbone's). With a head of other
    classes, or none, the body's weights are loaded and the head is fresh
    (:func:`load_into`)."""
    unknown = sorted(set(overrides) - set(PRESET_OVERRIDES))
    if unknown:
        raise ValueError(f"from_preset takes no {unknown}; overrides accepted: "
                         f"{', '.join(PRESET_OVERRIDES)}")
    if hub.is_hub_uri(preset):
        return _load_preset_folder(Path(hub.download_preset(preset)), preset, overrides)
    if is_path(preset):
        directory = Path(preset)
        if not directory.is_dir():
            raise ValueError(f"preset {str(preset)!r}: no such folder")
        return _load_preset_folder(directory, preset, overrides)
    entry = published(get_weights(preset))
    kwargs = dict(entry["builder_kwargs"], input_shape=tuple(entry["input_shape"]),
                  classes=entry["classes"])
    model = get_model(entry["builder"], **{**kwargs, **overrides})
    head = head_layer(model)
    return load_into(model, entry, include_top=head is not None,
                     classes=head.units if head is not None else None, cache_dir=cache_dir)


# What from_preset may change of a preset's builder arguments: the head and
# the input, as the builders themselves take them with weights=.
PRESET_OVERRIDES = ("include_top", "classes", "input_shape", "pooling",
                    "classifier_activation", "name")


def _card_of(metadata):
    """The card fields of a preset's ``metadata.json``."""
    return {key: metadata[key] for key in CARD_FIELDS if metadata.get(key) is not None}


def _load_preset_folder(directory, preset, overrides):
    config = _read_preset_config(directory)
    model = load_exact(get_model(config["builder"], **config["builder_kwargs"]),
                       directory / PRESET_WEIGHTS)
    metadata_path = directory / PRESET_METADATA
    metadata = {}
    if metadata_path.is_file():
        metadata = read_json(metadata_path)
    card = _card_of(metadata)
    try:
        _remember_card(model, card)
    except ValueError as error:
        raise ValueError(f"{metadata_path}: {error}") from None
    if not overrides:
        return model
    rebuilt = get_model(config["builder"], **{**config["builder_kwargs"], **overrides})
    head, old_head = head_layer(rebuilt), head_layer(model)
    copy_weights(model, rebuilt, include_top=head is not None,
                 classes=head.units if head is not None else None, what=str(preset))
    kept = head is not None and old_head is not None and head.units == old_head.units
    return _remember_card(rebuilt, head_card(card, kept))
