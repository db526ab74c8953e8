"""How the entry scripts end: a user's mistake (a missing file, an unreadable checkpoint, a hub id
that cannot be resolved) is one line on stderr and exit code 2; a programming error keeps its
traceback."""
from __future__ import annotations

import sys

from bart.data import DataError
from bart.hub import HubResolutionError
from utils.checkpoint_io import CheckpointError
from utils.metric_writers import MetricWriterError

USER_ERRORS = (HubResolutionError, CheckpointError, DataError, MetricWriterError, FileNotFoundError,
               IsADirectoryError, NotADirectoryError)


def run_main(main, script: str) -> None:
    try:
        main()
    except USER_ERRORS as err:
        print(f"{script}: error: {err}", file=sys.stderr)
        sys.exit(2)
