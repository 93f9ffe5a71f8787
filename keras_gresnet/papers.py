"""The papers' own numbers that the package prints beside its own (model
cards, reproduction tables): GR's MNIST results (GR Tables 1 and 2) and
its CIFAR-10 n=5 results (GR Table 3). Public, for scripts and users."""

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


def paper_result(builder, builder_kwargs, dataset):
    """Where the paper reports this model: a one-line Markdown string, e.g.
    ``"GR Table 1 (MNIST, d=20): 1.57% test error"``; ``None`` when the
    builder is none of GR's MNIST nets or of its CIFAR n=5 nets."""
    if builder in ("resnet_cifar", "gresnet_cifar") and set(builder_kwargs) <= {"n"} and \
            builder_kwargs.get("n", 5) == 5:
        kind = "gresnet" if builder == "gresnet_cifar" else "resnet"
        result = (f"GR Table 3 (CIFAR-10, n=5, 32 layers): {GR_CIFAR10_N5_ERROR[kind]:.2f}% "
                  f"test error")
        if dataset != "cifar10":
            result += f"; GR reports CIFAR-10 only, this entry is trained on {dataset}"
        return result
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
