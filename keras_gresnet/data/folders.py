"""A folder of pictures as a dataset: one subfolder per class (Keras'
``image_dataset_from_directory`` layout), optionally inside ``train/`` and
``test/``.

    pets/cat/1.png  pets/cat/2.jpg  pets/dog/a.png ...          (a seeded split)
    pets/train/cat/... pets/train/dog/... pets/test/cat/... ...  (the folder's own)

:func:`read_image_folder` decodes every picture once with Pillow into uint8
arrays ``(N, H, W, C)``, so the ``tf.data`` pipeline and the TensorFlow-free
numpy pipeline cut identical batches from them
(:func:`keras_gresnet.data.pipelines.pipeline` with ``name="folder"``). The
rules, stated once:

- **Classes** are the subfolders' names, sorted; label ``i`` is the ``i``-th.
  Hidden entries (a name starting with ``.``) are skipped.
- **Size**: each picture is centre-cropped to the target's aspect ratio, then
  resized to the target's height and width (bilinear); one already at the
  target size is left as it is. The target is ``image_shape`` when given (a
  model's input), else the most common size in the folder.
- **Channels**: grey (1) or RGB (3), converted to what the target asks for;
  without a target, 1 when every picture is grey, else 3. Transparency is
  dropped (composited on black, Pillow's conversion).
- **Test split**: ``test/`` when the folder has ``train/`` and ``test/``
  (the same classes), else a seeded, per-class ``test_fraction`` of each
  class (at least one picture per class stays in training).

Bad folders are one ``ValueError`` naming the file or folder: no class
folders, an empty class, a file Pillow cannot read as a picture, a symbolic
link that leads out of the folder. Nothing is ever written into the folder.
"""

import collections
import os
from pathlib import Path

import numpy as np

FOLDER = "folder"  # the dataset name of a picture folder in a run's config
CHANNELS = (1, 3)
SPLIT_FOLDERS = ("train", "test")


def _pillow():
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - matplotlib depends on Pillow
        raise ImportError("reading a picture folder needs Pillow: pip install pillow") from None
    return Image


def _inside(path, root):
    """Whether ``path``, links followed, lies inside ``root``."""
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    return True


def _visible(folder):
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def _class_files(folder, root):
    """``{class name: [picture paths]}`` of a folder of class folders."""
    if not folder.is_dir():
        raise ValueError(f"image folder {str(folder)!r} is not a folder")
    classes = {}
    for entry in _visible(folder):
        if not _inside(entry, root):
            raise ValueError(f"image folder: {entry} is a link out of {root}; copy the "
                             f"pictures in instead")
        if not entry.is_dir():
            continue  # a stray file beside the class folders (a README, a CSV)
        files = []
        for path in _visible(entry):
            if not _inside(path, root):
                raise ValueError(f"image folder: {path} is a link out of {root}; copy the "
                                 f"picture in instead")
            if path.is_dir():
                raise ValueError(f"image folder: {path} is a folder inside class "
                                 f"{entry.name!r}; a class folder holds pictures only")
            files.append(path)
        if not files:
            raise ValueError(f"image folder: class folder {entry} holds no pictures")
        classes[entry.name] = files
    if not classes:
        raise ValueError(
            f"image folder {str(folder)!r} holds no class folders: put each class's "
            f"pictures in a subfolder named after it (pets/cat/1.png, pets/dog/2.png)")
    return classes


def _open(path):
    Image = _pillow()
    try:
        with Image.open(path) as image:
            image.load()
            return image.copy()
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise ValueError(f"image folder: {path} is not a picture Pillow can read "
                         f"({' '.join(str(error).split())})") from None


def _fitted(image, height, width, channels):
    """``image`` centre-cropped to ``height:width``, resized, converted to
    ``channels``: a uint8 array ``(height, width, channels)``."""
    Image = _pillow()
    image = image.convert("L" if channels == 1 else "RGB")
    w, h = image.size
    if (h, w) != (height, width):
        target = width / height
        if w / h > target:  # too wide: crop the sides
            new_w = max(1, round(h * target))
            left = (w - new_w) // 2
            image = image.crop((left, 0, left + new_w, h))
        elif w / h < target:  # too tall: crop top and bottom
            new_h = max(1, round(w / target))
            top = (h - new_h) // 2
            image = image.crop((0, top, w, top + new_h))
        image = image.resize((width, height), Image.BILINEAR)
    array = np.asarray(image, dtype=np.uint8)
    return array.reshape(height, width, channels)


def _target(images, image_shape):
    """``(height, width, channels)``: ``image_shape``, or the folder's most
    common size and its channels rule."""
    if image_shape is not None:
        shape = tuple(image_shape)
        if len(shape) == 1:  # a flat model input (an MLP's 784): a square grey image
            side = int(round(shape[0] ** 0.5))
            if side * side != shape[0]:
                raise ValueError(f"image_shape={image_shape!r}: a flat input must be a square "
                                 f"grey image's pixels (784 = 28 x 28)")
            shape = (side, side, 1)
        if len(shape) != 3 or shape[2] not in CHANNELS or min(shape) < 1:
            raise ValueError(f"image_shape must be (height, width, channels) with channels "
                             f"1 or 3, got {image_shape!r}")
        return shape
    sizes = collections.Counter(image.size for image in images)
    (w, h), _ = sizes.most_common(1)[0]
    grey = all(image.mode in ("L", "1", "I;16", "I", "LA") for image in images)
    return h, w, 1 if grey else 3


def read_image_folder(path, *, image_shape=None, test_fraction=0.2, seed=0):
    """Read the picture folder ``path`` (see the module docstring).

    Returns ``{"train": (images, labels), "test": (images, labels),
    "class_names": [...], "image_shape": (H, W, C), "source": {...}}`` with
    uint8 images ``(N, H, W, C)`` and int32 labels."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"image folder {str(path)!r} does not exist or is not a folder")
    root = root.resolve()
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be > 0 and < 1, got {test_fraction!r}")
    visible = {p.name for p in _visible(root)}
    if set(SPLIT_FOLDERS) <= visible and all((root / s).is_dir() for s in SPLIT_FOLDERS):
        splits = {s: _class_files(root / s, root) for s in SPLIT_FOLDERS}
        if set(splits["test"]) != set(splits["train"]):
            raise ValueError(
                f"image folder {str(path)!r}: train/ has classes {sorted(splits['train'])} "
                f"and test/ {sorted(splits['test'])}; they must be the same")
        class_names = sorted(splits["train"])
        source = {s: str(root / s) for s in SPLIT_FOLDERS}
    else:
        files = _class_files(root, root)
        class_names = sorted(files)
        rng = np.random.default_rng([int(seed), 7])
        splits = {"train": {}, "test": {}}
        for name in class_names:
            order = rng.permutation(len(files[name]))
            count = min(len(order) - 1, int(round(test_fraction * len(order))))
            splits["test"][name] = [files[name][i] for i in sorted(order[:count])]
            splits["train"][name] = [files[name][i] for i in sorted(order[count:])]
        source = {"train": str(root), "test": f"{test_fraction:g} of {root} (seed {seed})"}
    if not any(splits["test"].values()):
        raise ValueError(
            f"image folder {str(path)!r}: too few pictures to hold out a test set "
            f"({test_fraction:g} of each class rounds to none); add pictures or a test/ folder")
    opened = {s: [(_open(p), class_names.index(c)) for c in class_names for p in splits[s][c]]
              for s in SPLIT_FOLDERS}
    height, width, channels = _target([image for image, _ in opened["train"]], image_shape)
    arrays = {}
    for split, pairs in opened.items():
        images = np.zeros((len(pairs), height, width, channels), np.uint8)
        for i, (image, _) in enumerate(pairs):
            images[i] = _fitted(image, height, width, channels)
        arrays[split] = (images, np.array([label for _, label in pairs], np.int32))
    return dict(train=arrays["train"], test=arrays["test"], class_names=class_names,
                image_shape=(height, width, channels), source=source)


def is_image_folder(path):
    """Whether ``path`` names an existing folder (not a dataset name)."""
    return isinstance(path, (str, os.PathLike)) and Path(path).is_dir()
