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
    attribute of the package itself is asked for (:func:`bart.runtime.lazy_package.defer_package_init`).
(i) a damaged shard (cut short, garbage bytes, bad snappy data) is a :class:`bart.data.DataError` naming it:
    at start-up :func:`check_shard` reads each shard's footer and first page; damage further in stops
    the run when its row group is read, naming the shard and the row group (pyarrow itself raises
    ``ArrowInvalid`` / ``OSError: Corrupt snappy compressed data`` naming neither).
"""
from __future__ import annotations

import argparse
import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bart.data import DataError
from bart.runtime.lazy_package import defer_package_init

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


_REPAIR = "delete it and preprocess again (or restore it from where it was copied)"
# a damaged shard: what pyarrow raises (truncated footer, bad page headers, snappy/zstd data, bad UTF-8)
SHARD_READ_ERRORS = (pa.ArrowException, OSError, EOFError, ValueError, IndexError)


def check_shard(path: str) -> int:
    """Number of rows of a shard; errors (:class:`bart.data.DataError`) name the file for unreadable, empty
    or wrongly shaped shards. Besides the footer (schema, row counts) it reads the first rows of the first
    row group: the dictionary page and the first data page, decompressed and decoded (measured: 2.3 ms for
    a 19 MB shard, 145 ms for 64 of them, where reading them whole takes 3.2 s), so a shard damaged from
    its start stops the run before it starts; damage further in is found, and named, when the row group is
    read (:func:`_read_file_rows`)."""
    try:
        shard = pq.ParquetFile(path, buffer_size=1 << 16)  # buffered: only the pages read are fetched
        schema, rows = shard.schema_arrow, shard.metadata.num_rows
    except SHARD_READ_ERRORS as err:
        raise DataError(f"{path} is not a readable parquet shard ({type(err).__name__}: {_first_line(err)}); "
                        f"{_REPAIR}") from err
    if rows == 0:
        raise DataError(f"{path} holds no rows; delete it and balance the shards again")
    column_type = schema.field(EXPECTED_COLUMN).type if EXPECTED_COLUMN in schema.names else None
    if column_type is None:
        raise DataError(f"{path} has columns {schema.names}; a BART pretraining shard needs a string column "
                        f"'{EXPECTED_COLUMN}' (LDDL's preprocess_bart_pretrain output)")
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise DataError(f"{path}: its column '{EXPECTED_COLUMN}' is {column_type}, not string; a BART pretraining "
                        f"shard holds text there (LDDL's preprocess_bart_pretrain output): write the shards again "
                        f"from text (python -m bart.data.preprocess)")
    try:
        next(shard.iter_batches(batch_size=1, columns=[EXPECTED_COLUMN]), None)
    except SHARD_READ_ERRORS as err:
        raise DataError(f"pretraining shard {path} is damaged: its first page (row group 0 of "
                        f"{shard.metadata.num_row_groups}) cannot be read ({type(err).__name__}: {_first_line(err)}); "
                        f"{_REPAIR}") from err
    return rows


def _first_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text[:200] or type(err).__name__


def _split_largest(files: list[str]) -> list[str]:
    """Split the largest parquet file in two (rows halved); returns the new file list."""
    largest = max(files, key=lambda f: pq.ParquetFile(f).metadata.num_rows)
    table = pq.read_table(largest)
    if table.num_rows < 2:
        raise DataError(f"cannot make more shards: {largest} holds {table.num_rows} row(s); preprocess with "
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
        from lddl.torch.utils import (
            get_node_rank,
            get_nproc_per_node,
            get_num_nodes,
            get_rank,
            get_world_size,
        )

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
            raise DataError(
                f"{len(file_paths)} shards cannot be split evenly over {self._world_size} process(es) x "
                f"{max(num_workers, 1)} loader worker(s): balance into a multiple of "
                f"{self._world_size * max(num_workers, 1)} shards, or change --num_workers "
                f"(see usable_workers())")
        self._files = self._get_files(file_paths)
        for f in self._files:  # rows are found by number: the counts must be the files' own
            if f.num_samples != rows[f.path]:
                raise DataError(f"{os.path.join(os.path.dirname(f.path), '.num_samples.json')} gives "
                                 f"{f.num_samples} rows for {os.path.basename(f.path)}, the file holds "
                                 f"{rows[f.path]}: delete the .json (it is rebuilt from the files) or balance again")
        counts = [f.num_samples for f in self._files]
        if max(counts) - min(counts) > 1:
            raise DataError(f"shards are not balanced ({min(counts)}..{max(counts)} samples per file); run "
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

    def worker_files(self, worker: int, num_workers: int, ranks: tuple | None = None) -> list:
        """LDDL's split: the files shuffled alike on every rank (seed: base seed + epoch), then
        dealt to ranks and to each rank's workers. ``ranks``: (rank, processes) of the layout dealt,
        this process's own when None (a resume on other processes reads the checkpoint's)."""
        rank, world_size = ranks or (self._rank, self._world_size)
        self._init_rng_states(worker, num_workers)
        files = self._world_identical_sample(self._files, k=len(self._files))
        return files[rank::world_size][worker::num_workers]

    def worker_rows(self, worker: int, num_workers: int, start: int = 0, ranks: tuple | None = None):
        """``(row number, text, samples)`` for a worker's rows of the epoch in order, from row
        ``start``: the rows of its files one after another, cut in windows of shuffle_buffer_size
        rows, each window permuted. Rows before ``start`` are neither decoded nor, outside
        ``start``'s window, read. ``ranks``: as :meth:`worker_files`'s."""
        files = self.worker_files(worker, num_workers, ranks)
        total, size = sum(f.num_samples for f in files), self._shuffle_buffer_size
        cache: dict = {}
        for window in range(start // size, -(-total // size)):
            low, high = window * size, min(total, (window + 1) * size)
            texts = self._read_rows(files, low, high, cache)
            order = self._window_order(high - low, worker, num_workers, window, ranks)
            for first in range(max(start - low, 0), high - low, self.decode_chunk_rows):
                picked = order[first:first + self.decode_chunk_rows]
                chunk = [texts[i] for i in picked]
                for offset, (text, samples) in enumerate(zip(chunk, self._decode_rows(chunk))):
                    yield low + first + offset, text, samples

    def _window_order(self, rows: int, worker: int, num_workers: int, window: int,
                      ranks: tuple | None = None) -> np.ndarray:
        rank, world_size = ranks or (self._rank, self._world_size)
        seed = [self._base_seed % 2**63, self._epoch, world_size, rank, num_workers, worker, window]
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
    """Rows [start, stop) of one parquet file from the row groups that hold them; a damaged shard is a
    :class:`bart.data.DataError` naming the file and the row group that cannot be read."""
    try:
        return _read_rows_of_groups(path, start, stop, cache)
    except SHARD_READ_ERRORS as err:
        cache.pop(path, None)
        raise DataError(_damaged_shard_message(path, start, stop, err)) from err


def read_shard_rows(path: str, start: int = 0, stop: int | None = None) -> list:
    """The texts of rows [start, stop) of a shard (stop None: to its end), errors as :func:`_read_file_rows`'s."""
    return _read_file_rows(path, start, check_shard(path) if stop is None else stop, {})


def _damaged_shard_message(path: str, start: int, stop: int, err: BaseException) -> str:
    """Which row group of ``path`` fails to read (each of those holding rows [start, stop) read alone)."""
    where = f"rows {start}-{stop - 1}"
    try:
        shard = pq.ParquetFile(path)
        begin, count = 0, shard.metadata.num_row_groups
        for group in range(count):
            rows = shard.metadata.row_group(group).num_rows
            if begin < stop and begin + rows > start:
                try:
                    shard.read_row_group(group, columns=[EXPECTED_COLUMN]).column(0).to_pylist()
                except SHARD_READ_ERRORS as found:
                    where, err = f"row group {group} of {count} (rows {begin}-{begin + rows - 1})", found
                    break
            begin += rows
    except SHARD_READ_ERRORS as footer:
        where, err = "its footer", footer
    return (f"pretraining shard {path} is damaged: {where} cannot be read ({type(err).__name__}: "
            f"{_first_line(err)}); the start-up check reads only each shard's first page. {_REPAIR[0].upper()}"
            f"{_REPAIR[1:]}; pyarrow.parquet.read_table on it shows the same error")


def _read_rows_of_groups(path: str, start: int, stop: int, cache: dict) -> list:
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
