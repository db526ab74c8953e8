"""The table at the end of the benchmark scripts, from the dllogger logs of their runs.

    python -m utils.benchmark_table training RESULTS_DIR
    python -m utils.benchmark_table inference RESULTS_DIR

RESULTS_DIR holds one folder per run named ``{count}{gpu|cpu}_{precision}`` with a dllogger.json.
Training: throughput averaged over the logged windows after the first (the warm-up). Inference:
the throughput and latency figures run_eval.py logs.
"""
from __future__ import annotations

import os
import re
import sys

from utils.dllogger_compat import read_dllogger

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


def table(kind: str, results_dir: str) -> str:
    lines = []
    if kind == "training":
        lines += ["| processes | precision | sequences/s | target tokens/s | s/update | speedup vs 1 |",
                  "|---|---|---|---|---|---|"]
        single = {}
        for count, device, precision, folder in _runs(results_dir):
            row = training_row(os.path.join(folder, "dllogger.json"))
            single.setdefault(precision, row["seq/s"] if count == 1 else None)
            base = single.get(precision)
            speedup = f"{row['seq/s'] / base:.2f}x" if base else "-"
            lines.append(f"| {count} {device.upper()} | {precision} | {row['seq/s']:.2f} | {row['tokens/s']:,.0f} | "
                         f"{row['step_time_s']:.3f} | {speedup} |")
    elif kind == "inference":
        lines += ["| processes | precision | summaries/s | latency avg s | p50 | p90 | p95 | p99 |",
                  "|---|---|---|---|---|---|---|---|"]
        for count, device, precision, folder in _runs(results_dir):
            row = inference_row(os.path.join(folder, "dllogger.json"))
            lines.append(f"| {count} {device.upper()} | {precision} | {row['throughput_seq_per_s']:.2f} | "
                         f"{row['latency_avg_s']:.3f} | {row['latency_p50_s']:.3f} | {row['latency_p90_s']:.3f} | "
                         f"{row['latency_p95_s']:.3f} | {row['latency_p99_s']:.3f} |")
    else:
        raise ValueError(f"kind must be training or inference, got {kind!r}")
    return "\n".join(lines)


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
