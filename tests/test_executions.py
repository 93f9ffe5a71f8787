"""Many training steps in one compiled program (JAX, the device pipeline):
executions carry every planned batch of an epoch in order and never cross
its end; a fused execution trains the steps Keras' per-step run trains, to
float32 rounding; the option is checked in one line and recorded."""

import types

import keras
import numpy as np
import pytest

from keras_gresnet import training
from keras_gresnet.data import devicedata, numpydata
from keras_gresnet.training import executions, runner

BACKEND = keras.backend.backend()


def pixels(count=300, size=12):
    rng = np.random.default_rng(7)
    return (rng.integers(0, 256, size=(count, size, size, 3), dtype=np.uint8),
            rng.integers(0, 10, size=count))


@pytest.mark.parametrize("steps", [1, 2, 3, 5, 16])
def test_executions_carry_every_plan_in_order_and_end_with_each_epoch(steps):
    images, labels = pixels()  # 300 = 4 x 64 + 44: 5 steps an epoch, the last one short
    dataset = numpydata.make_dataset(images, labels, batch_size=64, shuffle=True, augment=True,
                                     seed=3, epochs=(2, 5))
    items = executions.Executions(dataset, steps)
    per_epoch = -(-5 // steps)
    assert items.per_epoch == per_epoch and len(items) == 3 * per_epoch
    plans = []
    for i in range(len(items)):
        (groups,) = items[i]
        assert 1 <= len(groups) <= 2
        sizes = []
        for group in groups:
            assert group["index"].dtype == np.int32 and group["offsets"].dtype == np.int32
            assert group["flips"].dtype == bool
            n, b = group["index"].shape
            assert group["offsets"].shape == (n, b, 2) and group["flips"].shape == (n, b)
            sizes += [b] * n
            plans += [(group["index"][j], group["offsets"][j], group["flips"][j])
                      for j in range(n)]
        # an execution is one epoch's: the short batch only ever comes last
        assert len(sizes) <= steps and sizes.count(44) <= 1 and 44 not in sizes[:-1]
        assert (44 in sizes) == (i % per_epoch == per_epoch - 1)
    assert len(plans) == len(dataset)
    for batch, (index, offsets, flips) in enumerate(plans):
        expected = dataset.batch_plan(batch)
        for got, want in zip((index, offsets, flips), expected):
            np.testing.assert_array_equal(got, want)
    with pytest.raises(IndexError):
        items[len(items)]


def test_without_augmentation_an_execution_carries_indices_only():
    images, labels = pixels(128)
    dataset = numpydata.make_dataset(images, labels, batch_size=32, seed=1, epochs=(0, 1))
    (groups,) = executions.Executions(dataset, 4)[0]
    assert len(groups) == 1 and set(groups[0]) == {"index"}
    np.testing.assert_array_equal(groups[0]["index"].reshape(-1), np.arange(128))


@pytest.mark.parametrize("value", [0, -1, 2.0, True, "16", None])
def test_a_bad_steps_per_execution_is_refused_before_anything_is_written(tmp_path, value):
    with pytest.raises(ValueError, match="steps_per_execution must be 'auto' or a whole number"):
        training.train("gresnet_mlp", model_kwargs=dict(depth=2), steps_per_execution=value,
                       out=tmp_path / "run", epochs=1)
    assert not list(tmp_path.iterdir())


def _net(learning_rate):
    from keras_gresnet import zoo

    keras.utils.set_random_seed(1)
    net = zoo.gresnet_cifar(n=1, weights=None, classes=10, input_shape=(12, 12, 3))
    net.compile(optimizer=keras.optimizers.SGD(learning_rate, momentum=0.9, nesterov=True),
                loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return net


def _values(variables):
    return [np.asarray(keras.ops.convert_to_numpy(v)) for v in variables]


@pytest.mark.parametrize("steps", [5, 2])  # one execution of the epoch; 2 + 2 + the short one
def test_a_fused_epoch_trains_keras_per_step_weights_within_rounding(steps):
    if BACKEND != "jax":  # the fused steps are JAX's; a run elsewhere takes Keras' own
        assert not executions.available(types.SimpleNamespace())
        return
    assert executions.available(types.SimpleNamespace())  # one device, no distribution
    images, labels = pixels(300)  # 5 steps of 64, the last one 44
    options = dict(batch_size=64, shuffle=True, augment=True, seed=3, epochs=(0, 1))
    start = _values(_net(0.01).weights)
    per_step = _net(0.01)
    per_step.fit(devicedata.make_dataset(images, labels, **options), epochs=1, verbose=0,
                 shuffle=False)
    fused = _net(0.01)
    data, per_epoch = executions.fuse(fused, devicedata.make_dataset(images, labels, **options),
                                      steps)
    assert per_epoch == -(-5 // steps)
    history = fused.fit(data, epochs=1, steps_per_epoch=per_epoch, verbose=0, shuffle=False)
    assert int(fused.optimizer.iterations) == int(per_step.optimizer.iterations) == 5
    moved = max(np.abs(a - b).max() for a, b in zip(_values(per_step.weights), start))
    gap = max(np.abs(a - b).max() for a, b in zip(_values(per_step.weights),
                                                   _values(fused.weights)))
    # Each step's float32 sums (convolutions of up to 3 x 3 x 64 terms, BatchNorm's
    # batch means) may round in another order in the scanned program: a few units
    # of 2**-24 relative in each gradient, times the learning rate 0.01, over 5
    # steps with momentum 0.9: far below 1e-5 on weights of order 1; the
    # training itself moves them by more than 1e-3.
    assert moved > 1e-3 and gap < 1e-5, (moved, gap)
    # the last step's logs reach Keras' callbacks: the epoch's loss and accuracy
    np.testing.assert_allclose(history.history["loss"][-1],
                               per_step.history.history["loss"][-1], rtol=1e-4)
    # compiling again drops the fused step, as Keras drops its own
    fused.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    assert fused.train_function is None


def test_runs_say_how_many_steps_a_host_call_runs():
    def line(**versions):
        config = dict(model="m", dataset="d", strategy="default",
                      versions=dict(input_pipeline="device", **versions))
        return runner.devices_line(config, type("S", (), {"num_replicas_in_sync": 1})())

    assert line(steps_per_execution=16, fused_steps=True).endswith(
        "input pipeline device, 16 steps a host call compiled as one")
    assert line(steps_per_execution=16, fused_steps=False).endswith(
        "input pipeline device, up to 16 steps a host call")
    assert line(steps_per_execution=1, fused_steps=False).endswith("input pipeline device")


def test_fuse_refuses_a_host_dataset_and_a_bad_step_count_in_one_line():
    images, labels = pixels(64)
    host = numpydata.make_dataset(images, labels, batch_size=32, epochs=(0, 1))
    with pytest.raises(ValueError, match="give it the device pipeline's dataset .* not "
                                         "ArrayDataset"):
        executions.fuse(None, host)
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got 0"):
        executions.fuse(None, host, 0)
