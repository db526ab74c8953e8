"""Writing and reading torch files safely; nothing here knows what a checkpoint holds.

``atomic_save`` writes to a temporary name in the same folder, flushes it to disk and renames it
into place, so a process killed mid-write never leaves a half-written file under the real name.
``safe_load`` is ``torch.load(weights_only=True)`` (loading never runs code from the file) with
errors that name the file.

A failed write (a full disk or quota, a read-only file system, found by ``storage_errno`` whatever layer raised it;
Ctrl-C midway) removes its partial file and becomes one line: :class:`StorageError` (the folder, its free space,
the space needed) or :class:`WriteInterrupted` (the newest complete file).
"""
from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import tempfile
import zipfile

import torch

from bart.errors import RunStopped, UserError
from bart.files.file_modes import new_file_mode


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
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as err:
        failure = failed_write(path, tmp, err, needed=len(text.encode("utf-8")))
        if failure is None:
            raise
        raise failure from err


def atomic_copy(source: str, path: str) -> None:
    """A copy of the file ``source`` (symlinks followed) written under a temporary name and renamed
    into place, with the permissions any new file gets here (as :func:`atomic_write_text`'s)."""
    tmp = path + ".tmp"
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, path)
    except BaseException as err:
        failure = failed_write(path, tmp, err, needed=os.path.getsize(source) if os.path.isfile(source) else 0)
        if failure is None:
            raise
        raise failure from err


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
    except BaseException as err:  # a full disk, a second Ctrl-C: the partial file goes, one line says why
        failure = failed_write(path, tmp, err, needed=tensor_bytes(obj))
        if failure is None:
            raise
        raise failure from err


# -- writes that fail: a full disk or quota, a read-only file system, a Ctrl-C midway -------------------------
# Whatever layer raises it (a file's write, torch's zip writer, which raises its own RuntimeError "unexpected
# pos" with the OSError only as its context, safetensors' Rust writer, which puts the errno in its text), the
# run ends in one line naming the folder, the space free there and the space needed, with the partial file
# removed: nothing half-written is ever left under the real name.

STORAGE_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                  errno.EROFS: "read-only file system"}
_STORAGE_TEXTS = (("no space left on device", errno.ENOSPC), ("storagefull", errno.ENOSPC),
                  ("disk quota exceeded", errno.EDQUOT), ("quota exceeded", errno.EDQUOT),
                  ("read-only file system", errno.EROFS))
# torch's zip writer: a write that fell short, the errno hidden (a path given to torch.save, not a file object)
_SHORT_WRITE_TEXTS = ("unexpected pos", "failed writing file", "file write failed")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process ended by Ctrl-C


class StorageError(UserError):
    """A write refused by the machine's storage (full, over quota, read-only); the message names the
    folder, the free space there and the space needed. The machine's state, not a bug: exit code 2."""


class WriteInterrupted(RunStopped):
    """Ctrl-C (a second one, after the first asked for a checkpoint) while a file was being written: the
    partial file was removed; the message names the file not written and the newest complete one."""
    exit_code = EXIT_INTERRUPTED


def _chain(err: BaseException):
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def storage_errno(err: BaseException, folder: str | None = None, needed: int = 0) -> int | None:
    """ENOSPC, EDQUOT or EROFS when ``err`` (or an error it was raised from) is a write the storage refused,
    else None. Also when only the text says so (safetensors' ``IoError(Os { code: 28 ...``), and for
    torch's zip writer's short write (no errno) when ``folder`` has less free space than ``needed`` bytes."""
    texts = []
    for e in _chain(err):
        if isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
            return e.errno
        texts.append(str(e).lower())
    text = " ".join(texts)
    for words, code in _STORAGE_TEXTS:
        if words in text:
            return code
    for code in STORAGE_ERRNOS:
        if f"code: {code}," in text or f"errno {code}]" in text:
            return code
    if folder and needed and any(words in text for words in _SHORT_WRITE_TEXTS):
        free = free_bytes(folder)
        if free is not None and free < needed:
            return errno.ENOSPC
    return None


def interrupted(err: BaseException) -> bool:
    """Whether a Ctrl-C (KeyboardInterrupt) is what ``err`` was raised from."""
    return any(isinstance(e, KeyboardInterrupt) for e in _chain(err))


def free_bytes(folder: str) -> int | None:
    """Bytes free to this user in ``folder`` (its nearest existing parent), or None when unknown."""
    while folder and not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    try:
        return shutil.disk_usage(folder or ".").free
    except OSError:
        return None


def human_bytes(size: float | None) -> str:
    if size is None:
        return "an unknown amount"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024


def tensor_bytes(obj) -> int:
    """Bytes of the tensors in ``obj`` (dicts, lists, tuples walked; a storage shared by several tensors
    counted once): about the size ``torch.save`` writes."""
    seen, total, stack = set(), 0, [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            try:
                storage = item.untyped_storage()
                key = (storage.data_ptr(), storage.nbytes())
                if key not in seen:
                    seen.add(key)
                    total += storage.nbytes()
            except (RuntimeError, NotImplementedError):  # a tensor without storage (meta, some subclasses)
                total += item.numel() * item.element_size()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


def newest_complete(folder: str, like: str) -> str | None:
    """The newest file of ``folder`` with the extension of ``like``, not a partial one (``like`` itself
    when it is there: a failed atomic write leaves the previous version whole)."""
    ext = os.path.splitext(like)[1]
    try:
        names = [n for n in os.listdir(folder) if n.endswith(ext)
                 and not n.startswith(PARTIAL_PREFIX) and not n.endswith(".tmp")]
    except OSError:
        return None
    paths = [os.path.join(folder, n) for n in names if os.path.isfile(os.path.join(folder, n))]
    return max(paths, key=os.path.getmtime) if paths else None


def storage_message(code: int, folder: str | None, what: str | None = None, needed: int = 0,
                    written: int = 0, detail: str = "") -> str:
    """One line: what could not be written, why, the folder, its free space, the space needed, ``detail``
    (what became of the file), the fix."""
    where = folder or "the output folder"
    free = free_bytes(folder) if folder else None
    head = f"could not write {what}: " if what else ""
    detail = f"; {detail}" if detail else ""
    if code == errno.EROFS:
        return f"{head}{where} is on a read-only file system{detail}. Write the run's output to a writable folder"
    need = max(needed, written)
    needs = (f"; about {human_bytes(need)} needed for this file" if need else "") + (
        f", {human_bytes(written)} of it written when the write failed" if written else "")
    if code == errno.EDQUOT:
        return (f"{head}disk quota exceeded in {where} ({human_bytes(free)} free on its device, your quota used "
                f"up{needs}){detail}. Free space in your quota (quota -s shows it) or write to another folder")
    return (f"{head}no space left on device in {where} ({human_bytes(free)} free there{needs}){detail}. Free "
            f"space there or write to another folder")


def failed_write(path: str, tmp: str, err: BaseException, needed: int = 0) -> BaseException | None:
    """After a write of ``path`` through the temporary ``tmp`` failed with ``err``: the partial file removed,
    and the one-line error to raise instead (:class:`StorageError`, :class:`WriteInterrupted`), or None
    when ``err`` is another failure (re-raise it as it is)."""
    written = 0
    if os.path.exists(tmp):
        try:
            written = os.path.getsize(tmp)
            os.remove(tmp)
        except OSError:
            pass
        partial_was_there = True
    else:
        partial_was_there = False
    folder = os.path.dirname(os.path.abspath(path))
    newest = newest_complete(folder, path)
    kept = (f"the newest complete {os.path.splitext(path)[1] or 'file'} there is "
            f"{os.path.basename(newest)}" if newest else f"no complete {os.path.splitext(path)[1]} file is there")
    if interrupted(err):
        if not partial_was_there and os.path.exists(path):
            return None  # the rename had happened: the file is whole; the interrupt goes on as it is
        return WriteInterrupted(f"interrupted (Ctrl-C) while writing {path}: this write was stopped and its "
                                f"partial file removed (nothing half-written is left); {kept} in {folder}")
    if newest is not None and os.path.splitext(path)[1]:  # the last file of its kind: about the size of this one
        try:
            needed = max(needed, os.path.getsize(newest))
        except OSError:
            pass
    code = storage_errno(err, folder, needed)
    if code is None:
        return None
    return StorageError(storage_message(code, folder, os.path.basename(path), needed, written, detail=(
        f"its partial file was removed, nothing half-written is left under its name; {kept}")))
