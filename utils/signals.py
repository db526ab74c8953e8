"""Stop signals as a request, not a kill: SIGTERM (what SLURM, Kubernetes and torchrun send before
killing), SIGUSR1 (SLURM's ``--signal`` warning before the time limit) and the first Ctrl-C set a
flag that a loop checks at a safe point (after an update), so it can write a checkpoint and exit.
A second Ctrl-C interrupts at once, as usual (raises KeyboardInterrupt); landing inside a checkpoint
write, it removes the partial file and the run ends in one line naming the newest complete checkpoint
(``utils.checkpoint_io.WriteInterrupted``, exit code 130)."""
from __future__ import annotations

import signal
import sys
import threading

STOP_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGUSR1", None),
                                 getattr(signal, "SIGINT", None)) if s is not None)


class StopRequest:
    """``with StopRequest() as stop: ... if stop.requested: save and exit``. Handlers are installed only
    in the main thread and restored on exit."""

    def __init__(self, signals=STOP_SIGNALS) -> None:
        self.signals = signals
        self.received: str | None = None
        self._previous: dict = {}

    @property
    def requested(self) -> bool:
        return self.received is not None

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        if self.received is None:
            self.received = name
            print(f"[signal] {name} received: finishing the current update, then writing a checkpoint and "
                  f"exiting{' (Ctrl-C again to quit at once, without that checkpoint)' if signum == signal.SIGINT else ''}",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def ignore_stop_signals(_worker_id: int = 0) -> None:
    """A data loader worker's ``worker_init_fn``: the stop signals are the main process's to handle.
    A SIGTERM or Ctrl-C sent to the whole process group (SLURM, a terminal) would otherwise kill the
    workers mid-batch, and the main process would die of a DataLoader error instead of saving."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
