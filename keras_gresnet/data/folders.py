"""A folder of pictures as a dataset: one subfolder per class (Keras'
``image_dataset_from_directory`` layout), optionally inside ``train/`` and
``test/`` (or ``val/`` / ``validation/``).

    pets/cat/1.png  pets/cat/2.jpg  pets/dog/a.png ...          (a seeded split)
    pets/train/cat/... pets/train/dog/... pets/test/cat/... ...  (the folder's own)

:func:`read_image_folder` decodes every picture once, one at a time, with
Pillow, straight to the target size, into uint8 arrays ``(N, H, W, C)``, so
the ``tf.data`` pipeline and the TensorFlow-free numpy pipeline cut identical
batches from them (:func:`keras_gresnet.data.pipelines.pipeline` with
``name="folder"``). The rules, stated once:

- **Classes** are the subfolders' names, sorted; label ``i`` is the ``i``-th;
  at least 2. Hidden entries (a name starting with ``.``) are skipped; so are
  files whose ending Pillow does not open (``Thumbs.db``, ``README.txt``) and
  entries that are not regular files (named pipes, sockets, devices: never
  opened), counted in the summary line.
- **Size**: each picture is centre-cropped to the target's aspect ratio, then
  resized to the target's height and width (bilinear); one already at the
  target size is left as it is. The target is ``image_shape`` when given (a
  model's input, ``--input-shape``), else the folder's most common size when
  neither side exceeds 512. A JPEG is decoded at 1/2, 1/4 or 1/8 of its size
  where that still covers the target (Pillow's ``draft``); every picture's
  declared size is checked before it is decoded (at most 1 GiB decoded, and
  at most Pillow's decompression-bomb limit of pixels,
  ``PIL.Image.MAX_IMAGE_PIXELS``: past it, where Pillow only warns, the
  picture is refused as past twice it, where Pillow refuses), and the
  folder's arrays together (at most 4 GiB).
- **Orientation**: a photo's EXIF orientation is applied (Pillow's
  ``exif_transpose``).
- **Channels**: grey (1) or RGB (3), converted to what the target asks for;
  without a target, 1 when every picture is grey, else 3. 16-bit grey (and
  32-bit integer grey) is scaled to 8 bits (value / 257, rounded);
  transparency is dropped and palettes, bilevel and CMYK pictures converted as
  Pillow's ``convert`` and Keras' ``load_img`` do (tested against it).
- **Test split**: ``test/`` (else ``val/``, else ``validation/``) when the
  folder has ``train/`` beside it (the same classes), else a seeded, per-class
  ``test_fraction`` of each class (at least one picture per class stays in
  training).

Bad folders are one ``ValueError`` naming the file or folder: no class
folders, one class, an empty class, a picture Pillow cannot read or too large
to decode, a symbolic link that leads out of the folder or loops. Names are
printed with control characters escaped. Nothing is ever written into the
folder.
"""

import collections
import contextlib
import glob
import math
import os
import stat
import warnings
from pathlib import Path

import numpy as np

from keras_gresnet._text import printable
from keras_gresnet.limits import MAX_DECODED_BYTES, MAX_FOLDER_BYTES

FOLDER = "folder"  # the dataset name of a picture folder in a run's config
CHANNELS = (1, 3)
SPLIT_FOLDERS = ("train", "test")
# the held-out split beside train/, the first found
HELD_OUT_FOLDERS = ("test", "val", "validation")


def _pillow():
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - matplotlib depends on Pillow
        raise ImportError("reading a picture folder needs Pillow: pip install pillow") from None
    return Image


def _inside(path, root):
    """Whether ``path``, links followed, lies inside ``root``; a symbolic
    link loop is one line."""
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    except (RuntimeError, OSError):  # Python 3.11-3.12: RuntimeError; 3.13: OSError
        raise ValueError(f"image folder: {printable(path)} is a symbolic link loop") from None
    return True


def _visible(folder):
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def picture_suffixes():
    """The file name endings Pillow can open (``.png``, ``.jpg``, ``.webp``,
    ``.tif``...): in a class folder only these are read as pictures."""
    Image = _pillow()
    return frozenset(Image.registered_extensions())


class _Skipped(collections.Counter):
    """Files a folder held that are not read, by reason."""

    def line(self):
        return ", ".join(f"{n} {why}" for why, n in sorted(self.items()))


def _class_files(folder, root, skipped, least=2):
    """``{class name: [picture paths]}`` of a folder of class folders, at
    least ``least`` of them (2 to train a classifier; a test set may hold
    one); files that are not pictures (by their ending: ``Thumbs.db``,
    ``README.txt``) and entries that are not regular files (named pipes,
    sockets, devices: never opened) are counted in ``skipped``."""
    if not folder.is_dir():
        raise ValueError(f"image folder {printable(folder)!r} is not a folder")
    suffixes = picture_suffixes()
    classes = {}
    for entry in _visible(folder):
        if not _inside(entry, root):
            raise ValueError(f"image folder: {printable(entry)} is a link out of "
                             f"{printable(root)}; copy the pictures in instead")
        if not entry.is_dir():
            continue  # a stray file beside the class folders (a README, a CSV)
        files = []
        for path in _visible(entry):
            if not _inside(path, root):
                raise ValueError(f"image folder: {printable(path)} is a link out of "
                                 f"{printable(root)}; copy the picture in instead")
            mode = path.stat().st_mode  # lstat would not follow a link inside the folder
            if stat.S_ISDIR(mode):
                raise ValueError(f"image folder: {printable(path)} is a folder inside class "
                                 f"{printable(entry.name)!r}; a class folder holds pictures only")
            if not stat.S_ISREG(mode):
                skipped["not regular files (pipes, sockets, devices)"] += 1
            elif path.suffix.lower() not in suffixes:
                skipped["not pictures by their name"] += 1
            else:
                files.append(path)
        if not files:
            raise ValueError(f"image folder: class folder {printable(entry)} holds no pictures"
                             + (f" (skipped: {skipped.line()})" if skipped else ""))
        classes[entry.name] = files
    if not classes:
        raise ValueError(
            f"image folder {printable(folder)!r} holds no class folders: put each class's "
            f"pictures in a subfolder named after it (pets/cat/1.png, pets/dog/2.png)")
    if len(classes) < least:
        raise ValueError(
            f"image folder {printable(folder)!r} holds one class folder ({printable(*classes)!r}); "
            f"a classifier needs at least 2 classes, one subfolder each")
    return classes


# Grey modes, as Pillow names them; 16- and 32-bit integer grey ("I;16",
# "I") is read as 16-bit samples and scaled to 8 bits.
GREY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F")
MAX_SIDE = 4096  # the largest side a folder's pictures are brought to
MAX_DEFAULT_SIDE = 512  # ... without an image_shape (the folder's most common size)
_ROTATED = (5, 6, 7, 8)  # EXIF orientations that swap width and height
_BYTES_PER_PIXEL = {"1": 1, "L": 1, "P": 1, "LA": 2, "La": 2, "PA": 2, "RGB": 3, "YCbCr": 3,
                    "LAB": 3, "HSV": 3, "RGBA": 4, "RGBa": 4, "RGBX": 4, "CMYK": 4, "I": 4,
                    "F": 4, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}


def _unreadable(path, error):
    """The one line of a picture Pillow cannot read, or refuses to read (a
    decompression bomb: more pixels than ``Image.MAX_IMAGE_PIXELS``)."""
    Image = _pillow()
    if isinstance(error, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        return ValueError(f"{printable(path)} has more than {Image.MAX_IMAGE_PIXELS:,} pixels, "
                          f"Pillow's decompression-bomb limit (PIL.Image.MAX_IMAGE_PIXELS); "
                          f"pictures of at most that many pixels are read")
    return ValueError(f"{printable(path)} is not a picture Pillow can read "
                      f"({' '.join(str(error).split())})")


@contextlib.contextmanager
def _bombs_refused():
    """Pillow's ``DecompressionBombWarning`` (a picture past
    ``Image.MAX_IMAGE_PIXELS``, below twice it) raised, as Pillow raises its
    ``DecompressionBombError`` past twice it: either is one line naming the
    picture (:func:`_unreadable`), never the warning's two lines."""
    Image = _pillow()
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        yield


def _pillow_errors():
    """What Pillow raises for a picture it cannot read, or refuses to read (a
    decompression bomb: :func:`_bombs_refused`)."""
    Image = _pillow()
    return (OSError, ValueError, SyntaxError, Image.DecompressionBombError,
            Image.DecompressionBombWarning)


def _header(path):
    """``(width, height, mode)`` of the picture at ``path``, as it will be
    seen (EXIF rotation applied), read from its header only; a picture that
    would take more than ``MAX_DECODED_BYTES`` decoded, or has more pixels
    than Pillow's decompression-bomb limit, is refused here."""
    Image = _pillow()
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)  # never open a pipe: it would block
    except OSError as error:
        raise ValueError(f"{printable(path)}: {error.strerror or error}") from None
    if not regular:
        raise ValueError(f"{printable(path)} is not a regular file (a named pipe, socket, device "
                         f"or folder); give picture files")
    try:
        with _bombs_refused(), Image.open(path) as image:
            width, height = image.size
            mode = image.mode
            orientation = image.getexif().get(0x0112, 1)
    except _pillow_errors() as error:
        raise _unreadable(path, error) from None
    decoded = width * height * _BYTES_PER_PIXEL.get(mode, 4)
    if decoded > MAX_DECODED_BYTES:
        raise ValueError(f"{printable(path)} declares {width}x{height} {mode} pixels "
                         f"({decoded / 2**30:.1f} GiB decoded); pictures of at most "
                         f"{MAX_DECODED_BYTES / 2**30:.0f} GiB decoded are read")
    if orientation in _ROTATED:
        width, height = height, width
    return width, height, mode


def _eight_bit(image, channels):
    """``image`` as 8-bit grey ("L") or RGB. 16- and 32-bit integer grey
    (16-bit PNGs) is scaled from 0-65535 (value / 257, rounded); float grey
    ("F") from 0-1 when it lies there, else clipped to 0-255; transparency
    (RGBA, LA, a palette's) is dropped, as Keras' ``load_img`` and Pillow's
    ``convert`` drop it; CMYK and palettes are Pillow's conversions."""
    Image = _pillow()
    if image.mode.startswith("I") or image.mode == "F":
        array = np.asarray(image, dtype=np.float64)
        if image.mode == "F":
            array = array * 255 if array.size and 0 <= array.min() and array.max() <= 1 else array
        else:
            array = array / 257
        image = Image.fromarray(np.clip(np.rint(array), 0, 255).astype(np.uint8), "L")
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")  # Pillow's advice for a palette with transparency
    return image.convert("L" if channels == 1 else "RGB")


def _decoded(path, height, width, channels):
    """The picture at ``path`` decoded and brought to ``(height, width,
    channels)``; a JPEG is decoded at the smallest of 1/1, 1/2, 1/4, 1/8 of
    its size that still covers the target (Pillow's ``draft``)."""
    Image = _pillow()
    from PIL import ImageOps

    try:
        with _bombs_refused(), Image.open(path) as image:
            if image.format == "JPEG":
                w, h = image.size
                rotated = image.getexif().get(0x0112, 1) in _ROTATED
                cover_w, cover_h = (height, width) if rotated else (width, height)
                scale = max(cover_w / w, cover_h / h)  # crop keeps the shorter side
                image.draft(image.mode, (max(1, math.ceil(w * scale)),
                                         max(1, math.ceil(h * scale))))
            image = ImageOps.exif_transpose(image)
            image.load()
            return _fitted(image, height, width, channels)
    except _pillow_errors() as error:
        raise _unreadable(path, error) from None


def _fitted(image, height, width, channels):
    """``image`` centre-cropped to ``height:width``, resized, converted to
    ``channels``: a uint8 array ``(height, width, channels)``."""
    Image = _pillow()
    image = _eight_bit(image, channels)
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


def checked_image_shape(image_shape):
    """``image_shape`` as ``(height, width, channels)``, channels 1 or 3; a
    flat model input (an MLP's 784 pixels) is a square grey picture."""
    shape = tuple(image_shape)
    if len(shape) == 1 and isinstance(shape[0], int) and not isinstance(shape[0], bool):
        side = int(round(shape[0] ** 0.5))
        if side * side != shape[0]:
            raise ValueError(f"image_shape={image_shape!r}: a flat input must be a square "
                             f"grey image's pixels (784 = 28 x 28)")
        shape = (side, side, 1)
    if (len(shape) != 3 or not all(isinstance(d, int) and not isinstance(d, bool)
                                   for d in shape)
            or shape[2] not in CHANNELS or min(shape) < 1 or max(shape[:2]) > MAX_SIDE):
        raise ValueError(f"image_shape must be (height, width, channels) with channels 1 or "
                         f"3 and sides of 1 to {MAX_SIDE}, got {image_shape!r}")
    return shape


def _target(headers, image_shape):
    """``(height, width, channels)``: ``image_shape``, or the folder's most
    common size and its channels rule (from the pictures' headers)."""
    if image_shape is not None:
        return checked_image_shape(image_shape)
    sizes = collections.Counter((w, h) for w, h, _ in headers)
    (w, h), _ = sizes.most_common(1)[0]
    if max(w, h) > MAX_DEFAULT_SIDE:
        raise ValueError(
            f"the pictures are mostly {w}x{h} (width x height), too large to train at as "
            f"they are: choose the size to bring them to with --input-shape H,W,C "
            f"(image_shape=): 32,32,3 for the CIFAR nets, 224,224,3 for the ImageNet ones")
    grey = all(mode in GREY_MODES for _, _, mode in headers)
    return h, w, 1 if grey else 3


def _held_out_folder(root, visible):
    """The folder of the held-out split beside ``train/``: ``test/``, else
    ``val/`` or ``validation/``; None when there is no ``train/``."""
    if "train" not in visible or not (root / "train").is_dir():
        return None
    for name in HELD_OUT_FOLDERS:
        if name in visible and (root / name).is_dir():
            return name
    return None


def _conversions(headers, height, width, channels):
    """What reading brought the pictures to the target: counts by kind."""
    done = collections.Counter()
    for w, h, mode in headers:
        grey = mode in GREY_MODES
        if channels == 1 and not grey:
            done["colour to grey"] += 1
        elif channels == 3 and grey:
            done["grey to RGB"] += 1
        if mode.startswith("I") or mode == "F":
            done["16-bit or float scaled to 8 bits"] += 1
        if mode in ("RGBA", "LA", "PA", "La", "RGBa"):
            done["transparency dropped"] += 1
        if mode == "CMYK":
            done["CMYK to RGB"] += 1
        if (w, h) != (width, height):
            done["resized" if w * height == h * width else "cropped and resized"] += 1
    return done


def read_image_folder(path, *, image_shape=None, test_fraction=0.2, seed=0, verbose=False):
    """Read the picture folder ``path`` (see the module docstring).

    Returns ``{"train": (images, labels), "test": (images, labels),
    "class_names": [...], "image_shape": (H, W, C), "source": {...},
    "summary": "..."}`` with uint8 images ``(N, H, W, C)`` and int32 labels;
    ``summary`` is one line (pictures per split, classes, the size they were
    brought to, what was converted and skipped), printed when ``verbose``.
    Every picture is decoded once, one at a time, straight to the target."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"image folder {printable(path)!r} does not exist or is not a folder")
    root = root.resolve()
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be > 0 and < 1, got {test_fraction!r}")
    visible = {p.name for p in _visible(root)}
    held_out = _held_out_folder(root, visible)
    skipped = _Skipped()
    if held_out is not None:
        splits = {"train": _class_files(root / "train", root, skipped),
                  "test": _class_files(root / held_out, root, skipped)}
        if set(splits["test"]) != set(splits["train"]):
            raise ValueError(
                f"image folder {printable(path)!r}: train/ has classes "
                f"{[printable(c) for c in sorted(splits['train'])]} and {held_out}/ "
                f"{[printable(c) for c in sorted(splits['test'])]}; they must be the same")
        class_names = sorted(splits["train"])
        source = {"train": str(root / "train"), "test": str(root / held_out)}
    else:
        files = _class_files(root, root, skipped)
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
            f"image folder {printable(path)!r}: too few pictures to hold out a test set "
            f"({test_fraction:g} of each class rounds to none); add pictures or a test/ folder")
    listed = {s: [(p, class_names.index(c)) for c in class_names for p in splits[s][c]]
              for s in SPLIT_FOLDERS}
    headers = {s: [_header(p) for p, _ in pairs] for s, pairs in listed.items()}
    height, width, channels = _target(headers["train"], image_shape)
    arrays = _read_listed(path, listed, (height, width, channels))
    converted = _conversions(headers["train"] + headers["test"], height, width, channels)
    summary = (f"Found {len(listed['train'])} training and {len(listed['test'])} test "
               f"pictures in {len(class_names)} classes "
               f"({', '.join(printable(c) for c in class_names[:10])}"
               f"{', ...' if len(class_names) > 10 else ''}), brought to "
               f"{height}x{width}x{channels}"
               + (f"; converted: {', '.join(f'{n} {k}' for k, n in sorted(converted.items()))}"
                  if converted else "")
               + (f"; skipped: {skipped.line()}" if skipped else "")
               + (f"; {', '.join(sorted(set(visible) & {'val', 'validation'} - {held_out}))}/ "
                  f"not read (test/ is the held-out split)"
                  if held_out == "test" and set(visible) & {"val", "validation"} else ""))
    if verbose:
        print(summary)
    return dict(train=arrays["train"], test=arrays["test"], class_names=class_names,
                image_shape=(height, width, channels), source=source, summary=summary)


def _read_listed(path, listed, shape):
    """``{split: (uint8 images, int32 labels)}`` of ``listed`` (``{split:
    [(picture, label), ...]}``) decoded to ``shape``, one at a time; refused
    in one line first when they would take more than
    :data:`keras_gresnet.limits.MAX_FOLDER_BYTES` together."""
    height, width, channels = shape
    count = sum(map(len, listed.values()))
    needed = count * height * width * channels
    if needed > MAX_FOLDER_BYTES:
        raise ValueError(
            f"image folder {printable(path)!r}: {count} pictures at {height}x{width}x{channels} "
            f"take {needed / 2**30:.1f} GiB; at most {MAX_FOLDER_BYTES / 2**30:.0f} GiB are read: "
            f"choose a smaller size (--input-shape 64,64,3, image_shape=(64, 64, 3))")
    arrays = {}
    for split, pairs in listed.items():
        images = np.zeros((len(pairs), height, width, channels), np.uint8)
        for i, (picture, _) in enumerate(pairs):
            images[i] = _decoded(picture, height, width, channels)
        arrays[split] = (images, np.array([label for _, label in pairs], np.int32))
    return arrays


def read_test_folder(path, *, image_shape):
    """Every picture of the folder ``path`` handed over as a test set: its
    held-out part (``test/``, ``val/`` or ``validation/``) where it has
    ``train/`` beside it, else every class folder, whole (no seeded split:
    a test set is scored entire). Returns ``{"images", "labels",
    "class_names", "source", "summary"}`` (labels index the sorted class
    folder names, ``source`` the folder read); the same rules of classes,
    size and channels as :func:`read_image_folder`."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"image folder {printable(path)!r} does not exist or is not a folder")
    root = root.resolve()
    held_out = _held_out_folder(root, {p.name for p in _visible(root)})
    read = root / held_out if held_out is not None else root
    skipped = _Skipped()
    files = _class_files(read, root, skipped, least=1)
    class_names = sorted(files)
    pairs = [(p, class_names.index(c)) for c in class_names for p in files[c]]
    headers = [_header(p) for p, _ in pairs]
    shape = _target(headers, image_shape)
    images, labels = _read_listed(path, {"test": pairs}, shape)["test"]
    summary = (f"scored every one of the {len(pairs)} pictures of {printable(read)} in "
               f"{len(class_names)} classes" + (f"; skipped: {skipped.line()}" if skipped else ""))
    return dict(images=images, labels=labels, class_names=class_names, source=str(read),
                summary=summary)


def looks_like_picture_folder(path):
    """Whether ``path`` is laid out as a picture folder: a subfolder (or
    ``train/``'s subfolder) holding a file Pillow opens by its ending. Reads
    folder listings only."""
    suffixes = picture_suffixes()
    root = Path(path)
    try:
        tops = [root, root / "train"] if (root / "train").is_dir() else [root]
        for top in tops:
            for sub in top.iterdir():
                if sub.is_dir() and any(f.suffix.lower() in suffixes for f in sub.iterdir()):
                    return True
    except OSError:
        return False
    return False


def picture_paths(items):
    """``(paths, problems)``: the picture files that ``items`` name, in order.
    An item is a file, a folder (its picture files by their ending, in
    subfolders too, sorted; hidden ones and links to folders not followed)
    or a glob (``"shots/*.jpg"``, ``"**"`` recursive) where no such file
    exists. An item that names nothing is a problem line, not an error, so
    that the other pictures are still predicted."""
    paths, problems = [], []
    suffixes = picture_suffixes()
    for item in map(str, items):
        if os.path.isdir(item):
            found = []
            for folder, subfolders, files in os.walk(item):  # links to folders: not followed
                subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
                found += [os.path.join(folder, f) for f in sorted(files)
                          if not f.startswith(".") and Path(f).suffix.lower() in suffixes]
            if not found:
                problems.append(f"{printable(item)}: a folder with no picture files "
                                f"({', '.join(sorted(suffixes)[:6])}, ...)")
            paths += found
        elif os.path.lexists(item):
            paths.append(item)
        elif glob.has_magic(item):
            found = sorted(p for p in glob.glob(item, recursive=True) if not os.path.isdir(p))
            if not found:
                problems.append(f"{printable(item)}: matches no file")
            paths += found
        else:
            problems.append(f"{printable(item)}: no such picture file")
    return paths, problems


def is_image_folder(path):
    """Whether ``path`` names an existing folder (not a dataset name)."""
    return isinstance(path, (str, os.PathLike)) and Path(path).is_dir()
