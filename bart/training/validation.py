"""Validation during training, run by the trainer every ``val_check_interval`` updates and at the end.

Fine-tuning (:class:`Validation`): a metric on the first ``n_val`` validation examples (generation +
ROUGE/BLEU, or the token loss), the best ``save_top_k`` weights kept
(:class:`bart.training.checkpoint.BestCheckpoints`), and early stopping after
``early_stopping_patience`` validations without improvement (not before ``min_steps`` updates: the
reference's ``--min_epochs``/``--min_steps``). Pretraining
(:class:`PretrainingValidation`): the reconstruction loss on the rows held out of training
(``--n_val``), their noise drawn once so that every validation sees the same inputs.

Both run under the trainer's precision (``trainer.precision``). Fine-tuning validation works on the
strategy's whole model (:meth:`bart.training.strategy.Strategy.whole_model`: under FSDP a gathered
copy), so that each rank generates for its own sources, and best-k keeps the same full weights, the same
files, whatever the strategy. Every validation runs under :func:`bart.training.checkpoint.rng_untouched` (the
trainer's, and the step-0 one of :meth:`Validation.begin`): a sampling generation draws nothing from the
training's random streams, so a run resumed after an abandoned validation trains as the uninterrupted one.
"""
from __future__ import annotations

import functools
import time

import torch

from bart.data.summarization import Seq2SeqDataset
from bart.evaluation import LOSS, generate_texts, lower_is_better, score
from bart.records.progress import track
from bart.runtime import distributed as dist_utils
from bart.runtime.signals import StoppedAtBatch, stop_at_batch_boundary
from bart.training.checkpoint import BestCheckpoints, rng_untouched


def token_loss(trainer, batches: list[dict], model: torch.nn.Module | None = None) -> float:
    """Mean cross-entropy per target token (nat/token) of ``model`` (default the trainer's) over
    ``batches``, under the run's autocast. Every rank evaluates every batch (the trainer's model under
    FSDP needs the same forwards on all ranks). A stop signal ends it before the next batch, on every rank at
    once (:class:`bart.runtime.signals.StoppedAtBatch`)."""
    model = trainer.model if model is None else model
    total, tokens = 0.0, 0
    model.eval()
    try:
        with torch.no_grad():
            for batch in track(batches, "validate", unit="batch", enabled=dist_utils.is_main_process(), leave=False):
                stop_at_batch_boundary("the validation", trainer.device)
                batch = {k: v.to(trainer.device) for k, v in batch.items() if k != "index" and v is not None}
                with trainer.precision.autocast(trainer.device.type):
                    total += float(model(**batch, reduction="sum").loss)
                tokens += int((batch["labels"] != -100).sum())
    finally:
        model.train()
    return total / max(tokens, 1)


class Validation:
    """Every validation gives the token loss (labels cut at ``max_target_length``: the reference's
    ``--val_max_target_length``) and, where the ranked metric is a score, the task's scores (ROUGE-1/2/L/Lsum or
    BLEU), the mean generated length (``gen_len``: tokens of the generated text as the tokenizer encodes it) and
    the generation's seconds (``gen_time``)."""

    def __init__(self, data_dir: str, tokenizer, *, task: str, metric: str, n_val: int | None,
                 max_source_length: int, max_target_length: int, batch_size: int, gen_kwargs: dict,
                 output_dir: str, save_top_k: int, early_stopping_patience: int = 0, min_steps: int = 0,
                 early_stopping_threshold: float = 0.0, prefix: str = "") -> None:
        self.data_dir, self.tokenizer, self.task, self.metric_name, self.n_val = data_dir, tokenizer, task, metric, n_val
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        self.batch_size, self.gen_kwargs, self.prefix = batch_size, gen_kwargs, prefix
        self.dataset = Seq2SeqDataset(data_dir, "val", tokenizer, max_source_length, max_target_length, n_obs=n_val,
                                      prefix=prefix)  # read once: the generation's sources, the loss's batches
        self.sources, self.targets = self.dataset.sources, self.dataset.targets
        self.lower_is_better = lower_is_better(metric)
        self.best = BestCheckpoints(output_dir, metric, save_top_k, lower_is_better=self.lower_is_better)
        self.patience, self.min_steps, self.threshold = early_stopping_patience, min_steps, early_stopping_threshold
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.without_improvement = 0
        self.history: list[dict] = []

    def begin(self, trainer, resumed: bool, before_training: bool) -> None:
        """Before the first update of this run: a resumed run goes on with the top-k of the interrupted one
        (rank 0 keeps it); ``before_training`` validates once at step 0 (not after a resume) and logs it. A stop
        signal abandons that validation at its next batch and stops the run there (nothing trained: no checkpoint)."""
        if resumed and dist_utils.is_main_process():
            self.best.restore()
        if before_training and trainer.step == 0:
            try:
                with rng_untouched():  # as every validation (the trainer's): the training's streams stay as they are
                    metrics = self(trainer)
            except StoppedAtBatch as stopped:
                trainer.stop_for_signal(stopped.received, validation_abandoned=True)
            trainer.logger.log(step=trainer.global_step, data={f"val_{k}": v for k, v in metrics.items()})

    def state_dict(self) -> dict:
        """What early stopping has counted so far (kept in training checkpoints: a resumed run stops where
        the uninterrupted run would have)."""
        return {"best_value": self.best_value, "best_step": self.best_step,
                "without_improvement": self.without_improvement, "history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        best = state["best_value"]
        self.best_value, self.best_step = (None if best is None else float(best)), state["best_step"]
        self.without_improvement, self.history = int(state["without_improvement"]), list(state["history"])

    def metric(self, trainer, model: torch.nn.Module) -> dict:
        """The validation metrics of ``model`` (the strategy's whole model of ``trainer``)."""
        metrics = {LOSS: self._loss(trainer, model)}
        if self.metric_name == LOSS:
            return metrics
        start = time.perf_counter()
        try:  # a stop signal abandons it at a batch boundary (StoppedAtBatch): no metric, no best-k change
            predictions, _ = generate_texts(model, self.tokenizer, [self.prefix + s for s in self.sources],
                                            self.batch_size,
                                            self.max_source_length, self.gen_kwargs, trainer.precision,
                                            desc="validate", nested=True, stopped_during="the validation")
        finally:
            model.train()
        metrics.update(score(self.task, predictions, self.targets))
        lengths = [len(ids) for ids in self.tokenizer(predictions, add_special_tokens=False)["input_ids"]]
        metrics["gen_len"] = round(sum(lengths) / max(len(lengths), 1), 2)
        metrics["gen_time"] = round(time.perf_counter() - start, 3)
        return metrics

    @functools.cached_property
    def _loss_batches(self) -> list[dict]:
        """The validation examples as the loss's batches of 8, tokenized once for every validation."""
        dataset = self.dataset
        return [dataset.collate([dataset[i] for i in range(start, min(start + 8, len(dataset)))])
                for start in range(0, len(dataset), 8)]

    def _loss(self, trainer, model: torch.nn.Module) -> float:
        return token_loss(trainer, self._loss_batches, model)

    def __call__(self, trainer) -> dict:
        """The metrics, logged; the history and the best-k checkpoints keep those that the weights decide (not
        ``gen_time``, the machine's), so that a resumed or resharded run keeps the same records."""
        with trainer.strategy.whole_model(trainer.model) as model:  # collective to enter; FSDP: gathered once
            metrics = self.metric(trainer, model)
            kept = {k: v for k, v in metrics.items() if k != "gen_time"}
            self.history.append({"step": trainer.global_step, **kept})
            if dist_utils.is_main_process():
                self.best.consider(metrics[self.metric_name], trainer.global_step, model, kept)
        self._early_stopping(trainer, float(metrics[self.metric_name]))
        return metrics

    def _early_stopping(self, trainer, value: float) -> None:
        """Every rank gets the same metric (generations are gathered; the loss is computed in full)."""
        change = 0.0 if self.best_value is None else (self.best_value - value if self.lower_is_better else
                                                      value - self.best_value)
        improved = self.best_value is None or change > self.threshold  # --early_stopping_threshold: by more than it
        if improved:
            self.best_value, self.best_step, self.without_improvement = value, trainer.global_step, 0
            return
        self.without_improvement += 1
        if self.patience and self.without_improvement >= self.patience and trainer.step >= self.min_steps:
            trainer.request_stop(f"val_{self.metric_name} has not improved for {self.without_improvement} validations "
                                 f"(--early_stopping_patience {self.patience}; best {self.best_value:.4g} at step "
                                 f"{self.best_step})")


class PretrainingValidation:
    """Reconstruction (denoising) loss on held-out rows; ``samples`` from
    :meth:`bart.data.pretraining_dataset.BartPretrainingDataset.samples`, noised by ``collator``."""

    def __init__(self, samples: list[dict], collator, batch_size: int) -> None:
        if not samples:
            raise ValueError("pretraining validation needs at least one held-out sample")
        self.batches = [collator(samples[i:i + batch_size]) for i in range(0, len(samples), batch_size)]
        self.num_samples = len(samples)
        self.history: list[dict] = []

    @classmethod
    def from_loader(cls, loader, batch_size: int) -> PretrainingValidation | None:
        """The held-out rows of a :class:`~bart.data.pretraining_dataset.PretrainingLoader` (None: none held out)."""
        dataset = loader.dataset
        if not dataset.held_out:
            return None
        samples = [s for row in dataset.samples(dataset.held_out, epoch=0) for s in row]
        return cls(samples, loader.collator, batch_size)

    def __call__(self, trainer) -> dict:
        loss = token_loss(trainer, self.batches)
        self.history.append({"step": trainer.global_step, "loss": loss})
        return {"loss": loss}
