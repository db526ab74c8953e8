"""Test double of NVIDIA dllogger, tag v1.0.0 (commit 0540a43971f4a8a16693a9de9de73c1072020769 of
github.com/NVIDIA/dllogger), the version the Dockerfile installs. Written for the tests, not copied;
it behaves as that tag does, including where that is unkind:

- ``init(backends)`` sets the process's one global logger; a second call raises
  ``DLLLoggerAlreadyInitialized`` (the package's spelling, three L's).
- before ``init``, any use of the global logger (``log``, ``metadata``, ``flush``) raises
  ``DLLoggerNotInitialized``.
- ``JSONStreamBackend`` writes through an ordinary buffered file: a line reaches the disk only on
  ``flush()``, a full buffer or at exit (``atexit`` closes the file).
"""
from .logger import (  # noqa: F401
    Backend,
    JSONStreamBackend,
    Logger,
    StdOutBackend,
    Verbosity,
    default_metric_format,
    default_step_format,
)

__version__ = "1.0.0"


class DLLoggerNotInitialized(Exception):
    pass


class DLLLoggerAlreadyInitialized(Exception):
    pass


class NotInitializedObject:
    """Stands for the global logger until ``init``: every attribute access raises."""

    def __getattribute__(self, name):
        raise DLLoggerNotInitialized("DLLogger not initialized. Initialize DLLogger with init(backends) function")


GLOBAL_LOGGER = NotInitializedObject()


def log(step, data, verbosity=Verbosity.DEFAULT):
    GLOBAL_LOGGER.log(step, data, verbosity=verbosity)


def metadata(metric, metadata):
    GLOBAL_LOGGER.metadata(metric, metadata)


def flush():
    GLOBAL_LOGGER.flush()


def init(backends):
    global GLOBAL_LOGGER
    if isinstance(GLOBAL_LOGGER, NotInitializedObject):
        GLOBAL_LOGGER = Logger(backends)
    elif isinstance(GLOBAL_LOGGER, Logger):
        raise DLLLoggerAlreadyInitialized()
    # anything else a caller assigned to GLOBAL_LOGGER is left in place, silently (as v1.0.0 does)
