"""Scalars and text for TensorBoard (the real ``tensorboard`` package through
``torch.utils.tensorboard.SummaryWriter``) and, when asked for, Weights & Biases.

:class:`bart.records.dllogger_compat.Logger` hands every record it logs with a step to these writers, so
whatever reaches dllogger (training loss, learning rate, validation metrics...) reaches TensorBoard
too. Tags: ``train/<name>`` for training values, ``val/<name>`` for ``val_<name>`` values; ``/`` in
a name becomes ``_per_`` (``seq/s`` → ``train/seq_per_s``). The W&B run's id is kept in the run's folder
(``wandb_run_id``): a resumed run continues the same W&B run.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time


class MetricWriterError(RuntimeError):
    """A writer the user asked for cannot be used (package missing)."""


def scalar_tag(name: str) -> str:
    group = "val" if name.startswith("val_") else "train"
    name = name[4:] if group == "val" else name
    return f"{group}/{name.replace('/', '_per_')}"


def _scalars(data: dict) -> dict:
    return {k: float(v) for k, v in data.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


_EVENT_FILE = re.compile(r"events\.out\.tfevents\.(\d+)\.")


def _after_earlier_event_files(log_dir: str) -> None:
    """Wait, at most a second, until a new event file's name sorts after every earlier one in ``log_dir``. TensorBoard
    reads a folder's files in name order; a name starts with the second the file was made, then the host, the pid and
    a counter of the process's writers, which are not in order (its 10th writer's file sorts before its 9th's). A run
    resumed in the same second as the earlier run's file was made (from Python, in one process) then had its events
    read first, and the earlier run's later steps were not dropped."""
    try:
        seconds = [int(m.group(1)) for name in os.listdir(log_dir) if (m := _EVENT_FILE.match(name))]
    except OSError:  # no folder yet
        return
    wait = max(seconds, default=0) + 1 - time.time()
    if 0 < wait <= 1:  # (a file from a clock ahead of this one's is not waited for)
        time.sleep(wait)


class TensorBoardWriter:
    def __init__(self, log_dir: str, purge_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise MetricWriterError(f"TensorBoard logging needs the tensorboard package ({err}); "
                                    f"pip install tensorboard, or pass --no_tensorboard") from err
        # purge_step: the first step whose events are dropped (TensorBoard drops steps >= it), so a run resumed from
        # step N's checkpoint passes N + 1: it keeps step N's scalars (logged before that checkpoint was written) and
        # drops what the interrupted run wrote after it. It applies to the files read before this one's, in name order
        _after_earlier_event_files(log_dir)
        self.writer = SummaryWriter(log_dir=log_dir, purge_step=purge_step)
        self.log_dir = log_dir

    def scalars(self, step: int, data: dict) -> None:
        for name, value in _scalars(data).items():
            self.writer.add_scalar(scalar_tag(name), value, global_step=step)
        self.writer.flush()

    def text(self, name: str, text: str) -> None:
        self.writer.add_text(name, text)
        self.writer.flush()

    def close(self) -> None:
        # every record was flushed as it was logged, so a write that failed (the folder gone, a full disk) was raised
        # then, where the run said it; the writer's thread raises that failure again at each flush, close's included
        with contextlib.suppress(Exception):
            self.writer.close()


WANDB_RUN_ID = "wandb_run_id"  # in the run's folder: the W&B run's id, so that a resumed run continues it


class WandbWriter:
    """One W&B run per training run: its id is kept in ``run_dir``/``WANDB_RUN_ID`` (written before
    ``wandb.init``), and a resumed run (``resume``) passes that id, so a preemption or requeue goes on with the same
    run's curves instead of starting another. (W&B drops what is logged at a step below the run's last one: the
    steps an interrupted run logged after its checkpoint keep their first values.)"""

    def __init__(self, project: str, run_dir: str, config: dict | None = None, resume: bool = False) -> None:
        try:
            import wandb
        except ImportError as err:
            raise MetricWriterError(f"--wandb_project {project}: the wandb package is not installed "
                                    f"(pip install wandb), or leave the flag out") from err
        self.wandb = wandb
        run_id = self.run_id(run_dir, resume)
        self.run = wandb.init(project=project, dir=run_dir, config=config or {}, id=run_id, resume="allow")

    @staticmethod
    def run_id(run_dir: str, resume: bool) -> str:
        """The id the folder keeps for a resumed run; else a new one, written to the folder first."""
        import secrets

        from bart.files.checkpoint_io import atomic_write_text

        path = os.path.join(run_dir, WANDB_RUN_ID)
        if resume and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                kept = f.read().strip()
            if kept:
                return kept
        if resume:
            print(f"note: {path} is missing: this resumed run starts a new W&B run", file=sys.stderr)
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"  # as W&B's own ids: 8 of these
        run_id = "".join(secrets.choice(alphabet) for _ in range(8))
        os.makedirs(run_dir, exist_ok=True)
        atomic_write_text(path, run_id + "\n")
        return run_id

    def scalars(self, step: int, data: dict) -> None:
        self.run.log({scalar_tag(k): v for k, v in _scalars(data).items()}, step=step)

    def text(self, name: str, text: str) -> None:
        self.run.summary[name] = text

    def close(self) -> None:
        self.run.finish()


def build_writers(tensorboard_dir: str | None = None, wandb_project: str | None = None,
                  run_dir: str = ".", config: dict | None = None, resume_step: int | None = None) -> list:
    """The writers asked for; ``resume_step``: the step of the checkpoint a resumed run started from (None: a new
    run), whose own scalars TensorBoard keeps."""
    writers = []
    if tensorboard_dir:
        writers.append(TensorBoardWriter(tensorboard_dir, purge_step=None if resume_step is None else resume_step + 1))
    if wandb_project:
        writers.append(WandbWriter(wandb_project, run_dir, config, resume=resume_step is not None))
    return writers


def config_text(values: dict) -> str:
    """A configuration as TensorBoard text (markdown code block)."""
    body = json.dumps(values, indent=2, sort_keys=True, default=str)
    return "\n".join("    " + line for line in body.splitlines())
