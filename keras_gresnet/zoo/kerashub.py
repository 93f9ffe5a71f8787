"""The zoo's models as KerasHub models: a backbone (:class:`GResNetBackbone`,
any zoo builder's body), an image converter, a preprocessor and an image
classifier registered with Keras, so that a preset this package writes is a
KerasHub preset (``keras_hub.models.ImageClassifier.from_preset(folder)``
and ``keras_hub.models.Backbone.from_preset(folder)`` load it after
``import keras_gresnet``), and a KerasHub model of a zoo net converts back
to a :class:`~keras_gresnet.layers.ZooModel`. Needs ``keras-hub`` (the extra
``keras-gresnet[keras-hub]``)."""

import json
import os

import keras
import keras_hub
import numpy as np

from keras_gresnet._pixels import scale_offset
from keras_gresnet.layers.inputs import pixel_statistics
from keras_gresnet.layers.model import PACKAGE, ZooModel
from keras_gresnet.weights.arguments import body_kwargs
from keras_gresnet.weights.loading import HEAD, head_layer, save_weights, transfer_weights
from keras_gresnet.zoo.builders import get_model

# The classes a preset of this package may name (config.json, task.json,
# preprocessor.json, image_converter.json): checked before KerasHub reads it.
BACKBONES = (f"{PACKAGE}>GResNetBackbone", f"{PACKAGE}>ZooModel")
TASKS = (f"{PACKAGE}>GResNetImageClassifier", "keras_hub>ImageClassifier")
PREPROCESSORS = (f"{PACKAGE}>GResNetImageClassifierPreprocessor",
                 "keras_hub>ImageClassifierPreprocessor")
CONVERTERS = (f"{PACKAGE}>GResNetImageConverter", "keras_hub>ImageConverter")
FEATURE_MAP = "feature_map"


@keras.saving.register_keras_serializable(package=PACKAGE)
class GResNetBackbone(keras_hub.models.Backbone):
    """The body of any zoo model (``builder`` with ``include_top=False``,
    no pooling) as a KerasHub backbone: normalised pixels in, the last
    feature map out (an MLP's features as a 1x1 map, so that KerasHub's
    pooled head is the zoo's head exactly).

    Args:
        builder: a registered zoo name (``"gresnet_cifar"``).
        builder_kwargs: its architecture arguments (``{"n": 5,
            "input_shape": [28, 28, 1]}``); the head's are dropped (and
            the pixels are the converter's job).
    """

    def __init__(self, builder, builder_kwargs=None, dtype=None, **kwargs):
        body_args = body_kwargs(builder_kwargs)
        outer = keras.config.dtype_policy()
        if dtype is not None:  # the body's layers take the backbone's dtype (KerasHub's rule);
            keras.config.set_dtype_policy(keras.dtype_policies.get(dtype))  # not thread-safe
        try:
            body = get_model(builder, include_top=False, pooling=None, weights=None, **body_args)
        finally:
            keras.config.set_dtype_policy(outer)
        features = body.output
        if len(features.shape) == 2:
            features = keras.layers.Reshape((1, 1, features.shape[-1]),
                                            name=FEATURE_MAP)(features)
        super().__init__(inputs=body.input, outputs=features, dtype=dtype, **kwargs)
        # JSON text, as ZooModel keeps its record: Keras tracks a dict attribute.
        self._builder = builder
        self._body_args = json.dumps(body_args)

    @property
    def builder(self):
        return self._builder

    @property
    def builder_kwargs(self):
        return json.loads(self._body_args)

    def get_config(self):
        return {**super().get_config(), "builder": self._builder,
                "builder_kwargs": self.builder_kwargs}

    def save_weights(self, filepath, overwrite=True, max_shard_size=None):
        """Keras' ``save_weights`` (KerasHub's preset writer calls it), the
        file made in memory and written atomically (h5py writing to a disk
        that fills crashes the process)."""
        if max_shard_size is not None or not str(filepath).endswith(".weights.h5") or \
                (not overwrite and os.path.exists(filepath)):
            return super().save_weights(filepath, overwrite=overwrite,
                                        max_shard_size=max_shard_size)
        save_weights(self, filepath)


@keras.saving.register_keras_serializable(package=PACKAGE)
class GResNetImageConverter(keras_hub.layers.ImageConverter):
    """Raw 0-255 pixels to what a :class:`GResNetBackbone` takes: resized
    (centre crop to the aspect ratio, bilinear) and ``x * scale + offset``
    per channel, the training pipeline's float32 multiply-add; a batch of
    flat vectors (GR's MNIST MLPs) scaled alike, one channel."""

    backbone_cls = GResNetBackbone

    def _expand_non_channel_dims(self, value, inputs):
        if len(keras.ops.shape(inputs)) == 2:  # (batch, pixels): one channel's value
            return np.asarray(value)
        return super()._expand_non_channel_dims(value, inputs)


@keras.saving.register_keras_serializable(package=PACKAGE)
class GResNetImageClassifierPreprocessor(keras_hub.models.ImageClassifierPreprocessor):
    """KerasHub's image classifier preprocessor with the zoo's converter."""

    backbone_cls = GResNetBackbone
    image_converter_cls = GResNetImageConverter


@keras.saving.register_keras_serializable(package=PACKAGE)
class GResNetImageClassifier(keras_hub.models.ImageClassifier):
    """KerasHub's image classifier on a :class:`GResNetBackbone`: global
    average pooling and a dense ``predictions`` head, the zoo's head."""

    backbone_cls = GResNetBackbone
    preprocessor_cls = GResNetImageClassifierPreprocessor

    def save_task_weights(self, filepath):
        """KerasHub's ``save_task_weights`` (the head's weights, the
        backbone's skipped), the file made in memory and written atomically."""
        if not str(filepath).endswith(".weights.h5"):
            return super().save_task_weights(filepath)
        save_weights(self, filepath, objects_to_skip=list(self.backbone._flatten_layers()))


def image_converter(input_shape, preprocessing):
    """The converter of a model taking ``input_shape`` pictures (or flat
    vectors of pixels) normalised by ``preprocessing`` (a card's
    ``{"method", "mean", "std"}``; pixels / 255 when ``None``)."""
    channels = int(input_shape[-1]) if len(input_shape) == 3 else 1
    preprocessing = preprocessing or {"method": "scale"}
    _, mean, std = pixel_statistics(preprocessing["method"], preprocessing.get("mean"),
                                    preprocessing.get("std"), channels=channels)
    scale, offset = scale_offset(mean, std)
    scale, offset = [float(s) for s in scale], [float(o) for o in offset]
    if len(scale) == 1 and channels > 1:
        scale, offset = scale * channels, offset * channels
    size = tuple(int(s) for s in input_shape[:2]) if len(input_shape) == 3 else None
    return GResNetImageConverter(image_size=size, scale=scale, offset=offset)


def _activation(layer):
    name = keras.activations.serialize(layer.activation)
    name = name if isinstance(name, str) else name.get("config", name)
    return None if name == "linear" else name


def to_kerashub(model, preprocessing=None):
    """The :class:`GResNetImageClassifier` of a zoo model with a head (a
    :class:`GResNetBackbone` alone without one), its weights copied by
    layer name, with the converter of ``preprocessing`` (the statistics
    the model was trained on)."""
    if not isinstance(model, ZooModel) or model.builder is None:
        raise ValueError(f"model {getattr(model, 'name', model)!r} remembers no zoo builder: "
                         f"a KerasHub model is built from one")
    shape = model.input_shape[1:]
    backbone = GResNetBackbone(model.builder, dict(model.builder_kwargs,
                                                   include_preprocessing=False))
    transfer_weights(model, backbone, skip_missing=False, exclude=(HEAD,))
    preprocessor = GResNetImageClassifierPreprocessor(image_converter(shape, preprocessing))
    head = head_layer(model)
    if head is None:
        return backbone, preprocessor
    task = GResNetImageClassifier(backbone=backbone, num_classes=head.units,
                                  preprocessor=preprocessor, activation=_activation(head))
    task.output_dense.set_weights(head.get_weights())
    return task, preprocessor


def from_kerashub(model, what):
    """The :class:`~keras_gresnet.layers.ZooModel` of a KerasHub image
    classifier or backbone of a zoo net (a :class:`GResNetBackbone`, or a
    zoo model as KerasHub's backbone), rebuilt by its builder with the
    weights copied by layer name. ``what`` names the source in errors."""
    head = None
    backbone = model
    if isinstance(model, keras_hub.models.ImageClassifier):
        backbone, head = model.backbone, model.output_dense
        if model.pooling != "avg":
            raise ValueError(f"{what}: an image classifier with {model.pooling!r} pooling; a "
                             f"zoo model's head is global average pooling")
    if not isinstance(backbone, (GResNetBackbone, ZooModel)) or backbone.builder is None:
        raise ValueError(f"{what}: its backbone {type(backbone).__name__} is not a zoo "
                         f"model's (GResNetBackbone, or a ZooModel with its builder)")
    kwargs = body_kwargs(backbone.builder_kwargs)
    if head is None:
        kwargs["include_top"] = False
    else:
        kwargs.update(classes=head.units, classifier_activation=_activation(head))
    rebuilt = get_model(backbone.builder, weights=None, **kwargs)
    transfer_weights(backbone, rebuilt, skip_missing=False, exclude=(HEAD,))
    if head is not None:
        head_layer(rebuilt).set_weights(head.get_weights())
    return rebuilt
