"""Streaming pretraining data over LDDL Parquet shards.

Each shard row (the ``sentences`` column: whole sentences joined, written by LDDL's
preprocess_bart_pretrain) is tokenized in record batches by the Rust tokenizer. A row longer than
``max_source_length`` becomes several samples of near-equal length (nothing is truncated away).
Shards are split across ranks and loader workers and reshuffled every epoch by LDDL's
ParquetDataset; the noise runs in the workers. A sample's index is a hash of its text and piece
number, so its noise depends only on (seed, epoch, text). ``held_out`` rows (pretraining's
``--n_val``: the last rows of the last shard) are left out of training, by their text, and kept
for the validation loss.
"""
from __future__ import annotations

import math
import os
import zlib

import numpy as np
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader

from bart.data import DataError
from bart.data.lddl_compat import BalancedParquetDataset, parquet_files, usable_workers
from bart.data.noise import DenoisingCollator, DenoisingNoise, NoiseConfig


def split_ids(ids: list[int], max_length: int) -> list[list[int]]:
    """Token ids of one row (no specials) → pieces of at most max_length-2 tokens, near-equal sizes."""
    room = max_length - 2
    count = max(1, math.ceil(len(ids) / room))
    size = math.ceil(len(ids) / count)
    return [ids[i:i + size] for i in range(0, len(ids), size)] or [[]]


class BartPretrainingDataset(BalancedParquetDataset):
    def __init__(self, file_paths: list[str], tokenizer, max_source_length: int, held_out: tuple = (),
                 **kwargs) -> None:
        super().__init__(file_paths, **kwargs)
        self.tokenizer = tokenizer
        self.max_source_length = max_source_length
        self.bos, self.eos = tokenizer.bos_token_id, tokenizer.eos_token_id
        self.held_out = list(held_out)
        self._held_out_keys = frozenset(zlib.crc32(t.encode("utf-8")) for t in self.held_out)

    @property
    def num_rows(self) -> int:
        """Rows in the shards, held-out rows included."""
        return sum(f.num_samples for f in self._files)

    def samples(self, texts: list, epoch: int, skip_held_out: bool = False):
        """One list of samples per text (a long row gives several; a held-out row none when skipped)."""
        encoded = self.tokenizer.encode_batch_fast([t or "" for t in texts], add_special_tokens=False)
        for text, ids in zip(texts, encoded):
            key = zlib.crc32((text or "").encode("utf-8"))
            if skip_held_out and key in self._held_out_keys:
                yield []
                continue
            yield [{"input_ids": np.asarray([self.bos, *piece, self.eos], dtype=np.int64),
                    "index": (key << 8) + number, "epoch": epoch}
                   for number, piece in enumerate(split_ids(ids, self.max_source_length)) if piece]

    def _decode_record_batch(self, batch):
        return self.samples(batch.column("sentences").to_pylist(), self._epoch, skip_held_out=True)


class PretrainingLoader:
    """Batches for the training loop: ``set_epoch``, iteration; the loop records its position as
    (epoch, batches consumed) and replays the epoch up to it on resume."""

    def __init__(self, dataset: BartPretrainingDataset, collator: DenoisingCollator, batch_size: int,
                 num_workers: int, seed: int) -> None:
        self.dataset, self.collator = dataset, collator
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.dataset.set_epoch(epoch)

    def __iter__(self):
        # a private generator: creating workers never draws from the global RNG (exact resume)
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        loader = DataLoader(self.dataset, batch_size=self.batch_size, collate_fn=self.collator,
                            num_workers=self.num_workers, generator=generator, drop_last=False,
                            persistent_workers=False, prefetch_factor=4 if self.num_workers else None)
        return iter(loader)


def held_out_rows(files: list[str], n_val: int) -> list[str]:
    """The last ``n_val`` rows of the shards (last shard first), the same on every rank and run."""
    rows: list[str] = []
    for path in reversed(files):
        if len(rows) >= n_val:
            break
        texts = [t for t in pq.read_table(path, columns=["sentences"]).column("sentences").to_pylist() if t]
        rows = texts[max(len(texts) - (n_val - len(rows)), 0):] + rows
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files) if n_val else 0
    if n_val and n_val >= total:
        raise DataError(f"--n_val {n_val}: the data holds only {total} rows; hold out fewer")
    return rows


def build_pretraining_loader(data_dir: str, tokenizer, batch_size: int, max_source_length: int,
                             noise_config: NoiseConfig, seed: int, num_workers: int = 2, local_rank: int = 0,
                             shuffle_buffer_size: int = 16384, n_val: int = 0) -> PretrainingLoader:
    """``n_val``: rows held out of training for the validation loss (see :func:`held_out_rows`)."""
    from utils.distributed import world_size

    files = parquet_files(data_dir)
    workers = usable_workers(len(files), world_size(), num_workers)
    if workers != num_workers:
        print(f"[data] {len(files)} shards: using {workers} loader worker(s) per process instead of {num_workers} "
              f"(shards per process must divide evenly among workers)")
    if workers > 1:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    dataset = BartPretrainingDataset(files, tokenizer, max_source_length, held_out=held_out_rows(files, n_val),
                                     local_rank=local_rank,
                                     base_seed=seed, num_workers=workers, shuffle_buffer_size=shuffle_buffer_size)
    noise = DenoisingNoise(noise_config, tokenizer.word_start_mask(), tokenizer.sentence_end_mask(),
                           tokenizer.mask_token_id, seed=seed,
                           bos=tokenizer.bos_token_id, eos=tokenizer.eos_token_id)
    collator = DenoisingCollator(noise, max_source_length, tokenizer.pad_token_id, decoder_start_token_id=2)
    return PretrainingLoader(dataset, collator, batch_size, workers, seed)
