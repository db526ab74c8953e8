"""The stop signals a process ignores or blocks, as the kernel has them (``/proc/PID/status``): what a child started
from it inherits. C code (a library's) can change them without Python's signal module knowing, so
``signal.getsignal`` would not show them."""
import signal


def held(pid: int | str = "self", signals=(signal.SIGTERM, signal.SIGINT)) -> dict:
    """{signal name: ["SigIgn" and/or "SigBlk"]} for each of ``signals`` the process ``pid`` (its main thread)
    ignores or blocks; {} when none."""
    with open(f"/proc/{pid}/status") as status:
        masks = {key: int(value.strip(), 16) for key, _, value in (line.partition(":") for line in status)
                 if key in ("SigIgn", "SigBlk")}
    found = {signal.Signals(sig).name: [key for key, mask in masks.items() if mask >> (sig - 1) & 1]
             for sig in signals}
    return {name: keys for name, keys in found.items() if keys}
