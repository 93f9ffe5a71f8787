"""Name -> builder registry (timm style): every zoo builder is listable and
constructible by name."""

import contextvars
import fnmatch
import functools
import inspect
import re

_MODELS = {}
# False while a registered builder runs: builders delegate to one another
# (gresnet_cifar -> resnet_cifar), and only the outermost call sees the
# arguments as the user, and a published weights entry, spelled them.
_OUTERMOST = contextvars.ContextVar("keras_gresnet_outermost_builder", default=True)


def register_model(fn=None, *, configs=None):
    """Register a builder under its function name.

    ``configs`` lists the builder's paper configurations as keyword dicts
    (e.g. GR Table 1's depths); ``[{}]`` (the defaults) when omitted. A call
    with ``weights=`` a published name first checks that the weights fit its
    arguments (:func:`keras_gresnet.weights.check_fits`).
    """

    def wrap(fn):
        if fn.__name__ in _MODELS:
            raise ValueError(f"model {fn.__name__!r} is already registered")

        @functools.wraps(fn)
        def builder(*args, **kwargs):
            if not _OUTERMOST.get():
                return fn(*args, **kwargs)
            token = _OUTERMOST.set(False)
            try:
                if kwargs.get("weights") is not None:
                    # Published weights must fit these arguments; checked
                    # before anything is built or downloaded.
                    from keras_gresnet import weights

                    resolved = weights.check_call(fn, args, kwargs)
                    if resolved is not None:  # a dataset name -> its entry
                        kwargs["weights"] = resolved
                return fn(*args, **kwargs)
            finally:
                _OUTERMOST.reset(token)

        builder.paper_configs = [dict(c) for c in (configs or [{}])]
        _MODELS[fn.__name__] = builder
        return builder

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
        raise ValueError(
            f"{error}; {name} takes {name}{inspect.signature(builder)} (see "
            f"help(keras_gresnet.zoo.{name}) for the arguments it passes on)"
        ) from None
