"""GR's gates of a built model: each gate's ``k`` and ``g(k)`` in network order."""

import keras

from keras_gresnet.layers import gate_layers

# The layer-name suffixes of a block's merge: its gate, HE's shortcut gates, or a plain add.
MERGE_SUFFIXES = ("shortcut_gate", "gate", "add")


def block_prefix(merge_name):
    """The name prefix shared by a block's layers (``"block7_"``), from the
    name of its merge layer (``"block7_gate"``)."""
    for suffix in MERGE_SUFFIXES:
        if merge_name.endswith(suffix):
            return merge_name[: -len(suffix)]
    raise ValueError(f"{merge_name!r} is not a residual merge layer")


def gate_values(model):
    """Every gate's ``k`` and ``g(k)`` in network order: a list of dicts
    ``{"index", "block", "layer", "k", "g"}`` (``block`` is the name prefix
    shared by the block's layers, e.g. ``"conv3_block2"`` or ``"block7"``)."""
    return [
        dict(index=i, block=block_prefix(gate.name).rstrip("_"), layer=gate.name,
             k=float(keras.ops.convert_to_numpy(gate.k)), g=gate.g)
        for i, gate in enumerate(gate_layers(model))
    ]
