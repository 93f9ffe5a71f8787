"""Name -> builder registry (timm style): every zoo builder is listable and
constructible by name, its ``weights=`` is checked against the call before
anything is built, and the model it builds remembers the name and the
arguments (:class:`keras_gresnet.layers.ZooModel`). The builders register
themselves, pass their arguments on explicitly and load their weights
last."""

import fnmatch
import functools
import inspect
import re

import keras

from keras_gresnet._checks import did_you_mean
from keras_gresnet._text import shown
from keras_gresnet.layers import PixelNormalization
from keras_gresnet.layers.model import ZooModel
from keras_gresnet.weights import arguments as weights_arguments
from keras_gresnet.zoo import hub

_MODELS = {}


def paper(where, error, dataset, *, recipe_options=None, **arguments):
    """One result a paper reports for a model: ``error`` (% test error) on
    ``dataset`` at ``where`` (its table), for the builder called with these
    architecture ``arguments`` and trained with its recipe, or with these
    ``recipe_options`` added to it (``{"k_decay": True}``: GR Table 3's
    third column; a registry entry's field of that name matches it). For
    :func:`register_model`'s ``results``."""
    return dict(arguments=arguments, dataset=dataset, where=where, error=error,
                recipe_options=dict(recipe_options or {}))


def untrained(dataset, *, preprocessing, name=None, recipe=None, input_shape=None, classes=None,
              **arguments):
    """Weights a model's record names but no run here has produced yet (no
    CIFAR, no ImageNet, no GPU): listed by ``weights list`` as "not yet
    trained", with the command that would train them. ``name`` defaults
    to the builder's name, the argument values and the dataset
    (``gresnet_cifar5_cifar10``); ``recipe`` to the builder's. For
    :func:`register_model`'s ``pretrained``."""
    return dict(dataset=dataset, preprocessing=preprocessing, name=name, recipe=recipe,
                input_shape=input_shape, classes=classes, arguments=arguments)


def register_model(fn=None, *, configs=None, family=None, recipe=None, dataset=None,
                   keras_weights=False, results=(), pretrained=(), tiny=None):
    """Register a builder under its function name. Returns it wrapped, with
    the builder's signature, name and docstring, so that every call first
    completes the Keras Applications arguments from the whole call
    (:func:`application_arguments`: ``weights`` checked and resolved before
    anything is built, ``name=None`` the builder's name) and the model it
    builds (a :class:`~keras_gresnet.layers.ZooModel`) records ``builder``
    and the arguments of the call (:func:`record_call`).

    ``configs`` lists the builder's paper configurations as keyword dicts
    (e.g. GR Table 1's depths); ``[{}]`` (the defaults) when omitted.
    ``family``: for a paper model that fixes some arguments of a more
    general builder (``preact_resnet110`` of ``resnet_cifar``), that
    builder's name, which error messages point to.
    ``recipe``, ``dataset``: the paper's training recipe
    (:data:`keras_gresnet.training.RECIPES`) and dataset, what ``train``
    uses unless told otherwise; a family member takes its family's unless
    given. ``keras_weights``: the builder's ``weights`` are Keras
    Applications' own (``None``, ``"imagenet"`` or a Keras weights file,
    checked by the builder), not this package's registry.
    ``results``: what the papers report for it (:func:`paper` each);
    their arguments are paper configurations too.
    ``pretrained``: the weights its papers' recipes would give and no run
    here has produced (:func:`untrained` each).
    ``tiny``: the arguments of its smallest build (seconds), which the
    tests build every builder at.

    Everything the package knows of a model is in this one call beside its
    ``def`` (the model's record): ``scripts/release/write_catalog.py``
    regenerates the Keras-free listing, the papers' numbers by model, the
    "not yet trained" weights and the models tables from it; the weights
    registry holds only what runs produced.
    """

    def wrap(fn):
        if fn.__name__ in _MODELS:
            raise ValueError(f"model {fn.__name__!r} is already registered")

        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def build(*args, **kwargs):
            try:
                call = signature.bind(*args, **kwargs)
            except TypeError:  # a bad call: Python's own message, from the call itself
                return fn(*args, **kwargs)
            call.apply_defaults()
            application_arguments(fn, call.arguments, keras_weights=keras_weights)
            model = fn(*call.args, **call.kwargs)
            record_call(model, fn, args, kwargs)
            return model

        found = [dict(r["arguments"]) for r in results]
        listed = [dict(c) for c in (configs or [])]
        every = found + listed
        build.paper_configs = [c for i, c in enumerate(every) if c not in every[:i]] or [{}]
        build.results = [dict(r) for r in results]
        build.pretrained = [
            dict(p, name=p["name"] or weights_name(fn.__name__, p["arguments"], p["dataset"]))
            for p in pretrained]
        build.tiny = dict(tiny) if tiny is not None else None
        build.family = family
        build.keras_weights = keras_weights
        parent = _MODELS.get(family)
        build.default_recipe = recipe or getattr(parent, "default_recipe", None)
        build.default_dataset = dataset or getattr(parent, "default_dataset", None)
        if build.default_recipe is None or build.default_dataset is None:
            raise ValueError(f"model {fn.__name__!r} needs its paper's recipe= and dataset= "
                             f"(or a registered family= that has them)")
        _MODELS[fn.__name__] = build
        return build

    return wrap(fn) if fn is not None else wrap


def weights_name(builder, arguments, dataset, recipe_options=()):
    """The registry name of weights of ``builder`` called with the
    architecture ``arguments``, trained on ``dataset``: the builder, the
    argument values, the dataset (``gresnet_cifar5_cifar10``), for a
    record's untrained weights and a published run alike; a variant's
    training options before the dataset (``gresnet_cifar5_k_decay_cifar10``)."""
    variant = "".join(f"_{option}" for option in sorted(recipe_options))
    return f"{builder}{''.join(str(v) for v in arguments.values())}{variant}_{dataset}"


def application_arguments(builder, arguments, *, keras_weights=False):
    """Complete, in place, the Keras Applications arguments of the call
    ``arguments`` (every parameter of ``builder``, bound) before anything is
    built: ``weights`` resolved (:func:`keras_gresnet.weights.arguments.resolve`:
    a published name or dataset name becomes its registry entry, after the
    check that it fits these arguments; a Hugging Face preset URI
    ``hf://owner/name[@revision]`` is checked for its form, and downloaded
    only once the model is built; with ``keras_weights`` the builder checks
    Keras Applications' own) and ``name=None`` the builder's name."""
    if "weights" in arguments and not keras_weights and not hub_weights(arguments["weights"]):
        arguments["weights"] = weights_arguments.resolve(
            builder, arguments, channels_first=keras.config.image_data_format() == "channels_first")
    if "name" in arguments and arguments["name"] is None:
        arguments["name"] = builder.__name__


def hub_weights(weights):
    """Whether ``weights`` is a Hub preset URI, checked for its form (one
    line naming ``weights`` otherwise); no network call."""
    if not hub.is_hub_uri(weights):
        return False
    hub.parse_hub_uri(weights, "weights")
    return True


# Arguments that are not the architecture's: the weights are the card's
# business, a tensor is not JSON (the input shape stands for it).
_NOT_RECORDED = ("weights", "input_tensor")


def record_call(model, builder, args, kwargs):
    """Record in ``model`` (a :class:`ZooModel`; anything else is left
    alone) the call ``builder(*args, **kwargs)`` that built it, as the
    keyword arguments that rebuild it without weights: every argument with
    its default filled in, the input shape as built, a preprocessing layer's
    statistics as a dict. A call whose arguments are not plain JSON (an
    initializer object) records no builder."""
    if not isinstance(model, ZooModel):
        return
    signature = inspect.signature(builder)
    call = signature.bind(*args, **kwargs)
    call.apply_defaults()
    arguments = {}
    for key, value in call.arguments.items():
        kind = signature.parameters[key].kind
        if kind is inspect.Parameter.VAR_KEYWORD:  # a builder passing **kwargs on
            arguments.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            if value:  # not keywords: nothing rebuilds the call by name
                model.remember(None, None, model.card)
                return
        else:
            arguments[key] = value
    recorded = {k: v for k, v in arguments.items() if k not in _NOT_RECORDED}
    recorded["input_shape"] = list(model.input_shape[1:])
    layers = {layer.name: layer for layer in model.layers}
    if isinstance(layers.get("preprocessing"), PixelNormalization):
        layer = layers["preprocessing"]
        recorded["include_preprocessing"] = dict(
            method=layer.method, mean=list(layer.mean), std=list(layer.std))
    try:
        model.remember(builder.__name__, recorded, model.card)
    except ValueError:
        model.remember(None, None, model.card)


def list_models(pattern="*"):
    """Sorted names of the registered builders matching a shell wildcard
    pattern, e.g. ``list_models("*gresnet*")``."""
    if not isinstance(pattern, str):
        raise ValueError(f"pattern must be a shell wildcard string, got {shown(pattern)}")
    return sorted(name for name in _MODELS if fnmatch.fnmatchcase(name, pattern))


def model_builder(name):
    """The builder function registered as ``name``."""
    try:
        return _MODELS[name]
    except KeyError:
        hint = did_you_mean(name, list(_MODELS))
        raise ValueError(
            f"Unknown model name={shown(name)}{hint}; see keras_gresnet.zoo.list_models() "
            f"for the {len(_MODELS)} accepted names"
        ) from None


_BAD_CALL = re.compile(r"unexpected keyword argument|missing \d+ required|takes \d+ positional")
_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")


def get_model(name, /, **kwargs):
    """Build the registered model ``name`` with the builder's ``kwargs``.

    A wrong argument name is a ``ValueError`` that shows the builder's
    signature (the name-driven callers, e.g. the command line, pass
    arguments they cannot check against a Python signature themselves).
    """
    builder = model_builder(name)
    try:
        return builder(**kwargs)
    except TypeError as error:
        if not _BAD_CALL.search(str(error)):
            raise
        unexpected = _UNEXPECTED.search(str(error))
        family = _MODELS.get(getattr(builder, "family", None))
        if unexpected and family and unexpected.group(1) in inspect.signature(family).parameters:
            raise ValueError(
                f"{name} fixes {unexpected.group(1)}; use {family.__name__} to change it"
            ) from None
        raise ValueError(
            f"{error}; {name} takes {name}{inspect.signature(builder)} (see "
            f"help(keras_gresnet.zoo.{name}) for the arguments it passes on)"
        ) from None
