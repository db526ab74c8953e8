"""Writing and reading torch files safely; nothing here knows what a checkpoint holds.

``atomic_save`` writes to a temporary name in the same folder, flushes it to disk and renames it
into place, so a process killed mid-write never leaves a half-written file under the real name.
``safe_load`` is ``torch.load(weights_only=True)`` (loading never runs code from the file) with
errors that name the file.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
import zipfile

import torch

from utils.errors import UserError
from utils.file_modes import new_file_mode


class CheckpointError(UserError):
    """A file that cannot be read or loaded as asked; the message names the file and why."""


def _safe_globals() -> list:
    """Types a checkpoint may hold besides tensors that loading may rebuild without running code: numpy
    scalars, dtypes and arrays (metrics of the best-validation checkpoint, numpy RNG state) and
    ``argparse.Namespace`` (a fairseq checkpoint's ``args``). Nothing here executes code on load."""
    import argparse

    import numpy as np

    names = []
    core = getattr(np, "_core", None) or np.core
    scalar, reconstruct = core.multiarray.scalar, core.multiarray._reconstruct
    for obj in (scalar, reconstruct):
        names.append(obj)
        for module in ("numpy.core.multiarray", "numpy._core.multiarray"):  # files written under numpy 1.x and 2.x
            names.append((obj, f"{module}.{obj.__name__}"))
    names += [np.ndarray, np.dtype, argparse.Namespace]
    for code in "?bBhHiIlLqQefdgFDGUSV":
        dtype_class = type(np.dtype(code))
        if dtype_class is not np.dtype:  # numpy >= 1.25: numpy.dtypes.Float64DType and friends
            names.append(dtype_class)
    return names


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__


def safe_load(path: str, map_location="cpu", mmap: bool = False) -> dict:
    """``torch.load(weights_only=True)`` (plus numpy scalars and ``argparse.Namespace``, see
    :func:`_safe_globals`) with errors that name the file and say what is wrong with it. ``mmap``: the
    tensors stay on disk until used (zip-format files only), to read what a checkpoint says cheaply."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder; expected a checkpoint file")
    if os.path.getsize(path) == 0:
        raise CheckpointError(f"{path} is empty (0 bytes): an interrupted copy or save; copy or save it again")
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            data = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        raise CheckpointError(_refused_message(path, err)) from err
    except Exception as err:  # noqa: BLE001 - arbitrary bytes fail anywhere in the unpickler (IndexError, ...)
        raise CheckpointError(_unreadable_message(path, err)) from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a {type(data).__name__}, not a state dict or a checkpoint dict")
    return data


def _refused_message(path: str, err: BaseException) -> str:
    text = str(err)
    if "Weights only load failed" not in text and "Unsupported" not in text:
        return _unreadable_message(path, err)
    try:
        names = sorted(set(torch.serialization.get_unsafe_globals_in_checkpoint(path)))
    except Exception:  # noqa: BLE001 - the message below still names the file
        names = []
    if not names:  # no foreign class: the bytes themselves are not a torch pickle
        return _unreadable_message(path, err)
    shown = ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
    if any(n.startswith(("omegaconf.", "fairseq.")) for n in names):
        return (f"{path} is a fairseq checkpoint holding fairseq/omegaconf objects ({shown}) that safe loading "
                f"refuses; where fairseq is installed, keep only the weights and the model arguments: "
                f"ck = torch.load(PATH, weights_only=False); torch.save({{'model': ck['model'], 'args': vars(ck['args']) "
                f"if ck.get('args') else None, 'cfg': {{'model': dict(vars(ck['cfg']['model'])) if ck.get('cfg') else None}}}}, "
                f"'model_weights.pt')")
    return (f"{path} is not a readable checkpoint: it holds Python objects that safe loading "
            f"(torch.load weights_only=True) refuses to rebuild"
            f"{' (' + shown + ')' if shown else ''}; it is not a checkpoint written by this project or by "
            f"transformers. Load it where you trust it and save only its state dict: "
            f"torch.save(torch.load(PATH, weights_only=False)['model'], 'weights.ckpt')")


def _unreadable_message(path: str, err: BaseException) -> str:
    text = first_line(err).split(". ")[0]
    if "Weights only load failed" in text:
        text = "the bytes are not a pickle torch can read"
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"PK") or "zip archive" in text or "central directory" in text or isinstance(
            err, (EOFError, zipfile.BadZipFile)):
        return (f"{path} is not a readable checkpoint: a damaged torch zip archive of {size} bytes "
                f"({type(err).__name__}: {text}); it looks truncated or corrupted (an interrupted copy or save): "
                f"copy or save it again")
    if head[:1] == b"\x80":  # a legacy (pre-1.6, non-zip) torch.save file or a plain pickle
        return (f"{path} is not a readable checkpoint: a legacy pickle of {size} bytes that could not be read "
                f"({type(err).__name__}: {text}); it may be truncated or written by another program")
    return (f"{path} is not a readable checkpoint: its {size} bytes are not a torch checkpoint "
            f"({type(err).__name__}: {text}); expected a file written by torch.save (.ckpt, .pt, .bin) or a folder "
            f"with model.safetensors")



def atomic_write_text(path: str, text: str) -> None:
    """A small text file (JSON, a log) written under a temporary name and renamed into place, so a
    reader never sees half of it."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def atomic_copy(source: str, path: str) -> None:
    """A copy of the file ``source`` (symlinks followed) written under a temporary name and renamed
    into place, with the permissions any new file gets here (as :func:`atomic_write_text`'s)."""
    tmp = path + ".tmp"
    shutil.copyfile(source, tmp)
    os.replace(tmp, path)


def remove_stale_partials(folder: str) -> list[tuple[str, int]]:
    """Delete the temporary files of writes that were killed midway (``.tmp-*.partial``, left by a
    process that died inside :func:`atomic_save`); (path, bytes) of each. Call it only where no other
    process of the same run is writing (rank 0, before training starts)."""
    removed = []
    if not os.path.isdir(folder):
        return removed
    for name in os.listdir(folder):
        if name.startswith(PARTIAL_PREFIX) and name.endswith(PARTIAL_SUFFIX):
            path = os.path.join(folder, name)
            try:
                size = os.path.getsize(path)
                os.remove(path)
            except OSError:
                continue
            removed.append((path, size))
    return removed


def read_json_object(path: str) -> dict:
    """A JSON file holding one object (a config.json, an index of shards), with errors naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is not valid JSON ({err})") from err
    if not isinstance(values, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got {type(values).__name__}")
    return values


PARTIAL_PREFIX, PARTIAL_SUFFIX = ".tmp-", ".partial"


def atomic_save(path: str, obj) -> None:
    """``torch.save`` to a temporary file in the same folder, fsync, rename into place. The file gets
    the permissions any new file gets here (0666 less the umask: teammates on shared storage can read
    it where the umask allows), not mkstemp's private 0600."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=PARTIAL_PREFIX, suffix=PARTIAL_SUFFIX, dir=folder)
    try:
        os.fchmod(handle, new_file_mode())
        with os.fdopen(handle, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
