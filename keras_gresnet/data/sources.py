"""Where the datasets come from: :func:`load` looks for a dataset's own files
in ``data_dir``, in an OS package's folder and in ``$KERAS_HOME/datasets``,
then asks ``tensorflow_datasets``, and returns numpy arrays.

The file formats themselves are read by :mod:`keras_gresnet.data.readers`.
"""

import contextlib
import os
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from keras_gresnet._checks import check_choice
from keras_gresnet._paths import datasets_folder, keras_home
from keras_gresnet.files import Stopped, stop_when
from keras_gresnet.data.datasets import DATASETS, SPLITS
from keras_gresnet.data.readers import read_cifar_split, read_idx_split


class DatasetNotFoundError(FileNotFoundError):
    """No source of a dataset: not in ``data_dir``, not installed, and
    ``tensorflow_datasets`` could not provide it."""


def _candidate_folders(info, data_dir):
    """Folders of ``data_dir`` that may hold the raw files: the folder itself,
    or (for a root shared by several datasets) its subfolder named after the
    dataset / the CIFAR archive."""
    return [data_dir, os.path.join(data_dir, info.folder or info.name)]


def _read_folder(info, split, folder):
    """The split's arrays from ``folder``, or ``None`` when it has none of the
    files. Some files but not all is an error, not a silent fall-through."""
    files = info.files[split]
    present = [os.path.isfile(os.path.join(folder, f)) for f in files]
    if not any(present):
        return None
    if not all(present):
        missing = [f for f, ok in zip(files, present) if not ok]
        raise DatasetNotFoundError(
            f"{info.name} {split}: {folder} has only some of the files; missing {missing}"
        )
    if info.file_format == "cifar":
        return read_cifar_split(folder, files, info.label_key)
    return read_idx_split(folder, files)


# Seconds the first byte of a dataset's download may take before the
# network counts as unreachable (tfds' own retries take minutes offline).
REACH_TIMEOUT = 20


def check_reachable(url, timeout=None):
    """Ask ``url`` for its headers (a HEAD request, ``timeout`` seconds,
    default :data:`REACH_TIMEOUT`); ``ConnectionError`` in one line naming
    it when no answer comes: no DNS, no route, a proxy that never answers.
    Any HTTP answer, even an error status, shows the network is there."""
    timeout = REACH_TIMEOUT if timeout is None else timeout
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except urllib.error.HTTPError:
        pass
    except (OSError, ValueError) as error:  # URLError, timeouts, refused
        reason = getattr(error, "reason", error)
        raise ConnectionError(f"cannot reach {url} within {timeout} s ({reason}); "
                              f"no download was started") from None


# Seconds a tensorflow_datasets download or preparation may write nothing
# before it counts as stalled (a server that sent its first bytes and went
# silent: tfds' HTTP reads have no timeout of their own).
STALL_SECONDS = 120


def _file_states(folder):
    """``{path: (size, mtime)}`` of every file under ``folder``."""
    states = {}
    for path in folder.rglob("*") if folder.is_dir() else ():
        with contextlib.suppress(OSError):  # renamed or removed meanwhile
            if path.is_file():
                stat = path.stat()
                states[path] = (stat.st_size, stat.st_mtime_ns)
    return states


@contextlib.contextmanager
def _unless_stalled(name, folder, seconds=None):
    """Stop the tensorflow_datasets call in the body when nothing under
    ``folder`` changes for ``seconds`` (default :data:`STALL_SECONDS`):
    ``ConnectionError`` in one line, and tfds' partial files that appeared
    meanwhile (``incomplete.*`` folders, ``*.tmp.*`` downloads) removed."""
    seconds = STALL_SECONDS if seconds is None else seconds
    before = set(_file_states(folder))
    last = {"states": None, "since": 0.0}

    def check(elapsed):
        states = _file_states(folder)
        if states != last["states"]:
            last.update(states=states, since=elapsed)
        elif elapsed - last["since"] > seconds:
            return f"nothing was written under {folder} for {seconds:g} s"
        return None

    try:
        with stop_when(check, interval=min(2.0, seconds / 4)):
            yield
    except Stopped as stopped:
        for path in folder.rglob("*") if folder.is_dir() else ():
            partial = any(part.startswith("incomplete.") or ".tmp." in part
                          for part in path.relative_to(folder).parts)
            if partial and path not in before and path.is_file():
                with contextlib.suppress(OSError):
                    path.unlink()
        raise ConnectionError(f"tensorflow_datasets' download of {name} stalled: "
                              f"{stopped}") from None


def _read_tfds(info, split, data_dir, download):
    # Imported on use: tensorflow_datasets is a heavy import (seconds, and
    # TensorFlow with it), and only this last source needs it.
    import tensorflow_datasets as tfds

    watched = contextlib.nullcontext()
    if download and info.tfds_url:
        builder = tfds.builder(info.name, data_dir=str(tfds_folder()))
        # Only where tfds would download into this package's folder (a test
        # double such as tfds.testing.mock_data points the builder elsewhere).
        ours = tfds_folder() in Path(builder.data_dir).parents
        if ours and not builder.is_prepared():
            check_reachable(info.tfds_url)
            watched = _unless_stalled(info.name, tfds_folder())
    # tfds prepares its own files (downloads/, incomplete.* folders) in the
    # package's cache, never in a folder the user passed: data_dir holds the
    # user's files and is only read.
    with watched:
        dataset = tfds.load(
            info.name, split=split, data_dir=str(tfds_folder()), download=download,
            as_supervised=True,
        )
    # Batches rather than batch_size=-1, which crashes under tfds' mock_data.
    parts = list(tfds.as_numpy(dataset.batch(10_000)))
    return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])


def tfds_folder():
    """``{keras_home}/tensorflow_datasets``: where tensorflow_datasets
    downloads and prepares what this package asks of it."""
    return keras_home() / "tensorflow_datasets"


def _not_found_message(info, split, data_dir, tfds_error):
    files = info.files[split]
    where = (
        " or ".join(_candidate_folders(info, data_dir)) if data_dir else "(data_dir not given)"
    )
    lines = [
        f"No source found for dataset {info.name!r}, split {split!r}. Looked for:",
        f"  - data_dir: the files {', '.join(files)} in {where}",
    ]
    if info.system_dirs:
        lines.append(
            f"  - the {info.system_package} package: {', '.join(info.system_dirs)}"
        )
    if info.home_dir:
        lines.append(f"  - {datasets_folder() / info.home_dir}")
    lines += [
        f"  - tensorflow_datasets.load({info.name!r}, data_dir={str(tfds_folder())!r}): "
        f"{type(tfds_error).__name__}: {tfds_error}",
        f"To get it: run once where there is a network (tensorflow_datasets downloads "
        f"and prepares it in {tfds_folder()})",
    ]
    if info.system_package:
        lines.append(f"  or: apt-get install {info.system_package}")
    if info.home_installer:
        lines.append(f"  or, from a checkout: {info.home_installer} (`make data`)")
    lines.append(
        f"  or: pass data_dir= a folder with the files {', '.join(files)} "
        f"(or with a subfolder {info.folder or info.name} holding them)."
    )
    return "\n".join(lines)


def _checked_arrays(info, split, source, images, labels):
    """uint8 images and int32 labels of the dataset's shape and label range,
    whatever the source gave."""
    images = np.ascontiguousarray(images, dtype=np.uint8)
    labels = np.asarray(labels).astype(np.int32).reshape(-1)
    if images.shape[1:] != info.image_shape or len(images) != len(labels):
        raise ValueError(
            f"{info.name} {split} from {source}: images {images.shape}, labels "
            f"{labels.shape}; expected (N, {', '.join(map(str, info.image_shape))}) and (N,)"
        )
    if labels.size and not 0 <= labels.min() <= labels.max() < info.num_classes:
        raise ValueError(
            f"{info.name} {split} from {source}: labels outside [0, {info.num_classes})"
        )
    return images, labels


def load_with_source(name, split="train", *, data_dir=None, download=True):
    """:func:`load`, and where the arrays came from: ``(images, labels,
    source)``, ``source`` the folder read or ``"tensorflow_datasets"`` (what
    :func:`keras_gresnet.data.pipeline` records in its config)."""
    check_choice(name, "name", tuple(DATASETS))
    check_choice(split, "split", SPLITS)
    info = DATASETS[name]
    folders = _candidate_folders(info, data_dir) if data_dir else []
    homes = [str(datasets_folder() / info.home_dir)] if info.home_dir else []
    folders = [f for f in folders + list(info.system_dirs) + homes if os.path.isdir(f)]
    for folder in folders:
        arrays = _read_folder(info, split, folder)
        if arrays is not None:
            images, labels, source = *arrays, folder
            break
    else:
        try:
            images, labels = _read_tfds(info, split, data_dir, download)
        # Any failure (no network, missing module, data not prepared) means
        # "no source": report it together with the other places looked at.
        except Exception as err:  # noqa: BLE001
            raise DatasetNotFoundError(_not_found_message(info, split, data_dir, err)) from err
        source = "tensorflow_datasets"
    return (*_checked_arrays(info, split, source, images, labels), source)


def load(name, split="train", *, data_dir=None, download=True):
    """One split of a dataset as numpy arrays.

    Sources, first found wins:

    1. ``data_dir`` (or ``data_dir/<name>``, ``data_dir/<cifar folder>``) with
       the dataset's own files: ``train-images-idx3-ubyte.gz``,
       ``train-labels-idx1-ubyte.gz``, ``t10k-...`` for the MNIST family;
       CIFAR's python batches (``cifar-10-batches-py/data_batch_1``...,
       ``test_batch``; ``cifar-100-python/train``, ``test``). MNIST and
       Fashion-MNIST files have the same names: keep each in its own folder.
    2. For ``fashion_mnist``, Debian's ``dataset-fashion-mnist`` package
       (``/usr/share/datasets/fashion-mnist``); for ``mnist``,
       ``$KERAS_HOME/datasets/mnist`` (default ``~/.keras/datasets/mnist``),
       which ``scripts/data/fetch_mnist.py`` (``make data``) fills.
    3. ``tensorflow_datasets.load(name, data_dir=data_dir, download=download)``,
       which downloads and prepares the data where there is a network.

    Args:
        name: ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"`` or ``"cifar100"``.
        split: ``"train"`` or ``"test"``.
        data_dir: a folder with the files above, also passed to tfds.
        download: let tfds download (no effect on the other sources).

    Returns:
        ``(images, labels)``: uint8 ``(N, H, W, C)`` (MNIST: ``C = 1``) and
        int32 ``(N,)`` (CIFAR-100: the 100 fine labels).

    Raises:
        ValueError: unknown ``name`` or ``split``; a corrupt file; a CIFAR
            batch that holds anything but CIFAR's data (CIFAR's batches are
            pickles, read by a restricted unpickler that never runs code from
            the file).
        DatasetNotFoundError: no source; the message lists what was looked
            for and how to get the data.
    """
    images, labels, _ = load_with_source(name, split, data_dir=data_dir, download=download)
    return images, labels
