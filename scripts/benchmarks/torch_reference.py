"""PyTorch twins of four zoo architectures, for ``scripts/benchmarks/benchmark.py`` and
``scripts/benchmarks/gpu_check.py`` only (torch is a bench-only dependency).

Each module has the layout of its Keras builder in :mod:`keras_gresnet.zoo`,
unit for unit (``keras_gresnet/layers/units.py``):

- ``gresnet_cifar(n=5)``: 3x3 stem conv (16, no BN: the first pre-activation
  unit normalises it), three stages of ``n`` full pre-activation basic units
  (BN-ReLU-conv3x3-BN-ReLU-conv3x3, widths 16/32/64, the stride on the first
  conv of the first unit of stages 2-3), fb.resnet.torch's shortcuts (the
  zoo's defaults for basic CIFAR nets): the first unit of each stage
  applies its BN-ReLU before the split, so ``h`` takes the activated input,
  strided and padded with zero channels where the shape changes (option
  A, no weights); GR's scalar gate ``u = relu(k) F(x) + h(x)``, then
  BN-ReLU, global average pool, Dense(10);
- ``preact_resnet110``: the same with ``n=18`` and a plain addition;
- ``wide_gresnet(n=4, widen_factor=10)``: widths 160/320/640, WRN's
  shortcuts (a 1x1 projection of the activated input where the width
  changes, the raw input elsewhere), dropout 0.3 after the second unit
  BN-ReLU, the gate;
- ``gresnet_mlp(depth=100)``: Dense(50)-BN-ReLU stem, 50 blocks
  ``u = relu(k) f(x) + x`` with ``f`` two Dense-BN-ReLU layers, Dense(10).

BatchNorm settings are the Keras ones (conv nets: momentum 0.9, eps 1e-5;
MLPs: Keras' defaults momentum 0.99, eps 1e-3; torch's ``momentum`` is
``1 - keras_momentum``). The classifiers return logits (Keras' softmax +
sparse cross-entropy is torch's ``cross_entropy`` on logits).

Inputs are NHWC numpy arrays as for Keras; :func:`to_torch_images` turns
them into NCHW tensors, in ``channels_last`` memory layout by default (the
same bytes: no copy).

    python scripts/benchmarks/torch_reference.py   # parameter counts, torch vs Keras
"""

import torch
from torch import nn
import torch.nn.functional as F

CIFAR_WIDTHS = (16, 32, 64)


class Gate(nn.Module):
    """GR's scalar gate: ``relu(k) * fx + x`` (``k`` starts at 1)."""

    def __init__(self, k_initial=1.0):
        super().__init__()
        self.k = nn.Parameter(torch.tensor(float(k_initial)))

    def forward(self, x, fx):
        return F.relu(self.k) * fx + x


class PreactUnit(nn.Module):
    """HE's full pre-activation basic unit, optionally gated (GR).

    ``shortcut``: ``"zero_pad"`` or ``"conv"`` where the shape changes;
    ``shared``: ``h`` takes the activated input (the BN-ReLU before the
    split), else the raw one; a projection always takes the activated one.
    """

    def __init__(self, in_ch, out_ch, stride, gated, dropout=0.0, momentum=0.1, eps=1e-5,
                 shortcut="conv", shared=False):
        super().__init__()
        changes = in_ch != out_ch or stride != 1
        self.stride, self.out_ch = stride, out_ch
        self.zero_pad = changes and shortcut == "zero_pad"
        self.shared = shared
        self.bn1 = nn.BatchNorm2d(in_ch, momentum=momentum, eps=eps)
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch, momentum=momentum, eps=eps)
        self.drop = nn.Dropout(dropout) if dropout else None
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.project = (nn.Conv2d(in_ch, out_ch, 1, stride, 0, bias=False)
                        if changes and shortcut == "conv" else None)
        self.gate = Gate() if gated else None

    def forward(self, x):
        a = F.relu(self.bn1(x))
        if self.project is not None:
            h = self.project(a)
        else:
            h = a if self.shared else x
            if self.zero_pad:
                h = h[:, :, ::self.stride, ::self.stride]
                h = F.pad(h, (0, 0, 0, 0, 0, self.out_ch - h.shape[1]))
        f = F.relu(self.bn2(self.conv1(a)))
        if self.drop is not None:
            f = self.drop(f)
        f = self.conv2(f)
        return self.gate(h, f) if self.gate is not None else h + f


class PreactCifarNet(nn.Module):
    """Stem conv, stages of :class:`PreactUnit`, BN-ReLU, pool, Dense."""

    def __init__(self, n, widths=CIFAR_WIDTHS, gated=True, dropout=0.0, classes=10,
                 stem_filters=16, shortcut="zero_pad"):
        super().__init__()
        self.stem = nn.Conv2d(3, stem_filters, 3, 1, 1, bias=False)
        units, ch = [], stem_filters
        for s, w in enumerate(widths):
            for b in range(n):
                # zero_pad nets (fb preresnet.lua): the first unit of a stage
                # shares its BN-ReLU; conv nets (WRN): where the width changes
                shared = b == 0 if shortcut == "zero_pad" else ch != w
                units.append(PreactUnit(ch, w, 2 if (b == 0 and s > 0) else 1, gated, dropout,
                                        shortcut=shortcut, shared=shared))
                ch = w
        self.units = nn.Sequential(*units)
        self.post_bn = nn.BatchNorm2d(ch, momentum=0.1, eps=1e-5)
        self.fc = nn.Linear(ch, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")

    def forward(self, x):
        x = self.units(self.stem(x))
        x = F.relu(self.post_bn(x))
        return self.fc(x.mean(dim=(2, 3)))


class GatedMLP(nn.Module):
    """GR's MNIST GResNet: Dense-BN-ReLU stem, gated two-layer blocks."""

    def __init__(self, depth=100, units=50, inputs=784, classes=10):
        super().__init__()
        bn = dict(momentum=0.01, eps=1e-3)  # Keras' BatchNormalization defaults

        def layer(i):
            return nn.Sequential(nn.Linear(i, units), nn.BatchNorm1d(units, **bn), nn.ReLU())

        self.stem = layer(inputs)
        self.blocks = nn.ModuleList(nn.Sequential(layer(units), layer(units))
                                    for _ in range(depth // 2))
        self.gates = nn.ModuleList(Gate() for _ in range(depth // 2))
        self.fc = nn.Linear(units, classes)

    def forward(self, x):
        x = self.stem(x.flatten(1))
        for block, gate in zip(self.blocks, self.gates):
            x = gate(x, block(x))
        return self.fc(x)


# name -> (torch builder, Keras builder kwargs, input shape (NHWC / flat))
MODELS = {
    "gresnet_cifar": (lambda: PreactCifarNet(5, gated=True),
                      ("gresnet_cifar", dict(n=5)), (32, 32, 3)),
    "preact_resnet110": (lambda: PreactCifarNet(18, gated=False),
                         ("preact_resnet110", {}), (32, 32, 3)),
    "wide_gresnet": (lambda: PreactCifarNet(4, tuple(10 * w for w in CIFAR_WIDTHS),
                                            gated=True, dropout=0.3, shortcut="conv"),
                     ("wide_gresnet", dict(n=4, widen_factor=10)), (32, 32, 3)),
    "gresnet_mlp": (lambda: GatedMLP(100), ("gresnet_mlp", dict(depth=100)), (784,)),
    "preact_resnet1001": None,  # bottleneck units: not twinned (GPU check: Keras only)
}
TWINS = tuple(k for k, v in MODELS.items() if v is not None)


# The tiny twins of ``scripts/benchmarks/benchmark.py --quick`` (Keras: its QUICK table).
QUICK = {
    "gresnet_cifar": lambda: PreactCifarNet(1, gated=True),
    "preact_resnet110": lambda: PreactCifarNet(1, gated=False),
    "wide_gresnet": lambda: PreactCifarNet(1, CIFAR_WIDTHS, gated=True, dropout=0.3,
                                           shortcut="conv"),
    "gresnet_mlp": lambda: GatedMLP(4),
}


def build(name):
    """The torch twin of the zoo model ``name`` (a key of :data:`TWINS`)."""
    return MODELS[name][0]()


def quick(name):
    """The tiny twin of ``name`` (``benchmark.py --quick``)."""
    return QUICK[name]()


def param_counts(module):
    """``(trainable, total)`` as Keras counts them: total adds BatchNorm's
    running mean and variance (Keras' non-trainable weights)."""
    trainable = sum(p.numel() for p in module.parameters())
    stats = sum(b.numel() for n, b in module.named_buffers() if not n.endswith("num_batches_tracked"))
    return trainable, trainable + stats


def keras_param_counts(model):
    """``(trainable, total)`` of a Keras model."""
    trainable = sum(int(w.numpy().size) if hasattr(w, "numpy") else int(w.size)
                    for w in model.trainable_weights)
    return trainable, model.count_params()


def to_torch_images(x, channels_last=True):
    """An NHWC numpy batch as the NCHW tensor torch convs take
    (``channels_last``: the same memory, NHWC strides, no copy)."""
    t = torch.from_numpy(x)
    if t.dim() == 4:
        t = t.permute(0, 3, 1, 2)
        t = t.contiguous(memory_format=torch.channels_last if channels_last
                         else torch.contiguous_format)
    return t


def copy_keras_weights(model, module):
    """Load a Keras model's weights into its twin (a :class:`PreactCifarNet`
    or :class:`GatedMLP` of the same configuration), layer by layer by the
    zoo's layer names, so that both compute the same function: the check
    that a twin is the same architecture, not only the same parameter count."""
    def load(param, value, perm=None):
        value = torch.from_numpy(value)
        value = value.permute(*perm) if perm else value
        if param.shape != value.shape:
            raise ValueError(f"shape {tuple(value.shape)} does not fit {tuple(param.shape)}")
        with torch.no_grad():
            param.copy_(value)

    def weights(name):
        import numpy as np
        from keras import ops
        return [np.asarray(ops.convert_to_numpy(w)) for w in model.get_layer(name).weights]

    def conv(name, c):
        load(c.weight, weights(name)[0], (3, 2, 0, 1))

    def dense(name, d):
        kernel, bias = weights(name)
        load(d.weight, kernel, (1, 0))
        load(d.bias, bias)

    def bn(name, b):
        for param, value in zip((b.weight, b.bias, b.running_mean, b.running_var), weights(name)):
            load(param, value)

    def gate(name, g):
        load(g.k, weights(name)[0])

    if isinstance(module, PreactCifarNet):
        conv("conv1_conv", module.stem)
        # the units in model order: conv{stage}_block{b}_ of every preact BN
        prefixes = [layer.name.removesuffix("preact_bn") for layer in model.layers
                    if layer.name.endswith("_preact_bn")]
        if len(prefixes) != len(module.units):
            raise ValueError(f"{len(prefixes)} Keras units, {len(module.units)} torch units")
        for prefix, unit in zip(prefixes, module.units):
            bn(prefix + "preact_bn", unit.bn1)
            conv(prefix + "1_conv", unit.conv1)
            bn(prefix + "2_bn", unit.bn2)
            conv(prefix + "2_conv", unit.conv2)
            if unit.project is not None:
                conv(prefix + "0_conv", unit.project)
            if unit.gate is not None:
                gate(prefix + "gate", unit.gate)
        bn("post_bn", module.post_bn)
        dense("predictions", module.fc)
    elif isinstance(module, GatedMLP):
        dense("stem_dense", module.stem[0])
        bn("stem_bn", module.stem[1])
        for i, (block, g) in enumerate(zip(module.blocks, module.gates), start=1):
            for j, layer in enumerate(block, start=1):
                dense(f"block{i}_{j}_dense", layer[0])
                bn(f"block{i}_{j}_bn", layer[1])
            gate(f"block{i}_gate", g)
        dense("predictions", module.fc)
    else:
        raise TypeError(f"no weight map for {type(module).__name__}")
    return module


def check_params(names=TWINS):
    """Print and compare the parameter counts of each twin and its Keras
    model; raises ``AssertionError`` on a mismatch."""
    from keras_gresnet import zoo

    for name in names:
        _, (builder, kwargs), shape = MODELS[name]
        km = zoo.get_model(builder, weights=None, input_shape=shape, classes=10, **kwargs)
        k = keras_param_counts(km)
        t = param_counts(build(name))
        print(f"{name:>18s}: keras trainable {k[0]:>10,d} total {k[1]:>10,d} | "
              f"torch trainable {t[0]:>10,d} total {t[1]:>10,d}")
        assert k == t, f"{name}: Keras {k} != torch {t}"


if __name__ == "__main__":
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    check_params()
    print("parameter counts equal")
