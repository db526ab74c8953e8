"""Generation over a list of sources, sharded across ranks, with latency figures; and scoring.

Sources are sorted by length (fewer padded tokens per batch), dealt to ranks, generated in
batches, gathered with a collective and returned in input order. Each batch's wall time is kept
for latency percentiles.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np
import torch

from utils import distributed as dist_utils
from utils.metrics import calculate_bleu, calculate_rouge


def generate_texts(model, tokenizer, sources: list[str], batch_size: int, max_source_length: int,
                   gen_kwargs: dict, dtype: Optional[torch.dtype] = None) -> tuple[list[str], list[float]]:
    """(generated text per source in input order, per-batch seconds on this rank)."""
    world, rank = dist_utils.world_size(), dist_utils.rank()
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    mine = batches[rank::world]
    device = next(model.parameters()).device
    results, latencies = [], []
    model.eval()
    for batch in mine:
        encoded = tokenizer([sources[i] for i in batch], max_length=max_source_length, truncation=True,
                            padding=True, return_tensors="pt")
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model.generate(encoded["input_ids"].to(device), attention_mask=encoded["attention_mask"].to(device),
                                 **gen_kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        latencies.append(time.perf_counter() - start)
        per_source = out.shape[0] // len(batch)
        texts = tokenizer.batch_decode(out, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        for j, index in enumerate(batch):
            results.append((index, [t.strip() for t in texts[j * per_source:(j + 1) * per_source]]))
    gathered = dist_utils.all_gather_objects(results)
    by_index = {i: t for part in gathered for i, t in part}
    if len(by_index) != len(sources):
        raise RuntimeError(f"generation returned {len(by_index)} of {len(sources)} outputs")
    return [" ".join(by_index[i]) if len(by_index[i]) == 1 else "\t".join(by_index[i])
            for i in range(len(sources))], latencies


def latency_stats(latencies: list[float], examples: int, total_seconds: float) -> dict:
    values = np.array(latencies) if latencies else np.zeros(1)
    return {"latency_avg_s": float(values.mean()), "latency_p50_s": float(np.percentile(values, 50)),
            "latency_p90_s": float(np.percentile(values, 90)), "latency_p95_s": float(np.percentile(values, 95)),
            "latency_p99_s": float(np.percentile(values, 99)),
            "throughput_seq_per_s": examples / max(total_seconds, 1e-9)}


def score(task: str, predictions: list[str], references: list[str]) -> dict:
    if task == "translation":
        return calculate_bleu(predictions, references)
    return calculate_rouge(predictions, references)
