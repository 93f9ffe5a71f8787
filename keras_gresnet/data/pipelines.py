"""A dataset as the papers feed it: :func:`pipeline` turns one into train /
validation / test batches with the papers' preprocessing (statistics from
the training images only) and CIFAR augmentation, through either input
pipeline (``tf.data`` where TensorFlow is installed, else numpy: the two
yield the same batches), and records everything a config needs to rebuild
it (:attr:`Pipeline.config`).
"""

import dataclasses
import importlib.util
import math
import sys

from keras_gresnet._checks import PREPROCESSINGS, check_choice, check_int, check_rate
from keras_gresnet.data.datasets import DATASETS, DatasetInfo
from keras_gresnet.data.folders import FOLDER, read_image_folder
from keras_gresnet.data.preprocessing import (
    PAD_MODES,
    Preprocessing,
    dataset_augment,
    split_indices,
    steps_per_epoch,
    subset_indices,
    test_subset,
)
from keras_gresnet.data.sources import load_with_source

INPUT_PIPELINES = ("auto", "tf_data", "numpy", "device")
IMAGENET = "imagenet2012"  # streamed from tensorflow_datasets (keras_gresnet.data.imagenet)


def tensorflow_installed():
    """Whether TensorFlow can be imported here (without importing it)."""
    if "tensorflow" in sys.modules:  # None: an import that is known to fail
        return sys.modules["tensorflow"] is not None
    return importlib.util.find_spec("tensorflow") is not None


def resolve_input_pipeline(name="auto"):
    """``"tf_data"``, ``"numpy"`` or ``"device"``: the input pipeline
    ``name`` stands for (``"auto"``: ``tf.data`` where TensorFlow is
    installed, else numpy; ``"device"``, JAX's, is asked for by name or
    chosen by :func:`choose_input_pipeline`)."""
    check_choice(name, "input_pipeline", INPUT_PIPELINES)
    if name == "auto":
        return "tf_data" if tensorflow_installed() else "numpy"
    if name == "tf_data" and not tensorflow_installed():
        raise ValueError("input_pipeline='tf_data' needs TensorFlow, which is not installed "
                         "here; use 'numpy' or 'auto'")
    if name == "device":
        from keras_gresnet.data import devicedata

        devicedata.check_backend()
    return name


def choose_input_pipeline(name, dataset, backend, accelerator):
    """The input pipeline a training run of ``dataset`` uses when asked for
    ``name``: ``"auto"`` is the device pipeline on the JAX backend
    (``backend``: Keras' backend's name) with an accelerator
    (``accelerator``: whether it has one) for a dataset held in
    memory (all but ImageNet: 150 MB for CIFAR as uint8), where the host
    pipeline could not keep a GPU busy (docs/benchmarks.md); else
    :func:`resolve_input_pipeline`'s. Every pipeline gives the same batches."""
    check_choice(name, "input_pipeline", INPUT_PIPELINES)
    if name == "auto" and accelerator and dataset != IMAGENET and backend == "jax":
        return "device"
    return resolve_input_pipeline(name)


def dataset_maker(input_pipeline="auto"):
    """The ``make_dataset`` function of the input pipeline ``input_pipeline``."""
    name = resolve_input_pipeline(input_pipeline)
    if name == "tf_data":
        from keras_gresnet.data import tfdata
        return tfdata.make_dataset
    if name == "device":
        from keras_gresnet.data import devicedata
        return devicedata.make_dataset
    from keras_gresnet.data import numpydata
    return numpydata.make_dataset


def make_dataset(images, labels, *, batch_size=128, preprocessing=None, shuffle=False,
                 augment=False, padding=4, pad_mode="zero", flatten=False,
                 drop_remainder=False, seed=0, epochs=None, input_pipeline="auto"):
    """Batches ``(float32 images, int32 labels)`` of arrays in memory through
    ``input_pipeline`` (as in :func:`pipeline`): a ``tf.data.Dataset``
    (:func:`keras_gresnet.data.tfdata.make_dataset`, which documents every
    argument) or its numpy twin's ``keras.utils.PyDataset``, with the same
    batches."""
    return dataset_maker(input_pipeline)(
        images, labels, batch_size=batch_size, preprocessing=preprocessing, shuffle=shuffle,
        augment=augment, padding=padding, pad_mode=pad_mode, flatten=flatten,
        drop_remainder=drop_remainder, seed=seed, epochs=epochs)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """What :func:`pipeline` returns.

    Attributes:
        train, validation, test: batches (a ``tf.data.Dataset``, or a
            ``keras.utils.PyDataset`` from the numpy pipeline)
            ``(float32 images, int32 labels)``; ``validation`` is ``None``
            without ``validation_split``. Only ``train`` is shuffled/augmented.
            ``train`` is one pass, reshuffled by every new iterator;
            :meth:`train_epochs` streams given epochs, each one's order fixed
            by the seed and the epoch (what :func:`keras_gresnet.training.train`
            reads).
        preprocessing: the fitted :class:`Preprocessing` (training statistics).
        input_shape: one example's shape as the model sees it.
        num_classes, num_train, num_validation, num_test: sizes.
        steps_per_epoch: batches in one pass over ``train``.
        config: the arguments, the statistics and the data source, JSON-ready.
    """

    train: object
    validation: object
    test: object
    preprocessing: Preprocessing
    input_shape: tuple
    num_classes: int
    num_train: int
    num_validation: int
    num_test: int
    steps_per_epoch: int
    config: dict
    train_epochs_fn: object = dataclasses.field(default=None, repr=False, compare=False)

    def train_epochs(self, start, stop):
        """The training batches of epochs ``start .. stop - 1`` as one stream,
        each epoch's order and augmentation a pure function of the seed and
        the epoch (:func:`make_dataset`'s ``epochs``): what a resumed or
        multi-worker run reads, ``steps_per_epoch`` batches per epoch."""
        return self.train_epochs_fn((start, stop))


def process_share(dataset, index, count):
    """Process ``index`` of ``count``'s share of every batch of ``dataset``
    (a ``tf.data.Dataset`` or ``keras.utils.PyDataset`` of ``(images,
    labels)`` batches): rows ``index * n // count .. (index + 1) * n // count``
    of each batch of ``n``. Every process of a JAX cluster builds the same
    seeded stream and feeds Keras its share; Keras assembles the global
    batch (``jax.make_array_from_process_local_data``), so one step of the
    cluster sees exactly the examples one process sees. ``count=1`` returns
    ``dataset`` itself."""
    check_int(count, "count", 1)
    check_int(index, "index", 0)
    if index >= count:
        raise ValueError(f"index must be 0..{count - 1} (a process of {count}), got {index}")
    if count == 1:
        return dataset
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "on_epoch_end"):
        from keras_gresnet.data import numpydata
        return numpydata.BatchShare(dataset, index, count)
    from keras_gresnet.data import tfdata
    return tfdata.batch_share(dataset, index, count)


def pipeline(name, *, data_dir=None, download=True, preprocessing="scale", batch_size=128,
             validation_split=0.0, augment=False, padding=4, pad_mode="zero", flatten=False,
             drop_remainder=False, seed=0, max_train_examples=None, max_test_examples=None,
             input_pipeline="auto", manual_dir=None, image_shape=None):
    """Train / validation / test datasets of ``name``, as the papers feed them.

    GR's MNIST nets: ``preprocessing="scale"``. HE and GR's pre-activation
    ResNets: ``preprocessing="mean", augment=True``. WRN:
    ``preprocessing="meanstd", augment=True, pad_mode="reflect"``. Batch 128
    in all three. ``"imagenet2012"`` streams HE's ImageNet data from
    ``tensorflow_datasets`` (:func:`keras_gresnet.data.imagenet.pipeline_fields`:
    ``preprocessing="meanstd"``, fb's statistics; ``manual_dir`` holds the
    ILSVRC tar files; no validation split, padding or flattening).

    The statistics come from the training examples only (after holding out
    the validation part), never from the test split.

    Args:
        name: ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"`` or ``"cifar100"``.
        data_dir, download: as in :func:`keras_gresnet.data.load`.
        preprocessing: ``"scale"``, ``"mean"`` or ``"meanstd"``
            (see :class:`Preprocessing`).
        batch_size: examples per batch.
        validation_split: fraction of the TRAINING split held out for
            validation, chosen by ``seed``; 0 for none.
        augment, padding, pad_mode, flatten, drop_remainder, seed: as in
            :func:`make_dataset` (``drop_remainder`` applies to ``train`` only).
        max_train_examples, max_test_examples: keep a seeded random subset of
            at most this many training (after the validation split) and test
            examples, for quick runs; ``None`` keeps all.
        image_shape: ``name="folder"`` only: the ``(height, width, channels)``
            the pictures are fitted to (a model's input; default: the
            folder's most common size, :mod:`keras_gresnet.data.folders`).
        input_pipeline: ``"tf_data"`` (``tf.data.Dataset`` batches),
            ``"numpy"`` (``keras.utils.PyDataset`` batches, no TensorFlow),
            ``"device"`` (the numpy pipeline's batches made on JAX's device
            from pixels put there once, :mod:`keras_gresnet.data.devicedata`),
            or ``"auto"``: ``tf.data`` where TensorFlow is installed. All give
            the same batches.
    """
    if name == IMAGENET:
        return _imagenet_pipeline(data_dir, manual_dir, preprocessing, batch_size,
                                  validation_split, augment, flatten, seed,
                                  max_train_examples, max_test_examples, input_pipeline)
    validation_split = _checked_pipeline_arguments(
        name, preprocessing, batch_size, padding, seed, validation_split,
        max_train_examples, max_test_examples)
    check_choice(pad_mode, "pad_mode", PAD_MODES)
    if image_shape is not None and name != FOLDER:
        raise ValueError(f"image_shape is for name={FOLDER!r} (a picture folder); "
                         f"{name!r} has its own shape")
    make_dataset = dataset_maker(input_pipeline)
    folder = None
    if name == FOLDER:
        if data_dir is None:
            raise ValueError(f"name={FOLDER!r} reads the picture folder data_dir; pass it "
                             f"(--data-dir PATH)")
        folder = read_image_folder(data_dir, image_shape=image_shape, seed=seed, verbose=True)
        info = DatasetInfo(FOLDER, folder["image_shape"], len(folder["class_names"]), "folder",
                           {}, class_names=tuple(folder["class_names"]))
        splits = _split(folder["train"], folder["test"], validation_split, seed,
                        max_train_examples, max_test_examples)
        sources = folder["source"]
    else:
        info = DATASETS[name]
        splits, sources = _split_arrays(name, data_dir, download, validation_split, seed,
                                        max_train_examples, max_test_examples)
    train_images, train_labels = splits["train"]
    fitted = Preprocessing.fit(preprocessing, train_images)
    common = dict(batch_size=batch_size, preprocessing=fitted, flatten=flatten)
    augment = dataset_augment(augment, info.flips_keep_labels)
    train_options = dict(shuffle=True, augment=augment, padding=padding, pad_mode=pad_mode,
                         drop_remainder=drop_remainder, seed=seed, **common)
    train = make_dataset(train_images, train_labels, **train_options)
    validation = None
    if len(splits["validation"][1]):
        validation = make_dataset(*splits["validation"], **common)
    test = make_dataset(*splits["test"], **common)

    image_shape = info.image_shape
    num_train = len(train_labels)
    config = dict(
        name=name, preprocessing=fitted.get_config(), batch_size=batch_size,
        validation_split=validation_split, augment=augment, padding=padding, pad_mode=pad_mode,
        flatten=flatten,
        drop_remainder=drop_remainder, seed=seed, max_train_examples=max_train_examples,
        max_test_examples=max_test_examples, source=sources)
    if folder is not None:  # what a folder's run must remember to read its labels
        config.update(class_names=list(folder["class_names"]), image_shape=list(image_shape))
    return Pipeline(
        train=train,
        validation=validation,
        test=test,
        preprocessing=fitted,
        input_shape=(math.prod(image_shape),) if flatten else image_shape,
        num_classes=info.num_classes,
        num_train=num_train,
        num_validation=len(splits["validation"][1]),
        num_test=len(splits["test"][1]),
        steps_per_epoch=steps_per_epoch(num_train, batch_size, drop_remainder),
        config=config,
        train_epochs_fn=lambda epochs: make_dataset(train_images, train_labels,
                                                    epochs=epochs, **train_options),
    )


def _imagenet_pipeline(data_dir, manual_dir, preprocessing, batch_size, validation_split,
                       augment, flatten, seed, max_train_examples, max_test_examples,
                       input_pipeline):
    """:func:`keras_gresnet.data.imagenet.pipeline_fields`, after refusing what it
    does not do."""
    if preprocessing != "meanstd":
        raise ValueError(f"preprocessing={preprocessing!r}: ImageNet takes 'meanstd' "
                         f"(fb.resnet.torch's fixed per-channel statistics)")
    if validation_split or flatten:
        raise ValueError("ImageNet: validation_split and flatten are not available "
                         "(its validation split is the test set)")
    if resolve_input_pipeline(input_pipeline) != "tf_data":
        raise ValueError("ImageNet streams through tensorflow_datasets: input_pipeline "
                         "must be 'tf_data' or 'auto' with TensorFlow installed")
    from keras_gresnet.data import imagenet

    return Pipeline(**imagenet.pipeline_fields(
        data_dir=data_dir, manual_dir=manual_dir, batch_size=batch_size, augment=augment,
        seed=seed, max_train_examples=max_train_examples, max_test_examples=max_test_examples))


def _checked_pipeline_arguments(name, preprocessing, batch_size, padding, seed,
                                validation_split, max_train_examples, max_test_examples):
    """Every argument of :func:`pipeline` checked before any data is read;
    returns ``validation_split`` as a float."""
    check_choice(name, "name", (*DATASETS, IMAGENET, FOLDER))
    check_choice(preprocessing, "preprocessing", PREPROCESSINGS)
    check_int(batch_size, "batch_size", 1)
    check_int(padding, "padding", 0)
    check_int(seed, "seed", 0)
    validation_split = check_rate(validation_split, "validation_split")
    for value, argument in ((max_train_examples, "max_train_examples"),
                            (max_test_examples, "max_test_examples")):
        if value is not None:
            check_int(value, argument, 1)
    return validation_split


def _split_arrays(name, data_dir, download, validation_split, seed, max_train_examples,
                  max_test_examples):
    """``({"train", "validation", "test": (images, labels)}, {"train", "test":
    source})``: the validation part held out of the training split, then the
    seeded subsets kept."""
    images, labels, source = load_with_source(name, "train", data_dir=data_dir,
                                              download=download)
    test_images, test_labels, test_source = load_with_source(name, "test", data_dir=data_dir,
                                                             download=download)
    splits = _split((images, labels), (test_images, test_labels), validation_split, seed,
                    max_train_examples, max_test_examples)
    return splits, {"train": source, "test": test_source}


def _split(train, test, validation_split, seed, max_train_examples, max_test_examples):
    """The validation part held out of ``train``, then the seeded subsets."""
    (images, labels), (test_images, test_labels) = train, test
    train_index, validation_index = split_indices(len(images), validation_split, seed)
    train_index = subset_indices(train_index, max_train_examples, seed)
    test_index = test_subset(len(test_images), max_test_examples, seed)
    return {
        "train": (images[train_index], labels[train_index]),
        "validation": (images[validation_index], labels[validation_index]),
        "test": (test_images[test_index], test_labels[test_index]),
    }
