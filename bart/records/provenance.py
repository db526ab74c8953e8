"""Where a run came from: the code (git commit, dirty or not), the software (Python, torch, CUDA, cuDNN,
NCCL, the libraries), the hardware (GPU names and count), the container and the full command line. Nothing
recorded carries a secret (:mod:`bart.records.redact`): the remote's URL without user info or query, the interpreter
by its name, the values of secret-looking flags and environment variables masked.

    record = collect(repo_dir)               # one start of a run, as a plain JSON dict
    append_start(folder, record)             # folder/git_log.json: every start of the run, in order

An installed copy of a package has no git checkout: ``package_origin`` reads the version and the commit the copy was
built from (``_build.json`` in the package, written at build time), and ``collect(..., package=...)`` records that
commit as the run's code. A checkout's version is the one a build of it would get now (setuptools-scm,
:func:`bart.records.versioning.checkout_version`), its commit its git state. Importing this module costs no torch
(``bart.__version__`` reads :func:`package_origin`).

``git_log.json`` keeps the reference recipe's keys (``repo_id``, ``repo_sha``, ``repo_branch``,
``hostname``: the first start's, never rewritten) and adds ``starts``, one full record per start: a
resumed or restarted run appends its record and keeps the earlier ones. Nothing here knows what runs.
"""
from __future__ import annotations

import datetime
import json
import os
import shlex
import socket
import subprocess
import sys
from importlib import metadata

from bart.records.redact import clean_url, mask_command, mask_env
from bart.records.versioning import checkout_version

FILE_NAME = "git_log.json"
BUILD_FILE = "_build.json"  # in a built package's folder: {"version", "built", "git": {"commit", ...}}
# the libraries a run's numbers depend on (importlib.metadata: read without importing them)
LIBRARIES = ("torch", "numpy", "transformers", "tokenizers", "huggingface_hub", "safetensors", "lddl", "dllogger",
             "apex", "rouge_score", "nltk", "sacrebleu", "pyarrow", "ctranslate2", "tensorboard", "wandb")
# what NGC containers set: the container release (e.g. 24.09), the torch build inside it, the build id
CONTAINER_ENV = ("NVIDIA_PYTORCH_VERSION", "PYTORCH_VERSION", "NVIDIA_BUILD_ID", "NVIDIA_PRODUCT_NAME",
                 "CUDA_VERSION", "CUDNN_VERSION", "NCCL_VERSION")
# the launcher's view of the job
LAUNCH_ENV = ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "NNODES", "SLURM_JOB_ID", "SLURM_NNODES", "CUDA_VISIBLE_DEVICES")


def _git(repo_dir: str, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", repo_dir, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.rstrip("\n") if out.returncode == 0 else None


def git_state(repo_dir: str) -> dict:
    """The checkout's commit, branch, whether tracked or new files differ from it (``dirty``, with the
    first changed paths), and its remote (without user info or query: :func:`bart.records.redact.clean_url`);
    ``commit`` None outside a git checkout (a copied tree)."""
    commit = _git(repo_dir, "rev-parse", "HEAD")
    if commit is None:
        return {"repo": os.path.abspath(repo_dir), "commit": None, "branch": None, "dirty": None, "changed": []}
    status = _git(repo_dir, "status", "--porcelain") or ""
    changed = [line[3:] for line in status.splitlines() if line.strip()]  # "XY path"
    return {"repo": _git(repo_dir, "rev-parse", "--show-toplevel") or os.path.abspath(repo_dir), "commit": commit,
            "branch": _git(repo_dir, "rev-parse", "--abbrev-ref", "HEAD"), "dirty": bool(changed),
            "changed": changed[:50], "remote": clean_url(_git(repo_dir, "remote", "get-url", "origin"))}


def _installs(dist: metadata.Distribution, package_dir: str) -> bool:
    """Whether ``dist`` is the installed copy whose package folder is ``package_dir``: its files there (a built
    install), or an editable install of the folder above it (direct_url.json)."""
    package_dir = os.path.realpath(package_dir)
    init = dist.locate_file(os.path.join(os.path.basename(package_dir), "__init__.py"))
    if os.path.isfile(init) and os.path.realpath(init) == os.path.join(package_dir, "__init__.py"):
        return True
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    url = direct.get("url", "")
    return bool(direct.get("dir_info", {}).get("editable")) and url.startswith("file://") and \
        os.path.realpath(url[len("file://"):]) == os.path.dirname(package_dir)


def package_origin(distribution: str, package_dir: str) -> dict:
    """The code as a package: its ``version`` (a built copy's from its build, a checkout's or editable install's
    the one a build of the checkout would get now, else the editable install's; None where none is known),
    ``installed`` (``built``: a wheel or ``pip install .``, ``editable``, or ``checkout``) and, for a built copy,
    ``built`` (when) and ``git``: the commit it was built from (``BUILD_FILE``)."""
    build_path = os.path.join(package_dir, BUILD_FILE)
    build = None
    if os.path.isfile(build_path):
        with open(build_path, encoding="utf-8") as f:
            build = json.load(f)
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        dist = None
    installs = dist is not None and _installs(dist, package_dir)
    if build is not None:
        version = build.get("version") or (dist.version if installs else None)
    else:
        version = checkout_version(os.path.dirname(os.path.abspath(package_dir))) or (dist.version if installs else None)
    installed = "built" if build is not None else "editable" if installs else "checkout"
    return {"distribution": distribution, "version": version, "installed": installed,
            "built": None if build is None else build.get("built"), "git": None if build is None else build.get("git")}


def library_versions(names=LIBRARIES) -> dict:
    """Installed versions of ``names`` (None: not installed)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def torch_build() -> dict:
    """torch's own version and the CUDA, cuDNN and NCCL it runs with (None where it has none)."""
    try:
        import torch
    except ImportError:
        return {"torch": None}
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": None, "nccl": None,
            "cuda_available": torch.cuda.is_available()}
    try:
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except RuntimeError:
        pass
    try:
        nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
        info["nccl"] = ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else nccl
    except (RuntimeError, AttributeError):
        pass
    return info


def gpus() -> dict:
    """The GPUs this process sees: count, names (in device order) and compute capabilities."""
    try:
        import torch
    except ImportError:
        return {"count": 0, "names": []}
    if not torch.cuda.is_available():
        return {"count": 0, "names": []}
    count = torch.cuda.device_count()
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    capability = [".".join(str(v) for v in torch.cuda.get_device_capability(i)) for i in range(count)]
    return {"count": count, "names": names, "capability": capability}


def collect(repo_dir: str, argv: list[str] | None = None, extra: dict | None = None,
            package: dict | None = None) -> dict:
    """One start's record: time, host, command line (the interpreter's name and every argument, as typed and as a
    shell-quoted line; the values of secret-looking flags masked, :func:`bart.records.redact.mask_command`), working
    folder, git state of ``repo_dir`` (for a built ``package``, see :func:`package_origin`: the commit it was built
    from, ``repo`` None), the package, versions, GPUs, container; ``extra`` (the caller's own facts, e.g. the world
    size) merged in. No URL keeps its user info or query, no secret-looking environment variable its value."""
    built = (package or {}).get("git")
    git = {"repo": None, **built, "from": "built package"} if built else git_state(repo_dir)
    if git.get("remote"):  # a package built before remotes were cleaned
        git["remote"] = clean_url(git["remote"])
    argv = list(sys.argv if argv is None else argv)
    command = mask_command([os.path.basename(sys.executable), *argv])
    record = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "command": command,
        "command_line": shlex.join(command),
        "cwd": os.getcwd(),
        "git": git,
        "package": None if package is None else {k: v for k, v in package.items() if k != "git"},
        "python": sys.version.split()[0],
        **{"torch_build": torch_build()},
        "libraries": library_versions(),
        "gpus": gpus(),
        "container": mask_env({name: os.environ.get(name) for name in CONTAINER_ENV}),
        "launch": mask_env({name: os.environ[name] for name in LAUNCH_ENV if os.environ.get(name) is not None}),
    }
    record.update(extra or {})
    return record


def read_starts(folder: str) -> dict:
    """The folder's ``git_log.json`` as a dict (``starts`` always a list; {} when there is none). A file
    written by the reference recipe (its four keys, no ``starts``) is read as such."""
    path = os.path.join(folder, FILE_NAME)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    data.setdefault("starts", [])
    return data


def append_start(folder: str, record: dict) -> str:
    """Add ``record`` to ``folder``/git_log.json (created with the reference's keys from this first start);
    earlier starts are kept as they were. A file that cannot be read is moved aside (never overwritten)
    and a new one started. The write is atomic. Returns the path."""
    # (torch comes with it: imported here, where a record is written, not by bart.__version__)
    from bart.files.checkpoint_io import atomic_write_text

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, FILE_NAME)
    try:
        data = read_starts(folder)
    except (ValueError, OSError) as err:
        aside = f"{path}.unreadable-{datetime.datetime.now().strftime('%Y%m%d%H%M%S')}"
        os.replace(path, aside)
        print(f"note: {path} could not be read ({err}); kept as {aside}, a new one started", file=sys.stderr)
        data = {}
    if not data:
        git = record.get("git", {})
        data = {"repo_id": git.get("repo"), "repo_sha": git.get("commit"), "repo_branch": git.get("branch"),
                "hostname": record.get("hostname"), "starts": []}
    data["starts"].append(record)
    atomic_write_text(path, json.dumps(data, indent=4, default=str) + "\n")
    return path


__all__ = ["collect", "append_start", "read_starts", "git_state", "package_origin", "library_versions", "torch_build",
           "gpus", "FILE_NAME", "BUILD_FILE"]
