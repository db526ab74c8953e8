"""Every test watched for a hang and for processes it leaves behind: a pytest plugin (tests/conftest.py loads it).

A hang: the test's processes (this one, less this watcher's own thread, and every process started under it) used
less than MIN_CPU_S of CPU time over STALL_S seconds of the test. A slow machine slows work down but does not stop
it, so the budget is on silence, not on the test's total time (pytest-timeout, pytest.ini, catches a process that
spins forever). The test then fails within about a minute with the stacks of every process: this one's threads
(faulthandler) in the failure, each Python process under it through SIGABRT (faulthandler: PYTHONFAULTHANDLER=1 is
in the environment every process the tests start inherits; a forked one re-enables it on its own stderr), into
its own stderr, which the test reads and shows as it fails on the process's end. A test that does not end within
GRACE_S of that is interrupted where it waits (SIGVTALRM).

Left behind: after a test's teardown, a process that started during the test and still runs, whether under this
one or in a session of its own (``BART_TEST_OWNER``, this process's pid, marks every process the tests start and
their children), fails the test's teardown, named, and is killed. At the run's end (its xdist workers ended), one
the run started (``BART_TEST_RUN``) outside any test and still running fails the run the same way. Helper
processes that libraries keep for the whole session (multiprocessing's resource tracker and forkserver, torch
inductor's compile workers) are not a test's."""
from __future__ import annotations

import faulthandler
import os
import resource
import signal
import sys
import tempfile
import threading
import time

import pytest

STALL_S = float(os.environ.get("BART_TESTS_STALL_S", "60"))  # tests/suite/test_hang_watch.py sets a few seconds
MIN_CPU_S = 1.0 * STALL_S / 60
GRACE_S = STALL_S / 6
POLL_S = 1.0
OWNER = "BART_TEST_OWNER"
RUN = "BART_TEST_RUN"  # the whole run's mark: its main pytest process's pid, which xdist's workers inherit
INTERRUPT = signal.SIGVTALRM
_TICK = os.sysconf("SC_CLK_TCK")
# session-long helpers of the libraries: not a test's process
_POOLS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "torch/_inductor/compile_worker",
          "torch._inductor.compile_worker")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _stat(pid: int | str) -> tuple[int, str, int, int] | None:
    """(parent pid, state, CPU ticks with its reaped children's, start time in ticks after boot)."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw.rsplit(b")", 1)[1].split()
    return (int(fields[1]), fields[0].decode(), sum(int(f) for f in fields[11:15]), int(fields[19]))


def _table() -> dict[int, tuple[int, str, int, int]]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            entry = _stat(name)
            if entry is not None:
                table[int(name)] = entry
    return table


def _descendants(table: dict, root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (its children, theirs, ...)."""
    return _descendants(_table(), pid)


def _cmdline(pid: int) -> str:
    raw = _read(f"/proc/{pid}/cmdline") or b""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _environ(pid: int, name: str) -> str | None:
    for entry in (_read(f"/proc/{pid}/environ") or b"").split(b"\0"):
        if entry.startswith(name.encode() + b"="):
            return entry.split(b"=", 1)[1].decode()
    return None


def _is_python(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    except OSError:
        return False


class IdleWatch:
    """The watch's rule for processes a test waits on (a launch, a run it signals): they are hung once ``roots`` and
    every process under them used less than ``MIN_CPU_S`` of CPU (scaled to ``stall_s``) over the last ``stall_s``
    seconds and, where the test reads what they print (:meth:`printed`), printed nothing in that time. A loaded machine
    slows a run (an inductor compile can print nothing for minutes); it does not stop it using CPU. The CPU is added up
    as each process's grows, so one that ended takes nothing back from the others."""

    def __init__(self, stall_s: float = STALL_S) -> None:
        self.stall_s = stall_s
        self._seen: dict[int, int] = {}  # pid -> its CPU ticks when last read
        self._used = 0  # ticks: every process's growth, added up
        self._history = [(time.monotonic(), 0)]  # (when, _used) since the last output

    def printed(self) -> None:
        self._history = [(time.monotonic(), self._used)]

    def used_s(self) -> float:
        """The CPU seconds used in the window (since the last output, or the last ``stall_s`` seconds)."""
        return (self._used - self._history[0][1]) / _TICK

    def idle_for(self, roots) -> float | None:
        """The seconds the processes have been idle once that reached ``stall_s`` (then they are hung); else None."""
        table = _table()
        used = self._used
        for root in roots:
            for pid in [root, *_descendants(table, root)]:
                if pid in table:
                    ticks = table[pid][2]
                    used += max(0, ticks - self._seen.get(pid, 0))
                    self._seen[pid] = ticks
        return self.observe(used)

    def observe(self, used_ticks: int) -> float | None:
        """:meth:`idle_for` on a total of CPU ticks read by the caller, one that never falls (the watch's own)."""
        now = time.monotonic()
        self._used = used_ticks
        self._history.append((now, used_ticks))
        while len(self._history) > 1 and now - self._history[1][0] >= self.stall_s:
            self._history.pop(0)
        waited = now - self._history[0][0]
        if waited >= self.stall_s and self.used_s() < MIN_CPU_S * self.stall_s / STALL_S:
            return waited
        return None


def abort_tree(pid: int) -> list[str]:
    """SIGABRT to ``pid`` and every Python process under it, one at a time (faulthandler: each dumps its threads'
    Python stacks into its own stderr and ends); the processes, named."""
    table = _table()
    named = []
    for p in [pid, *_descendants(table, pid)]:
        if p in table and table[p][1] not in ("Z", "X"):
            named.append(f"pid {p} (state {table[p][1]}): {_cmdline(p)}")
            if _is_python(p):
                try:
                    os.kill(p, signal.SIGABRT)
                    os.kill(p, signal.SIGCONT)  # a stopped one takes it too
                except ProcessLookupError:
                    pass
                time.sleep(0.2)  # one dump at a time
    return named


def _now_ticks() -> int:
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * _TICK)


class Hung(AssertionError):
    pass


class Watch:
    """One per pytest process: the test being run, and a thread that samples its processes' CPU time."""

    def __init__(self) -> None:
        self.item = None
        self.report: dict = {}  # nodeid -> the hang's report
        self.started_ticks = self.session_ticks = 0
        self._idle = IdleWatch()  # the test's, begun afresh with each test and each wait for its leftovers
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._tid = 0
        self._main = threading.main_thread().ident
        self._armed = False  # the interrupt's handler is installed (never SIGVTALRM's default: the end of the process)

    # -- set up once per pytest process -----------------------------------------------------------------
    def configure(self, config) -> None:
        os.environ[OWNER] = str(os.getpid())
        if not hasattr(config, "workerinput"):  # not an xdist worker: a run of its own (a nested one too)
            os.environ[RUN] = str(os.getpid())
        self.session_ticks = _now_ticks()
        os.environ["PYTHONFAULTHANDLER"] = "1"  # every process the tests start dumps its stacks on SIGABRT
        soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
        if soft != 0:  # and writes no core file doing so
            resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
        if threading.current_thread() is threading.main_thread():
            signal.signal(INTERRUPT, self._interrupt)
            self._armed = True

    def _interrupt(self, signum, frame) -> None:
        item = self.item
        if item is not None and item.nodeid in self.report:
            raise Hung(self.report[item.nodeid])

    # -- around each test -------------------------------------------------------------------------------
    def begin(self, item) -> None:
        with self._lock:
            self.item, self._idle = item, IdleWatch()
        self.started_ticks = _now_ticks()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hang_watch", daemon=True)
            self._thread.start()

    def end(self) -> None:
        with self._lock:
            self.item = None

    def leftovers(self, settle_s: float = min(5.0, STALL_S / 2), whole_run: bool = False) -> list[str]:
        """The processes the test started that still run after its teardown (``whole_run``: that the run started
        and still run at its end), killed; each named. The wait for one being reaped is shorter than the hang
        budget and starts the budget afresh, so the watcher never takes this wait for a hang (and aborts the very
        process being looked for)."""
        me = os.getpid()
        with self._lock:
            self._idle = IdleWatch()
        since, mark, value = (self.session_ticks, RUN, os.environ.get(RUN)) if whole_run else \
            (self.started_ticks, OWNER, str(me))

        def ours() -> list[int]:
            table = _table()
            under = set(_descendants(table, me))
            found = []
            for pid, (_ppid, state, _ticks, start) in table.items():
                if pid == me or state in ("Z", "X") or start < since:
                    continue
                if pid in under or _environ(pid, mark) == value:
                    if not any(pool in _cmdline(pid) for pool in _POOLS):
                        found.append(pid)
            return found

        left = ours()
        deadline = time.monotonic() + settle_s
        while left and time.monotonic() < deadline:  # one being killed or reaped right now
            time.sleep(0.1)
            left = ours()
        named = [f"pid {pid}: {_cmdline(pid) or '?'}" for pid in left]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return named

    # -- the watcher's thread ---------------------------------------------------------------------------
    def _cpu_ticks(self) -> int:
        me = os.getpid()
        table = _table()
        own = table.get(me, (0, "", 0, 0))[2]
        mine = _read(f"/proc/{me}/task/{self._tid}/stat")
        if mine is not None:  # less this thread's own sampling
            fields = mine.rsplit(b")", 1)[1].split()
            own -= int(fields[11]) + int(fields[12])
        return own + sum(table[pid][2] for pid in _descendants(table, me) if pid in table)

    def _run(self) -> None:
        self._tid = threading.get_native_id()
        while True:
            time.sleep(POLL_S)
            with self._lock:
                item = self.item
            if item is None or item.nodeid in self.report:
                continue
            ticks = self._cpu_ticks()
            with self._lock:
                if self.item is not item:
                    continue
                waited, used = self._idle.observe(ticks), self._idle.used_s()
            if waited is not None:
                self._fire(item, waited, used)

    def _fire(self, item, waited: float, used: float) -> None:
        me = os.getpid()
        table = _table()
        under = _descendants(table, me)
        with tempfile.TemporaryFile("w+") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.seek(0)
            own = f.read()
        processes = "\n".join(f"  pid {pid} (state {table[pid][1]}): {_cmdline(pid)}" for pid in under
                              if pid in table) or "  none"
        children = [pid for pid in under if table.get(pid, (me,))[0] == me]
        report = (f"hung: {item.nodeid}: its processes used {used:.2f} s of CPU in {waited:.0f} s (a hang: less than "
                  f"{MIN_CPU_S:g} s in {STALL_S:g} s; tests/helpers/hang_watch.py). The processes under the test's "
                  f"(pid {me}), each Python one sent SIGABRT: its threads' Python stacks are in its own stderr:\n"
                  f"{processes}\nThe test's process (pid {me}), its threads' Python stacks:\n{own}")
        self.report[item.nodeid] = report
        for pid in children:
            abort_tree(pid)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            with self._lock:
                if self.item is not item:
                    return
            time.sleep(0.1)
        if self._armed:  # it still waits: interrupted where it waits
            signal.pthread_kill(self._main, INTERRUPT)


WATCH = Watch()


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    WATCH.configure(config)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    """Once the run ended (xdist's workers too): a process it started that still runs fails the run, named, and is
    killed (one a test started is found at that test's teardown; this finds one started outside any test)."""
    if hasattr(session.config, "workerinput"):
        return  # the run's main process checks, after its workers ended
    named = WATCH.leftovers(whole_run=True)
    if named:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "the test run left these processes running (now killed):\n" + "\n".join(named)
        if reporter is not None:
            reporter.write_line(text, red=True)
        else:
            print(text, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    WATCH.begin(item)
    try:
        return (yield)
    finally:
        WATCH.end()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        result = yield
    except BaseException:
        WATCH.leftovers()  # killed; the teardown's own error is the one reported
        raise
    named = WATCH.leftovers()
    if named:
        raise pytest.fail.Exception("the test left these processes running after its teardown (now killed):\n"
                                    + "\n".join(named), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test the watcher found hung fails, even where it went on to pass once its processes were ended."""
    report = yield
    text = WATCH.report.get(item.nodeid)
    if text is not None and report.when == "call":
        report.sections.append(("hang", text))
        if report.passed:
            report.outcome = "failed"
            report.longrepr = text
    return report
