"""Many training steps in one compiled program: the device pipeline on one
JAX device.

Keras' JAX trainer runs ``steps_per_execution`` steps as that many calls of
its compiled step, a Python loop on the host (Keras 3.15,
``JAXTrainer._make_function``): every step is still one dispatch of a
program whose arguments are every variable of the model, and a small step
waits on it (docs/benchmarks.md: 0.9% of an H200's peak at batch 128).
Here one host call runs up to :data:`STEPS` steps as one XLA program,
``jax.lax.scan`` over Keras' own ``train_step``, each step's batch cut on the
device inside it (:func:`keras_gresnet.data.devicedata.device_batch`) from
the plan the host sends (its examples' indices, crop offsets and flips, 16
bytes an example).

Same batches, same steps, same optimizer and learning-rate schedule (the
optimizer counts every step it applies): the weights are Keras' per-step
run's up to float32 rounding, as XLA fuses the scanned step its own way (a
test bounds the difference). An execution never crosses an epoch's end, so
an epoch of any length is whole executions (CIFAR's 391 steps of 128: 24 of
16 and one of 7) and a resumed run starts where an epoch starts. Keras
counts executions as its steps: the progress bar shows them, and the
callbacks see each execution's last logs.
"""

import functools
import math

import keras
import numpy as np

from keras_gresnet._checks import check_int
from keras_gresnet.data.devicedata import DeviceArrayDataset, device_batch

# The most training steps one host call runs.
STEPS = 16


def available(strategy):
    """Whether a run under ``strategy`` can fuse its steps: JAX on one
    device, no Keras distribution (a distributed step's sharding is Keras'
    to lay out; it keeps Keras' own ``steps_per_execution``)."""
    from keras_gresnet.training import backends

    return (backends.get().FUSED_STEPS and getattr(strategy, "distribution", None) is None
            and keras.distribution.distribution() is None)


class Executions(keras.utils.PyDataset):
    """The plans of ``dataset``'s batches (a
    :class:`~keras_gresnet.data.devicedata.DeviceArrayDataset`), ``steps``
    at a time and never across an epoch's end. Item ``i`` is ``(groups,)``:
    one group for every run of batches of one size (two where an epoch
    ends in a partial batch), each a dict of stacked int32 ``index``
    ``(n, B)`` and, with augmentation, int32 ``offsets`` ``(n, B, 2)`` and
    bool ``flips`` ``(n, B)``."""

    def __init__(self, dataset, steps=STEPS):
        super().__init__()
        self.dataset, self.steps = dataset, steps
        self.per_epoch = math.ceil(dataset.steps_per_epoch / steps)

    def __len__(self):
        return len(self.dataset) // self.dataset.steps_per_epoch * self.per_epoch

    def on_epoch_end(self):
        self.dataset.on_epoch_end()  # a one-pass dataset draws its next order

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"execution {index} of {len(self)}")
        epoch, part = divmod(index, self.per_epoch)
        first = epoch * self.dataset.steps_per_epoch + part * self.steps
        stop = min(first + self.steps, (epoch + 1) * self.dataset.steps_per_epoch)
        groups = []
        for batch in range(first, stop):
            indices, offsets, flips = self.dataset.batch_plan(batch)
            plan = {"index": np.asarray(indices, np.int32)}
            if offsets is not None:
                plan.update(offsets=np.asarray(offsets, np.int32), flips=np.asarray(flips, bool))
            if groups and len(groups[-1][-1]["index"]) == len(indices):
                groups[-1].append(plan)
            else:
                groups.append([plan])
        return (tuple({key: np.stack([plan[key] for plan in group]) for key in group[0]}
                      for group in groups),)


def _execution(model, state, arrays, groups, *, padding, pad_mode, flatten):
    """Keras' ``model.train_step`` over every planned batch of ``groups``
    (:class:`Executions`' item), each cut from ``arrays`` on the device;
    returns the last step's logs and the state, as Keras' step does."""
    import jax

    images, labels, table, scale, offset = arrays

    def step(state, plan):
        batch = device_batch(images, labels, plan["index"], plan.get("offsets"),
                             plan.get("flips"), table, scale, offset, padding=padding,
                             pad_mode=pad_mode, flatten=flatten)
        logs, state = model.train_step(state, batch)
        return state, logs

    # XLA's CPU backend ran the conv nets' step inside a loop's body at a
    # seventeenth of its speed outside (docs/benchmarks.md): there the steps
    # are laid out one after another in the program (compiling takes longer)
    unroll = {"cpu": True}.get(jax.default_backend(), 1)  # JAX's platform, not Keras' backend
    logs = None
    for group in groups:
        state, stacked = jax.lax.scan(step, state, group, unroll=unroll)
        logs = jax.tree.map(lambda value: value[-1], stacked)
    return logs, state


def _arrays(dataset):
    return (dataset.device_images, dataset.device_labels, dataset.table, dataset.scale,
            dataset.offset)


def _cut(dataset):
    """How ``dataset`` cuts its batches (static in the compiled program)."""
    return dict(padding=dataset.padding, pad_mode=dataset.pad_mode, flatten=dataset.flatten)


class TrainFunction:
    """What Keras' JAX ``fit`` calls as its ``train_function``: the next
    :class:`Executions` item, run as one compiled program (its inputs'
    state donated, as Keras donates it)."""

    def __init__(self, model, dataset):
        import jax

        self.arrays, self.cut = _arrays(dataset), _cut(dataset)
        self.compiled = jax.jit(functools.partial(_execution, model, **self.cut),
                                donate_argnums=0)

    def __call__(self, state, iterator):
        (groups,) = next(iterator)
        return self.compiled(state, self.arrays, groups)


def _build_compiled(model, dataset):
    """Build ``model``'s compiled loss and metrics from one real example, so
    that ``fit`` never reads a batch to build them (it would read a plan);
    the metrics' counts are reset after."""
    x, y = dataset[0]
    x, y = x[:1], y[:1]
    y_pred = model(x, training=False)
    model.compute_loss(x=x, y=y, y_pred=y_pred, training=False)
    model.compute_metrics(x, y, y_pred, sample_weight=None)
    model.reset_metrics()


def fuse(model, dataset, steps=STEPS):
    """Make ``model`` (built and compiled, on the JAX backend) train
    ``dataset`` (a :class:`~keras_gresnet.data.devicedata.DeviceArrayDataset`
    of whole epochs) ``steps`` steps a host call; returns ``(executions,
    per_epoch)``: what ``model.fit`` takes instead of ``dataset``, and its
    ``steps_per_epoch``. Compiling or recompiling the model drops the fused
    step (Keras resets its ``train_function``)."""
    check_int(steps, "steps", 1)
    if not isinstance(dataset, DeviceArrayDataset):
        raise ValueError(f"fuse() cuts the batches on the device: give it the device "
                         f"pipeline's dataset (keras_gresnet.data.devicedata.make_dataset), "
                         f"not {type(dataset).__name__}")
    _build_compiled(model, dataset)
    executions = Executions(dataset, steps)
    function = model.train_function
    if isinstance(function, TrainFunction) and function.cut == _cut(dataset):
        # still installed, so the model was not compiled since: its program
        # holds, fed another dataset's pixels
        function.arrays = _arrays(dataset)
    else:
        model.train_function = TrainFunction(model, dataset)
    return executions, executions.per_epoch
