"""One run per output folder: a lock file the run's main process holds, and a check that what the run
wrote there is still there.

:func:`acquire` creates ``FOLDER/run.lock`` with ``O_CREAT | O_EXCL`` (atomic on local file systems and on
NFS) holding the holder's host, pid, process start time, when it started and its command line. While it is
held a daemon thread refreshes the file's modification time every ``heartbeat_s`` seconds; it is removed
at exit (normal or by an exception, through ``atexit``; SIGTERM/SIGHUP where they would otherwise kill the
process at once; a folder the lock created and that is left empty goes with it). A second run finds the
file and decides:

- the holder is alive: :class:`RunLockBusy`, one line naming it (host, pid, since when, its command) and
  the fix;
- the holder is dead: the lock is stale, reported in one line (``notify``) and taken over. On the same
  machine (hostname, kernel boot id and pid namespace all equal) the pid is checked, and a pid that now
  belongs to a younger process (its start time differs) is dead too. From another machine (or container)
  the pid cannot be checked: the file's modification time is watched for ``observe_s`` seconds (opened
  afresh each time, so NFS's attribute cache does not hide a change); a heartbeat means alive, none means
  stale. A lock file copied along with its folder (another folder on the same machine) is stale.

The same process taking the same folder again gets the lock it holds (runs started in-process one after
the other). SIGKILL, a power loss or a node failure leave the file behind: that is the stale case.

:class:`RunFolderWatch` says what of a run's files has gone from its folder (deleted or moved away while
the run was writing there), for the training loop to stop on instead of re-creating a folder that holds
only checkpoints. Nothing here knows what a run is beyond folder and file names.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import json
import os
import shlex
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable

from bart.errors import UserError
from bart.records.redact import mask_command

LOCK_NAME = "run.lock"
HEARTBEAT_S = 10.0   # how often the holder refreshes the lock file's modification time
OBSERVE_S = 25.0     # how long a lock held from another machine is watched for that heartbeat


class RunLockBusy(UserError):
    """The folder is held by another live run; the message names it and the fix."""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux /proc), or None where unreadable."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])  # field 22 of proc(5), counted from the state (field 3)
    except (IndexError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, ended but not yet reaped, counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    text = _read(f"/proc/{pid}/stat")
    return not (text and text.rsplit(")", 1)[-1].split()[:1] == ["Z"])


def machine_identity() -> dict:
    """What makes two processes see the same pids: hostname, kernel boot id and pid namespace."""
    identity = {"host": socket.gethostname(), "boot_id": None, "pid_namespace": None}
    boot = _read("/proc/sys/kernel/random/boot_id")
    identity["boot_id"] = boot.strip() if boot else None
    with contextlib.suppress(OSError):
        identity["pid_namespace"] = os.readlink("/proc/self/ns/pid")
    return identity


def _same_machine(record: dict, here: dict) -> bool:
    return all(record.get(key) == here[key] for key in ("host", "boot_id", "pid_namespace"))


def _folder_identity(folder: str) -> list:
    st = os.stat(folder)
    return [st.st_dev, st.st_ino]


def _clip(text: str, limit: int = 600) -> str:
    """At most ``limit`` characters: the head and the tail (a command's last flags) of a longer text."""
    return text if len(text) <= limit else text[: limit * 2 // 3] + " ... " + text[-(limit // 3):]


def describe(record: dict) -> str:
    """'pid 123 on host node01 (SLURM job 9), running since 2026-01-02 10:00:00 CET, command: python3 ...'"""
    job = f" (SLURM job {record['slurm_job']})" if record.get("slurm_job") else ""
    return (f"pid {record.get('pid')} on host {record.get('host')}{job}, running since {record.get('since')}, "
            f"command: {_clip(str(record.get('command')))}")


def _mtime(path: str) -> float | None:
    """The file's modification time as the file server has it now: opened afresh (NFS revalidates its
    cached attributes on open), None when gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return os.fstat(fd).st_mtime
    finally:
        os.close(fd)


class RunLock:
    """The lock of one folder held by this process; see the module's docstring."""

    def __init__(self, folder: str, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.folder = os.path.abspath(folder)
        self.path = os.path.join(self.folder, LOCK_NAME)
        self.heartbeat_s = heartbeat_s
        self.record: dict = {}
        self.lost: str | None = None  # set by the heartbeat when the file was removed or replaced
        self._created: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- holding it -----------------------------------------------------------------------------------
    def _create(self, command: str) -> bool:
        """Create the lock file with this process's record; False when it exists."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return False
        self.record = {**machine_identity(), "pid": os.getpid(), "process_start": _process_start(os.getpid()),
                       "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "since_epoch": time.time(),
                       "command": command, "slurm_job": os.environ.get("SLURM_JOB_ID"),
                       "folder": self.folder, "folder_id": _folder_identity(self.folder), "token": uuid.uuid4().hex}
        try:
            os.write(fd, (json.dumps(self.record) + "\n").encode())
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.remove(self.path)
            raise
        os.close(fd)
        self.lost = None
        self._start_heartbeat()
        return True

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"run-lock {self.folder}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            if not self.intact():
                self.lost = f"{LOCK_NAME} was removed or replaced by another process"
                return
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def intact(self) -> bool:
        """The lock file is still this process's."""
        text = _read(self.path)
        try:
            return bool(text) and json.loads(text).get("token") == self.record.get("token")
        except ValueError:
            return False

    def release(self) -> None:
        """Remove the lock file if it is still ours, then the folders the lock created if they are empty.
        Only the process that took the lock does anything (a forked child holds no lock)."""
        if self.record.get("pid") != os.getpid():
            return
        self._stop.set()
        if self.intact():
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
        for folder in self._created:  # deepest first
            try:
                os.rmdir(folder)
            except OSError:
                break
        self.record = {}


def _judge(path: str, folder: str, observe_s: float, notify: Callable[[str], None]) -> tuple[dict | None, str]:
    """(record, reason it is stale) of the lock file at ``path``; reason '' when its holder is alive."""
    text, deadline = _read(path), time.time() + 2.0
    while text == "" and time.time() < deadline:  # created this instant, its record not yet written
        time.sleep(0.05)
        text = _read(path)
    if text is None:
        return None, "gone"
    try:
        record = json.loads(text)
        if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or record["pid"] <= 0 \
                or "token" not in record:
            raise ValueError("not a lock record")
    except ValueError:
        return {"token": None, "raw": _clip(text, 80)}, "its content is not a lock record"
    here = machine_identity()
    if _same_machine(record, here):
        pid = int(record["pid"])
        if record.get("folder_id") is not None and record.get("folder_id") != _folder_identity(folder):
            return record, f"it was copied from {record.get('folder')} along with the folder"
        if not _pid_alive(pid):
            return record, "that process is no longer running"
        started = _process_start(pid)
        if record.get("process_start") is not None and started is not None and started != record["process_start"]:
            return record, f"pid {pid} now belongs to another, younger process"
        return record, ""
    where = f"host {record.get('host')}" + (" (another container or boot)" if record.get("host") == here["host"]
                                            else "")
    notify(f"note: [run lock] {path} is held by {describe(record)}; {where} is not this one ({here['host']}), so "
           f"its process cannot be checked from here: watching the lock's heartbeat for up to {observe_s:g} s")
    first, deadline = _mtime(path), time.time() + observe_s
    while time.time() < deadline:
        time.sleep(min(0.5, observe_s / 10))
        now = _mtime(path)
        if now != first:
            return (record, "") if now is not None else (record, "gone")
    return record, f"its heartbeat stopped ({LOCK_NAME} not refreshed for {observe_s:g} s)"


@contextlib.contextmanager
def _guard(folder: str):
    """An advisory lock on the folder itself, so that processes of this machine decide about a stale lock
    one at a time; where the file system does not lock folders (some NFS/Lustre mounts), nothing."""
    try:
        import fcntl
        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the flock


def _take_over(path: str, record: dict) -> bool:
    """Remove the stale lock file ``record`` was read from, unless another process replaced it meanwhile."""
    aside = f"{path}.stale-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True
    text = _read(aside) or ""
    try:
        token = json.loads(text).get("token")
    except (ValueError, AttributeError):
        token = None
    if token != record.get("token"):  # a fresh lock created since it was judged: put it back
        os.rename(aside, path)
        return False
    os.remove(aside)
    return True


_HELD: dict[str, RunLock] = {}
_hooks_installed = False


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def acquire(folder: str, flag: str = "--output_dir", command: str | None = None, notify=_stderr,
            heartbeat_s: float = HEARTBEAT_S, observe_s: float = OBSERVE_S) -> RunLock:
    """Take ``FOLDER/run.lock`` for this process (creating the folder), or raise :class:`RunLockBusy`.
    ``flag``: how the user names the folder (in the message's fix). A stale lock is taken over after one
    ``notify`` line saying whose it was and why it is stale."""
    folder = os.path.abspath(folder)
    held = _HELD.get(folder)
    if held is not None and held.record.get("pid") == os.getpid() and held.intact():
        return held
    lock = RunLock(folder, heartbeat_s)
    missing, parent = [], folder
    while not os.path.isdir(parent) and parent != os.path.dirname(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(folder, exist_ok=True)
    lock._created = missing  # deepest first
    command = command or shlex.join(mask_command([os.path.basename(sys.executable), *sys.argv]))  # no secret flag's value
    for _ in range(10):
        if lock._create(command):
            _register(lock)
            return lock
        with _guard(folder):
            record, stale = _judge(lock.path, folder, observe_s, notify)
            if stale == "gone":
                continue
            if not stale and record.get("pid") == os.getpid() and _same_machine(record, machine_identity()):
                stale = "it is this process's own, left by an earlier run in it"
            if not stale:
                remote = not _same_machine(record, machine_identity())
                raise RunLockBusy(
                    f"{folder} is in use by another run: {describe(record)} (its lock: {lock.path}"
                    + (f"; taken on another machine or container, whose processes cannot be checked from here, "
                       f"but refreshed within the last {observe_s:g} s" if remote else "")
                    + f"). Give this run another {flag}, or wait until that run ends"
                    + (f"; if you know it has ended, remove {lock.path}" if remote else ""))
            if _take_over(lock.path, record):
                whose = describe(record) if "pid" in record else f"content {record.get('raw')!r}"
                notify(f"note: [run lock] taking over {lock.path}, a stale lock of {whose}: {stale}")
    raise RunLockBusy(f"{folder}: could not take {lock.path}: other processes keep taking it; start one run at a time")


def held(folder: str) -> RunLock | None:
    """The lock this process holds on ``folder``, if any."""
    lock = _HELD.get(os.path.abspath(folder))
    return lock if lock is not None and lock.record.get("pid") == os.getpid() else None


def _register(lock: RunLock) -> None:
    global _hooks_installed
    _HELD[lock.folder] = lock
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(release_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _release_and_die)


def _release_and_die(signum, frame) -> None:
    """A signal whose default is to end the process: the locks are released, then it ends as it would have."""
    release_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def held_folders() -> frozenset:
    """The folders whose run lock this process holds."""
    return frozenset(_HELD)


def release_all(keep=frozenset()) -> None:
    """Release every lock this process holds but those of the folders in ``keep`` (at exit: all of them)."""
    for folder, lock in list(_HELD.items()):
        if folder in keep:
            continue
        with contextlib.suppress(OSError):
            lock.release()
        _HELD.pop(folder, None)


class RunFolderWatch:
    """What a run wrote into its folder, checked on demand: ``watch()`` is None while all is there, else a
    sentence saying what went (``files``: a name for the message -> the paths; a name is gone when any of
    its paths is). ``lock``: a :class:`RunLock` whose loss counts too."""

    def __init__(self, folder: str, files: dict[str, Iterable[str]], lock: RunLock | None = None) -> None:
        self.folder = os.path.abspath(folder)
        self.files = {name: [os.path.abspath(p) for p in paths] for name, paths in files.items()}
        self.lock = lock

    def folder_gone(self) -> bool:
        return not os.path.isdir(self.folder)

    def __call__(self, settle_s: float = 0.5) -> str | None:
        found = self._find()
        if found is not None and settle_s > 0 and not self.folder_gone():  # a deletion under way: its end state
            time.sleep(settle_s)
            found = self._find()
        return found

    def _find(self) -> str | None:
        if self.folder_gone():
            return f"the folder {self.folder} was deleted or moved away (with {', '.join(self.files) or 'its files'})"
        listed: dict[str, set | None] = {}  # one listing per folder (a stat per file costs more on NFS/Lustre)
        gone = []
        for name, paths in self.files.items():
            for path in paths:
                parent = os.path.dirname(path)
                if parent not in listed:
                    try:
                        listed[parent] = set(os.listdir(parent))
                    except OSError as err:  # unreadable for another reason: not counted as gone
                        listed[parent] = set() if err.errno in (errno.ENOENT, errno.ENOTDIR) else None
                if listed[parent] is not None and os.path.basename(path) not in listed[parent]:
                    gone.append(name)
                    break
        if self.lock is not None and self.lock.lost and LOCK_NAME not in gone:
            gone.append(LOCK_NAME)
        if not gone:
            return None
        return f"the run's {', '.join(gone)} went missing from {self.folder} (deleted or moved away)"
