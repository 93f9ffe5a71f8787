"""Feature maps of a convolutional zoo model: its stage outputs as a
multi-output Keras model, keyed KerasHub's way (``"P{log2 stride}"``).

The stages are found from the layer names the builders give
(:mod:`~keras_gresnet.zoo.resnets`: ``conv{stage}_block{b}_...``), so a
model loaded from a ``.keras`` file works as one just built.
"""

import re

import keras

# The layers that may end a unit conv{s}_block{b}_, first match wins:
# residual_unit's BN / ReLU after the addition ("original" units...), then
# the merge (GR's gate, HE's shortcut gate or scaled add, the addition;
# "out" under Keras ResNetV2's names).
_UNIT_ENDS = ("out_relu", "out_bn", "gate", "shortcut_gate", "add", "out")
_UNIT = re.compile(r"^conv(\d+)_block(\d+)_")
_STEM = ("conv1_conv", "pool1_pool")


def _strides(layer):
    strides = getattr(layer, "strides", None) or (1,)
    return max(strides) if isinstance(strides, (tuple, list)) else int(strides)


def _units(model):
    """``[(unit name prefix, its output layer, its stride)]`` in network order."""
    layers = {layer.name: layer for layer in model.layers}
    prefixes = {}
    for layer in model.layers:
        match = _UNIT.match(layer.name)
        if match:
            prefixes.setdefault((int(match[1]), int(match[2])), []).append(layer)
    units = []
    for (stage, block), members in sorted(prefixes.items()):
        prefix = f"conv{stage}_block{block}_"
        end = next((layers[prefix + e] for e in _UNIT_ENDS if prefix + e in layers), None)
        if end is None:
            raise ValueError(f"{model.name}: unit {prefix} has none of the layers "
                             f"{[prefix + e for e in _UNIT_ENDS]} that end a zoo unit")
        units.append((prefix, end, max(_strides(layer) for layer in members)))
    return units


def stage_layers(model):
    """``{"P{k}": layer name}`` of ``model``: for each stride ``2**k`` (from
    the input) a zoo model reaches, the last unit at that stride.

    With HE's layout (the stride on the first unit of a stage) that is the
    last unit of each stage: P0, P1, P2 for the CIFAR nets, P2..P5 for the
    ImageNet nets. With Keras ResNetV2's (``stride_position="last"``) it is
    the unit before each strided one, so that every key is one resolution.
    """
    units = _units(model)
    if not units:
        raise ValueError(
            f"{model.name} has no convolutional stages (no conv{{stage}}_block{{b}}_ "
            f"layers): feature maps come from the zoo's conv nets (resnet_cifar, "
            f"wide_resnet, resnet_imagenet...), not from an MLP")
    names = {layer.name for layer in model.layers}
    stride = 1
    for stem in _STEM:
        if stem in names:
            stride *= _strides(model.get_layer(stem))
    stages = {}
    for _, end, unit_stride in units:
        stride *= unit_stride
        stages[f"P{stride.bit_length() - 1}"] = end.name
    return stages


def feature_extractor(model, stages=None):
    """A Keras model of ``model``'s inputs whose outputs are a dict of its
    feature maps, ``{"P{log2 stride}": stage output}`` (KerasHub's
    ``pyramid_outputs`` keys): P0, P1, P2 for the CIFAR nets, P2..P5 for the
    ImageNet nets (:func:`stage_layers`).

    A stage's output is its last unit's output, the last stage's included:
    the final BN-ReLU of a pre-activation net (``post_bn``, ``post_relu``)
    is not part of it, as in KerasHub's ResNet backbone and timm's
    ``features_only``.

    Args:
        model: a zoo conv net (built, or loaded from a ``.keras`` file), with
            or without its top and preprocessing.
        stages: ``None`` (all) or a list of keys, e.g. ``["P1", "P2"]``.
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a Keras model of the zoo, got {model!r}")
    available = stage_layers(model)
    if stages is None:
        stages = list(available)
    if isinstance(stages, str) or not isinstance(stages, (list, tuple)) or not stages:
        raise ValueError(f"stages must be None or a non-empty list of keys from "
                         f"{list(available)}, got {stages!r}")
    unknown = [key for key in stages if key not in available]
    if unknown or len(set(stages)) != len(stages):
        what = f"unknown keys {unknown}" if unknown else "repeated keys"
        raise ValueError(f"stages={list(stages)!r} has {what}; {model.name} has "
                         f"{list(available)}")
    # KerasHub, keras_hub/src/models/resnet/resnet_backbone.py (commit
    # 71453d08): pyramid_outputs[f"P{stack_index + 2}"] = x after each stack,
    # before post_bn / post_relu; timm, timm/models/resnetv2.py (commit
    # aa4b5850): feature_info module=f"stages.{stage_idx}", and
    # forward_intermediates applies the final norm only when norm=True.
    outputs = {key: model.get_layer(available[key]).output
               for key in available if key in stages}
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    return keras.Model(inputs, outputs, name=f"{model.name}_features")
