"""Run an entry script with a fault injected at the lowest layer of checkpoint writes: the file object
that ``torch.save`` writes a checkpoint's temporary file (``.tmp-*.partial``) through.

    python -m tests.helpers.write_faults MODE pretrain.py --flag value ...

MODE ``enospc:N:K`` / ``edquot:N:K``: the K-th such file's (K from 1) ``write`` raises OSError(ENOSPC /
EDQUOT) once N bytes of it have been written (as a full disk or quota does; torch's zip writer then raises
its own RuntimeError "unexpected pos" with the OSError as its context). ``ctrlc:K``: at the first write
into the K-th such file the process sends itself SIGINT (a first Ctrl-C, arriving while that checkpoint
is written), and again at the first write into the next one (the second Ctrl-C, arriving while the
checkpoint the first one asked for is written; since a stop during the periodic write of the same update
keeps that checkpoint, no second write follows there). ``ctrlc_step:N``: the first SIGINT right after the
N-th optimizer step (between updates, outside any write), the second at the first write into the next such
file (the checkpoint that first one asked for). ``slow:MS``: the first write into every such file waits MS
milliseconds (a slow shared filesystem), so that a signal sent once a stop began lands inside its checkpoint
write whatever the machine's load. ``hold_step:N``: right after the N-th optimizer step the run prints
``write_faults: held after update N`` on stderr and waits there until a stop signal reached it (its handler ran:
``bart.runtime.signals``), then goes on: a test sends the signal once it read that line, and the run cannot end
before the signal is taken, however fast or loaded the machine. ``hold_write:K``: the same at the first write
into the K-th such file (``write_faults: held in the write of NAME``, the partial file on disk): a stop signal
lands inside that checkpoint write, a SIGKILL kills the process in the middle of it. A hold that no signal ends
within HOLD_LIMIT_S ends the run (exit 1, one line), so that a test that failed to send one leaves no process
behind. The script runs as ``__main__`` (``runpy``), so it is the real entry script; under a launcher:
``torchrun ... -m tests.helpers.write_faults MODE pretrain.py ...``; a module: ``... MODE -m MODULE ARGS``.
"""
import errno
import os
import re
import runpy
import signal
import sys
import time

_PARTIAL = re.compile(r"^\.tmp-.*\.partial$")
HOLD_LIMIT_S = 600.0


def hold(where: str) -> None:
    """Say ``write_faults: held WHERE`` on stderr, then wait until a stop signal's handler ran in this process."""
    from bart.runtime.signals import StopRequest

    print(f"write_faults: held {where}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + HOLD_LIMIT_S
    while StopRequest().received is None:  # the handler runs in this (main) thread, between two sleeps
        if time.monotonic() > deadline:
            print(f"write_faults: no stop signal came within {HOLD_LIMIT_S:g} s of the hold {where}: ended",
                  file=sys.stderr, flush=True)
            os._exit(1)
        time.sleep(0.01)


class FaultyFile:
    def __init__(self, file, kind: str, limit: int = 0, name: str = "") -> None:
        self._file, self._kind, self._limit, self._written, self._signalled = file, kind, limit, 0, False
        self._name = name

    def write(self, data) -> int:
        kind, limit = self._kind, self._limit
        if kind == "sigint" and not self._signalled:
            self._signalled = True
            os.kill(os.getpid(), signal.SIGINT)
        elif kind == "slow" and not self._signalled:
            self._signalled = True
            time.sleep(limit / 1000)
        elif kind == "hold" and not self._signalled:
            self._signalled = True
            hold(f"in the write of {self._name}")
        elif kind in ("enospc", "edquot") and self._written + len(data) > limit:
            room = max(int(limit) - self._written, 0)
            if room:
                self._written += self._file.write(bytes(memoryview(data)[:room]))
            code = errno.ENOSPC if kind == "enospc" else errno.EDQUOT
            raise OSError(code, os.strerror(code))
        self._written += len(data)
        return self._file.write(data)

    def __enter__(self):
        self._file.__enter__()
        return self

    def __exit__(self, *exc):
        return self._file.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._file, name)


def install(mode: str) -> None:
    original, opened = os.fdopen, [0]
    kind, *values = mode.split(":")
    numbers = [int(v) for v in values]

    armed = [kind != "ctrlc_step"]
    if kind == "hold_step":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        held = [0]

        def hold_after(optimizer, args, kwargs):
            held[0] += 1
            if held[0] == numbers[0]:
                hold(f"after update {numbers[0]}")

        register_optimizer_step_post_hook(hold_after)
    if kind == "ctrlc_step":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        steps = [0]

        def after_step(optimizer, args, kwargs):
            steps[0] += 1
            if steps[0] == numbers[0]:
                opened[0], armed[0] = 0, True
                os.kill(os.getpid(), signal.SIGINT)

        register_optimizer_step_post_hook(after_step)

    def fdopen(fd, *args, **kwargs):
        file = original(fd, *args, **kwargs)
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return file
        if not (_PARTIAL.match(name) and "w" in getattr(file, "mode", "")):
            return file
        if not armed[0]:
            return file
        opened[0] += 1
        if kind == "ctrlc_step" and opened[0] == 1:
            return FaultyFile(file, "sigint")
        if kind == "ctrlc" and opened[0] in (numbers[0], numbers[0] + 1):
            return FaultyFile(file, "sigint")
        if kind == "slow":
            return FaultyFile(file, "slow", numbers[0])
        if kind == "hold_write" and opened[0] == numbers[0]:
            return FaultyFile(file, "hold", name=name)
        if kind in ("enospc", "edquot") and opened[0] == (numbers[1] if len(numbers) > 1 else 1):
            return FaultyFile(file, kind, numbers[0])
        return file

    os.fdopen = fdopen


if __name__ == "__main__":
    install(sys.argv[1])
    if sys.argv[2] == "-m":  # a module: python -m tests.helpers.write_faults MODE -m MODULE ARGS
        sys.argv = sys.argv[3:]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[2:]
        sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
        runpy.run_path(sys.argv[0], run_name="__main__")
