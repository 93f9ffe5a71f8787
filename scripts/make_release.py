"""Make a release folder of the published weights: every file of a
``published`` registry entry, flat, verified against the registry's sha256,
and a ``SHA256SUMS`` manifest (the format ``sha256sum -c`` reads).

    python scripts/make_release.py                 # checks zoo/weights/ in place
    python scripts/make_release.py --out release/  # a fresh folder to upload

The folder served over HTTP as it is, is a valid mirror:
``KERAS_GRESNET_WEIGHTS_URL=http://host/path/`` makes every builder's
``weights=`` download ``{URL}{file}`` from it. ``zoo/weights/`` itself is
such a folder. Only files this script writes are written (the copies and
``SHA256SUMS``, each atomically); nothing is deleted. A missing or
mismatching source file is an error (exit 2) before anything is written.
"""

import argparse
import shutil
import sys
from pathlib import Path

from keras_gresnet import _io, weights

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "zoo" / "weights"
MANIFEST = "SHA256SUMS"


def published_files(source):
    """``[(entry, path)]`` of every published entry's file in ``source``,
    each verified; ``ValueError`` naming the first bad one."""
    found = []
    for entry in weights.list_weights():
        if entry["status"] != weights.PUBLISHED:
            continue
        path = Path(source) / entry["file"]
        if not path.is_file():
            raise ValueError(f"{path}: missing (registry entry {entry['name']!r})")
        digest = weights.sha256_of(path)
        if digest != entry["sha256"]:
            raise ValueError(f"{path}: sha256 {digest} is not the registry's {entry['sha256']}")
        found.append((entry, path))
    return found


def make_release(out, source=SOURCE):
    files = published_files(source)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for _, path in files:
        target = out / path.name
        if target.resolve() != path.resolve():
            with _io.atomic_path(target) as tmp:
                shutil.copyfile(path, tmp)
    lines = [f"{entry['sha256']}  {entry['file']}" for entry, _ in files]
    _io.write_text(out / MANIFEST, "\n".join(sorted(lines, key=lambda l: l[66:])) + "\n")
    return out, len(files)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SOURCE,
                        help="the release folder (default: zoo/weights itself)")
    args = parser.parse_args(argv)
    try:
        out, count = make_release(args.out)
    except ValueError as error:
        print(f"make_release: error: {error}", file=sys.stderr)
        return 2
    print(f"{out}: {count} weight files and {MANIFEST}, verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
