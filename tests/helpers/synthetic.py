"""Deterministic in-memory seq2seq batches for training-loop tests (no files, no workers)."""
import torch

from bart.configuration import BartConfig

TINY = dict(vocab_size=64, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)


def tiny_config(**overrides) -> BartConfig:
    return BartConfig(**dict(TINY, **overrides))


def example(index: int, epoch: int = 0, vocab: int = 64):
    """One (source, labels) pair; target lengths differ between examples."""
    g = torch.Generator().manual_seed(1000 * epoch + index)
    source_len = 6 + int(torch.randint(0, 8, (1,), generator=g))
    target_len = 3 + int(torch.randint(0, 9, (1,), generator=g))
    source = torch.randint(4, vocab, (source_len,), generator=g)
    target = torch.cat([source[:target_len - 1].flip(0), torch.tensor([2])])  # a learnable mapping
    return torch.cat([torch.tensor([0]), source, torch.tensor([2])]), target


def collate(pairs, pad: int = 1) -> dict:
    sources, targets = zip(*pairs)
    s_len, t_len = max(len(s) for s in sources), max(len(t) for t in targets)
    input_ids = torch.full((len(pairs), s_len), pad)
    labels = torch.full((len(pairs), t_len), -100)
    for i, (s, t) in enumerate(pairs):
        input_ids[i, :len(s)] = s
        labels[i, :len(t)] = t
    return {"input_ids": input_ids, "attention_mask": (input_ids != pad).long(), "labels": labels}


class SyntheticBatches:
    """``num_batches`` batches of ``batch_size`` examples per epoch; rank r of w takes every w-th
    example of each global batch of ``batch_size * world`` (so ranks split what one process would see)."""

    def __init__(self, num_batches: int, batch_size: int, rank: int = 0, world: int = 1, shuffle_epochs: bool = True):
        self.num_batches, self.batch_size, self.rank, self.world = num_batches, batch_size, rank, world
        self.epoch, self.shuffle_epochs = 0, shuffle_epochs

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        global_batch = self.batch_size * self.world
        for b in range(self.num_batches):
            indices = range(b * global_batch, (b + 1) * global_batch)
            mine = [i for i in indices if i % self.world == self.rank]
            yield collate([example(i, self.epoch if self.shuffle_epochs else 0) for i in mine])


class WalkBatches:
    """``num_batches`` fixed-shape copy batches (the target is the source) whose sources are walks on a fixed
    random graph, two successors per token: learnable from the decoder's own inputs as well as from the encoder,
    so a micro model's loss falls smoothly (about 2.9 to 0.15 nats in 200 AdamW updates at lr 1e-2) instead of
    in the jump a plain copy task makes. For comparing precisions over a few hundred updates."""

    def __init__(self, num_batches: int, batch_size: int = 8, length: int = 10, vocab: int = 64, seed: int = 1):
        self.num_batches, self.batch_size, self.length, self.vocab, self.seed = num_batches, batch_size, length, vocab, seed
        self.successors = torch.randint(4, vocab, (vocab, 2), generator=torch.Generator().manual_seed(7))

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.num_batches):
            walk = torch.empty(self.batch_size, self.length, dtype=torch.long)
            walk[:, 0] = torch.randint(4, self.vocab, (self.batch_size,), generator=g)
            for t in range(1, self.length):
                walk[:, t] = self.successors[walk[:, t - 1], torch.randint(0, 2, (self.batch_size,), generator=g)]
            ids = torch.cat([torch.zeros(self.batch_size, 1, dtype=torch.long), walk,
                             torch.full((self.batch_size, 1), 2)], 1)
            yield {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[:, 1:].clone()}


def run_settings(precision: str = "tf32", emulate_fp8: bool = False, **values):
    """The run's settings record a Trainer reads (``bart.cli.settings.Settings``), by flat names (``max_steps=5``)
    and the precision's name (its flags: ``PrecisionSettings.named``)."""
    from bart.cli.settings import PrecisionSettings, Settings
    return Settings(precision_flags=PrecisionSettings.named(precision, emulate_fp8), **values)


def one_process(model, device=None):
    """The strategy of one process, prepared for ``model`` (what a Trainer takes; the builder's for a real run)."""
    from bart.training.strategy import prepared_strategy
    return prepared_strategy(None, 1, device or next(model.parameters()).device, model)
