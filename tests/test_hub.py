"""Presets on the Hugging Face Hub (``hf://owner/name``), without a network:
downloads come from a Hugging Face cache laid out in ``tmp_path`` with
``HF_HUB_OFFLINE=1``; uploads go to a stand-in for the client's
network-calling methods (``HfApi.create_repo``, ``file_exists``,
``upload_folder``) that copies the folder to a "remote" directory."""

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants
import huggingface_hub.errors
import huggingface_hub.utils
import keras
import numpy as np
import pytest

from keras_gresnet import weights, zoo
from keras_gresnet.zoo import hub, presets

from helpers import outputs

MLP = dict(depth=2)
SHAPE = (4, 4, 1)  # 16 inputs: a one-block GResNet MLP
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _normal_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
    return model


@pytest.fixture
def x():
    return np.random.default_rng(1).normal(size=(3, *SHAPE)).astype("float32")


@pytest.fixture
def source():
    # Random gates and BatchNorm statistics too: a preset that lost any
    # weight would give other outputs.
    return _normal_weights(zoo.gresnet_mlp(depth=2, input_shape=SHAPE), seed=7)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch, network_guard):
    """An empty Hugging Face cache in ``tmp_path``, offline. huggingface_hub
    reads its environment when imported, so its constants are set too."""
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return cache


def _cached_repo(cache, repo_id, folder, *, ref="main", commit=COMMIT):
    """Put the files of ``folder`` into ``cache`` as snapshot_download leaves
    a repository: ``models--owner--name/{refs/<ref>, snapshots/<commit>/}``."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)  # the Hub's cache: no newline
    shutil.copytree(folder, repo / "snapshots" / commit)
    return repo


class Remote:
    """Stand-in for the Hub's side of HfApi: records each call and keeps the
    uploaded files of each repository in ``root/owner/name``."""

    def __init__(self, root, monkeypatch, exists=False):
        self.root, self.calls, self.exists = root, [], exists
        for method in ("create_repo", "file_exists", "upload_folder"):
            monkeypatch.setattr(huggingface_hub.HfApi, method, getattr(self, method))

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        return huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}")

    def file_exists(self, repo_id, filename, **kwargs):
        self.calls.append(("file_exists", repo_id, filename))
        return self.exists

    def upload_folder(self, *, repo_id, folder_path, allow_patterns=None, **kwargs):
        self.calls.append(("upload_folder", repo_id, kwargs))
        folder = self.root / repo_id
        folder.mkdir(parents=True, exist_ok=True)
        for path in Path(folder_path).iterdir():  # what upload_folder would send
            if allow_patterns is None or any(Path(path.name).match(p) for p in allow_patterns):
                shutil.copyfile(path, folder / path.name)
        return huggingface_hub.CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/{COMMIT}",
            commit_message=kwargs.get("commit_message"), commit_description="",
            oid=COMMIT, pr_url=None,
        )

    def names(self):
        return [call[0] for call in self.calls]


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --------------------------------------------------------------- download


def test_from_preset_reads_the_hugging_face_cache_offline(tmp_path, hf_cache, source, x):
    local = zoo.save_preset(source, tmp_path / "local", builder="gresnet_mlp",
                            builder_kwargs=MLP)
    _cached_repo(hf_cache, "owner/tiny-gresnet", local)
    expected = outputs(source, x)
    loaded = zoo.from_preset("hf://owner/tiny-gresnet")
    np.testing.assert_array_equal(outputs(loaded, x), expected)
    # A commit pins the download; resolve and load_into take the URI too.
    pinned = zoo.from_preset(f"hf://owner/tiny-gresnet@{COMMIT}")
    np.testing.assert_array_equal(outputs(pinned, x), expected)
    np.testing.assert_array_equal(outputs(zoo.resolve("hf://owner/tiny-gresnet").model, x),
                                  expected)
    fresh = zoo.gresnet_mlp(depth=2, input_shape=SHAPE)
    zoo.load_into(fresh, "hf://owner/tiny-gresnet")
    np.testing.assert_array_equal(outputs(fresh, x), expected)


def test_a_builder_takes_a_hub_preset_as_its_weights(tmp_path, hf_cache, source, x):
    local = zoo.save_preset(source, tmp_path / "local", builder="gresnet_mlp",
                            builder_kwargs=MLP)
    _cached_repo(hf_cache, "owner/tiny-gresnet", local)
    model = zoo.gresnet_mlp(depth=2, input_shape=SHAPE, weights="hf://owner/tiny-gresnet")
    np.testing.assert_array_equal(outputs(model, x), outputs(source, x))
    # a new head: the body's weights, a fresh 3-class classifier
    headless = zoo.gresnet_mlp(depth=2, input_shape=SHAPE, classes=3,
                               weights="hf://owner/tiny-gresnet")
    assert headless.get_layer("predictions").units == 3
    body = keras.Model(headless.input, headless.get_layer("predictions").input)
    source_body = keras.Model(source.input, source.get_layer("predictions").input)
    np.testing.assert_array_equal(outputs(body, x), outputs(source_body, x))


@pytest.mark.parametrize("uri", ["hf://owner", "hf://owner/na me", "hf://owner/name@a..b"])
def test_a_builder_refuses_a_bad_hub_uri_before_building(uri, monkeypatch, hf_cache):
    monkeypatch.setattr(hub, "download_preset",
                        lambda *a, **k: pytest.fail("downloaded a bad URI"))
    with pytest.raises(ValueError, match=r"^weights='hf://.*expected"):
        zoo.gresnet_mlp(depth=2, input_shape=SHAPE, weights=uri)


def test_a_tag_resolves_through_refs(tmp_path, hf_cache, source, x):
    local = zoo.save_preset(source, tmp_path / "local", builder="gresnet_mlp",
                            builder_kwargs=MLP)
    _cached_repo(hf_cache, "owner/tagged", local, ref="v1")
    np.testing.assert_array_equal(outputs(zoo.from_preset("hf://owner/tagged@v1"), x),
                                  outputs(source, x))
    with pytest.raises(hub.HubError, match="not in the Hugging Face cache"):
        zoo.from_preset("hf://owner/tagged")  # no refs/main


def test_missing_repository_offline_is_one_clear_error(hf_cache):
    with pytest.raises(hub.HubError) as error:
        zoo.from_preset("hf://owner/absent")
    message = str(error.value)
    assert "'hf://owner/absent'" in message and "HF_HUB_OFFLINE is set" in message
    assert str(hf_cache) in message and "\n" not in message


def test_a_downloaded_preset_gets_a_local_presets_checks(tmp_path, hf_cache, source):
    local = zoo.save_preset(source, tmp_path / "local", builder="gresnet_mlp",
                            builder_kwargs=MLP)
    config = json.loads((local / "config.json").read_text())
    config["config"]["builder_kwargs"]["weights"] = "/etc/passwd"
    (local / "config.json").write_text(json.dumps(config))
    _cached_repo(hf_cache, "owner/evil", local)
    with pytest.raises(ValueError, match=r"builder_kwargs may not set \['weights'\]"):
        zoo.from_preset("hf://owner/evil")
    del config["config"]["builder_kwargs"]["weights"]
    (local / "config.json").write_text(json.dumps(config))
    (local / "model.weights.h5").unlink()
    _cached_repo(hf_cache, "owner/no-weights", local)
    with pytest.raises(ValueError, match="model.weights.h5 is missing"):
        zoo.from_preset("hf://owner/no-weights")


# ----------------------------------------------------------------- upload


def test_save_preset_uploads_a_loadable_preset_with_its_card(tmp_path, hf_cache, monkeypatch,
                                                            source, x):
    remote = Remote(tmp_path / "remote", monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    where = zoo.save_preset(source, "hf://owner/tiny-gresnet", builder="gresnet_mlp",
                            builder_kwargs=MLP, metadata={"dataset": "fashion_mnist"})
    assert where == f"hf://owner/tiny-gresnet@{COMMIT}"
    assert remote.names() == ["create_repo", "file_exists", "upload_folder"]
    assert {call[1] for call in remote.calls} == {"owner/tiny-gresnet"}
    assert remote.calls[0][2].get("exist_ok") is True
    uploaded = tmp_path / "remote" / "owner" / "tiny-gresnet"
    assert sorted(p.name for p in uploaded.iterdir()) == [
        "README.md", "config.json", "image_converter.json", "metadata.json", "model.weights.h5",
        "preprocessor.json", "task.json", "task.weights.h5"]
    np.testing.assert_array_equal(outputs(zoo.from_preset(uploaded), x), outputs(source, x))
    card = (uploaded / "README.md").read_text()
    weights_file = uploaded / "model.weights.h5"
    assert card.startswith("---\nlibrary_name: keras\n")
    assert "# owner/tiny-gresnet" in card
    assert 'from_preset("hf://owner/tiny-gresnet")' in card
    assert "`keras_gresnet.zoo.gresnet_mlp(depth=2, input_shape=[4, 4, 1])`" in card
    assert f"parameters: {source.count_params():,} (" in card
    assert f"{weights_file.stat().st_size:,} bytes, sha256 {_sha256(weights_file)}" in card
    assert '"dataset": "fashion_mnist"' in card
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary preset is gone
    # The uploaded repository, in the cache, loads through the URI.
    _cached_repo(hf_cache, "owner/tiny-gresnet", uploaded)
    np.testing.assert_array_equal(outputs(zoo.from_preset(where), x), outputs(source, x))


def test_an_existing_preset_is_replaced_only_with_overwrite(tmp_path, hf_cache, monkeypatch,
                                                           source):
    remote = Remote(tmp_path / "remote", monkeypatch, exists=True)
    with pytest.raises(hub.HubError, match="already holds a preset; pass overwrite=True"):
        zoo.save_preset(source, "hf://owner/taken", builder="gresnet_mlp", builder_kwargs=MLP)
    assert "upload_folder" not in remote.names()
    assert not (tmp_path / "remote").exists()
    zoo.save_preset(source, "hf://owner/taken", builder="gresnet_mlp", builder_kwargs=MLP,
                    overwrite=True)
    assert remote.names()[-1] == "upload_folder"
    assert (tmp_path / "remote" / "owner" / "taken" / "model.weights.h5").is_file()


def test_upload_preset_sends_a_local_folder_unchanged(tmp_path, hf_cache, monkeypatch, source,
                                                     x):
    remote = Remote(tmp_path / "remote", monkeypatch)
    local = zoo.save_preset(source, tmp_path / "local", builder="gresnet_mlp",
                            builder_kwargs=MLP)
    before = {p.name: p.read_bytes() for p in local.iterdir()}
    presets.upload_preset("hf://owner/from-folder", local)
    assert {p.name: p.read_bytes() for p in local.iterdir()} == before  # no README written
    uploaded = tmp_path / "remote" / "owner" / "from-folder"
    assert (uploaded / "README.md").is_file()
    for name, data in before.items():
        assert (uploaded / name).read_bytes() == data
    np.testing.assert_array_equal(outputs(zoo.from_preset(uploaded), x), outputs(source, x))
    # A folder that is not a loadable preset is refused before any call.
    calls = len(remote.calls)
    (local / "model.weights.h5").unlink()
    with pytest.raises(ValueError, match="model.weights.h5 is missing"):
        presets.upload_preset("hf://owner/from-folder", local)
    assert len(remote.calls) == calls


def test_a_registry_entry_uploads_with_its_model_card(tmp_path, hf_cache, monkeypatch):
    name = "plain_mlp2_fashion_mnist"  # the smallest published file, in the checkout
    Remote(tmp_path / "remote", monkeypatch)
    zoo.weights_preset(name, "hf://owner/plain-mlp2", cache_dir=tmp_path / "keras")
    uploaded = tmp_path / "remote" / "owner" / "plain-mlp2"
    card = (uploaded / "README.md").read_text()
    entry = weights.get_weights(name)
    assert weights.model_card(entry) in card  # `keras-gresnet weights show NAME`'s card
    assert f"registry file {entry['file']} (sha256 {entry['sha256']})" in card
    assert f"sha256 {_sha256(uploaded / 'model.weights.h5')}" in card
    x = np.random.default_rng(2).uniform(size=(3, 28, 28, 1)).astype("float32")
    # The same weights, bit for bit. On torch and TensorFlow the preset
    # (built by the zoo: its fused BatchNormalization) and the published
    # .keras file (Keras' own BatchNormalization class, saved before the zoo
    # had its own) round the normalisation in another order: a few float32
    # ulps per BatchNorm layer (2**-23 ~ 1.2e-7 each), far inside rtol=1e-5.
    # (The MLPs' BatchNorms see vectors, which run Keras' form on
    # TensorFlow: exact there too.)
    exact = keras.backend.backend() not in ("torch",)
    np.testing.assert_allclose(outputs(zoo.from_preset(uploaded), x),
                               outputs(zoo.from_preset(name, cache_dir=tmp_path / "keras"), x),
                               rtol=0 if exact else 1e-5, atol=0 if exact else 1e-7)
    # A preset whose recorded sha256 is not the registry's gets no registry card.
    metadata = json.loads((uploaded / "metadata.json").read_text())
    assert metadata["weights"] == name and metadata["weights_sha256"] == entry["sha256"]
    metadata["weights_sha256"] = "0" * 64
    (uploaded / "metadata.json").write_text(json.dumps(metadata))
    other = hub.preset_card(uploaded, repo_id="owner/plain-mlp2", builder="gresnet_mlp",
                            builder_kwargs={"depth": 2}, params=1, trainable_params=1)
    assert weights.model_card(entry) not in other and "# owner/plain-mlp2" in other


# ------------------------------------------------------- bad URIs, no hub


BAD_URIS = [
    "hf://tiny",                      # no owner
    "hf://owner/name/extra",
    "hf://owner/",
    "hf:///name",
    "hf://-owner/name",
    "hf://owner/name.",
    "hf://owner/na--me",
    "hf://owner/na..me",
    "hf://owner/name.git",
    "hf://owner/name@",
    "hf://owner/name@../main",
    "hf://owner/" + "n" * 97,
    "hf://owner/näme",
    "hf://owner/na me",
]


@pytest.mark.parametrize("uri", BAD_URIS)
def test_bad_uris_are_refused_before_anything_is_called_or_written(uri, tmp_path, monkeypatch,
                                                                  hf_cache, source):
    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: calls.append(a))
    remote = Remote(tmp_path / "remote", monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.chdir(tmp_path / "tmp")
    with pytest.raises(ValueError, match=r"expected 'hf://owner/name' or") as error:
        zoo.from_preset(uri)
    assert "preset=" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"directory=.*expected 'hf://owner/name'"):
        zoo.save_preset(source, uri, builder="gresnet_mlp", builder_kwargs=MLP)
    with pytest.raises(ValueError, match=r"uri=.*expected 'hf://owner/name'"):
        presets.upload_preset(uri, tmp_path)
    assert calls == [] and remote.calls == []
    assert list((tmp_path / "tmp").iterdir()) == [] and list(hf_cache.iterdir()) == []


def test_uri_parsing_keeps_what_the_hub_accepts():
    assert hub.parse_hub_uri("hf://owner/name") == ("owner/name", None)
    assert hub.parse_hub_uri("hf://Org_1/my-model.v2@refs/pr/3") == ("Org_1/my-model.v2",
                                                                     "refs/pr/3")
    assert hub.parse_hub_uri(f"hf://o/n@{COMMIT}") == ("o/n", COMMIT)
    assert hub.parse_hub_uri("hf://owner/n@me") == ("owner/n", "me")
    # The same rules as the client's own check, on every URI above.
    for uri in BAD_URIS + ["hf://owner/name", "hf://a/b"]:
        repo_id = uri[len("hf://"):].partition("@")[0]
        try:
            huggingface_hub.utils.validate_repo_id(repo_id)
            client_ok = "/" in repo_id
        except huggingface_hub.errors.HFValidationError:
            client_ok = False
        try:
            ours = hub.parse_hub_uri(uri)[0] == repo_id
        except ValueError:
            ours = False
        revision_bad = "@" in uri and uri in BAD_URIS
        assert ours == (client_ok and not revision_bad), uri


def test_an_upload_refuses_a_revision(tmp_path, monkeypatch, hf_cache, source):
    remote = Remote(tmp_path / "remote", monkeypatch)
    with pytest.raises(ValueError, match=r"directory='hf://owner/name@dev'.*main branch"):
        zoo.save_preset(source, "hf://owner/name@dev", builder="gresnet_mlp",
                        builder_kwargs=MLP)
    assert remote.calls == []


def test_bad_builder_kwargs_are_refused_before_any_hub_call(tmp_path, monkeypatch, hf_cache,
                                                           source):
    remote = Remote(tmp_path / "remote", monkeypatch)
    with pytest.raises(ValueError, match="does not rebuild"):
        zoo.save_preset(source, "hf://owner/name", builder="gresnet_mlp",
                        builder_kwargs=dict(depth=4))
    assert remote.calls == []


def test_without_huggingface_hub_one_line_says_how_to_install(tmp_path, monkeypatch, source):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import` raises ImportError
    for call in (lambda: zoo.from_preset("hf://owner/name"),
                 lambda: zoo.save_preset(source, "hf://owner/name", builder="gresnet_mlp",
                                         builder_kwargs=MLP),
                 lambda: presets.upload_preset("hf://owner/name", tmp_path)):
        with pytest.raises(ImportError) as error:
            call()
        assert isinstance(error.value, ValueError)  # the CLI's one line, exit 2
        message = str(error.value)
        assert 'pip install "keras-gresnet[hub]"' in message and "\n" not in message
    # A bad URI is still named first, without the client.
    with pytest.raises(ValueError, match="expected 'hf://owner/name'"):
        zoo.from_preset("hf://tiny")
    assert list(tmp_path.iterdir()) == []


def test_a_silent_hub_times_out(monkeypatch, hf_cache, tmp_path, source):
    """A server that accepts and never answers: both directions give up
    after HF_HUB_DOWNLOAD_TIMEOUT (1 s here), with one line, instead of
    hanging (the client's own HTTP session has no timeout)."""
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # kept open, never answered
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DOWNLOAD_TIMEOUT", 1)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_ETAG_TIMEOUT", 1)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT",
                        f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    huggingface_hub.close_session()  # a fresh client, as a new process has
    try:
        start = time.monotonic()
        with pytest.raises(hub.HubError, match="the Hub could not be reached") as error:
            zoo.from_preset("hf://owner/silent")
        assert "\n" not in str(error.value)
        with pytest.raises(hub.HubError, match="the Hub could not be reached"):
            zoo.save_preset(source, "hf://owner/silent", builder="gresnet_mlp",
                            builder_kwargs=MLP)
        assert time.monotonic() - start < 30  # with no timeout: forever
        assert held  # the requests did reach the stand-in
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        server.close()
        huggingface_hub.close_session()


class FakeHub:
    """A stand-in for the Hub's HTTP API on the loopback: the listing
    (``/api/models/owner/name[/revision/REV]``, its tree) and the files
    (``/owner/name/resolve/REV/FILE``) of one preset ``folder`` at
    :data:`COMMIT`. ``weights``: ``"ok"``, ``"endless"`` (a stream past the
    listed size) or ``"trickle"`` (a byte every 0.3 s: never a read
    timeout of 1 s)."""

    def __init__(self, folder, weights="ok"):
        import http.server
        import threading

        files = {p.name: p.read_bytes() for p in Path(folder).iterdir()}
        hub_ = self
        self.requests, self.stop = [], threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                hub_.requests.append(self.path)

            def _send(self, body, file=None, length=None):
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                if file is not None:
                    self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()

            def _file(self):
                parts = self.path.split("?")[0].split("/")
                return parts[-1] if "resolve" in parts else None

            def do_HEAD(self):
                file = self._file()
                self._send(files[file], file)

            def do_GET(self):
                file = self._file()
                if file is None:
                    listing = [{"type": "file", "path": k, "size": len(v), "oid": "b" * 40}
                               for k, v in files.items()]
                    body = json.dumps(listing if "/tree/" in self.path else dict(
                        id="owner/name", sha=COMMIT, siblings=[
                            dict(rfilename=k, size=len(v)) for k, v in files.items()]))
                    self._send(body.encode())
                    self.wfile.write(body.encode())
                    return
                body = files[file]
                if file != presets.PRESET_WEIGHTS or weights == "ok":
                    self._send(body, file)
                    self.wfile.write(body)
                    return
                self._send(body, file, length=10**12)
                try:
                    while not hub_.stop.is_set():
                        if weights == "endless":
                            self.wfile.write(b"\0" * 65536)
                        else:
                            self.wfile.write(b"\0")
                            self.wfile.flush()
                            hub_.stop.wait(0.3)
                except OSError:
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def online(monkeypatch, hf_cache):
    """The client online, against whatever endpoint the test serves, with a
    read timeout of 1 s."""
    def connect(endpoint):
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DOWNLOAD_TIMEOUT", 1)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_ETAG_TIMEOUT", 1)
        # What HF_ENDPOINT sets when the client is imported.
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        huggingface_hub.close_session()
    yield connect
    huggingface_hub.close_session()


def _partial_files(cache):
    return [p for p in Path(cache).rglob("*") if p.is_file() and p.suffix == ".incomplete"]


def test_an_online_preset_comes_file_by_file_from_one_commit(tmp_path, hf_cache, online,
                                                             source, x):
    zoo.save_preset(source, tmp_path / "preset", builder="gresnet_mlp", builder_kwargs=MLP)
    with FakeHub(tmp_path / "preset") as endpoint:
        online(endpoint)
        model = zoo.from_preset("hf://owner/name")
    np.testing.assert_array_equal(outputs(model, x), outputs(source, x))
    repo = hf_cache / "models--owner--name"
    assert (repo / "refs" / "main").read_text() == COMMIT  # offline later: the same files
    assert sorted(p.name for p in (repo / "snapshots" / COMMIT).iterdir()) == sorted(
        hub.PRESET_FILES)


@pytest.mark.parametrize("weights, why", [("endless", "sent more than the"),
                                          ("trickle", "took longer than")])
def test_a_preset_download_is_bounded_in_size_and_time(tmp_path, hf_cache, online, source,
                                                       weights, why):
    """A server that streams past the listed size (it would fill the disk)
    or trickles (never tripping the per-read timeout) is stopped, with one
    line naming the file's URL, and leaves no partial file."""
    import time

    zoo.save_preset(source, tmp_path / "preset", builder="gresnet_mlp", builder_kwargs=MLP)
    size = (tmp_path / "preset" / presets.PRESET_WEIGHTS).stat().st_size
    with FakeHub(tmp_path / "preset", weights=weights) as endpoint:
        online(endpoint)
        start = time.monotonic()
        with pytest.raises(hub.HubError, match=why) as error:
            zoo.from_preset("hf://owner/name")
        took = time.monotonic() - start
    message = str(error.value)
    assert "\n" not in message and f"/owner/name/resolve/{COMMIT}/model.weights.h5" in message
    assert _partial_files(hf_cache) == []
    on_disk = sum(p.stat().st_size for p in Path(hf_cache).rglob("*") if p.is_file())
    assert on_disk < 10 * size + 2**20  # the endless stream sends ~GB/s here
    # The deadline is 1 s + size / 32 KiB/s; the listing and the small files
    # come first, each under the 1 s read timeout.
    assert took < 30 + size / hub.MIN_RATE


def test_a_listed_size_over_the_bound_is_refused_before_any_file(tmp_path, hf_cache, online,
                                                                 source, monkeypatch):
    zoo.save_preset(source, tmp_path / "preset", builder="gresnet_mlp", builder_kwargs=MLP)
    monkeypatch.setattr(hub, "MAX_WEIGHTS_BYTES", 1000)
    fake = FakeHub(tmp_path / "preset")
    with fake as endpoint:
        online(endpoint)
        with pytest.raises(hub.HubError, match="a preset file is at most 1,000"):
            zoo.from_preset("hf://owner/name")
    assert not any("/resolve/" in r for r in fake.requests)
    assert not (hf_cache / "models--owner--name" / "blobs").exists()
