"""GR's layer pruning: the residual blocks of a functional zoo model, a copy
with some removed (no retraining), and the accuracy curve as blocks go.

A residual block is found by its merge layer (``{prefix}gate``,
``{prefix}add`` or ``{prefix}shortcut_gate``); its layers are those named
``{prefix}*``. The graph is read from, and the pruned copy built from, the
model's functional config (``get_config`` / ``from_config``, Keras' public
serialization).

Removing a block is GR's identity: the block's merge gives its shortcut
input (``u = g(k) f(x) + x`` with ``g(k) = 0``, and ``f(x) = 0`` for an
ungated ``Add``), so its consumers are rewired to the merge's shortcut
input and every layer no output needs any more goes. Where the shortcut is
taken after the block's own pre-activation (a stage's first unit, whose
BN-ReLU HE's and GR's code share between shortcut and branch), that BN-ReLU
stays on the trunk, as ``g(k) = 0`` keeps it; so does what follows the
merge in a post-activation unit. HE's scaled and shortcut-gated merges
(Table 1's ablations) have no setting that passes the shortcut through:
removing one of their blocks passes it through unscaled.
"""

import contextlib
import dataclasses

import keras
import numpy as np

from keras_gresnet._checks import check_choice, check_int, check_seed
from keras_gresnet.analysis.gates import block_prefix
from keras_gresnet.layers import gate_layers

ORDERS = ("greedy", "random")
# Merge layers by class: GR's gate, HE's scaling and shortcut gates; a plain
# residual block merges with an ``Add`` named ``{prefix}add``.
_MERGE_CLASSES = ("ResidualGate", "ScaledAdd", "ShortcutGate")
_TENSOR = "__keras_tensor__"


@dataclasses.dataclass(frozen=True)
class Block:
    """One residual block of a functional model.

    Attributes:
        index: position among the model's blocks (network order).
        name: the name prefix of its layers, without the trailing ``_``.
        layers: names of its layers.
        gate: its :class:`ResidualGate` name, or ``None`` (ungated).
        removable: ``True`` when the block keeps the shape of its input
            (identity shortcut), so removing it leaves a valid network.
    """

    index: int
    name: str
    layers: tuple
    gate: str
    removable: bool


def _references(value):
    """Every ``(layer, node, tensor)`` a serialized call argument refers to."""
    if isinstance(value, dict):
        if value.get("class_name") == _TENSOR:
            return [tuple(value["config"]["keras_history"])]
        return [ref for v in value.values() for ref in _references(v)]
    if isinstance(value, (list, tuple)):
        return [ref for v in value for ref in _references(v)]
    return []


def _rewire(value, bypass):
    """A serialized call argument with references to a removed block's
    output replaced by references to the block's input."""
    if isinstance(value, dict):
        if value.get("class_name") == _TENSOR:
            ref = tuple(value["config"]["keras_history"])
            while ref in bypass:
                ref = bypass[ref]
            return {**value, "config": {**value["config"], "keras_history": list(ref)}}
        return {k: _rewire(v, bypass) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rewire(v, bypass) for v in value]
    return value


def _graph(model):
    """``(config, {layer name: its references})`` of a functional ``model``
    whose layers are each called once (every zoo model)."""
    if not isinstance(model, keras.Model) or not all(
            hasattr(model, key) for key in ("inputs", "outputs")):
        raise ValueError(f"pruning needs a functional Keras model, got {model!r}")
    config = model.get_config()
    if "layers" not in config or "output_layers" not in config:
        raise ValueError(f"{model.name!r} is not a functional model: pruning needs one "
                         f"(a zoo model)")
    refs = {}
    for layer in config["layers"]:
        nodes = layer["inbound_nodes"]
        if len(nodes) > 1:
            raise ValueError(
                f"layer {layer['name']!r} is called {len(nodes)} times; pruning needs a "
                f"functional model whose layers are each used once (a zoo model)")
        refs[layer["name"]] = _references(nodes)
    return config, refs


def _is_merge(layer):
    return layer["class_name"] in _MERGE_CLASSES or (
        layer["class_name"] == "Add" and layer["name"].endswith("_add"))


def _blocks(model):
    """``(Block, its merge's output reference, the merge's shortcut input
    reference)`` for every block."""
    config, refs = _graph(model)
    names = [layer["name"] for layer in config["layers"]]
    found = []
    for merge in (layer for layer in config["layers"] if _is_merge(layer)):
        prefix = block_prefix(merge["name"])
        members = [n for n in names if n.startswith(prefix)]
        inside = set(members)
        consumed = {ref[0] for n in members for ref in refs[n]}
        inputs = {ref for n in members for ref in refs[n] if ref[0] not in inside}
        outputs = [n for n in members if n not in consumed]
        if len(inputs) != 1 or len(outputs) != 1:
            continue  # not a single-input, single-output block
        (block_input,), output = inputs, (outputs[0], 0, 0)
        in_shape = tuple(model.get_layer(block_input[0]).output.shape)
        out_shape = tuple(model.get_layer(output[0]).output.shape)
        removable = in_shape == out_shape and not any(n.endswith("_0_conv") for n in members)
        block = Block(
            index=len(found), name=prefix.rstrip("_"), layers=tuple(members),
            gate=merge["name"] if merge["class_name"] == "ResidualGate" else None,
            removable=removable,
        )
        shortcut = refs[merge["name"]][0]  # every merge takes [shortcut, residual]
        found.append((block, (merge["name"], 0, 0), shortcut))
    return found


def residual_blocks(model):
    """The residual (and gated plain) blocks of a zoo model, in network order."""
    return [block for block, _, _ in _blocks(model)]


def _resolve_blocks(model, blocks):
    """``{merge output reference: its shortcut input reference}`` of the
    ``blocks`` to remove (names, indices or :class:`Block`); checks they can go."""
    found = _blocks(model)
    by_name = {b.name: (b, m, s) for b, m, s in found}
    bypass = {}
    if isinstance(blocks, (str, int, Block)):
        blocks = [blocks]
    if not len(blocks):
        raise ValueError("blocks must name at least one block to remove")
    for block in blocks:
        if isinstance(block, Block):
            block = block.name
        if isinstance(block, (int, np.integer)) and not isinstance(block, bool):
            if not 0 <= block < len(found):
                raise ValueError(
                    f"block index {block} out of range: the model has {len(found)} "
                    f"blocks (0..{len(found) - 1})")
            entry = found[block]
        elif block in by_name:
            entry = by_name[block]
        else:
            names = list(by_name)
            raise ValueError(
                f"Unknown block {block!r}; accepted: a block index or a name such as "
                f"{', '.join(names[:5])}{'...' if len(names) > 5 else ''}")
        b, merge, shortcut = entry
        if merge in bypass:
            raise ValueError(f"block {b.name!r} is named more than once; name each block "
                             f"once")
        if not b.removable:
            raise ValueError(
                f"block {b.name!r} changes the shape of its input (projection "
                f"shortcut): removing it would break the network")
        bypass[merge] = shortcut
    return bypass


def prune(model, blocks, *, name=None):
    """A new functional model with ``blocks`` removed (names such as
    ``"block7"`` / ``"conv3_block2"``, indices into :func:`residual_blocks`,
    or :class:`Block` objects): each block's merge replaced by its shortcut
    input (see the module docstring), every layer no output needs dropped;
    every other layer is a copy carrying the same weights, so the original
    model is untouched. The pruned net is the net whose removed gates have
    ``g(k) = 0``: removing a block whose ``g(k) = 0`` leaves the outputs
    exactly unchanged (a test checks it on every builder).

    Raises:
        ValueError: an unknown block, or one that changes shape (projection).
    """
    bypass = _resolve_blocks(model, blocks)
    config = model.get_config()
    config["name"] = name or f"{model.name}_pruned{len(bypass)}"
    layers = [dict(layer, inbound_nodes=_rewire(layer["inbound_nodes"], bypass))
              for layer in config["layers"]]
    config["output_layers"] = _rewire_refs(config["output_layers"], bypass)
    needed = _needed(layers, config["output_layers"])
    config["layers"] = [layer for layer in layers if layer["name"] in needed]
    if "builder" in config:  # a ZooModel: no builder builds the pruned net; the card holds
        config.update(builder=None, builder_kwargs={})
    pruned = model.__class__.from_config(config)
    for layer in pruned.layers:
        if layer.weights:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    return pruned


def _needed(layers, outputs):
    """Names of the layers the ``outputs`` references depend on."""
    inputs = {layer["name"]: {ref[0] for ref in _references(layer["inbound_nodes"])}
              for layer in layers}
    stack = [ref[0] for ref in _references_of(outputs)]
    needed = set()
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            stack.extend(inputs[name])
    return needed


def _references_of(refs):
    """``output_layers`` (one ``[layer, node, tensor]`` or a list of them)
    as a list of tuples."""
    if refs and isinstance(refs[0], str):
        return [tuple(refs)]
    return [ref for r in refs for ref in _references_of(r)]


def _rewire_refs(refs, bypass):
    """``output_layers`` (one ``[layer, node, tensor]`` or a list of them),
    rewired like the layers' arguments."""
    if refs and isinstance(refs[0], str):
        ref = tuple(refs)
        while ref in bypass:
            ref = bypass[ref]
        return list(ref)
    return [_rewire_refs(r, bypass) for r in refs]


def _arrays(data):
    """``(x, y)`` numpy arrays of ``(x, y)`` arrays or a batched dataset."""
    if isinstance(data, tuple):
        return np.asarray(data[0]), np.asarray(data[1])
    batches = [(np.asarray(x), np.asarray(y)) for x, y in data]
    return np.concatenate([x for x, _ in batches]), np.concatenate([y for _, y in batches])


# Examples per eager call: large enough to amortise the call, small enough
# for a conv net's activations (50 MB per 16-channel 28x28 layer output).
BATCH_SIZE = 1000


def accuracy(model, data, batch_size=BATCH_SIZE):
    """Top-1 accuracy of ``model`` on ``data``: ``(x, y)`` arrays or a
    batched ``tf.data.Dataset`` of ``(x, y)``. Eager batches: a freshly
    pruned model is run once, not traced into a predict function."""
    x, y = _arrays(data)
    with _no_autograd():
        predicted = np.concatenate([
            np.argmax(keras.ops.convert_to_numpy(model(x[i:i + batch_size], training=False)),
                      -1)
            for i in range(0, len(x), batch_size)
        ])
    return float(np.mean(predicted == y))


def _no_autograd():
    """On torch, ``torch.no_grad()``: an eager call otherwise records every
    activation for a backward pass (3.5 GB for 1,000 28x28 images through
    GResNet-32); TensorFlow and JAX record nothing outside a gradient tape /
    transformation."""
    if keras.backend.backend() == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


def closed_blocks(model):
    """The removable gated blocks of ``model`` whose gate is exactly closed,
    ``g(k) = 0``: removing all of them (``prune(model, closed_blocks(model))``)
    changes no output, and the pruned net predicts faster (GR's "faster
    predictions by using a pruned version")."""
    g = {gate.name: gate.g for gate in gate_layers(model)}
    return [b for b in residual_blocks(model)
            if b.removable and b.gate is not None and g[b.gate] == 0.0]


def removal_order(model, order="greedy", seed=0):
    """The removable blocks of ``model`` in the order GR removes them:
    ``"greedy"``, smallest ``g(k)`` first (gated models only), or
    ``"random"``, a seeded permutation (``seed``: an integer in [0, 2**31 - 1])."""
    check_choice(order, "order", ORDERS)
    check_seed(seed, "seed")
    blocks = [b for b in residual_blocks(model) if b.removable]
    if order == "random":
        return [blocks[i] for i in np.random.default_rng(seed).permutation(len(blocks))]
    if any(b.gate is None for b in blocks):
        raise ValueError(
            "order='greedy' ranks blocks by their gate g(k); this model has ungated "
            "blocks: use order='random'")
    g = {gate.name: gate.g for gate in gate_layers(model)}
    return sorted(blocks, key=lambda b: (g[b.gate], b.index))


def pruning_curve(model, data, *, order="greedy", seed=0, counts=None, batch_size=BATCH_SIZE):
    """Accuracy after removing 0, 1, 2, ... blocks (GR Figure 5), no retraining.

    Args:
        model: a trained zoo model.
        data: ``(x, y)`` arrays or a batched ``tf.data.Dataset``.
        order: ``"greedy"`` (smallest ``g(k)`` first) or ``"random"``.
        seed: the random order's seed.
        counts: numbers of blocks to remove (default: every count from 0 to
            all removable blocks).

    Returns:
        ``{"removed": [...], "accuracy": [...], "order": [block names]}``.
    """
    blocks = removal_order(model, order, seed)
    if counts is None:
        counts = range(len(blocks) + 1)
    counts = [check_int(c, "counts", 0) for c in counts]
    if counts and max(counts) > len(blocks):
        raise ValueError(f"counts go up to {max(counts)}, but only {len(blocks)} blocks "
                         f"can be removed")
    data = _arrays(data)  # once, not once per count
    accuracies = [
        accuracy(prune(model, blocks[:c]) if c else model, data, batch_size) for c in counts
    ]
    return dict(removed=counts, accuracy=accuracies, order=[b.name for b in blocks])
