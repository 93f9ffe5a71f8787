"""The papers' own numbers that the package prints beside its own (model
cards, ``weights list``, reproduction tables): GR's tables that several
models share (MNIST Tables 1-2, CIFAR n=5 Table 3), and the lookup of what
a paper reports for a model configuration, from the results each model's
record declares (``register_model(results=...)`` beside its builder,
copied Keras-free into ``_catalog.PAPER_RESULTS``). Public, for scripts
and users."""

from keras_gresnet import _catalog

# GR Table 1: MNIST test error (%) per depth d, for the plain, ResNet and
# GResNet MLPs; GR Table 2: the GResNet's mean k per depth.
GR_MNIST_ERROR = {
    2: {"plain": 2.29, "resnet": 2.20, "gresnet": 2.17},
    10: {"plain": 2.22, "resnet": 1.64, "gresnet": 1.60},
    20: {"plain": 2.21, "resnet": 1.61, "gresnet": 1.57},
    50: {"plain": 60.37, "resnet": 1.62, "gresnet": 1.48},
    100: {"plain": 90.20, "resnet": 1.50, "gresnet": 1.26},
}
GR_MNIST_MEAN_K = {2: 5.58, 10: 2.54, 20: 1.73, 50: 1.04, 100: 0.67}
# GR Table 3: CIFAR-10 test error (%) of the n=5 nets (32 layers): the
# original pre-activation ResNet, gated (GResNet), gated with weight decay on k.
GR_CIFAR10_N5_ERROR = {"resnet": 7.16, "gresnet": 6.67, "gresnet_k_decay": 7.04}


# Every result a paper reports for a model is declared in the model's record
# (``register_model(results=...)`` beside its builder, these tables referenced
# there); ``_catalog.PAPER_RESULTS`` is its Keras-free copy, by builder.
_DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "imagenet": "ImageNet",
                  "mnist": "MNIST"}
# Builder arguments that pick no architecture (what a weight file fits or a
# paper reports): the Keras Applications arguments, the input's own
# normalisation (no weights), and a recorded call's builder.
NOT_ARCHITECTURE = frozenset({"include_top", "weights", "input_tensor", "input_shape", "pooling",
                              "classes", "classifier_activation", "include_preprocessing",
                              "name", "builder"})


def plain(value):
    """``value`` with every list or tuple a tuple (hashable, comparable)."""
    return tuple(plain(v) for v in value) if isinstance(value, (list, tuple)) else value


def architecture(builder, builder_kwargs):
    """``builder_kwargs`` without the arguments that pick no architecture
    and without those equal to the builder's defaults: the form in which
    :data:`keras_gresnet._catalog.PAPER_RESULTS` holds a configuration."""
    defaults = dict(_catalog.MODEL_DEFAULTS.get(builder, ()))
    missing = object()
    return {k: plain(v) for k, v in builder_kwargs.items()
            if k not in NOT_ARCHITECTURE and plain(v) != defaults.get(k, missing)}


def paper_error(builder, builder_kwargs, dataset, recipe_options=None):
    """``(where, test error %)`` a paper reports for ``builder`` with these
    architecture arguments on ``dataset``, trained with these
    ``recipe_options`` (a registry entry's field: ``{"k_decay": True}``;
    none: the architecture's own recipe), or ``None``."""
    wanted = architecture(builder, builder_kwargs)
    options = dict(recipe_options or {})
    for arguments, result_dataset, where, error, result_options in \
            _catalog.PAPER_RESULTS.get(builder, ()):
        if result_dataset == dataset and dict(arguments) == wanted \
                and dict(result_options) == options:
            return where, error
    return None


def _reported(builder, builder_kwargs, dataset, recipe_options=None):
    """The line for a model some paper reports on some dataset, trained here
    on ``dataset``; a variant's (``recipe_options``) with the paper's result
    without them beside it."""
    for paper_dataset in ("cifar10", "cifar100", "imagenet"):
        found = paper_error(builder, builder_kwargs, paper_dataset, recipe_options)
        if found is None:
            continue
        where, error = found
        result = f"{where} ({_DATASET_NAMES[paper_dataset]}): {error:.2f}% test error"
        base = paper_error(builder, builder_kwargs, paper_dataset) if recipe_options else None
        if base is not None:
            result += f" ({base[1]:.2f}% without)"
        if paper_dataset == dataset:
            return result
        if dataset not in ("cifar10", "cifar100", "imagenet"):
            return f"{result}; this entry is trained on {dataset}"
    return None


def paper_result(builder, builder_kwargs, dataset, recipe_options=None):
    """Where the paper reports this model: a one-line Markdown string, e.g.
    ``"GR Table 1 (MNIST, d=20): 1.57% test error"``; ``None`` when no paper
    reports its architecture (the results of its record, the GR tables above).
    ``recipe_options``: a registry entry's training options (``{"k_decay":
    True}``: GR Table 3's third column, which the n=5 GResNet's record
    declares); a paper reports a variant only where its record says so."""
    if recipe_options:
        return _reported(builder, builder_kwargs, dataset, recipe_options)
    reported = _reported(builder, builder_kwargs, dataset)
    if reported is not None:
        return reported
    kind = builder[:-len("_mlp")] if builder.endswith("_mlp") else None
    depth = builder_kwargs.get("depth")
    if kind not in ("plain", "resnet", "gresnet", "gated_plain"):
        return None
    if kind == "gated_plain":
        return ("GR's gated plain net (`u = g(k) f(x) + (1 - g(k)) x`); GR Table 1 "
                "reports no error for it")
    row = GR_MNIST_ERROR.get(depth)
    if row is None:
        return f"GR Table 1's architecture at d={depth}, a depth GR does not report"
    result = f"GR Table 1 (MNIST, d={depth}): {row[kind]:.2f}% test error"
    if kind == "gresnet":
        result += f", mean k {GR_MNIST_MEAN_K[depth]} (GR Table 2)"
    if dataset != "mnist":
        result += f"; GR reports MNIST only, this entry is trained on {dataset}"
    return result
