#!/usr/bin/env python3
"""Fine-tune BART for summarization (or translation) on {train,val,test}.source/.target files.

The checkout's entry script; installed, the same program is ``bart-finetune``. Its code is ``bart/cli/finetune.py``."""
from bart.cli.finetune import console_main, main, parse_args  # noqa: F401  (notebooks and tests import finetune)

if __name__ == "__main__":
    console_main()
