"""The one training loop, shared by pretraining and fine-tuning.

``train_step`` runs one optimizer update: ``gradient_accumulation_steps`` micro-batches (DDP's
``no_sync`` until the last), the summed token loss divided by the number of target tokens of the
whole update over all ranks (so the split into micro-batches and ranks does not change the
update), clipping, the optimizer step, then the scheduler step; a skipped update (fp16 overflow,
or a non-finite loss) steps neither. ``fit`` is the outer loop: log, evaluate, save, stop after
exactly ``max_steps`` updates. Everything a resumed run needs is in ``state_dict``.

A stop signal is agreed before each update, or at a validation's batch (``StoppedAtBatch``: that validation is
abandoned, recorded in the checkpoint and done first by the resumed run); either ends in ``stop_for_signal``
(a checkpoint, exit 75). A checkpoint of a finished run resumed at ``max_steps`` trains, validates and writes
nothing. ``state_dict`` holds each rank's data position: loaders with ``seek`` start there (a loader's ``position_of``
makes this rank's of every rank's, on any number of processes), others are replayed.
The trainer reads its sections of the run's ``Settings`` and holds its ``Precision`` (``settings.precision``);
validation takes it from there.

``--auto_find_batch_size`` (a new run, given ``loader_for``): an update that runs out of memory before the run's
first log record, validation or checkpoint starts the run again from update 1 with the per-process batch halved
and the accumulation doubled (the same global batch): the weights, optimizer, schedule, loss scale and random
streams as they were at the start (kept on the host), the loader rebuilt for the new batch from the start of its
epoch, so that the run is the one started with that batch (``[auto_find_batch_size]`` says so in one line). At
batch 1 the out-of-memory error ends the run as any other.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import gc
import resource
import sys
import time
from collections.abc import Callable, Iterable

import torch

from bart.errors import Preempted, RunStopped, UserError
from bart.files.checkpoint_io import CheckpointError, first_line
from bart.modeling.vocab_padding import (
    fit_optimizer_rows,
    fit_vocab_rows,
    padded_vocab_size,
    unpad_state,
    vocab_axis,
)
from bart.modeling.weight_casts import cast_once
from bart.records.dllogger_compat import Logger
from bart.records.progress import Progress
from bart.runtime import distributed as dist_utils
from bart.runtime.memory import out_of_memory
from bart.runtime.signals import StoppedAtBatch, StopRequest, stop_agreed
from bart.training.checkpoint import (
    TRAINING_KIND,
    capture_rng_state,
    check_resume,
    latest_checkpoint,
    layout_changes,
    read_training_checkpoint,
    restore_rng_state,
    resume_changes,
    rng_untouched,
    schedule_changes,
    seed_rng_state,
    write_training_checkpoint,
)
from bart.training.compilation import Compilation, CompiledOrEager
from bart.training.strategy import Strategy, full_tensor, prepared_strategy


def strategy_for(settings, world_size: int, device: torch.device, model: torch.nn.Module,
                 find_unused_parameters: bool = False) -> Strategy:
    """The distribution strategy the run's settings (the record the entry scripts hand down) ask for, built and prepared for ``model`` (once: before the
    optimizer). Half-precision gradient reduction uses the run's half type, bf16 for fp32/tf32 runs (its range
    matches fp32's)."""
    reduce_dtype = None
    if settings.distributed.allreduce_post_accumulation_half_precision:
        reduce_dtype = settings.precision.autocast_dtype or torch.bfloat16
    return prepared_strategy(settings.distributed.distributed_strategy, world_size, device, model, reduce_dtype,
                             find_unused_parameters)


class NonFiniteLossError(RunStopped):
    """The loss stayed NaN/inf (bf16/fp32), or the fp16 loss scale fell below its floor."""


class _BatchTooLarge(Exception):
    """An update ran out of memory where --auto_find_batch_size may start again with a smaller batch (raised outside
    the out-of-memory error's handler, so that its frames, holding the update's activations, are gone)."""


def smaller_batch(batch: int) -> int:
    """The next per-process batch --auto_find_batch_size tries after ``batch``: its largest divisor at most half of
    it (the accumulation grows by the same factor: the global batch stays whole)."""
    return max(d for d in range(1, batch // 2 + 1) if batch % d == 0)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A state tensor's storage on this rank (a DTensor's local shard)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


class Trainer:
    """The loop over ``settings``, the run's record (:class:`bart.cli.settings.Settings`): it reads its sections
    (optimization, checkpoints, precision, fine-tuning's loss and validation interval); ``strategy`` is the run's,
    built and prepared for ``model`` before the optimizer (:func:`strategy_for`); ``compile`` is the resolved
    ``--compile`` (``compile_backend``: over ``--compile_backend``, a callable of the tests'; ``varying_lengths``:
    batches of any length, fine-tuning's, compiled for any length at once)."""

    def __init__(self, model: torch.nn.Module, optimizer, scheduler, train_data: Iterable, settings, *,
                 strategy: Strategy, clips_internally: bool = False, logger: Logger | None = None,
                 eval_hook: Callable[[Trainer], dict] | None = None, device: torch.device | None = None,
                 compile: bool = False, compile_backend: object = None, varying_lengths: bool = False,
                 progress_bar: bool = True, final_checkpoint_name: str | None = None,
                 loader_for: Callable[..., Iterable] | None = None):
        if not settings.schedule.max_steps or settings.optimization.gradient_accumulation_steps <= 0:
            raise ValueError(f"max_steps and gradient_accumulation_steps must be positive, got "
                             f"{settings.schedule.max_steps} and {settings.optimization.gradient_accumulation_steps}")
        self.settings = settings
        self.model = model  # the bare model: state dicts and generation use it
        self.optimizer, self.scheduler = optimizer, scheduler
        self.train_data = train_data
        self.clips_internally = clips_internally
        self.device = device or next(model.parameters()).device
        self.world_size, self.rank = dist_utils.world_size(), dist_utils.rank()
        self.logger = logger or Logger(None, rank=self.rank, stdout=True)
        self.eval_hook = eval_hook
        self.progress_bar = progress_bar
        self.final_checkpoint_name = final_checkpoint_name  # default _step{N}.ckpt; may use {epoch} and {step}
        # --auto_find_batch_size: the loader of a settings' batch, and what is told of the batch found (the builder
        # rewrites run_config.json); the state a smaller batch starts again from, until the run's first record
        self.loader_for = loader_for
        self.batch_found: Callable[..., None] | None = None
        self._start_state: dict | None = None
        self.step = 0            # optimizer updates applied in this run's phase
        self.epoch = 0
        self.batches_in_epoch = 0
        self._data_position = None  # where a seekable loader resumes (see _batches)
        self._bad_steps = 0
        self.resume_changes: dict = {}  # what a resume goes on with changed (--allow_resume_change): "old -> new"
        self.precision = settings.precision  # the run's one Precision (validation takes it from here)
        self.scaler = self.precision.grad_scaler(self.device.type)
        self.precision.configure()
        if strategy.prepared is not model:
            raise ValueError("the Trainer takes the run's strategy prepared for this model before the optimizer was "
                             "built (bart.training.trainer.strategy_for)")
        self.strategy = strategy
        optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
        if any(p.requires_grad and id(p) not in optimized for p in model.parameters()):
            raise ValueError(f"the optimizer does not hold the model's parameters: build it after "
                             f"strategy.prepare(model) ({self.strategy.name} replaces the parameters)")
        self.compilation: Compilation | None = None
        if compile and settings.model.cast_weights_once:  # --compile by default on CUDA (the flags' rule: given)
            raise UserError("--cast_weights_once is an eager path (a compiled step fuses its casts), and this run "
                            "compiles (the default with CUDA): add --no-compile, or drop --cast_weights_once")
        if not compile and settings.model.compile_scope != "model":
            raise UserError(f"--compile_scope {settings.model.compile_scope} says what --compile compiles, and this run "
                            f"does not compile (off by default on CPU): add --compile, or drop --compile_scope")
        module = model
        if compile:  # see bart.training.compilation: logged, recompiles counted, a failure runs eager
            module = CompiledOrEager(model, compile_backend or settings.model.compile_backend, varying_lengths,
                                     settings.model.compile_scope)
            self.compilation = Compilation(module, lambda data: self._write_log(self.global_step, data))
        self.forward_model = self.strategy.wrap(model, module)
        self.history: list[dict] = []
        self._sequences_seen = 0
        self._periodic_saved: tuple | None = None  # (global step, path) of the newest periodic checkpoint
        self.stop_reason: str | None = None  # set by request_stop (early stopping): fit ends after this step
        self._validated_at: int | None = None  # the global step of the last validation that ended
        # a checkpoint's own record: the validation of its step was abandoned for a stop signal (a resumed run
        # does it first), and whether fit() had ended (a resumed run at max_steps has nothing left to do)
        self._validation_due = False
        self._finished = False
        # rank 0: what of the run's folder is gone (None while all is there), checked at every log, validation
        # and checkpoint write; the run stops instead of re-creating a folder with checkpoints only
        self.run_folder_check: Callable[[], str | None] | None = None

    def close(self) -> None:
        """The run is over: the strategy's wrapper goes now (DDP: its Reducer holds the process group), before
        :func:`bart.runtime.distributed.cleanup` ends the group; the log closes (its file, TensorBoard's writer
        thread, the W&B run). The bare model, its state and the history stay."""
        self.forward_model = None
        self.logger.close()

    def request_stop(self, reason: str) -> None:
        """End fit() after the current update (final evaluation skipped if done at this step, checkpoint saved)."""
        self.stop_reason = reason

    @property
    def global_step(self) -> int:
        return self.settings.checkpoints.phase1_end_step + self.step

    # -- one update ---------------------------------------------------------------------------
    def _autocast(self):
        return self.precision.autocast(self.device.type)

    def _to_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()}

    def train_step(self, micro_batches: list[dict]) -> dict:
        """One optimizer update from the given micro-batches. Returns device tensors (no host sync
        besides the one finiteness check a skipped update needs)."""
        self.forward_model.train()
        batches = [self._to_device(b) for b in micro_batches]
        tokens = torch.stack([(b["labels"] != -100).sum() for b in batches]).sum().float()
        global_tokens = dist_utils.all_reduce_sum(tokens.clone())
        loss_scale = self.world_size / global_tokens.clamp(min=1)
        sequences = sum(int((b["labels"] != -100).any(-1).sum()) for b in micro_batches)  # a filler row is none
        if self.compilation is None:
            loss_sum = self._accumulate(batches, loss_scale)
        else:
            shapes = ", ".join(f"{tuple(b['input_ids'].shape)} -> {tuple(b['labels'].shape)}" for b in batches[:1])
            loss_sum = self.compilation.run(lambda: self._accumulate(batches, loss_scale),
                                            lambda: self.optimizer.zero_grad(set_to_none=True), shapes)
        applied, grad_norm = self._apply_update(loss_sum)
        return {"loss_sum": loss_sum, "tokens": tokens, "sequences": sequences, "applied": applied,
                "grad_norm": grad_norm}

    def _accumulate(self, batches: list[dict], loss_scale: torch.Tensor) -> torch.Tensor:
        """The forward and backward passes of one update's micro-batches; their summed loss."""
        loss_sum = torch.zeros((), device=self.device)
        with self._weight_casts():
            for i, batch in enumerate(batches):
                last = i == len(batches) - 1
                sync = contextlib.nullcontext() if last else self.strategy.no_sync(self.forward_model)
                with sync:
                    with self._autocast():
                        out = self.forward_model(input_ids=batch["input_ids"],
                                                 attention_mask=batch.get("attention_mask"),
                                                 decoder_input_ids=batch.get("decoder_input_ids"),
                                                 labels=batch["labels"],
                                                 label_smoothing=self.settings.loss.label_smoothing, reduction="sum",
                                                 fused_cross_entropy=self.settings.loss.fused_cross_entropy)
                    loss = out.loss * loss_scale
                    (self.scaler.scale(loss) if self.scaler else loss).backward()
                loss_sum += out.loss.detach().float()
        return loss_sum

    def _weight_casts(self):
        """``--cast_weights_once``: the weights cast to the autocast dtype once for all of an update's micro-batches
        (bart.modeling.weight_casts); else nothing."""
        if not self.settings.model.cast_weights_once:
            return contextlib.nullcontext()
        return cast_once(self.model, self.precision.autocast_dtype, lm_head=not self.settings.loss.fused_cross_entropy)

    def _apply_update(self, loss_sum: torch.Tensor):
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        else:
            finite = torch.isfinite(dist_utils.all_reduce_sum(loss_sum.clone()))
            if not bool(finite):
                self._bad_steps += 1
                self.optimizer.zero_grad(set_to_none=True)
                if self._bad_steps >= self.settings.optimization.max_consecutive_nonfinite:
                    raise NonFiniteLossError(
                        f"the loss was NaN/inf for {self._bad_steps} consecutive updates (last at update "
                        f"{self.global_step + 1}); stopping. Lower the learning rate, check the data, or raise "
                        f"--max_consecutive_nonfinite")
                return False, torch.tensor(float("nan"))
            self._bad_steps = 0
        grad_norm = None
        clip = self.settings.optimization.gradient_clip_val
        if not self.clips_internally and clip > 0:
            grad_norm = full_tensor(torch.nn.utils.clip_grad_norm_(params, clip, foreach=True))
        if self.scaler is not None:
            scale_before = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            scale = self.scaler.get_scale()
            applied = scale >= scale_before
            floor = self.settings.optimization.min_loss_scale
            if scale < floor:
                raise NonFiniteLossError(
                    f"the fp16 loss scale fell to {scale:.3g}, below --min_loss_scale {floor:g} "
                    f"(update {self.global_step + 1}): the gradients overflow or are NaN at every update; "
                    f"stopping. Lower the learning rate, check the data, or train in --bf16")
        else:
            self.optimizer.step()
            applied = True
        if grad_norm is None:
            grad_norm = getattr(self.optimizer, "last_grad_norm", None)
            if grad_norm is None:
                grad_norm = full_tensor(torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None]))
        self.optimizer.zero_grad(set_to_none=True)
        if applied:
            self.scheduler.step()
        return applied, grad_norm

    # -- --auto_find_batch_size ----------------------------------------------------------------
    def _new_window(self) -> dict:
        return {"loss_sum": torch.zeros((), device=self.device), "tokens": torch.zeros((), device=self.device),
                "sequences": 0, "start": time.perf_counter(), "steps": 0}

    def _state_to_start_again(self) -> dict | None:
        """What a smaller batch starts the run again from (on the host): a new run's, before its first update (its
        optimizer holds no state yet), under --auto_find_batch_size with a loader to rebuild; None otherwise."""
        if not self.settings.data.auto_find_batch_size or self.loader_for is None or self.step or self.optimizer.state:
            return None
        return {"model": {k: _local(v).detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()},
                "optimizer": copy.deepcopy(self.optimizer.state_dict()), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler else None, "rng": capture_rng_state(),
                "epoch": self.epoch, "batches_in_epoch": self.batches_in_epoch}

    def _start_again_smaller(self):
        """After an update ran out of memory: the batch made smaller (:func:`smaller_batch`, the accumulation
        larger by the same factor), the loader rebuilt for it, everything else as at the run's start; the new
        micro-batches."""
        settings, start = self.settings, self._start_state
        batch, accumulation = settings.data.train_batch_size, settings.optimization.gradient_accumulation_steps
        smaller = smaller_batch(batch)
        self.settings = settings.replace(train_batch_size=smaller, gradient_accumulation_steps=accumulation * batch // smaller)
        self.optimizer.zero_grad(set_to_none=True)
        self.train_data = None  # the old loader (its workers, its batches) goes before the new one is made
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        with torch.no_grad():
            for name, tensor in self.model.state_dict().items():
                _local(tensor).copy_(start["model"][name])
        self.optimizer.load_state_dict(copy.deepcopy(start["optimizer"]))
        self.scheduler.load_state_dict(start["scheduler"])
        if self.scaler is not None:
            self.scaler.load_state_dict(start["scaler"])
        restore_rng_state(start["rng"])
        self.step, self._sequences_seen, self._bad_steps, self._data_position = 0, 0, 0, None
        self.epoch, self.batches_in_epoch = start["epoch"], start["batches_in_epoch"]
        self.train_data = self.loader_for(self.settings)
        said = (f"[auto_find_batch_size] out of memory at batch {batch}: retrying with {smaller} x "
                f"{self.settings.optimization.gradient_accumulation_steps} accumulation")
        if self.rank == 0:
            print(said, flush=True)
        accumulated = self.settings.optimization.gradient_accumulation_steps
        self._write_log(self.global_step, {"auto_find_batch_size": f"{smaller} x {accumulated}"})
        if self.batch_found is not None:
            self.batch_found(self.settings)
        return self._batches()

    # -- data ---------------------------------------------------------------------------------
    def _batches(self):
        """Endless micro-batches; epochs advance when the data runs out. Resumes mid-epoch: a loader
        with ``position``/``seek`` starts at the saved position, any other is replayed up to it
        (the loaders are deterministic per epoch)."""
        while True:
            if hasattr(self.train_data, "set_epoch"):
                self.train_data.set_epoch(self.epoch)
            resumed = self.batches_in_epoch > 0
            replay = self.batches_in_epoch
            if self._data_position is not None:
                self.train_data.seek(self._data_position)
                self._data_position, replay = None, 0
            iterator = iter(self.train_data)
            for _ in range(replay):
                next(iterator)
            produced = False
            for batch in iterator:
                produced = True
                self.batches_in_epoch += 1
                yield batch
            if not produced and not resumed:
                raise RuntimeError("the training data produced no batch in a whole epoch")
            self.epoch += 1
            self.batches_in_epoch = 0

    def _data_counts(self) -> dict:
        """Counts the loader keeps (rows skipped as empty or degenerate), summed over the ranks."""
        skipped = getattr(self.train_data, "skipped_rows", None)
        if skipped is None:
            return {}
        total = dist_utils.all_reduce_sum(torch.tensor(float(skipped), device=self.device))
        return {"skipped_rows": int(total.item())}

    # -- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        rng = dist_utils.all_gather_objects(capture_rng_state())
        return {
            "kind": TRAINING_KIND,
            "model": self.model_file_state(),
            "optimizer": self.strategy.optimizer_state_dict(self.model, self.optimizer),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "step": self.step,
            "global_step": self.global_step,
            "epoch": self.epoch,
            "batches_in_epoch": self.batches_in_epoch,
            "data_position": (dist_utils.all_gather_objects(self.train_data.position())
                              if hasattr(self.train_data, "position") else None),
            "rng": rng,
            "config": self.model.config.to_dict(),
            "args": _plain(self.settings.as_dict()),
            "data": self._data_identity,
            # the validation hook's own counts (early stopping's best value and patience), where it keeps any
            "eval_hook": _plain(self.eval_hook.state_dict()) if hasattr(self.eval_hook, "state_dict") else None,
            "validation_due": self._validation_due, "finished": self._finished,
        }

    @functools.cached_property
    def _data_identity(self) -> str | None:
        """The training data's identity (the loader's ``identity()``: a resume compares it), None where the loader
        keeps none; read once (every checkpoint records it)."""
        identity = getattr(self.train_data, "identity", None)
        return identity() if callable(identity) else None

    def model_file_state(self) -> dict:
        """The model's full state as files hold it (collective under FSDP): a padded vocabulary cut to the
        tokenizer's rows (bart.modeling.vocab_padding)."""
        model_state = self.strategy.model_state_dict(self.model)
        vocab = getattr(getattr(self.model, "config", None), "vocab_size", None)
        return model_state if vocab is None else unpad_state(model_state, vocab)

    def _fit_vocabulary(self, model_state: dict, optimizer_state: dict) -> tuple[dict, dict]:
        """A checkpoint's model and optimizer state with the vocabulary rows of this model (padded or not:
        checkpoints hold the tokenizer's rows, those written before padding too; see bart.modeling.vocab_padding)."""
        vocab = getattr(getattr(self.model, "config", None), "vocab_size", None)
        if vocab is None:
            return model_state, optimizer_state
        rows = {name: p for name, p in self.model.named_parameters() if vocab_axis(name) is not None}
        if not rows:
            return model_state, optimizer_state
        model_state = fit_vocab_rows(model_state, padded_vocab_size(self.model.config), vocab)
        params = dict(rows)  # DCP's layout: keyed by name; torch's: by index in param_groups order
        ours = {id(p) for p in rows.values()}
        for saved, current in zip(optimizer_state.get("param_groups", []), self.optimizer.param_groups):
            for key, param in zip(saved.get("params", []), current["params"]):
                if id(param) in ours:
                    params[key] = param
        return model_state, fit_optimizer_rows(optimizer_state, params, vocab)

    def save(self, name: str | None = None) -> str | None:
        """A training checkpoint (see :mod:`bart.training.checkpoint` for names and retention)."""
        self._start_state = None
        self._check_run_folder()
        state = self.state_dict()  # collective: every rank takes part
        path = None
        if self.rank == 0:
            try:
                path = write_training_checkpoint(self.settings.checkpoints.output_dir, state, name,
                                                 self.settings.checkpoints.keep_checkpoints)
            except FileNotFoundError:  # the folder deleted during the write
                lost = self._run_folder_lost()
                if lost is None:
                    raise
                raise RunStopped(self._run_folder_message(lost)) from None
        dist_utils.barrier()
        if name is None:
            self._periodic_saved = (self.global_step, path)
        return path

    def resume(self, path_or_latest) -> str:
        """Restore everything from a training checkpoint (``True``: the newest in output_dir)."""
        path, state = read_training_checkpoint(path_or_latest, self.settings.checkpoints.output_dir)
        self.load_state_dict(state, path)
        return path

    def load_state_dict(self, state: dict, path: str = "the checkpoint") -> None:
        saved = {"args": state.get("args") or {}, "config": state.get("config") or {}, "world_size": len(state["rng"]),
                 "data": state.get("data")}
        current = {"args": _plain(self.settings.as_dict()), "config": self.model.config.to_dict(),
                   "world_size": self.world_size, "data": self._data_identity}
        sections = self.settings.sections().values()  # their fields declare the resume rules
        notes = check_resume(saved, current, path, self.settings.checkpoints.allow_resume_change, sections=sections)
        self.resume_changes = resume_changes(saved, current, sections=sections)  # allowed (check_resume refused the rest): the banner says them
        self._check_data_position(state, saved["world_size"], path)
        self._seek_data_position(state, path)  # before the weights load: a position that cannot be read is one line
        for note in notes:
            if self.rank == 0:
                print(note, file=sys.stderr, flush=True)
        from bart.modeling.weights import (
            check_weight_values,  # the rule every weight file meets
        )
        check_weight_values(state["model"], self.model.state_dict(), path)
        model_state, optimizer_state = self._fit_vocabulary(state["model"], state["optimizer"])
        try:
            self.strategy.load(self.model, self.optimizer, model_state, optimizer_state)
        except (RuntimeError, KeyError, ValueError) as err:
            raise CheckpointError(f"{path} does not fit this run's model and optimizer ({first_line(err)}); resume "
                                  f"with the flags and config of the run that wrote it") from err
        self.scheduler.load_state_dict(state["scheduler"])
        if any(name in schedule_changes(sections) for name in self.resume_changes):  # the new schedule from this step on
            rates = [factor(self.scheduler.last_epoch) * base for factor, base in
                     zip(self.scheduler.lr_lambdas, self.scheduler.base_lrs)]
            self.resume_changes["next learning rate"] = (
                f"{_rate(self.scheduler.get_last_lr())} -> {_rate(rates)} (the new schedule at update "
                f"{int(state['global_step']) + 1})")
            for group, rate in zip(self.optimizer.param_groups, rates):
                group["lr"] = rate
            self.scheduler._last_lr = rates
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step = int(state["global_step"]) - self.settings.checkpoints.phase1_end_step
        if self.step < 0:
            raise CheckpointError(f"{path} is at step {state['global_step']}, before --phase1_end_step "
                             f"{self.settings.checkpoints.phase1_end_step}")
        self.epoch, self.batches_in_epoch = int(state["epoch"]), int(state["batches_in_epoch"])
        accumulation = self.settings.optimization.gradient_accumulation_steps
        written = int(saved["args"].get("gradient_accumulation_steps") or accumulation)
        if written != accumulation:  # the epoch's updates so far, in this run's micro-batches
            self.batches_in_epoch = self.batches_in_epoch // written * accumulation
        rng = state["rng"]
        if self.rank < len(rng):
            restore_rng_state(rng[self.rank])
        else:  # a rank the checkpoint's run did not have: streams of its own, the same at every resume of this checkpoint
            seed_rng_state(f"{self.settings.randomness.seed}/{state['global_step']}/{self.rank}")
        if state.get("eval_hook") is not None and hasattr(self.eval_hook, "load_state_dict"):
            self.eval_hook.load_state_dict(state["eval_hook"])
        self._validation_due, self._finished = bool(state.get("validation_due")), bool(state.get("finished"))
        self._validated_at = None if self._validation_due else self.global_step
        layout = layout_changes(saved, current)
        data_said = getattr(self.train_data, "resume_said", lambda: None)()
        if (layout or data_said) and self.rank == 0:
            print(self._layout_said(path, layout, saved["world_size"], state["global_step"], data_said), flush=True)

    def _seek_data_position(self, state: dict, path: str) -> None:
        """The loader set at the checkpoint's data position (checked now, used when the epoch starts): a loader with
        ``position_of`` makes this rank's position of every rank's; of another, a global position is every rank's
        (rank 0's is taken). Older checkpoints hold none: their epoch is replayed instead."""
        positions = state.get("data_position")
        if not positions or not hasattr(self.train_data, "seek"):
            return
        position_of = getattr(self.train_data, "position_of", None)
        try:
            self._data_position = (position_of(positions, path) if position_of is not None else
                                   positions[0 if len(positions) != self.world_size else self.rank])
            self.train_data.set_epoch(int(state["epoch"]))
            self.train_data.seek(self._data_position)
        except ValueError as err:
            raise CheckpointError(f"{path}: {err}") from err

    def _check_data_position(self, state: dict, written_by: int, path: str) -> None:
        """A checkpoint written by another number of processes resumes only where the data position is global."""
        per_process = getattr(self.train_data, "position_per_process", "this run's data keeps no position that other "
                                                                     "processes can take up")
        if written_by == self.world_size or per_process is None:
            return
        raise CheckpointError(
            f"{path} was written by {_processes(written_by)} and this run has {self.world_size}: {per_process}, so it "
            f"resumes only on {written_by}; resume with {_processes(written_by)}, or start a new run from its weights "
            f"with --init_checkpoint {path} (fine-tuning and pretraining checkpoints resume on any number of "
            f"processes that keeps the global batch)")

    def _layout_said(self, path: str, layout: dict, written_by: int, step: int, data_said: str | None = None) -> str:
        """The line a resume prints when the processes, batch size or accumulation changed, or the loader reads the
        data otherwise than this run's own layout would (``data_said``: the loader's ``resume_said()``)."""
        said = [f"[checkpoint] resuming {path}, written by {_processes(written_by)}, on {self.world_size}: "
                + (", ".join(f"{name} {change}" for name, change in layout.items())
                   or "the same processes, batch size and accumulation")]
        position = self._data_position
        if position is not None and "taken" in position:
            unit = "micro-batches" if position["layout"].get("max_tokens") else "examples"
            said.append(f"the data position (epoch {position['epoch']}, {position['taken']} {unit} in) carries over: "
                        f"the same next examples in the same order")
        if data_said:
            said.append(data_said)
        if "global_batch" not in self.resume_changes:
            said.append("the global batch, schedule, optimizer state (full tensors"
                        + (", resharded" if self.strategy.name == "fsdp" else "") + ") and loss scale too")
        if written_by != self.world_size:
            kept = min(written_by, self.world_size)
            new = f"{_ranks(written_by, self.world_size - 1)} start{'s' if self.world_size - written_by == 1 else ''}"
            said.append(f"random streams: {_ranks(0, kept - 1)} {'keeps its' if kept == 1 else 'keep their'} own, "
                        + (f"{new} from seeds of (--seed, update {step}, rank)" if self.world_size > written_by else
                           f"those of {_ranks(self.world_size, written_by - 1)} are dropped"))
        return "; ".join(said)

    # -- the outer loop -----------------------------------------------------------------------
    def fit(self) -> dict:
        settings = self.settings
        if self._finished and self.step >= settings.schedule.max_steps:  # resumed from a finished run: nothing to do
            if self.rank == 0:
                print(f"[checkpoint] the run resumed had finished (update {self.global_step}): nothing left to train",
                      flush=True)
            return {"steps": self.step, "stopped_early": False, "already_finished": True}
        self._finished = False  # a finished run resumed for more updates: its checkpoints are not final
        self._start_state = self._state_to_start_again()
        batches = self._batches()
        window = self._new_window()
        run_start, total_sequences, final_loss = time.perf_counter(), 0, float("nan")
        progress = Progress(settings.schedule.max_steps, "train", unit="step", initial=self.step,
                            enabled=self.progress_bar and self.rank == 0)
        with StopRequest():
            try:  # a stop signal between two updates, or at a batch of a validation (abandoned: StoppedAtBatch)
                if self._validation_due and self.eval_hook:  # abandoned for a stop signal before the resume
                    self._evaluate()
                while self.step < settings.schedule.max_steps and self.stop_reason is None:
                    if (received := stop_agreed(self.device)) is not None:
                        progress.close()
                        self.stop_for_signal(received)
                    try:
                        loss = self._one_update(batches, window, progress)
                    except _BatchTooLarge:
                        loss = batches = None  # the loader's iterator goes with the old batch
                    if batches is None:
                        batches, window = self._start_again_smaller(), self._new_window()
                        progress.close()
                        progress = Progress(settings.schedule.max_steps, "train", unit="step", enabled=self.progress_bar and
                                            self.rank == 0)
                        continue
                    if loss is not None:
                        final_loss = loss
                total_sequences = self._sequences_seen
                progress.close()
                if self.stop_reason is not None and self.rank == 0:
                    print(f"stopping early at step {self.global_step}: {self.stop_reason}", flush=True)
                if self.eval_hook and self._validated_at != self.global_step:
                    self._evaluate()
            except StoppedAtBatch as stopped:
                progress.close()
                self.stop_for_signal(stopped.received, validation_abandoned=True)
        self._finished = True
        path = self.save(self.final_checkpoint_name)
        elapsed = time.perf_counter() - run_start
        # total_loss and avg_train_time: the reference recipe's names for the same figures
        summary = {"final_loss": final_loss, "total_loss": final_loss, "total_time_s": elapsed,
                   "avg_train_time": elapsed, "avg_train_throughput": total_sequences / max(elapsed, 1e-9),
                   "steps": self.step, "stopped_early": self.stop_reason is not None}
        if self.compilation is not None:
            summary.update(self.compilation.summary())
        self._write_log((), summary, flush=True)
        return {**summary, "checkpoint": path}

    def _one_update(self, batches, window: dict, progress) -> float | None:
        """One applied-or-skipped update with its logging, validation and periodic checkpoint; the
        logged loss when this update logged."""
        settings, logged = self.settings, None
        micro = [next(batches) for _ in range(settings.optimization.gradient_accumulation_steps)]
        too_large = False
        try:
            out = self.train_step(micro)
        except Exception as err:  # noqa: BLE001 - out of memory (CUDA's, the CPU allocator's, MemoryError) only
            if self._start_state is None or settings.data.train_batch_size == 1 or out_of_memory(err) is None:
                raise
            too_large = True
        if too_large:
            raise _BatchTooLarge()
        if not out["applied"]:
            return None
        self.step += 1
        window["loss_sum"] += out["loss_sum"]
        window["tokens"] += out["tokens"]
        window["sequences"] += out["sequences"]
        window["steps"] += 1
        self._sequences_seen += out["sequences"] * self.world_size
        progress.update(1)
        if self.step % settings.logging.log_freq == 0 or self.step == settings.schedule.max_steps:
            logged = self._log(window, out)
            progress.set_postfix(loss=logged)
        every = settings.validation.val_check_interval
        if every and self.eval_hook and self.step % every == 0:
            self._evaluate()
            if self.stop_reason is not None:
                return logged
        every = settings.checkpoints.save_checkpoint_steps
        if every and self.step % every == 0 and self.step < settings.schedule.max_steps:
            self.save()
        return logged

    def _run_folder_lost(self) -> str | None:
        return self.run_folder_check() if self.rank == 0 and self.run_folder_check is not None else None

    def _check_run_folder(self, lost: str | None = None, flagged: float | None = None) -> None:
        """Stop on every rank when rank 0 finds the run's files gone (``flagged``: the ranks' sum of that
        finding, when the caller reduced it already)."""
        if flagged is None:
            lost = self._run_folder_lost()
            flagged = float(lost is not None)
            if self.world_size > 1:
                flagged = dist_utils.all_reduce_sum(torch.tensor([flagged], device=self.device)).item()
        if not flagged:
            return
        found = self._run_folder_message(lost) if self.rank == 0 else None
        if self.world_size > 1:
            found = dist_utils.all_gather_objects(found)[0]
        raise RunStopped(found if self.rank == 0 else f"rank 0: {found}")

    def _write_log(self, step, data: dict, flush: bool = False) -> None:
        """A record to the log and its writers. A write that fails because the run's folder went (deleted, or
        replaced by a file: TensorBoard's writer meets it first) stops the run in one line, as the check does."""
        try:
            self.logger.log(step=step, data=data)
            if flush:
                self.logger.flush()
        except (OSError, RuntimeError) as err:  # a metric writer's error is a RuntimeError
            lost = self._run_folder_lost()
            if lost is None:
                raise
            raise RunStopped(self._run_folder_message(lost)) from err

    def _run_folder_message(self, lost: str) -> str:
        # nothing more is written there: a folder being deleted would come back holding what is written next
        newest = latest_checkpoint(self.settings.checkpoints.output_dir)
        return lost + (f" while this run was writing there (noticed at update {self.global_step}); stopped without "
                       f"writing more there. " + (
                           f"To continue from {newest}, the newest checkpoint left, run the same command with "
                           f"--resume_from_checkpoint True (it writes the run's files again)" if newest else
                           "No checkpoint is left: start the run again"))

    def stop_for_signal(self, received: str, validation_abandoned: bool = False) -> None:
        """Every rank, once all agreed to stop (``bart.runtime.signals.stop_agreed``): the checkpoint (rank 0 writes it;
        every rank names it), then Preempted (exit 75). Before this process applied an update (a signal during
        start-up or the validation before update 1) there is nothing new to save: it stops without writing.
        ``validation_abandoned``: the signal stopped the validation of this step (nothing of it kept); the
        checkpoint says so, and the run that resumes from it validates that step first."""
        if self._sequences_seen == 0:
            self._write_log(self.global_step, {"stopped_by": received, "checkpoint": ""}, flush=True)
            raise Preempted(f"{received} received before update {self.global_step + 1}: stopped without writing a "
                            f"checkpoint (nothing was trained in this run yet"
                            + ("; the validation under way was abandoned" if validation_abandoned else "")
                            + "); run the same command again"
                            + (" (with --resume_from_checkpoint auto it resumes from the newest checkpoint)"
                               if self.global_step else ""))
        saved = self._periodic_saved  # a signal during the periodic write of this very update: that one stands
        if validation_abandoned:
            self._validation_due = True
        path = saved[1] if saved and saved[0] == self.global_step and not validation_abandoned else self.save()
        if self.world_size > 1:
            path = dist_utils.all_gather_objects(path)[0]  # rank 0 wrote it
        self._write_log(self.global_step, {"stopped_by": received, "checkpoint": path or ""}, flush=True)
        raise Preempted(f"{received} received: stopped after update {self.global_step} and "
                        f"{'' if self.rank == 0 else 'rank 0 '}wrote {path}; run the same command with "
                        f"--resume_from_checkpoint True to continue"
                        + (f" (the validation at update {self.global_step} was abandoned: the resumed run does it "
                           f"first)" if validation_abandoned else ""))

    def _log(self, window: dict, last: dict) -> float:
        self._start_state = None  # the run's first record: its batch stays from here on
        lost = self._run_folder_lost()  # its finding rides on the reduction the log makes anyway
        stats = torch.stack([window["loss_sum"], window["tokens"],
                             torch.tensor(float(window["sequences"]), device=self.device),
                             torch.tensor(float(lost is not None), device=self.device)])
        stats = dist_utils.all_reduce_sum(stats).tolist()
        self._check_run_folder(lost, stats[3])
        elapsed = time.perf_counter() - window["start"]
        loss = stats[0] / max(stats[1], 1)
        record = {"loss": loss, "learning_rate": self.scheduler.get_last_lr()[0],
                  "grad_norm": float(last["grad_norm"]), "loss_scale": self.scaler.get_scale() if self.scaler else 1.0,
                  "seq/s": stats[2] / elapsed, "tokens/s": stats[1] / elapsed,
                  "sequences_per_update": stats[2] / max(window["steps"], 1),  # the real count, over all ranks
                  "step_time_s": elapsed / max(window["steps"], 1), **_memory(self.device)}
        record.update(self._data_counts())
        self.history.append({"step": self.global_step, **record})
        self._write_log(self.global_step, record)
        window.update(loss_sum=torch.zeros((), device=self.device), tokens=torch.zeros((), device=self.device),
                      sequences=0, start=time.perf_counter(), steps=0)
        return loss

    def _evaluate(self) -> None:
        self._start_state = None
        self._check_run_folder()
        with rng_untouched():  # the training's random streams go on as if no validation had run (exact resume)
            metrics = self.eval_hook(self) or {}
        self._validated_at, self._validation_due = self.global_step, False
        if metrics:
            self._write_log(self.global_step, {f"val_{k}" if not k.startswith("val") else k: v
                                                          for k, v in metrics.items()})


def _processes(count: int) -> str:
    return f"{count} process{'es' if count != 1 else ''}"


def _ranks(first: int, last: int) -> str:
    return f"rank {first}" if first == last else f"ranks {first}-{last}"


def _rate(rates) -> str:
    return "/".join(dict.fromkeys(f"{rate:.3g}" for rate in rates))  # one per distinct rate (weight-decay groups)


def _plain(value):
    """Run arguments as JSON-like plain values (weights_only loads them)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _memory(device: torch.device) -> dict:
    """Peak memory in GiB: the GPU's allocated memory since the last log (CUDA), the host RSS of this
    process since it started."""
    values = {"host_mem_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20}  # KiB on Linux
    if device.type == "cuda":
        values["gpu_mem_peak_gib"] = torch.cuda.max_memory_allocated(device) / 2 ** 30
        torch.cuda.reset_peak_memory_stats(device)
    return values


__all__ = ["Trainer", "NonFiniteLossError", "strategy_for"]
