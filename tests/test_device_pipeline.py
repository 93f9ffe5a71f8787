"""The device input pipeline (JAX): the numpy pipeline's batches, bit for
bit, made on the device; refused on the other backends in one line; chosen
by "auto" on JAX with an accelerator only; a run fed by it is the run the
numpy pipeline feeds."""

import json
import types

import keras
import numpy as np
import pytest

from keras_gresnet import data, training
from keras_gresnet.data import devicedata, numpydata
from keras_gresnet.data.preprocessing import CROP_ONLY, Preprocessing
from keras_gresnet.training import runner
from keras_gresnet.training.runner import steps_per_execution

BACKEND = keras.backend.backend()
REFUSAL = "input_pipeline='device' keeps the data on JAX's devices and needs KERAS_BACKEND=jax"
UNKNOWN = "Unknown input_pipeline='gpu'; accepted: 'auto', 'tf_data', 'numpy', 'device'"


def pixels(dtype=np.uint8, channels=3, count=300):
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, size=(count, 12, 12, channels)).astype(dtype)
    return images, rng.integers(0, 10, size=count)


def both_pipelines(images, labels, options):
    """``(numpy's, the device's)`` datasets of the same arguments on JAX;
    elsewhere the device pipeline's one-line refusal is checked, ``None``."""
    if BACKEND != "jax":
        with pytest.raises(ValueError, match=REFUSAL):
            devicedata.make_dataset(images, labels, **options)
        return None
    return (numpydata.make_dataset(images, labels, **options),
            devicedata.make_dataset(images, labels, **options))


# (augment, pad_mode, flatten, epochs): CIFAR's crop and flip, the crop
# alone (a dataset whose flips change labels), WRN's reflection, GR's flat
# MLP input, an epoch stream (what a run reads) and one reshuffled pass.
CASES = {
    "crop_flip": (True, "zero", False, (2, 4)),
    "crop_only": (CROP_ONLY, "zero", False, (0, 2)),
    "reflect": (True, "reflect", False, (5, 6)),
    "flat": (False, "zero", True, (0, 1)),
    "one_pass": (True, "zero", False, None),
}


@pytest.mark.parametrize("case", CASES)
def test_device_batches_are_the_numpy_pipelines_bit_for_bit(case):
    augment, pad_mode, flatten, epochs = CASES[case]
    images, labels = pixels()
    options = dict(batch_size=64, preprocessing=Preprocessing.fit("meanstd", images),
                   shuffle=True, augment=augment, pad_mode=pad_mode, flatten=flatten, seed=3,
                   epochs=epochs)
    pair = both_pipelines(images, labels, options)
    if pair is None:
        return
    import jax

    host, device = pair
    assert len(device) == len(host) and len(host) == 5 * (1 if epochs is None else
                                                        epochs[1] - epochs[0])
    for i in range(len(host)):  # the last batch of an epoch is the short one, 300 = 4 x 64 + 44
        (x, y), (dx, dy) = host[i], device[i]
        assert isinstance(dx, jax.Array) and isinstance(dy, jax.Array)
        np.testing.assert_array_equal(np.asarray(dx), x)
        np.testing.assert_array_equal(np.asarray(dy), y)
    host.on_epoch_end(), device.on_epoch_end()  # one pass: the next pass's key, drawn alike
    np.testing.assert_array_equal(np.asarray(device[0][0]), host[0][0])


def test_float_pixels_are_normalised_on_the_device_within_one_rounding():
    images, labels = pixels(np.float32)
    fitted = Preprocessing.fit("meanstd", images)
    options = dict(batch_size=100, preprocessing=fitted, seed=1, epochs=(0, 1))
    pair = both_pipelines(images, labels, options)
    if pair is None:
        return
    host, device = pair
    scale, _ = fitted.scale_offset()
    for i in range(len(host)):
        x = host[i][0]
        product = images[100 * i:100 * (i + 1)] * np.float32(scale)
        # x * scale + offset: the host rounds the product, then the sum; XLA
        # may fuse both into one FMA, which skips the product's rounding
        # (half a unit of the product's last place) and rounds the sum once
        bound = 0.5 * np.spacing(np.abs(product)) + np.spacing(np.abs(x))
        assert (np.abs(np.asarray(device[i][0]) - x) <= bound).all()


def test_auto_is_the_device_pipeline_on_jax_with_an_accelerator_only():
    host = data.resolve_input_pipeline("auto")
    for dataset in ("cifar10", "fashion_mnist", data.FOLDER):
        for backend in ("jax", "tensorflow", "torch"):
            assert data.choose_input_pipeline("auto", dataset, backend, accelerator=False) == host
            assert data.choose_input_pipeline("auto", dataset, backend, accelerator=True) == (
                "device" if backend == "jax" else host)
    assert data.choose_input_pipeline("auto", data.IMAGENET, "jax", accelerator=True) == host
    assert data.choose_input_pipeline("numpy", "cifar10", "jax", accelerator=True) == "numpy"
    with pytest.raises(ValueError, match=UNKNOWN):
        data.choose_input_pipeline("gpu", "cifar10", "jax", accelerator=True)


def test_steps_per_execution_divides_the_epoch():
    # Keras runs whole executions: a count that is no divisor would move the
    # epoch boundaries, and with them the schedule and the per-epoch records
    assert [steps_per_execution(n) for n in (469, 391, 8, 48, 1)] == [7, 1, 8, 16, 1]


def test_an_unknown_input_pipeline_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match=UNKNOWN):
        training.train("gresnet_mlp", model_kwargs=dict(depth=2), input_pipeline="gpu",
                       out=tmp_path / "run", epochs=1)
    assert not list(tmp_path.iterdir())


@pytest.mark.integration  # trains twice on real Fashion-MNIST
def test_a_run_fed_by_the_device_pipeline_is_the_numpy_pipelines_run(tmp_path):
    arguments = dict(model_kwargs=dict(n=1), dataset="fashion_mnist",
                     epochs=2, max_train_examples=512, max_test_examples=128, verbose=0)
    if BACKEND != "jax":
        with pytest.raises(ValueError, match=REFUSAL):
            training.train("gresnet_cifar", out=tmp_path / "device", input_pipeline="device",
                           **arguments)
        assert not (tmp_path / "device").exists()
        return
    runs = {p: training.train("gresnet_cifar", out=tmp_path / p, input_pipeline=p, **arguments)
            for p in ("numpy", "device")}
    # 4 steps an epoch, 4 a host call on the device pipeline (Keras' way on a
    # CPU): the same batches, the same steps, so the same history and the same
    # weights to the bit
    assert steps_per_execution(4) == 4
    assert runs["device"].config["versions"]["steps_per_execution"] == 16
    assert runs["device"].config["versions"]["fused_steps"] is False
    assert runs["device"].history == [
        {**row, "seconds": new["seconds"]}
        for row, new in zip(runs["numpy"].history, runs["device"].history)]
    for a, b in zip(runs["numpy"].model.weights, runs["device"].model.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    for p in runs:
        config = json.loads((tmp_path / p / "config.json").read_text())
        assert config["versions"]["input_pipeline"] == p
        one_device = types.SimpleNamespace(num_replicas_in_sync=1)
        assert runner.devices_line(config, one_device).endswith(
            "input pipeline numpy" if p == "numpy" else
            "input pipeline device, up to 16 steps a host call")
    # asked for, the epoch's 4 steps run as one compiled program: 8 steps in all,
    # recorded (the weights to rounding: tests/test_executions.py)
    fused = training.train("gresnet_cifar", out=tmp_path / "fused", input_pipeline="device",
                           steps_per_execution=4, **arguments)
    assert int(fused.model.optimizer.iterations) == int(runs["numpy"].model.optimizer.iterations)
    assert int(fused.model.optimizer.iterations) == 8
    assert [row["epoch"] for row in fused.history] == [1, 2]
    assert fused.config["versions"]["steps_per_execution"] == 4
    assert fused.config["versions"]["fused_steps"] is True
