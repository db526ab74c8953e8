"""Which rank stopped: a heartbeat per process through the launcher's store, so that a hung or dead rank ends
the job within ``--heartbeat_timeout`` seconds (default 60) with one line naming it, instead of every other
rank sitting in its next collective until ``--dist_timeout`` (10 minutes) and then saying only "another rank
hung or died".

How: :func:`bart.runtime.distributed.init_distributed` starts one daemon thread per rank. It adds 1 to the rank's
counter in the store (``bart_hb/{attempt}/beat/{rank}``) every ``--heartbeat_timeout / 6`` seconds (at most 5 s),
over a store connection of its own, and watches the counters of others: rank 0 watches every rank, every other
rank watches rank 0 (O(ranks) store traffic in all). A counter that did not move for ``--heartbeat_timeout``
seconds, measured on the watcher's own clock, means that process is stopped (SIGSTOP, a frozen machine), dead
without its launcher noticing, or cut off from the store: the watcher writes one line naming the rank(s), their
host and pid (each rank publishes them at start), and ends its process with exit code 4
(``EXIT_DIST_TIMEOUT``); the launcher then ends the job (``utils.launch`` kills the stopped worker at once; plain
torchrun sends it SIGTERM, which a stopped process holds, and SIGKILL 30 s later).

What is not a hang: the beating thread runs beside the main thread, so a rank that is merely busy (a long
compile, a checkpoint write, a slow data shard, waiting in a collective for a slow peer) keeps beating. Only a
process that runs no Python thread at all for ``--heartbeat_timeout`` seconds stops beating: stopped, dead, or
inside one C call that holds the interpreter lock that long (raise ``--heartbeat_timeout`` for such a step).
A rank that finished (:meth:`Heartbeat.stop` after the last barrier) says so (``done/{rank}``) and is no longer
watched. ``--heartbeat_timeout 0`` turns all of this off (``--dist_timeout`` alone then ends a hung job).
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
import threading
import time
from collections.abc import Callable

from bart.errors import EXIT_DIST_TIMEOUT, one_line

DEFAULT_HEARTBEAT_TIMEOUT_S = 60.0
_MAX_INTERVAL_S = 5.0


def interval_for(timeout_s: float) -> float:
    """Seconds between two beats: six per timeout, at most 5 s."""
    return min(_MAX_INTERVAL_S, timeout_s / 6.0)


def _default_end(line: str) -> None:
    """The watcher's verdict: one line, the run's folder lock released, the process ended at once (the main
    thread may be inside a collective that only a timeout would end)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    sys.stdout.flush()
    try:
        from bart.runtime import run_lock
        run_lock.release_all()
    except Exception:  # noqa: BLE001 - a stale lock is taken over by the next run; the exit matters more
        pass
    os._exit(EXIT_DIST_TIMEOUT)


class Heartbeat:
    """One rank's beating and watching thread (see the module's docstring). ``store``: a store (a prefix of the
    launcher's) that only this thread uses; ``end``: what to do with the line once a watched rank stopped (by
    default print it and end the process with exit code 4; tests pass their own)."""

    def __init__(self, store, rank: int, world_size: int, timeout_s: float, *, script: str | None = None,
                 end: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.store, self.rank, self.world_size, self.timeout_s = store, rank, world_size, timeout_s
        self.interval_s = interval_for(timeout_s)
        self.script = script or os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python")
        self.end = end or _default_end
        self.clock = clock
        self.watched = list(range(1, world_size)) if rank == 0 else [0]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _key(self, kind: str, rank: int) -> str:
        return f"{kind}/{rank}"

    def start(self) -> Heartbeat:
        self.store.set(self._key("who", self.rank), f"{socket.gethostname()} pid {os.getpid()}")
        self.store.add(self._key("beat", self.rank), 1)
        self._thread = threading.Thread(target=self._run, name=f"bart-heartbeat-rank{self.rank}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """This rank is done (after the run's last barrier): say so, stop beating and watching."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 5)
        self._thread = None
        try:
            self.store.set(self._key("done", self.rank), "1")
        except Exception:  # noqa: BLE001 - the store may be gone with the job's end; nothing is watched any more
            pass

    def _who(self, rank: int) -> str:
        try:
            if self.store.check([self._key("who", rank)]):
                return self.store.get(self._key("who", rank)).decode()
        except Exception:  # noqa: BLE001 - the line names the rank without its host
            pass
        return "host unknown"

    def _run(self) -> None:
        start = self.clock()
        seen = {r: (None, start) for r in self.watched}  # rank: (last counter, when it last moved)
        unreachable_since = None
        while not self._stop.wait(self.interval_s):
            now = self.clock()
            try:
                self.store.add(self._key("beat", self.rank), 1)
                stalled = []
                for r in self.watched:
                    count = self.store.add(self._key("beat", r), 0)
                    if count != seen[r][0]:
                        seen[r] = (count, now)
                    elif now - seen[r][1] > self.timeout_s and not self.store.check([self._key("done", r)]):
                        stalled.append(r)
                unreachable_since = None
            except Exception as err:  # noqa: BLE001 - a store that stopped answering is a stopped job too
                unreachable_since = unreachable_since or now
                if now - unreachable_since > self.timeout_s and not self._stop.is_set():
                    self.end(self._unreachable_line(err))
                    return
                continue
            if stalled and not self._stop.is_set():
                self.end(self.line(stalled, now - min(seen[r][1] for r in stalled)))
                return

    def line(self, stalled: list[int], silent_s: float) -> str:
        named = "; ".join(f"rank {r} ({self._who(r)})" for r in stalled[:8]) + ("; ..." if len(stalled) > 8 else "")
        return (f"{self.script}: stopped: rank {self.rank} of {self.world_size}: {len(stalled)} process(es) stopped "
                f"answering: {named}: no heartbeat for {silent_s:.0f} s (--heartbeat_timeout {self.timeout_s:g}): "
                f"stopped (SIGSTOP, a frozen machine), killed, or cut off from the rendezvous store; see that "
                f"rank's log and its machine; the job ends here (exit {EXIT_DIST_TIMEOUT})")

    def _unreachable_line(self, err: BaseException) -> str:
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        return (f"{self.script}: stopped: rank {self.rank} of {self.world_size}: the rendezvous store at {where} "
                f"stopped answering for over {self.timeout_s:g} s (--heartbeat_timeout; {one_line(err)[:160]}): "
                f"its host (torchrun's agent on the first node, or rank 0 without torchrun) stopped or is cut off; "
                f"the job ends here (exit {EXIT_DIST_TIMEOUT})")


def store_client(host: str, port: int, timeout_s: float):
    """A connection of the heartbeat's own to the launcher's store (a main thread blocked in a store call never
    holds up the beats)."""
    import torch.distributed as dist

    return dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=max(timeout_s, 1.0)),
                         wait_for_workers=False)
