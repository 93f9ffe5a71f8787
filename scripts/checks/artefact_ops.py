"""The ops of every artefact `keras-gresnet export` writes on this backend,
against the allow-lists of keras_gresnet.artefact_checks (SAVED_MODEL_OPS,
SAVED_MODEL_SAVER_OPS, LITERT_OPS, ONNX_OPS): run it on each backend (and
with channels_first in keras.json) after a Keras, TensorFlow or converter
upgrade; it exits 1 naming any op an export uses that the lists lack.

    KERAS_BACKEND=tensorflow python scripts/checks/artefact_ops.py
    KERAS_BACKEND=jax python scripts/checks/artefact_ops.py --formats tf_saved_model
    KERAS_BACKEND=torch python scripts/checks/artefact_ops.py --formats onnx
"""

import argparse
import sys
import tempfile
from pathlib import Path

import keras

from keras_gresnet import artefact_checks, export, zoo


def _shape(height, channels):
    if keras.config.image_data_format() == "channels_first":
        return (channels, height, height)
    return (height, height, channels)


# Every kind of zoo net: MLPs, CIFAR nets (gates, every unit, a conv
# shortcut, bottlenecks), wide and ImageNet nets, pooled bodies, logits.
NETS = {
    "gresnet_cifar": lambda: zoo.gresnet_cifar(n=1, input_shape=_shape(16, 3)),
    "gresnet_cifar_logits": lambda: zoo.gresnet_cifar(
        n=1, input_shape=_shape(16, 1), classifier_activation=None),
    "resnet_cifar_conv_bottleneck": lambda: zoo.resnet_cifar(
        n=1, block="bottleneck", shortcut="conv", input_shape=_shape(16, 3)),
    "resnet_cifar_original": lambda: zoo.resnet_cifar(n=1, unit="original",
                                                      input_shape=_shape(16, 3)),
    "gresnet_mlp": lambda: zoo.gresnet_mlp(depth=2),
    "gated_plain_mlp": lambda: zoo.gated_plain_mlp(depth=2),
    "plain_mlp": lambda: zoo.plain_mlp(depth=2),
    "wide_gresnet": lambda: zoo.wide_gresnet(n=1, widen_factor=1, input_shape=_shape(16, 3)),
    "gresnet50": lambda: zoo.resnet_imagenet(depth=50, gated=True, input_shape=_shape(64, 3),
                                             classes=5),
    "preact_resnet50_max": lambda: zoo.preact_resnet50(include_top=False, pooling="max",
                                                       input_shape=_shape(64, 3)),
    "gresnet_cifar_avg": lambda: zoo.gresnet_cifar(n=1, include_top=False, pooling="avg",
                                                   input_shape=_shape(16, 3)),
}


def ops_of(path, format):
    """``{"run": ops, "saver": ops}`` of an artefact (no saver outside a SavedModel)."""
    if format == "tf_saved_model":
        return artefact_checks._saved_model_graph(path)
    if format == "litert":
        return {"run": artefact_checks._litert_op_names(path.read_bytes()), "saver": set()}
    return {"run": artefact_checks._onnx_op_types(path), "saver": set()}


ALLOWED = {
    "tf_saved_model": (artefact_checks.SAVED_MODEL_OPS,
                       artefact_checks.SAVED_MODEL_OPS | artefact_checks.SAVED_MODEL_SAVER_OPS),
    "litert": (artefact_checks.LITERT_OPS, frozenset()),
    "onnx": (artefact_checks.ONNX_OPS, frozenset()),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default=",".join(export.FORMATS))
    args = parser.parse_args(argv)
    formats = args.formats.split(",")
    found = {f: {"run": set(), "saver": set()} for f in formats}
    folder = Path(tempfile.mkdtemp(prefix="artefact-ops-"))
    for name, build in NETS.items():
        model = build()
        for format in formats:
            for raw in (True, False):
                out = folder / f"{name}-{raw}{export.SUFFIXES[format]}"
                export.export(model, out, format=format, include_preprocessing=raw)
                for part, ops in ops_of(out, format).items():
                    found[format][part] |= set(ops)
    missing = 0
    for format, parts in found.items():
        run, saver = ALLOWED[format]
        extra = sorted(parts["run"] - run) + sorted(parts["saver"] - saver)
        missing += len(extra)
        print(f"{format} on {keras.backend.backend()} "
              f"({keras.config.image_data_format()}): {len(parts['run'])} ops, "
              f"{len(parts['saver'])} saver ops; not allowed: {extra or 'none'}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
