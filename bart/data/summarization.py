"""Summarization (and translation) data: ``{split}.source`` / ``{split}.target`` line files.

One example per line (lines end in \\n, \\r\\n or a lone \\r, as Python's text mode reads them), UTF-8. Bad input stops with a message naming the file: a missing split, line
counts that differ, a line that is not UTF-8, an empty line. Batches are tokenized in the collator
(truncated to the max lengths); the samplers group examples of similar length and split every
epoch over the ranks with each example exactly once. An epoch's batches are a pure function of
(seed, epoch), so a resumed run starts at its batch (``EpochLoader.seek``) without going through
the batches before it. The loader draws nothing from torch's global generator (the dropout stream a checkpoint
carries): its iterator's seed comes from a generator of its own, seeded from (seed, epoch).
"""
from __future__ import annotations

import os
import random

import torch

from bart.errors import UserError
from bart.files.text_lines import iter_lines, line_ends
from bart.modeling.modeling_bart import shift_tokens_right
from bart.runtime.signals import ignore_stop_signals
from bart.tokenization.tokenization_bart import model_inputs


def _read_lines(path: str) -> list[str]:
    """The file's lines (universal newlines: ``\\n``, ``\\r\\n`` or a lone ``\\r`` ends a line, as Python's text
    mode and the reference's readers split them), each decoded as UTF-8 (an error names the line)."""
    if not os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        present = sorted(f for f in os.listdir(folder) if f.endswith((".source", ".target"))) if os.path.isdir(folder) else []
        raise FileNotFoundError(f"missing {path}; the folder holds {present or 'no .source/.target files'} "
                                f"(scripts/get_data.sh writes train/val/test .source and .target)")
    lines = []
    for number, raw in enumerate(iter_lines(path), 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise UserError(f"{path}:{number} is not UTF-8 ({err.reason} at byte {err.start}); re-encode "
                             f"the file as UTF-8") from err
    return lines


def _count_mismatch(source_path: str, sources: int, target_path: str, targets: int) -> str:
    """The one line for .source/.target line counts that differ, saying when the line ends are the cause:
    a file mixing lone ``\\r`` with ``\\n`` line ends (each lone ``\\r`` ends a line)."""
    message = (f"{source_path} has {sources} lines but {target_path} has {targets}: every source needs exactly "
               f"one target")
    for path in (source_path, target_path):
        ends = line_ends(path)
        if "\r" in ends and len(ends) > 1:
            return (message + f"; {path} mixes line ends: a lone carriage return (\\r) ends a line, as in Python's "
                              f"text mode, but its other lines end in \\n; if the \\r are stray characters inside "
                              f"lines, replace them (tr '\\r' ' ' < FILE > FILE.fixed)")
    return message


def read_split(data_dir: str, type_path: str, n_obs: int | None = None,
               skipped: list | None = None) -> tuple[list[str], list[str]]:
    """The split's (sources, targets), the first ``n_obs`` if given. An example whose source or target
    line is empty (or only whitespace) is an error naming the line, unless a ``skipped`` list is
    given (the training split): then it is left out and its line number appended there."""
    source_path = os.path.join(data_dir, f"{type_path}.source")
    target_path = os.path.join(data_dir, f"{type_path}.target")
    sources, targets = _read_lines(source_path), _read_lines(target_path)
    if len(sources) != len(targets):
        raise UserError(_count_mismatch(source_path, len(sources), target_path, len(targets)))
    if skipped is None:  # every line counts: the first empty one is an error
        if n_obs is not None and n_obs > 0:
            sources, targets = sources[:n_obs], targets[:n_obs]
        for i, (s, t) in enumerate(zip(sources, targets)):
            if not s.strip() or not t.strip():
                raise UserError(f"{source_path if not s.strip() else target_path}:{i + 1} is empty; every line must "
                                f"hold one example (remove the line in both .source and .target)")
    else:  # the first n_obs usable examples; the empty ones met on the way are left out and their lines noted
        kept = []
        for i, (s, t) in enumerate(zip(sources, targets)):
            if n_obs is not None and 0 < n_obs <= len(kept):
                break
            if s.strip() and t.strip():
                kept.append(i)
            else:
                skipped.append(i + 1)
        sources, targets = [sources[i] for i in kept], [targets[i] for i in kept]
    if not sources:
        raise UserError(f"{source_path} has no examples{' (all lines empty)' if skipped else ''}; the {type_path} "
                        f"split needs at least one line (and {target_path} as many)")
    return sources, targets


class Seq2SeqDataset(torch.utils.data.Dataset):
    def __init__(self, data_dir: str, type_path: str, tokenizer, max_source_length: int, max_target_length: int,
                 n_obs: int | None = None, prefix: str = "", skip_empty: bool = False) -> None:
        self.skipped_lines: list[int] = []  # with skip_empty: the 1-based lines of empty examples left out
        self.sources, self.targets = read_split(data_dir, type_path, n_obs,
                                                self.skipped_lines if skip_empty else None)
        self.tokenizer, self.prefix = tokenizer, prefix
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        self.source_lengths = [len(s.split()) for s in self.sources]  # cheap proxy for sorting

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, index: int) -> dict:
        return {"source": self.prefix + self.sources[index], "target": self.targets[index], "index": index}

    def collate(self, items: list[dict]) -> dict:
        tok = self.tokenizer
        source = model_inputs(tok, [i["source"] for i in items], self.max_source_length)
        target = model_inputs(tok, [i["target"] for i in items], self.max_target_length)
        labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, -100)
        return {"input_ids": source["input_ids"], "attention_mask": source["attention_mask"], "labels": labels,
                "decoder_input_ids": shift_tokens_right(labels, tok.pad_token_id, 2),
                "index": torch.tensor([i["index"] for i in items])}


class SortishSampler:
    """Length-grouped, shuffled batches of indices for one rank (a ``batch_sampler``).

    Each epoch: a seeded shuffle, chunks of 50 batches sorted by length inside, batches formed,
    batch order shuffled, batches dealt to ranks. All ranks get the same number of batches (the largest
    batches are split in two where needed, so a rank may get smaller batches), and every example appears
    exactly once per epoch over all ranks, except where every batch already holds one example and their
    count is not a multiple of the ranks (batch size 1, or ``max_tokens`` batches of one long example
    each): then the last ``count % ranks`` batches of the epoch's shuffled order are left out (others each
    epoch; ``dropped`` says how many). With ``max_tokens`` a batch holds as many examples as fit
    ``max_tokens`` counting padding (longest x count)."""

    def __init__(self, lengths: list[int], batch_size: int, num_replicas: int = 1, rank: int = 0, seed: int = 0,
                 shuffle: bool = True, max_tokens: int | None = None, group_by_length: bool = True) -> None:
        if len(lengths) < num_replicas:
            raise ValueError(f"{len(lengths)} examples cannot feed {num_replicas} ranks")
        if not group_by_length and max_tokens:
            raise ValueError("token-budget batches (max_tokens) need length grouping")
        # without length grouping every example counts as equally long: plain shuffled batches
        lengths = lengths if group_by_length else [0] * len(lengths)
        self.lengths, self.batch_size, self.max_tokens = lengths, batch_size, max_tokens
        self.num_replicas, self.rank, self.seed, self.shuffle = num_replicas, rank, seed, shuffle
        self.epoch = 0
        self.start = 0  # this rank's first batch of the epoch (a resumed run's position)
        self.dropped = 0  # examples the last epoch dealt left out (see the class docstring)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.start = 0

    def _batches(self) -> list[list[int]]:
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        order = list(range(len(self.lengths)))
        if self.shuffle:
            rng.shuffle(order)
        chunk = self.batch_size * 50
        batches = []
        for start in range(0, len(order), chunk):
            part = sorted(order[start:start + chunk], key=lambda i: -self.lengths[i])
            batches.extend(self._split(part))
        if self.shuffle:
            rng.shuffle(batches)
        while len(batches) % self.num_replicas:
            largest = max(range(len(batches)), key=lambda b: len(batches[b]))
            if len(batches[largest]) < 2:  # single examples only: the ranks' last round stays incomplete
                self.dropped = len(batches) % self.num_replicas
                return batches[:len(batches) - self.dropped]
            batch = batches.pop(largest)
            batches[largest:largest] = [batch[: len(batch) // 2], batch[len(batch) // 2:]]
        self.dropped = 0
        return batches

    def _split(self, part: list[int]) -> list[list[int]]:
        if not self.max_tokens:
            return [part[i:i + self.batch_size] for i in range(0, len(part), self.batch_size)]
        batches, current, longest = [], [], 0
        for index in part:
            longest_if_added = max(longest, self.lengths[index])
            if current and longest_if_added * (len(current) + 1) > self.max_tokens:
                batches.append(current)
                current, longest_if_added = [], self.lengths[index]
            current.append(index)
            longest = longest_if_added
        return batches + ([current] if current else [])

    def __iter__(self):
        return iter(self._batches()[self.rank::self.num_replicas][self.start:])

    def __len__(self) -> int:
        return len(self._batches()) // self.num_replicas



def rows_identity(sources: list[str], targets: list[str], first: int = 1000) -> str:
    """``N examples, C characters, first rows <hash>``: a split's identity, cheap for CNN/DM's 287k pairs."""
    import hashlib

    digest = hashlib.sha256()
    for source, target in zip(sources[:first], targets[:first]):
        digest.update(source.encode("utf-8") + b"\0" + target.encode("utf-8") + b"\n")
    characters = sum(map(len, sources)) + sum(map(len, targets))
    return f"{len(sources)} examples, {characters} characters, first rows {digest.hexdigest()[:12]}"


class EpochLoader:
    """DataLoader over a batch sampler whose epoch follows the training loop (``set_epoch``);
    ``position`` (batches taken this epoch) and ``seek`` (start there) resume an epoch."""

    def __init__(self, dataset: Seq2SeqDataset, sampler: SortishSampler, num_workers: int = 0) -> None:
        self.dataset, self.sampler, self.num_workers = dataset, sampler, num_workers
        self.batches = 0  # taken this epoch
        self._dataloader = None
        # empty examples left out, logged as skipped_rows: the trainer sums ranks, and every rank read the whole
        # split, so rank 0 carries the count
        self.skipped_rows = len(dataset.skipped_lines) if sampler.rank == 0 else 0

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        self.batches = 0

    def _layout(self) -> dict:
        sampler = self.sampler
        return {"examples": len(sampler.lengths), "batch_size": sampler.batch_size, "max_tokens": sampler.max_tokens,
                "processes": sampler.num_replicas}

    def position(self) -> dict:
        return {"epoch": self.sampler.epoch, "batches": self.batches, "layout": self._layout()}

    def identity(self) -> str:
        """What the training rows are, for a resume to compare: their count, characters and a hash of the first
        1,000 pairs (another split of the same size reads otherwise)."""
        return rows_identity(self.dataset.sources, self.dataset.targets)

    def seek(self, position: dict) -> None:
        layout, batches = position.get("layout"), int(position["batches"])
        if layout != self._layout():
            changed = ", ".join(f"{k} {layout.get(k)} → {v}" for k, v in self._layout().items()
                                if not layout or layout.get(k) != v)
            raise ValueError(f"the saved data position does not fit this run's data ({changed}): resume with the "
                             f"same training split, --n_train, batch sizes and processes")
        if position.get("epoch") != self.sampler.epoch or batches > len(self.sampler):
            raise ValueError(f"the saved data position (epoch {position.get('epoch')}, batch {batches}) is not in "
                             f"this run's epoch {self.sampler.epoch} of {len(self.sampler)} batches")
        self.sampler.start = self.batches = batches

    def _loader(self) -> torch.utils.data.DataLoader:
        """One DataLoader for the run: its workers (if any) stay up across epochs; the batch sampler,
        read in this process, gives each epoch's order and start."""
        if self._dataloader is None:
            workers = self.num_workers
            if workers:
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            # a private generator for the iterator's base seed (workers' seeds): without one, every iter() draws
            # from torch's global generator, the training's dropout stream, and a resumed run, which starts its
            # epoch's iterator once more than the uninterrupted run did, would go on with other dropout masks
            self._dataloader = torch.utils.data.DataLoader(
                self.dataset, batch_sampler=self.sampler, collate_fn=self.dataset.collate, num_workers=workers,
                persistent_workers=workers > 0, worker_init_fn=ignore_stop_signals if workers else None,
                generator=torch.Generator())
        self._dataloader.generator.manual_seed(self.sampler.seed * 1_000_003 + self.sampler.epoch)
        return self._dataloader

    def __iter__(self):
        self.batches = self.sampler.start
        for batch in self._loader():
            batch.pop("index")
            self.batches += 1
            yield batch


def build_finetuning_loader(data_dir: str, tokenizer, max_source_length: int, max_target_length: int,
                            batch_size: int, *, world_size: int = 1, rank: int = 0, seed: int = 0,
                            n_obs: int | None = None, sortish: bool = False,
                            max_tokens: int | None = None, num_workers: int = 0, prefix: str = "") -> EpochLoader:
    """The training split as shuffled batches: plain, length-grouped (``sortish``) or token-budget
    (``max_tokens``, lengths in tokens rather than words); ``prefix`` put in front of every source."""
    # an empty source or target line is refused, naming the file and line, as run_eval.py and validation refuse it:
    # a pair left out would make the split's rows fewer than its lines without the user's say
    train = Seq2SeqDataset(data_dir, "train", tokenizer, max_source_length, max_target_length, n_obs=n_obs,
                           prefix=prefix)
    if len(train) < world_size:
        limit = f" (--n_train {n_obs})" if n_obs is not None and len(train) == n_obs else ""
        raise UserError(f"{os.path.join(data_dir, 'train')}.source has {len(train)} usable example(s){limit}, fewer than "
                        f"the {world_size} processes: every process needs at least one example per epoch; add "
                        f"examples or start at most {len(train)} process(es) (torchrun --nproc_per_node)")
    lengths = train.source_lengths
    if max_tokens:
        lengths = [min(len(ids), max_source_length)
                   for ids in tokenizer.encode_batch_fast([prefix + s for s in train.sources])]
    sampler = SortishSampler(lengths, batch_size, world_size, rank, seed, shuffle=True, max_tokens=max_tokens,
                             group_by_length=bool(sortish or max_tokens))
    len(sampler)  # deals the first epoch: ``dropped``
    if sampler.dropped and rank == 0:
        print(f"[data] {os.path.join(data_dir, 'train')}.source: {len(train)} single-example batches do not divide "
              f"among {world_size} processes: each epoch leaves {sampler.dropped} example(s) out (others each "
              f"epoch); --train_batch_size 2 or more (or a larger --max_tokens_per_batch) keeps every one", flush=True)
    return EpochLoader(train, sampler, num_workers)
