"""An entry script forked from the test's process (tests/helpers/forked.py) ends as the same command does in a fresh
interpreter: the same exit code, stdout and stderr, environment and working folder; the tests that run scripts this
way rest on it."""
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import ROOT, signal_masks
from tests.helpers.forked import _forkable, fork_ranks, popen_python, run_python
from tests.helpers.ports import free_port

COMMANDS = {
    "help": ["run_eval.py", "--help"],
    "a user's mistake": ["run_eval.py", "no_such_model", "tiny", "no_such_data", "out"],
    "an unknown flag": ["finetune.py", "--no_such_flag", "1"],
    "a module": ["-m", "bart.training.checkpoint", "best", "no_such_folder"],
    "code that fails": ["-c", "import os, sys; print(os.getcwd(), os.environ['PROBE'], sys.argv); raise KeyError('k')",
                        "x"],
    "code that exits": ["-c", "import sys; sys.stderr.write('bye\\n'); sys.exit('a message')"],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_forked_command_ends_as_in_a_fresh_interpreter(name, tmp_path):
    argv = [sys.executable, *COMMANDS[name]]
    argv = [os.path.join(ROOT, a) if a.endswith(".py") else a for a in argv]
    env = dict(os.environ, PYTHONPATH=ROOT, PROBE="seen", OMP_NUM_THREADS="1")
    fresh = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    forked = run_python(argv, env=env, cwd=tmp_path, timeout=300)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)
    assert forked.stderr.splitlines()[-3:] == fresh.stderr.splitlines()[-3:]
    assert ("Traceback" in forked.stderr) == ("Traceback" in fresh.stderr)


def test_a_forked_command_is_killed_at_its_timeout():
    with pytest.raises(subprocess.TimeoutExpired):
        run_python([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)


def test_a_forked_command_can_write_both_streams_into_one_as_a_log_file_gets_them(tmp_path):
    """``stderr_to_stdout``: the lines of both streams in the order written, as ``stderr=subprocess.STDOUT`` gives."""
    code = "import sys\nfor i in range(3):\n    print('out', i)\n    print('err', i, file=sys.stderr)\nsys.exit(3)"
    argv = [sys.executable, "-c", code]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")  # the fresh one's lines as they come, too
    fresh = subprocess.run(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=300)
    forked = run_python(argv, env=env, cwd=tmp_path, timeout=300, stderr_to_stdout=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (3, fresh.stdout, "")
    assert forked.stdout.splitlines() == ["out 0", "err 0", "out 1", "err 1", "out 2", "err 2"]


# short sleeps: a signal is taken within 0.1 s wherever it lands (one that lands after CPython's last check for
# signals and before a long sleep starts would wait for that sleep's end)
WAITS = "import time\nprint('ready', flush=True)\nfor _ in range(1200):\n    time.sleep(0.1)"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_forked_process_a_signal_stops_ends_as_a_fresh_one(sig):
    """popen_python: the process a test signals while it runs ends as a fresh interpreter does (SIGTERM: killed by
    it; Ctrl-C: KeyboardInterrupt's traceback, then killed by SIGINT), and in a session of its own when asked. A
    process that starts with the signal ignored or blocked fails at once, naming what it inherited (loaded runs saw
    the fresh one sleep through Ctrl-C until the hang watch ended it)."""
    ended = {}
    for name, start in (("fresh", subprocess.Popen), ("forked", popen_python)):
        here = signal_masks.held(signals=[sig])
        proc = start([sys.executable, "-c", WAITS], env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert proc.stdout.readline() == "ready\n" and os.getsid(proc.pid) == proc.pid
        held = signal_masks.held(proc.pid, [sig])
        if held:
            proc.kill()
            proc.communicate()
        assert not held, (f"the {name} process started with {held} (this process before starting it: {here}, "
                          f"now: {signal_masks.held(signals=[sig])})")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=None)
        ended[name] = (proc.returncode, out, err.strip().splitlines()[-1:])
    assert ended["forked"] == ended["fresh"] == (-sig, "", ["KeyboardInterrupt"] if sig == signal.SIGINT else [])


RANK_ENV = ("import os, sys, torch.distributed as dist; dist.init_process_group('gloo'); "
            "names = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'ROLE_RANK', "
            "'ROLE_WORLD_SIZE', 'GROUP_WORLD_SIZE', 'TORCHELASTIC_RESTART_COUNT', 'MASTER_ADDR'); "
            "os.write(1, f'rank {dist.get_rank()} {[os.environ[n] for n in names]}\\n'.encode()); dist.barrier(); "
            "dist.destroy_process_group(); sys.exit(3 if os.environ.get('FAIL') == os.environ['RANK'] else 0)")


def test_forked_ranks_get_what_torchrun_gives_its_workers(tmp_path):
    """fork_ranks: the ranks' variables and their process group as under torchrun; a failing rank fails the launch.
    Each rank writes its line in one write, so the two ranks' lines on one pipe do not interleave."""
    from tests.helpers.processes import run_ranks

    (tmp_path / "ranks.py").write_text(RANK_ENV)
    argv = [sys.executable, str(tmp_path / "ranks.py")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    code, forked = fork_ranks(2, argv, env=env, cwd=tmp_path)
    real_code, real = run_ranks([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                                 f"--master_port={free_port()}", str(tmp_path / "ranks.py")])
    assert code == real_code == 0, forked + real
    ranks = sorted(line for line in forked.splitlines() if line.startswith("rank "))
    assert ranks == sorted(line for line in real.splitlines() if line.startswith("rank ")), forked + real
    assert len(ranks) == 2, forked
    code, out = fork_ranks(2, argv, env=dict(env, FAIL="1"), cwd=tmp_path)
    assert code == (3 if _forkable(env) else 1), out  # the failing rank's code; torchrun's own 1 where not forked


SILENT_RANK = """import os, sys, time
print('rank', os.environ['RANK'], 'started', flush=True)
if os.environ['RANK'] == '1':
    if sys.argv[1] == 'idle':
        time.sleep(600)
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:  # work that prints nothing (an inductor compile)
        pass
print('rank', os.environ['RANK'], 'done', flush=True)
"""


def test_a_launch_is_hung_when_silent_and_idle_not_when_silent_and_busy(tmp_path):
    """fork_ranks' hang rule (hang_watch.IdleWatch, as run_ranks' and wait_for's): a rank that prints nothing for
    longer than the stall budget but computes is not hung (on a loaded machine an inductor compile prints nothing for
    minutes); one that prints nothing and sleeps is, named within the budget with its stack. Rules out: a launch
    silent for the budget was taken for a hung one, however busy."""
    (tmp_path / "ranks.py").write_text(SILENT_RANK)
    argv, stall = [sys.executable, str(tmp_path / "ranks.py")], 2.0
    code, out = fork_ranks(2, [*argv, "busy", str(3 * stall)], env=dict(os.environ, OMP_NUM_THREADS="1"),
                           cwd=tmp_path, stall_s=stall)
    assert code == 0 and out.count(" done") == 2, out
    with pytest.raises(AssertionError, match=r"hung: no rank of .* printed anything for \d+ s and they used "
                                             r"0\.\d\d s of CPU") as hung:
        fork_ranks(2, [*argv, "idle", "0"], env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=tmp_path, stall_s=stall)
    assert "in <module>" in str(hung.value) and "rank 1 started" in str(hung.value)  # rank 1's stack, its lines


def test_a_forked_command_releases_its_run_lock_after_one_held_here(tmp_path):
    """A script forked after this process took and released a run lock (which installed bart.runtime.run_lock's exit
    hooks here, once per process) installs its own and releases its lock at exit, as a fresh interpreter does."""
    from bart.runtime import run_lock

    run_lock.acquire(str(tmp_path / "here")).release()
    code = "import sys; from bart.runtime import run_lock; run_lock.acquire(sys.argv[1]); print('held')"
    done = run_python([sys.executable, "-c", code, str(tmp_path / "child" / "out")], cwd=ROOT,
                      env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert (done.returncode, done.stdout) == (0, "held\n"), done.stderr
    assert not (tmp_path / "child").exists()  # released: the folders it made, empty, went with its lock


def test_no_fork_where_this_process_holds_cuda(monkeypatch):
    """A process that initialized CUDA (a GPU test before) cannot hand it to a forked child: the command runs in a
    new interpreter instead, as it would without forking."""
    import torch

    env = dict(os.environ, OMP_NUM_THREADS="1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("BART_TESTS_FORK", raising=False)  # forking on (BART_TESTS_FORK=0 turns it off for a run)
    assert _forkable(env)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert not _forkable(env)
    done = run_python([sys.executable, "-c", "import sys; print('torch' in sys.modules)"], env=env)
    assert (done.returncode, done.stdout) == (0, "False\n")  # a new interpreter: no torch held from this process
