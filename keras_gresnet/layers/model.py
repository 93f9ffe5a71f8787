"""The zoo's model class: a Keras functional model that remembers how it was
built and what its weights are, in its config, so that a ``.keras`` file, a
preset and a fine-tuned copy carry it along (KerasHub's ``Backbone`` keeps
its constructor arguments in its config the same way).

``builder`` and ``builder_kwargs`` rebuild the architecture by name
(:func:`keras_gresnet.zoo.get_model`, no weights). ``card`` describes the
weights: where they come from, the dataset, its class names, the
preprocessing the net expects, the test error and the licence. Both are
plain JSON; loading a model never runs code from them.
"""

import json

import keras

from keras_gresnet.layers.merges import PACKAGE

# What a card may hold (anything else is refused: a card is read by people
# and by decode_predictions, never executed).
CARD_FIELDS = ("source", "dataset", "class_names", "preprocessing", "test_error_percent",
               "license", "weights_sha256")


def _json(value, argument):
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{argument} must be plain JSON, got {value!r} ({error})") from None


def check_card(card):
    """``card`` as a JSON dict of :data:`CARD_FIELDS`, checked: class names
    are strings."""
    if card is None:
        return {}
    if not isinstance(card, dict):
        raise ValueError(f"card must be a dict of {', '.join(CARD_FIELDS)}, got {card!r}")
    unknown = sorted(set(card) - set(CARD_FIELDS))
    if unknown:
        raise ValueError(f"card: unknown fields {unknown}; accepted: {', '.join(CARD_FIELDS)}")
    names = card.get("class_names")
    if names is not None and (not isinstance(names, (list, tuple))
                              or not all(isinstance(n, str) for n in names)):
        raise ValueError(f"card: class_names must be a list of strings, got {names!r}")
    return _json({k: v for k, v in card.items() if v is not None}, "card")


@keras.saving.register_keras_serializable(package=PACKAGE)
class ZooModel(keras.Model):
    """A functional ``keras.Model`` with :attr:`builder`,
    :attr:`builder_kwargs` and :attr:`card` in its config.

    Built as ``ZooModel(inputs, outputs, name=..., builder=..., ...)``, as
    a functional ``keras.Model``; everything else is Keras' own.
    """

    def __init__(self, *args, builder=None, builder_kwargs=None, card=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.remember(builder, builder_kwargs, card)

    def remember(self, builder=None, builder_kwargs=None, card=None):
        """Set the record: ``builder`` (a registered name or ``None``), its
        ``builder_kwargs`` and the ``card`` (see :data:`CARD_FIELDS`)."""
        if builder is not None and not isinstance(builder, str):
            raise ValueError(f"builder must be a registered model name, got {builder!r}")
        if builder_kwargs is not None and not isinstance(builder_kwargs, dict):
            raise ValueError(f"builder_kwargs must be a dict, got {builder_kwargs!r}")
        # Kept as JSON text: Keras tracks a dict attribute of a layer (as a
        # TrackedDict), and a record is a value, not state.
        self._builder = builder
        self._builder_kwargs = json.dumps(_json(builder_kwargs or {}, "builder_kwargs"))
        self._card = json.dumps(check_card(card))
        return self

    @property
    def builder(self):
        """The registered builder's name, or ``None``."""
        return self._builder

    @property
    def builder_kwargs(self):
        """The builder's arguments (a new dict)."""
        return json.loads(self._builder_kwargs)

    @property
    def card(self):
        """What the weights are (a new dict): :data:`CARD_FIELDS`."""
        return json.loads(self._card)

    def get_config(self):
        return {**super().get_config(), "builder": self._builder,
                "builder_kwargs": self.builder_kwargs, "card": self.card}


def model_card(model):
    """The card of ``model`` (``{}`` for a model that is not a
    :class:`ZooModel`)."""
    return model.card if isinstance(model, ZooModel) else {}
