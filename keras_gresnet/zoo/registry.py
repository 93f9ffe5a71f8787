"""Name -> builder registry (timm style): every zoo builder is listable and
constructible by name. It depends on nothing; the builders register
themselves and call their weight checks and loading explicitly."""

import fnmatch
import inspect
import re

_MODELS = {}


def register_model(fn=None, *, configs=None, family=None):
    """Register a builder under its function name; returns it unchanged.

    ``configs`` lists the builder's paper configurations as keyword dicts
    (e.g. GR Table 1's depths); ``[{}]`` (the defaults) when omitted.
    ``family``: for a paper model that fixes some arguments of a more
    general builder (``preact_resnet110`` of ``resnet_cifar``), that
    builder's name, which error messages point to.
    """

    def wrap(fn):
        if fn.__name__ in _MODELS:
            raise ValueError(f"model {fn.__name__!r} is already registered")
        fn.paper_configs = [dict(c) for c in (configs or [{}])]
        fn.family = family
        _MODELS[fn.__name__] = fn
        return fn

    return wrap(fn) if fn is not None else wrap


def list_models(pattern="*"):
    """Sorted names of the registered builders matching a shell wildcard
    pattern, e.g. ``list_models("*gresnet*")``."""
    if not isinstance(pattern, str):
        raise ValueError(f"pattern must be a shell wildcard string, got {pattern!r}")
    return sorted(name for name in _MODELS if fnmatch.fnmatchcase(name, pattern))


def model_builder(name):
    """The builder function registered as ``name``."""
    try:
        return _MODELS[name]
    except KeyError:
        close = list_models(f"*{name}*") if isinstance(name, str) else []
        hint = f" similar: {', '.join(close)};" if close else ""
        raise ValueError(
            f"Unknown model name={name!r};{hint} see keras_gresnet.zoo.list_models() "
            f"for the {len(_MODELS)} accepted names"
        ) from None


_BAD_CALL = re.compile(r"unexpected keyword argument|missing \d+ required|takes \d+ positional")
_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")


def get_model(name, **kwargs):
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
