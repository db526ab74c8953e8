"""The suite's hang watch (tests/helpers/hang_watch.py) in a pytest session of its own, its silence budget cut to 3 s:
a test waiting on a silent child, and a test deadlocked in its own process, fail with the stacks of every process;
a test that computes longer than the budget passes (the budget is on silence, not on time); a process a test leaves
running fails its teardown, named, and is gone after it; one the run started outside any test fails the run at
its end."""
import os
import subprocess
import sys
import time

from tests.helpers import ROOT

INNER = '''
import os, subprocess, sys, threading, time

SLEEPER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"


def test_waits_on_a_silent_child():
    subprocess.run([sys.executable, "-c", SLEEPER, "child.pid"])


def test_deadlocked_in_its_own_process():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def test_computes_longer_than_the_budget():
    end = time.process_time() + 5
    while time.process_time() < end:
        pass


def test_leaves_a_process_running():
    subprocess.Popen([sys.executable, "-c", SLEEPER, "left.pid"], start_new_session=True)
    while not os.path.exists("left.pid") or not open("left.pid").read():
        time.sleep(0.05)
'''


# a process the run starts outside any test (at its start), left running at its end, and not under the run's
# process (its parent ended at once): found by the run's mark in its environment
INNER_CONFTEST = '''
import subprocess, sys

SLEEPER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
DETACH = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1], 'session.pid'])"


def pytest_sessionstart(session):
    subprocess.run([sys.executable, "-c", DETACH, SLEEPER], check=True)
'''


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_hangs_fail_with_every_stack_and_no_process_is_left(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = dict(os.environ, PYTHONPATH=ROOT, BART_TESTS_STALL_S="3")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.helpers.hang_watch", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-p", "no:timeout", "-rA", "test_inner.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 1, out[-4000:] + done.stderr[-2000:]
    assert "FAILED test_inner.py::test_waits_on_a_silent_child" in out, out[-4000:]
    assert "FAILED test_inner.py::test_deadlocked_in_its_own_process" in out, out[-4000:]
    assert "PASSED test_inner.py::test_computes_longer_than_the_budget" in out, out[-4000:]
    assert "ERROR test_inner.py::test_leaves_a_process_running" in out, out[-4000:]
    # the silent child: named, and its own stack (faulthandler on SIGABRT) where it sleeps
    child = int((tmp_path / "child.pid").read_text())
    assert "hung: test_inner.py::test_waits_on_a_silent_child" in out and f"pid {child} " in out, out[-4000:]
    assert 'File "<string>", line 1 in <module>' in out, out[-4000:]
    # the deadlock: interrupted where it waits, its thread's stack in the failure
    assert "hung: test_inner.py::test_deadlocked_in_its_own_process" in out, out[-4000:]
    assert "in test_deadlocked_in_its_own_process" in out, out[-4000:]
    # the process left running: named, killed
    left = int((tmp_path / "left.pid").read_text())
    assert f"the test left these processes running after its teardown (now killed):\npid {left}: " in out, out[-4000:]
    # the process started outside any test: named at the run's end, killed
    session = int((tmp_path / "session.pid").read_text())
    assert f"the test run left these processes running (now killed):\npid {session}: " in out, out[-4000:]
    deadline = time.monotonic() + 30
    while not all(map(_gone, (left, child, session))) and time.monotonic() < deadline:  # reaped by init
        time.sleep(0.1)
    assert _gone(left) and _gone(child) and _gone(session)
