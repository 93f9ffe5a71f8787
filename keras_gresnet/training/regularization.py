"""The papers' weight decay attached to a built model: the variables they
decay (:func:`decay_variables`: every parameter, as Torch's ``optim.sgd``
does, or the kernels only; GR's gates ``k`` on request; never moving
statistics) and :func:`apply_weight_decay`, which sets the coupled L2
``keras.regularizers.L2(weight_decay / 2)`` on each, so a recipe's
``weight_decay`` is the number the papers print, with their effect (the
convention: :mod:`keras_gresnet.training.recipes`).
"""

import keras

from keras_gresnet._checks import is_real
from keras_gresnet._text import shown
from keras_gresnet.layers import all_layers, gate_layers

DECAYS = ("all", "kernels")  # what is decayed: every parameter, or the kernels only

# The regularizer arguments of Keras layers, so that a saved .keras model keeps
# its decay; "kernels" keeps only the first.
_REGULARIZER_ARGUMENTS = ("kernel_regularizer", "bias_regularizer", "gamma_regularizer",
                          "beta_regularizer")


def _check_decay(decay):
    if decay not in DECAYS:
        raise ValueError(f"decay must be one of {', '.join(map(repr, DECAYS))}, got {shown(decay)}")


def decay_variables(model, k_decay=False, decay="all"):
    """The variables the papers decay. ``decay="all"``: every trainable
    variable (kernels, biases, BatchNorm ``gamma``/``beta``; Torch's
    ``optim.sgd`` decays ``model:getParameters()``, fb.resnet.torch
    train.lua:20-29); ``"kernels"``: the conv/dense kernels (weights named
    ``kernel``). Gates ``k`` only with ``k_decay``; moving statistics never."""
    _check_decay(decay)
    gates = {id(gate.k) for gate in gate_layers(model)}
    return [
        v
        for v in model.trainable_weights
        if (k_decay if id(v) in gates else decay == "all" or v.name == "kernel")
    ]


def apply_weight_decay(model, weight_decay, k_decay=False, decay="all"):
    """Attach the papers' coupled L2 weight decay to a built model.

    Sets ``keras.regularizers.L2(weight_decay / 2)`` as the ``regularizer`` of
    every variable of :func:`decay_variables`: Keras adds these penalties to
    ``model.losses``, and ``model.fit`` to the loss it differentiates, so the
    decay goes through the optimizer with the data gradient, as in the
    papers. Idempotent: a second call replaces the first; ``weight_decay=0``
    removes it. Layers get the matching ``kernel_regularizer`` (and with
    ``decay="all"`` ``bias_regularizer``, ``gamma_regularizer``,
    ``beta_regularizer``) too, so a saved ``.keras`` model keeps its decay
    (the gates' ``k`` decay is not saved: ``ResidualGate`` has no regularizer
    argument).

    Args:
        model: a built Keras model.
        weight_decay: the papers' weight decay (HE 1e-4, WRN 5e-4).
        k_decay: decay the gates ``k`` too (GR Table 3's "k decay").
        decay: ``"all"`` parameters (the papers' code) or ``"kernels"``.

    Returns:
        The decayed variables.
    """
    if not is_real(weight_decay) or weight_decay < 0:
        raise ValueError(f"weight_decay must be a number >= 0, got {shown(weight_decay)}")
    _check_decay(decay)
    regularizer = keras.regularizers.L2(weight_decay / 2) if weight_decay else None
    decayed = decay_variables(model, k_decay, decay)
    decayed_ids = {id(v) for v in decayed}
    # Every trainable variable, so that one decayed by an earlier call is cleared.
    for variable in model.trainable_weights:
        variable.regularizer = regularizer if id(variable) in decayed_ids else None
    arguments = _REGULARIZER_ARGUMENTS if decay == "all" else _REGULARIZER_ARGUMENTS[:1]
    for layer in all_layers(model):
        for argument in _REGULARIZER_ARGUMENTS:
            if hasattr(layer, argument):
                setattr(layer, argument, regularizer if argument in arguments else None)
    return decayed if regularizer else []
