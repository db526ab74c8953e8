"""Text corpora → balanced LDDL Parquet shards for pretraining, one folder per sequence length.

    python -m bart.data.preprocess --wikipedia DIR --common_crawl DIR --open_webtext DIR \
        --out data --seq_lengths 128 512 --num_shards 256 --workers 8

Corpora are folders of ``*.txt`` files, one document per line (Wikipedia as LDDL's downloader lays
it out: ``<path>/<lang>/``); any of them may be absent. For each length L, LDDL's
preprocess_bart_pretrain (sentences split with nltk Punkt, offline data) writes raw shards, and
LDDL's balancer turns them into ``pretrain_lddl_{L}/shard-*.parquet`` with ``.num_samples.json``.
A folder that is already complete is left alone. ``--schedule local`` (default) runs both steps on
a local dask cluster. ``--schedule mpi`` runs the dask pipeline on MPI (start with mpirun, needs
dask-mpi) and only that step, for one length per mpirun: dask-mpi's scheduler and worker ranks
never reach the balancer, whose MPI collectives would wait for them forever. Balance afterwards in
a plain process with ``--stage balance`` (scripts/preprocess_pretrain_data.sh does both).

Progress (bart/records/progress.py: a bar in a terminal, lines with rate and ETA in a log): the dask
pipeline counts the partitions written to the sink (and their rows), the balancer its finished
shards.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time

from bart.records.progress import Progress


def output_complete(folder: str) -> bool:
    marker = os.path.join(folder, ".num_samples.json")
    if not os.path.isfile(marker):
        return False
    with open(marker) as f:
        names = json.load(f)
    return bool(names) and all(os.path.isfile(os.path.join(folder, n)) for n in names)


def _offline_nltk() -> None:
    """LDDL calls nltk.download('punkt'); the data comes from bart.scoring.nltk_data instead."""
    import nltk

    from bart.scoring.nltk_data import ensure_punkt

    ensure_punkt()
    nltk.download = lambda *args, **kwargs: True


class PartitionWatcher:
    """Progress of a dask ``to_parquet``: polls the sink for finished ``*.parquet`` partitions (a
    file whose footer cannot be read yet is still being written) and counts their rows."""

    def __init__(self, sink: str, partitions: int, desc: str, poll_s: float = 2.0) -> None:
        self.sink, self.poll_s = sink, poll_s
        self.rows: dict[str, int] = {}
        self.progress = Progress(partitions, desc, unit="partition")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def poll(self) -> None:
        import pyarrow.parquet as pq

        names = sorted(n for n in os.listdir(self.sink) if n.endswith(".parquet")) if os.path.isdir(self.sink) else []
        for name in names:
            if name not in self.rows:
                try:
                    self.rows[name] = pq.ParquetFile(os.path.join(self.sink, name)).metadata.num_rows
                except Exception:  # noqa: BLE001 - not complete yet
                    continue
        rows = sum(self.rows.values())
        elapsed = max(self.progress.elapsed_s, 1e-9)
        self.progress.update(len(self.rows) - self.progress.n, rows=rows, rows_per_s=round(rows / elapsed, 1))

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def __enter__(self) -> PartitionWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()
        self.progress.close()


def run_lddl_preprocess(corpora: dict, sink: str, seq_length: int, workers: int, schedule: str,
                        num_blocks: int | None) -> None:
    from lddl.dask.bart import pretrain as lddl_pretrain

    _offline_nltk()
    save = lddl_pretrain.save

    def save_with_progress(pairs, path, output_format="parquet"):
        with PartitionWatcher(path, pairs.npartitions, f"preprocess {seq_length}"):
            return save(pairs, path, output_format=output_format)
    argv = ["--schedule", schedule, "--sink", sink, "--target-seq-length", str(seq_length),
            "--local-n-workers", str(workers)]
    for name, path in corpora.items():
        argv += [f"--{name.replace('_', '-')}", path]
    if num_blocks:
        argv += ["--num-blocks", str(num_blocks)]
    lddl_pretrain.save = save_with_progress  # lddl's main looks it up at call time
    try:
        lddl_pretrain.main(lddl_pretrain.attach_args(argparse.ArgumentParser()).parse_args(argv))
    finally:
        lddl_pretrain.save = save
        if schedule == "local":
            _close_local_cluster()


def _close_local_cluster() -> None:
    """LDDL's main starts a local dask cluster (scheduler, dashboard, worker processes) for each call and
    never closes it: each length would leave its workers running beside the next length's for as long
    as this process lives. Closing the client that started the cluster closes the cluster."""
    import dask.distributed

    try:
        client = dask.distributed.default_client()
    except ValueError:  # no client: nothing was started
        return
    client.close()


STAGES = ("all", "preprocess", "balance")


def corpus_folder(kind: str, path: str, lang: str = "en") -> str:
    """The folder LDDL's reader takes for a corpus given as what its downloader wrote or as the reader's
    own input. LDDL's downloaders write ``<outdir>/source/<lang>/*.txt`` (download_wikipedia) and
    ``<outdir>/source/*.txt`` (download_common_crawl, download_open_webtext); its readers take the
    folder holding ``<lang>/`` (Wikipedia) or the ``*.txt`` files (the others)."""
    def has_text(folder):
        return os.path.isdir(folder) and any(name.endswith(".txt") for name in os.listdir(folder))

    if not os.path.isdir(path):
        raise FileNotFoundError(f"--{kind} {path}: no such folder")
    if kind == "wikipedia":
        for candidate in (os.path.join(path, "source"), path):
            if has_text(os.path.join(candidate, lang)):
                return candidate
        raise FileNotFoundError(f"--wikipedia {path}: no {lang}/*.txt in {os.path.join(path, 'source')} (what "
                                f"LDDL's download_wikipedia writes) nor in {path}; did the download finish?")
    for candidate in (os.path.join(path, "source"), path):
        if has_text(candidate):
            return candidate
    raise FileNotFoundError(f"--{kind} {path}: no *.txt in {os.path.join(path, 'source')} (what LDDL's downloader "
                            f"writes) nor in {path}; did the download finish?")


def preprocess(corpora: dict, out_dir: str, seq_lengths: list[int], num_shards: int, workers: int,
               schedule: str = "local", log=print, stage: str = "all") -> list[str]:
    """``stage``: "all" (preprocess then balance), "preprocess" (leaves ``pretrain_lddl_{L}.raw.tmp``)
    or "balance" (turns that folder into ``pretrain_lddl_{L}``)."""
    if schedule == "mpi" and (stage != "preprocess" or len(seq_lengths) != 1):
        raise ValueError("--schedule mpi runs only the dask pipeline, for one length per mpirun: pass "
                         "--stage preprocess and one --seq_lengths value, then balance in a plain process "
                         "with --stage balance (as scripts/preprocess_pretrain_data.sh does)")
    if stage != "balance":
        if not corpora:
            raise ValueError("no corpus given: pass at least one of --wikipedia, --common_crawl, --open_webtext")
        corpora = {kind: corpus_folder(kind, path) for kind, path in corpora.items()}
    from bart.data.lddl_compat import (
        balance_shards,  # LDDL imports transformers: after the checks above
    )

    os.makedirs(out_dir, exist_ok=True)  # once the inputs are known usable: a refused run leaves no folder behind
    written = []
    for length in seq_lengths:
        final = os.path.join(out_dir, f"pretrain_lddl_{length}")
        if output_complete(final):
            log(f"[preprocess] {final} is complete: nothing to do")
            written.append(final)
            continue
        raw, staging = final + ".raw.tmp", final + ".balanced.tmp"
        start = time.perf_counter()
        if stage != "balance":
            shutil.rmtree(raw, ignore_errors=True)
            log(f"[preprocess] length {length}: LDDL preprocess_bart_pretrain ({schedule}, {workers} workers) → {raw}")
            run_lddl_preprocess(corpora, raw, length, workers, schedule, num_blocks=max(num_shards, workers))
            if stage == "preprocess":
                log(f"[preprocess] length {length}: raw shards in {raw}; balance them with --stage balance")
                continue
        elif not os.path.isdir(raw):
            raise FileNotFoundError(f"{raw} not found: run --stage preprocess for length {length} first")
        log(f"[preprocess] length {length}: balancing into {num_shards} shards → {final}")
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        with Progress(num_shards, f"balance {length}", unit="shard") as progress:
            counts = balance_shards(raw, staging, num_shards, on_ready=lambda ready: progress.update(ready - progress.n))
        shutil.rmtree(raw, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        log(f"[preprocess] length {length}: {sum(counts.values())} rows in {len(counts)} shards "
            f"({time.perf_counter() - start:.0f} s)")
        written.append(final)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wikipedia", help="download_wikipedia's --outdir (<path>/source/en/*.txt), or a folder "
                                            "holding en/*.txt")
    parser.add_argument("--common_crawl", help="download_common_crawl's --outdir (<path>/source/*.txt), or a folder "
                                               "of *.txt")
    parser.add_argument("--open_webtext", help="download_open_webtext's --outdir (<path>/source/*.txt), or a folder "
                                               "of *.txt")
    parser.add_argument("--out", required=True, help="data folder; pretrain_lddl_{L} are written inside")
    parser.add_argument("--seq_lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--num_shards", type=int, default=256,
                        help="balanced shards per length; a multiple of GPUs x loader workers")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="dask worker processes")
    parser.add_argument("--schedule", choices=("local", "mpi"), default="local",
                        help="mpi: the dask pipeline on mpirun's ranks (with --stage preprocess, one length)")
    parser.add_argument("--stage", choices=STAGES, default="all",
                        help="all: preprocess and balance; preprocess: raw shards only; balance: raw → balanced")
    args = parser.parse_args(argv)
    corpora = {k: vars(args)[k] for k in ("wikipedia", "common_crawl", "open_webtext") if vars(args)[k]}
    try:
        preprocess(corpora, args.out, args.seq_lengths, args.num_shards, args.workers, args.schedule,
                   stage=args.stage)
    except (FileNotFoundError, ValueError) as err:  # the user's input: one line, exit 2 (as every entry point)
        print(f"preprocess: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
