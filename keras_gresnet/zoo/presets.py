"""Preset folders (KerasHub style: the builder's arguments, its weights and
the card, locally or in a Hugging Face repository ``hf://owner/name``):
written and uploaded, and KerasHub's ``from_preset`` with the builders'
overrides. Reading any source, presets included, is
:mod:`keras_gresnet.zoo.resolver`'s job."""

import inspect
import math
import os
import shutil
import tempfile
from pathlib import Path

import keras

from keras_gresnet._version import __version__
from keras_gresnet.files import read_json, write_json, write_text
from keras_gresnet.layers.model import ZooModel, model_card
from keras_gresnet.weights import PRESET_METADATA, PRESET_WEIGHTS, published
from keras_gresnet.weights.arguments import canonical, describe_call
from keras_gresnet.weights.loading import copy_weights, head_layer
from keras_gresnet.zoo import hub
from keras_gresnet.zoo.builders import get_model, model_builder
from keras_gresnet.zoo.cards import head_card, preset_card
from keras_gresnet.zoo.resolver import resolve


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
        twin.remember(twin.builder, twin.builder_kwargs, preset_card(metadata or {}))
    config = dict(builder=builder, builder_kwargs=kwargs, keras_version=keras.__version__,
                  keras_gresnet_version=__version__)
    return twin, config, metadata or {}


def _kerashub_module():
    try:
        from keras_gresnet.zoo import kerashub
    except ImportError as error:
        raise ImportError(f"a preset is a KerasHub preset: writing one needs keras-hub "
                          f"(pip install 'keras-gresnet[keras-hub]'): {error}") from None
    return kerashub


def _write_kerashub(folder, twin, config, metadata):
    """The KerasHub preset of ``twin`` in the new folder ``folder``:
    KerasHub's own files (the backbone's ``config.json`` and weights, the
    task and its head's weights where the model has a head, the
    preprocessor and its image converter) and ``metadata.json`` holding
    KerasHub's fields and the model's card."""
    kerashub = _kerashub_module()
    preprocessing = metadata.get("preprocessing")
    if preprocessing is None and isinstance(config["builder_kwargs"].get(
            "include_preprocessing"), dict):
        preprocessing = config["builder_kwargs"]["include_preprocessing"]
    model, preprocessor = kerashub.to_kerashub(twin, preprocessing)
    model.save_to_preset(str(folder))
    if not hasattr(model, "preprocessor"):  # a backbone alone: its pixels too
        preprocessor.save_to_preset(str(folder))
    written = read_json(folder / PRESET_METADATA)
    write_json(folder / PRESET_METADATA, {**written, **metadata,
                                          "keras_gresnet_version": __version__})


def _write_preset(directory, twin, config, metadata, *, overwrite):
    if directory.exists() and not overwrite:
        raise ValueError(f"{directory} exists; pass overwrite=True to replace the preset")
    _kerashub_module()  # nothing written without it
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.tmp{os.getpid()}")
    old = directory.with_name(f".{directory.name}.old{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        _write_kerashub(tmp, twin, config, metadata)
        if directory.exists():
            os.replace(directory, old)
            try:
                os.replace(tmp, directory)
            except BaseException:
                os.replace(old, directory)  # the old preset stays whole
                raise
        else:
            os.replace(tmp, directory)
    except OSError as error:
        if error.filename is None or Path(error.filename).parent != tmp:
            raise
        # a full disk while the folder is written: name the preset's file
        raise OSError(error.errno, error.strerror, str(directory / Path(error.filename).name)) \
            from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return directory


def _upload(uri, folder, model, *, overwrite, argument):
    """Write the card of the preset ``folder`` (ours, temporary) into it and
    upload it to ``uri``."""
    repo_id, _ = hub.parse_hub_uri(uri)
    card = hub.preset_card(folder, repo_id=repo_id, builder=model.builder,
                           builder_kwargs=_not_default(model.builder, model.builder_kwargs),
                           params=model.count_params(),
                           trainable_params=_trainable(model))
    write_text(folder / hub.README, card)
    return hub.upload_folder(uri, folder, overwrite=overwrite, argument=argument,
                             commit_message=f"Upload preset {model.name} (keras-gresnet {__version__})")


def _not_default(builder, kwargs):
    """``kwargs`` without those at the builder's own default (and its name):
    the call a reader would write."""
    parameters = inspect.signature(model_builder(builder)).parameters
    return {k: v for k, v in kwargs.items() if k != "name" and (
        k not in parameters or canonical(parameters[k].default) != canonical(v))}


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
    if not (Path(preset) / PRESET_WEIGHTS).is_file():
        raise ValueError(f"{preset} is not a preset: {PRESET_WEIGHTS} is missing")
    model = resolve(preset, argument="preset").model
    with tempfile.TemporaryDirectory(prefix="keras-gresnet-preset-") as tmp:
        folder = Path(tmp)
        for name in hub.PRESET_FILES:
            if (Path(preset) / name).is_file():
                shutil.copyfile(Path(preset) / name, folder / name)
        return _upload(uri, folder, model, overwrite=overwrite, argument="uri")


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
    and keeps a fresh head; another ``input_shape`` as
    :func:`keras_gresnet.weights.adapt.input_change` allows (another
    channel count: the first kernel adapted as timm's ``adapt_input_conv``
    and the pixel statistics with it; another height and width without the
    head or with other classes, into a conv net), the card saying so."""
    from keras_gresnet.weights.adapt import adapt_statistics, hwc, input_change
    from keras_gresnet.weights.loading import input_hwc, takes_any_size
    from keras_gresnet.zoo.cards import adapted_card

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
    old_head = head_layer(model)
    try:  # a shape that is no tuple of sizes: the builder's own one line
        spatial = takes_any_size(model)  # a conv net reads input_shape in Keras' layout
        wanted = hwc(overrides["input_shape"], spatial and
                     keras.config.image_data_format() == "channels_first")
    except (KeyError, TypeError, ValueError):
        wanted = None
    if wanted is not None:  # the builders' rule, before anything is built
        new_head = kwargs.get("include_top", True) is False or old_head is None or \
            kwargs.get("classes") != old_head.units
        try:
            input_change(input_hwc(model), wanted, new_head=new_head, spatial=spatial)
        except ValueError as error:
            raise ValueError(f"preset={resolved.source!r}: {error}") from None
        statistics = kwargs.get("include_preprocessing")
        if isinstance(statistics, dict):  # the model's own normalisation, per channel
            kwargs["include_preprocessing"] = adapt_statistics(statistics, wanted[-1])
    rebuilt = get_model(model.builder, **kwargs)
    head = head_layer(rebuilt)
    adaptation = copy_weights(model, rebuilt, include_top=head is not None,
                              classes=head.units if head is not None else None,
                              what=resolved.source)
    kept = head is not None and old_head is not None and head.units == old_head.units
    card = adapted_card(head_card(resolved.card, kept), adaptation, input_hwc(rebuilt)[-1])
    return rebuilt.remember(rebuilt.builder, rebuilt.builder_kwargs, card)


def weights_preset(name, directory, *, overwrite=False, cache_dir=None):
    """The published registry entry ``name`` as a preset (a folder or
    ``hf://owner/name``, as :func:`keras_gresnet.zoo.save_preset`), its
    metadata naming the entry and its file's sha256: on the Hub its README
    is the entry's model card plus the preset's facts."""
    declared = resolve(name, argument="name", load=False)
    if declared.kind != "published":
        raise ValueError(f"name={name!r} is not a published weights name; "
                         f"`keras-gresnet weights list` shows them")
    entry = published(declared.entry)
    if hub.is_hub_uri(directory):
        hub.check_upload_uri(directory, "directory")
        hub.hub_module()
    resolved = resolve(declared, cache_dir=cache_dir, argument="name")
    builder, kwargs = resolved.model.builder, resolved.model.builder_kwargs
    return save_preset(resolved.model, directory, builder=builder, builder_kwargs=kwargs,
                       metadata=dict(resolved.card, weights=entry["name"]), overwrite=overwrite)
