"""Memory a run asked for and did not get: CPU ("DefaultCPUAllocator: can't allocate memory"), CUDA
(``torch.OutOfMemoryError``) or Python's ``MemoryError``, described in one line: the size asked for (read
from the allocator's message; "a size Python does not report" where it gives none) and the memory there is.

On the CPU the memory there is means the limit that applies to this process, the smallest of
(``LIMIT_READERS``, one reader per kind of limit): its cgroup's (v2 ``memory.max``, v1
``memory.limit_in_bytes``: a SLURM job, a container), its ``RLIMIT_AS`` (``ulimit -v``) and ``RLIMIT_DATA``
(``ulimit -d``), and the machine's RAM; with what is in use against it where that can be read (the cgroup's
usage, the process's VmSize / VmData) and the machine's available memory. The readers take a root folder,
so that tests give them a fake ``/proc`` and ``/sys/fs/cgroup``. On a GPU: the GPU's total and free memory.
What to lower is the caller's to say (it knows the flags)."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

_CPU_ASKED = re.compile(r"you tried to allocate (\d+) bytes")
_CUDA_ASKED = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)")
_CUDA_DEVICE = re.compile(r"GPU (\d+) has a total capacity")
UNKNOWN_SIZE = "a size Python does not report"
_UNLIMITED = 2 ** 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def gib(size: float) -> str:
    return f"{size / 2 ** 30:.1f} GiB"


def size_text(size: int) -> str:
    """Bytes in the largest unit that keeps them at 1 or more (64.0 MiB, not 0.1 GiB; 512 B)."""
    for unit, power in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 2 ** power:
            return f"{size / 2 ** power:.1f} {unit}"
    return f"{size} B"


@dataclass
class Limit:
    """A bound on this process's memory: what it is (``name``, as a user would look it up), its size in bytes and
    what is in use against it now (bytes; None where unknown)."""
    name: str
    size: int
    used: int | None = None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _number(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def _cgroup_paths(root: str) -> dict:
    """{"v2": path, "memory": path} from ``root``/proc/self/cgroup (v2's ``0::/path``, v1's memory controller)."""
    paths = {}
    for line in (_read(os.path.join(root, "proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths["v2"] = parts[2]
        elif "memory" in parts[1].split(","):
            paths["memory"] = parts[2]
    return paths


def _cgroup_limit(root: str, mount: str, own: str | None, limit_file: str, usage_file: str,
                  kind: str) -> Limit | None:
    """The smallest ``limit_file`` from this process's cgroup folder up to the mount's top (a parent's limit binds
    its children too; a container sees its own cgroup at the top of the mount)."""
    if own is None:
        return None
    top = os.path.join(root, mount)
    folder = os.path.normpath(os.path.join(top, own.lstrip("/")))
    found = None
    while True:
        size = _number(_read(os.path.join(folder, limit_file)))  # v2's "max" is no number: no limit there
        if size is not None and size < _UNLIMITED and (found is None or size < found.size):
            shown = "/" + os.path.relpath(folder, root) if folder != top else "/" + mount
            found = Limit(f"the cgroup's {kind} {size_text(size)} ({os.path.join(shown, limit_file)})", size,
                          _number(_read(os.path.join(folder, usage_file))))
        if os.path.normpath(folder) == os.path.normpath(top) or not folder.startswith(top):
            return found
        folder = os.path.dirname(folder)


def cgroup_v2(root: str = "/") -> Limit | None:
    return _cgroup_limit(root, "sys/fs/cgroup", _cgroup_paths(root).get("v2"), "memory.max", "memory.current",
                         "memory.max")


def cgroup_v1(root: str = "/") -> Limit | None:
    return _cgroup_limit(root, "sys/fs/cgroup/memory", _cgroup_paths(root).get("memory"),
                         "memory.limit_in_bytes", "memory.usage_in_bytes", "memory limit")


def _status(root: str, field: str) -> int | None:
    """A ``kB`` field of ``root``/proc/self/status, in bytes."""
    for line in (_read(os.path.join(root, "proc/self/status")) or "").splitlines():
        name, _, rest = line.partition(":")
        kib = _number(rest.split()[0]) if name == field and rest.split() else None
        if kib is not None:
            return kib * 1024
    return None


def _rlimit(which: str, ulimit: str, status_field: str) -> Callable[[str], Limit | None]:
    def read(root: str = "/") -> Limit | None:
        import resource

        soft, _ = resource.getrlimit(getattr(resource, which))
        if soft == resource.RLIM_INFINITY or soft < 0:
            return None
        return Limit(f"this process's {which} {size_text(soft)} (ulimit {ulimit})", soft, _status(root, status_field))
    return read


def machine_ram(root: str = "/") -> Limit | None:
    total, available = host_memory(root)
    if total is None:
        return None
    return Limit(f"this machine's {gib(total)} of RAM", total, None if available is None else total - available)


# Each kind of limit that can bound this process's memory, in the order a tie is named
LIMIT_READERS: tuple = (cgroup_v2, cgroup_v1, _rlimit("RLIMIT_AS", "-v", "VmSize"), _rlimit("RLIMIT_DATA", "-d", "VmData"),
                        machine_ram)


def memory_limit(root: str = "/") -> Limit | None:
    """The limit that applies: the smallest of ``LIMIT_READERS``' (None where none can be read)."""
    found = [limit for limit in (reader(root) for reader in LIMIT_READERS) if limit is not None]
    return min(found, key=lambda limit: limit.size) if found else None


def host_memory(root: str = "/") -> tuple[int | None, int | None]:
    """(total, available) bytes of this machine's memory (/proc/meminfo; None where unknown)."""
    found = {}
    for line in (_read(os.path.join(root, "proc/meminfo")) or "").splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable") and _number(rest.split()[0] if rest.split() else "") is not None:
            found[name] = int(rest.split()[0]) * 1024
    total = found.get("MemTotal")
    if total is None and root == "/":
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = None
    return total, found.get("MemAvailable")


def _there(limit: Limit | None, root: str) -> str:
    if limit is None:
        return ""
    said = f"; the limit that applies is {limit.name}"
    if limit.used is not None:
        said += f", {size_text(limit.used)} of it in use"
    if not limit.name.startswith("this machine's"):
        total, available = host_memory(root)
        if total is not None:
            said += f" (this machine has {gib(total)}" + (f", {gib(available)} available)" if available is not None
                                                          else ")")
    return said


class MemoryAhead(MemoryError):
    """Allocations a run is about to make cannot fit under its cgroup's limit: said before they are made, since the
    kernel ends a process over its cgroup's limit with SIGKILL (exit 137), leaving no line."""


def check_training_fits(parameters: int, bytes_per_parameter: int, processes: int = 1, root: str = "/") -> None:
    """:class:`MemoryAhead` when what training adds once the model is built, ``bytes_per_parameter`` for each of
    ``parameters`` trainable parameters (its gradient and the optimizer's state: :data:`bart.optim.TRAINING_BYTES`),
    in each of the ``processes`` that share this cgroup, exceeds what its limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``) leaves beside what is in use; nothing where no cgroup limit applies (the kernel's
    kill is the cgroup's; a ulimit fails an allocation, which :func:`out_of_memory` names)."""
    limits = [limit for limit in (cgroup_v2(root), cgroup_v1(root)) if limit is not None]
    if not limits:
        return
    limit = min(limits, key=lambda found: found.size)
    need = parameters * bytes_per_parameter * processes
    left = max(limit.size - (limit.used or 0), 0)
    if need > left:
        many = f" in each of {processes} processes" if processes > 1 else ""
        raise MemoryAhead(f"out of memory ahead: training {parameters:,} parameters{many} needs about {size_text(need)} "
                          f"more (gradients and the optimizer's state in fp32), but {limit.name} leaves "
                          f"{size_text(left)}" + (f" ({size_text(limit.used)} in use)" if limit.used is not None else "")
                          + "; over it the kernel would stop the run without a word")


def out_of_memory(err: BaseException, root: str = "/") -> str | None:
    """What ran out, as a sentence ("asked for X; the limit that applies is Y, Z of it in use"), or None when
    ``err`` is not an allocation failure."""
    if isinstance(err, MemoryAhead):
        return str(err)
    text = str(err)
    if type(err).__name__ == "OutOfMemoryError" or "CUDA out of memory" in text:
        asked = _CUDA_ASKED.search(text)
        device = _CUDA_DEVICE.search(text)
        there = ""
        try:
            import torch
            index = int(device.group(1)) if device else torch.cuda.current_device()
            free, total = torch.cuda.mem_get_info(index)
            there = f"; GPU {index} has {gib(total)} ({gib(free)} free now)"
        except Exception:  # noqa: BLE001 - the figure is a courtesy; the line stands without it
            pass
        return f"out of GPU memory: asked for {asked.group(1) if asked else 'more than was free'}{there}"
    asked = _CPU_ASKED.search(text)
    if asked is None and not isinstance(err, MemoryError):
        return None
    size = size_text(int(asked.group(1))) if asked else UNKNOWN_SIZE
    return f"out of memory: asked for {size}{_there(memory_limit(root), root)}"
