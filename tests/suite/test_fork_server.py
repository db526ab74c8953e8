"""tests/helpers/fork_server.py: the ``python`` a shell script runs, forked from a copy of the test's process, ends as
a new interpreter would (exit code, streams, a log file's one position, a stop signal), starts whatever the test's
process did before, and is the real interpreter where a fork cannot stand in for one."""
import os
import subprocess
import threading

import pytest

from tests.helpers.fork_server import fork_server

PARENT = 'import os, sys; print(os.getppid(), sys.argv[1:]); sys.exit(3)'


@pytest.fixture
def python():
    with fork_server() as shim:
        yield shim


def _forked_from_this_process(parent: int) -> bool:
    """Whether a command whose parent was ``parent`` was forked by the fork server: a copy of this process (its
    command line) started by this one. A real interpreter's parent is the shell."""
    try:
        with open(f"/proc/{parent}/stat") as f:
            parent_of_parent = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{parent}/cmdline", "rb") as f, open("/proc/self/cmdline", "rb") as mine:
            return parent_of_parent == os.getpid() and f.read() == mine.read()
    except FileNotFoundError:  # ended: the shell, whose command was an interpreter of its own
        return False


def _bash(script: str, python: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=dict(os.environ, PYTHON=python, OMP_NUM_THREADS="1", **env),
                          capture_output=True, text=True)


def test_a_command_is_forked_from_the_test_and_ends_with_its_exit_code_and_streams(python, tmp_path):
    (tmp_path / "script.py").write_text("import sys\nprint('out', sys.argv[1:])\nprint('err', file=sys.stderr)\n"
                                        "sys.exit(int(sys.argv[1]))\n")
    done = _bash(f'"$PYTHON" -c "{PARENT}" a b; echo "code $?"; cd {tmp_path} && "$PYTHON" script.py 4 x; '
                 'echo "code $?"; "$PYTHON" -m json.tool <<< \'{"k": 1}\'', python)
    lines = done.stdout.splitlines()
    assert lines[1:2] == ["code 3"] and lines[0].endswith(" ['a', 'b']")
    assert _forked_from_this_process(int(lines[0].split()[0]))  # no interpreter started
    assert lines[2:4] == ["out ['4', 'x']", "code 4"] and done.stderr == "err\n"
    assert "".join(lines[4:]).replace(" ", "") == '{"k":1}'  # standard input is the script's


def test_a_log_file_keeps_one_position_across_the_script_and_the_command(python, tmp_path):
    done = _bash(f'{{ echo a; "$PYTHON" -c "print(\'b\')"; echo c; }} > {tmp_path / "log"}', python)
    assert done.returncode == 0 and (tmp_path / "log").read_text() == "a\nb\nc\n"


def test_a_stop_signal_to_the_command_ends_it_as_it_ends_an_interpreter(python, tmp_path):
    """The script waits for the command's first line in a blocking read of a FIFO (not a loop that polls: a command that
    never starts then leaves every process idle, which the hang watch takes for a hang)."""
    out = tmp_path / "out"
    os.mkfifo(out)
    done = _bash(f'"$PYTHON" -c "import time; print(\'ready\', flush=True); time.sleep(600)" > {out} & pid=$!; '
                 f'read -r line < {out}; kill -TERM $pid; wait $pid; echo "$line code $?"', python)
    assert done.stdout == "ready code 143\n", done.stderr  # 128 + SIGTERM, as bash reports an interpreter's


class _TakesTheLock:
    def __init__(self, lock):
        self.lock = lock

    def __del__(self):
        with self.lock:
            pass


def test_a_command_starts_whatever_this_process_holds(tmp_path):
    """This process's main thread keeps, in its per-thread data, an object whose freeing takes a lock that another
    thread holds (as torch's per-thread cache of sharding rules kept a gloo process group whose destructor waits on its
    worker threads). A command forked from a thread other than the main one loses the main thread in the fork and
    frees that data there: it waited forever on a lock no thread of it would release (the hang watch ended it). The
    fork server's commands are forked from its own process, forked from the main thread, and start."""
    lock, release = threading.Lock(), threading.Event()
    holder = threading.Thread(target=lambda: (lock.acquire(), release.wait(), lock.release()), daemon=True)
    holder.start()
    kept = threading.local()
    kept.value = _TakesTheLock(lock)
    try:
        with fork_server() as python:
            done = _bash(f'"$PYTHON" -c "{PARENT}" a; echo "code $?"', python)
            assert done.stdout.splitlines()[1:] == ["code 3"], done
            assert _forked_from_this_process(int(done.stdout.split()[0]))
    finally:
        release.set()
        holder.join()
        del kept.value


def test_where_a_fork_cannot_stand_in_the_real_interpreter_runs(python, tmp_path):
    """A PYTHONPATH folder this process lacks (its modules would be imported in place of the ones held here), an
    interpreter flag: the command runs in a new interpreter, with the same result."""
    (tmp_path / "extra").mkdir()
    done = _bash(f'"$PYTHON" -c "{PARENT}" a; echo "code $?"', python, PYTHONPATH=str(tmp_path / "extra"))
    assert done.stdout.splitlines()[1] == "code 3" and not _forked_from_this_process(int(done.stdout.split()[0]))
    done = _bash(f'"$PYTHON" -u -c "{PARENT}" a; echo "code $?"', python)
    assert done.stdout.splitlines()[1] == "code 3" and not _forked_from_this_process(int(done.stdout.split()[0]))
