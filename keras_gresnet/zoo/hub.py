"""Presets on the Hugging Face Hub, KerasHub style: ``hf://owner/name``
URIs (optionally ``@revision``), a preset repository's download into the
Hugging Face cache, its upload in one commit, and its README (the model card).

Only the transport and the card live here; :mod:`keras_gresnet.zoo.presets`
writes and loads the preset itself, with the same checks as a local folder.
``huggingface_hub`` is an optional extra, imported on first use: URIs are
checked without it, and this module imports neither it nor Keras.
"""

import contextlib
import json
import os
import re
import sys
from pathlib import Path

from keras_gresnet.limits import MAX_HUB_JSON_BYTES, MAX_WEIGHTS_BYTES  # the bounds' one place
from keras_gresnet._version import __version__
from keras_gresnet.files import Stopped, stop_when
from keras_gresnet.weights.download import MIN_RATE, sha256_of
from keras_gresnet.weights.arguments import (
    HF_SCHEME, PRESET_CONFIG, PRESET_CONVERTER, PRESET_METADATA, PRESET_PREPROCESSOR,
    PRESET_TASK, PRESET_TASK_WEIGHTS, PRESET_WEIGHTS,
)
from keras_gresnet.weights.registry import model_card, read_registry

INSTALL_HINT = 'pip install "keras-gresnet[hub]"'
README = "README.md"  # the repository's model card, as the Hub shows it
PRESET_FILES = (PRESET_CONFIG, PRESET_WEIGHTS, PRESET_METADATA, PRESET_TASK,
                PRESET_TASK_WEIGHTS, PRESET_PREPROCESSOR, PRESET_CONVERTER)
WEIGHTS_FILES = (PRESET_WEIGHTS, PRESET_TASK_WEIGHTS)
# The largest preset file downloaded (keras_gresnet.limits, the bounds' one
# place): the weights of the largest model this package builds; a JSON file
# of a preset is small.
MAX_JSON_BYTES = MAX_HUB_JSON_BYTES
URI_FORM = "'hf://owner/name' or 'hf://owner/name@revision' (a branch, tag or commit)"

# The Hub's repo id rules (huggingface_hub.utils.validate_repo_id): ASCII
# letters, digits, '-', '_', '.', at most 96 each, starting and ending with a
# letter, digit or '_', no '--' or '..', no '.git' ending.
_PART = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$")
# A git ref or a commit: refs/pr/1, v1.0, main, 40 hex digits.
_REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,254}$")


class HubError(ValueError):
    """A preset that cannot be had from, or put on, the Hub (no such
    repository, no access, offline and not cached, a repository that already
    holds a preset)."""


class HubNotInstalledError(ImportError, ValueError):
    """``huggingface_hub`` is not installed (the ``[hub]`` extra): an
    ``ImportError`` that the command line shows as one line."""


def is_hub_uri(value):
    """Whether ``value`` is meant as a Hub URI (a string starting ``hf://``)."""
    return isinstance(value, str) and value[:len(HF_SCHEME)].lower() == HF_SCHEME


def parse_hub_uri(uri, argument="preset"):
    """``(repo_id, revision)`` of ``hf://owner/name[@revision]``
    (``revision`` ``None`` when not given); otherwise a one-line
    ``ValueError`` naming ``argument`` and what is accepted. Makes no
    network call."""
    if not is_hub_uri(uri):
        raise ValueError(f"{argument}={uri!r} is not a Hugging Face URI; expected {URI_FORM}")
    handle, at, revision = uri[len(HF_SCHEME):].partition("@")
    parts = handle.split("/")

    def bad(why):
        return ValueError(f"{argument}={uri!r}: {why}; expected {URI_FORM}")

    if len(parts) != 2:
        raise bad("the repository must be 'owner/name' (KerasHub's implicit owner needs a "
                  "network call, so it is not accepted)")
    for what, part in zip(("owner", "name"), parts):
        if not _PART.match(part) or "--" in part or ".." in part:
            raise bad(f"{what} {part!r} must be 1 to 96 ASCII letters, digits, '-', '_' or "
                      f"'.', not starting or ending with '-' or '.', without '--' or '..'")
    if handle.endswith(".git"):
        raise bad("the name may not end with '.git'")
    if at and (not _REVISION.match(revision) or ".." in revision or revision.endswith("/")):
        raise bad(f"revision {revision!r} is not a branch, tag or commit name")
    return handle, (revision if at else None)


def hub_module():
    """``huggingface_hub``, or :class:`HubNotInstalledError` saying how to
    install the extra."""
    try:
        import huggingface_hub
        import huggingface_hub.constants  # submodules: the package imports lazily
        import huggingface_hub.errors
    except ImportError:
        raise HubNotInstalledError(
            f"presets on the Hugging Face Hub need huggingface_hub: {INSTALL_HINT}"
        ) from None
    except ValueError as error:  # its settings are read at import: HF_HUB_ETAG_TIMEOUT=abc
        settings = sorted(k for k in os.environ if k.startswith("HF_"))
        raise ValueError(f"huggingface_hub refuses its settings ({' '.join(str(error).split())}); "
                         f"check the environment variables {', '.join(settings)}") from None
    return huggingface_hub


def _with_timeout(hf):
    """``hf`` with a timeout on its shared HTTP client when it has none:
    huggingface_hub's API calls (``repo_info``, ``create_repo``,
    ``create_commit``) pass no timeout of their own and its default client
    has none, so a dead connection would hang. ``HF_HUB_DOWNLOAD_TIMEOUT``
    (default 10 s) is the Hub's own default "for other requests"; a timeout
    the user configured (``set_client_factory``) is kept."""
    session = hf.get_session()
    timeout = session.timeout
    if all(getattr(timeout, part, None) is None for part in ("connect", "read", "write", "pool")):
        session.timeout = float(hf.constants.HF_HUB_DOWNLOAD_TIMEOUT)
    return hf


def _transport_errors(hf):
    """The HTTP client library's connection and timeout errors (httpx's
    ``TransportError``; the client's own module, whichever httpx it uses)."""
    library = sys.modules.get(type(hf.get_session()).__module__.partition(".")[0])
    error = getattr(library, "TransportError", None)
    return (error,) if isinstance(error, type) else ()


def download_preset(uri):
    """The local folder of the preset at ``uri``, downloaded into the
    Hugging Face cache (``HF_HUB_CACHE``), or found there
    (``HF_HUB_OFFLINE=1``, or a Hub that cannot be reached: the cache only).

    Online, the listing of the revision comes first (``repo_info``, with a
    timeout): the preset's files of that one commit, each no larger than
    :data:`MAX_WEIGHTS_BYTES` / :data:`MAX_JSON_BYTES`. Then each file is
    fetched (``hf_hub_download``, the file-by-file way KerasHub's
    ``get_file`` uses), bounded: a server that sends more than the listed
    size, or sends it slower than 32 KiB/s overall (a trickle that never
    trips the per-read timeout, ``HF_HUB_DOWNLOAD_TIMEOUT``), is stopped
    and its partial file removed. Called from another thread than the main
    one, the listing's bounds are checked but a stream cannot be stopped
    mid-way."""
    repo_id, revision = parse_hub_uri(uri)
    hf = _with_timeout(hub_module())
    errors = hf.errors
    timeout = float(hf.constants.HF_HUB_ETAG_TIMEOUT)
    local_only, unreachable, info = hf.constants.is_offline_mode(), None, None
    try:
        if not local_only:
            try:
                info = hf.HfApi(library_name="keras-gresnet", library_version=__version__
                                ).repo_info(repo_id, revision=revision, timeout=timeout,
                                            files_metadata=True)
            except (errors.OfflineModeIsEnabled, *_transport_errors(hf)) as error:
                local_only, unreachable = True, error
        if local_only:
            return hf.snapshot_download(
                repo_id, revision=revision, allow_patterns=list(PRESET_FILES),
                local_files_only=True, library_name="keras-gresnet",
                library_version=__version__)
        return _download_files(hf, uri, repo_id, revision, info)
    except errors.RevisionNotFoundError:
        raise HubError(f"preset {uri!r}: the repository has no revision {revision!r}") from None
    except (errors.RepositoryNotFoundError, errors.GatedRepoError):
        raise HubError(f"preset {uri!r}: no such repository on the Hub, or it is private or "
                       f"gated (log in with `hf auth login` or set HF_TOKEN)") from None
    except errors.LocalEntryNotFoundError as error:
        cause = unreachable or error.__cause__ or error
        why = ("HF_HUB_OFFLINE is set" if hf.constants.is_offline_mode()
               else f"the Hub could not be reached ({type(cause).__name__}: {_first_line(cause)})")
        raise HubError(f"preset {uri!r} is not in the Hugging Face cache "
                       f"{hf.constants.HF_HUB_CACHE} and {why}") from None
    except errors.HfHubHTTPError as error:
        raise HubError(f"preset {uri!r}: the Hub refused the download: "
                       f"{_first_line(error)}") from None
    except _transport_errors(hf) as error:  # a file's download, after the listing
        raise HubError(f"preset {uri!r}: the download failed "
                       f"({type(error).__name__}: {_first_line(error)})") from None


def _download_files(hf, uri, repo_id, revision, info):
    """Fetch the preset files ``info`` (the revision's listing) names, each
    bounded (:func:`_bounded`), all of its one commit; returns their folder."""
    sizes = {s.rfilename: s.size for s in info.siblings or () if s.rfilename in PRESET_FILES}
    for file, size in sizes.items():
        limit = MAX_WEIGHTS_BYTES if file in WEIGHTS_FILES else MAX_JSON_BYTES
        if not isinstance(size, int) or not 0 <= size <= limit:
            raise HubError(f"preset {uri!r}: the Hub lists {file} at {size!r} bytes; a "
                           f"preset file is at most {limit:,}")
    if PRESET_CONFIG not in sizes:
        raise HubError(f"preset {uri!r}: the repository has no {PRESET_CONFIG} at revision "
                       f"{revision or 'main'}; is it a keras-gresnet preset?")
    # The first answer may take the file's HEAD request's timeout, then the
    # transfer's own: the deadline is both plus the size at MIN_RATE.
    waits = float(hf.constants.HF_HUB_ETAG_TIMEOUT) + float(hf.constants.HF_HUB_DOWNLOAD_TIMEOUT)
    endpoint = hf.constants.ENDPOINT
    blobs = Path(hf.constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "blobs"
    folders = set()
    for file, size in sizes.items():
        url = hf.hf_hub_url(repo_id, file, revision=info.sha, endpoint=endpoint)
        with _bounded(blobs, size, waits + size / MIN_RATE, url):
            path = hf.hf_hub_download(
                repo_id, file, revision=revision, endpoint=endpoint,
                etag_timeout=float(hf.constants.HF_HUB_ETAG_TIMEOUT),
                library_name="keras-gresnet", library_version=__version__)
        folders.add(Path(path).parent)
    if len(folders) != 1 or next(iter(folders)).name != info.sha:
        raise HubError(f"preset {uri!r}: the repository changed during the download (its "
                       f"files come from more than one commit); download it again")
    return str(folders.pop())


@contextlib.contextmanager
def _bounded(blobs, size, seconds, url):
    """Stop the download in the body when the partial files in ``blobs``
    (``*.incomplete``, huggingface_hub's) grow past ``size`` bytes or it
    takes longer than ``seconds`` (:func:`keras_gresnet.files.stop_when`):
    the partial files are removed, and a :class:`HubError` names ``url``."""
    before = set(blobs.glob("*.incomplete")) if blobs.is_dir() else set()

    def partial():
        return [p for p in blobs.glob("*.incomplete") if p not in before] if blobs.is_dir() \
            else []

    def check(elapsed):
        if sum(p.stat().st_size for p in partial()) > size:
            return f"sent more than the {size:,} bytes the Hub lists"
        if elapsed > seconds:
            return f"took longer than {seconds:.0f} s (slower than {MIN_RATE // 1024} KiB/s)"
        return None

    try:
        with stop_when(check):
            yield
    except Stopped as stopped:
        for path in partial():
            with contextlib.suppress(OSError):
                path.unlink()
        raise HubError(f"{url}: the download stopped, the server {stopped}") from None


def check_upload_uri(uri, argument="uri"):
    """The repo id of ``hf://owner/name`` as an upload target (no
    ``@revision``: an upload goes to the main branch); ``ValueError``
    otherwise."""
    repo_id, revision = parse_hub_uri(uri, argument)
    if revision is not None:
        raise ValueError(f"{argument}={uri!r}: an upload goes to the repository's main branch; "
                         f"drop '@{revision}'")
    return repo_id


def upload_folder(uri, folder, *, overwrite=False, commit_message=None, argument="uri"):
    """Upload the preset ``folder`` (its :data:`PRESET_FILES` and README)
    to ``hf://owner/name`` in one commit (complete or absent on the Hub), as
    KerasHub's ``upload_preset`` does: ``create_repo(exist_ok=True)``, then
    ``upload_folder``. A repository that already holds a preset is refused
    unless ``overwrite`` (its history keeps the old one). Returns
    ``hf://owner/name@commit``, the URI of exactly this upload."""
    repo_id = check_upload_uri(uri, argument)
    hf = _with_timeout(hub_module())
    # As keras_hub/src/utils/preset_utils.py: upload_preset (create_repo with
    # exist_ok, then upload_folder), but the card is written into our own
    # temporary copy, never into the user's folder, and a preset already on
    # the Hub is replaced only when asked.
    api = hf.HfApi(library_name="keras-gresnet", library_version=__version__)
    try:
        repo_id = api.create_repo(repo_id, exist_ok=True).repo_id
        if not overwrite and api.file_exists(repo_id, PRESET_CONFIG):
            raise HubError(f"{uri} already holds a preset; pass overwrite=True to replace it "
                           f"(the repository's history keeps the old one)")
        commit = api.upload_folder(
            repo_id=repo_id, folder_path=str(folder), allow_patterns=[*PRESET_FILES, README],
            commit_message=commit_message or f"Upload a keras-gresnet {__version__} preset",
        )
    except hf.errors.OfflineModeIsEnabled:
        raise HubError(f"{argument}={uri!r}: cannot upload, HF_HUB_OFFLINE is set") from None
    except _transport_errors(hf) as error:
        raise HubError(f"{argument}={uri!r}: the Hub could not be reached "
                       f"({type(error).__name__}: {_first_line(error)})") from None
    except hf.errors.HfHubHTTPError as error:
        raise HubError(f"{argument}={uri!r}: the Hub refused the upload ({_first_line(error)}); "
                       f"log in with `hf auth login` or set HF_TOKEN with write access") from None
    oid = getattr(commit, "oid", None)
    return f"{HF_SCHEME}{repo_id}@{oid}" if oid else f"{HF_SCHEME}{repo_id}"


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _registry_entry(metadata):
    """The registry entry a preset was made from (:func:`weights_preset`),
    when the current registry still lists that very file."""
    name = metadata.get("weights") if isinstance(metadata, dict) else None
    entry = read_registry().get(name) if isinstance(name, str) else None
    if entry is None or entry.get("sha256") != metadata.get("weights_sha256"):
        return None
    return entry


def preset_card(folder, *, repo_id, builder, builder_kwargs, params, trainable_params):
    """The model card (the repository's README.md) of the preset ``folder``:
    for a registry entry's preset, the entry's card (:func:`model_card`, as
    ``keras-gresnet weights show`` prints it); for any other, what the
    preset records. Both end with the preset's builder, arguments,
    parameters and weights file (sha256, size)."""
    metadata_path = folder / PRESET_METADATA
    metadata = json.loads(metadata_path.read_text()) if metadata_path.is_file() else {}
    weights = folder / PRESET_WEIGHTS
    kwargs = ", ".join(f"{k}={v!r}" for k, v in sorted(builder_kwargs.items()))
    entry = _registry_entry(metadata)
    lines = ["---", "library_name: keras", "tags:", "- keras-gresnet", "- keras-gresnet-preset",
             "---", ""]
    if entry is not None:
        lines += [model_card(entry).rstrip("\n"), "",
                  f"Converted to a preset from the registry file {entry['file']} "
                  f"(sha256 {entry['sha256']}).", ""]
    else:
        lines += [f"# {repo_id}", ""]
    lines += [
        "## Preset",
        "",
        f"- load: `keras_gresnet.zoo.from_preset(\"hf://{repo_id}\")`, or with KerasHub "
        f"after `import keras_gresnet`: `keras_hub.models.ImageClassifier.from_preset"
        f"(\"hf://{repo_id}\")` (Keras 3: TensorFlow, JAX or PyTorch)",
        f"- builder: `keras_gresnet.zoo.{builder}({kwargs})`",
        f"- parameters: {params:,} ({trainable_params:,} trainable)",
        f"- weights: {PRESET_WEIGHTS}, {weights.stat().st_size:,} bytes, "
        f"sha256 {sha256_of(weights)}",
        f"- saved with Keras {metadata.get('keras_version', 'not recorded')}, "
        f"keras-gresnet {metadata.get('keras_gresnet_version', 'not recorded')}",
    ]
    if metadata and entry is None:
        lines.append(f"- metadata: `{json.dumps(metadata, sort_keys=True, default=str)}`")
    return "\n".join(lines) + "\n"
