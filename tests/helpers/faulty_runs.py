"""An entry script run forked (tests/helpers/forked.py), optionally under an injected write fault
(tests/helpers/write_faults.py), and the one line it must end with: what the full-disk and damaged-shard tests share."""
import os
import sys

from tests.helpers import ROOT
from tests.helpers.forked import run_python


def run(args, timeout=None):
    """``python ARGS`` in the checkout, forked (no total budget by default: a hang fails by the suite's silence rule,
    tests/helpers/hang_watch.py)."""
    return run_python([sys.executable, *args], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1"),
                      timeout=timeout)


def one_line(stderr: str, prefix: str) -> str:
    """The run's last stderr line, which must be its only line starting with ``prefix``; no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1 and stderr.rstrip().endswith(lines[0]), stderr[-3000:]
    return lines[0]


def faulty(mode: str, argv: list) -> list:
    """``argv`` run under write_faults' MODE."""
    return ["-m", "tests.helpers.write_faults", mode, *argv]
