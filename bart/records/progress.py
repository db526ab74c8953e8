"""Progress of long work (training, validation, evaluation, preprocessing, data conversion): one
implementation for all of them.

In a terminal it is a live tqdm bar. When the stream is not a terminal (a log file, a SLURM job,
a pipe) it is plain lines, with no control characters, at most every ``PROGRESS_INTERVAL_S``
seconds (default 30) plus at every tenth of the total and at the end::

    [train] 40/100 steps (40%) | 3.21 steps/s | elapsed 0:00:12 | ETA 0:00:18 | loss=4.1

``PROGRESS=bar|lines|off`` overrides the automatic choice. Only the process that is given
``enabled=True`` (rank 0) writes anything.
"""
from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable
from typing import TextIO

MODES = ("auto", "bar", "lines", "off")


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` (days spelled ``Nd H:MM:SS``); ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{days}d {text}" if days else text


def _mode(requested: str, stream: TextIO) -> str:
    mode = os.environ.get("PROGRESS", requested) if requested == "auto" else requested
    if mode not in MODES:
        raise ValueError(f"PROGRESS={mode!r}: choose one of {', '.join(MODES)}")
    if mode == "auto":
        isatty = getattr(stream, "isatty", None)
        mode = "bar" if isatty is not None and isatty() else "lines"
    if mode == "bar":
        try:
            import tqdm  # noqa: F401
        except ImportError:
            mode = "lines"
    return mode


class Progress:
    """``update(n, **postfix)``, ``set_postfix(**values)``, ``close()``; a context manager.

    ``total`` may be None (no percentage nor ETA). ``initial``: work already done (a resumed run);
    rates and the ETA count only the work done by this process."""

    def __init__(self, total: int | None, desc: str, unit: str = "step", initial: int = 0,
                 enabled: bool = True, stream: TextIO | None = None, mode: str = "auto",
                 interval_s: float | None = None, leave: bool = True) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = self._start_n = initial
        self.stream = stream or sys.stderr
        self.mode = _mode(mode, self.stream) if enabled else "off"
        self.interval_s = float(os.environ.get("PROGRESS_INTERVAL_S", 30)) if interval_s is None else interval_s
        self.postfix: dict = {}
        self._start = self._last_print = time.perf_counter()
        self._last_tenth = self._tenth(initial)
        self.leave = leave  # lines mode, False (work nested in other work): no start line nor tenths
        self._bar = None
        self._closed = False
        if self.mode == "bar":
            from tqdm import tqdm
            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True,
                             file=self.stream, leave=leave)
        elif self.mode == "lines" and leave:
            self._print(start=True)

    # -- the lines mode ---------------------------------------------------------------------
    def _tenth(self, n: int) -> int:
        return int(10 * n / self.total) if self.total else 0

    def line(self, start: bool = False) -> str:
        """The plain progress line for the current state."""
        elapsed = time.perf_counter() - self._start
        done = self.n - self._start_n
        rate = done / elapsed if elapsed > 0 and done > 0 else float("nan")
        units = _plural(self.unit)
        if self.total:
            count = f"{self.n}/{self.total} {units} ({100 * self.n / self.total:.0f}%)"
            remaining = (self.total - self.n) / rate if rate == rate and rate > 0 else float("nan")
            eta = f"ETA {format_duration(remaining)}"
        else:
            count, eta = f"{self.n} {units}", None
        parts = [f"[{self.desc}] {count}"]
        if start:
            parts.append("starting")
        else:
            parts.append(f"{_rate(rate)} {units}/s" if rate == rate else f"? {units}/s")
            parts.append(f"elapsed {format_duration(elapsed)}")
            if eta:
                parts.append(eta)
        if self.postfix:
            parts.append(" ".join(f"{k}={_value(v)}" for k, v in self.postfix.items()))
        return " | ".join(parts)

    def _print(self, start: bool = False) -> None:
        print(self.line(start), file=self.stream, flush=True)
        self._last_print = time.perf_counter()

    # -- the interface ----------------------------------------------------------------------
    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._start

    def update(self, n: int = 1, **postfix) -> None:
        self.n += n
        if postfix:
            self.postfix.update(postfix)
        if self.mode == "bar":
            if postfix:
                self._bar.set_postfix({k: _value(v) for k, v in self.postfix.items()}, refresh=False)
            self._bar.update(n)
        elif self.mode == "lines":
            tenth = self._tenth(self.n)
            finished = self.total is not None and self.n >= self.total
            new_tenth = self.leave and tenth > self._last_tenth
            if finished or new_tenth or time.perf_counter() - self._last_print >= self.interval_s:
                self._last_tenth = tenth
                if not finished:  # the final line is close()'s
                    self._print()

    def set_postfix(self, **values) -> None:
        self.postfix.update(values)
        if self.mode == "bar":
            self._bar.set_postfix({k: _value(v) for k, v in self.postfix.items()})

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.mode == "bar":
            self._bar.close()
        elif self.mode == "lines":
            self._print()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track(iterable: Iterable, desc: str, total: int | None = None, unit: str = "item", **kwargs):
    """Iterate ``iterable`` with a :class:`Progress` (total: ``len(iterable)`` when it has one)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    with Progress(total, desc, unit=unit, **kwargs) as progress:
        for item in iterable:
            yield item
            progress.update(1)


def _plural(unit: str) -> str:
    if unit.endswith("s"):
        return unit
    if unit.endswith("y") and unit[-2:-1] not in tuple("aeiou"):
        return unit[:-1] + "ies"  # story → stories
    return unit + ("es" if unit.endswith(("x", "ch", "sh")) else "s")


def _rate(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
