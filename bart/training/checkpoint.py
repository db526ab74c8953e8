"""Training checkpoints: atomic writes, safe reads, RNG state, newest-K retention.

A checkpoint is written to a temporary name in the same folder, flushed to disk and renamed into
place, so a process killed mid-write never leaves a half-written ``*.ckpt``. Reads use
``torch.load(weights_only=True)``: loading a file never runs code from it. The step a checkpoint
belongs to is stored inside it; the file name only orders the files.
"""
from __future__ import annotations

import os
import random
import re
import tempfile

import numpy as np
import torch

from bart.modeling.weights import read_checkpoint_file

_STEP_FILE = re.compile(r"^_step(\d+)\.ckpt$")


def save_checkpoint(path: str, state: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".partial", dir=folder)
    try:
        with os.fdopen(handle, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load_checkpoint(path: str, map_location="cpu") -> dict:
    return read_checkpoint_file(path, map_location)


def list_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of the complete ``_step{N}.ckpt`` files in ``output_dir``, oldest first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(m.group(1)), os.path.join(output_dir, name))
             for name in os.listdir(output_dir) if (m := _STEP_FILE.match(name))]
    return sorted(found)


def latest_checkpoint(output_dir: str) -> str | None:
    found = list_checkpoints(output_dir)
    return found[-1][1] if found else None


def prune_checkpoints(output_dir: str, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` step checkpoints (keep <= 0 keeps everything)."""
    if keep <= 0:
        return []
    removed = [path for _, path in list_checkpoints(output_dir)[:-keep]]
    for path in removed:
        os.remove(path)
    return removed


def capture_rng_state() -> dict:
    """Python, numpy, torch CPU and CUDA generator states as tensors and plain types
    (loadable with ``weights_only=True``)."""
    version, keys, pos, has_gauss, cached = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state = {
        "python": [py_version, torch.tensor(py_state, dtype=torch.int64), py_gauss],
        "numpy": [version, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    py_version, py_state, py_gauss = state["python"]
    random.setstate((py_version, tuple(int(x) for x in py_state.tolist()), py_gauss))
    version, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((version, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
