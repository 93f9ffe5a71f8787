"""A training run's config: every argument resolved and checked into one
JSON-ready dict, and the model it describes.

A model family's paper decides its default recipe and dataset
(:func:`default_recipe`, :func:`default_dataset`); :func:`resolve_config`
fills in the rest; :func:`build_model` builds the config's model for
training (under the config's dtype policy, :func:`dtype_policy_scope`),
:func:`inference_copy` the copy a run saves.
"""

import contextlib
import os
import sys

import keras

from keras_gresnet import data, zoo
from keras_gresnet._cpu import cpu_info
from keras_gresnet._checks import check_choice
from keras_gresnet._text import shown
from keras_gresnet._options import DTYPE_POLICIES, RunOptions  # noqa: F401 (DTYPE_POLICIES: training's)
from keras_gresnet.training import backends, recipes
from keras_gresnet.training.backends import resolve_strategy, sync_batchnorm
from keras_gresnet.training.loss import check_classifier_activation

# The MNIST family's images (MNIST, Fashion-MNIST).
MNIST_SHAPE = (28, 28, 1)


def has_accelerator():
    """Whether the Keras backend computes on a GPU or TPU here (not the CPU)."""
    return backends.get().has_accelerator()


def precision_note(dtype_policy, cpu=None):
    """One line for a ``dtype_policy`` that is slower than float32 where it
    would run, else ``None``: ``mixed_bfloat16`` on a CPU without bfloat16
    units (AVX512-BF16 or AMX-BF16: each bfloat16 op becomes casts around a
    float32 one) and no accelerator; ``mixed_float16`` on any CPU (no
    float16 arithmetic). ``cpu``: :func:`keras_gresnet._cpu.cpu_info`'s
    answer (default: this machine's)."""
    if dtype_policy == "float32" or has_accelerator():
        return None
    cpu = cpu or cpu_info()
    if dtype_policy == "mixed_bfloat16" and cpu["bf16"] is not False:
        return None
    units = "bfloat16 units (AVX512-BF16 or AMX-BF16)" if dtype_policy == "mixed_bfloat16" \
        else "float16 arithmetic"
    return (f"note: {dtype_policy} on this CPU ({cpu['model']}), which has no {units}, "
            f"trains slower than float32 (docs/benchmarks.md); leave out --mixed-precision")


def default_recipe(model, dataset=None):
    """The recipe of ``model``'s paper, as its builder registered it
    (:func:`keras_gresnet.zoo.register_model`): ``gr_mnist`` for GR's MLPs,
    ``wrn_cifar`` for Wide (G)ResNets, ``he_imagenet`` for the ImageNet nets,
    ``he_cifar`` for HE's ResNet-110/164/1001, ``preact_cifar`` otherwise
    (GR's CIFAR nets). A CIFAR conv net on a ``dataset`` of the MNIST family
    (28x28 grey) gets ``preact_mnist``: GR's CIFAR recipe at that data's
    length (no CIFAR on these machines: the conv nets learn from these)."""
    recipe = zoo.model_builder(model).default_recipe  # its register_model(recipe=...)
    if (dataset in data.DATASETS and data.DATASETS[dataset].image_shape == MNIST_SHAPE
            and default_dataset(model) == "cifar10"):
        return "preact_mnist"
    return recipe


def default_dataset(model):
    """The dataset of ``model``'s paper, as its builder registered it:
    ``mnist`` for GR's MLPs, ``imagenet2012`` for the ImageNet nets,
    ``cifar10`` for the other convolutional nets."""
    return zoo.model_builder(model).default_dataset  # its register_model(dataset=...)


def _check_strategy(strategy, cluster):
    """The strategy name the run trains under (``"auto"`` with a cluster:
    ``"multi_worker"``); a cluster needs ``"multi_worker"``."""
    strategy = resolve_strategy(strategy, cluster)
    if cluster is not None and strategy != "multi_worker":
        raise ValueError(
            f"a cluster is configured (TF_CONFIG or workers), which needs strategy="
            f"'multi_worker' or 'auto', got strategy={shown(strategy)}"
        )
    return strategy


def _check_model_kwargs(model_kwargs, dataset):
    """The builder's arguments (not the dataset's). The architecture's
    settings a paper gives with its recipe (BatchNorm momentum, WRN's
    dropout) are among them: the builders' defaults are the papers'. A
    picture folder's ``input_shape`` is the size its pictures are brought to
    (``--input-shape 32,32,3``; default: the folder's most common size)."""
    from keras_gresnet.data.folders import checked_image_shape

    model_kwargs = dict(model_kwargs or {})
    if dataset == data.FOLDER and "input_shape" in model_kwargs:
        shape = model_kwargs["input_shape"]
        if isinstance(shape, int) and not isinstance(shape, bool):  # --input-shape 784
            shape = (shape,)
        if isinstance(shape, str) or not isinstance(shape, (list, tuple)):
            raise ValueError(f"input_shape={shown(shape)}: give the size to bring the pictures "
                             f"to as height,width,channels (--input-shape 32,32,3)")
        model_kwargs["input_shape"] = list(checked_image_shape(shape))
    reserved = sorted({"input_shape", "classes", "input_tensor"} & set(model_kwargs)
                      - ({"input_shape"} if dataset == data.FOLDER else set()))
    if reserved:
        raise ValueError(
            f"model_kwargs may not set {reserved}: they come from the dataset"
            + (" (input_shape is for --dataset folder)" if "input_shape" in reserved else ""))
    if model_kwargs.get("include_preprocessing"):
        # The pipeline normalises already; a layer in the net would do it twice.
        raise ValueError(
            "model_kwargs may not set include_preprocessing: the training pipeline "
            "normalises the pixels (the recipe's preprocessing); add the layer to the "
            "trained model with the builder's include_preprocessing= and weights=")
    if "classifier_activation" in model_kwargs:
        check_classifier_activation(model_kwargs["classifier_activation"],
                                    "model_kwargs classifier_activation")
    return model_kwargs


def resolve_config(model, *, model_kwargs=None, cluster=None, **options):
    """The full, JSON-ready config of a training run; every argument checked.

    ``options``: the run's options (:class:`~keras_gresnet.training.RunOptions`:
    ``dataset``, ``recipe``, ``seed``, ``strategy``, ``validation_split``,
    ``data_dir``, ``max_train_examples``, ``max_test_examples``,
    ``sync_batchnorm``, ``dtype_policy``) and any field of the recipe to
    replace (``epochs=2``, ``learning_rate=0.01``, ``k_decay=True``...).
    ``model_kwargs``: the builder's arguments. ``cluster``: the
    :func:`keras_gresnet.training.resolve_cluster` of a multi-worker run
    (``strategy="auto"`` then means ``"multi_worker"``); the config records
    its ``num_workers``, not its addresses. The ``None`` options resolve
    here: the paper's dataset and recipe, and ``sync_batchnorm`` the
    strategy's own way (each replica's statistics on TensorFlow, the global
    batch's on JAX's ``data_parallel`` and ``multi_worker``, one SPMD
    program, which cannot use each replica's).
    """
    if keras.config.image_data_format() != "channels_last":
        raise ValueError(
            "train() feeds channels_last batches (the pipelines' NHWC images); call "
            "keras.config.set_image_data_format('channels_last') before training (a "
            "channels_first model of the zoo takes the trained weights as they are)")
    zoo.model_builder(model)  # an unknown name: one line, before anything else
    given = {k: v for k, v in options.items() if k in RunOptions.names()}
    overrides = {k: v for k, v in options.items() if k not in given}
    run = RunOptions(**given)
    dataset = default_dataset(model) if run.dataset is None else run.dataset
    check_choice(dataset, "dataset", (*data.DATASETS, data.IMAGENET, data.FOLDER))
    if run.data_dir is not None and not os.path.isdir(run.data_dir):
        raise ValueError(f"data_dir={shown(run.data_dir)} is not a folder; pass the folder that "
                         f"holds the dataset's files" + (
                             " (class subfolders of pictures)" if dataset == data.FOLDER
                             else ""))
    if dataset == data.FOLDER and run.data_dir is None:
        raise ValueError("dataset='folder' trains on a folder of pictures, one subfolder per "
                         "class: pass it as data_dir (--data-dir PATH)")
    recipe = recipes.get_recipe(
        default_recipe(model, dataset) if run.recipe is None else run.recipe, **overrides)
    strategy = _check_strategy(run.strategy, cluster)
    config = dict(model=model, model_kwargs=_check_model_kwargs(model_kwargs, dataset))
    config.update(run.config(), dataset=dataset, recipe=recipe.get_config(), strategy=strategy,
                  sync_batchnorm=backends.get().sync_batchnorm(run.sync_batchnorm, strategy))
    config.update(num_workers=cluster.num_workers if cluster is not None else 1,
                  command=recorded_command(sys.argv), versions=_versions())
    return config


def recorded_command(argv):
    """The command a run folder records: ``argv`` as it ran, except that the
    console script's absolute path (``/.../venv/bin/keras-gresnet``) is written
    ``keras-gresnet``, so that the record is a command to copy on another
    machine. A script's path (``scripts/reproduce/reproduce_gr_mnist.py``) stays as
    given."""
    argv = list(argv)
    if argv and os.path.basename(argv[0]) == "keras-gresnet":
        argv[0] = "keras-gresnet"
    return argv


def _versions():
    """The versions and runtime a run trained with: Keras, its backend, and
    TensorFlow where installed (not part of what a resumed run must match)."""
    from keras_gresnet.data.pipelines import resolve_input_pipeline

    versions = dict(keras=keras.__version__, backend=keras.backend.backend(),
                    input_pipeline=resolve_input_pipeline("auto"))
    if sys.modules.get("tensorflow") is not None or versions["input_pipeline"] == "tf_data":
        import tensorflow as tf

        versions["tensorflow"] = tf.__version__
    return versions


@contextlib.contextmanager
def dtype_policy_scope(name):
    """Keras' global dtype policy set to ``name`` for the duration; the
    caller's policy comes back afterwards, also when the body raises."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_model(config, input_shape, num_classes):
    """The config's zoo model, built under its ``dtype_policy`` (default
    float32), with the recipe's weight decay."""
    # Layers take the global policy when they are made; the builders keep the
    # classifier in float32 under a mixed one (zoo.applications.head_dtype).
    with dtype_policy_scope(config.get("dtype_policy", "float32")):
        # a folder's input_shape is in input_shape (the pipeline's, flat for an MLP)
        kwargs = {k: v for k, v in config["model_kwargs"].items() if k != "input_shape"}
        model = zoo.get_model(config["model"], input_shape=input_shape, classes=num_classes,
                              **kwargs)
    recipes.Recipe.from_config(config["recipe"]).apply_to(model)
    # Keras' synchronized BatchNorm is TensorFlow's; JAX's data_parallel and
    # multi_worker compute global statistics by themselves.
    sync_batchnorm(model, config.get("sync_batchnorm", False)
                   and backends.get().SYNCHRONIZED_LAYERS)
    return model


def inference_copy(model):
    """``model``'s architecture and weights without the optimizer state: the
    published file is a third of the size (Nadam keeps two slots per weight);
    recompile it to fine-tune. The backup keeps the optimizer while a run is
    unfinished."""
    # from_config, not clone_model: a clone of a compiled model is compiled
    # (and saved with its optimizer) too.
    copy = model.__class__.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    # Synchronized BatchNorm is a training setting, and TensorFlow-only: the
    # published file loads on every Keras backend.
    sync_batchnorm(copy, False)
    return copy
