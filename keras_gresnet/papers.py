"""The papers' own numbers that the package prints beside its own (model
cards, ``weights list``, reproduction tables), in one place: GR's MNIST
results (GR Tables 1 and 2), its CIFAR n=5 and Wide GResNet results (GR
Tables 3-4) and HE's CIFAR and ImageNet results (HE Tables 2, 3 and 5).
Public, for scripts and users."""

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


# Every other model a paper reports, by builder and the architecture
# arguments that pick the configuration: (builder, arguments, dataset) ->
# (where, test error %). The CIFAR nets' errors are top-1 test error on the
# dataset's test set; the ImageNet ones single-crop top-1 at HE's 320 crop.
PAPER_ERRORS = {
    ("preact_resnet110", (), "cifar10"): ("HE Table 2", 6.37),
    ("resnet110", (), "cifar10"): ("HE Table 2", 6.61),
    ("preact_resnet164", (), "cifar10"): ("HE Table 2", 5.46),
    ("resnet164", (), "cifar10"): ("HE Table 2", 5.93),
    ("preact_resnet164", (), "cifar100"): ("HE Table 3", 24.33),
    ("resnet164", (), "cifar100"): ("HE Table 3", 25.16),
    ("preact_resnet1001", (), "cifar10"): ("HE Table 3", 4.92),
    ("resnet1001", (), "cifar10"): ("HE Table 3", 7.61),
    ("preact_resnet1001", (), "cifar100"): ("HE Table 3", 22.71),
    ("resnet1001", (), "cifar100"): ("HE Table 3", 27.82),
    ("preact_resnet152", (), "imagenet"): ("HE, single-crop top-1 at a 320 crop", 21.1),
    ("preact_resnet200", (), "imagenet"): ("HE, single-crop top-1 at a 320 crop", 20.7),
    ("resnet200", (), "imagenet"): ("HE, single-crop top-1 at a 320 crop", 21.8),
    ("resnet_cifar", (("n", 5),), "cifar10"): ("GR Table 3, n=5, 32 layers",
                                               GR_CIFAR10_N5_ERROR["resnet"]),
    ("gresnet_cifar", (("n", 5),), "cifar10"): ("GR Table 3, n=5, 32 layers",
                                                GR_CIFAR10_N5_ERROR["gresnet"]),
    ("wide_resnet", (("n", 4), ("widen_factor", 10)), "cifar10"): ("GR Tables 3-4 (WRN-28-10)", 3.89),
    ("wide_resnet", (("n", 4), ("widen_factor", 10)), "cifar100"): ("GR Table 4 (WRN-28-10)",
                                                                    18.85),
    ("wide_gresnet", (("n", 4), ("widen_factor", 10)), "cifar10"): ("GR Tables 3-4", 3.65),
    ("wide_gresnet", (("n", 4), ("widen_factor", 10)), "cifar100"): ("GR Tables 3-4", 18.27),
}
_DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "imagenet": "ImageNet",
                  "mnist": "MNIST"}
# Arguments that change no architecture a paper reports (WRN's dropout is
# the paper's own 0.3; a CIFAR net's n=5 is GR's default).
_NEUTRAL = {"dropout": 0.3}


def paper_error(builder, builder_kwargs, dataset):
    """``(where, test error %)`` a paper reports for ``builder`` with these
    architecture arguments on ``dataset``, or ``None``."""
    kind = builder[:-len("_mlp")] if builder.endswith("_mlp") else None
    if kind in ("plain", "resnet", "gresnet") and dataset == "mnist" and \
            set(builder_kwargs) == {"depth"} and builder_kwargs["depth"] in GR_MNIST_ERROR:
        return "GR Table 1", GR_MNIST_ERROR[builder_kwargs["depth"]][kind]
    kwargs = {k: v for k, v in builder_kwargs.items() if _NEUTRAL.get(k, object()) != v}
    if builder in ("resnet_cifar", "gresnet_cifar"):
        kwargs.setdefault("n", 5)
    return PAPER_ERRORS.get((builder, tuple(sorted(kwargs.items())), dataset))


def _reported(builder, builder_kwargs, dataset):
    """The line for a model some paper reports on some dataset, trained here
    on ``dataset``."""
    for paper_dataset in ("cifar10", "cifar100", "imagenet"):
        found = paper_error(builder, builder_kwargs, paper_dataset)
        if found is None:
            continue
        where, error = found
        result = f"{where} ({_DATASET_NAMES[paper_dataset]}): {error:.2f}% test error"
        if paper_dataset == dataset:
            return result
        if dataset not in ("cifar10", "cifar100", "imagenet"):
            return f"{result}; this entry is trained on {dataset}"
    return None


def paper_result(builder, builder_kwargs, dataset):
    """Where the paper reports this model: a one-line Markdown string, e.g.
    ``"GR Table 1 (MNIST, d=20): 1.57% test error"``; ``None`` when no paper
    reports its architecture (:data:`PAPER_ERRORS`, the GR tables above)."""
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
