"""Stop signals as a request, not a kill: SIGTERM (what SLURM, Kubernetes and torchrun send before
killing), SIGUSR1 (SLURM's ``--signal`` warning before the time limit) and the first Ctrl-C set a
flag that a loop checks at a safe point (after an update, between two evaluation batches), so it can write a
checkpoint and exit. A second Ctrl-C interrupts at once, as usual (raises KeyboardInterrupt; the entry scripts end it in one
line, exit code 130); landing inside a checkpoint write, it removes the partial file and the run ends in
one line naming the newest complete checkpoint (``bart.files.checkpoint_io.WriteInterrupted``, exit code 130).

The request belongs to the process, not to one loop: the entry scripts hold a :class:`StopRequest` from
their first line (``bart.cli.exits.run_main``), so a signal that lands while the model is built is not a kill
(exit 143, no message) but a request the training loop honours at its first check. Long evaluation work
inside a run (generation over a split, a validation loss over batches) has a safe point too, between two
batches: it calls :func:`stop_at_batch_boundary` before each, which raises :class:`StoppedAtBatch` once a
request is agreed; the work is abandoned (nothing of it written) and its caller stops as for any request
(the trainer: the checkpoint of the last update, exit 75; uncaught: one line, exit 75). Whether to stop is
decided by all ranks together (:func:`stop_agreed`, a collective: the one place ranks agree on a stop, at
an update or a batch boundary), since the checkpoint and the gathering of generations that follow are
collective. Work with no safe point to stop at (``run_eval.py``'s generation and scoring) takes
the signals ``at_once``: Ctrl-C interrupts (130), SIGTERM/SIGUSR1 raise :class:`bart.errors.Preempted`
(75: run the same command again)."""
from __future__ import annotations

import os
import signal
import sys
import threading

from bart.errors import Preempted

STOP_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGUSR1", None),
                                 getattr(signal, "SIGINT", None)) if s is not None)
STOP_SIGNAL_NAMES = tuple(signal.Signals(s).name for s in STOP_SIGNALS)

# One request per process, shared by nested StopRequests (the entry script's, the training loop's); the
# outermost one starts it afresh.
_PROCESS = {"received": None, "depth": 0, "settled": False}


def _say(line: str) -> None:
    """A line to stderr from a signal handler. The signal may come while this thread is inside a write to stderr
    (a progress line): the buffered stream then refuses a second write ("reentrant call"), and the line goes to
    its file descriptor directly instead of ending the run with that error."""
    try:
        print(line, file=sys.stderr, flush=True)
    except RuntimeError:
        try:
            fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            fd = 2
        os.write(fd, (line + "\n").encode("utf-8", "replace"))


class StopRequest:
    """``with StopRequest() as stop: ... if stop.requested: save and exit``. Handlers are installed only
    in the main thread and restored on exit; a signal received under an enclosing StopRequest (before this
    one was entered) counts here too."""

    def __init__(self, signals=STOP_SIGNALS, at_once: bool = False) -> None:
        self.signals = signals
        self.at_once = at_once
        self._previous: dict = {}
        self._installed = False

    @property
    def received(self) -> str | None:
        return _PROCESS["received"]

    @property
    def requested(self) -> bool:
        return self.received is not None

    def settle(self) -> None:
        """The run's outcome is known (it ended, or is ending with its line): a signal from now on changes nothing
        (a Ctrl-C in the middle of the last line would otherwise be a KeyboardInterrupt traceback)."""
        _PROCESS["settled"] = True

    def ignore_from_now_on(self) -> None:
        """For a process on its way out: the stop signals are ignored until it has exited."""
        self._previous.clear()
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                signal.signal(sig, signal.SIG_IGN)

    def _handle(self, signum, frame) -> None:
        if _PROCESS["settled"]:
            return
        name = signal.Signals(signum).name
        if signum == signal.SIGINT and (self.at_once or self.received is not None):
            raise KeyboardInterrupt  # a second Ctrl-C (or the first, where there is no safe point): stop now
        if self.at_once:
            raise Preempted(f"{name} received: stopped before the work was done (nothing half-written); run the "
                            f"same command again")
        if self.received is None:
            _PROCESS["received"] = name
            _say(f"[signal] {name} received: finishing the current update or evaluation batch, then writing a "
                 f"checkpoint where there is something new to save, and exiting{' (Ctrl-C again to quit at once, without that checkpoint)' if signum == signal.SIGINT else ''}")

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            if _PROCESS["depth"] == 0:
                _PROCESS.update(received=None, settled=False)
            _PROCESS["depth"] += 1
            self._installed = True
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._installed:
            _PROCESS["depth"] -= 1
            self._installed = False


class StoppedAtBatch(Preempted):
    """All ranks agreed, at a batch boundary of long evaluation work (``work``: what it was), to stop for a
    signal (``received``: its name): the work was abandoned, nothing of it written. Its caller stops as for
    any stop request; uncaught, the run ends in one line with exit code 75."""

    def __init__(self, received: str, work: str) -> None:
        self.received, self.work = received, work
        super().__init__(f"{received} received during {work}: stopped before it ended (nothing of it written); run "
                         f"the same command again")


def stop_agreed(device=None) -> str | None:
    """Whether any rank received a stop signal (under a :class:`StopRequest`): the signal's name (this rank's, or
    another rank's as "SIGTERM (on another rank)"), or None. With several processes a collective (each rank's
    signal counted over the ranks, on ``device``: the process group's device): every rank calls it at the same
    points, so that all stop at the same update or batch, and every rank's line names the signal (a launcher
    forwarding SIGTERM to its workers in turn: the ranks may agree before the signal reaches the last one)."""
    received = _PROCESS["received"] if _PROCESS["depth"] > 0 else None
    from bart.runtime import distributed as dist_utils  # imports torch: only here

    if dist_utils.world_size() > 1:
        import torch

        counts = torch.tensor([float(received == name) for name in STOP_SIGNAL_NAMES], device=device)
        counts = dist_utils.all_reduce_sum(counts).tolist()
        if received is None:
            received = next((f"{name} (on another rank)" for name, n in zip(STOP_SIGNAL_NAMES, counts) if n), None)
    return received


def stop_at_batch_boundary(work: str, device=None) -> None:
    """Between two batches of long evaluation work (every rank, before each of its batches, the same number of
    times): raise :class:`StoppedAtBatch` when a stop is agreed (:func:`stop_agreed`)."""
    received = stop_agreed(device)
    if received is not None:
        raise StoppedAtBatch(received, work)


def ignore_stop_signals(_worker_id: int = 0) -> None:
    """A data loader worker's ``worker_init_fn``: the stop signals are the main process's to handle.
    A SIGTERM or Ctrl-C sent to the whole process group (SLURM, a terminal) would otherwise kill the
    workers mid-batch, and the main process would die of a DataLoader error instead of saving."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
