"""Summarization (and translation) data: ``{split}.source`` / ``{split}.target`` line files.

One example per line (lines end in \\n, \\r\\n or a lone \\r, as Python's text mode reads them), UTF-8. Bad input stops with a message naming the file: a missing split, line
counts that differ, a line that is not UTF-8, an empty line. Batches are tokenized in the collator
(truncated to the max lengths); the sampler groups examples of similar length and splits every
epoch's global batches (an update's, over all ranks) among the ranks with each example exactly once. An epoch's
global batches are a pure function of (seed, epoch, global batch), whatever the ranks, so a resumed run starts at
its update (``EpochLoader.seek``), on any number of processes that keeps the global batch, without going through
the batches before it. The loader draws nothing from torch's global generator (the dropout stream a checkpoint
carries): its iterator's seed comes from a generator of its own, seeded from (seed, epoch).
"""
from __future__ import annotations

import atexit
import os
import random
import weakref

import torch

from bart.data import changes
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
        """Example ``index``; ``len(self) + i``: example i as a filler (:class:`SortishSampler`), its labels ignored."""
        filler = index >= len(self.sources)
        index -= len(self.sources) if filler else 0
        return {"source": self.prefix + self.sources[index], "target": self.targets[index], "index": index,
                "filler": filler}

    def collate(self, items: list[dict]) -> dict:
        tok = self.tokenizer
        source = model_inputs(tok, [i["source"] for i in items], self.max_source_length)
        target = model_inputs(tok, [i["target"] for i in items], self.max_target_length)
        labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, -100)
        labels[torch.tensor([bool(i.get("filler")) for i in items])] = -100  # a filler: no loss, no gradient
        return {"input_ids": source["input_ids"], "attention_mask": source["attention_mask"], "labels": labels,
                "decoder_input_ids": shift_tokens_right(labels, tok.pad_token_id, 2),
                "index": torch.tensor([i["index"] for i in items])}


class SortishSampler:
    """One rank's micro-batches of indices (a ``batch_sampler``), dealt from an order of the epoch that does not
    depend on the number of ranks.

    Each epoch (a pure function of seed and epoch): a seeded shuffle of the examples, cut into chunks of about 50
    updates sorted by length inside, then
    - sequence batches: the chunks cut into global batches (an update's examples over all ranks: ``batch_size`` x
      ranks x ``accumulation``), their order shuffled; each global batch is split into ranks x accumulation
      micro-batches of ``batch_size`` (the epoch's one shorter global batch as evenly as it goes);
    - token-budget batches (``max_tokens``): chunks of about 50 updates' tokens, cut into micro-batches of as many
      examples as fit ``max_tokens`` counting padding (longest x count), their order shuffled; each update takes
      ranks x accumulation of them (the epoch's last update, short of micro-batches, splits its largest in two).
    Micro-batch ``a`` of rank ``r`` is part ``a x ranks + r`` of its update. So the epoch's updates hold the same
    examples in the same order on any number of ranks that keeps the global batch (``update_size``): a run resumes
    on other processes where it stopped (``start``: the units of the epoch taken, :meth:`taken`; ``order``: the
    global batch the epoch was ordered with, another one's when a resume changed it: its order goes on, cut into
    this run's updates). Every example appears exactly once per epoch, and every rank gets ``accumulation``
    micro-batches per update. A part an update cannot fill (fewer examples than ranks x accumulation) holds a filler:
    the update's last example as index ``len(lengths) + i``, whose labels :meth:`Seq2SeqDataset.collate` ignores (no
    loss, no gradient)."""

    def __init__(self, lengths: list[int], batch_size: int, num_replicas: int = 1, rank: int = 0, seed: int = 0,
                 shuffle: bool = True, max_tokens: int | None = None, group_by_length: bool = True,
                 accumulation: int = 1) -> None:
        if len(lengths) < num_replicas:
            raise ValueError(f"{len(lengths)} examples cannot feed {num_replicas} ranks")
        if not group_by_length and max_tokens:
            raise ValueError("token-budget batches (max_tokens) need length grouping")
        # without length grouping every example counts as equally long: plain shuffled batches
        self.group_by_length = group_by_length
        lengths = lengths if group_by_length else [0] * len(lengths)
        self.lengths, self.batch_size, self.max_tokens = lengths, batch_size, max_tokens
        self.num_replicas, self.rank, self.seed, self.shuffle = num_replicas, rank, seed, shuffle
        self.accumulation = accumulation
        self.parts = num_replicas * accumulation  # micro-batches per update, over all ranks
        self.epoch = 0
        self.start = 0  # the epoch's units taken before this iteration (a resumed run's position)
        self.order = self.update_size  # the global batch this epoch is ordered with
        self._sizes: list[int] = []  # units per update of the iteration under way

    @property
    def update_size(self) -> int:
        """An update's units over all ranks: examples (batch size x ranks x accumulation), or with ``max_tokens``
        micro-batches (ranks x accumulation)."""
        return self.parts if self.max_tokens else self.batch_size * self.parts

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.start, self.order = epoch, 0, self.update_size

    def _groups(self, per_update: int) -> list[list]:
        """The epoch's units (examples, or with max_tokens micro-batches) in order, one group per update of
        ``per_update`` units."""
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        order = list(range(len(self.lengths)))
        if self.shuffle:
            rng.shuffle(order)
        if self.max_tokens:
            batches = []
            for chunk in self._token_chunks(order, 50 * per_update * self.max_tokens):
                batches.extend(self._split(sorted(chunk, key=lambda i: -self.lengths[i])))
            units = batches
        else:
            units = []
            chunk = per_update * 50
            for start in range(0, len(order), chunk):
                part = sorted(order[start:start + chunk], key=lambda i: -self.lengths[i])
                units.extend(part[i:i + per_update] for i in range(0, len(part), per_update))
        if self.shuffle:
            rng.shuffle(units)
        if self.max_tokens:  # micro-batches: per_update of them to an update
            return [units[i:i + per_update] for i in range(0, len(units), per_update)]
        return units  # global batches

    def _token_chunks(self, order: list[int], tokens: int):
        chunk, total = [], 0
        for index in order:
            if chunk and total + self.lengths[index] > tokens:
                yield chunk
                chunk, total = [], 0
            chunk.append(index)
            total += self.lengths[index]
        if chunk:
            yield chunk

    def _split(self, part: list[int]) -> list[list[int]]:
        batches, current, longest = [], [], 0
        for index in part:
            longest_if_added = max(longest, self.lengths[index])
            if current and longest_if_added * (len(current) + 1) > self.max_tokens:
                batches.append(current)
                current, longest_if_added = [], self.lengths[index]
            current.append(index)
            longest = longest_if_added
        return batches + ([current] if current else [])

    def _updates(self) -> list[list]:
        """The updates of this iteration, from ``start``: each a group of units."""
        groups = self._groups(self.order)
        if self.order != self.update_size:  # ordered for another global batch: its order, cut into this run's
            rest = [unit for group in groups for unit in group][self.start:]
            return [rest[i:i + self.update_size] for i in range(0, len(rest), self.update_size)]
        taken, skip = 0, 0
        while skip < len(groups) and taken < self.start:
            taken, skip = taken + len(groups[skip]), skip + 1
        if taken != self.start:
            unit = "micro-batches" if self.max_tokens else "examples"
            raise ValueError(f"the saved data position ({self.start} {unit} of epoch {self.epoch}) is not between two "
                             f"updates of this run's epoch of {sum(map(len, groups))} {unit}")
        return groups[skip:]

    def _parts(self, group: list) -> list[list[int]]:
        """One update's units as its ranks x accumulation micro-batches."""
        if self.max_tokens:
            parts = [list(batch) for batch in group]
            while len(parts) < self.parts:
                largest = max(range(len(parts)), key=lambda b: len(parts[b]))
                if len(parts[largest]) < 2:
                    break
                batch = parts.pop(largest)
                parts[largest:largest] = [batch[: len(batch) // 2], batch[len(batch) // 2:]]
        else:
            each, more = divmod(len(group), self.parts)
            bounds = [0]
            for k in range(self.parts):
                bounds.append(bounds[-1] + each + (k < more))
            parts = [group[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
        filler = [len(self.lengths) + parts[-1][-1]]
        return parts + [filler] * (self.parts - len(parts))

    def check_start(self) -> None:
        """ValueError when ``start`` is not between two updates of the epoch's order."""
        self._updates()

    def taken(self, batches: int) -> int:
        """The epoch's units taken once this rank took ``batches`` micro-batches of the iteration under way."""
        return self.start + sum(self._sizes[: batches // self.accumulation])

    def __iter__(self):
        updates = self._updates()
        self._sizes = [len(group) for group in updates]
        mine = range(self.rank, self.parts, self.num_replicas)  # micro-batch a of this rank: part a x ranks + rank
        return iter([parts[k] for parts in map(self._parts, updates) for k in mine])

    def __len__(self) -> int:
        """This rank's micro-batches in a whole epoch."""
        return len(self._groups(self.update_size)) * self.accumulation


def rows_identity(sources: list[str], targets: list[str], first: int = 1000) -> str:
    """``N examples, C characters, first rows <hash>``: a split's identity, cheap for CNN/DM's 287k pairs."""
    import hashlib

    digest = hashlib.sha256()
    for source, target in zip(sources[:first], targets[:first]):
        digest.update(source.encode("utf-8") + b"\0" + target.encode("utf-8") + b"\n")
    characters = sum(map(len, sources)) + sum(map(len, targets))
    return f"{len(sources)} examples, {characters} characters, first rows {digest.hexdigest()[:12]}"


def _shut_down_workers(loader_ref) -> None:
    """At interpreter exit: a persistent-worker loader's workers told to end and joined. They ignore SIGTERM (a stop
    signal to the process group is the main process's to honour), so multiprocessing's exit handler, which
    terminates daemonic children with SIGTERM and then joins them, would otherwise wait on them forever."""
    loader = loader_ref()
    iterator = getattr(loader, "_iterator", None) if loader is not None else None
    if iterator is not None:
        iterator._shutdown_workers()
        loader._iterator = None


class EpochLoader:
    """DataLoader over a batch sampler whose epoch follows the training loop (``set_epoch``); ``position`` (the
    epoch's examples taken over all ranks, or with token budgets its micro-batches) and ``seek`` (start there) resume
    an epoch, on any number of processes (the sampler's order does not depend on them)."""

    position_per_process = None  # the position is global (a loader whose position is each rank's own says why)

    def __init__(self, dataset: Seq2SeqDataset, sampler: SortishSampler, num_workers: int = 0) -> None:
        self.dataset, self.sampler, self.num_workers = dataset, sampler, num_workers
        self.batches = 0  # this rank's micro-batches taken in the iteration under way
        self._dataloader = None
        # empty examples left out, logged as skipped_rows: the trainer sums ranks, and every rank read the whole
        # split, so rank 0 carries the count
        self.skipped_rows = len(dataset.skipped_lines) if sampler.rank == 0 else 0

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        self.batches = 0

    def _layout(self) -> dict:
        sampler = self.sampler
        return {"examples": len(sampler.lengths), "max_tokens": sampler.max_tokens,
                "length_grouped": sampler.group_by_length}

    def position(self) -> dict:
        """Where the batches taken leave the epoch: ``taken`` units of the order of a global batch of ``order``."""
        sampler = self.sampler
        return {"epoch": sampler.epoch, "taken": sampler.taken(self.batches), "order": sampler.order,
                "layout": self._layout()}

    def identity(self) -> str:
        """What the training rows are, for a resume to compare: their count, characters and a hash of the first
        1,000 pairs (another split of the same size reads otherwise)."""
        return rows_identity(self.dataset.sources, self.dataset.targets)

    def seek(self, position: dict) -> None:
        if "taken" not in position:
            position = self._from_batches(position)
        layout = position.get("layout")
        if layout != self._layout():
            changed = changes(layout, self._layout())
            raise ValueError(f"the saved data position does not fit this run's data ({changed}): resume with the "
                             f"same training split, --n_train, --sortish_sampler and --max_tokens_per_batch")
        if position.get("epoch") != self.sampler.epoch:
            raise ValueError(f"the saved data position is in epoch {position.get('epoch')}, the loader in "
                             f"{self.sampler.epoch}")
        self.sampler.start, self.sampler.order = int(position["taken"]), int(position["order"])
        self.sampler.check_start()
        self.batches = 0

    def _from_batches(self, position: dict) -> dict:
        """A position that counts one process's batches (``{"epoch", "batches", "layout"}``, as checkpoints of this
        recipe's per-process dealing hold it), in the epoch's examples taken. One process without accumulation or
        token budgets dealt the order this sampler deals, so the position carries over exactly; other layouts dealt
        other orders, and are refused in one line."""
        sampler, layout = self.sampler, position.get("layout") or {}
        same_order = (layout.get("processes") == 1 and not layout.get("max_tokens") and sampler.parts == 1
                      and not sampler.max_tokens and layout.get("batch_size") == sampler.batch_size)
        if not same_order:
            raise ValueError("the saved data position counts the batches of each of "
                             f"{layout.get('processes', 'its')} processes (batch size {layout.get('batch_size')}"
                             f"{', token budgets' if layout.get('max_tokens') else ''}), an order this version deals "
                             "only for one process without accumulation or token budgets; start a new run from its "
                             "weights with --init_checkpoint (the optimizer state and schedule start anew)")
        groups = sampler._groups(sampler.update_size)
        batches = int(position["batches"])
        if position.get("epoch") != sampler.epoch or batches > len(groups):
            raise ValueError(f"the saved data position (epoch {position.get('epoch')}, batch {batches}) is not in "
                             f"this run's epoch {sampler.epoch} of {len(groups)} batches")
        return {"epoch": sampler.epoch, "taken": sum(map(len, groups[:batches])), "order": sampler.update_size,
                "layout": {**self._layout(), "examples": layout.get("examples")}}

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
            if workers:  # before multiprocessing's own exit handler (registered earlier, so run later) joins them
                atexit.register(_shut_down_workers, weakref.ref(self._dataloader))
        self._dataloader.generator.manual_seed(self.sampler.seed * 1_000_003 + self.sampler.epoch)
        return self._dataloader

    def __iter__(self):
        self.batches = 0
        for batch in self._loader():
            batch.pop("index")
            self.batches += 1
            yield batch


def build_finetuning_loader(data_dir: str, tokenizer, max_source_length: int, max_target_length: int,
                            batch_size: int, *, world_size: int = 1, rank: int = 0, seed: int = 0,
                            n_obs: int | None = None, sortish: bool = False,
                            max_tokens: int | None = None, num_workers: int = 0, prefix: str = "",
                            accumulation: int = 1) -> EpochLoader:
    """The training split as shuffled batches: plain, length-grouped (``sortish``) or token-budget
    (``max_tokens``, lengths in tokens rather than words); ``prefix`` put in front of every source; ``accumulation``
    micro-batches per update (the global batch: :class:`SortishSampler`)."""
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
                             group_by_length=bool(sortish or max_tokens), accumulation=accumulation)
    return EpochLoader(train, sampler, num_workers)
