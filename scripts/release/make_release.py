"""Make a release folder of the published weights: every file of a
``published`` registry entry, flat, verified against the registry's sha256,
and a ``SHA256SUMS`` manifest (the format ``sha256sum -c`` reads).

    python scripts/release/make_release.py                 # checks zoo/weights/ in place
    python scripts/release/make_release.py --out release/  # a fresh folder to upload

The folder served over HTTP as it is, is a valid mirror:
``KERAS_GRESNET_WEIGHTS_URL=http://host/path/`` makes every builder's
``weights=`` download ``{URL}{file}`` from it. ``zoo/weights/`` itself is
such a folder. Only files this script writes are written (the copies and
``SHA256SUMS``, each atomically); nothing is deleted. A missing or
mismatching source file is an error (exit 2) before anything is written.
"""

import argparse
import sys
from pathlib import Path

from keras_gresnet.weights import release

SOURCE = Path(__file__).resolve().parents[2] / "zoo" / "weights"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SOURCE,
                        help="the release folder (default: zoo/weights itself)")
    args = parser.parse_args(argv)
    try:
        out, count = release.write_release(args.out, SOURCE)
    except ValueError as error:
        print(f"make_release: error: {error}", file=sys.stderr)
        return 2
    print(f"{out}: {count} weight files and {release.MANIFEST}, verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
