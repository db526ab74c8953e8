"""Writing and reading torch files safely; nothing here knows what a checkpoint holds.

``atomic_save`` writes to a temporary name in the same folder, flushes it to disk and renames it
into place, so a process killed mid-write never leaves a half-written file under the real name.
``safe_load`` is ``torch.load(weights_only=True)`` (loading never runs code from the file) with
errors that name the file.
"""
from __future__ import annotations

import os
import pickle
import tempfile
import zipfile

import torch


class CheckpointError(ValueError):
    """A file that cannot be read or loaded as asked; the message names the file and why."""


def atomic_save(path: str, obj) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".partial", dir=folder)
    try:
        with os.fdopen(handle, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def safe_load(path: str, map_location="cpu") -> dict:
    """A dict saved with torch.save, read with ``weights_only=True``."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder; expected a checkpoint file")
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({type(err).__name__}: {str(err).splitlines()[0][:200]}); "
            f"it may be truncated (an interrupted copy or save) or not a torch checkpoint at all") from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a {type(data).__name__}, not a state dict or a checkpoint dict")
    return data
