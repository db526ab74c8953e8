"""Model and tokenizer names: a local path as is, anything else a Hugging Face hub id.

    from bart.hub import resolve_model_path, resolve_tokenizer_path
    model_path = resolve_model_path(args.init_checkpoint)          # "facebook/bart-large" or a path
    tokenizer_path = resolve_tokenizer_path("facebook/bart-large")  # a tokenizer folder, or a hub id's snapshot

Which tokenizer goes with a model (its own, checked against ``--tokenizer`` / ``$TOKENIZER``) is decided
in :mod:`bart.tokenization.tokenizer_choice`; this module only turns names into local folders.

A hub id is resolved with ``huggingface_hub.snapshot_download``: downloaded when online, read from
the cache when offline (``HF_HUB_OFFLINE=1``). The cache is ``HF_HUB_CACHE``, else ``HF_HOME/hub``,
else huggingface_hub's default, read when the call is made. Only the files this project reads are
fetched (config, generation config, safetensors weights, or ``pytorch_model.bin`` when a repository
has no safetensors, and the BPE tokenizer files), not the TensorFlow/Flax/Rust copies.

Every failure is one :class:`HubResolutionError` whose one-line message names the id and the fix.
"""
from __future__ import annotations

import os
import shlex
import socket
import sys

_TRUE = {"1", "on", "yes", "true"}
CONFIG_FILES = ["config.json", "generation_config.json"]
SAFE_WEIGHTS = ["model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors"]
BIN_WEIGHTS = ["pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*-of-*.bin", "model.pt"]
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                   "added_tokens.json"]
# A folder holds a usable tokenizer when it has the fast file or the BPE pair.
_TOKENIZER_SETS = (("tokenizer.json",), ("vocab.json", "merges.txt"))
_WEIGHT_NAMES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json", "model.pt")


class HubResolutionError(OSError):
    """A model or tokenizer name that is neither a local path nor a resolvable hub id."""


def is_offline() -> bool:
    """``HF_HUB_OFFLINE`` (else ``TRANSFORMERS_OFFLINE``) as set now, as huggingface_hub reads them."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if value is not None:
        return value.strip().lower() in _TRUE
    from huggingface_hub import constants
    return bool(constants.HF_HUB_OFFLINE)


def cache_dir() -> str:
    """The hub cache: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else huggingface_hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hub")
    from huggingface_hub import constants
    return constants.HF_HUB_CACHE


def _looks_like_path(name: str) -> bool:
    return (name.startswith((".", "/", "~")) or name.endswith((".ckpt", ".pt", ".bin", ".safetensors", ".json"))
            or name.count("/") > 1 or os.sep != "/" and os.sep in name)


def looks_like_hub_id(name: str | os.PathLike) -> bool:
    """True for a name that is no local path and reads as a hub id (``org/name``, ``name``), as
    :func:`resolve_model_path` would try on the hub; False for an existing path or one that names a file
    or folder (``./x``, ``/x``, ``x.ckpt``, ``a/b/c``), whose absence is the caller's to report."""
    name = os.fspath(name)
    return bool(name.strip()) and not os.path.exists(os.path.expanduser(name)) and not _looks_like_path(name)


def _download(repo_id: str, what: str, patterns: list[str], revision: str | None) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = is_offline()
    cache = cache_dir()
    try:
        return snapshot_download(repo_id, revision=revision, allow_patterns=patterns, cache_dir=cache,
                                 local_files_only=offline)
    except HFValidationError as err:
        raise HubResolutionError(
            f"{what} '{repo_id}' is neither an existing local path nor a valid hub id (org/name); "
            f"check the spelling or pass a local folder") from err
    except GatedRepoError as err:
        raise HubResolutionError(
            f"{what} '{repo_id}' is a gated repository on the Hugging Face hub; accept its terms on "
            f"huggingface.co and log in (`hf auth login`), or pass a local folder") from err
    except RevisionNotFoundError as err:
        raise HubResolutionError(f"{what} '{repo_id}' has no revision '{revision}' on the Hugging Face hub; "
                                 f"pass an existing revision or a local folder") from err
    except RepositoryNotFoundError as err:
        raise HubResolutionError(
            f"{what} '{repo_id}' is neither a local path nor a model on the Hugging Face hub "
            f"(or it is private: log in with `hf auth login`); check the name or pass a local "
            f"folder") from err
    except LocalEntryNotFoundError as err:
        if offline:
            raise HubResolutionError(
                f"{what} '{repo_id}' is not a local path and not in the hub cache {cache}, and HF_HUB_OFFLINE=1 "
                f"forbids downloading it; set HF_HUB_OFFLINE=0, or fetch it once with `hf download "
                f"{repo_id}` (same HF_HOME), or pass a local folder") from err
        raise HubResolutionError(
            f"{what} '{repo_id}' is not a local path, not in the hub cache {cache}, and the Hugging Face hub "
            f"could not be reached ({type(err.__cause__ or err).__name__}); connect, or fetch it with "
            f"`hf download {repo_id}` where there is a connection, or pass a local folder") from err
    except OSError as err:  # disk full, permissions, proxies
        raise HubResolutionError(f"{what} '{repo_id}': fetching from the Hugging Face hub failed "
                                 f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                                 f"pass a local folder") from err


def _has_weights(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in _WEIGHT_NAMES)


def resolve_model_path(name_or_path: str | os.PathLike, revision: str | None = None) -> str:
    """A local file or folder for ``name_or_path``.

    An existing path is returned unchanged (``~`` expanded). Anything else is a hub id: the folder of
    its snapshot (config, generation config, weights, tokenizer files) is returned. Safetensors are
    preferred; ``pytorch_model.bin`` is fetched only for repositories without them."""
    name = os.fspath(name_or_path)
    expanded = os.path.expanduser(name)
    if os.path.exists(expanded):
        return expanded
    if not name.strip():
        raise HubResolutionError("model path is empty; pass a checkpoint, a folder or a hub id such as facebook/bart-large")
    if _looks_like_path(name):
        raise HubResolutionError(f"model '{name}' does not exist (no such file or folder); check the path")
    folder = _download(name, "model", CONFIG_FILES + SAFE_WEIGHTS + TOKENIZER_FILES, revision)
    if not _has_weights(folder):
        folder = _download(name, "model", CONFIG_FILES + SAFE_WEIGHTS + BIN_WEIGHTS + TOKENIZER_FILES, revision)
    if not _has_weights(folder):
        raise HubResolutionError(
            f"model '{name}' resolved to {folder}, which holds no weights (model.safetensors, pytorch_model.bin); "
            f"offline, fetch the whole repository once with `hf download {name}`")
    return folder


def has_tokenizer_files(folder: str | os.PathLike | None) -> bool:
    """True when ``folder`` is a folder holding a BPE tokenizer (tokenizer.json, or vocab.json + merges.txt)."""
    if not folder or not os.path.isdir(folder):
        return False
    return any(all(os.path.isfile(os.path.join(folder, n)) for n in names) for names in _TOKENIZER_SETS)


def hub_id_of(folder: str | os.PathLike | None) -> str | None:
    """The hub id a snapshot folder of the hub cache belongs to (``.../models--org--name/snapshots/<commit>``
    -> ``org/name``); None for any other folder."""
    if not folder:
        return None
    snapshots = os.path.dirname(os.path.normpath(os.fspath(folder)))
    repo = os.path.basename(os.path.dirname(snapshots))
    if os.path.basename(snapshots) != "snapshots" or not repo.startswith("models--"):
        return None
    return repo[len("models--"):].replace("--", "/")


def resolve_tokenizer_path(name_or_path: str | os.PathLike | None, model_path: str | os.PathLike | None = None,
                           default: str | None = None, revision: str | None = None) -> str:
    """A local tokenizer folder.

    ``name_or_path`` given: a local folder as is, else a hub id (only tokenizer files are fetched).
    Not given (None or ""): the tokenizer stored with the model when ``model_path`` (already resolved,
    see :func:`resolve_model_path`) is a folder holding tokenizer files, else ``default``."""
    if name_or_path is None or not os.fspath(name_or_path).strip():
        if model_path is not None and has_tokenizer_files(os.fspath(model_path)):
            return os.fspath(model_path)
        if default is None:
            raise HubResolutionError(
                f"no tokenizer given and {model_path or 'the model'} holds no tokenizer files; pass --tokenizer "
                f"(a folder, or a hub id such as facebook/bart-large)")
        name_or_path = default
    name = os.fspath(name_or_path)
    expanded = os.path.expanduser(name)
    if os.path.isfile(expanded):  # a tokenizer is a folder: a file of one (tokenizer.json) names its folder
        folder = os.path.dirname(expanded) or "."
        if os.path.basename(expanded) in TOKENIZER_FILES and has_tokenizer_files(folder):
            print(f"note: tokenizer '{name}' is a file of the tokenizer folder {folder}: using that folder",
                  file=sys.stderr, flush=True)
            return folder
        raise HubResolutionError(
            f"tokenizer '{name}' is a file; a tokenizer is a folder holding tokenizer.json (or vocab.json + "
            f"merges.txt): pass that folder")
    if os.path.exists(expanded):
        return expanded
    if _looks_like_path(name):
        filename = os.path.basename(os.path.normpath(name))
        folder = os.path.dirname(os.path.normpath(name)) if filename in TOKENIZER_FILES else name
        raise HubResolutionError(
            f"tokenizer '{name}' does not exist (no such {'file' if folder != name else 'folder'}); a tokenizer is "
            f"a folder: build one offline with `python -m bart.tokenization.build_tokenizer {folder or '.'}` and "
            f"pass --tokenizer {folder or '.'}, or pass a hub id")
    folder = _download(name, "tokenizer", TOKENIZER_FILES + ["config.json"], revision)
    if not has_tokenizer_files(folder):
        raise HubResolutionError(
            f"tokenizer '{name}' resolved to {folder}, which holds no tokenizer files (tokenizer.json, or "
            f"vocab.json + merges.txt); pass another tokenizer")
    return folder


__all__ = ["HubResolutionError", "looks_like_hub_id", "resolve_model_path", "resolve_tokenizer_path", "has_tokenizer_files", "hub_id_of",
           "is_offline", "cache_dir"]


# -- publishing ---------------------------------------------------------------------------------------

class HubPushError(OSError):
    """A folder that cannot be pushed to the hub (no token, offline, a refused or failed upload); one line."""


def _push_target(repo_id: str) -> str:
    return f"--push_to_hub {repo_id}"


def check_can_push(repo_id: str) -> None:
    """Before anything is written: a valid repository id, online, and a token (``HF_TOKEN`` or a stored
    login). Raises :class:`HubPushError` saying what to do."""
    from huggingface_hub import get_token
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise HubPushError(f"{_push_target(repo_id)}: not a hub repository id ({' '.join(str(err).split())}); "
                           f"give OWNER/NAME") from None
    if is_offline():
        raise HubPushError(f"{_push_target(repo_id)}: the hub is switched off here (HF_HUB_OFFLINE / "
                           f"TRANSFORMERS_OFFLINE); unset it to push, or drop --push_to_hub")
    if not get_token():
        raise HubPushError(f"{_push_target(repo_id)} needs a Hugging Face token with write access: set HF_TOKEN or "
                           f"run `hf auth login`")


# the HTTP libraries huggingface_hub has used (requests and urllib3: 0.x; httpx: 1.x; httpx2: 2.x), by the top of
# their module names, and their base classes of a failed connection (not a refused request: that is an HTTP status)
_HTTP_LIBRARIES = ("requests", "urllib3", "httpx", "httpcore")
_TRANSPORT_CLASSES = {"TransportError", "NetworkError", "TimeoutException", "ConnectError", "ConnectTimeout",
                      "ConnectionError", "Timeout", "ProxyError", "NewConnectionError", "MaxRetryError"}


def _unreachable(err: BaseException) -> bool:
    """Whether ``err`` (or an exception it was raised from) is a failed connection: the operating system's
    (refused, reset, timed out, no such host) or a transport error of whichever HTTP library huggingface_hub runs
    on, recognised by its class's name and module rather than imported (httpx under 1.x, httpx2 under 2.x)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (ConnectionError, TimeoutError, socket.gaierror, socket.herror)):
            return True
        for cls in type(err).__mro__:
            top = cls.__module__.split(".")[0]
            if cls.__name__ in _TRANSPORT_CLASSES and (top in _HTTP_LIBRARIES or top.rstrip("0123456789") in _HTTP_LIBRARIES):
                return True
        err = err.__cause__ or err.__context__
    return False


def push_folder(folder: str, repo_id: str, private: bool = False) -> str:
    """Upload every file of ``folder`` to the model repository ``repo_id`` (made if missing: private with
    ``private``, else as the hub's default; an existing one keeps its visibility) in one commit; returns the repository's URL. A refused
    request (wrong or read-only token, someone else's repository) or an unreachable hub is one
    :class:`HubPushError` naming the repository and the fix."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi()  # the endpoint (HF_ENDPOINT) and token as huggingface_hub reads them now
    try:
        # private=None without --private: the hub's default (public, unless the organization's default is private)
        url = api.create_repo(repo_id, private=True if private else None, exist_ok=True, repo_type="model")
        api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type="model",
                          commit_message="Upload BART export (python -m bart.export)")
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        said = getattr(err, "server_message", None) or str(err).splitlines()[0]
        hint = (" (check that the token has write access to it: HF_TOKEN or `hf auth login`)"
                if status in (401, 403) else "")
        raise HubPushError(f"the hub refused {_push_target(repo_id)} (HTTP {status}: {' '.join(str(said).split())})"
                           f"{hint}; the export is in {folder}") from None
    except Exception as err:  # a failed connection or the disk is the user's to fix; anything else is raised
        said = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
        if _unreachable(err):
            upload = shlex.join(["hf", "upload", repo_id, folder, *["--private"] * private])
            raise HubPushError(f"{_push_target(repo_id)}: cannot reach the hub at {api.endpoint} ({said}); the export "
                               f"is in {folder}: once connected (or with HF_ENDPOINT corrected), upload it with "
                               f"`{upload}`") from None
        if isinstance(err, OSError):  # reading the export, a full disk
            raise HubPushError(f"{_push_target(repo_id)} failed ({said}); the export is in {folder}") from None
        raise
    return str(url)
