"""How the entry scripts end. A user's mistake (a bad flag or config value, a missing file, an
unreadable checkpoint, a hub id that cannot be resolved) is one line on stderr and exit code 2; a run
that stopped itself (non-finite losses, the fp16 loss scale at its floor, a collective that timed
out, a stop signal after its checkpoint) is one line and its own exit code (``utils.errors``); a
programming error keeps its traceback."""
from __future__ import annotations

import errno
import sys

from bart.data import DataError
from bart.hub import HubResolutionError
from utils.errors import EXIT_DIST_TIMEOUT, EXIT_USER_ERROR, RunStopped, UserError, one_line
from utils.metric_writers import MetricWriterError

USER_ERRORS = (UserError, HubResolutionError, DataError, MetricWriterError, FileNotFoundError, IsADirectoryError,
               NotADirectoryError, PermissionError)
# OS errors that are the machine's state, not a bug: a full disk or quota, a read-only file system
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


def is_collective_timeout(err: RuntimeError) -> bool:
    """A torch.distributed collective (gloo or NCCL; DistBackendError is a RuntimeError) that gave up
    waiting for another rank."""
    import torch.distributed as dist

    text = str(err).lower()
    timeout_words = ("timed out", "timeout", "connection closed by peer", "connection reset by peer",
                     "broken pipe", "watchdog")
    return dist.is_available() and dist.is_initialized() and any(w in text for w in timeout_words)


def run_main(main, script: str) -> None:
    from bart.generation import GenerationOptionError

    try:
        main()
    except (*USER_ERRORS, GenerationOptionError) as err:
        print(f"{script}: error: {one_line(err)}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except RunStopped as err:
        print(f"{script}: stopped: {one_line(err)}", file=sys.stderr)
        sys.exit(err.exit_code)
    except OSError as err:
        if err.errno not in _ENVIRONMENT_ERRNOS:
            raise
        print(f"{script}: error: {one_line(err)} (free space or write access is needed; nothing half-written "
              f"was left under a checkpoint's name)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except RuntimeError as err:
        if not is_collective_timeout(err):
            raise
        from utils import distributed as dist_utils
        print(f"{script}: stopped: rank {dist_utils.rank()} of {dist_utils.world_size()}: a collective operation "
              f"failed waiting for the other ranks ({one_line(err)[:300]}); another rank hung or died: see its "
              f"log; raise --dist_timeout if a step legitimately takes longer", file=sys.stderr)
        sys.exit(EXIT_DIST_TIMEOUT)
