"""``python`` for the shell scripts a test runs (their ``$PYTHON``), each command forked from the test's process,
which has torch, transformers and the package imported already: a real process (its own pid, exit code, standard
streams, environment, working folder, signals) without the 3-4 CPU-seconds of an interpreter's start-up.

    with fork_server() as python:
        subprocess.run(["bash", "scripts/run_summarization.sh", ...], env=dict(env, PYTHON=python), ...)

``python`` is a small script (Python without ``site``: milliseconds to start) that hands its arguments, environment,
working folder and standard streams (the descriptors themselves: a log file a script appends to stays one file
position) to this process over a Unix socket; a thread here forks the command, which starts as
:func:`tests.helpers.forked.run_python`'s does, and the script waits for it, passes on the stop signals it gets
(SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2) and ends with the command's exit code (or its signal). Where a fork would
not start the command as a new interpreter would (``forked.py``'s rule: OMP_NUM_THREADS=1, no process group held, no
PYTHONPATH folder this process lacks) or the command is not ``SCRIPT``, ``-m MODULE`` or ``-c CODE`` (an interpreter
flag, ``-`` or nothing: standard input), the script becomes the real interpreter (``exec``) instead. Use it where a
test is about what the scripts do, not about how a fresh interpreter starts.
"""
import contextlib
import json
import os
import socket
import struct
import sys
import tempfile
import threading

from tests.helpers import forked
from tests.helpers.forked import _forkable

_SHIM = r'''#!{python} -IS
import json, os, signal, socket, struct, sys
real = {python!r}
try:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.connect({path!r})
except OSError:
    os.execv(real, [real] + sys.argv[1:])
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
try:
    socket.send_fds(server, [struct.pack("!Q", len(request))], [0, 1, 2])
    server.sendall(request)
except OSError:  # a standard stream closed
    os.execv(real, [real] + sys.argv[1:])
reply = server.makefile("r")
first = reply.readline().split()
if not first or first[0] != "pid":
    server.close()
    os.execv(real, [real] + sys.argv[1:])
pid = int(first[1])
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, lambda signum, frame: os.kill(pid, signum))
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
    """The ``python`` (a path) whose commands this process forks, while the ``with`` lasts."""
    with tempfile.TemporaryDirectory(prefix="fork-server-") as folder:
        path = os.path.join(folder, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(16)
        shim = os.path.join(folder, "python")
        with open(shim, "w") as f:
            f.write(_SHIM.format(python=sys.executable, path=path))
        os.chmod(shim, 0o755)
        stop = threading.Event()
        accepting = threading.Thread(target=_accept, args=(listener, stop), daemon=True, name="fork-server")
        accepting.start()
        try:
            yield shim
        finally:
            stop.set()
            listener.close()
            with contextlib.suppress(OSError):  # wake accept()
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(path)
            accepting.join(timeout=5)


def _accept(listener, stop) -> None:
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        if stop.is_set():
            conn.close()
            return
        threading.Thread(target=_serve, args=(conn,), daemon=True, name="fork-server-command").start()


def _serve(conn) -> None:
    with conn:
        try:
            header, fds, _, _ = socket.recv_fds(conn, 8, 3)
        except OSError:
            return
        try:
            size = struct.unpack("!Q", header)[0]
            data = b""
            while len(data) < size:
                chunk = conn.recv(size - len(data))
                if not chunk:
                    return
                data += chunk
            request = json.loads(data)
            argv, env, cwd = request["argv"], request["env"], request["cwd"]
            if len(fds) != 3 or not _runnable(argv) or not _forkable(env):
                conn.sendall(b"exec\n")
                return
            pid = os.fork()
            if pid == 0:  # the shim's standard streams, then forked.py's start of a command (never returns)
                forked._child([sys.executable, *argv], env, cwd, None, None, None, fds=tuple(fds))
            conn.sendall(f"pid {pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
        except OSError:
            return
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
