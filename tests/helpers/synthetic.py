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
