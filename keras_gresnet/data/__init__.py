"""The papers' datasets as in-memory arrays and input pipelines.

GR trains its fully-connected nets on MNIST and its ResNets on CIFAR-10/100;
HE and WRN train on CIFAR. This package gives both halves:

- :func:`load` reads one split of ``mnist``, ``fashion_mnist``, ``cifar10`` or
  ``cifar100`` into numpy arrays: ``images`` uint8 ``(N, H, W, C)`` and
  ``labels`` int32 ``(N,)``. It looks, in order, in ``data_dir`` (the datasets'
  own file formats), in Debian's ``dataset-fashion-mnist`` folder, then asks
  ``tensorflow_datasets`` (which downloads where there is a network).
- :func:`pipeline` turns a dataset into train / validation / test
  batches (``tf.data.Dataset`` where TensorFlow is installed, else a
  ``keras.utils.PyDataset`` of the numpy twin) with the papers' preprocessing
  (:class:`Preprocessing`, statistics from the training images only) and
  CIFAR augmentation (:func:`crop_and_flip` at the offsets and flips of
  :func:`epoch_plan`), and records everything a config needs to rebuild it
  (:attr:`Pipeline.config`).

Example::

    from keras_gresnet import data
    p = data.pipeline("cifar10", preprocessing="mean", augment=True, seed=1)
    model.fit(p.train, validation_data=p.test, epochs=...)
    p.config["preprocessing"]  # {"method": "mean", "mean": [...], "std": [...]}

Modules, each importing only those before it:

- :mod:`~keras_gresnet.data.datasets`: the dataset table (names, shapes,
  class names, files), plain Python;
- :mod:`~keras_gresnet.data.readers`: the IDX and CIFAR file readers (numpy);
- :mod:`~keras_gresnet.data.folders`: a folder of pictures, one subfolder per
  class (Pillow, numpy): ``pipeline("folder", data_dir=PATH)``;
- :mod:`~keras_gresnet.data.sources`: where :func:`load` looks (numpy);
- :mod:`~keras_gresnet.data.preprocessing`: statistics, seeded index
  choices and every epoch's order and crops (numpy);
- :mod:`~keras_gresnet.data.tfdata`: the ``tf.data`` pipeline, the only
  module that imports TensorFlow;
- :mod:`~keras_gresnet.data.numpydata`: its numpy twin (same batches);
- :mod:`~keras_gresnet.data.imagenet`: HE's ImageNet data, streamed from
  ``tensorflow_datasets`` (TensorFlow imported on use);
- :mod:`~keras_gresnet.data.devicedata`: the numpy pipeline's batches made on
  JAX's device (``input_pipeline="device"``);
- :mod:`~keras_gresnet.data.pipelines`: :func:`pipeline`, through any of them;
- :mod:`~keras_gresnet.data.synthetic`: synthetic datasets in the official
  file formats, for tests and benchmarks.

Each name below loads its module on first use, so that
``keras_gresnet.data.DATASETS`` costs no numpy and ``data.load`` or
``data.pipeline(..., input_pipeline="numpy")`` no TensorFlow.
"""

import importlib

_SUBMODULES = ("datasets", "devicedata", "folders", "imagenet", "numpydata", "pipelines",
               "preprocessing", "readers", "sources", "synthetic", "tfdata")
# Public name -> the module that defines it.
_NAMES = {
    "DATASETS": "datasets",
    "SPLITS": "datasets",
    "DatasetInfo": "datasets",
    "read_idx": "readers",
    "FOLDER": "folders",
    "read_image_folder": "folders",
    "read_test_folder": "folders",
    "DatasetNotFoundError": "sources",
    "datasets_folder": "sources",
    "load": "sources",
    "load_with_source": "sources",
    "PREPROCESSINGS": "preprocessing",
    "PAD_MODES": "preprocessing",
    "split_indices": "preprocessing",
    "test_subset": "preprocessing",
    "Preprocessing": "preprocessing",
    "epoch_plan": "preprocessing",
    "INPUT_PIPELINES": "pipelines",
    "IMAGENET": "pipelines",
    "Pipeline": "pipelines",
    "dataset_maker": "pipelines",
    "pipeline": "pipelines",
    "process_share": "pipelines",
    "resolve_input_pipeline": "pipelines",
    "choose_input_pipeline": "pipelines",
    "augmentation_params": "tfdata",
    "crop_and_flip": "tfdata",
    "make_dataset": "pipelines",
    "random_crop_and_flip": "tfdata",
}
__all__ = [*_NAMES, *_SUBMODULES]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _NAMES:
        value = getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
