"""Generation over a list of sources, sharded across ranks, with latency figures; and scoring.

Sources are sorted by length (fewer padded tokens per batch), dealt to ranks, generated in
batches, gathered with a collective and returned in input order. Each batch's wall time is kept
for latency percentiles.

Generation runs under the run's ``Precision``. Every rank runs the same rounds of batches, and a stop signal is
agreed before each (:func:`bart.runtime.signals.stop_at_batch_boundary`). ``predict_split`` writes its files
atomically; on a stop signal it writes nothing and says, in one line, where the trained weights are and how to
predict again (exit 75). ``run_evaluation`` is run_eval.py's (``pseudolabel_results.json`` for
``--num_return_sequences`` > 1; the reference's latency names also in ``{type_path}_rouge.json``).
``TASK_METRICS`` is the one "task -> metric" rule: the metrics file's name, the scoring function, and what
validation ranks by (``--val_metric``'s default and choices, ``--task``'s choices).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from bart.data.summarization import read_split
from bart.errors import Preempted, UserError
from bart.files.checkpoint_io import atomic_write_text
from bart.records.dllogger_compat import Logger
from bart.records.progress import Progress
from bart.runtime import distributed as dist_utils
from bart.runtime.precision import FP32, Precision
from bart.runtime.signals import StoppedAtBatch, stop_at_batch_boundary
from bart.scoring.metrics import ROUGE_KEYS, calculate_bleu, calculate_rouge
from bart.tokenization.tokenization_bart import model_inputs


def generate_texts(model, tokenizer, sources: list[str], batch_size: int, max_source_length: int,
                   gen_kwargs: dict, precision: Precision = FP32,
                   desc: str = "generate", nested: bool = False,
                   stopped_during: str | None = None) -> tuple[list, list[float]]:
    """(generated text per source in input order, per-batch seconds on this rank), under the run's
    ``precision`` (its autocast): a string per source, or with ``num_return_sequences`` > 1 in
    ``gen_kwargs`` a list of that many strings per source. Rank 0 shows its progress in examples (ranks
    share the work evenly); ``nested``: inside other work (validation during training), so a log gets
    only its final line. A stop signal (under a training script's ``bart.runtime.signals.StopRequest``) ends it
    before the next batch, on every rank at once: :class:`bart.runtime.signals.StoppedAtBatch` naming
    ``stopped_during`` (default ``desc``)."""
    world, rank = dist_utils.world_size(), dist_utils.rank()
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    mine = batches[rank::world]
    device = next(model.parameters()).device
    results, latencies = [], []
    model.eval()
    progress = Progress(sum(len(b) for b in mine), desc, unit="example", enabled=rank == 0, leave=not nested)
    for round_ in range(-(-len(batches) // world)):  # every rank the same rounds (its last may have no batch)
        try:  # a stop signal: abandoned here, between two batches, on every rank at once (nothing returned)
            stop_at_batch_boundary(stopped_during or desc, device)
        except StoppedAtBatch:
            progress.close()
            raise
        if round_ >= len(mine):
            continue
        batch = mine[round_]
        encoded = model_inputs(tokenizer, [sources[i] for i in batch], max_source_length)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with precision.autocast(device.type):
            out = model.generate(encoded["input_ids"].to(device), attention_mask=encoded["attention_mask"].to(device),
                                 **gen_kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        latencies.append(time.perf_counter() - start)
        per_source = out.shape[0] // len(batch)
        texts = tokenizer.batch_decode(out, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        for j, index in enumerate(batch):
            results.append((index, [t.strip() for t in texts[j * per_source:(j + 1) * per_source]]))
        progress.update(len(batch))
    progress.close()
    gathered = dist_utils.all_gather_objects(results)
    by_index = {i: t for part in gathered for i, t in part}
    if len(by_index) != len(sources):
        raise RuntimeError(f"generation returned {len(by_index)} of {len(sources)} outputs")
    several = (gen_kwargs.get("num_return_sequences") or 1) > 1
    return [by_index[i] if several else " ".join(by_index[i]) for i in range(len(sources))], latencies


def generation_lines(predictions: list[str]) -> str:
    """A generations file's text: one line per prediction, whatever line breaks (``\\n``, ``\\r``) a prediction's
    tokens decode to (as spaces), so that line k is example k for every reader (universal newlines)."""
    return "".join(re.sub(r"\r\n|\r|\n", " ", p) + "\n" for p in predictions)


def latency_stats(latencies: list[float], examples: int, total_seconds: float, processes: int = 1) -> dict:
    """Per-batch latency figures under two sets of names: this project's (``latency_p90_s``: numpy
    percentiles; ``throughput_seq_per_s``: examples over wall time) and the reference recipe's
    (``inference_latency_mean``, ``inference_latency_conf_{50,90,95,99,100}``: the largest of the
    fastest q% of batches; ``inference_throughput_mean``: examples over the summed batch times),
    so log parsers written for either keep working."""
    values = np.array(latencies) if latencies else np.zeros(1)
    ordered = sorted(values.tolist())
    stats = {"latency_avg_s": float(values.mean()), "latency_p50_s": float(np.percentile(values, 50)),
             "latency_p90_s": float(np.percentile(values, 90)), "latency_p95_s": float(np.percentile(values, 95)),
             "latency_p99_s": float(np.percentile(values, 99)),
             "throughput_seq_per_s": examples / max(total_seconds, 1e-9),
             "inference_latency_mean": float(values.mean()),
             "inference_throughput_mean": examples / max(float(values.sum()), 1e-9), "n_gpus": processes}
    for q in (50, 90, 95, 99, 100):
        stats[f"inference_latency_conf_{q}"] = ordered[max(int(len(ordered) * q / 100), 1) - 1]
    return stats


@dataclass(frozen=True)
class TaskMetric:
    """How a task's generations are scored."""
    name: str                                        # the metrics file: {split}_{name}.json
    score: Callable[[list[str], list[str]], dict]   # (predictions, references) -> {metric: value}
    ranked_by: str                                   # what validation ranks checkpoints by (--val_metric's default)
    keys: tuple                                      # the scores ``score`` gives (--val_metric's choices besides loss)
    higher_is_better: bool = True                    # the scores' direction (best-k, early stopping)


# task -> its metric: the one place that decides it (finetune.py's --val_metric default and choices, the files)
TASK_METRICS = {
    "summarization": TaskMetric("rouge", calculate_rouge, "rouge2", ROUGE_KEYS),
    "translation": TaskMetric("bleu", calculate_bleu, "bleu", ("bleu",)),
}
LOSS = "loss"  # the validation token loss: the one metric ranked lower-is-better
VAL_METRICS = (*dict.fromkeys(key for metric in TASK_METRICS.values() for key in metric.keys), LOSS)


def task_metric(task: str) -> str:
    """The metric validation ranks ``task``'s checkpoints by."""
    return TASK_METRICS[task].ranked_by


def lower_is_better(metric: str) -> bool:
    """Which way ``metric`` improves: the loss down, a task's scores as its :class:`TaskMetric` says."""
    return metric == LOSS or any(metric in task.keys and not task.higher_is_better for task in TASK_METRICS.values())


def check_val_metric(task: str, metric: str) -> str | None:
    """Why ``metric`` cannot rank ``task``'s validation (one line), or None."""
    allowed = (*TASK_METRICS[task].keys, LOSS)
    if metric not in allowed:
        return f"--val_metric {metric}: {task} validation gives {', '.join(allowed)}; choose one of them"
    return None


def score(task: str, predictions: list[str], references: list[str]) -> dict:
    return TASK_METRICS[task].score(predictions, references)


def predict_split(model, tokenizer, data_dir: str, split: str, output_dir: str, task: str, batch_size: int,
                  max_source_length: int, gen_kwargs: dict, n_obs: int | None = None,
                  precision: Precision = FP32, trained: str | None = None, prefix: str = "") -> dict:
    """Generate for a split, score it, and (rank 0) write ``{split}_generations.txt`` and
    ``{split}_rouge.json`` (``_bleu.json`` for translation), each whole or not at all. Returns the metrics.
    A stop signal ends it before the next batch with nothing written (:class:`bart.errors.Preempted`, exit 75),
    its line naming ``trained`` (the weights this run trained and wrote, if any) and how to predict again."""
    sources, targets = read_split(data_dir, split, n_obs)
    sources = [prefix + source for source in sources]
    try:
        predictions, _ = generate_texts(model, tokenizer, sources, batch_size, max_source_length, gen_kwargs,
                                        precision, stopped_during=f"the prediction of the {split} split")
    except StoppedAtBatch as stopped:
        again = (f"the trained weights are written ({trained}): run the same command with --resume_from_checkpoint "
                 f"auto to predict without training again" if trained else "run the same command again to predict")
        raise Preempted(f"{stopped.received} received during the prediction of the {split} split: stopped before it "
                        f"ended (no {split}_generations.txt, no metrics written); {again}") from None
    metrics = score(task, predictions, targets)
    if dist_utils.is_main_process():
        atomic_write_text(os.path.join(output_dir, f"{split}_generations.txt"), generation_lines(predictions))
        atomic_write_text(os.path.join(output_dir, f"{split}_{TASK_METRICS[task].name}.json"),
                          json.dumps(metrics, indent=2))
    return metrics


def run_evaluation(model, tokenizer, args, gen_kwargs: dict, precision: Precision, is_main: bool,
                   split: tuple[list[str], list[str]] | None = None) -> dict:
    """run_eval.py's work: generate for ``args.type_path`` (``split``: its (sources, targets) read already, else
    read here), write the generations, the metrics (``{type_path}_rouge.json`` / ``_bleu.json``) and the dllogger
    record with latency figures."""
    sources, targets = split or read_split(args.data.data_dir, args.evaluation.type_path, args.evaluation.n_obs)
    start = time.perf_counter()
    prefix = args.data.prefix if args.data.prefix is not None else getattr(model.config, "prefix", None) or ""
    if prefix and args.data.prefix is None and is_main:
        print(f"[eval] the model's source prefix {prefix!r} (its config's prefix, from fine-tuning's --source_prefix) "
              f"is put in front of every source; --prefix '' turns it off", flush=True)
    predictions, latencies = generate_texts(model, tokenizer, [prefix + s for s in sources],
                                            args.generation.eval_batch_size, args.data.max_source_length, gen_kwargs,
                                            precision)
    elapsed = time.perf_counter() - start
    all_latencies = [x for part in dist_utils.all_gather_objects(latencies) for x in part]
    result = {}
    if is_main and args.evaluation.num_return_sequences > 1:
        return _write_pseudolabels(args, predictions, all_latencies, len(sources), elapsed)
    if is_main:
        generations_file, metrics_file = evaluation_files(args)
        os.makedirs(args.evaluation.save_path, exist_ok=True)
        atomic_write_text(generations_file, generation_lines(predictions))
        result = score(args.data.task, predictions, targets)
        stats = latency_stats(all_latencies, len(sources), elapsed, dist_utils.world_size())
        result.update(n_obs=len(sources), runtime_s=round(elapsed, 4), seconds_per_sample=round(elapsed / len(sources), 6))
        # the reference's latency and throughput keys in the metrics file too, as its run_eval.py writes them
        result.update({k: v for k, v in stats.items() if k.startswith("inference_") or k == "n_gpus"})
        if args.evaluation.info:
            result["info"] = args.evaluation.info
        if args.evaluation.dump_args:
            result["generate_kwargs"] = gen_kwargs
        atomic_write_text(metrics_file, json.dumps(result, indent=2))
        logger = _summary_logger(args)
        logger.log(step=(), data={**{k: v for k, v in result.items() if isinstance(v, (int, float))}, **stats})
        logger.close()
        print(json.dumps(result, indent=2), file=sys.stderr)
    return result


def evaluation_files(args) -> list[str]:
    """What :func:`run_evaluation` writes into SAVE_PATH for ``args`` (the split's generations and metrics file,
    or the candidates of --num_return_sequences)."""
    if args.evaluation.num_return_sequences > 1:
        return [os.path.join(args.evaluation.save_path, "pseudolabel_results.json")]
    split = os.path.join(args.evaluation.save_path, args.evaluation.type_path)
    return [f"{split}_generations.txt", f"{split}_{TASK_METRICS[args.data.task].name}.json"]


def refuse_earlier_evaluation(args) -> None:
    """An earlier evaluation's files in SAVE_PATH are replaced only with ``--overwrite`` (as ``bart.export``):
    without it, one line naming them, before the model is loaded."""
    found = [os.path.basename(p) for p in evaluation_files(args) if os.path.exists(p)]
    if found and not args.evaluation.overwrite:
        raise UserError(f"SAVE_PATH {args.evaluation.save_path} holds an earlier evaluation ({', '.join(found)}); pass "
                        f"--overwrite to replace it, or choose another SAVE_PATH")


def _summary_logger(args) -> Logger:
    """The evaluation's dllogger log: ``--json-summary`` as given (dllogger's own rule: written anew), else
    SAVE_PATH/dllogger.json, appended to where it exists (a training run's log in its own folder is kept)."""
    if args.logging.json_summary:
        return Logger(args.logging.json_summary)
    path = os.path.join(args.evaluation.save_path, "dllogger.json")
    existing = os.path.isfile(path) and os.path.getsize(path) > 0
    if existing:
        print(f"[run_eval] {path} exists (another run's log): the evaluation's records are appended to it "
              f"(--json-summary FILE for a log of its own)", file=sys.stderr)
    return Logger(path, append=existing)


def _write_pseudolabels(args, predictions: list[list[str]], latencies: list[float], examples: int,
                        elapsed: float) -> dict:
    """``--num_return_sequences`` > 1, as the reference's run_eval.py: every source's candidates, in input
    order, as a JSON list of lists in ``pseudolabel_results.json`` (no ROUGE: there is no one prediction
    to score); the latency figures go to the dllogger log."""
    os.makedirs(args.evaluation.save_path, exist_ok=True)
    path = os.path.join(args.evaluation.save_path, "pseudolabel_results.json")
    atomic_write_text(path, json.dumps(predictions, indent=4))
    stats = latency_stats(latencies, examples, elapsed, dist_utils.world_size())
    logger = _summary_logger(args)
    logger.log(step=(), data={"n_obs": examples, **stats})
    logger.close()
    print(f"{examples} sources x {args.evaluation.num_return_sequences} candidates written to {path}", file=sys.stderr)
    return {"n_obs": examples, "pseudolabel_results": path, **stats}
