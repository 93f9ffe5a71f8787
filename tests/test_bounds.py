"""Every member of a ``.keras`` archive is bounded before Keras inflates it
(issue 50): a weights member that inflates past keras_gresnet.limits'
ratio, an HDF5 bomb stored inside the archive, too many members, a member
larger than its bound; each one ValueError naming the file, through every
door that loads a ``.keras`` file (``load_model``, ``resolve``, the command
line). The bounds live in one module. A user's JSON or CSV is read bounded
and only from a regular file; broken weights and model files are one line."""

import ast
import io
import os
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

import keras_gresnet
from keras_gresnet import cli, limits, training, zoo
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


# --------------------------------------------------- bounded reads, one line


def test_json_and_csv_files_are_read_bounded_and_regular_only(tmp_path):
    """A user's JSON or CSV (a run's config.json, history.csv, a preset's
    files) larger than the bound is refused before it is read; a named pipe
    is refused without being opened (it would block)."""
    from keras_gresnet import files

    big = tmp_path / "config.json"
    big.write_text('{"a": "' + "x" * 5000 + '"}')
    assert files.read_json(big)["a"] == "x" * 5000
    with pytest.raises(ValueError, match=r"config.json holds 5,009 bytes, more than the 1,000"):
        files.read_json(big, max_bytes=1000)
    with pytest.raises(ValueError, match="holds 5,009 bytes"):
        files.read_bounded(big, 1000)
    os.mkfifo(tmp_path / "history.csv")
    with pytest.raises(ValueError, match="history.csv is not a regular file"):
        training.read_history(tmp_path / "history.csv")
    with pytest.raises(ValueError, match="cannot read it"):
        files.read_json(tmp_path / "missing.json")


def test_broken_weights_and_model_files_are_one_line(tmp_path):
    """A preset whose model.weights.h5 is corrupt, a weights file whose
    variables declare far more bytes than it holds, and random bytes named
    .keras: one line each, naming the file."""
    import h5py

    zoo.save_preset(zoo.gresnet_mlp(depth=2), tmp_path / "preset")
    weights = tmp_path / "preset" / "model.weights.h5"
    intact = weights.read_bytes()
    weights.write_bytes(b"garbage" * 100)
    with pytest.raises(ValueError, match="model.weights.h5: not a readable Keras weights file") \
            as error:
        zoo.resolve(str(tmp_path / "preset"))
    assert "\n" not in str(error.value)
    weights.write_bytes(intact)
    with h5py.File(tmp_path / "bomb.weights.h5", "w") as f:  # 400 MB of zeros, compressed
        f.create_dataset("v", shape=(10**8,), dtype="float32", compression="gzip",
                         chunks=(10**6,))
    with pytest.raises(ValueError, match=r"declare 400,000,000 bytes from .* on disk"):
        from keras_gresnet.weights.loading import load_exact

        load_exact(zoo.gresnet_mlp(depth=2), tmp_path / "bomb.weights.h5")
    (tmp_path / "random.keras").write_bytes(os.urandom(4096))
    with pytest.raises(ValueError, match=r"random.keras: not a .keras model \(a .keras file is "
                                         r"a zip archive"):
        zoo.resolve(str(tmp_path / "random.keras"))
