"""A preset of this package is a KerasHub preset: KerasHub's own
``from_preset`` loads it (image classifier and backbone, raw pixels in, the
zoo model's answers out), the package reads it back (and its older presets,
and KerasHub's preset of a zoo body), on every backend; KerasHub's own test
cases run on the zoo's classes."""

import json
import os

import keras
import keras_hub
import numpy as np
import pytest
from keras_hub.src.tests import test_case  # KerasHub's own test cases (needs grain)

import keras_gresnet
from keras_gresnet import zoo
from keras_gresnet._pixels import scale_offset
from keras_gresnet.weights.loading import save_weights
from keras_gresnet.zoo.kerashub import (
    GResNetBackbone, GResNetImageClassifier, GResNetImageClassifierPreprocessor,
    image_converter,
)

STATISTICS = {"method": "meanstd", "mean": [0.25], "std": [0.5]}
CARD = {"dataset": "fashion_mnist", "class_names": ["a", "b", "c"], "preprocessing": STATISTICS}


def _pictures(shape, count=4, seed=0):
    return np.random.RandomState(seed).randint(0, 256, (count, *shape)).astype("uint8")


def _conv(**kwargs):
    model = zoo.gresnet_cifar(n=1, input_shape=(12, 12, 1), classes=3, **kwargs)
    # weights away from their initial values, so that a missed copy shows
    model.set_weights([w + np.float32(0.01) * (i + 1) for i, w in enumerate(model.get_weights())])
    return model.remember(model.builder, model.builder_kwargs, CARD)


def _mlp():
    model = zoo.gresnet_mlp(depth=2, input_shape=(6, 6, 1), classes=3)
    return model.remember(model.builder, model.builder_kwargs, CARD)


def _same_weights(a, b):
    assert len(a.weights) == len(b.weights)
    for x, y in zip(a.weights, b.weights):
        assert x.path == y.path or x.shape == y.shape
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(x), keras.ops.convert_to_numpy(y))


@pytest.mark.parametrize("build", [_conv, _mlp], ids=["conv", "mlp"])
def test_a_preset_loads_in_kerashub_with_the_zoo_answers(tmp_path, build):
    model = build()
    preset = zoo.save_preset(model, tmp_path / "preset")
    assert {"config.json", "model.weights.h5", "task.json", "task.weights.h5",
            "preprocessor.json", "image_converter.json", "metadata.json"} <= set(os.listdir(preset))
    pictures = _pictures(model.input_shape[1:])
    expected = model.predict(keras_gresnet.preprocess_input(pictures, model), verbose=0)

    task = keras_hub.models.ImageClassifier.from_preset(str(preset))
    assert isinstance(task, GResNetImageClassifier)
    # The converter computes the pipeline's float32 multiply-add and the head
    # is the same pooling and dense layer: the same operations in the same
    # order, so float32 rounding alone (none expected) separates them.
    np.testing.assert_allclose(task.predict(pictures, verbose=0), expected, rtol=0, atol=1e-6)
    backbone = keras_hub.models.Backbone.from_preset(str(preset))
    assert isinstance(backbone, GResNetBackbone)
    assert len(backbone.output.shape) == 4

    back = zoo.from_preset(preset)
    assert back.builder == model.builder and back.card["class_names"] == CARD["class_names"]
    assert back.card["preprocessing"] == STATISTICS
    _same_weights(back, model)
    metadata = json.loads((preset / "metadata.json").read_text())
    assert metadata["tasks"] == ["ImageClassifier"]  # KerasHub's field, beside the card's
    assert metadata["class_names"] == CARD["class_names"]


def test_a_model_without_head_is_a_backbone_preset(tmp_path):
    body = zoo.gresnet_cifar(n=1, input_shape=(12, 12, 1), include_top=False)
    preset = zoo.save_preset(body, tmp_path / "body")
    assert not (preset / "task.json").exists()
    task = keras_hub.models.ImageClassifier.from_preset(str(preset), num_classes=5)
    assert task.predict(_pictures((12, 12, 1)), verbose=0).shape == (4, 5)
    back = zoo.from_preset(preset)
    assert back.output.shape == body.output.shape
    _same_weights(back, body)


def test_an_older_preset_still_reads(tmp_path):
    model = _conv()
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"builder": model.builder, "builder_kwargs": model.builder_kwargs}))
    save_weights(model, folder / "model.weights.h5")
    (folder / "metadata.json").write_text(json.dumps(CARD))
    back = zoo.from_preset(folder)
    _same_weights(back, model)
    assert back.card["class_names"] == CARD["class_names"]


def test_kerashubs_preset_of_a_zoo_body_reads_as_a_zoo_model(tmp_path):
    body = zoo.gresnet_cifar(n=1, input_shape=(12, 12, 1), include_top=False)
    task = keras_hub.models.ImageClassifier(backbone=body, num_classes=3, activation="softmax")
    task.save_to_preset(str(tmp_path / "hub"))
    back = zoo.from_preset(tmp_path / "hub")
    x = np.random.RandomState(1).normal(size=(3, 12, 12, 1)).astype("float32")
    np.testing.assert_allclose(back.predict(x, verbose=0), task.predict(x, verbose=0),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("file, value", [
    ("config.json", "keras_hub>ResNetBackbone"),
    ("task.json", "keras_hub>CausalLM"),
    ("image_converter.json", "keras.layers>Lambda"),
])
def test_a_preset_naming_another_class_is_refused_unread(tmp_path, file, value):
    preset = zoo.save_preset(_conv(), tmp_path / "preset")
    config = json.loads((preset / file).read_text())
    config["registered_name"] = value
    (preset / file).write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"{file}: names the class '{value}'") as error:
        zoo.from_preset(preset)
    assert "\n" not in str(error.value)


def test_a_preset_whose_task_holds_another_backbone_is_refused(tmp_path):
    preset = zoo.save_preset(_conv(), tmp_path / "preset")
    task = json.loads((preset / "task.json").read_text())
    task["config"]["backbone"]["config"]["builder"] = "resnet_cifar"
    (preset / "task.json").write_text(json.dumps(task))
    with pytest.raises(ValueError, match="task.json: its backbone is not the one of config.json"):
        zoo.from_preset(preset)


def test_the_converter_is_the_pipelines_arithmetic():
    converter = image_converter((4, 4, 3), {"method": "meanstd", "mean": [0.5, 0.4, 0.3],
                                            "std": [0.2, 0.25, 0.3]})
    x = _pictures((4, 4, 3), count=2)
    scale, offset = scale_offset([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])
    expected = x.astype("float32") * scale + offset
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(converter(x)), expected)


class TestKerasHubCases(test_case.TestCase):
    """KerasHub's own backbone, task and preset cases on the zoo's classes."""

    test_session = None  # TensorFlow's TestCase method of that name is no test

    def setUp(self):
        super().setUp()
        self.init_kwargs = {"builder": "gresnet_cifar",
                            "builder_kwargs": {"n": 1, "input_shape": [8, 8, 1]}}
        self.images = np.ones((2, 8, 8, 1), "float32")

    def test_backbone_basics(self):
        # Backend tensors in (KerasHub's own tests' habit: Keras' shape
        # inference takes no numpy array); the builder's input_shape is
        # channels-last, so no channels-first rerun; no int8 quantization (the
        # zoo's layers are float nets).
        self.run_vision_backbone_test(
            cls=GResNetBackbone, init_kwargs=self.init_kwargs,
            input_data=keras.ops.ones((2, 8, 8, 1)), expected_output_shape=(2, 2, 2, 64),
            run_quantization_check=False, run_data_format_check=False)

    def test_task_basics(self):
        preprocessor = GResNetImageClassifierPreprocessor(
            image_converter((8, 8, 1), STATISTICS))
        self.run_task_test(
            cls=GResNetImageClassifier,
            init_kwargs={"backbone": GResNetBackbone(**self.init_kwargs), "num_classes": 3,
                         "preprocessor": preprocessor},
            train_data=(np.full((2, 8, 8, 1), 128, "float32"), np.array([0, 2])),
            expected_output_shape=(2, 3))

    def test_preset(self):
        folder = os.path.join(self.get_temp_dir(), "preset")
        model = zoo.gresnet_cifar(n=1, input_shape=(8, 8, 1), classes=3)
        zoo.save_preset(model, folder)
        expected = model.predict(self.images, verbose=0)
        self.run_preset_test(cls=GResNetBackbone, preset=folder, input_data=self.images,
                             expected_output_shape=(2, 2, 2, 64))
        task = GResNetImageClassifier.from_preset(folder)
        task.preprocessor = None  # normalised pixels in, as the zoo model takes them
        self.assertAllClose(task.predict(self.images, verbose=0), expected, atol=1e-6, rtol=0)
