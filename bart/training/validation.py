"""Validation during fine-tuning: a metric on the first ``n_val`` validation examples (generation +
ROUGE/BLEU, or the token loss), logged by the trainer, with the best ``save_top_k`` weights kept
(:class:`bart.training.checkpoint.BestCheckpoints`)."""
from __future__ import annotations

from typing import Optional

import torch

from bart.data.summarization import Seq2SeqDataset, read_split
from bart.evaluation import generate_texts, score
from bart.training.checkpoint import BestCheckpoints
from utils import distributed as dist_utils


class Validation:
    def __init__(self, data_dir: str, tokenizer, task: str, metric: str, n_val: Optional[int],
                 max_source_length: int, max_target_length: int, batch_size: int, gen_kwargs: dict,
                 autocast_dtype: Optional[torch.dtype], output_dir: str, save_top_k: int) -> None:
        self.data_dir, self.tokenizer, self.task, self.metric_name, self.n_val = data_dir, tokenizer, task, metric, n_val
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        self.batch_size, self.gen_kwargs, self.dtype = batch_size, gen_kwargs, autocast_dtype
        self.sources, self.targets = read_split(data_dir, "val", n_val)
        self.best = BestCheckpoints(output_dir, metric, save_top_k, lower_is_better=metric == "loss")
        self.history: list[dict] = []

    def metric(self, trainer) -> dict:
        if self.metric_name == "loss":
            return {"loss": self._loss(trainer)}
        predictions, _ = generate_texts(trainer.model, self.tokenizer, self.sources, self.batch_size,
                                        self.max_source_length, self.gen_kwargs, self.dtype)
        trainer.model.train()
        return score(self.task, predictions, self.targets)

    def _loss(self, trainer) -> float:
        dataset = Seq2SeqDataset(self.data_dir, "val", self.tokenizer, self.max_source_length,
                                 self.max_target_length, n_obs=self.n_val)
        total, tokens = 0.0, 0
        trainer.model.eval()
        with torch.no_grad():
            for start in range(0, len(dataset), 8):
                batch = dataset.collate([dataset[i] for i in range(start, min(start + 8, len(dataset)))])
                batch.pop("index")
                batch = {k: v.to(trainer.device) for k, v in batch.items()}
                total += float(trainer.model(**batch, reduction="sum").loss)
                tokens += int((batch["labels"] != -100).sum())
        trainer.model.train()
        return total / max(tokens, 1)

    def __call__(self, trainer) -> dict:
        metrics = self.metric(trainer)
        self.history.append({"step": trainer.global_step, **metrics})
        if dist_utils.is_main_process():
            self.best.consider(metrics[self.metric_name], trainer.global_step, trainer.model, metrics)
        return metrics
