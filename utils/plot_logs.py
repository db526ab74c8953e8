"""Turn one or several dllogger JSON logs into PNG charts (loss, learning rate, throughput vs step).

    python -m utils.plot_logs results/phase_1/log.json results/phase_2/log.json --out plots/

Several logs are overlaid in one chart per metric, labelled by file name (or ``--labels``). A log
whose steps continue another's (phase 2 after phase 1) can be drawn on a shared step axis with
``--offset_steps``. Only the ``LOG`` records with a numeric step and the metric are drawn.
"""
from __future__ import annotations

import argparse
import os
from typing import Iterable

from utils.dllogger_compat import read_dllogger

# Each chart: (file stem, title, the metric names a log may use for it, first found wins).
CHARTS = (
    ("loss", "training loss", ("loss", "train_loss", "total_loss")),
    ("learning_rate", "learning rate", ("learning_rate", "lr")),
    ("throughput", "throughput (sequences/s)", ("seq/s", "seq_per_s", "throughput", "train_throughput")),
)


def read_log(path: str) -> list[dict]:
    """The ``LOG`` records of a dllogger JSON file."""
    return [r for r in read_dllogger(path) if r.get("type") == "LOG"]


def series(records: Iterable[dict], names: tuple[str, ...]) -> tuple[list[float], list[float]]:
    """(steps, values) of the first metric in ``names`` that the log holds."""
    records = [r for r in records if isinstance(r.get("step"), (int, float))]
    for name in names:
        points = [(r["step"], r["data"][name]) for r in records
                  if isinstance(r.get("data", {}).get(name), (int, float))]
        if points:
            return [p[0] for p in points], [p[1] for p in points]
    return [], []


def plot_logs(paths: list[str], out_dir: str, labels: list[str] | None = None,
              offsets: list[int] | None = None) -> list[str]:
    """Write one PNG per chart that has data; returns the written paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = labels or [os.path.basename(os.path.dirname(p)) or os.path.basename(p) for p in paths]
    offsets = offsets or [0] * len(paths)
    if not (len(labels) == len(offsets) == len(paths)):
        raise ValueError(f"plot_logs: {len(paths)} logs but {len(labels)} labels and {len(offsets)} offsets")
    logs = [read_log(p) for p in paths]
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for stem, title, names in CHARTS:
        fig, ax = plt.subplots(figsize=(7, 4))
        drawn = False
        for records, label, offset in zip(logs, labels, offsets):
            steps, values = series(records, names)
            if steps:
                ax.plot([s + offset for s in steps], values, label=label, marker="." if len(steps) < 30 else None)
                drawn = True
        if drawn:
            ax.set_xlabel("optimizer step")
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            path = os.path.join(out_dir, f"{stem}.png")
            fig.savefig(path + ".tmp.png", dpi=110)
            os.replace(path + ".tmp.png", path)
            written.append(path)
        plt.close(fig)
    if not written:
        raise ValueError(f"plot_logs: none of {paths} holds loss, learning-rate or throughput records")
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", help="dllogger JSON logs (the --json-summary files)")
    parser.add_argument("--out", required=True, help="folder for the PNG files")
    parser.add_argument("--labels", nargs="+", help="one legend label per log (default: the log's folder)")
    parser.add_argument("--offset_steps", nargs="+", type=int,
                        help="per log, a number added to its steps (e.g. phase 1's steps for phase 2)")
    args = parser.parse_args(argv)
    for path in plot_logs(args.logs, args.out, args.labels, args.offset_steps):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
