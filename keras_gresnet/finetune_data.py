"""The data :func:`keras_gresnet.finetune.finetune` is handed, checked and
shaped for ``model.fit`` before any training: a folder of pictures read and
fitted to the model's input, a ``tf.data.Dataset`` or
``keras.utils.PyDataset`` of ``(x, y)`` batches, or an ``(x, y)`` pair of
arrays, each checked against the model's input and the number of classes
(one line naming the argument), its labels made integers, its pixels told
raw 0-255 or preprocessed (:data:`RAW_PIXELS_ABOVE`), and the class names a
folder or dataset carries kept (:func:`dataset_class_names`).
"""

import sys

import keras
import numpy as np


def _is_batches(data):
    """A dataset of batches (``tf.data.Dataset``, ``keras.utils.PyDataset``),
    told apart without importing TensorFlow."""
    if isinstance(data, keras.utils.PyDataset):
        return True
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(data, tf.data.Dataset)


# Pixels above this are raw 0-255 values: preprocessed pixels are
# (x / 255 - mean) / std with std >= 1/16 in any real dataset.
RAW_PIXELS_ABOVE = 16.0


def _is_raw(data):
    """Whether the examples of ``data`` (an ``(x, y)`` pair of arrays, or
    batches whose first is looked at) are raw 0-255 pixels: uint8, or
    floats above :data:`RAW_PIXELS_ABOVE`."""
    if _is_batches(data):
        first = [data[0]] if isinstance(data, keras.utils.PyDataset) and len(data) else \
            [] if isinstance(data, keras.utils.PyDataset) else list(data.take(1))
        if not first:
            raise ValueError("the data hold no batch: give at least one example")
        x = first[0][0]
    else:
        x = data[0]
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return True
    return bool(np.issubdtype(x.dtype, np.floating) and x.size
                and float(np.nanmax(x)) > RAW_PIXELS_ABOVE)


def _folder_data(path, model, classes, seed=0):
    """``((x, y) train, (x, y) test, class names)``: uint8 pictures of the
    folder ``path`` fitted to ``model``'s input, the test part held out by
    ``seed``; ``classes`` must be the folder's count (``None``: whatever it
    holds)."""
    from keras_gresnet.data.folders import read_image_folder

    # a flat input (an MLP's 784 pixels) is a square grey picture there
    folder = read_image_folder(path, image_shape=tuple(model.input_shape[1:]), seed=seed,
                               verbose=True)
    found = len(folder["class_names"])
    if classes is not None and found != classes:
        raise ValueError(f"classes={classes}, but the picture folder {str(path)!r} has "
                         f"{found} classes ({', '.join(folder['class_names'][:10])}); pass "
                         f"classes={found}")
    return folder["train"], folder["test"], list(folder["class_names"])


def _fit_data(data, argument, classes, model=None):
    """``data`` as ``model.fit`` takes it: a ``keras.utils.PyDataset`` as it
    is, a ``tf.data.Dataset`` of ``(x, y)`` batches (:func:`_dataset_batches`),
    or an ``(x, y)`` pair of arrays whose integer labels are checked to lie
    in ``[0, classes)`` (one-hot labels become integers), whose shape is
    checked against ``model``'s input (pixels are left as they are: see
    :func:`keras_gresnet.finetune.finetune`)."""
    if isinstance(data, keras.utils.PyDataset):
        return data
    if _is_batches(data):
        return _dataset_batches(data, argument, classes, model)
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(
            f"{argument} must be a folder of pictures, a tf.data.Dataset or "
            f"keras.utils.PyDataset of (x, y) batches, or an (x, y) pair of arrays, got "
            f"{type(data).__name__}"
        )
    x, y = data
    labels = np.asarray(y)
    if labels.ndim == 2 and labels.shape[1] == classes and np.all(
            (labels == 0) | (labels == 1)) and np.all(labels.sum(axis=1) == 1):
        labels = labels.argmax(axis=1)  # one-hot rows: their classes
    elif labels.ndim == 2 and labels.shape[1] != 1 and np.all((labels == 0) | (labels == 1)):
        raise ValueError(f"{argument}: one-hot labels with {labels.shape[1]} columns, but "
                         f"classes={classes}")
    labels = labels.reshape(len(labels)) if labels.ndim == 2 and labels.shape[1] == 1 \
        else labels
    if model is not None:
        x = _model_pixels(np.asarray(x), argument, model)
    if len(x) != len(labels) or not len(labels):
        raise ValueError(
            f"{argument}: x and y need the same number of examples, at least 1; "
            f"got {len(x)} and {len(labels)}"
        )
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= classes:
        raise ValueError(
            f"{argument}: labels must be integers in [0, classes={classes}) (renumber "
            f"the new classes from 0), got {labels.dtype} in "
            f"[{labels.min()}, {labels.max()}]"
        )
    return x, labels


def _model_pixels(x, argument, model, remedy="convert them, or pass a picture folder "
                                               "(converted for you)"):
    """``x`` checked against ``model``'s input (one line naming both for the
    commonest mistakes: RGB into a grey net and back, flat against image
    batches, ending with ``remedy``) and reshaped to it."""
    want = tuple(model.input_shape[1:])
    have = tuple(x.shape[1:])
    if have != want:
        flat = len(want) == 1 and int(np.prod(have)) == want[0]
        if flat:
            x = x.reshape(len(x), -1)
        elif len(want) == 3 and len(have) == 3 and have[:2] == want[:2]:
            raise ValueError(
                f"{argument}: images have {have[2]} channel(s), the model takes {want[2]} "
                f"({'grey' if want[2] == 1 else 'RGB'}, input {want}); {remedy}")
        elif len(want) == 3 and len(have) == 1 and have[0] == int(np.prod(want)):
            x = x.reshape(len(x), *want)
        else:
            raise ValueError(f"{argument}: examples of shape {have}, the model takes {want}")
    return x


def dataset_class_names(data):
    """The ``class_names`` a dataset carries (``image_dataset_from_directory``
    sets them), as a list of strings, or ``None``."""
    names = getattr(data, "class_names", None)
    if names is None or isinstance(names, str) or not all(isinstance(n, str) for n in names):
        return None
    return list(names)


def _dataset_batches(data, argument, classes, model):
    """The ``tf.data.Dataset`` ``data`` of ``(x, y)`` (or ``(x, y, weights)``)
    batches, checked before any training against ``model``'s input and
    ``classes`` from its ``element_spec`` and first batch (the arrays'
    rules, in one line each), with integer labels: one-hot rows
    (``label_mode="categorical"``) become their class, 0/1 floats
    (``"binary"``) and integers a vector of int32. A dataset's
    ``class_names`` must number ``classes``."""
    import tensorflow as tf

    spec = data.element_spec
    if not isinstance(spec, tuple) or len(spec) not in (2, 3) or not all(
            isinstance(s, tf.TensorSpec) for s in spec[:2]):
        raise ValueError(
            f"{argument}: a dataset of {_spec_words(spec)}, not of (x, y) batches (a dataset "
            f"without labels, e.g. image_dataset_from_directory(label_mode=None)?); give "
            f"labelled batches: label_mode 'int', 'categorical' or 'binary'")
    names = dataset_class_names(data)
    if names is not None and len(names) != classes:
        raise ValueError(f"classes={classes}, but {argument} has {len(names)} classes "
                         f"({', '.join(names[:10])}); pass classes={len(names)}")
    want = tuple(model.input_shape[1:])
    if spec[0].shape.rank == len(want) and spec[1].shape.rank == 0:  # one example each
        raise ValueError(f"{argument}: a dataset of single examples {spec[0].shape}, not of "
                         f"batches; batch it, e.g. {argument}.batch(32)")
    first = list(data.take(1))
    if not first:
        raise ValueError(f"{argument}: the dataset holds no batch: give at least one example")
    x, y = (np.asarray(t) for t in first[0][:2])
    remedy = ("load them with image_dataset_from_directory(color_mode="
              f"{'grayscale' if want[-1] == 1 else 'rgb'!r}) or convert them")
    reshape = _model_pixels(x, argument, model, remedy).shape[1:] != x.shape[1:]
    one_hot = y.ndim == 2 and y.shape[1] != 1
    if one_hot and y.shape[1] != classes:
        raise ValueError(f"{argument}: one-hot labels with {y.shape[1]} columns, but "
                         f"classes={classes}")
    if one_hot and not (np.all((y == 0) | (y == 1)) and np.all(y.sum(axis=1) == 1)):
        raise ValueError(f"{argument}: labels of shape {y.shape} are not one-hot rows (one 1 "
                         f"per row); give one-hot rows or integer labels")
    labels = y.argmax(axis=1) if one_hot else y.reshape(len(y)) if y.ndim == 2 else y
    if y.ndim > 2 or labels.ndim != 1 or not len(labels) or not np.all(
            (labels == np.round(labels)) & (labels >= 0) & (labels < classes)):
        raise ValueError(
            f"{argument}: labels must be integers in [0, classes={classes}) or one-hot rows "
            f"of {classes}, got {y.dtype} of shape {y.shape}"
            + (f" in [{labels.min()}, {labels.max()}]" if y.size and y.ndim <= 2 else ""))

    def integer_labels(x, y, *weights):
        y = tf.argmax(y, axis=-1, output_type=tf.int32) if one_hot else \
            tf.reshape(tf.cast(y, tf.int32), [-1])
        return (tf.reshape(x, (-1, *want)) if reshape else x, y, *weights)

    return data.map(integer_labels)


def _spec_words(spec):
    """A dataset's ``element_spec`` in words: ``TensorSpec(shape=(None, 28,
    28, 1), dtype=tf.float32)`` as ``float32 (None, 28, 28, 1)``."""
    import tensorflow as tf

    return ", ".join(f"{s.dtype.name} {tuple(s.shape)}" if isinstance(s, tf.TensorSpec)
                     else type(s).__name__ for s in tf.nest.flatten(spec))



class EpochBatches(keras.utils.PyDataset):
    """The batches of the arrays ``x``, ``y`` for the epochs ``start .. stop -
    1`` as one stream (read it with ``steps_per_epoch``), each epoch's order a
    pure function of ``(seed, epoch)``
    (:func:`keras_gresnet.data.preprocessing.epoch_plan`, the order of
    :func:`keras_gresnet.training.train`'s pipelines): two runs with one
    seed see the same batches, and a run resumed at epoch ``e`` those the
    uninterrupted run saw. The pixels are handed on as they are."""

    def __init__(self, x, y, *, batch_size, seed, epochs):
        super().__init__()
        from keras_gresnet.data.preprocessing import steps_per_epoch

        self.x, self.y = x, y
        self.batch_size, self.seed = batch_size, seed
        self.start, self.stop = epochs
        self.steps_per_epoch = steps_per_epoch(len(y), batch_size)
        self._plan = (None, None)

    def __len__(self):
        return (self.stop - self.start) * self.steps_per_epoch

    def __getitem__(self, index):
        from keras_gresnet.data.preprocessing import epoch_plan

        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of {len(self)}")
        epoch, step = divmod(index, self.steps_per_epoch)
        epoch += self.start
        if self._plan[0] != epoch:
            self._plan = epoch, epoch_plan(len(self.y), seed=self.seed, epoch=epoch)[0]
        batch = self._plan[1][step * self.batch_size:(step + 1) * self.batch_size]
        return self.x[batch], self.y[batch]
