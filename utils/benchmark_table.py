"""The table at the end of the benchmark scripts, from the dllogger logs of their runs.

    python -m utils.benchmark_table training RESULTS_DIR
    python -m utils.benchmark_table inference RESULTS_DIR
    python -m utils.benchmark_table pretraining RESULTS_DIR
    python -m utils.benchmark_table stability RESULTS_DIR

RESULTS_DIR holds one folder per run named ``{count}{gpu|cpu}_{precision}`` with a dllogger.json
(inference: ``{count}{gpu|cpu}_{precision}_bs{batch}``, a repeated measurement ``..._run{k}``, every one a row;
pretraining: ``len{L}_{nodes}node_{count}{gpu|cpu}_{precision}``; stability: ``seed_{N}`` with
``test_rouge.json``). Training and pretraining: throughput averaged over the logged windows after the
first (the warm-up). Inference: the throughput and latency figures run_eval.py logs, a row per batch size.
Stability: ROUGE per seed, mean and standard deviation.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys

from bart.records.dllogger_compat import read_dllogger

_RUN = re.compile(r"^(\d+)(gpu|cpu)_(\w+)$")


def _runs(results_dir: str) -> list[tuple[int, str, str, str]]:
    runs = []
    for name in sorted(os.listdir(results_dir)):
        match = _RUN.match(name)
        if match and os.path.isdir(os.path.join(results_dir, name)):
            runs.append((int(match.group(1)), match.group(2), match.group(3), os.path.join(results_dir, name)))
    if not runs:
        raise FileNotFoundError(f"no run folders ({{count}}{{gpu|cpu}}_{{precision}}) in {results_dir}")
    return sorted(runs)


def training_row(log_path: str) -> dict:
    windows = [r["data"] for r in read_dllogger(log_path) if isinstance(r.get("step"), int) and "seq/s" in r["data"]]
    if not windows:
        raise ValueError(f"{log_path} has no training log lines with seq/s (did the run finish?)")
    measured = windows[1:] or windows
    return {"seq/s": sum(w["seq/s"] for w in measured) / len(measured),
            "tokens/s": sum(w["tokens/s"] for w in measured) / len(measured),
            "step_time_s": sum(w["step_time_s"] for w in measured) / len(measured), "windows": len(measured)}


def inference_row(log_path: str) -> dict:
    found = [r["data"] for r in read_dllogger(log_path) if "throughput_seq_per_s" in r.get("data", {})]
    if not found:
        raise ValueError(f"{log_path} has no run_eval summary line (did the run finish?)")
    return found[-1]


def _training_table(results_dir: str) -> list[str]:
    lines = ["| processes | precision | sequences/s | target tokens/s | s/update | speedup vs 1 |",
             "|---|---|---|---|---|---|"]
    single = {}
    for count, device, precision, folder in _runs(results_dir):
        row = training_row(os.path.join(folder, "dllogger.json"))
        single.setdefault(precision, row["seq/s"] if count == 1 else None)
        base = single.get(precision)
        speedup = f"{row['seq/s'] / base:.2f}x" if base else "-"
        lines.append(f"| {count} {device.upper()} | {precision} | {row['seq/s']:.2f} | {row['tokens/s']:,.0f} | "
                     f"{row['step_time_s']:.3f} | {speedup} |")
    return lines


# run_inference_benchmark.sh's folders: a batch size each, a repeat of one measurement into the same results folder
# _run2, _run3 (an earlier version's folders had no batch size: "-")
_INFERENCE_RUN = re.compile(r"^(\d+)(gpu|cpu)_([a-z0-9]+?)(?:_bs(\d+))?(?:_run(\d+))?$")


def inference_runs(results_dir: str) -> list[tuple]:
    """(processes, device, precision, batch size or None, repeat, folder) of every inference run folder, sorted."""
    runs = []
    for name in os.listdir(results_dir):
        match = _INFERENCE_RUN.match(name)
        if match and os.path.isdir(os.path.join(results_dir, name)):
            count, device, precision, batch, repeat = match.groups()
            runs.append((int(count), device, precision, int(batch) if batch else None, int(repeat or 1),
                         os.path.join(results_dir, name)))
    if not runs:
        raise FileNotFoundError(f"no run folders ({{count}}{{gpu|cpu}}_{{precision}}_bs{{batch}}) in {results_dir}")
    return sorted(runs, key=lambda r: (r[0], r[1], r[2], r[3] or 0, r[4]))


def _inference_table(results_dir: str) -> list[str]:
    lines = ["| processes | precision | batch size | summaries/s | latency avg s | p50 | p90 | p95 | p99 | run |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for count, device, precision, batch, _, folder in inference_runs(results_dir):
        row = inference_row(os.path.join(folder, "dllogger.json"))
        lines.append(f"| {count} {device.upper()} | {precision} | {batch or '-'} | {row['throughput_seq_per_s']:.2f} | "
                     f"{row['latency_avg_s']:.3f} | {row['latency_p50_s']:.3f} | {row['latency_p90_s']:.3f} | "
                     f"{row['latency_p95_s']:.3f} | {row['latency_p99_s']:.3f} | {os.path.basename(folder)} |")
    return lines


_PRETRAINING_RUN = re.compile(r"^len(\d+)_(\d+)node_(\d+)(gpu|cpu)_(\w+)$")


def pretraining_rows(results_dir: str) -> dict:
    """{(length, nodes, per node, device): {precision: seq/s}} from scripts/run_pretraining_benchmark.sh's runs."""
    rows: dict = {}
    for name in sorted(os.listdir(results_dir)):
        match = _PRETRAINING_RUN.match(name)
        if match and os.path.isdir(os.path.join(results_dir, name)):
            length, nodes, count, device, precision = match.groups()
            key = (int(length), int(nodes), int(count), device)
            rows.setdefault(key, {})[precision] = training_row(os.path.join(results_dir, name, "dllogger.json"))["seq/s"]
    if not rows:
        raise FileNotFoundError(f"no run folders (len{{L}}_{{nodes}}node_{{count}}{{gpu|cpu}}_{{precision}}) in {results_dir}")
    return rows


def _pretraining_table(results_dir: str) -> list[str]:
    """The seed README's pre-training performance tables: per length, nodes and processes per node, the
    throughput (sequences/s over all processes) of each precision, the speedup of the second precision over
    the first (its "TF32 - BF16" column, with PRECISIONS="tf32 bf16"), and weak scaling: throughput over
    the throughput of the fewest processes measured at that length and precision."""
    rows = pretraining_rows(results_dir)
    precisions = list(dict.fromkeys(p for values in rows.values() for p in values))
    speedup = precisions[1] + " / " + precisions[0] if len(precisions) > 1 else None
    header = ["sequence length", "nodes", "processes per node"] + [f"sequences/s {p}" for p in precisions]
    header += ([f"speedup {speedup}"] if speedup else []) + [f"weak scaling {p}" for p in precisions]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    base = {}
    for (length, nodes, count, device), values in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] * kv[0][2])):
        for p, value in values.items():
            base.setdefault((length, p), value)
        cells = [str(length), str(nodes), f"{count} {device.upper()}"]
        cells += [f"{values[p]:.2f}" if p in values else "-" for p in precisions]
        if speedup:
            both = precisions[0] in values and precisions[1] in values
            cells.append(f"{values[precisions[1]] / values[precisions[0]]:.2f}" if both else "-")
        cells += [f"{values[p] / base[(length, p)]:.2f}" if p in values else "-" for p in precisions]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


STABILITY_METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def stability_scores(results_dir: str, split: str = "test") -> dict:
    """{seed: {metric: value}} from scripts/run_stability_test.sh's ``seed_{N}/{split}_rouge.json`` files."""
    scores = {}
    for name in os.listdir(results_dir):
        match = re.match(r"^seed_(\d+)$", name)
        path = os.path.join(results_dir, name, f"{split}_rouge.json")
        if match and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                scores[int(match.group(1))] = json.load(f)
    if not scores:
        raise FileNotFoundError(f"no seed_{{N}}/{split}_rouge.json in {results_dir}")
    return dict(sorted(scores.items()))


def _stability_table(results_dir: str) -> list[str]:
    """The seed README's training stability test: each metric per seed, the mean and the standard deviation
    (the sample's, n - 1; 0 for one seed)."""
    scores = stability_scores(results_dir)
    seeds = list(scores)
    lines = ["| metric | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | std |", "|" + "---|" * (len(seeds) + 3)]
    for metric in STABILITY_METRICS:
        values = [scores[s][metric] for s in seeds if metric in scores[s]]
        if len(values) != len(seeds):
            continue
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        lines.append(f"| {metric} | " + " | ".join(f"{v:.2f}" for v in values) +
                     f" | {statistics.fmean(values):.2f} | {std:.2f} |")
    return lines


TABLES = {"training": _training_table, "inference": _inference_table, "pretraining": _pretraining_table,
          "stability": _stability_table}


def table(kind: str, results_dir: str) -> str:
    if kind not in TABLES:
        raise ValueError(f"kind must be one of {', '.join(TABLES)}, got {kind!r}")
    return "\n".join(TABLES[kind](results_dir))


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    try:
        print(table(argv[0], argv[1]))
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"benchmark_table: {err}")


if __name__ == "__main__":
    main()
