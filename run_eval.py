#!/usr/bin/env python3
"""Generate summaries (or translations) for a data split, score them, and report latency.

The checkout's entry script; installed, the same program is ``bart-run-eval``. Its code is ``bart/cli/run_eval.py``."""
from bart.cli.run_eval import console_main, main, parse_args  # noqa: F401  (notebooks and tests import run_eval)

if __name__ == "__main__":
    console_main()
