"""Project-side fixes for lddl 0.1.0 under current numpy/Python (site-packages stay untouched).

(a) numpy 2 removed ``np.NAN``, which lddl's balancer uses: :func:`ensure_numpy_nan` puts the
    alias back before the balancer runs.
(b) the balancer crashes in ``Shard.flush`` when asked for more shards than there are input files:
    :func:`balance_shards` first splits the largest input files until there are enough.
(f) when the row count divides evenly by the shard count, the balancer's progress tracker keeps a
    zero-count target for ``base + 1`` rows, counts shards of that size as ready and never
    finishes: :func:`balance_shards` runs it with :class:`ExactProgress`, which drops empty targets.
(c) ``ParquetDataset`` asserts ``min + 1 == max`` samples per file, rejecting perfectly balanced
    shards; (d) it asserts the file count is divisible by world size x workers; (e) without
    persistent workers each epoch repeats epoch 0's shuffle, and up to one sample per file is
    dropped. :class:`BalancedParquetDataset` accepts any balance, checks the divisions with errors
    that say what to change, takes its epoch from :meth:`set_epoch`, yields every row, and lets a
    row decode into several samples (``_decode_rows`` returns a list per row).
(g) LDDL's shuffle buffer makes the order at row k depend on every row before it, so a resumed run
    had to read and decode the epoch up to its position. :class:`BalancedParquetDataset` keeps
    LDDL's file split (files shuffled per epoch, then dealt to ranks and workers) but shuffles a
    worker's rows in windows of ``shuffle_buffer_size`` rows, each permuted by its own seed (base
    seed, epoch, rank, worker, window): row k of a worker's epoch is found from k alone, so
    :meth:`BalancedParquetDataset.worker_rows` starts at any row reading only that window's row
    groups and decoding nothing before k.
(h) ``lddl/torch/__init__.py`` imports LDDL's BERT loader, which imports transformers (about 3 s of a
    process's start-up) although BART's loader uses only ``lddl.torch.datasets``, ``.log`` and
    ``.utils``: the ``lddl.torch`` package is registered with its ``__init__`` deferred until an
    attribute of the package itself is asked for (:func:`utils.lazy_package.defer_package_init`).
"""
from __future__ import annotations

import argparse
import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from utils.lazy_package import defer_package_init

EXPECTED_COLUMN = "sentences"


def ensure_numpy_nan() -> None:
    if not hasattr(np, "NAN"):
        np.NAN = np.nan  # lddl.dask.load_balance uses the numpy 1 spelling


def parquet_files(folder: str) -> list[str]:
    """The shards of a folder, sorted; a clear error for a missing or empty folder."""
    from lddl.utils import get_all_parquets_under

    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no pretraining data folder at {folder} (run scripts/preprocess_pretrain_data.sh)")
    files = get_all_parquets_under(folder)
    if not files:
        raise FileNotFoundError(f"{folder} holds no .parquet shards (run scripts/preprocess_pretrain_data.sh)")
    return files


def check_shard(path: str) -> int:
    """Number of rows of a shard; errors name the file for unreadable, empty or wrongly shaped shards."""
    try:
        schema = pq.read_schema(path)
        rows = pq.ParquetFile(path).metadata.num_rows
    except (pa.ArrowInvalid, OSError) as err:
        raise ValueError(f"{path} is not a readable parquet shard ({err}); delete it and preprocess again") from err
    if rows == 0:
        raise ValueError(f"{path} holds no rows; delete it and balance the shards again")
    column_type = schema.field(EXPECTED_COLUMN).type if EXPECTED_COLUMN in schema.names else None
    if column_type is None or not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise ValueError(f"{path} has columns {schema.names}; a BART pretraining shard needs a string column "
                         f"'{EXPECTED_COLUMN}' (LDDL's preprocess_bart_pretrain output)")
    return rows


def _split_largest(files: list[str]) -> list[str]:
    """Split the largest parquet file in two (rows halved); returns the new file list."""
    largest = max(files, key=lambda f: pq.ParquetFile(f).metadata.num_rows)
    table = pq.read_table(largest)
    if table.num_rows < 2:
        raise ValueError(f"cannot make more shards: {largest} holds {table.num_rows} row(s); preprocess with "
                         f"more data or ask for fewer shards")
    half = table.num_rows // 2
    stem = largest[: -len(".parquet")]
    first, second = stem + ".a.parquet", stem + ".b.parquet"
    pq.write_table(table.slice(0, half), first)
    pq.write_table(table.slice(half), second)
    os.remove(largest)
    return [f for f in files if f != largest] + [first, second]


def _exact_progress_class(on_ready=None):
    from lddl.dask.load_balance import Progress

    class ExactProgress(Progress):
        """lddl's Progress without targets of zero shards (fix (f)); tells ``on_ready`` how many
        shards are finished after each balancing round."""

        def __init__(self, shards) -> None:
            super().__init__(shards)
            self._targets = {size: count for size, count in self._targets.items() if count > 0}

        def report(self, shards):
            result = super().report(shards)
            if on_ready is not None:
                on_ready(len(self.ready_shards))
            return result

    return ExactProgress


def balance_shards(indir: str, outdir: str, num_shards: int, keep_orig: bool = False, on_ready=None) -> dict[str, int]:
    """lddl's balancer (in this process; MPI singleton) into ``num_shards`` shards; returns
    ``{shard name: rows}`` as written to ``.num_samples.json``. ``on_ready(n)``: called with the number
    of finished shards after each balancing round."""
    ensure_numpy_nan()
    from lddl.dask import load_balance

    original = load_balance.Progress
    load_balance.Progress = _exact_progress_class(on_ready)  # fix (f), for this run only
    try:
        return _run_balancer(load_balance, indir, outdir, num_shards, keep_orig)
    finally:
        load_balance.Progress = original


def _run_balancer(load_balance, indir: str, outdir: str, num_shards: int, keep_orig: bool) -> dict[str, int]:
    files = parquet_files(indir)
    while len(files) < num_shards:
        files = _split_largest(files)
    # a fresh parser each time: lddl's default parser is shared between calls (its arguments would repeat)
    args = load_balance.attach_args(argparse.ArgumentParser()).parse_args(
        ["--indir", indir, "--outdir", outdir, "--num-shards", str(num_shards)]
        + (["--keep-orig"] if keep_orig else ["--no-keep-orig"]))
    load_balance.main(args)
    with open(os.path.join(outdir, ".num_samples.json")) as f:
        return json.load(f)


def _base_dataset():
    defer_package_init("lddl.torch")  # fix (h)
    from lddl.torch.datasets import ParquetDataset
    return ParquetDataset


class BalancedParquetDataset(_base_dataset()):
    """``lddl.torch.datasets.ParquetDataset``'s file split with fixes (c), (d), (e) and seekable
    windows (g); subclasses implement ``_decode_rows(texts)`` (one list of samples per text)."""

    decode_chunk_rows = 1024  # rows tokenized per call of _decode_rows

    def __init__(self, file_paths: list[str], transform=lambda x: x, local_rank: int = 0,
                 shuffle_buffer_size: int = 16384, base_seed: int = 12345, logger=None, start_epoch: int = 0,
                 num_workers: int = 1) -> None:
        from lddl.torch.datasets import IterableDataset
        from lddl.torch.log import DatasetLogger
        from lddl.torch.utils import get_num_nodes, get_node_rank, get_nproc_per_node, get_rank, get_world_size

        IterableDataset.__init__(self)  # lddl's own __init__ holds the asserts this class replaces
        if shuffle_buffer_size < 1:
            raise ValueError(f"shuffle_buffer_size must be positive, got {shuffle_buffer_size}")
        self._transform = transform
        self._local_rank = local_rank
        self._shuffle_buffer_size = shuffle_buffer_size
        self._base_seed = base_seed
        self._rank, self._world_size = get_rank(), get_world_size()
        self._nproc_per_node = get_nproc_per_node(local_rank)
        self._num_nodes = get_num_nodes(nproc_per_node=self._nproc_per_node)
        self._node_rank = get_node_rank(nproc_per_node=self._nproc_per_node)
        self._epoch = start_epoch - 1
        self._logger = logger or DatasetLogger(log_dir=None, node_rank=self._node_rank, local_rank=local_rank,
                                               log_level=logging.WARNING)
        rows = {path: check_shard(path) for path in file_paths}
        per_process = len(file_paths) // self._world_size
        if len(file_paths) % self._world_size or per_process % max(num_workers, 1):
            raise ValueError(
                f"{len(file_paths)} shards cannot be split evenly over {self._world_size} process(es) x "
                f"{max(num_workers, 1)} loader worker(s): balance into a multiple of "
                f"{self._world_size * max(num_workers, 1)} shards, or change --num_workers "
                f"(see usable_workers())")
        self._files = self._get_files(file_paths)
        for f in self._files:  # rows are found by number: the counts must be the files' own
            if f.num_samples != rows[f.path]:
                raise ValueError(f"{os.path.join(os.path.dirname(f.path), '.num_samples.json')} gives "
                                 f"{f.num_samples} rows for {os.path.basename(f.path)}, the file holds "
                                 f"{rows[f.path]}: delete the .json (it is rebuilt from the files) or balance again")
        counts = [f.num_samples for f in self._files]
        if max(counts) - min(counts) > 1:
            raise ValueError(f"shards are not balanced ({min(counts)}..{max(counts)} samples per file); run "
                             f"lddl's balancer (scripts/preprocess_pretrain_data.sh does)")
        self._num_samples_per_file = min(counts)
        self._world_rng_state = None
        self._worker_rng_state = None

    def __iter__(self):
        """Every row of this worker's share of the epoch, expanded into its samples."""
        self._epoch += 1
        worker, num_workers = self._init_worker()
        for _, _, samples in self.worker_rows(worker, num_workers):
            for sample in samples:
                yield self._transform(sample)

    def set_epoch(self, epoch: int) -> None:
        """Fix (e): the epoch travels with the dataset object that workers receive."""
        self._epoch = epoch - 1  # incremented when an iterator starts, as lddl does

    @property
    def epoch(self) -> int:
        return self._epoch

    def worker_files(self, worker: int, num_workers: int) -> list:
        """LDDL's split: the files shuffled alike on every rank (seed: base seed + epoch), then
        dealt to ranks and to each rank's workers."""
        self._init_rng_states(worker, num_workers)
        files = self._world_identical_sample(self._files, k=len(self._files))
        return files[self._rank::self._world_size][worker::num_workers]

    def worker_rows(self, worker: int, num_workers: int, start: int = 0):
        """``(row number, text, samples)`` for a worker's rows of the epoch in order, from row
        ``start``: the rows of its files one after another, cut in windows of shuffle_buffer_size
        rows, each window permuted. Rows before ``start`` are neither decoded nor, outside
        ``start``'s window, read."""
        files = self.worker_files(worker, num_workers)
        total, size = sum(f.num_samples for f in files), self._shuffle_buffer_size
        cache: dict = {}
        for window in range(start // size, -(-total // size)):
            low, high = window * size, min(total, (window + 1) * size)
            texts = self._read_rows(files, low, high, cache)
            order = self._window_order(high - low, worker, num_workers, window)
            for first in range(max(start - low, 0), high - low, self.decode_chunk_rows):
                picked = order[first:first + self.decode_chunk_rows]
                chunk = [texts[i] for i in picked]
                for offset, (text, samples) in enumerate(zip(chunk, self._decode_rows(chunk))):
                    yield low + first + offset, text, samples

    def _window_order(self, rows: int, worker: int, num_workers: int, window: int) -> np.ndarray:
        seed = [self._base_seed % 2**63, self._epoch, self._world_size, self._rank, num_workers, worker, window]
        return np.random.default_rng(seed).permutation(rows)

    def _read_rows(self, files: list, start: int, stop: int, cache: dict) -> list:
        """The texts of rows [start, stop) of ``files`` read one after another; only the row groups
        holding them are read (``cache`` keeps the last row groups read of each file in use)."""
        texts, offset, used = [], 0, set()
        for f in files:
            low, high = max(start - offset, 0), min(stop - offset, f.num_samples)
            if low < high:
                texts += _read_file_rows(f.path, low, high, cache)
                used.add(f.path)
            offset += f.num_samples
            if offset >= stop:
                break
        for path in set(cache) - used:  # files are read in order: one left behind is done
            del cache[path]
        return texts

    def _decode_rows(self, texts: list) -> list:
        raise NotImplementedError


def _read_file_rows(path: str, start: int, stop: int, cache: dict) -> list:
    """Rows [start, stop) of one parquet file from the row groups that hold them."""
    if path not in cache:
        cache[path] = {"file": pq.ParquetFile(path), "groups": None, "column": None}
    entry = cache[path]
    metadata = entry["file"].metadata
    groups, first, begin = [], 0, 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        if begin < stop and begin + rows > start:
            first = first if groups else begin
            groups.append(group)
        begin += rows
    if entry["groups"] != groups:
        entry["groups"] = groups
        entry["column"] = entry["file"].read_row_groups(groups, columns=[EXPECTED_COLUMN]).column(EXPECTED_COLUMN)
    return entry["column"].slice(start - first, stop - start).to_pylist()


def usable_workers(num_files: int, world_size: int, requested: int) -> int:
    """The largest worker count <= requested that divides each process's share of the files
    (0 stays 0: loading in the main process)."""
    if requested <= 0:
        return 0
    per_process = num_files // max(world_size, 1)
    for workers in range(max(requested, 1), 0, -1):
        if per_process % workers == 0:
            return workers
    return 1
