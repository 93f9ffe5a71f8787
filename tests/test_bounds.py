"""Every member of a ``.keras`` archive is bounded before Keras inflates it
(issue 50): a weights member that inflates past keras_gresnet.limits'
ratio, an HDF5 bomb stored inside the archive, too many members, a member
larger than its bound; each one ValueError naming the file, through every
door that loads a ``.keras`` file (``load_model``, ``resolve``, the command
line). The bounds live in one module."""

import ast
import io
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

import keras_gresnet
from keras_gresnet import cli, limits, zoo
from keras_gresnet.weights import loading

ROOT = Path(keras_gresnet.__file__).resolve().parent


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small zoo model's ``.keras`` file and its members."""
    path = tmp_path_factory.mktemp("saved") / "m.keras"
    zoo.gresnet_mlp(depth=2).save(path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    return path, members


def _archive(path, members, compress=()):
    """Write ``members`` ``{name: bytes}`` as a zip, the names in ``compress``
    deflated (the others stored, as Keras writes them)."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data, zipfile.ZIP_DEFLATED if name in compress
                             else zipfile.ZIP_STORED)
    return path


def _low_entropy(size):
    """``size`` bytes that deflate about 18:1 (the probe's bomb): 200 random
    bytes in every 4 kB, zeros between."""
    rng = np.random.default_rng(0)
    block = np.zeros((size // 4096, 4096), np.uint8)
    block[:, :200] = rng.integers(0, 256, (len(block), 200), dtype=np.uint8)
    return block.tobytes()


def _refused(path, capsys, needle):
    """Refused in one line through the loader, the resolver and the command
    line (exit 2)."""
    with pytest.raises(ValueError, match=needle):
        keras_gresnet.load_model(path)
    with pytest.raises(ValueError, match=needle):
        zoo.resolve(str(path))
    assert cli.main(["gates", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and needle.split("(")[0] in err


def test_the_real_file_loads(saved):
    path, _ = saved
    assert keras_gresnet.load_model(path, compile=False).count_params() > 0


def test_a_weights_member_that_inflates_18_to_1_is_refused(saved, tmp_path, capsys):
    _, members = saved
    payload = _low_entropy(32 * 2**20)  # 32 MB from about 1.8 MB
    bomb = _archive(tmp_path / "bomb.keras", {**members, "model.weights.h5": payload},
                    compress=("model.weights.h5",))
    with zipfile.ZipFile(bomb) as archive:
        info = archive.getinfo("model.weights.h5")
    assert info.file_size / info.compress_size > 15  # the probe's kind of bomb
    _refused(bomb, capsys, "compression bomb")


def test_an_hdf5_bomb_stored_inside_the_archive_is_refused(saved, tmp_path, capsys):
    """The member is stored (ratio 1.0) but its HDF5 dataset is gzip'd and
    declares 400 MB: refused by what the variables declare, before reading."""
    _, members = saved
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f.create_dataset("bomb", shape=(10**8,), dtype="float32", compression="gzip",
                         fillvalue=0.0, chunks=(2**20,))
    nested = _archive(tmp_path / "nested.keras",
                      {**members, "model.weights.h5": buffer.getvalue()})
    _refused(nested, capsys, "variables declare")


def test_a_member_over_its_bound_or_too_many_members_is_refused(saved, tmp_path, monkeypatch,
                                                               capsys):
    _, members = saved
    monkeypatch.setitem(limits.KERAS_MEMBER_BYTES, "config.json", 100)
    _refused(_archive(tmp_path / "big.keras", members), capsys, "config.json declares")
    monkeypatch.undo()
    extra = {f"assets/{i}": b"" for i in range(limits.MAX_ARCHIVE_MEMBERS)}
    _refused(_archive(tmp_path / "many.keras", {**members, **extra}), capsys, "members")


def test_a_member_whose_data_is_longer_than_declared_fails_its_check(saved, tmp_path):
    """Python's zip reader stops at the declared size: a member whose data
    runs past it (its declared size patched down) fails the CRC check, one
    line, so the declared bound holds for what is read."""
    _, members = saved
    path = _archive(tmp_path / "lying.keras", members)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("model.weights.h5")
    size = info.file_size.to_bytes(4, "little")
    smaller = (info.file_size // 2).to_bytes(4, "little")
    assert data.count(size) >= 2
    data = data.replace(size, smaller)  # local header and central directory alike
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="lying.keras"):
        keras_gresnet.load_model(path)


def test_the_bounds_live_in_one_module():
    """No module but keras_gresnet.limits assigns a MAX_*BYTES figure: the
    others name it from there."""
    owners = {}
    for module in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id.startswith("MAX_") and \
                        target.id.endswith("BYTES") and isinstance(node.value, (
                            ast.BinOp, ast.Constant)):
                    owners.setdefault(target.id, []).append(module.name)
    assert owners and all(files == ["limits.py"] for files in owners.values()), owners
