"""Charts of one or several dllogger JSON logs: one row of panels per log (a phase: pretraining phase
1, phase 2, fine-tuning), each on that phase's own update axis, all in one PNG.

    python -m utils.plot_logs results/phase_1/dllogger.json results/phase_2/dllogger.json \
        results/finetuning/dllogger.json --labels "phase 1" "phase 2" "fine-tuning" --out plots/

Panels of a row (those the log has data for): loss in nat/token (training loss raw and smoothed,
validation loss), learning rate, throughput (sequences/s), validation metrics (ROUGE F1 or BLEU, %).
Only ``LOG`` records with a numeric step are drawn. Writes ``training_curves.png``.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Iterable

from bart.records.dllogger_compat import read_dllogger

# metric names a log may use, first found wins; (title, y unit, names) for the single-line panels
TRAIN_LOSS = ("loss", "train_loss")
LEARNING_RATE = ("learning rate", "learning rate", ("learning_rate", "lr"))
THROUGHPUT = ("throughput", "sequences/s", ("seq/s", "seq_per_s", "throughput", "train_throughput"))
VALIDATION_METRICS = ("val_rouge1", "val_rouge2", "val_rougeL", "val_rougeLsum", "val_bleu")
OUTPUT_NAME = "training_curves.png"


def read_log(path: str) -> list[dict]:
    """The ``LOG`` records of a dllogger JSON file; of a run started again before its first checkpoint (its log
    goes on, each new start marked ``{"attempt": N}``), the last attempt's: the curve of the run that went on."""
    records = [r for r in read_dllogger(path) if r.get("type") == "LOG"]
    starts = [i for i, r in enumerate(records) if "attempt" in (r.get("data") or {})]
    return records[starts[-1]:] if starts else records


def series(records: Iterable[dict], names: tuple[str, ...]) -> tuple[list[float], list[float]]:
    """(steps, values) of the first metric in ``names`` that the log holds."""
    records = [r for r in records if isinstance(r.get("step"), (int, float))]
    for name in names:
        points = [(r["step"], r["data"][name]) for r in records
                  if isinstance(r.get("data", {}).get(name), (int, float))]
        if points:
            return [p[0] for p in points], [p[1] for p in points]
    return [], []


def smooth(values: list[float], window: int | None = None) -> list[float]:
    """Centred moving average (about a tenth of the points, odd; narrower at the ends), so the
    smoothed curve does not lag behind a falling loss as an exponential average would."""
    window = window or max(3, len(values) // 10 | 1)
    half = window // 2
    out = []
    for i in range(len(values)):
        reach = min(half, i, len(values) - 1 - i)
        part = values[i - reach:i + reach + 1]
        out.append(sum(part) / len(part))
    return out


def _panels(records: list[dict]) -> list[tuple]:
    """The panels one log has data for: (kind, title, y label, [(steps, values, label, style)])."""
    panels = []
    steps, loss = series(records, TRAIN_LOSS)
    val_steps, val_loss = series(records, ("val_loss",))
    if steps or val_steps:
        lines = []
        if steps:
            lines.append((steps, loss, "training (raw)", "raw"))
            if len(steps) > 3:
                lines.append((steps, smooth(loss), "training (smoothed)", "smooth"))
        if val_steps:
            lines.append((val_steps, val_loss, "validation", "val"))
        panels.append(("loss", "loss", "nat/token", lines))
    for title, unit, names in (LEARNING_RATE, THROUGHPUT):
        s, v = series(records, names)
        if s:
            panels.append((title, title, unit, [(s, v, None, "plain")]))
    metric_lines = []
    for name in VALIDATION_METRICS:
        s, v = series(records, (name,))
        if s:
            metric_lines.append((s, v, name[4:], "val"))
    if metric_lines:
        unit = "BLEU" if all(line[2] == "bleu" for line in metric_lines) else "ROUGE F1 (%)"
        panels.append(("metrics", "validation metrics", unit, metric_lines))
    return panels


STYLES = {"raw": dict(alpha=0.35, linewidth=1), "smooth": dict(linewidth=2), "plain": dict(linewidth=1.5),
          "val": dict(marker="o", linewidth=1.5)}


def plot_logs(paths: list[str], out_dir: str, labels: list[str] | None = None) -> list[str]:
    """Write ``training_curves.png`` (one row per log); returns the written paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = labels or [os.path.basename(os.path.dirname(p)) or os.path.basename(p) for p in paths]
    if len(labels) != len(paths):
        raise ValueError(f"plot_logs: {len(paths)} logs but {len(labels)} labels")
    rows = [(label, _panels(read_log(path))) for path, label in zip(paths, labels)]
    rows = [(label, panels) for label, panels in rows if panels]
    if not rows:
        raise ValueError(f"plot_logs: none of {paths} holds loss, learning-rate, throughput or validation records")
    columns = max(len(panels) for _, panels in rows)
    fig, axes = plt.subplots(len(rows), columns, figsize=(4.2 * columns, 3.3 * len(rows)), squeeze=False)
    for row, (label, panels) in enumerate(rows):
        for col in range(columns):
            ax = axes[row][col]
            if col >= len(panels):
                ax.axis("off")
                continue
            kind, title, unit, lines = panels[col]
            for steps, values, name, style in lines:
                ax.plot(steps, values, label=name, **STYLES[style])
            ax.set_title(f"{label}: {title}", fontsize=10)
            ax.set_xlabel("update (this phase's numbering)", fontsize=8)
            ax.set_ylabel(unit, fontsize=8)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
            if kind == "learning rate":
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
            if any(name for _, _, name, _ in lines):
                ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, OUTPUT_NAME)
    fig.savefig(path + ".tmp.png", dpi=100)
    os.replace(path + ".tmp.png", path)
    plt.close(fig)
    return [path]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", help="dllogger JSON logs (the --json-summary files), one per phase")
    parser.add_argument("--out", required=True, help="folder for the PNG file")
    parser.add_argument("--labels", nargs="+", help="one row title per log (default: the log's folder)")
    args = parser.parse_args(argv)
    try:
        written = plot_logs(args.logs, args.out, args.labels)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"plot_logs: {err}") from None
    for path in written:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
