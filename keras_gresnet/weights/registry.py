"""The published-weights registry: ``published_weights.json`` (package data,
so every wheel carries it), its entries validated, and the lookups by name.

Reading it imports neither Keras nor TensorFlow: ``keras-gresnet weights
list`` stays fast.
"""

import fnmatch
import json
import math
import numbers
import re
from pathlib import Path

from keras_gresnet import _catalog, files
from keras_gresnet._catalog import MODELS
from keras_gresnet.data.datasets import DATASETS
from keras_gresnet.papers import paper_result
from keras_gresnet._checks import PREPROCESSINGS
from keras_gresnet._text import printable

# The package's licence (pyproject.toml, LICENSE): its code's, and that of the
# weights it publishes (the output of its code). On every model card.
LICENSE = "Apache-2.0 (keras-gresnet's licence)"
# Fields every entry has that the registry file does not store: the
# dataset's class names and terms, the licence (what a run produced is
# stored; what is known of its dataset is read from the dataset table).
DERIVED = ("class_names", "dataset_terms", "license")

# The registry of published weight files, one entry per file: package data,
# so an installed wheel has it (as Keras Applications keep their hash table
# and timm its default_cfgs in the package).
REGISTRY_FILE = Path(__file__).resolve().parents[1] / "published_weights.json"


PUBLISHED = "published"
NOT_TRAINED = "not yet trained"
STATUSES = (PUBLISHED, NOT_TRAINED)
SUFFIXES = (".keras", ".weights.h5")

# Fields of every entry; a "published" entry also has FILE_FIELDS.
FIELDS = (
    "name", "builder", "builder_kwargs", "dataset", "input_shape", "classes",
    "class_names", "preprocessing", "command", "params", "status",
)
FILE_FIELDS = ("test_error_percent", "file", "size", "sha256", "keras_version", "date")
# The model card's own fields (optional, checked when present): the weights'
# licence, the training data's terms, and how long and with which seed they
# were trained.
CARD_FIELDS = ("license", "dataset_terms", "epochs", "seed")
# Optional: the files this entry was published as before (each {"sha256",
# "size"}), holding the same weights to the bit (scripts/release/publish_weights.py
# --republish checks it): such a file is still known as the entry's.
EARLIER = "earlier_files"
# Optional: the training options that make an entry a variant of its
# architecture's weights (GR Table 3's k decay: ``{"k_decay": true}``). A
# variant is asked for by its name; a dataset name (``weights="fashion_mnist"``)
# never picks one.
RECIPE_OPTIONS = "recipe_options"
# The options a variant may name, with what a model card says of each.
VARIANTS = {"k_decay": "GR's k decay: the weight decay on the gates k too (GR Table 3's "
                       "third column)"}

# Set by the entry's own fields (or by loading), never by its builder_kwargs.
_RESERVED = frozenset({"include_top", "weights", "input_tensor", "input_shape", "classes"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class WeightsError(ValueError):
    """A weight file that cannot be had (not cached, download failed) or does
    not verify (sha256)."""


def _validate(entry, where):
    """Check one registry entry; ``ValueError`` naming the entry and field."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: an entry must be a JSON object, got {entry!r}")
    name = entry.get("name")
    where = f"{where} ({name!r})" if isinstance(name, str) else where
    status = entry.get("status")
    required = FIELDS + (FILE_FIELDS if status == PUBLISHED else ())
    for field in required:
        if field not in entry or entry[field] is None:
            raise ValueError(f"{where}: field {field!r} is missing")

    def bad(field, what):
        raise ValueError(f"{where}: field {field!r} must be {what}, got {entry[field]!r}")

    for field in ("license", "dataset_terms"):
        if field in entry and (not isinstance(entry[field], str) or not entry[field]):
            bad(field, "a non-empty string")
    options = entry.get(RECIPE_OPTIONS)
    if options is not None and (not isinstance(options, dict) or not options or any(
            key not in VARIANTS or value is not True for key, value in options.items())):
        raise ValueError(f"{where}: field {RECIPE_OPTIONS!r} must be an object of training "
                         f"options set to true, each one of {sorted(VARIANTS)}, got {options!r}")
    for field, low in (("epochs", 1), ("seed", 0)):
        if field in entry and (isinstance(entry[field], bool) or not isinstance(
                entry[field], int) or entry[field] < low):
            bad(field, f"an integer >= {low}")

    if not isinstance(name, str) or not _NAME.match(name):
        bad("name", "a name of letters, digits, '_', '.' and '-'")
    if status not in STATUSES:
        bad("status", f"one of {STATUSES}")
    for field in ("builder", "dataset", "command"):
        if not isinstance(entry[field], str) or not entry[field]:
            bad(field, "a non-empty string")
    if not isinstance(entry["builder_kwargs"], dict):
        bad("builder_kwargs", "an object of builder arguments")
    reserved = sorted(_RESERVED & set(entry["builder_kwargs"]))
    if reserved:
        bad("builder_kwargs", f"the architecture arguments only (not {reserved}: "
            f"the entry's own fields give them)")
    shape = entry["input_shape"]
    if not isinstance(shape, list) or not shape or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
    ):
        bad("input_shape", "a list of positive sizes, e.g. [28, 28, 1]")
    for field in ("classes", "params"):
        if isinstance(entry[field], bool) or not isinstance(entry[field], int) or entry[field] < 1:
            bad(field, "an integer >= 1")
    # An untrained entry may leave what only training decides: the class
    # names of its dataset's files (ImageNet's) and the training statistics.
    untrained = status == NOT_TRAINED
    names = entry["class_names"]
    if not isinstance(names, list) or len(names) not in (
        (entry["classes"], 0) if untrained else (entry["classes"],)
    ) or not all(isinstance(n, str) for n in names):
        bad("class_names", f"a list of {entry['classes']} strings (one per class)")
    preprocessing = entry["preprocessing"]
    if untrained and isinstance(preprocessing, dict) and set(preprocessing) == {"method"}:
        if preprocessing["method"] not in PREPROCESSINGS:
            bad("preprocessing", f"a method in {PREPROCESSINGS}")
    elif not isinstance(preprocessing, dict) or set(preprocessing) != {"method", "mean", "std"}:
        bad("preprocessing", "an object with method, mean and std (Preprocessing.get_config())")
    elif not _valid_statistics(preprocessing):
        bad("preprocessing", f"a method in {PREPROCESSINGS} with one finite mean and one "
            f"std > 0 per channel")
    if status == NOT_TRAINED:
        given = [f for f in FILE_FIELDS if entry.get(f) is not None]
        if given:
            raise ValueError(
                f"{where}: a {NOT_TRAINED!r} entry carries no file; drop {given} "
                f"or set status to {PUBLISHED!r}"
            )
        return entry
    file = entry["file"]
    if not isinstance(file, str) or Path(file).name != file or not file.endswith(SUFFIXES):
        bad("file", f"a bare file name ending in {' or '.join(SUFFIXES)}")
    if not isinstance(entry["sha256"], str) or not _SHA256.match(entry["sha256"]):
        bad("sha256", "64 lowercase hex digits")
    if isinstance(entry["size"], bool) or not isinstance(entry["size"], int) or entry["size"] < 1:
        bad("size", "the file size in bytes")
    error = entry["test_error_percent"]
    if isinstance(error, bool) or not isinstance(error, numbers.Real) or not 0 <= error <= 100:
        bad("test_error_percent", "a number in [0, 100]")
    for field in ("keras_version", "date"):
        if not isinstance(entry[field], str) or not entry[field]:
            bad(field, "a non-empty string")
    earlier = entry.get(EARLIER, [])
    if not isinstance(earlier, list) or not all(
            isinstance(e, dict) and set(e) == {"sha256", "size"} and isinstance(e["sha256"], str)
            and _SHA256.match(e["sha256"]) and isinstance(e["size"], int)
            and not isinstance(e["size"], bool) and e["size"] >= 1 for e in earlier):
        bad(EARLIER, 'a list of {"sha256": 64 hex digits, "size": bytes}')
    return entry


def _valid_statistics(preprocessing):
    """``data.Preprocessing.get_config()``'s form, checked without importing
    TensorFlow."""
    mean, std = preprocessing["mean"], preprocessing["std"]

    def numbers_list(values):
        return isinstance(values, list) and values and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            for v in values)

    return (preprocessing["method"] in PREPROCESSINGS and numbers_list(mean)
            and numbers_list(std) and len(mean) == len(std) and all(v > 0 for v in std))


def completed(entry):
    """``entry`` with the fields the registry file does not store
    (:data:`DERIVED`) filled in: its dataset's class names and terms (a
    dataset this package does not know, e.g. ImageNet's, leaves none) and
    the package's licence. A value the entry states is kept."""
    if not isinstance(entry, dict):
        return entry
    info = DATASETS.get(entry.get("dataset"))
    derived = dict(class_names=list(info.class_names) if info else [], license=LICENSE)
    if info is not None and info.terms:
        derived["dataset_terms"] = info.terms
    return {**derived, **entry}


def _stored(entry):
    """``entry`` as the registry file stores it: without the fields
    :func:`completed` gives it back equal."""
    derived = completed({k: v for k, v in entry.items() if k not in DERIVED})
    return {k: v for k, v in entry.items() if k not in DERIVED or derived.get(k) != v}


def read_registry():
    """``{name: entry}``: the published entries of :data:`REGISTRY_FILE`
    and the "not yet trained" ones the models' records name
    (``_catalog.UNTRAINED``), each :func:`completed` and validated."""
    path = Path(REGISTRY_FILE)
    entries = []
    if path.exists():
        try:
            entries = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: must hold a JSON list of entries, got {type(entries).__name__}")
    registry = {}
    for i, entry in enumerate(entries):
        entry = _validate(completed(entry), f"{path}: entry {i}")
        if entry["name"] in registry:
            raise ValueError(f"{path}: entry {i}: name {entry['name']!r} appears twice")
        registry[entry["name"]] = entry
    for entry in _catalog.UNTRAINED:
        if entry["name"] not in registry:  # published since: the file's entry
            registry[entry["name"]] = _validate(completed(dict(entry)), "a model's record")
    return registry


def write_registry(entries):
    """Validate ``entries`` (a list of entry dicts, unique names) and write
    the published ones, sorted by name, to :data:`REGISTRY_FILE` atomically,
    as :func:`_stored` (the "not yet trained" ones are the models' records')."""
    names = set()
    for i, entry in enumerate(entries):
        _validate(completed(entry), f"entry {i}")
        if entry["name"] in names:
            raise ValueError(f"entry {i}: name {entry['name']!r} appears twice")
        names.add(entry["name"])
    files.write_text(Path(REGISTRY_FILE), json.dumps(
        [_stored(e) for e in sorted(entries, key=lambda e: e["name"])
         if e["status"] == PUBLISHED], indent=2) + "\n")


def list_weights(pattern="*"):
    """Registry entries (dicts) whose name matches the shell wildcard
    ``pattern``, sorted by name, e.g. ``list_weights("*mlp*")``."""
    if not isinstance(pattern, str):
        raise ValueError(f"pattern must be a shell wildcard string, got {pattern!r}")
    registry = read_registry()
    return [registry[n] for n in sorted(registry) if fnmatch.fnmatchcase(n, pattern)]


def get_weights(name):
    """The registry entry ``name``."""
    registry = read_registry()
    if name in registry:
        return registry[name]
    close = [n for n in sorted(registry) if isinstance(name, str) and name.lower() in n.lower()]
    accepted = ", ".join(map(repr, close or sorted(registry))) or "none yet"
    raise ValueError(
        f"Unknown weights name={name!r}; {'similar' if close else 'published'}: {accepted} "
        f"(see keras_gresnet.weights.list_weights() or `keras-gresnet weights list`)"
    )


# How a picture of another size reaches a model's input: the picture
# folders' rule (keras_gresnet.data.folders), which predict, evaluate --dataset
# folder and finetune on a folder apply.
INTERPOLATION = "bilinear"
CROP = "centre crop to the input's aspect ratio"


def data_config(entry):
    """What the model of registry entry ``entry`` (a dict or a name) takes,
    as timm's ``pretrained_cfg`` data fields, from the entry alone (no
    Keras): ``input_size`` (height, width, channels), ``channels``
    (``"grey"``/``"RGB"``), ``layout``, ``pixels`` (what every command and
    exported artefact takes), the ``preprocessing`` method with its ``mean``
    and ``std`` (of pixels / 255, per channel; ``None`` until trained: they
    are fitted on the training split), what ``model.predict`` takes, and
    ``interpolation`` and ``crop`` for pictures of another size."""
    if isinstance(entry, str):
        entry = get_weights(entry)
    shape = list(entry["input_shape"])
    preprocessing = entry["preprocessing"]
    picture = len(shape) == 3  # else a flat input: no picture to resize
    return dict(
        input_size=shape,
        channels={1: "grey", 3: "RGB"}.get(shape[-1], f"{shape[-1]} channels") if picture
        else None,
        layout="NHWC" if picture else "flat", pixels="raw 0-255",
        preprocessing=preprocessing["method"],
        mean=preprocessing.get("mean"), std=preprocessing.get("std"),
        model_input="(pixels / 255 - mean) / std (keras_gresnet.preprocess_input)",
        interpolation=INTERPOLATION if picture else None, crop=CROP if picture else None,
        classes=entry["classes"],
    )


def _data_config_line(entry):
    config = data_config(entry)
    size = "x".join(map(str, config["input_size"]))
    layout = f"{config['channels']}, {config['layout']}" if config["channels"] else "flat"

    def numbers(values):
        return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"

    statistics = (f"mean {numbers(config['mean'])}, std {numbers(config['std'])} of pixels / 255"
                  if config["mean"] is not None else "statistics fitted on the training split")
    resize = (f"; another size: {config['crop']}, then {config['interpolation']} resize"
              if config["crop"] else "")
    return (f"- data config: {size} ({layout}), {config['classes']} classes; every command "
            f"and export takes raw 0-255 pixels; the Keras model takes (pixels / 255 - mean) / "
            f"std, preprocessing {config['preprocessing']!r}, {statistics} "
            f"(`keras_gresnet.preprocess_input`){resize}")




def model_card(entry):
    """The model card of a registry entry, as Markdown: what it is, how it
    was trained, how well it does, the file, and the licences; the entry's
    texts :func:`~keras_gresnet._text.printable` (a licence or command with a
    newline or an escape sequence cannot forge a line of the card)."""
    entry = {key: printable(value) if isinstance(value, str) else value
             for key, value in entry.items()}

    def field(key, shown=None):
        value = entry.get(key)
        return "not recorded" if value is None else (shown or str)(value)

    kwargs = ", ".join(f"{k}={v!r}" for k, v in sorted(entry["builder_kwargs"].items()))
    lines = [
        f"# {entry['name']}",
        "",
        f"- model: `keras_gresnet.zoo.{entry['builder']}({kwargs})`, "
        f"{entry['params']:,} trainable parameters",
        f"- architecture: {MODELS.get(entry['builder'], 'not recorded')}",
        f"- in the paper: {paper_result(entry['builder'], entry['builder_kwargs'], entry['dataset'], entry.get(RECIPE_OPTIONS)) or 'not reported'}",
        *([f"- trained with: {'; '.join(VARIANTS[o] for o in sorted(entry[RECIPE_OPTIONS]))}"]
          if entry.get(RECIPE_OPTIONS) else []),
        f"- data: {entry['dataset']}",
        _data_config_line(entry),
        f"- status: {entry['status']}",
        f"- test error: {field('test_error_percent', lambda v: f'{v:.2f}%')} "
        f"(the dataset's full test set)",
        (f"- trained: {_count(entry['epochs'], 'epoch')}, seed {field('seed')}, by "
         f"`{entry['command']}`" if entry.get("epochs") is not None
         else f"- trained: not yet (to train it: `{entry['command']}`)"),
        f"- file: {field('file')}, {field('size', lambda v: f'{v:,} bytes')}, "
        f"sha256 {field('sha256')}, Keras {field('keras_version')}, {field('date')}",
        f"- licence of the weights: {field('license')}",
        f"- licence of the code: {LICENSE}",
        f"- training data's terms: {field('dataset_terms')}",
    ]
    return "\n".join(lines) + "\n"


def published(entry):
    """``entry`` if it has a file to load, else a ``ValueError`` naming the
    command that would produce it."""
    if entry["status"] != PUBLISHED:
        raise ValueError(
            f"weights {entry['name']!r} are {NOT_TRAINED}: there is no file to load. "
            f"They are produced by: {entry['command']}"
        )
    return entry


def _count(n, noun):
    """``"1 epoch"``, ``"2 epochs"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
