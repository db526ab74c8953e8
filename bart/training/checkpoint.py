"""The checkpoints a training run writes: the formats, the names, which one is "latest", best-k, pruning.
(Which file of a folder holds starting weights is :func:`bart.modeling.weights.resolve_weights`.)

Formats (both plain ``torch.save`` dicts, read with ``weights_only=True``; written atomically by
:func:`bart.files.checkpoint_io.atomic_save`):
- a training checkpoint (``kind: "bart-training-checkpoint"``): model, optimizer, scheduler, scaler,
  step counters, data position and every rank's RNG state (:func:`capture_rng_state`; work between updates
  that may draw, validation, runs under :func:`rng_untouched`): what an exact resume needs. Names:
  ``_step{N}.ckpt`` while training (the newest ``--keep_checkpoints`` are kept), the final one
  ``_step{N}.ckpt`` (pretraining) or ``_epoch{E}_step{N}.ckpt`` (fine-tuning);
- a weights checkpoint (``kind: "bart-weights"``): model, config, step and metrics; the best-k
  validation checkpoints ``best_{metric}_step{N}.ckpt``;
- ``final_step.ckpt`` after fine-tuning: the model's raw state dict, as the reference writes it
  (``model.load_state_dict(torch.load(...))`` works; ``from_pretrained`` needs ``config=``).
The step a checkpoint belongs to is stored inside it; names only order files. A run resumes
(``--resume_from_checkpoint True``, or ``auto`` when there is one) from the newest readable
``_step{N}.ckpt`` / ``_epoch{E}_step{N}.ckpt`` of its folder (:func:`resumable_checkpoints`).
Every checkpoint written into a run's folder records the run's tokenizer (the one saved in that folder:
fingerprint, tokens, name; :mod:`bart.tokenization.identity`): a ``tokenizer`` entry, or for the raw
``final_step.ckpt`` its state dict's metadata (``load_state_dict`` ignores it), so a checkpoint copied
elsewhere still says which tokenizer it was trained with (:mod:`bart.tokenization.tokenizer_choice` reads it).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import json
import os
import random
import re
import sys
from collections import OrderedDict

import numpy as np
import torch

from bart.configuration.configuration_bart import ARCHITECTURE_KEYS
from bart.files.checkpoint_io import (
    CheckpointError,
    atomic_save,
    atomic_write_text,
    safe_load,
)
from bart.hub import has_tokenizer_files
from bart.modeling.vocab_padding import unpadded_state_dict
from bart.runtime.distributed import is_main_process
from bart.runtime.precision import FLAGS_SAID
from bart.tokenization.identity import (
    METADATA_KEY,
    RECORD_KEY,
    TokenizerFilesError,
    record,
    tokenizer_identity,
)
from bart.training.strategy import DEFAULT_STRATEGY

TRAINING_KIND = "bart-training-checkpoint"
_STEP_FILE = re.compile(r"^_step(\d+)\.ckpt$")
_RESUMABLE_FILE = re.compile(r"^(_epoch\d+)?_step(\d+)\.ckpt$")  # _step{N}.ckpt, fine-tuning's final _epoch{E}_step{N}.ckpt
AUTO = "auto"  # --resume_from_checkpoint auto


def save_checkpoint(path: str, state: dict) -> None:
    atomic_save(path, state)


def tokenizer_record(output_dir: str) -> dict | None:
    """The record of the tokenizer saved in ``output_dir`` (a run saves the tokenizer it trains with there
    before training), or None when the folder holds none."""
    if not has_tokenizer_files(output_dir):
        return None
    try:
        return record(tokenizer_identity(output_dir))
    except TokenizerFilesError:
        return None


def _with_tokenizer(output_dir: str, state: dict) -> dict:
    found = tokenizer_record(output_dir)
    return state if found is None else {**state, RECORD_KEY: found}


def load_checkpoint(path: str, map_location="cpu") -> dict:
    return safe_load(path, map_location)


def list_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of the complete ``_step{N}.ckpt`` files in ``output_dir``, oldest first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(m.group(1)), os.path.join(output_dir, name))
             for name in os.listdir(output_dir) if (m := _STEP_FILE.match(name))]
    return sorted(found)


def latest_checkpoint(output_dir: str) -> str | None:
    """The newest training checkpoint of the run in ``output_dir`` (the one a resume takes first)."""
    found = resumable_checkpoints(output_dir)
    return found[-1][1] if found else None


def resumable_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """(step, path) of the training checkpoints a run writes into its folder, oldest first: the ``_step{N}.ckpt``
    files and fine-tuning's final ``_epoch{E}_step{N}.ckpt`` (at one step, the final one last). What
    ``--resume_from_checkpoint True`` / ``auto`` resume from: the newest readable one."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(m.group(2)), bool(m.group(1)), os.path.join(output_dir, name))
             for name in os.listdir(output_dir) if (m := _RESUMABLE_FILE.match(name))]
    return [(step, path) for step, _, path in sorted(found)]


def resolve_resume(value, output_dir: str, announce: bool = True):
    """``--resume_from_checkpoint`` as the run takes it. ``auto``: True (resume from the newest training
    checkpoint) when ``output_dir`` holds one, else None (a new run); one line says which (``announce``).
    True where there is none: None, with a note (the reference's first start). A path and None are returned as
    they are. A folder whose checkpoints are all unreadable still
    resumes (and fails in one line naming them): ``auto`` never starts over on top of a run's checkpoints."""
    if value is True and not resumable_checkpoints(output_dir):  # the reference's phase-1 line on a first start
        if announce:
            print(f"[checkpoint] --resume_from_checkpoint True: no training checkpoint in {output_dir}: starting a "
                  f"new run, as the NVIDIA reference does on a first start (auto does the same)", flush=True)
        return None
    if value != AUTO:
        return value
    found = resumable_checkpoints(output_dir)
    if announce:
        print("[checkpoint] --resume_from_checkpoint auto: " + (
            f"resuming from the newest checkpoint in {output_dir} ({os.path.basename(found[-1][1])}, step "
            f"{found[-1][0]})" if found else f"no training checkpoint in {output_dir}: starting a new run"), flush=True)
    return True if found else None


# -- a new run's folder ---------------------------------------------------------------------------------
# The files a training run writes into its --output_dir, by kind: what a new run finds there from another run
# (its checkpoints refuse it, :func:`earlier_run`; its records alone are a run to start again,
# :func:`stopped_before_a_checkpoint`) and what --overwrite_output_dir removes before it
# starts (:func:`remove_earlier_run`). Only these names: anything else in the folder is the user's and stays.
RUN_FILES = (  # (kind, the names; a trailing / is a folder)
    ("checkpoint", re.compile(r"^((_epoch\d+)?_step\d+|best_.+_step\d+|final_step)\.ckpt(\.partial.*)?$")),
    ("log", re.compile(r"^dllogger\.json$")),
    ("best-k ranking", re.compile(r"^best_[^/]+\.json$")),
    ("run record", re.compile(r"^((run_config|git_log)\.json|wandb_run_id)$")),
    ("predictions", re.compile(r"^(test|val)_(generations\.txt|rouge\.json|bleu\.json)$")),
    ("tokenizer", re.compile(r"^(tokenizer\.json|tokenizer_config\.json|vocab\.json|merges\.txt|"
                             r"special_tokens_map\.json|added_tokens\.json)$")),
    ("TensorBoard events", re.compile(r"^tensorboard/$")),
    ("best model export", re.compile(r"^best_tfmr/$")),  # finetune.py's Hugging Face folder of the best checkpoint
)
_UNTRAINED = re.compile(r"^(best_.+_step0\.ckpt|.*\.partial.*)$")  # the untrained weights; a write cut off


def run_files(output_dir: str, json_path: str | None = None) -> dict[str, list[str]]:
    """kind -> the paths of a training run's files in ``output_dir`` (:data:`RUN_FILES`), plus the log at
    ``json_path`` (``--json-summary``) when it is elsewhere and not empty."""
    found: dict[str, list[str]] = {}
    names = sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
    for name in names:
        path = os.path.join(output_dir, name)
        shown = name + "/" if os.path.isdir(path) else name
        kind = next((kind for kind, pattern in RUN_FILES if pattern.match(shown)), None)
        if kind is not None:
            found.setdefault(kind, []).append(path)
    if json_path and os.path.isfile(json_path) and os.path.getsize(json_path) > 0 and \
            os.path.abspath(json_path) not in {os.path.abspath(p) for p in found.get("log", [])}:
        found.setdefault("log", []).append(json_path)
    return found


def earlier_run(output_dir: str, json_path: str | None = None) -> str | None:
    """Why a NEW run into ``output_dir`` would start over on top of another run's work (its checkpoints), in
    one line naming what to pass; None when nothing of another run's work is there. A folder whose run
    stopped before its first checkpoint (its log, run records, tokenizer, a write cut off, the untrained weights
    of a step-0 validation: :func:`stopped_before_a_checkpoint`) is not refused: the run starts there again."""
    named = [os.path.basename(p) for p in run_files(output_dir, json_path).get("checkpoint", [])
             if not _UNTRAINED.match(os.path.basename(p))]
    if not named:
        return None
    shown = ", ".join(named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
    resumable = resumable_checkpoints(output_dir)
    go_on = (f"add --resume_from_checkpoint auto to go on from its newest checkpoint "
             f"({os.path.basename(resumable[-1][1])}, step {resumable[-1][0]}), or " if resumable else
             "it holds no training checkpoint to go on from: ")
    return (f"--output_dir {output_dir} holds another run's files ({shown}); a new run there would start over on "
            f"top of them: {go_on}add --overwrite_output_dir to remove that run's files and start over, or choose "
            f"another --output_dir")


def stopped_before_a_checkpoint(output_dir: str, json_path: str | None = None) -> list[str]:
    """The records a run left in ``output_dir`` when it stopped before its first checkpoint (a kill, a stop
    signal, a full disk, a failure at start-up): what a new run there goes on from, keeping the log. Empty
    when the folder holds none, or holds a run's work (:func:`earlier_run` then refuses)."""
    if earlier_run(output_dir, json_path) is not None:
        return []
    found = run_files(output_dir, json_path)
    return [path for kind in ("log", "run record", "checkpoint") for path in found.get(kind, [])
            if kind != "log" or os.path.getsize(path) > 0]


def remove_earlier_run(output_dir: str, json_path: str | None = None, keep=()) -> list[str]:
    """--overwrite_output_dir: remove the training run's files of ``output_dir`` (:data:`RUN_FILES`: its
    checkpoints, log, rankings, run records, predictions, tokenizer and TensorBoard events; nothing else) so
    that nothing of it mixes with the new run's. ``keep``: paths the new run reads (its starting weights,
    tokenizer): a run file among them is refused (:class:`CheckpointError`) instead. Returns what was removed."""
    import shutil

    found = [path for paths in run_files(output_dir, json_path).values() for path in paths]
    kept = {os.path.realpath(p) for p in keep if p}
    needed = [p for p in found if os.path.realpath(p) in kept or any(k.startswith(os.path.realpath(p) + os.sep)
                                                                      for k in kept)]
    if found and os.path.realpath(output_dir) in kept:  # the folder itself: its newest checkpoint, its tokenizer
        needed.insert(0, output_dir)
    if needed:
        raise CheckpointError(f"--overwrite_output_dir would remove {needed[0]}, which this run starts from; copy it "
                              f"out of {output_dir} first, or choose another --output_dir")
    for path in found:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    return found


def prune_checkpoints(output_dir: str, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` step checkpoints (keep <= 0 keeps everything)."""
    if keep <= 0:
        return []
    removed = [path for _, path in list_checkpoints(output_dir)[:-keep]]
    for path in removed:
        os.remove(path)
    return removed


def _plain_number(value):
    """Metrics as plain Python numbers (numpy scalars do not load with weights_only=True)."""
    if isinstance(value, dict):
        return {str(k): _plain_number(v) for k, v in value.items()}
    if isinstance(value, (np.generic, torch.Tensor)):
        return value.item()
    return value


class BestCheckpoints:
    """The ``k`` best weights checkpoints by one validation metric (``best_{metric}_step{N}.ckpt``);
    a new one that does not make the top k is never written, one pushed out is deleted. The ranking
    is kept in ``best_{metric}.json`` beside them, so a resumed run (:meth:`restore`) goes on with the
    same top k instead of starting a second one."""

    def __init__(self, output_dir: str, metric: str, k: int, lower_is_better: bool) -> None:
        self.output_dir, self.metric, self.k, self.lower_is_better = output_dir, metric, k, lower_is_better
        self.best: list[tuple[float, str]] = []

    @property
    def ranking_path(self) -> str:
        return os.path.join(self.output_dir, f"best_{self.metric}.json")

    def restore(self) -> list[tuple[float, str]]:
        """Take over the ranking a previous (interrupted) run of this output folder wrote; best files it
        does not list (written by a run killed before it could rank them) are deleted."""
        listed = {}
        if os.path.isfile(self.ranking_path):
            try:
                with open(self.ranking_path, encoding="utf-8") as f:
                    listed = {name: float(value) for value, name in json.load(f)["best"]}
            except (ValueError, KeyError, TypeError) as err:
                print(f"[checkpoint] warning: {self.ranking_path} is unreadable ({err}); the top-{self.k} starts anew",
                      file=sys.stderr)
        pattern = re.compile(rf"^best_{re.escape(self.metric)}_step\d+\.ckpt$")
        for name in sorted(os.listdir(self.output_dir)) if os.path.isdir(self.output_dir) else []:
            if pattern.match(name) and name not in listed:
                os.remove(os.path.join(self.output_dir, name))
        self.best = sorted(((value, os.path.join(self.output_dir, name)) for name, value in listed.items()
                            if os.path.isfile(os.path.join(self.output_dir, name))),
                           key=self._rank, reverse=True)[: max(self.k, 0)]
        return self.best

    def _write_ranking(self) -> None:
        atomic_write_text(self.ranking_path, json.dumps(
            {"metric": self.metric, "lower_is_better": self.lower_is_better,
             "best": [[value, os.path.basename(path)] for value, path in self.best]}, indent=1))

    def _better(self, a: float, b: float) -> bool:
        return a < b if self.lower_is_better else a > b

    def _rank(self, item: tuple[float, str]) -> tuple:
        """Best first; of equal values the later step first (a tie never keeps the untrained step-0 weights over
        trained ones)."""
        step = re.search(r"_step(\d+)\.ckpt$", item[1])
        return (-item[0] if self.lower_is_better else item[0], int(step.group(1)) if step else -1)

    def consider(self, value: float, step: int, model, metrics: dict) -> str | None:
        if self.k <= 0 or not (len(self.best) < self.k or not self._better(self.best[-1][0], value)):
            return None
        path = os.path.join(self.output_dir, f"best_{self.metric}_step{step}.ckpt")
        self.best = [item for item in self.best if item[1] != path]  # the same step again (after a resume)
        save_checkpoint(path, _with_tokenizer(self.output_dir, {
            "kind": "bart-weights", "model": unpadded_state_dict(model), "config": model.config.to_dict(), "step": step,
            "metrics": _plain_number(metrics)}))
        self.best.append((value, path))
        self.best.sort(key=self._rank, reverse=True)
        for _, stale in self.best[self.k:]:
            os.remove(stale)
        self.best = self.best[: self.k]
        self._write_ranking()
        return path


def best_checkpoint(output_dir: str) -> str:
    """The best validation checkpoint of a fine-tuning run's folder: the top of its ``best_{metric}.json``
    ranking (the run's ``val_metric`` in run_config.json when rankings of several metrics are there), as
    transformers' ``load_best_model_at_end`` takes it. A folder without one is a :class:`CheckpointError`."""
    rankings = sorted(glob.glob(os.path.join(glob.escape(output_dir), "best_*.json")))
    if len(rankings) > 1 and os.path.isfile(os.path.join(output_dir, "run_config.json")):
        with open(os.path.join(output_dir, "run_config.json"), encoding="utf-8") as f:
            metric = json.load(f).get("val_metric")
        rankings = [path for path in rankings if os.path.basename(path) == f"best_{metric}.json"] or rankings
    if len(rankings) != 1:
        found = ", ".join(os.path.basename(p) for p in rankings) if rankings else "none"
        raise CheckpointError(f"{output_dir} holds no single best-checkpoint ranking best_{{metric}}.json ({found}): "
                              f"the best checkpoint needs validation during training (--n_val not 0) and "
                              f"--save_top_k >= 1")
    try:
        with open(rankings[0], encoding="utf-8") as f:
            ranked = json.load(f)["best"]
        path = os.path.join(output_dir, ranked[0][1])
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise CheckpointError(f"{rankings[0]} lists no best checkpoint ({type(err).__name__}: {err})") from err
    if not os.path.isfile(path):
        raise CheckpointError(f"{rankings[0]} names {os.path.basename(path)}, which is not in {output_dir}")
    return path


def write_training_checkpoint(output_dir: str, state: dict, name: str | None, keep: int) -> str:
    """``name`` may use {epoch} and {step}; None: ``_step{N}.ckpt``, after which all but the newest
    ``keep`` step checkpoints are deleted."""
    name = name.format(epoch=state["epoch"], step=state["global_step"]) if name else f"_step{state['global_step']}.ckpt"
    path = os.path.join(output_dir, name)
    save_checkpoint(path, _with_tokenizer(output_dir, state))
    if name.startswith("_step"):
        prune_checkpoints(output_dir, keep)
    return path


FINAL_WEIGHTS = "final_step.ckpt"


def save_final_weights(output_dir: str, trainer) -> str | None:
    """Every rank: the weights a file of the model holds (``trainer.model_file_state()``: full tensors, a
    collective under FSDP; the vocabulary's padding rows cut), written by rank 0 as ``final_step.ckpt``
    (:func:`write_final_weights`); its path on every rank (rank 0 wrote it)."""
    weights = trainer.model_file_state()
    return write_final_weights(output_dir, weights) if is_main_process() else os.path.join(output_dir, FINAL_WEIGHTS)


def write_final_weights(output_dir: str, model_state: dict) -> str:
    """The raw state dict (as the reference writes it); the tokenizer record rides in its metadata."""
    path = os.path.join(output_dir, FINAL_WEIGHTS)
    found = tokenizer_record(output_dir)
    if found is not None:
        metadata = OrderedDict(getattr(model_state, "_metadata", None) or {})
        metadata[METADATA_KEY] = found
        model_state = OrderedDict(model_state)
        model_state._metadata = metadata
    save_checkpoint(path, model_state)
    return path


def read_training_checkpoint(path_or_latest, output_dir: str) -> tuple[str, dict]:
    """(path, state) of a training checkpoint; ``True`` means the newest readable one in output_dir
    (:func:`resumable_checkpoints`)."""
    if path_or_latest is not True:
        return path_or_latest, _training_state(path_or_latest)
    found = resumable_checkpoints(output_dir)
    if not found:
        raise FileNotFoundError(f"--resume_from_checkpoint True: {output_dir} holds no training checkpoint "
                                f"(_step*.ckpt, _epoch*_step*.ckpt) to resume; to start a new run when there is "
                                f"none and resume when there is, use --resume_from_checkpoint auto")
    errors = []
    for _, path in reversed(found):  # the newest readable one; a damaged newest one is skipped, loudly
        try:
            state = _training_state(path)
        except CheckpointError as err:
            errors.append(err)
            print(f"[checkpoint] warning: skipping {path}: {err}", file=sys.stderr, flush=True)
            continue
        if errors:
            print(f"[checkpoint] warning: resuming from {path}, the newest readable checkpoint "
                  f"({len(errors)} newer one(s) could not be read)", file=sys.stderr, flush=True)
        return path, state
    raise CheckpointError(f"--resume_from_checkpoint: none of the {len(found)} checkpoints in {output_dir} can be "
                          f"read; the newest: {errors[0]}")


def _training_state(path: str) -> dict:
    state = load_checkpoint(path, map_location="cpu")
    if state.get("kind") != TRAINING_KIND:
        raise CheckpointError(f"{path} is a weights-only checkpoint, not a training checkpoint; use "
                              f"--load_model_weights_only / --init_checkpoint to start from its weights")
    return state


# -- what a resume checks ------------------------------------------------------------------------------
# Everything that shapes the state a resume loads or what the run computes after it, read the same way from the
# checkpoint's run (its stored arguments, config, process count and the training data's identity) and from this run:
# a difference is refused in one line naming both values and the way to start anew from the weights
# (--init_checkpoint), unless the entry may change (--allow_resume_change NAME: the run then says what changed).
# Arguments a checkpoint does not record (older checkpoints, the Trainer used without an entry script) are not
# compared. A setting that is one field says so on its declaration (``flag(..., resume="same")`` or
# ``resume="may_change"``, ``schedule=True`` where a change reshapes the learning-rate schedule, in its field's
# metadata): its check is derived from that field of the sections the caller hands in (:func:`resume_checks`).
# The entries of :func:`_resume_checks` are the checks that are not one field. Each check: name -> (what sets it,
# its value in a run's record, whether --allow_resume_change may allow it, whether a change reshapes the schedule).
def _precision_of(args: dict):
    """The precision a run's flags chose (bart.runtime.precision's rule), None where they were not recorded."""
    from bart.runtime.precision import Precision

    precision = Precision.from_record(args)
    return None if precision is None else precision.name


def _strategy_of(record: dict):
    """The strategy that ran (bart.training.strategy.build_strategy's rule): none with one process, else the
    flag's, DEFAULT_STRATEGY when none was named."""
    if "distributed_strategy" not in record["args"]:
        return None
    return "single process" if record["world_size"] <= 1 else record["args"]["distributed_strategy"] or DEFAULT_STRATEGY


def _arg(name: str, plain=lambda v: v):
    return lambda record: plain(record["args"][name]) if name in record["args"] else None


def _architecture(key: str):
    return lambda record: record["config"].get(key)


def _schedule_length(record: dict):
    """The updates the learning-rate schedule spans (the resolved --max_steps: --max_epochs is counted into it);
    a constant schedule (no decay) does not depend on it."""
    args = record["args"]
    if "max_steps" not in args or args.get("max_steps") is None or args.get("lr_scheduler") == "constant":
        return None
    return int(args["max_steps"])


_OPTIMIZER_NAMES = {"adamw": "AdamW", "lamb": "LAMB", "adafactor": "Adafactor"}


def _optimizer_of(record: dict):
    """The optimizer a run's record names (--optim; a record from before it: --lamb's true or false)."""
    args = record["args"]
    if "optim" in args:
        return _OPTIMIZER_NAMES.get(args["optim"], args["optim"])
    return None if "lamb" not in args else "LAMB" if args["lamb"] else "AdamW"


def _global_batch(record: dict):
    """An update's batch over all processes: processes x --train_batch_size x --gradient_accumulation_steps
    sequences; with --max_tokens_per_batch, processes x accumulation token-budget micro-batches."""
    args = record["args"]
    if "train_batch_size" not in args or "gradient_accumulation_steps" not in args:
        return None
    if args.get("max_tokens_per_batch"):
        return f"{record['world_size'] * int(args['gradient_accumulation_steps'])} token-budget micro-batches"
    return f"{record['world_size'] * int(args['train_batch_size']) * int(args['gradient_accumulation_steps'])} sequences"


# how the global batch is dealt: any of these may change on resume where the global batch stays (--allow_resume_change
# global_batch for one that changes it)
_LAYOUT = {"processes": lambda r: r["world_size"], "train_batch_size": _arg("train_batch_size", int),
           "gradient_accumulation_steps": _arg("gradient_accumulation_steps", int)}
# what an allowed change goes on with, said after it
_CHANGE_SAYS = {"global_batch": "the learning-rate schedule goes on by updates from the checkpoint's, each update now "
                                "of the new global batch; the epoch under way keeps its order of examples, cut into "
                                "the new global batches, and the epochs after it are ordered for them"}


# the value of a field as its type reads it from a run's record (bool, int, float; a tuple as a list; else as is)
_AS_TYPE = {"bool": bool, "int": int, "float": float, "tuple": list}


def _recorded(name: str, annotation: str, unset):
    """A field's value in a run's record, as its type (``annotation``) reads it; a null is ``unset`` (None: not
    compared)."""
    kinds = [kind.strip() for kind in annotation.split("|") if kind.strip() != "None"]
    plain = _AS_TYPE.get(kinds[0]) if len(kinds) == 1 else None

    def read(record: dict):
        args = record["args"]
        if name not in args:
            return None
        value = args[name]
        return unset if value is None else plain(value) if plain else value
    return read


def _field_checks(sections: tuple) -> dict:
    """The checks of the settings declared with a resume rule, in their sections' order: the flag a training
    script's user types (and what it means, where the declaration says), the value as the field's type reads it,
    the rule. ``sections``: the record's section classes; a field's rule is its metadata's ``flag`` (its
    ``resume``, ``resume_note``, ``resume_unset``, ``schedule`` and ``shown``), read here as the record hands it
    down, so the declaration stays the one place."""
    checks = {}
    for cls in sections:
        for f in dataclasses.fields(cls):
            declared = f.metadata.get("flag")
            if declared is not None and declared.resume is not None:
                said = declared.shown(f.name) + (f": {declared.resume_note}" if declared.resume_note else "")
                checks[f.name] = (said, _recorded(f.name, f.type, declared.resume_unset),
                                  declared.resume == "may_change", declared.schedule)
    return checks


def resume_checks(sections) -> dict:
    """Every check of a resume: name -> (what sets it, its value in a run's record, whether --allow_resume_change
    may allow it, whether a change reshapes the learning-rate schedule). ``sections``: the run's settings'
    sections (dataclasses or their instances: ``settings.sections().values()``), whose fields declare their resume
    rules; the checks that are not one field follow from this module."""
    return _resume_checks(tuple(cls if isinstance(cls, type) else type(cls) for cls in sections))


@functools.cache
def _resume_checks(sections: tuple) -> dict:
    checks = {
        "optimizer": ("--optim / --lamb", _optimizer_of, False, False),
        **_field_checks(sections),
        # the schedule's length: --max_steps, or what --max_epochs counted; nothing for a constant schedule
        "max_steps": ("--max_steps / --max_epochs", _schedule_length, True, True),
        # the processes, batch size and accumulation may change where the global batch does not (_LAYOUT)
        "global_batch": ("processes x --train_batch_size x --gradient_accumulation_steps", _global_batch, True,
                         False),
        "training_data": ("the training split's files", lambda r: r.get("data"), True, False),
        # fp16's loss scale is dropped or starts anew; the weights and optimizer state are fp32 either way
        "precision": (FLAGS_SAID, lambda r: _precision_of(r["args"]), True, False),
        # checkpoints hold full tensors whatever the strategy
        "distributed_strategy": ("--distributed_strategy", _strategy_of, True, False),
    }
    for key in ARCHITECTURE_KEYS:  # the keys a model's weights depend on
        checks[key] = (f"the config's {key}", _architecture(key), False, False)
    return checks


def allowable_changes(sections) -> tuple:
    """What --allow_resume_change NAME may name (its choices), for a record of these ``sections``."""
    return tuple(name for name, (_, _, may, _) in resume_checks(sections).items() if may)


def schedule_changes(sections) -> tuple:
    """The changes that reshape the learning-rate schedule (recomputed from the step resumed at)."""
    return tuple(name for name, (_, _, _, schedule) in resume_checks(sections).items() if schedule)


def check_resume(saved: dict, current: dict, path: str, allowed=(), *, sections) -> list[str]:
    """Compare what shapes a checkpoint's state with this run: ``saved`` and ``current`` are run records
    (``{"args": run arguments, "config": model config, "world_size": processes}``), ``sections`` the settings'
    sections that declare the fields' resume rules (:func:`resume_checks`). Raises
    :class:`CheckpointError` naming every difference that is not allowed (one line); returns a note for each
    allowed one."""
    refused, notes = [], []
    kinds = {"pretrain.py": "a pretraining checkpoint (pretrain.py's)", "finetune.py": "a fine-tuning checkpoint "
             "(finetune.py's)"}
    written, running = saved["args"].get("script"), current["args"].get("script")
    if written in kinds and running in kinds and written != running:
        raise CheckpointError(f"{path} is {kinds[written]}, not a {running} run's to resume: start {running} from its "
                              f"weights with --init_checkpoint {path} (without --resume_from_checkpoint)")
    differences = list(_differences(saved, current, sections))
    if saved["world_size"] != current["world_size"]:  # one process or several: the strategy follows from it
        differences = [d for d in differences if d[0] != "distributed_strategy" or "single process" not in d[2:4]]
    for name, flag, before, now, may_change in differences:
        said = f"{name}: {_shown(before)} in the checkpoint, {_shown(now)} now ({flag})"
        if may_change and name in allowed:
            notes.append(f"[checkpoint] resuming {path} with {name} {_shown(now)} instead of the checkpoint's "
                         f"{_shown(before)}, as --allow_resume_change {name} asks"
                         + (f": {_CHANGE_SAYS[name]}" if name in _CHANGE_SAYS else ""))
        else:
            refused.append(said + (f" (--allow_resume_change {name} resumes with the change)" if may_change else ""))
    if refused:
        raise CheckpointError(f"{path} was written by a run that differs from this one: {'; '.join(refused)}; resume "
                              f"with the checkpoint's values, or start a new run from its weights with "
                              f"--init_checkpoint {path}")
    return notes


def _differences(saved: dict, current: dict, sections):
    """(name, flag, checkpoint's value, this run's, whether --allow_resume_change may allow it) per difference."""
    for name, (flag, read, may_change, _) in resume_checks(sections).items():
        before, now = read(saved), read(current)
        if before is not None and now is not None and before != now:
            yield name, flag, before, now, may_change


def resume_changes(saved: dict, current: dict, *, sections) -> dict:
    """name -> "checkpoint's value -> this run's" of the differences a resume goes on with (what
    :func:`check_resume` allowed): the start banner says them."""
    changes = {name: f"{_shown(before)} -> {_shown(now)}" for name, _, before, now, _ in
               _differences(saved, current, sections)}
    return {**layout_changes(saved, current), **changes}


def layout_changes(saved: dict, current: dict) -> dict:
    """name -> "checkpoint's value -> this run's" of how the global batch is dealt (processes, batch size,
    accumulation), where a resume changes it."""
    found = {name: (read(saved), read(current)) for name, read in _LAYOUT.items()}
    return {name: f"{before} -> {now}" for name, (before, now) in found.items()
            if before is not None and now is not None and before != now}


def _shown(value) -> str:
    if isinstance(value, str) and (not value or value != value.strip()):
        return repr(value)  # an empty or space-edged text (a source prefix) quoted: '' and 'summarize: '
    return " ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def capture_rng_state() -> dict:
    """Python, numpy, torch CPU and CUDA generator states as tensors and plain types
    (loadable with ``weights_only=True``)."""
    version, keys, pos, has_gauss, cached = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state = {
        "python": [py_version, torch.tensor(py_state, dtype=torch.int64), py_gauss],
        "numpy": [version, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    py_version, py_state, py_gauss = state["python"]
    random.setstate((py_version, tuple(int(x) for x in py_state.tolist()), py_gauss))
    version, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((version, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_rng_state(key: str) -> None:
    """Python, numpy and torch (CPU and CUDA) generators seeded from ``key``: a rank a checkpoint holds no state for."""
    seed = random.Random(key).getrandbits(32)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def rng_untouched():
    """The generators :func:`capture_rng_state` keeps, as they were on entry once the block ends (however it ends):
    work inside (validation: sampled generations, anything else drawing) takes nothing from the training's random
    streams, so the updates after it, and a run resumed from a checkpoint written after it or after its abandonment,
    draw what an uninterrupted run draws."""
    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)


if __name__ == "__main__":  # python -m bart.training.checkpoint best OUTPUT_DIR: the path, or one line and exit 2
    if len(sys.argv) != 3 or sys.argv[1] != "best":
        sys.exit("usage: python -m bart.training.checkpoint best OUTPUT_DIR")
    try:
        print(best_checkpoint(sys.argv[2]))
    except CheckpointError as err:
        print(f"best checkpoint: {err}", file=sys.stderr)
        sys.exit(2)
