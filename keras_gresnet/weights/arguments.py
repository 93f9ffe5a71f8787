"""What a builder's ``weights=`` may be, and whether published weights fit
the call: checked before anything is built or downloaded (Keras-free)."""

import inspect
import json
import os
from pathlib import Path

from keras_gresnet.papers import NOT_ARCHITECTURE
from keras_gresnet.weights.adapt import hwc, input_change
from keras_gresnet.weights.registry import (
    RECIPE_OPTIONS, get_weights, published, read_registry,
)
# Arguments that only act in training: k is loaded, BN momentum and dropout
# change nothing at inference.
_TRAINING_ONLY = frozenset({"k_initial", "bn_momentum", "dropout"})

# A zoo builder's arguments that belong to the head or the weights, not to
# the body (a KerasHub backbone; a preset's task holds the head).
NOT_BODY = ("include_top", "classes", "classifier_activation", "pooling", "weights",
            "input_tensor")


def body_kwargs(kwargs):
    """A zoo builder's arguments without those of the head and weights
    (:data:`NOT_BODY`)."""
    return {k: v for k, v in (kwargs or {}).items() if k not in NOT_BODY}

PRESET_CONFIG = "config.json"
PRESET_WEIGHTS = "model.weights.h5"
PRESET_METADATA = "metadata.json"
# A KerasHub preset's other files: the task (head) and its weights, the
# preprocessor and its image converter (KerasHub's names).
PRESET_TASK = "task.json"
PRESET_TASK_WEIGHTS = "task.weights.h5"
PRESET_PREPROCESSOR = "preprocessor.json"
PRESET_CONVERTER = "image_converter.json"
# The classes each JSON file of a preset may name at its top (checked before
# KerasHub deserialises it): this package's KerasHub classes, or KerasHub's
# generic image classifier around a zoo model.
PRESET_CLASSES = {
    PRESET_CONFIG: ("keras_gresnet>GResNetBackbone", "keras_gresnet>ZooModel"),
    PRESET_TASK: ("keras_gresnet>GResNetImageClassifier", "keras_hub>ImageClassifier"),
    PRESET_PREPROCESSOR: ("keras_gresnet>GResNetImageClassifierPreprocessor",
                          "keras_hub>ImageClassifierPreprocessor"),
    PRESET_CONVERTER: ("keras_gresnet>GResNetImageConverter", "keras_hub>ImageConverter"),
}


def canonical(value):
    """JSON's view of a value (tuples are lists), for comparisons."""
    return json.loads(json.dumps(value, default=repr))


def _architecture(builder, builder_kwargs):
    """The arguments of the builder function ``builder`` that decide its
    weights, without those given at the builder's own default."""
    params = inspect.signature(builder).parameters
    arch = {}
    for key, value in builder_kwargs.items():
        if key in NOT_ARCHITECTURE or key in _TRAINING_ONLY:
            continue
        default = params[key].default if key in params else inspect.Parameter.empty
        if default is inspect.Parameter.empty or canonical(value) != canonical(default):
            arch[key] = canonical(value)
    return arch


def describe_call(builder, kwargs):
    """``builder(k=v, ...)`` as one line, for messages."""
    return f"{builder}({', '.join(f'{k}={v!r}' for k, v in sorted(kwargs.items()))})"


def check_fits(entry, builder, builder_kwargs, input_shape=None, *, channels_first=False):
    """Refuse (``ValueError`` naming both) weights that do not fit the
    requested ``builder(**builder_kwargs)`` with ``input_shape`` (``None``:
    the entry's; ``channels_first``: a rank-3 one is in Keras'
    channels_first layout). ``entry``: a registry name or entry. Made
    before anything is downloaded.

    Arguments that only act in training (``k_initial``, ``bn_momentum``,
    ``dropout``) may differ; any other must equal the entry's (an argument
    left out counts as the builder's default). Another input shape follows
    :func:`keras_gresnet.weights.adapt.input_change` (another channel
    count; another size without the head or with other classes).
    ``builder``: the builder function (its signature gives the defaults)."""
    if isinstance(entry, str):
        entry = get_weights(entry)
    if not callable(builder):
        raise ValueError(f"builder must be a zoo builder function, got {builder!r}")
    name = builder.__name__
    trained_shape = tuple(entry["input_shape"])
    problems = []
    if name != entry["builder"]:
        problems.append(f"builder {name!r} is not {entry['builder']!r}")
    else:
        trained = _architecture(builder, entry["builder_kwargs"])
        requested = _architecture(builder, dict(builder_kwargs or {}))
        for key in sorted(trained.keys() | requested.keys()):
            want, have = requested.get(key, "(default)"), trained.get(key, "(default)")
            if want != have:
                problems.append(f"{key}={want!r} is not {key}={have!r}")
    if input_shape is not None:
        call = builder_kwargs or {}
        new_head = call.get("include_top") is False or (
            call.get("classes", entry["classes"]) != entry["classes"])
        try:
            input_change(trained_shape, hwc(input_shape, channels_first), new_head=new_head)
        except (TypeError, ValueError) as error:
            problems.append(str(error) if isinstance(error, ValueError) else
                            f"input_shape {input_shape!r} is not a tuple of sizes")
    if problems:
        asked = {k: v for k, v in (builder_kwargs or {}).items() if k not in NOT_ARCHITECTURE}
        shape = "" if input_shape is None else f" with input_shape {tuple(input_shape)}"
        raise ValueError(
            f"weights {entry['name']!r} were trained for "
            f"{describe_call(entry['builder'], entry['builder_kwargs'])} with input_shape "
            f"{trained_shape}; they do not fit the requested "
            f"{describe_call(name, asked)}{shape}: "
            f"{'; '.join(problems)}"
        )
    return entry


# The kinds of source a model comes from, as :func:`source_kind` names them
# (a ``keras.Model`` itself is the resolver's first case, "model"; an
# exported artefact declares its contract but holds no Keras model).
KINDS = ("published", "hub", "preset", "run", "keras_file", "weights_file", "artefact")
ACCEPTED = ("a published weights name, hf://owner/name, a preset folder, a run folder, a "
            ".keras file or (into a built model) a .weights.h5 file")
RUN_CONFIG, RUN_MODEL = "config.json", "model.keras"
HF_SCHEME = "hf://"  # a Hugging Face Hub preset (keras_gresnet.zoo.hub)  # a finished run folder's two files


def source_kind(source, argument="model", *, finished=True, artefact=False):
    """Which kind of source ``source`` is, one of :data:`KINDS`: the one
    place a name, a file or a folder is told apart (Keras-free: it looks at
    the string and the file system, never into a file). A folder holding
    ``model.weights.h5`` is a preset, one holding ``config.json`` and
    ``model.keras`` a finished run; a string that is no path is a
    published name. One ``ValueError`` naming ``argument`` and what would be
    accepted otherwise (an unfinished run folder says how to finish it;
    ``finished=False`` takes one as a run, for what its ``config.json``
    says). An exported artefact is ``"artefact"`` with ``artefact=True``
    (a door that reads its contract or runs it), else refused in one line
    naming the doors that take one."""
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"{argument} must be a keras.Model or {ACCEPTED}, got "
                         f"{type(source).__name__}")
    if isinstance(source, str) and source[:len(HF_SCHEME)].lower() == HF_SCHEME:
        return "hub"
    text, path = os.fspath(source), Path(source)
    exported = _artefact_format(path)
    if exported is not None:
        if artefact:
            return "artefact"
        raise ValueError(
            f"{argument}={text!r} is an exported artefact ({exported}), which holds no Keras "
            f"model: `keras-gresnet predict` and `evaluate` run it with its own runtime, "
            f"decode_predictions and data_config read its contract; {argument} here takes "
            f"{ACCEPTED}")
    if path.is_dir():
        if (path / PRESET_WEIGHTS).is_file():
            return "preset"
        if (path / RUN_CONFIG).is_file():
            if finished and not (path / RUN_MODEL).is_file():
                raise ValueError(
                    f"{argument}={text!r}: a run folder without {RUN_MODEL}, not finished (an "
                    f"unfinished run resumes with its train command)")
            return "run"
        if (path / RUN_MODEL).is_file():
            raise ValueError(f"{argument}={text!r}: a folder with {RUN_MODEL} but no "
                             f"{RUN_CONFIG}, not a run folder: pass the {RUN_MODEL} itself")
        raise ValueError(f"{argument}={text!r}: a folder holding neither {PRESET_WEIGHTS} (a "
                         f"preset) nor {RUN_CONFIG} and {RUN_MODEL} (a finished run)")
    if text.endswith(".keras") or text.endswith(".weights.h5"):
        if not path.exists():
            raise ValueError(f"{argument}={text!r}: no such file")
        return "keras_file" if text.endswith(".keras") else "weights_file"
    if isinstance(source, os.PathLike) or os.sep in text or path.exists():
        raise ValueError(f"{argument}={text!r}: no such folder, or not a .keras or "
                         f".weights.h5 file; {argument} accepts {ACCEPTED}")
    return "published"


# What `keras-gresnet export` writes, told by the file system alone (the
# export module's SUFFIXES, kept Keras-free here).
ARTEFACTS = {".onnx": "ONNX", ".tflite": "LiteRT"}


def _artefact_format(path):
    """``"ONNX"``, ``"LiteRT"`` or ``"SavedModel"`` for an exported
    artefact at ``path`` (a ``.onnx`` or ``.tflite`` file, a folder holding
    ``saved_model.pb``), else ``None``."""
    try:
        if path.is_dir():
            return "SavedModel" if (path / "saved_model.pb").is_file() else None
        return ARTEFACTS.get(path.suffix) if path.is_file() else None
    except OSError:
        return None


def check_argument(weights, builder):
    """Check a builder's ``weights=`` before anything is built: ``None``, a
    published name of ``builder``, a ``.keras`` / ``.weights.h5`` file, a
    preset or run folder (:func:`source_kind`). Returns the registry entry
    for a name, else ``None``."""
    if weights is None or _is_model(weights):
        return None
    kind = source_kind(weights, "weights") if isinstance(weights, (str, os.PathLike)) else None
    if kind not in (None, "published"):
        return None
    registry = read_registry() if isinstance(weights, str) else {}
    entry = registry.get(weights)
    if entry is None or entry["builder"] != builder:
        names = sorted(n for n, e in registry.items() if e["builder"] == builder)
        datasets = sorted({e["dataset"] for e in _by_dataset(registry, builder)})
        raise ValueError(
            f"weights={weights!r} has no registry entry for {builder}; accepted: "
            f"None{''.join(', ' + repr(n) for n in names)}, "
            + (f"a dataset name ({', '.join(map(repr, datasets))}), " if datasets else "")
            + ACCEPTED.replace('a published weights name, ', '')
        )
    return published(entry)


def _by_dataset(registry, builder):
    """The registry entries of ``builder`` that a dataset name
    (``weights="fashion_mnist"``) may pick: every one but the variants
    (trained with other options, e.g. k decay), which are asked for by name."""
    return [e for e in registry.values() if e["builder"] == builder and not e.get(RECIPE_OPTIONS)]


def _is_model(weights):
    """A built ``keras.Model`` (its weights are copied by layer name),
    recognised without importing Keras."""
    return hasattr(weights, "layers") and hasattr(weights, "get_weights")


def resolve(builder, call, *, channels_first=False):
    """Check the ``weights=`` of a public builder's call before anything is
    built or downloaded; ``builder`` is the builder function and ``call`` its
    arguments (every parameter, bound: the registered builder's wrapper passes them);
    ``channels_first``: a rank-3 ``input_shape`` is in that layout.

    Returns ``None``, the path given, or the registry entry that fits: a
    published name of ``builder``, or a dataset name (as Keras Applications
    take ``weights="imagenet"``) resolved to the published entry of that
    dataset whose architecture these arguments ask for (one trained at the
    input asked for before one whose input would be adapted).
    """
    weights = call.get("weights")
    if not isinstance(weights, str) or source_kind(weights, "weights") != "published":
        check_argument(weights, builder.__name__)
        return weights
    registry = read_registry()
    entry = registry.get(weights)
    # Not-yet-trained entries too: published() below says so, with the command.
    candidates = [e for e in _by_dataset(registry, builder.__name__) if e["dataset"] == weights]
    input_shape = call.get("input_shape")
    if input_shape is None and call.get("input_tensor") is not None:
        input_shape = tuple(call["input_tensor"].shape[1:])
    if entry is not None:
        check_fits(entry, builder, call, input_shape, channels_first=channels_first)
        return check_argument(weights, builder.__name__)
    def as_trained(entry):  # weights that fit as they are come before adapted ones
        try:
            return input_shape is None or \
                tuple(entry["input_shape"]) == hwc(input_shape, channels_first)
        except (TypeError, ValueError):
            return False

    for candidate in sorted(candidates, key=lambda e: not as_trained(e)):
        try:
            check_fits(candidate, builder, call, input_shape,
                       channels_first=channels_first)
        except ValueError:
            continue
        return published(candidate)
    if not candidates:
        return check_argument(weights, builder.__name__)  # the error naming what fits
    raise ValueError(
        f"weights={weights!r}: no published {weights} weights of {builder.__name__} fit "
        f"these arguments; published: "
        + ", ".join(f"{c['name']} ({describe_call(builder.__name__, c['builder_kwargs'])}, "
                    f"input_shape {tuple(c['input_shape'])})" for c in candidates)
    )
