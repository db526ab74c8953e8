"""Memory a run asked for and did not get: CPU ("DefaultCPUAllocator: can't allocate memory"), CUDA
(``torch.OutOfMemoryError``) or Python's ``MemoryError``, described in one line: the size asked for (read
from the allocator's message) and the memory there is (the machine's total and available, or the GPU's
total and free). What to lower is the caller's to say (it knows the flags)."""
from __future__ import annotations

import os
import re
from typing import Optional

_CPU_ASKED = re.compile(r"you tried to allocate (\d+) bytes")
_CUDA_ASKED = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)")
_CUDA_DEVICE = re.compile(r"GPU (\d+) has a total capacity")


def gib(size: float) -> str:
    return f"{size / 2 ** 30:.1f} GiB"


def host_memory() -> tuple[Optional[int], Optional[int]]:
    """(total, available) bytes of this machine's memory (/proc/meminfo; None where unknown)."""
    found = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("MemTotal", "MemAvailable"):
                    found[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    total = found.get("MemTotal")
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = None
    return total, found.get("MemAvailable")


def out_of_memory(err: BaseException) -> Optional[str]:
    """What ran out, as a sentence ("asked for X; the machine has Y (Z available)"), or None when ``err`` is
    not an allocation failure."""
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
    total, available = host_memory()
    there = "" if total is None else f"; this machine has {gib(total)}" + (
        f" ({gib(available)} available)" if available is not None else "")
    return f"out of memory: asked for {gib(int(asked.group(1))) if asked else 'more than was free'}{there}"
