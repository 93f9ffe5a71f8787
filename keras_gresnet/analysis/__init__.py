"""Looking inside the gates: gate values (GR Table 2), residual blocks,
layer pruning without retraining and pruning curves (GR Figures 5 and 7).

Modules: :mod:`~keras_gresnet.analysis.gates` (the gates' values) and
:mod:`~keras_gresnet.analysis.pruning` (blocks, removal, curves).
"""

from keras_gresnet.analysis.gates import block_prefix, gate_values
from keras_gresnet.analysis.pruning import (
    ORDERS, Block, accuracy, closed_blocks, prune, pruning_curve, removal_order,
    residual_blocks,
)

__all__ = ["ORDERS", "Block", "accuracy", "block_prefix", "closed_blocks", "gate_values", "prune",
           "pruning_curve", "removal_order", "residual_blocks"]
