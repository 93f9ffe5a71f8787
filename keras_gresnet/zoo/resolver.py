"""The one resolver: any source of a model becomes the model and its card.

A source is a ``keras.Model``, a published weights name (or its registry
entry), ``hf://owner/name``, a preset folder, a finished run folder or a
``.keras`` file (:func:`keras_gresnet.weights.arguments.source_kind` tells
them apart, in one place). :func:`resolve` turns each into a
:class:`Resolved`: the model, a :class:`~keras_gresnet.layers.ZooModel`
wherever its builder is known, and its card (:mod:`~keras_gresnet.zoo.cards`),
as timm's ``create_model`` with its ``pretrained_cfg`` and KerasHub's
``from_preset`` give them; with ``load=False``, what the source declares
(card, input shape) without loading a model where it can. Every command
(``evaluate``, ``predict``, ``export``, ``gates``, ``prune``) and every
Python entry (``keras_gresnet.load_model``, ``zoo.from_preset``, a builder's
``weights=``, ``finetune``, the pixel contract of
:mod:`~keras_gresnet.zoo.pixels`) calls it, so each accepts what the others
accept.
"""

import dataclasses
import json
import os
import stat
import zipfile
from pathlib import Path

import keras

from keras_gresnet._checks import did_you_mean
from keras_gresnet.artefact_checks import checked_contract
from keras_gresnet._text import shown
from keras_gresnet.files import read_json
from keras_gresnet.layers import ZooModel, model_card, takes_raw_pixels
from keras_gresnet.layers.model import CARD_FIELDS, check_card
from keras_gresnet.weights import (
    PRESET_CONFIG, PRESET_METADATA, PRESET_WEIGHTS, get_weights, list_weights, published,
    weights_path,
)
from keras_gresnet.weights.download import sha256_of
from keras_gresnet.weights.arguments import (
    ACCEPTED, PRESET_CLASSES, PRESET_CONVERTER, PRESET_PREPROCESSOR, PRESET_TASK,
    PRESET_TASK_WEIGHTS, RUN_CONFIG, RUN_MODEL, body_kwargs, source_kind,
)
from keras_gresnet.weights.loading import (
    check_archive_members, compile_as_saved, copy_weights, h5_variable_count, head_layer,
    input_hwc, load_exact, load_model_file,
)
from keras_gresnet.zoo import hub
from keras_gresnet.zoo.builders import get_model, list_models
from keras_gresnet.zoo.cards import (
    adapted_card, entry_card, head_card, preset_card, run_card,
)
from keras_gresnet.zoo.run_config import read_run_config


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A model with its contract: what :func:`resolve` returns.

    Attributes:
        model: the ``keras.Model`` (a ``ZooModel`` wherever its builder is
            known, with ``card`` in it); ``None`` from ``resolve(...,
            load=False)`` where the source declares what was asked.
        card: :data:`keras_gresnet.layers.model.CARD_FIELDS`.
        kind: ``"model"`` or a :data:`keras_gresnet.weights.arguments.KINDS` kind.
        source: what was given, as text (for messages).
        config: a run folder's ``config.json``, else ``None``.
        entry: a published name's registry entry, else ``None``.
        input_shape: the model's input shape (without the batch), where
            known.
        contract: an exported artefact's contract
            (:func:`keras_gresnet.artefacts.read_contract`), else ``None``.
    """

    model: keras.Model | None
    card: dict
    kind: str
    source: str
    config: dict | None = None
    entry: dict | None = None
    input_shape: tuple | None = None
    contract: dict | None = None
    # What loads the model later (``resolve(resolved)``): the source as given.
    origin: object = dataclasses.field(default=None, repr=False, compare=False)
    cache_dir: object = dataclasses.field(default=None, repr=False, compare=False)

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


def resolve(source, *, cache_dir=None, argument="model", compile=False, load=True):
    """The model ``source`` names, with its card (:class:`Resolved`).

    ``source``: a ``keras.Model`` (as it is; its card if it is a zoo
    model), a published weights name or its registry entry (its file,
    downloaded and verified, into its builder; a name not yet trained says
    so, with the command that trains it), ``hf://owner/name[@revision]``, a
    preset folder, a finished run folder (its ``model.keras``; the card from
    its ``config.json``), a ``.keras`` file (its card, or the registry
    entry whose file it is, by sha256), or a :class:`Resolved` (loaded if
    it was not). Files load with ``safe_mode=True``: no code from them runs.
    ``cache_dir``: the published weights' cache. ``compile``: a ``.keras``
    file's or run's model also compiled as the file records (Keras' own
    ``compile=True``; a file saved before models carried their card: the
    rebuilt zoo model compiled from the file's compile config).
    ``load=False``: what the source declares (card, input shape, entry,
    run config) without loading a model, for every source but a Hub preset
    (downloaded and loaded); an unfinished run folder is then taken for
    what its ``config.json`` says, and an exported artefact (``.onnx``,
    ``.tflite``, SavedModel folder; kind ``"artefact"``) for its contract,
    read once its ops are checked (loading one is refused: it holds no
    Keras model). Anything else is one ``ValueError``
    naming ``argument`` and what would be accepted."""
    if isinstance(source, Resolved):
        if source.model is not None or not load:
            return source
        return resolve(source.origin, cache_dir=source.cache_dir, argument=argument,
                       compile=compile)
    if isinstance(source, keras.Model):
        return Resolved(source, model_card(source), "model", source.name,
                        input_shape=tuple(source.input_shape[1:]), origin=source)
    if isinstance(source, dict):  # a registry entry, as weights= of a builder resolves it
        kind, text = "published", source["name"]
    else:
        kind = source_kind(source, argument, finished=load, artefact=not load)
        text = os.fspath(source)
    if kind == "weights_file":
        raise ValueError(
            f"{argument}={text!r}: a bare .weights.h5 holds no architecture; "
            f"build the model with its zoo builder (weights=this file), or pass its .keras "
            f"file, preset or run folder")
    if not load and kind != "hub":
        return _declared(source, kind, text, argument, cache_dir)
    model, card, config, rebuild, entry = _load(source, kind, text, cache_dir, argument,
                                                compile)
    if rebuild is not None and not isinstance(model, ZooModel):
        model = _as_zoo_model(model, *rebuild, card)
        if compile and kind in ("keras_file", "run") and isinstance(model, ZooModel):
            path = Path(source) / RUN_MODEL if kind == "run" else Path(source)
            model = compile_as_saved(model, path)
    if isinstance(model, ZooModel):
        model.remember(model.builder, model.builder_kwargs, card)
    return Resolved(model, card, kind, text, config, entry, tuple(model.input_shape[1:]),
                    origin=source, cache_dir=cache_dir)


def _load(source, kind, text, cache_dir, argument, compile=False):
    """``(model, card, run config or None, (builder, kwargs) or None, entry
    or None)`` of ``source`` of ``kind``: the model as its file holds it."""
    if kind == "published":
        entry = published(source if isinstance(source, dict) else _entry(text, argument))
        model = _entry_model(entry, weights_path(entry["name"], cache_dir))
        return model, entry_card(entry), None, _entry_builder(entry), entry
    if kind in ("preset", "hub"):
        folder = Path(hub.download_preset(text)) if kind == "hub" else Path(source)
        model = _preset_model(folder)
        card = dict(model_card(model))
        if kind == "hub":
            card.setdefault("source", text)
        return model, card, None, None, None
    if kind == "run":
        folder = Path(source)
        config = read_run_config(folder / RUN_CONFIG)
        model = load_model_file(_bounded_keras(folder / RUN_MODEL), compile=compile)
        card = {**_run_card(folder, config), **model_card(model)}
        kwargs = dict(config.get("model_kwargs") or {})
        return model, card, config, (config["model"], _shape_and_head(model, kwargs)), None
    model = load_model_file(_bounded_keras(Path(source)), compile=compile)  # a .keras file
    entry = published_entry_of(Path(source))  # a published file: its entry's card, as by name
    if entry is not None:
        return model, entry_card(entry), None, _entry_builder(entry), entry
    return model, model_card(model) or {"source": text}, None, None, None


def _declared(source, kind, text, argument, cache_dir):
    """What ``source`` of ``kind`` declares (card, input shape, entry, run
    config), read from its registry entry or its files' JSON: the card and
    shape :func:`_load` would give, no model loaded."""
    def declared(card, input_shape=None, config=None, entry=None):
        return Resolved(None, card, kind, text, config, entry, input_shape, origin=source,
                        cache_dir=cache_dir)

    if kind == "published":
        entry = source if isinstance(source, dict) else _entry(text, argument)
        return declared(entry_card(entry), tuple(entry["input_shape"]), entry=entry)
    if kind == "artefact":
        contract = checked_contract(Path(source))  # its ops first, whatever it claims
        card = {key: contract[key] for key in CARD_FIELDS if contract.get(key) is not None}
        shape = contract.get("input_shape")
        return dataclasses.replace(declared(card, tuple(shape) if shape else None),
                                   contract=contract)
    if kind == "preset":
        config, metadata = _preset_files(Path(source))
        shape = config["builder_kwargs"].get("input_shape")
        return declared(preset_card(metadata), tuple(shape) if isinstance(shape, list) else None)
    if kind == "run":
        folder = Path(source)
        config = read_run_config(folder / RUN_CONFIG)
        saved, shape = _archive_card_and_shape(folder / RUN_MODEL)
        return declared({**_run_card(folder, config), **saved}, shape, config)
    entry = published_entry_of(Path(source))
    saved, shape = _archive_card_and_shape(Path(source))
    if entry is not None:
        return declared(entry_card(entry), shape, entry=entry)
    return declared(saved or {"source": text}, shape)


def _run_card(folder, config):
    results = folder / "results.json"
    return run_card(config, read_json(results) if results.is_file() else {})


def _archive_card_and_shape(path):
    """The card (``{}`` if none) and input shape (``None`` if unreadable) a
    ``.keras`` file's ``config.json`` declares, read through the member
    bounds; nothing inflated but that JSON."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return {}, None  # a device or a pipe, or none: the loader says, unopened
        with zipfile.ZipFile(_bounded_keras(path)) as archive:
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, RecursionError, zipfile.BadZipFile):
        return {}, None  # the loader says what is wrong, in one line
    try:
        card = check_card(config["config"]["card"]) if config.get("class_name") == "ZooModel" \
            else {}
    except (KeyError, TypeError, ValueError, AttributeError):
        card = {}
    try:
        shape = tuple(config["config"]["layers"][0]["config"]["batch_shape"][1:])
    except (KeyError, IndexError, TypeError, AttributeError):
        shape = None
    return card, shape


def _preset_files(directory):
    """A preset folder's config (checked: its builder, its arguments, its
    own weights file), as ``{"builder", "builder_kwargs", "kerashub"}``, and
    its ``metadata.json`` (``{}`` if none). A KerasHub preset (what
    :func:`~keras_gresnet.zoo.save_preset` writes) names its classes: each
    JSON file's must be a zoo model's (:data:`PRESET_CLASSES`); an older
    preset's ``config.json`` holds the builder and its arguments."""
    path = directory / PRESET_CONFIG
    config = read_json(path)
    kerashub = "registered_name" in config
    if kerashub:
        config = _kerashub_config(directory, config)
    if not isinstance(config.get("builder"), str) or not isinstance(
        config.get("builder_kwargs"), dict
    ):
        raise ValueError(f"{path} must hold an object with 'builder' and 'builder_kwargs'")
    if not kerashub:  # a KerasHub preset's arguments were checked before the head's left
        _own_weights(path, config["builder_kwargs"])
    if not (directory / PRESET_WEIGHTS).is_file():
        raise ValueError(f"{directory} is not a preset: {PRESET_WEIGHTS} is missing")
    metadata_path = directory / PRESET_METADATA
    metadata = read_json(metadata_path) if metadata_path.is_file() else {}
    if not isinstance(metadata, dict):
        raise ValueError(f"{metadata_path} must hold a JSON object")
    return dict(config, kerashub=kerashub), metadata


def _own_weights(path, kwargs):
    """What save_preset refuses to write, from_preset refuses to read: a
    preset's weights are its own file, never another path, name or preset."""
    given = sorted({"weights", "input_tensor"} & set(kwargs))
    if given:
        raise ValueError(f"{path}: builder_kwargs may not set {given} (a preset's weights "
                         f"are its {PRESET_WEIGHTS})")


def _named_class(path, config):
    """``config``'s class (a JSON object with ``registered_name``), one of
    those ``path``'s file may name."""
    accepted = PRESET_CLASSES[path.name]
    name = config.get("registered_name") if isinstance(config, dict) else None
    if name not in accepted:
        raise ValueError(f"{path}: names the class {shown(name)}; a preset of "
                         f"keras-gresnet names {', '.join(accepted)} (another KerasHub "
                         f"model loads with keras_hub itself)")
    if not isinstance(config.get("config"), dict):
        raise ValueError(f"{path}: its 'config' must be a JSON object")
    return name


def _kerashub_config(directory, config):
    """A KerasHub preset's builder and arguments (the head's from its
    ``task.json``), every JSON file's classes checked first."""
    path = directory / PRESET_CONFIG
    _named_class(path, config)
    body = config["config"]
    kwargs = body.get("builder_kwargs")
    if not isinstance(kwargs, dict):
        raise ValueError(f"{path}: its config must hold 'builder' and 'builder_kwargs'")
    _own_weights(path, kwargs)
    kwargs = body_kwargs(kwargs)
    task_path = directory / PRESET_TASK
    if task_path.is_file():
        task = read_json(task_path)
        _named_class(task_path, task)
        nested = task["config"].get("backbone")
        if nested != config:
            raise ValueError(f"{task_path}: its backbone is not the one of {PRESET_CONFIG}")
        if not (directory / PRESET_TASK_WEIGHTS).is_file():
            raise ValueError(f"{directory} is not a preset: {PRESET_TASK} has no "
                             f"{PRESET_TASK_WEIGHTS}")
        classes = task["config"].get("num_classes")
        if not isinstance(classes, int) or isinstance(classes, bool) or classes < 1:
            raise ValueError(f"{task_path}: num_classes must be a positive integer")
        kwargs.update(classes=classes)
        preprocessor = task["config"].get("preprocessor")
        if preprocessor is not None:
            _named_class(directory / PRESET_PREPROCESSOR, preprocessor)
    else:
        kwargs.update(include_top=False)
    for name in (PRESET_PREPROCESSOR, PRESET_CONVERTER):
        if (directory / name).is_file():
            _named_class(directory / name, read_json(directory / name))
    return {"builder": body.get("builder"), "builder_kwargs": kwargs}


def _preset_model(directory):
    """The model of the preset folder ``directory``, rebuilt by its builder
    with its weights loaded exactly, carrying the card of its
    ``metadata.json``; one ``ValueError`` naming the file that is wrong
    otherwise."""
    config, metadata = _preset_files(directory)
    if config["kerashub"]:
        model = _kerashub_model(directory)
    else:
        model = load_exact(get_model(config["builder"], **config["builder_kwargs"]),
                           directory / PRESET_WEIGHTS)
    if isinstance(model, ZooModel):
        try:
            model.remember(model.builder, model.builder_kwargs, preset_card(metadata))
        except ValueError as error:
            raise ValueError(f"{directory / PRESET_METADATA}: {error}") from None
    return model


def _kerashub_model(directory):
    """The zoo model of a KerasHub preset (its classes checked by
    :func:`_preset_files`), loaded by KerasHub (``safe_mode``: no code from
    the files runs) once its weights files are checked."""
    try:
        from keras_gresnet.zoo import kerashub
    except ImportError as error:
        raise ValueError(f"{directory}: a KerasHub preset; reading it needs keras-hub "
                         f"(pip install 'keras-gresnet[keras-hub]'): {error}") from None
    task = (directory / PRESET_TASK).is_file()
    for name in (PRESET_WEIGHTS, PRESET_TASK_WEIGHTS) if task else (PRESET_WEIGHTS,):
        h5_variable_count(directory / name)  # readable, no bomb: one line naming it
    loader = kerashub.keras_hub.models.ImageClassifier if task else \
        kerashub.keras_hub.models.Backbone
    try:
        loaded = loader.from_preset(str(directory))
    except (ValueError, KeyError, TypeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{directory}: KerasHub cannot load it ({first[:200]})") from None
    return kerashub.from_kerashub(loaded, str(directory))


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
    ``config.json`` at most :data:`keras_gresnet.limits.MAX_CONFIG_BYTES`, no member a bomb)
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


def declared_input_shape(source):
    """The input shape a source's model was saved with, read from what it
    declares (a published entry, a preset's or run's config, a ``.keras``
    file's config) without loading it; ``None`` where that would take a
    download, or where it declares none."""
    if isinstance(source, (str, os.PathLike)) and source_kind(source, "weights") == "hub":
        return None
    return resolve(source, argument="weights", load=False).input_shape


def card_of(source):
    """The card of ``source`` (anything :func:`resolve` takes), without
    loading a model where the source declares it."""
    return resolve(source, argument="source", load=False).card


def load_into(model, weights, *, include_top=None, classes=None, cache_dir=None):
    """Load weights, layer by layer by name, into the built zoo ``model``.

    ``weights``: a registry entry or anything :func:`resolve` takes, or a
    bare ``.weights.h5`` (saved from this very architecture). With
    ``include_top`` and ``classes`` other than the weights', the body is
    loaded and the fresh ``predictions`` layer kept (one log line says so);
    without ``include_top`` only the body is loaded. Every weighted layer of
    the body must match by name and shape; ``model``'s input may differ from
    the weights' as :func:`keras_gresnet.weights.adapt.input_change` allows
    (another channel count: the first kernel adapted as timm's
    ``adapt_input_conv``, the card saying so). Returns ``model``."""
    head = head_layer(model)
    include_top = head is not None if include_top is None else include_top
    if include_top and head is None:
        raise ValueError(f"include_top=True but {model.name} has no 'predictions' layer")
    classes = head.units if classes is None and head is not None else classes
    if not isinstance(weights, (dict, Resolved, keras.Model)) and \
            source_kind(weights, "weights") == "weights_file":  # Keras' own loading, exact layout
        try:
            load_exact(model, Path(weights), without_top=not include_top)
        except ValueError as error:
            raise ValueError(f"{error}. A bare .weights.h5 holds no architecture: it "
                             f"loads into the model it was saved from (or that model "
                             f"with include_top=False) only") from None
        return _remember(model, {"source": str(weights)})
    resolved = resolve(weights, cache_dir=cache_dir, argument="weights")
    source = resolved.model
    adaptation = copy_weights(source, model, include_top=include_top, classes=classes,
                              what=resolved.source)
    source_head = head_layer(source)
    kept = include_top and source_head is not None and source_head.units == classes
    return _remember(model, adapted_card(head_card(resolved.card, kept), adaptation,
                                         input_hwc(model)[-1]))


def _remember(model, card):
    if isinstance(model, ZooModel):
        model.remember(model.builder, model.builder_kwargs, card)
    return model
