#!/usr/bin/env python3
"""BART denoising pretraining on LDDL Parquet shards.

The checkout's entry script; installed, the same program is ``bart-pretrain``. Its code is ``bart/cli/pretrain.py``."""
from bart.cli.pretrain import console_main, main, parse_args  # noqa: F401  (notebooks and tests import pretrain)

if __name__ == "__main__":
    console_main()
