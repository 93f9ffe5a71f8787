"""A release of the published weights: every file of a ``published`` entry,
flat, verified against the registry's sha256, and a ``SHA256SUMS`` manifest
(the format ``sha256sum -c`` reads).

Such a folder, served over HTTP as it is, is a mirror:
``KERAS_GRESNET_WEIGHTS_URL=http://host/path/`` makes every builder's
``weights=`` download ``{URL}{file}`` from it; a checkout's ``zoo/weights/``
is one. Only the copies and ``SHA256SUMS`` are written, each atomically;
nothing is deleted.
"""

import shutil
from pathlib import Path

from keras_gresnet import files
from keras_gresnet.weights.download import sha256_of
from keras_gresnet.weights.registry import PUBLISHED, list_weights

MANIFEST = "SHA256SUMS"


def published_files(source):
    """``[(entry, path)]`` of every published entry's file in ``source``,
    each verified; ``ValueError`` naming the first bad one."""
    found = []
    for entry in list_weights():
        if entry["status"] != PUBLISHED:
            continue
        path = Path(source) / entry["file"]
        if not path.is_file():
            raise ValueError(f"{path}: missing (registry entry {entry['name']!r})")
        digest = sha256_of(path)
        if digest != entry["sha256"]:
            raise ValueError(f"{path}: sha256 {digest} is not the registry's {entry['sha256']}")
        found.append((entry, path))
    return found


def write_release(out, source):
    """Write the release folder ``out`` from the files in ``source`` (every
    one verified before anything is written); returns ``(out, file count)``."""
    found = published_files(source)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for _, path in found:
        target = out / path.name
        if target.resolve() != path.resolve():
            with files.atomic_path(target) as tmp:
                shutil.copyfile(path, tmp)
    lines = [f"{entry['sha256']}  {entry['file']}" for entry, _ in found]
    files.write_text(out / MANIFEST, "\n".join(sorted(lines, key=lambda line: line[66:])) + "\n")
    return out, len(found)
