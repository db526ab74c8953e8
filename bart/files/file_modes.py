"""Permissions of what the project writes: the mode any new file or folder gets here (0666 / 0777 less
the umask: 0644 / 0755 under umask 022), never the private 0600 / 0700 that ``tempfile.mkstemp`` /
``mkdtemp`` and some writers (safetensors' ``save_file``) use. A tokenizer folder built as root inside
the image, or a checkpoint on shared storage, stays readable by the users the umask lets read it."""
from __future__ import annotations

import os
import tempfile


def umask() -> int:
    """The process's umask, read without changing it where Linux tells it (``/proc/self/status``,
    Linux >= 4.7); else set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    return 0o666 & ~umask()


def new_folder_mode() -> int:
    return 0o777 & ~umask()


def give_new_file_mode(path: str) -> None:
    """``path`` gets the mode a file created here with ``open(path, "w")`` would have."""
    os.chmod(path, new_file_mode())


def staging_folder(parent: str, prefix: str) -> str:
    """A fresh folder in ``parent`` (``tempfile.mkdtemp``: a unique name) with a new folder's mode, for
    contents that are renamed into place when complete."""
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(path, new_folder_mode())
    return path
