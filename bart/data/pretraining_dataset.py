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
window of rows per worker and decodes and noises nothing it skips. A position names the layout its
streams were dealt by (processes, loader workers, batch size, accumulation): a run of another layout
with the same global batch reads those streams and gives every update the samples it had there
(:class:`PretrainingLoader`, :meth:`PretrainingLoader.position_of`).

A damaged shard met by a worker (:func:`bart.data.lddl_compat._read_file_rows` names the shard and the
row group) is sent to the main process as a :class:`ShardFailure` and raised there as a
:class:`bart.data.DataError` (one line from the entry scripts; a worker's exception would come back as
its traceback in text); whatever ends an epoch, its loader workers are shut down at once.
"""
from __future__ import annotations

import copy
import math
import os
import re
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader

from bart.data import DataError, changes
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
        start = self.start_rows[worker] if worker < len(self.start_rows) else (0, 0)
        return self.stream(worker, num_workers, start)

    def stream(self, worker: int, num_workers: int, start: tuple = (0, 0), ranks: tuple | None = None):
        """The batches of one stream of the epoch (``self.epoch``): logical ``worker`` of ``num_workers`` of rank
        ``ranks`` = (rank, processes), this process's own when None, from ``start`` = (row, piece)."""
        row, piece = start
        total = sum(f.num_samples for f in self.worker_files(worker, num_workers, ranks))
        pending, skipped = [], 0
        rows = self.worker_rows(worker, num_workers, start=row, ranks=ranks)
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
    the batches taken so far leave the epoch; iterations of the epoch then start there).

    A position names the layout of its streams (processes P0 x loader workers W0, per-process batch b0,
    accumulation a0): stream (r0, w0) is loader worker w0 of process r0 there, its shards and shuffled windows
    dealt by that layout. Update u there takes, for each micro-batch j < a0 and each r0 < P0 in turn, process r0's
    next batch (its streams in turn, as its DataLoader takes them): a list of P0 x b0 x a0 slots. A run of another
    layout with the same global batch (P1 x b1 x a1 = P0 x b0 x a0) reads those streams instead of its own
    (:meth:`position_of`, :meth:`seek`): micro-batch m of rank r' is slots [p b1, (p + 1) b1) of each update,
    p = m P1 + r', so each update holds the samples it held there (their noise depends on the text alone); a short
    batch at a stream's end leaves slots empty, and a part with none is a filler row without labels. Its positions
    keep those streams' places, so that a checkpoint of it resumes on any layout with that global batch again."""

    # the position is global: every process's, merged by position_of, resumes on any processes that keep the
    # global batch (the trainer refuses a checkpoint of other processes where a loader says why it cannot)
    position_per_process = None

    def __init__(self, dataset: BartPretrainingDataset, collator: DenoisingCollator, batch_size: int,
                 num_workers: int, seed: int, accumulation: int = 1) -> None:
        self.dataset, self.collator = dataset, collator
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.accumulation = accumulation  # the run's gradient accumulation: an update's micro-batches
        self.epoch = 0
        self.skipped_rows = 0  # over the whole run (a resumed run continues the count)
        self._start = ([[0, 0] for _ in range(max(num_workers, 1))], 0)  # where an iteration starts
        self._rows, self._next_worker = self._start[0], 0  # where the batches taken so far leave the epoch
        self._other: _OtherLayout | None = None  # the streams of another layout, read since a seek to them

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.dataset.set_epoch(epoch)
        if self._other is not None:  # those streams go on from epoch to epoch, each at its own place
            return
        self._start = ([[0, 0] for _ in range(max(self.num_workers, 1))], 0)
        self._rows, self._next_worker = self._start[0], 0

    def _layout(self) -> dict:
        """What a position depends on besides the epoch: a resumed run must match it."""
        d = self.dataset
        return {"shards": len(d._files), "rows": sum(f.num_samples for f in d._files), "processes": d._world_size,
                "workers": max(self.num_workers, 1), "batch_size": self.batch_size,
                "window": d._shuffle_buffer_size, "max_source_length": d.max_source_length,
                "held_out": len(d.held_out)}

    def _streams(self) -> dict:
        """The layout this process's streams are dealt by (:class:`PretrainingLoader`)."""
        return {"processes": self.dataset._world_size, "workers": max(self.num_workers, 1),
                "batch_size": self.batch_size, "accumulation": self.accumulation}

    def position(self) -> dict:
        if self._other is not None:
            return {"epoch": self.epoch, "rows": [], "next_worker": 0, "skipped_rows": self.skipped_rows,
                    "layout": self._layout(), "streams": self._other.position()}
        return {"epoch": self.epoch, "rows": [list(r) for r in self._rows], "next_worker": self._next_worker,
                "skipped_rows": self.skipped_rows, "layout": self._layout(), "streams": self._streams()}

    def identity(self) -> str:
        """What the training shards are, for a resume to compare: their count, rows, bytes and a hash of their
        names and sizes (other shards of the same size read otherwise)."""
        import hashlib

        files = self.dataset._files
        sizes = [(os.path.basename(f.path), os.path.getsize(f.path)) for f in files]
        digest = hashlib.sha256(repr(sizes).encode("utf-8")).hexdigest()[:12]
        return (f"{len(files)} shards, {sum(f.num_samples for f in files)} rows, {sum(size for _, size in sizes)} "
                f"bytes, files {digest}")

    def position_of(self, positions: list, path: str) -> dict:
        """This process's position from a checkpoint's ``positions`` (every process's :meth:`position`): its own
        where the checkpoint's layout is this run's (the same processes, loader workers and batch size) and its
        processes were in one epoch, else every stream's place, merged, for :meth:`seek` to read them in this run's
        updates (processes whose streams ran out apart were in epochs of their own: each stream goes on in its
        own). ValueError (one line) where that cannot be: another global batch, other data, or a position that does
        not name its streams."""
        rank, processes = self.dataset._rank, self.dataset._world_size
        first = positions[0]
        streams = first.get("streams")
        if streams is None or ("lanes" not in streams and len(positions) == processes
                               and all(p.get("layout") == self._layout() and p.get("epoch") == first.get("epoch")
                                       for p in positions)):
            if streams is None and (len(positions) != processes or first.get("layout") != self._layout()):
                layout = first.get("layout") or {}
                if _data_keys(layout) == _data_keys(self._layout()):
                    raise ValueError(
                        f"its data position does not name the layout of its streams, so it resumes only on its own: "
                        f"{_processes(len(positions))} x --train_batch_size {layout.get('batch_size')} x "
                        f"{layout.get('workers')} loader worker(s); resume so, or start a new run from its weights "
                        f"with --init_checkpoint {path}")
            return positions[rank if len(positions) == processes else 0]  # the same layout: as written
        self._check_data(first.get("layout") or {})
        lanes = {}
        for number, position in enumerate(positions):
            found = position["streams"].get("lanes")
            if found is None:  # a process of that layout: its own streams
                found = [{"lane": number, "epoch": position["epoch"], "rows": position["rows"],
                          "next_worker": position["next_worker"], "skipped_rows": position["skipped_rows"]}]
            for lane in found:
                lanes.setdefault(int(lane["lane"]), lane)
        meta = {k: int(streams[k]) for k in ("processes", "workers", "batch_size", "accumulation")}
        global_batch = meta["processes"] * meta["batch_size"] * meta["accumulation"]
        here = processes * self.batch_size * self.accumulation
        if global_batch != here:
            changed = changes(meta, self._streams())
            raise ValueError(
                f"the saved data position does not fit this run's updates ({changed}): pretraining's streams are "
                f"dealt in updates of {global_batch} sequences ({_processes(meta['processes'])} x --train_batch_size "
                f"{meta['batch_size']} x --gradient_accumulation_steps {meta['accumulation']}), this run's hold "
                f"{here}; resume with updates of {global_batch} (any processes x --train_batch_size x "
                f"--gradient_accumulation_steps), or start a new run from its weights with --init_checkpoint {path}")
        if sorted(lanes) != list(range(meta["processes"])):
            raise ValueError(f"the saved data position holds the streams of processes {sorted(lanes)} of "
                             f"{meta['processes']}: the checkpoint is incomplete; resume from another one")
        return {"epoch": first["epoch"], "rows": [], "next_worker": 0, "skipped_rows": 0,
                "layout": self._layout(), "streams": {**meta, "lanes": [lanes[r] for r in sorted(lanes)]}}

    def _check_data(self, layout: dict) -> None:
        ours = _data_keys(self._layout())
        if _data_keys(layout) != ours:
            changed = changes(layout, ours)
            raise ValueError(f"the saved data position does not fit this run's data ({changed}): resume with the "
                             f"same shards, --max_source_length, --buffer_size and --n_val")

    def seek(self, position: dict) -> None:
        """The next iteration of this epoch starts where ``position`` (from :meth:`position`, or every stream's
        from :meth:`position_of`) stood."""
        if position.get("epoch") != self.epoch:
            raise ValueError(f"the saved data position is in epoch {position.get('epoch')}, the loader in {self.epoch}")
        if "lanes" in (position.get("streams") or {}):
            self._check_data(position.get("layout") or {})
            self._other = _OtherLayout(self, position["streams"])
            self.skipped_rows = self._other.skipped_rows()
            return
        layout = position.get("layout")
        if layout != self._layout():
            changed = changes(layout, self._layout())
            raise ValueError(f"the saved data position does not fit this run's data ({changed}): resume with the "
                             f"same shards, --train_batch_size, --num_workers, --max_source_length and processes")
        self._other = None
        self._start = ([list(r) for r in position["rows"]], int(position["next_worker"]))
        self._rows, self._next_worker = self._start
        self.skipped_rows = int(position["skipped_rows"])

    def resume_said(self) -> str | None:
        """What a resume on another layout reads, for the trainer's resume line (None: this run's own streams)."""
        return None if self._other is None else self._other.said()

    def __iter__(self):
        """The epoch from its start, or from the position of the last ``seek``."""
        return self._own_streams() if self._other is None else self._other.batches()

    def _own_streams(self):
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
            _shut_down(batches)


def _shut_down(batches) -> None:
    """A DataLoader iterator's workers end now, whatever ended the epoch: left to the garbage collector while an
    error unwinds, they outlive the main thread, and the interpreter's exit waits on them for ever (they ignore the
    SIGTERM it sends them: ignore_stop_signals)."""
    shutdown = getattr(batches, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _data_keys(layout: dict) -> dict:
    """A position's layout without how it was dealt (processes, loader workers, batch size): what every stream
    depends on."""
    return {k: v for k, v in layout.items() if k not in ("processes", "workers", "batch_size")}


def _processes(count: int) -> str:
    return f"{count} process{'es' if count != 1 else ''}"


class _Stream(torch.utils.data.IterableDataset):
    """One stream of another layout (worker ``worker`` of ``workers`` of rank ``ranks`` = (rank, processes), batches
    of ``batch_size``) in epoch ``epoch`` from ``start`` = (row, piece): its batches, as that layout's loader worker
    sends them."""

    def __init__(self, dataset: BartPretrainingDataset, epoch: int, worker: int, workers: int, ranks: tuple,
                 batch_size: int, start) -> None:
        super().__init__()
        self.dataset, self.epoch, self.worker, self.workers = dataset, epoch, worker, workers
        self.ranks, self.batch_size, self.start = ranks, batch_size, tuple(start)

    def __iter__(self):
        dataset = copy.copy(self.dataset)  # the epoch and batch size are this stream's, not this run's
        dataset._epoch, dataset.batch_size = self.epoch, self.batch_size
        return dataset.stream(self.worker, self.workers, self.start, self.ranks)


class _Lane:
    """The batches process ``lane`` of another layout took, as its DataLoader took them: its streams in turn (one
    that has run out left out), epoch after epoch; each stream in a loader worker of its own, or in this process
    (``in_workers`` False)."""

    def __init__(self, loader: PretrainingLoader, lane: int, processes: int, workers: int, batch_size: int,
                 state: dict, in_workers: bool) -> None:
        self.loader, self.lane, self.processes, self.workers = loader, lane, processes, workers
        self.batch_size = batch_size
        self.epoch, self.next_worker = int(state["epoch"]), int(state["next_worker"])
        self.rows = [list(r) for r in state["rows"]]
        self.skipped_rows = int(state["skipped_rows"])
        self.in_workers = in_workers
        self._streams: list | None = None  # each stream's batches (None: run out), opened when first read
        self._ahead = None  # an item pulled from a stream and not yet taken (see _pull)

    def state(self) -> dict:
        return {"lane": self.lane, "epoch": self.epoch, "rows": [list(r) for r in self.rows],
                "next_worker": self.next_worker, "skipped_rows": self.skipped_rows}

    def _open(self) -> None:
        loader = self.loader
        self._streams = []
        for worker in range(self.workers):
            stream = _Stream(loader.dataset, self.epoch, worker, self.workers, (self.lane, self.processes),
                             self.batch_size, self.rows[worker])
            self._streams.append(iter(DataLoader(
                stream, batch_size=None, collate_fn=_NoiseBatch(loader.collator), num_workers=int(self.in_workers),
                generator=torch.Generator().manual_seed(loader.seed + self.epoch), persistent_workers=False,
                worker_init_fn=ignore_stop_signals if self.in_workers else None,
                prefetch_factor=4 if self.in_workers else None)))

    def close(self) -> None:
        """The streams' loader workers end (the lane's place stays: reading again opens them there)."""
        for batches in self._streams or []:
            _shut_down(batches)
        self._streams, self._ahead = None, None

    def _pull(self):
        """The lane's next item in turn, (worker, (batch, worker, row, skipped rows)), kept until taken; None once
        every stream of the epoch has run out. The lane's place moves only when an item is taken (:meth:`_take`)."""
        if self._ahead is None:
            if self._streams is None:
                self._open()
            for step in range(self.workers):
                worker = (self.next_worker + step) % self.workers
                if self._streams[worker] is None:
                    continue
                try:
                    self._ahead = worker, next(self._streams[worker])
                    break
                except StopIteration:
                    _shut_down(self._streams[worker])
                    self._streams[worker] = None
        return self._ahead

    def _take(self):
        """The item :meth:`_pull` holds, taken: the lane's place moves past it; its batch (None: rows skipped
        only)."""
        (worker, (batch, _, row, count)), self._ahead = self._ahead, None
        if isinstance(batch, ShardFailure):
            raise DataError(batch.message)
        self.rows[worker], self.next_worker = list(row), (worker + 1) % self.workers
        self.skipped_rows += count
        return batch

    def roll(self) -> None:
        """The next epoch, from its start, as the training loop's next iteration went on there."""
        self.close()
        self.epoch, self.next_worker = self.epoch + 1, 0
        self.rows = [[0, 0] for _ in range(self.workers)]

    def epoch_over(self) -> bool:
        """Whether the lane's epoch has no batch left (rows skipped at its end taken on the way)."""
        while self._pull() is not None:
            if self._ahead[1][0] is not None:
                return False
            self._take()
        return True

    def next_batch(self) -> dict:
        """The lane's next batch; a lane whose epoch has run out goes on with its next epoch."""
        rolled = False
        while True:
            if self._pull() is None:
                if rolled:  # the new epoch gave nothing from its start
                    raise RuntimeError("the training data produced no batch in a whole epoch")
                self.roll()
                rolled = True
                continue
            batch = self._take()
            if batch is not None:
                return batch


class _OtherLayout:
    """A loader's reading of another layout's streams (see :class:`PretrainingLoader`): this process's parts of
    each update, from the lanes (that layout's processes) its slots fall in."""

    def __init__(self, loader: PretrainingLoader, streams: dict) -> None:
        self.loader = loader
        self.processes, self.workers = int(streams["processes"]), int(streams["workers"])
        self.batch_size, self.accumulation = int(streams["batch_size"]), int(streams["accumulation"])
        ranks, rank = loader.dataset._world_size, loader.dataset._rank
        plans = [self._plan(r, ranks) for r in range(ranks)]
        self.parts = plans[rank]
        needed = [sorted({lane for part in plan for _, lane, _, _ in part}) for plan in plans]
        # a lane read by several processes counts its skipped rows on the first of them (the logs sum the ranks)
        self.owned = {lane for lane in needed[rank] if not any(lane in needed[r] for r in range(rank))}
        states = {int(state["lane"]): state for state in streams["lanes"]}
        self.lanes = [_Lane(loader, lane, self.processes, self.workers, self.batch_size, states[lane],
                            loader.num_workers > 0) for lane in needed[rank]]

    def _plan(self, rank: int, ranks: int) -> list:
        """Rank ``rank``'s micro-batches of an update: for each, its slots as (micro-batch j, lane, first, end)."""
        loader, parts = self.loader, []
        for micro in range(loader.accumulation):
            slot = (micro * ranks + rank) * loader.batch_size
            end, segments = slot + loader.batch_size, []
            while slot < end:
                batch, first = divmod(slot, self.batch_size)
                j, lane = divmod(batch, self.processes)
                take = min(end - slot, self.batch_size - first)
                segments.append((j, lane, first, first + take))
                slot += take
            parts.append(segments)
        return parts

    def skipped_rows(self) -> int:
        return sum(lane.skipped_rows for lane in self.lanes if lane.lane in self.owned)

    def position(self) -> dict:
        """The streams' layout and the places of the lanes this process reads (the others are other processes')."""
        return {"processes": self.processes, "workers": self.workers, "batch_size": self.batch_size,
                "accumulation": self.accumulation, "lanes": [lane.state() for lane in self.lanes]}

    def said(self) -> str:
        streams = len(self.lanes) * self.workers
        where = (f"in {streams} loader worker(s)" + (f" instead of --num_workers {self.loader.num_workers}"
                                                      if streams != self.loader.num_workers else "")
                 if self.loader.num_workers else "in the main process (--num_workers 0)")
        return (f"the data position carries over in the streams of the checkpoint's layout ("
                f"{_processes(self.processes)} x {self.workers} loader worker(s) x --train_batch_size "
                f"{self.batch_size} x --gradient_accumulation_steps {self.accumulation}): every update holds the "
                f"samples it held there; rank 0 reads {streams} of its streams {where}")

    def batches(self):
        """This process's micro-batches, update after update, until its first lane's epoch is over (the training
        loop's epoch follows that lane's: rank 0's, the checkpoint's epoch)."""
        loader, first = self.loader, self.lanes[0]
        produced = False
        try:
            while True:
                over = first.epoch_over()
                loader.skipped_rows = self.skipped_rows()
                if over and produced:
                    return
                if over:  # resumed where that epoch ended: the next one
                    first.roll()
                taken = {(j, lane.lane): lane.next_batch() for lane in self.lanes for j in range(self.accumulation)}
                loader.skipped_rows = self.skipped_rows()
                produced = True
                for segments in self.parts:
                    yield self._part(taken, segments)
        finally:
            for lane in self.lanes:
                lane.close()

    def _part(self, taken: dict, segments: list) -> dict:
        """A micro-batch of the slots ``segments`` (a lane's whole batch as it came; other parts collated again)."""
        if len(segments) == 1:
            j, lane, low, high = segments[0]
            batch = taken[j, lane]
            if low == 0 and high >= len(batch["labels"]):
                return batch
        sources, targets = [], []
        for j, lane, low, high in segments:
            rows = _rows(taken[j, lane], self.loader.collator.pad)
            sources += rows[0][low:high]
            targets += rows[1][low:high]
        filler = not sources
        if filler:  # every slot of the part empty (batches cut short at their streams' ends): a row without labels
            sources, targets = (rows[:1] for rows in _rows(next(iter(taken.values())), self.loader.collator.pad))
        collator = self.loader.collator
        part = {**collator._pad(sources, "input_ids", collator.pad), **collator._targets(targets)}
        if filler:
            part["labels"].fill_(-100)
        return part


def _rows(batch: dict, pad: int) -> tuple[list, list]:
    """A collated batch's noised sources and targets, unpadded (each ends with </s>)."""
    sources, labels = batch["input_ids"].numpy(), batch["labels"].numpy()
    return ([row[: _length(row != pad)] for row in sources], [row[: _length(row != -100)] for row in labels])


def _length(kept) -> int:
    return len(kept) - int(np.argmax(kept[::-1]))


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
                             shuffle_buffer_size: int = 16384, n_val: int = 0,
                             accumulation: int = 1) -> PretrainingLoader:
    """``n_val``: rows held out of training for the validation loss (see :func:`held_out_rows`); ``accumulation``:
    the run's micro-batches per update (a position names it: :class:`PretrainingLoader`)."""
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
    return PretrainingLoader(dataset, collator, batch_size, workers, seed, accumulation)
