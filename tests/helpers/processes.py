"""A real process (an entry script, a launcher) whose merged stdout/stderr lines are read as they come, so that a
test can send a signal once a given line appeared, and the lines an entry script ends with; and launches of several
processes (torchrun, ``utils.launch``) watched for a hang (:func:`run_ranks`).

Every process started here carries a mark in its environment (``BART_TEST_LAUNCH``), which its children inherit:
whatever their session (torchrun starts each rank in a session of its own, so killing the launcher's process group
leaves them running) they are found (/proc/PID/environ) and killed when the test is done with them."""
import os
import resource
import signal
import subprocess
import threading
import time
import uuid

from tests.helpers import hang_watch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARK = "BART_TEST_LAUNCH"
# A launch whose processes print nothing and use almost no CPU for this long is hung (their stacks, then a failure):
# hang_watch.IdleWatch's rule, so a slow or loaded machine is not taken for a hung one.
STALL_S = hang_watch.STALL_S


def _env(**extra):
    return {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1", **extra}


def _marked(mark: str) -> list[int]:
    """The processes started with ``MARK=mark`` in their environment (the launch's, whatever their session)."""
    wanted, found = f"{MARK}={mark}".encode(), []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/environ", "rb") as environ:
                    if wanted in environ.read().split(b"\0"):
                        found.append(int(name))
            except OSError:  # gone meanwhile, or a zombie
                pass
    return found


def _environ_value(pid: int, name: str) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            for entry in environ.read().split(b"\0"):
                key, _, value = entry.decode(errors="replace").partition("=")
                if key == name:
                    return value
    except OSError:
        pass
    return None


def kill_launch(mark: str, proc: subprocess.Popen) -> None:
    """SIGKILL to every process of a launch (its process group, and every process carrying its mark), then reap it."""
    for _ in range(3):  # a process forked while the others were killed is found the next time
        for pid in _marked(mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if not _marked(mark):
            break
        time.sleep(0.1)
    proc.wait()


def _no_core_files() -> None:
    """The SIGABRT that dumps a hung process's stacks (:func:`_stacks`) writes no core file into the checkout."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if soft != 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


def _stacks(mark: str, lines: list[str], settle_s: float = 1.0, limit_s: float = 5.0) -> str:
    """Every process of a launch dumps the Python stacks of all its threads (SIGABRT, taken by faulthandler: the launch
    runs with PYTHONFAULTHANDLER=1; the dump needs no GIL, so a process deadlocked in C++ dumps too) into the
    launch's output, one at a time so that the dumps do not interleave; each dump with its process named. The
    launcher (torchrun's agent: no RANK) is stopped (SIGSTOP) first, so that it does not end the ranks not yet
    dumped once the first one died, and dumps last."""
    ranked = {pid: _environ_value(pid, "RANK") for pid in _marked(mark)}
    launchers = [pid for pid, rank in ranked.items() if rank is None]
    ranks = sorted((pid for pid, rank in ranked.items() if rank is not None),
                   key=lambda pid: (int(ranked[pid]) if ranked[pid].isdigit() else 0, pid))
    for pid in launchers:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    dumps = []
    for pid in ranks + launchers:
        start = len(lines)
        try:
            os.kill(pid, signal.SIGABRT)
            if pid in launchers:
                os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            continue
        began = last = time.monotonic()
        seen = start
        while time.monotonic() - began < limit_s and time.monotonic() - last < settle_s:
            if len(lines) != seen:
                seen, last = len(lines), time.monotonic()
            time.sleep(0.05)
        who = f"rank {ranked[pid]}" if pid in ranks else "the launcher"
        dumps.append(f"--- {who} (pid {pid}): its threads' Python stacks ---\n" + "".join(lines[start:]))
    return "\n".join(dumps)


def run_ranks(cmd: list[str], stall_s: float = STALL_S, **extra_env) -> tuple[int, str]:
    """Run a launch of several processes (``torchrun ...``, ``python -m utils.launch ...``) to its end: its exit code
    and merged stdout/stderr. A hang (no process prints a line or uses CPU for ``stall_s`` seconds:
    ``hang_watch.IdleWatch``) fails the test with every process's Python stacks within that time, not at pytest's
    timeout; however it ends, no process of the launch is left behind."""
    mark = uuid.uuid4().hex
    env = _env(TOKENIZERS_PARALLELISM="false", PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1", **{MARK: mark},
               **extra_env)
    _no_core_files()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []

    def read() -> None:
        for line in iter(proc.stdout.readline, ""):
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    watch, seen, polls = hang_watch.IdleWatch(stall_s), 0, 0
    try:
        while proc.poll() is None:
            time.sleep(0.2)
            polls += 1
            if len(lines) != seen:
                seen = len(lines)
                watch.printed()
            elif polls % 5 == 0 and (idle := watch.idle_for([proc.pid])) is not None:  # about a second
                tail = "".join(lines[-40:])
                stacks = _stacks(mark, lines)
                raise AssertionError(f"hung: no process of `{' '.join(map(str, cmd[:6]))} ...` printed anything for "
                                     f"{idle:.0f} s and they used {watch.used_s():.2f} s of CPU (stall budget "
                                     f"{stall_s:g} s); its last lines:\n{tail}\n{stacks}")
        reader.join(timeout=10)  # what the processes printed last
        return proc.returncode, "".join(lines)
    finally:
        kill_launch(mark, proc)
        reader.join(timeout=5)


def wait_for(predicate, proc, what, output=None, stall_s: float | None = None):
    """Until ``predicate()``; fails once ``proc`` ended first (with its stderr's end where that is a pipe of its own,
    not read by a thread), or once ``proc`` and the processes under it used almost no CPU for ``stall_s`` seconds
    (tests/helpers/hang_watch.py's rule; a slow machine is not a hung run): each is sent SIGABRT (its threads'
    Python stacks into its stderr), and the failure names them, with ``output()`` (what they printed) where given."""
    watch = hang_watch.IdleWatch(hang_watch.STALL_S if stall_s is None else stall_s)
    polls = 0
    while not predicate():
        if proc.poll() is not None:
            time.sleep(0.5)  # what it printed last may still be on its way to a reader thread
            if predicate():
                return
            said = proc.communicate()[1] if proc.stderr is not None and not proc.stderr.closed else ""
            said = said or (output() if output else "")
            raise AssertionError(f"the run ended before {what}" + (f": {said[-2000:]}" if said else ""))
        time.sleep(0.02)
        polls += 1
        if polls % 50 == 0 and (idle := watch.idle_for([proc.pid])) is not None:  # about a second
            named = hang_watch.abort_tree(proc.pid)
            time.sleep(2)  # their stacks, on their way to a reader thread
            said = output()[-6000:] if output else "(in their stderr)"
            raise AssertionError(f"hung: waiting for {what}, the run used {watch.used_s():.2f} s of CPU in "
                                 f"{idle:.0f} s; its processes, each Python one sent SIGABRT:\n"
                                 + "\n".join(named) + f"\ntheir output and stacks:\n{said}")


def logged_step(out_dir) -> int:
    """The newest update a run in ``out_dir`` logged to its dllogger.json (0: none yet)."""
    from bart.records.dllogger_compat import read_dllogger

    try:
        return max([r["step"] for r in read_dllogger(os.path.join(out_dir, "dllogger.json"))
                    if r["type"] == "LOG" and isinstance(r["step"], int)] or [0])
    except (FileNotFoundError, ValueError):
        return 0


class Watched:
    """A real process whose merged stdout/stderr lines are read as they come. ``forked``: a Python command forked from
    the test's process (``tests.helpers.forked.popen_python``: no interpreter start-up), for a script the test
    signals or watches; a launcher (torchrun, ``utils.launch``) is started as itself."""

    def __init__(self, cmd, forked: bool = False, **kwargs):
        from tests.helpers.forked import popen_python

        self.mark = uuid.uuid4().hex
        start = popen_python if forked else subprocess.Popen
        self.proc = start(cmd, cwd=ROOT, env=_env(TOKENIZERS_PARALLELISM="false", **{MARK: self.mark}),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")))
        self._reader.start()

    def wait_for(self, text):
        wait_for(lambda: any(text in line for line in self.lines), self.proc, repr(text), lambda: "".join(self.lines))

    def finish(self, timeout=None) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            under = hang_watch.descendants(self.proc.pid)  # (a forked process's children carry no mark)
            self.proc.kill()
            for pid in under + _marked(self.mark):  # its children (torchrun's ranks run in sessions of their own)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._reader.join(timeout=10)
        return code, "".join(self.lines)


def ours(output: str, script: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"{script}: ")]
