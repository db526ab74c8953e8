"""dllogger output: the real ``dllogger`` package when importable, else a writer of the same format.

JSON lines look like ``DLLL {"timestamp": ..., "datetime": ..., "elapsedtime": ..., "type": "LOG",
"step": ..., "data": {...}}`` (and ``"type": "METADATA"`` lines); stdout lines like
``DLL 2026-01-01 12:00:00.000000 - 10 loss : 2.5 lr : 0.001``. Only rank 0 writes. Every line
reaches the file as it is logged (the real package's JSON backend buffers; it is flushed after each
record), and records with a step also go to the metric writers (TensorBoard, W&B) added with
:meth:`Logger.add_writers`.

With the package (NVIDIA dllogger v1.0.0 as the Dockerfile installs it), each :class:`Logger` owns a
``dllogger.Logger`` with its own backends, so a process may open any number of them (training, then a
test split, then evaluation); the package's global logger (``dllogger.init``, which raises on a second
call) is never touched here and stays the user's to initialise. :meth:`Logger.close` closes the file and the
metric writers (TensorBoard's writer thread, the W&B run) and takes back the package's exit hooks; an entry script run
from Python (``bart.cli.exits.run_entry``) closes the loggers its run opened, whether it ended well or not
(:func:`close_all`), so a notebook that runs one training after another keeps no file or thread of the earlier ones.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import time
from datetime import datetime
from typing import Any


def _make_parent(path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


class _JsonLines:
    def __init__(self, path: str, append: bool = False) -> None:
        _make_parent(path)
        self.file = open(path, "a" if append else "w", encoding="utf-8")
        self.start = time.time()

    def write(self, record: dict) -> None:
        now = time.time()
        record = {"timestamp": str(now), "datetime": str(datetime.fromtimestamp(now)),
                  "elapsedtime": str(now - self.start), **record}
        self.file.write("DLLL " + json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _format(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


_OPEN: list = []  # the loggers of this process not closed yet (rank 0's), oldest first


def open_loggers() -> tuple:
    """The loggers this process opened and has not closed."""
    return tuple(_OPEN)


def close_all(keep=()) -> None:
    """Close every open logger but those in ``keep``."""
    for logger in [lg for lg in _OPEN if lg not in keep]:
        logger.close()


class Logger:
    """``log(step, data)``, ``metadata(name, meta)``, ``flush()``; rank != 0 is silent."""

    def __init__(self, json_path: str | None = None, rank: int = 0, stdout: bool = True, append: bool = False,
                 use_dllogger: bool | None = None) -> None:
        self.enabled = rank == 0
        self._dll = None
        self._json = None
        self.stdout = stdout
        self.writers: list = []
        if not self.enabled:
            return
        _OPEN.append(self)
        dllogger = _real_dllogger()
        if use_dllogger and dllogger is None:
            raise ImportError("use_dllogger=True, but no dllogger package (NVIDIA dllogger) is importable")
        if use_dllogger is None:
            use_dllogger = dllogger is not None
        if use_dllogger:
            backends = []
            if json_path:
                _make_parent(json_path)
                backends.append(dllogger.JSONStreamBackend(dllogger.Verbosity.VERBOSE, json_path, append=append))
            if stdout:
                backends.append(dllogger.StdOutBackend(dllogger.Verbosity.VERBOSE))
            self._dll = dllogger.Logger(backends)  # this logger's own: dllogger.init works once per process
        elif json_path:
            self._json = _JsonLines(json_path, append)

    def log(self, step, data: dict) -> None:
        if not self.enabled:
            return
        data = {k: (v.item() if hasattr(v, "item") else v) for k, v in data.items()}
        if isinstance(step, int):
            for writer in self.writers:
                writer.scalars(step, data)
        if self._dll is not None:
            self._dll.log(step, data)
            self._dll.flush()  # its JSON backend buffers: a killed run would lose the last lines
            sys.stdout.flush()
            return
        if self._json is not None:
            self._json.write({"type": "LOG", "step": step, "data": data})
        if self.stdout:
            step_text = " ".join(str(s) for s in step) if isinstance(step, (tuple, list)) else str(step)
            items = " ".join(f"{k} : {_format(v)}" for k, v in data.items())
            print(f"DLL {datetime.now()} - {step_text} {items}", file=sys.stdout, flush=True)

    def add_writers(self, writers: list) -> None:
        """Metric writers (see :mod:`bart.records.metric_writers`) that receive every record with a step."""
        if self.enabled:
            self.writers.extend(writers)

    def text(self, name: str, text: str) -> None:
        """A block of text (the run's configuration) for the metric writers."""
        for writer in self.writers:
            writer.text(name, text)

    def metadata(self, name: str, meta: dict) -> None:
        if not self.enabled:
            return
        if self._dll is not None:
            self._dll.metadata(name, meta)
            self._dll.flush()
        elif self._json is not None:
            self._json.write({"type": "METADATA", "metric": name, "metadata": meta})

    def flush(self) -> None:
        if self._dll is not None:
            self._dll.flush()

    def close(self) -> None:
        if self in _OPEN:
            _OPEN.remove(self)
        for writer in self.writers:
            try:
                writer.close()
            except Exception as err:  # noqa: BLE001 - a run's end (its cleanup, a failed run's) goes on: one line
                print(f"note: the run's {type(writer).__name__} did not close: {type(err).__name__}: {err}",
                      file=sys.stderr, flush=True)
        self.writers = []
        if self._json is not None:
            self._json.close()
            self._json = None
        elif self._dll is not None:
            # the package flushes its loggers and closes its files at exit: done now, and the hooks taken
            # back (a flush of a closed file at exit would fail; the hooks would keep every logger alive)
            self._dll.flush()
            for backend in self._dll.backends:
                file = getattr(backend, "file", None)
                if file is not None:
                    file.close()
                    atexit.unregister(file.close)
            atexit.unregister(self._dll.flush)
            self._dll = None


def _real_dllogger():
    try:
        import dllogger
        return dllogger if all(hasattr(dllogger, name) for name in ("Logger", "JSONStreamBackend", "StdOutBackend")) \
            else None
    except ImportError:
        return None


def read_dllogger(path: str) -> list[dict]:
    """All records of a dllogger JSON file, in order; other lines are skipped."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no dllogger log at {path}")
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.startswith("DLLL "):
                try:
                    records.append(json.loads(line[5:]))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{number} is not a dllogger JSON line ({err})") from err
    return records


def drop_records_after(path: str, step: int) -> int:
    """Keep a resumed run's log continuous: remove the LOG lines of steps after ``step`` (written by the
    run that was interrupted after its last checkpoint, and about to be written again) and any line
    cut off by a kill. Rewritten atomically; returns the number of lines removed."""
    if not os.path.isfile(path):
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("DLLL "):
                try:
                    record = json.loads(line[5:])
                except json.JSONDecodeError:
                    dropped += 1  # a line cut off by the kill
                    continue
                record_step = record.get("step")
                if isinstance(record_step, int) and record_step > step:
                    dropped += 1
                    continue
            kept.append(line if line.endswith("\n") else line + "\n")
    if dropped:
        from bart.files.checkpoint_io import (
            atomic_write_text,  # imports torch: only when there is work
        )

        atomic_write_text(path, "".join(kept))
    return dropped
