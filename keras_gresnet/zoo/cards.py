"""A model's card: where its weights come from, the dataset, its class
names, the pixels it takes (``preprocessing``), its test error, the
licence and the weights' digest (:data:`keras_gresnet.layers.model.CARD_FIELDS`).
One function makes a card, :func:`card`; the others say which facts of a
registry entry, a run or a preset go into it."""

from keras_gresnet.data.datasets import DATASETS
from keras_gresnet.layers.model import CARD_FIELDS
from keras_gresnet.weights.adapt import adapt_statistics


def card(**fields):
    """A card of ``fields`` (:data:`CARD_FIELDS`), those that are ``None``
    left out."""
    unknown = sorted(set(fields) - set(CARD_FIELDS))
    if unknown:
        raise TypeError(f"card() takes the fields {', '.join(CARD_FIELDS)}, not {unknown}")
    return {key: value for key, value in fields.items() if value is not None}


def entry_card(entry):
    """The card of a registry entry (its file's digest included)."""
    return card(source=entry["name"], dataset=entry.get("dataset"),
                class_names=entry.get("class_names") or None,
                preprocessing=entry.get("preprocessing"),
                test_error_percent=entry.get("test_error_percent"), license=entry.get("license"),
                weights_sha256=entry.get("sha256"))


def run_card(config, results):
    """The card of a run of ``config`` (finished: ``results`` its
    ``results.json``): its dataset, class names, the pipeline's
    preprocessing and the test error."""
    data = config.get("data") or {}
    names = data.get("class_names")
    if names is None and config.get("dataset") in DATASETS:
        names = list(DATASETS[config["dataset"]].class_names)
    return card(source=f"keras-gresnet run: {config.get('model')} on {config.get('dataset')}, "
                       f"seed {config.get('seed')}",
                dataset=config.get("dataset"), class_names=names,
                preprocessing=data.get("preprocessing"),
                test_error_percent=results.get("test_error_percent"))


def preset_card(metadata):
    """The card of a preset's ``metadata.json`` (its card fields)."""
    return card(**{key: metadata.get(key) for key in CARD_FIELDS})


def head_card(source_card, head_kept):
    """``source_card`` for a model whose head is the card's (``head_kept``),
    or a fresh one: its class names and test error are then not the
    model's."""
    kept = dict(source_card)
    if not head_kept:
        kept.pop("class_names", None)
        kept.pop("test_error_percent", None)
    return kept


def adapted_card(source_card, adaptation, channels):
    """``source_card`` for a model that took its weights at another input
    (``adaptation``: what :func:`keras_gresnet.weights.adapt.input_change`
    says, ``None`` for the same input): the adaptation said after the
    source, and the pixel statistics for the model's ``channels``
    (:func:`~keras_gresnet.weights.adapt.adapt_statistics`)."""
    if adaptation is None:
        return dict(source_card)
    adapted = dict(source_card)
    source = adapted.get("source")
    adapted["source"] = f"{source}; {adaptation}" if source else adaptation
    if adapted.get("preprocessing") is not None:
        adapted["preprocessing"] = adapt_statistics(adapted["preprocessing"], channels)
    return adapted
