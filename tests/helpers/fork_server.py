"""``python`` for the shell scripts a test runs (their ``$PYTHON``), each command forked from a copy of the test's process,
which has torch, transformers and the package imported already: a real process (its own pid, exit code, standard
streams, environment, working folder, signals) without the 3-4 CPU-seconds of an interpreter's start-up.

    with fork_server() as python:
        subprocess.run(["bash", "scripts/run_summarization.sh", ...], env=dict(env, PYTHON=python), ...)

``python`` is a small script (Python without ``site``: milliseconds to start) that hands its arguments, environment,
working folder and standard streams (the descriptors themselves: a log file a script appends to stays one file
position) over a Unix socket to a server process forked from this one when the ``with`` starts (one thread: see
:func:`_server`); it forks the command, which starts as :func:`tests.helpers.forked.run_python`'s does, and the
script waits for it, passes on the stop signals it gets (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2) and ends with the command's exit code (or its signal). Where a fork would
not start the command as a new interpreter would (``forked.py``'s rule: OMP_NUM_THREADS=1, no process group held, no
PYTHONPATH folder this process lacks) or the command is not ``SCRIPT``, ``-m MODULE`` or ``-c CODE`` (an interpreter
flag, ``-`` or nothing: standard input), the script becomes the real interpreter (``exec``) instead. Use it where a
test is about what the scripts do, not about how a fresh interpreter starts.
"""
import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import traceback

from tests.helpers import forked
from tests.helpers.forked import _forkable

_SHIM = r'''#!{python} -IS
import json, os, signal, socket, struct, sys
real = {python!r}
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
held, command = [], []  # a stop signal that came before the command's pid did: passed on once it is known


def forward(signum, frame):
    os.kill(command[0], signum) if command else held.append(signum)


def interpreter():
    # the real interpreter instead, with the dispositions this script started with and the signals held
    for sig, disposition in before.items():
        signal.signal(sig, disposition)
    for sig in held:
        os.kill(os.getpid(), sig)
    os.execv(real, [real] + sys.argv[1:])


before = dict((sig, signal.getsignal(sig)) for sig in STOPS)
for sig in STOPS:  # before the request: the command may start (and be signalled) before its pid reaches this script
    if before[sig] != signal.SIG_IGN:
        signal.signal(sig, forward)
try:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.connect({path!r})
except OSError:
    interpreter()
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
try:
    socket.send_fds(server, [struct.pack("!Q", len(request))], [0, 1, 2])
    server.sendall(request)
except OSError:  # a standard stream closed
    interpreter()
reply = server.makefile("r")
first = reply.readline().split()
if not first or first[0] != "pid":
    server.close()
    interpreter()
command.append(int(first[1]))
for sig in held:
    os.kill(command[0], sig)
while True:
    try:
        line = reply.readline()
        break
    except InterruptedError:
        continue
code = int(line.split()[1]) if line.startswith("exit ") else 1
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
'''


@contextlib.contextmanager
def fork_server():
    """The ``python`` (a path) whose commands are forked from this process's copy, while the ``with`` lasts."""
    with tempfile.TemporaryDirectory(prefix="fork-server-") as folder:
        path = os.path.join(folder, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(16)
        shim = os.path.join(folder, "python")
        with open(shim, "w") as f:
            f.write(_SHIM.format(python=sys.executable, path=path))
        os.chmod(shim, 0o755)
        quit_read, quit_write = os.pipe()  # closed here (or this process gone): the server ends
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        server = os.fork()
        if server == 0:
            os.close(quit_write)
            _server(listener, quit_read)  # never returns
        os.close(quit_read)
        listener.close()
        try:
            yield shim
        finally:
            os.close(quit_write)
            os.waitpid(server, 0)


def _server(listener, quit_read: int) -> None:
    """The server process: forked from the test's main thread, it has one thread, so each command is forked from a
    process in which no other thread holds a lock. (A command forked from a thread of the test's process lost that
    process's main thread in the fork; freeing what the main thread held, a gloo process group in torch's per-thread
    cache, waited forever on a lock another thread held at the fork.) It forks each request's command, tells the
    script its pid and then its exit code; when the test's ``with`` ends, it kills the commands still running."""
    running: dict = {}  # command pid -> its script's connection
    code = 0
    try:
        while True:
            ready, _, _ = select.select([listener, quit_read], [], [], 0.05)
            for pid, conn in list(running.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    with contextlib.suppress(OSError):
                        conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                    conn.close()
                    del running[pid]
            if quit_read in ready:
                break
            if listener in ready:
                conn, _ = listener.accept()
                pid = _start(conn, [listener.fileno(), quit_read, *(c.fileno() for c in running.values())])
                if pid is None:
                    conn.close()
                else:
                    running[pid] = conn
        for pid, conn in running.items():  # the test has gone on: no command outlives its with
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            conn.close()
    except BaseException:  # noqa: BLE001 (the server never returns into the test)
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _start(conn, close: list) -> int | None:
    """The command a script's request names, forked (its pid), or None: the script runs the real interpreter."""
    try:
        header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    except OSError:
        return None
    try:
        size = struct.unpack("!Q", header)[0] if len(header) == 8 else 0
        data = b""
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        if not data:
            return None
        request = json.loads(data)
        argv, env, cwd = request["argv"], request["env"], request["cwd"]
        if len(fds) != 3 or not _runnable(argv) or not _forkable(env):
            conn.sendall(b"exec\n")
            return None
        pid = os.fork()
        if pid == 0:  # the script's standard streams, then forked.py's start of a command (never returns)
            for fd in [*close, conn.fileno()]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            forked._child([sys.executable, *argv], env, cwd, None, None, None, fds=tuple(fds))
        conn.sendall(f"pid {pid}\n".encode())
        return pid
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _runnable(argv: list) -> bool:
    """``SCRIPT ARGS``, ``-m MODULE ARGS`` or ``-c CODE ARGS``: what forked.py's ``_run`` runs."""
    if not argv:
        return False
    if argv[0] in ("-m", "-c"):
        return len(argv) > 1
    return not argv[0].startswith("-")
