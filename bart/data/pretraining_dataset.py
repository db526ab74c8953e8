"""Streaming pretraining data over LDDL Parquet shards, resumable at any batch without replay.

Each shard row (the ``sentences`` column: whole sentences joined, written by LDDL's
preprocess_bart_pretrain) is tokenized in chunks by the Rust tokenizer. A row longer than
``max_source_length`` becomes several samples of near-equal length (nothing is truncated away).
Shards are split across ranks and loader workers and reshuffled every epoch (LDDL's file split,
rows shuffled in seekable windows: see :mod:`bart.data.lddl_compat`); the noise runs in the
workers. A sample's index is a hash of its text and piece number, so its noise depends only on
(seed, epoch, text). ``held_out`` rows (pretraining's ``--n_val``: the last rows of the last
shard) are left out of training, by their text, and kept for the validation loss; they are not
counted as skipped.

Rows that cannot make a sample (empty or null, only whitespace or invisible characters, fewer
tokens than the noise needs) are skipped and counted: :attr:`PretrainingLoader.skipped_rows`,
logged by the trainer as ``skipped_rows``.

Each worker forms its own batches and sends with each one where it stands: (row, piece) of its
next sample. :meth:`PretrainingLoader.position` holds that for every worker and which worker the
next batch comes from (the DataLoader takes batches from its workers in turn);
:meth:`PretrainingLoader.seek` starts every worker at its row, so a resumed epoch reads one
window of rows per worker and decodes and noises nothing it skips.

A damaged shard met by a worker (:func:`bart.data.lddl_compat._read_file_rows` names the shard and the
row group) is sent to the main process as a :class:`ShardFailure` and raised there as a
:class:`bart.data.DataError` (one line from the entry scripts; a worker's exception would come back as
its traceback in text); whatever ends an epoch, its loader workers are shut down at once.
"""
from __future__ import annotations

import math
import os
import re
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader

from bart.data import DataError
from bart.data.lddl_compat import (
    BalancedParquetDataset,
    check_shard,
    parquet_files,
    read_shard_rows,
    usable_workers,
)
from bart.data.noise import (
    MIN_DOCUMENT_TOKENS,
    DenoisingCollator,
    DenoisingNoise,
    NoiseConfig,
)
from bart.runtime.signals import ignore_stop_signals

# a character that shows: not whitespace, not a control or zero-width/format character (BOM, ZWSP...)
_VISIBLE = re.compile(r"[^\s\x00-\x1f\x7f-\x9f\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]")


def split_ids(ids: list[int], max_length: int) -> list[list[int]]:
    """Token ids of one row (no specials) → pieces of at most max_length-2 tokens, near-equal sizes."""
    room = max_length - 2
    if room < 1:
        raise ValueError(f"max_source_length {max_length} leaves no room for a token between <s> and </s>")
    if not ids:
        return []
    count = math.ceil(len(ids) / room)
    size = math.ceil(len(ids) / count)
    return [ids[i:i + size] for i in range(0, len(ids), size)]


def is_blank(text) -> bool:
    """A row with nothing to learn from: null, empty, or only whitespace/invisible characters."""
    return not text or _VISIBLE.search(text) is None


class BartPretrainingDataset(BalancedParquetDataset):
    """Yields, per worker, ``(samples, worker, (row, piece), skipped_rows)``: a batch's samples, the
    worker (its logical number), where its next sample starts, and the rows skipped since its last
    batch. ``start_rows`` (per logical worker) and ``worker_offset`` (the logical worker of the
    DataLoader's first) place a resumed epoch; see :class:`PretrainingLoader`."""

    def __init__(self, file_paths: list[str], tokenizer, max_source_length: int, batch_size: int = 1,
                 held_out: tuple = (), **kwargs) -> None:
        super().__init__(file_paths, **kwargs)
        if batch_size < 1:
            raise ValueError(f"the batch size must be positive, got {batch_size}")
        if max_source_length < 2 + MIN_DOCUMENT_TOKENS:
            raise ValueError(f"max_source_length {max_source_length} leaves no room for a token between <s> and </s>")
        self.tokenizer = tokenizer
        self.max_source_length, self.batch_size = max_source_length, batch_size
        self.bos, self.eos = tokenizer.bos_token_id, tokenizer.eos_token_id
        self.start_rows: list = []
        self.worker_offset = 0
        self.held_out = list(held_out)
        self._held_out_keys = frozenset(zlib.crc32(t.encode("utf-8")) for t in self.held_out)

    @property
    def num_rows(self) -> int:
        """Rows in the shards, held-out rows included."""
        return sum(f.num_samples for f in self._files)

    def samples(self, texts: list, epoch: int) -> list:
        """One list of samples per text (a long row gives several, a degenerate one none)."""
        keep = [i for i, text in enumerate(texts) if not is_blank(text)]
        encoded = self.tokenizer.encode_batch_fast([texts[i] for i in keep], add_special_tokens=False) if keep else []
        decoded = [[] for _ in texts]
        for i, ids in zip(keep, encoded):
            if len(ids) < MIN_DOCUMENT_TOKENS:
                continue
            key = zlib.crc32(texts[i].encode("utf-8"))
            decoded[i] = [{"input_ids": np.asarray([self.bos, *piece, self.eos], dtype=np.int64),
                           "index": (key << 8) + number, "epoch": epoch}
                          for number, piece in enumerate(split_ids(ids, self.max_source_length))]
        return decoded

    def _decode_rows(self, texts: list) -> list:
        """Training's samples per row: :meth:`samples`, and None for a held-out row."""
        decoded = self.samples(texts, self._epoch)
        if self._held_out_keys:
            for i, text in enumerate(texts):
                if text and zlib.crc32(text.encode("utf-8")) in self._held_out_keys:
                    decoded[i] = None
        return decoded

    def __iter__(self):
        self._epoch += 1
        physical, num_workers = self._init_worker()
        worker = (physical + self.worker_offset) % num_workers
        row, piece = self.start_rows[worker] if worker < len(self.start_rows) else (0, 0)
        total = sum(f.num_samples for f in self.worker_files(worker, num_workers))
        pending, skipped = [], 0
        rows = self.worker_rows(worker, num_workers, start=row)
        while True:
            try:
                number, _, samples = next(rows)
            except StopIteration:
                break
            except DataError as err:  # a damaged shard: sent on for the main process to raise, in one line
                yield ShardFailure(str(err)), worker, (row, piece), 0
                return
            if samples is None:  # held out for validation
                continue
            if not samples:
                skipped += 1
                continue
            for p in range(piece if number == row else 0, len(samples)):
                if len(pending) == self.batch_size:  # sent once its successor is known: (row, piece) is exact
                    yield pending, worker, (number, p), skipped
                    pending, skipped = [], 0
                pending.append(samples[p])
        if pending or skipped:
            yield pending, worker, (total, 0), skipped


class ShardFailure:
    """Sent by a loader worker in place of a batch when a shard cannot be read: the DataError's message."""

    def __init__(self, message: str) -> None:
        self.message = message


class _NoiseBatch:
    """Runs in the loader workers: the noise collator on a batch's samples; the rest passes through."""

    def __init__(self, collator: DenoisingCollator) -> None:
        self.collator = collator

    def __call__(self, item):
        samples, worker, row, skipped = item
        if isinstance(samples, ShardFailure):
            return item
        return (self.collator(samples) if samples else None), worker, row, skipped


class PretrainingLoader:
    """Batches for the training loop: ``set_epoch``, iteration, and ``position`` / ``seek`` (where
    the batches taken so far leave the epoch; iterations of the epoch then start there)."""

    # why a checkpoint resumes only on the processes that wrote it (the trainer's refusal says it)
    position_per_process = ("pretraining's data position is each process's own (the LDDL shards and their shuffled "
                            "windows are dealt to the processes and their loader workers)")

    def __init__(self, dataset: BartPretrainingDataset, collator: DenoisingCollator, batch_size: int,
                 num_workers: int, seed: int) -> None:
        self.dataset, self.collator = dataset, collator
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.epoch = 0
        self.skipped_rows = 0  # over the whole run (a resumed run continues the count)
        self._start = ([[0, 0] for _ in range(max(num_workers, 1))], 0)  # where an iteration starts
        self._rows, self._next_worker = self._start[0], 0  # where the batches taken so far leave the epoch

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.dataset.set_epoch(epoch)
        self._start = ([[0, 0] for _ in range(max(self.num_workers, 1))], 0)
        self._rows, self._next_worker = self._start[0], 0

    def _layout(self) -> dict:
        """What a position depends on besides the epoch: a resumed run must match it."""
        d = self.dataset
        return {"shards": len(d._files), "rows": sum(f.num_samples for f in d._files), "processes": d._world_size,
                "workers": max(self.num_workers, 1), "batch_size": self.batch_size,
                "window": d._shuffle_buffer_size, "max_source_length": d.max_source_length,
                "held_out": len(d.held_out)}

    def position(self) -> dict:
        return {"epoch": self.epoch, "rows": [list(r) for r in self._rows], "next_worker": self._next_worker,
                "skipped_rows": self.skipped_rows, "layout": self._layout()}

    def identity(self) -> str:
        """What the training shards are, for a resume to compare: their count, rows, bytes and a hash of their
        names and sizes (other shards of the same size read otherwise)."""
        import hashlib

        files = self.dataset._files
        sizes = [(os.path.basename(f.path), os.path.getsize(f.path)) for f in files]
        digest = hashlib.sha256(repr(sizes).encode("utf-8")).hexdigest()[:12]
        return (f"{len(files)} shards, {sum(f.num_samples for f in files)} rows, {sum(size for _, size in sizes)} "
                f"bytes, files {digest}")

    def seek(self, position: dict) -> None:
        """The next iteration of this epoch starts where ``position`` (from :meth:`position`) stood."""
        if position.get("epoch") != self.epoch:
            raise ValueError(f"the saved data position is in epoch {position.get('epoch')}, the loader in {self.epoch}")
        layout = position.get("layout")
        if layout != self._layout():
            changed = ", ".join(f"{k} {layout.get(k)} → {v}" for k, v in self._layout().items()
                                if not layout or layout.get(k) != v)
            raise ValueError(f"the saved data position does not fit this run's data ({changed}): resume with the "
                             f"same shards, --train_batch_size, --num_workers, --max_source_length and processes")
        self._start = ([list(r) for r in position["rows"]], int(position["next_worker"]))
        self._rows, self._next_worker = self._start
        self.skipped_rows = int(position["skipped_rows"])

    def __iter__(self):
        """The epoch from its start, or from the position of the last ``seek``."""
        self._rows, self._next_worker = [list(r) for r in self._start[0]], self._start[1]
        self.dataset.set_epoch(self.epoch)
        self.dataset.start_rows = [tuple(r) for r in self._rows]
        self.dataset.worker_offset = self._next_worker
        workers = max(self.num_workers, 1)
        # a private generator: creating workers never draws from the global RNG (exact resume)
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        loader = DataLoader(self.dataset, batch_size=None, collate_fn=_NoiseBatch(self.collator),
                            num_workers=self.num_workers, generator=generator, persistent_workers=False,
                            worker_init_fn=ignore_stop_signals if self.num_workers else None,
                            prefetch_factor=4 if self.num_workers else None)
        batches = iter(loader)
        try:
            for batch, worker, row, skipped in batches:
                if isinstance(batch, ShardFailure):
                    raise DataError(batch.message)
                self._rows[worker] = list(row)
                self._next_worker = (worker + 1) % workers  # the DataLoader asks its workers in turn
                self.skipped_rows += skipped
                if batch is not None:
                    yield batch
        finally:
            # the workers end now, whatever ended the epoch: left to the garbage collector while an error
            # unwinds, they outlive the main thread, and the interpreter's exit waits on them for ever (they
            # ignore the SIGTERM it sends them: ignore_stop_signals)
            shutdown = getattr(batches, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()


def held_out_rows(files: list[str], n_val: int) -> list[str]:
    """The last ``n_val`` rows of the shards (last shard first), the same on every rank and run."""
    rows: list[str] = []
    for path in reversed(files):
        if len(rows) >= n_val:
            break
        texts = [t for t in read_shard_rows(path) if t]
        rows = texts[max(len(texts) - (n_val - len(rows)), 0):] + rows
    total = sum(check_shard(f) for f in files) if n_val else 0
    if n_val and n_val >= total:
        raise DataError(f"--n_val {n_val}: the data holds only {total} rows; hold out fewer")
    return rows


def build_pretraining_loader(data_dir: str, tokenizer, batch_size: int, max_source_length: int,
                             noise_config: NoiseConfig, *, seed: int, num_workers: int = 2, local_rank: int = 0,
                             shuffle_buffer_size: int = 16384, n_val: int = 0) -> PretrainingLoader:
    """``n_val``: rows held out of training for the validation loss (see :func:`held_out_rows`)."""
    from bart.runtime.distributed import world_size

    files = parquet_files(data_dir)
    workers = usable_workers(len(files), world_size(), num_workers)
    if workers != num_workers:
        print(f"[data] {len(files)} shards: using {workers} loader worker(s) per process instead of {num_workers} "
              f"(shards per process must divide evenly among workers)")
    if workers > 1:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    dataset = BartPretrainingDataset(files, tokenizer, max_source_length, batch_size,
                                     held_out=held_out_rows(files, n_val), local_rank=local_rank,
                                     base_seed=seed, num_workers=workers, shuffle_buffer_size=shuffle_buffer_size)
    noise = DenoisingNoise(noise_config, tokenizer.word_start_mask(), tokenizer.sentence_end_mask(),
                           tokenizer.mask_token_id, seed=seed,
                           bos=tokenizer.bos_token_id, eos=tokenizer.eos_token_id)
    collator = DenoisingCollator(noise, max_source_length, tokenizer.pad_token_id, decoder_start_token_id=2)
    return PretrainingLoader(dataset, collator, batch_size, workers, seed)
