"""An entry script forked from the test's process (tests/helpers/forked.py) ends as the same command does in a fresh
interpreter: the same exit code, stdout and stderr, environment and working folder; the tests that run scripts this
way rest on it."""
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from tests.helpers.forked import run_python

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
