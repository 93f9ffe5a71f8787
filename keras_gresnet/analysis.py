"""Looking inside the gates: gate values, residual blocks, layer pruning and
pruning curves (GR Tables 1-2, Figures 5 and 7).

A residual block is found by its merge layer (``{prefix}gate``,
``{prefix}add`` or ``{prefix}shortcut_gate``); its layers are those named
``{prefix}*``. Pruning a block rebuilds the model without its layers, the
block's output replaced by its input (GR's layer removal: no retraining).
"""

import dataclasses

import keras
import numpy as np

from keras_gresnet._checks import check_choice, check_int
from keras_gresnet.layers import ResidualGate, ScaledAdd, ShortcutGate, gate_layers

ORDERS = ("greedy", "random")
_MERGE_SUFFIXES = ("shortcut_gate", "gate", "add")


def gate_values(model):
    """Every gate's ``k`` and ``g(k)`` in network order: a list of dicts
    ``{"index", "block", "layer", "k", "g"}`` (``block`` is the name prefix
    shared by the block's layers, e.g. ``"conv3_block2"`` or ``"block7"``)."""
    return [
        dict(index=i, block=_prefix(gate.name).rstrip("_"), layer=gate.name,
             k=float(keras.ops.convert_to_numpy(gate.k)), g=gate.g)
        for i, gate in enumerate(gate_layers(model))
    ]


def _prefix(merge_name):
    for suffix in _MERGE_SUFFIXES:
        if merge_name.endswith(suffix):
            return merge_name[: -len(suffix)]
    raise ValueError(f"{merge_name!r} is not a residual merge layer")


def _node(layer):
    nodes = layer._inbound_nodes
    if len(nodes) != 1:
        raise ValueError(
            f"layer {layer.name!r} is called {len(nodes)} times; pruning needs a "
            f"functional model whose layers are each used once (a zoo model)"
        )
    return nodes[0]


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


def _is_merge(layer):
    if isinstance(layer, (ResidualGate, ScaledAdd, ShortcutGate)):
        return True
    return isinstance(layer, keras.layers.Add) and layer.name.endswith("_add")


def _blocks(model):
    """``(Block, input tensor, output tensor)`` for every block of ``model``."""
    layers = model.layers
    found = []
    for merge in (layer for layer in layers if _is_merge(layer)):
        prefix = _prefix(merge.name)
        members = [layer for layer in layers if layer.name.startswith(prefix)]
        names = {layer.name for layer in members}
        consumed = {id(t) for m in members for t in _node(m).arguments.keras_tensors}
        inputs = {id(t): t for m in members for t in _node(m).arguments.keras_tensors
                  if t._keras_history.operation.name not in names}
        outputs = [m.output for m in members if id(m.output) not in consumed]
        if len(inputs) != 1 or len(outputs) != 1:
            continue  # not a single-input, single-output block
        (block_input,), (block_output,) = inputs.values(), outputs
        removable = tuple(block_input.shape) == tuple(block_output.shape) and not any(
            name.endswith("_0_conv") for name in names)
        block = Block(
            index=len(found), name=prefix.rstrip("_"),
            layers=tuple(m.name for m in members),
            gate=merge.name if isinstance(merge, ResidualGate) else None,
            removable=removable,
        )
        found.append((block, block_input, block_output))
    return found


def residual_blocks(model):
    """The residual (and gated plain) blocks of a zoo model, in network order."""
    return [block for block, _, _ in _blocks(model)]


def _resolve_blocks(model, blocks):
    """``{id(output): input}`` tensors and layer names of the ``blocks`` to
    remove (names, indices or :class:`Block`); checks they can go."""
    found = _blocks(model)
    by_name = {b.name: (b, i, o) for b, i, o in found}
    bypass, skip = {}, set()
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
        b, block_input, block_output = entry
        if id(block_output) in bypass:
            raise ValueError(f"block {b.name!r} is named more than once; name each block "
                             f"once")
        if not b.removable:
            raise ValueError(
                f"block {b.name!r} changes the shape of its input (projection "
                f"shortcut): removing it would break the network")
        bypass[id(block_output)] = block_input
        skip.update(b.layers)
    return bypass, skip


def prune(model, blocks, *, name=None):
    """A new functional model with ``blocks`` removed (names such as
    ``"block7"`` / ``"conv3_block2"``, indices into :func:`residual_blocks`,
    or :class:`Block` objects); every other layer is a copy carrying the same
    weights, so the original model is untouched. Removing a block whose
    ``g(k) = 0`` leaves the outputs exactly unchanged.

    Raises:
        ValueError: an unknown block, or one that changes shape (projection).
    """
    bypass, skip = _resolve_blocks(model, blocks)
    inputs = [keras.Input(shape=t.shape[1:], dtype=t.dtype,
                          name=t._keras_history.operation.name) for t in model.inputs]
    tensors = {id(source): target for source, target in zip(model.inputs, inputs)}
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        node = _node(layer)
        if layer.name in skip:
            for out in node.outputs:
                if id(out) in bypass:  # the block's output becomes its input
                    tensors[id(out)] = tensors[id(bypass[id(out)])]
            continue
        args, kwargs = node.arguments.fill_in(tensors)
        clone = layer.__class__.from_config(layer.get_config())
        outputs = clone(*args, **kwargs)
        clone.set_weights(layer.get_weights())
        for source, target in zip(node.outputs, keras.tree.flatten(outputs)):
            tensors[id(source)] = target
    outputs = [tensors[id(t)] for t in model.outputs]
    return keras.Model(inputs[0] if len(inputs) == 1 else inputs,
                       outputs[0] if len(outputs) == 1 else outputs,
                       name=name or f"{model.name}_pruned{len(bypass)}")


def _arrays(data):
    """``(x, y)`` numpy arrays of ``(x, y)`` arrays or a batched dataset."""
    if isinstance(data, tuple):
        return np.asarray(data[0]), np.asarray(data[1])
    batches = [(np.asarray(x), np.asarray(y)) for x, y in data]
    return np.concatenate([x for x, _ in batches]), np.concatenate([y for _, y in batches])


def accuracy(model, data, batch_size=10000):
    """Top-1 accuracy of ``model`` on ``data``: ``(x, y)`` arrays or a
    batched ``tf.data.Dataset`` of ``(x, y)``. Large eager batches: a
    freshly pruned model is run once, not traced into a predict function."""
    x, y = _arrays(data)
    predicted = np.concatenate([
        np.argmax(keras.ops.convert_to_numpy(model(x[i:i + batch_size], training=False)), -1)
        for i in range(0, len(x), batch_size)
    ])
    return float(np.mean(predicted == y))


def removal_order(model, order="greedy", seed=0):
    """The removable blocks of ``model`` in the order GR removes them:
    ``"greedy"``, smallest ``g(k)`` first (gated models only), or
    ``"random"``, a seeded permutation."""
    check_choice(order, "order", ORDERS)
    blocks = [b for b in residual_blocks(model) if b.removable]
    if order == "random":
        return [blocks[i] for i in np.random.default_rng(seed).permutation(len(blocks))]
    if any(b.gate is None for b in blocks):
        raise ValueError(
            "order='greedy' ranks blocks by their gate g(k); this model has ungated "
            "blocks: use order='random'")
    g = {gate.name: gate.g for gate in gate_layers(model)}
    return sorted(blocks, key=lambda b: (g[b.gate], b.index))


def pruning_curve(model, data, *, order="greedy", seed=0, counts=None, batch_size=10000):
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
