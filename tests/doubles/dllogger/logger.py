"""Loggers and backends of the dllogger v1.0.0 double (see ``__init__``): same classes, signatures,
line formats and buffering as ``dllogger/logger.py`` of that tag."""
import atexit
import json
from abc import ABC, abstractmethod
from collections import defaultdict
from datetime import datetime


class Backend(ABC):
    def __init__(self, verbosity):
        self._verbosity = verbosity

    @property
    def verbosity(self):
        return self._verbosity

    @abstractmethod
    def log(self, timestamp, elapsedtime, step, data):
        pass

    @abstractmethod
    def metadata(self, timestamp, elapsedtime, metric, metadata):
        pass


class Verbosity:
    OFF = -1
    DEFAULT = 0
    VERBOSE = 1


class Logger:
    """Sends every record to its backends; a record of ``verbosity`` v reaches backends whose verbosity is
    at least v (metadata reaches all). Flushed at exit."""

    def __init__(self, backends):
        self.backends = backends
        atexit.register(self.flush)
        self.starttime = datetime.now()

    def _now(self):
        timestamp = datetime.now()
        return timestamp, (timestamp - self.starttime).total_seconds()

    def metadata(self, metric, metadata):
        timestamp, elapsed = self._now()
        for backend in self.backends:
            backend.metadata(timestamp, elapsed, metric, metadata)

    def log(self, step, data, verbosity=1):
        timestamp, elapsed = self._now()
        for backend in self.backends:
            if backend.verbosity >= verbosity:
                backend.log(timestamp, elapsed, step, data)

    def flush(self):
        for backend in self.backends:
            backend.flush()


def default_step_format(step):
    return str(step)


def default_metric_format(metric, metadata, value):
    unit = metadata.get("unit", "")
    text = value if value is None else ("{" + metadata["format"] + "}" if "format" in metadata else "{}").format(value)
    return f"{metric} : {text} {unit}"


def default_prefix_format(timestamp):
    return f"DLL {timestamp} - "


class StdOutBackend(Backend):
    """``DLL <datetime> - <step> <metric> : <value> <unit> ...`` printed per record; metadata kept per metric
    (``unit``, ``format``) shapes later lines."""

    def __init__(self, verbosity, step_format=default_step_format, metric_format=default_metric_format,
                 prefix_format=default_prefix_format):
        super().__init__(verbosity=verbosity)
        self._metadata = defaultdict(dict)
        self.step_format = step_format
        self.metric_format = metric_format
        self.prefix_format = prefix_format

    def metadata(self, timestamp, elapsedtime, metric, metadata):
        self._metadata[metric].update(metadata)

    def log(self, timestamp, elapsedtime, step, data):
        metrics = " ".join(self.metric_format(name, self._metadata[name], value) for name, value in data.items())
        print(f"{self.prefix_format(timestamp)}{self.step_format(step)} {metrics}")

    def flush(self):
        pass


class JSONStreamBackend(Backend):
    """``DLLL {json}`` lines into ``filename`` (truncated, or appended to with ``append=True``), through the
    file's buffer: nothing is on disk before ``flush()`` (or a full buffer, or exit)."""

    def __init__(self, verbosity, filename, append=False):
        super().__init__(verbosity=verbosity)
        self._filename = filename
        self.file = open(filename, "a" if append else "w")
        atexit.register(self.file.close)

    def _write(self, record):
        self.file.write(f"DLLL {json.dumps(record)}\n")

    def metadata(self, timestamp, elapsedtime, metric, metadata):
        self._write({"timestamp": str(timestamp.timestamp()), "elapsedtime": str(elapsedtime),
                     "datetime": str(timestamp), "type": "METADATA", "metric": metric, "metadata": metadata})

    def log(self, timestamp, elapsedtime, step, data):
        self._write({"timestamp": str(timestamp.timestamp()), "datetime": str(timestamp),
                     "elapsedtime": str(elapsedtime), "type": "LOG", "step": step, "data": data})

    def flush(self):
        self.file.flush()
