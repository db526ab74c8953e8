"""BART's denoising noise as a batch collator.

On one document ``<s> tokens </s>`` (the target is the clean document), in order:
1. sentence permutation: ``ceil(n_sentences * permute_sentence_ratio)`` sentences change places
   (sentences end at tokens whose text ends with . ! ? and at the last token before ``</s>``);
2. span masking over whole words: ``ceil(n_words * mlm_probability)`` words are masked, in spans
   whose lengths (in words) are Poisson(``poisson_lambda``) draws (the last one trimmed to the
   budget; zero-length draws become ``<mask>`` insertions); spans never overlap, never touch
   ``<s>``/``</s>``; with ``replace_length`` 1 a span becomes one ``<mask>`` (a random token with
   probability ``mask_random``), with -1 every token is masked, with 0 the span is deleted;
3. insertion of ``<mask>``/random tokens (``insert_ratio`` of the length);
4. rotation to a random start (with probability ``rotate_ratio``).
Every operation is array-wide numpy (no per-token Python loop), and the noise of a sample is a
pure function of (seed, epoch, sample index), so a resumed run sees the same noise.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, fields

import numpy as np
import torch


@dataclass
class NoiseConfig:
    mlm_probability: float = 0.3
    permute_sentence_ratio: float = 1.0
    poisson_lambda: float = 3.5
    mask_random: float = 0.1
    replace_length: int = 1
    insert_ratio: float = 0.0
    rotate_ratio: float = 0.0

    def __post_init__(self) -> None:
        for name in ("mlm_probability", "permute_sentence_ratio", "mask_random", "insert_ratio", "rotate_ratio"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--{name} must be in [0, 1], got {value}")
        if self.replace_length not in (-1, 0, 1):
            raise ValueError(f"--replace_length must be -1, 0 or 1, got {self.replace_length}")
        if self.poisson_lambda <= 0:
            raise ValueError(f"--poisson_lambda must be positive, got {self.poisson_lambda}")


_HELP = {
    "mlm_probability": "fraction of words masked (BART-large: 0.3)",
    "permute_sentence_ratio": "fraction of sentences permuted (1.0)",
    "poisson_lambda": "mean span length in words (3.5, as the published BART-large command)",
    "mask_random": "probability that a masked span becomes a random token instead of <mask> (0.1)",
    "replace_length": "1: a span becomes one <mask>; -1: every token masked; 0: span deleted",
    "insert_ratio": "<mask>/random tokens inserted, as a fraction of the length (0)",
    "rotate_ratio": "probability of rotating the document to a random start (0)",
}


def add_noise_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("denoising noise (BART)")
    for f in fields(NoiseConfig):
        group.add_argument(f"--{f.name}", type=type(f.default), default=f.default, help=_HELP[f.name])


def noise_config_from_args(args: argparse.Namespace) -> NoiseConfig:
    return NoiseConfig(**{f.name: getattr(args, f.name) for f in fields(NoiseConfig)})


def poisson_span_lengths(rng: np.random.Generator, budget: int, lam: float) -> np.ndarray:
    """Poisson(lam) draws (truncated where P < 1e-7) until they cover ``budget``; the last is trimmed."""
    if budget <= 0:
        return np.zeros(0, dtype=np.int64)
    cap = int(lam + 1)
    while math.exp(-lam) * lam ** cap / math.factorial(cap) >= 1e-7:
        cap += 1
    draws = np.minimum(rng.poisson(lam, size=max(4, int(2 * budget / lam) + 4)), cap)
    while draws.sum() < budget:
        draws = np.concatenate([draws, np.minimum(rng.poisson(lam, size=len(draws)), cap)])
    total = np.cumsum(draws)
    last = int(np.searchsorted(total, budget))
    lengths = draws[:last + 1].copy()
    lengths[last] = budget - (total[last - 1] if last > 0 else 0)
    return lengths


class DenoisingNoise:
    """Applies the noise to one token array; see the module docstring."""

    def __init__(self, config: NoiseConfig, word_starts: torch.Tensor, sentence_ends: torch.Tensor,
                 mask_token_id: int, vocab_size: int, seed: int = 0, bos: int = 0, eos: int = 2) -> None:
        self.config = config
        self.word_starts = word_starts.numpy().astype(bool)
        self.sentence_ends = sentence_ends.numpy().astype(bool)
        self.mask, self.vocab_size, self.seed = mask_token_id, vocab_size, seed
        self.bos, self.eos = bos, eos
        # random replacement tokens: ordinary tokens only (GPT-2 range), never specials or <mask>
        self.random_low, self.random_high = 4, mask_token_id

    def rng(self, epoch: int, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, index & 0xFFFFFFFFFFFF])

    def __call__(self, tokens: np.ndarray, epoch: int, index: int) -> np.ndarray:
        rng = self.rng(epoch, index)
        source = tokens
        if self.config.permute_sentence_ratio > 0:
            source = self.permute_sentences(source, rng)
        inserts = 0
        if self.config.mlm_probability > 0:
            source, inserts = self.mask_spans(source, rng)
        n_insert = inserts + (math.ceil(len(source) * self.config.insert_ratio) if self.config.insert_ratio else 0)
        if n_insert:
            source = self.insert_tokens(source, n_insert, rng)
        if self.config.rotate_ratio > 0 and rng.random() < self.config.rotate_ratio:
            source = self.rotate(source, rng)
        return source

    def permute_sentences(self, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        inner = tokens[1:-1]
        if len(inner) < 2:
            return tokens
        ends = self.sentence_ends[inner]
        ends[-1] = True
        sentence_id = np.concatenate([[0], np.cumsum(ends[:-1])])
        n = int(sentence_id[-1]) + 1
        k = math.ceil(n * self.config.permute_sentence_ratio)
        if n < 2 or k < 2:
            return tokens
        chosen = rng.permutation(n)[:k]
        ordering = np.arange(n)
        ordering[chosen] = chosen[rng.permutation(k)]
        rank = np.empty(n, dtype=np.int64)
        rank[ordering] = np.arange(n)  # new position of each sentence
        order = np.argsort(rank[sentence_id] * len(inner) + np.arange(len(inner)), kind="stable")
        return np.concatenate([tokens[:1], inner[order], tokens[-1:]])

    def plan_spans(self, n_words: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
        """Word-level plan: (first word of each span, span lengths in words, zero-length draws).
        Spans never overlap: the unmasked words fall into len(spans)+1 random gaps."""
        budget = math.ceil(n_words * self.config.mlm_probability)
        lengths = poisson_span_lengths(rng, budget, self.config.poisson_lambda)
        zero = int((lengths == 0).sum())
        lengths = lengths[lengths > 0]
        if len(lengths) == 0:
            return np.zeros(0, dtype=np.int64), lengths, zero
        rng.shuffle(lengths)
        free = n_words - int(lengths.sum())
        cuts = np.sort(rng.choice(free + len(lengths), size=len(lengths), replace=False))
        gaps = np.diff(np.concatenate([[-1], cuts])) - 1  # unmasked words before each span
        span_starts = np.cumsum(gaps) + np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return span_starts, lengths, zero

    def mask_spans(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """Returns the masked tokens and the number of zero-length spans (to insert as masks)."""
        inner = tokens[1:-1]
        if len(inner) == 0:
            return tokens, 0
        is_start = self.word_starts[inner].copy()
        is_start[0] = True  # the first token always begins a word
        n_words = int(is_start.sum())
        span_starts, lengths, zero = self.plan_spans(n_words, rng)
        if len(lengths) == 0:
            return tokens, zero
        word_masked = np.zeros(n_words, dtype=bool)
        word_span_start = np.zeros(n_words, dtype=bool)
        word_span_start[span_starts] = True
        coverage = np.zeros(n_words + 1, dtype=np.int64)
        np.add.at(coverage, span_starts, 1)
        np.add.at(coverage, span_starts + lengths, -1)
        word_masked[:] = np.cumsum(coverage[:-1]) > 0
        word_of_token = np.cumsum(is_start) - 1
        masked = word_masked[word_of_token]
        first = is_start & word_span_start[word_of_token]
        out = inner.copy()
        replace = first if self.config.replace_length == 1 else masked
        if self.config.replace_length != 0:
            n = int(replace.sum())
            use_random = rng.random(n) < self.config.mask_random
            values = np.full(n, self.mask, dtype=out.dtype)
            values[use_random] = rng.integers(self.random_low, self.random_high, int(use_random.sum()))
            out[replace] = values
        keep = ~masked | (replace if self.config.replace_length != 0 else np.zeros_like(masked))
        return np.concatenate([tokens[:1], out[keep], tokens[-1:]]), zero

    def insert_tokens(self, tokens: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        total = len(tokens) + count
        positions = rng.permutation(total - 2)[:count] + 1  # never before <s> or after </s>
        is_noise = np.zeros(total, dtype=bool)
        is_noise[positions] = True
        out = np.empty(total, dtype=tokens.dtype)
        n_random = math.ceil(count * self.config.mask_random)
        out[positions] = self.mask
        out[positions[:n_random]] = rng.integers(self.random_low, self.random_high, n_random)
        out[~is_noise] = tokens
        return out

    def rotate(self, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if len(tokens) < 4:
            return tokens
        offset = int(rng.integers(1, len(tokens) - 1))
        return np.concatenate([tokens[:1], tokens[offset:-1], tokens[1:offset], tokens[-1:]])


class DenoisingCollator:
    """Samples ``{"input_ids": np.ndarray with <s>..</s>, "index": int, "epoch": int}`` → a batch of
    input_ids, attention_mask, decoder_input_ids (target shifted right, starting with
    ``decoder_start_token_id``) and labels (padding -100). Sources never exceed ``max_length``."""

    def __init__(self, noise: DenoisingNoise, max_length: int, pad_token_id: int = 1,
                 decoder_start_token_id: int = 2) -> None:
        self.noise, self.max_length = noise, max_length
        self.pad, self.start = pad_token_id, decoder_start_token_id

    def __call__(self, samples: list[dict]) -> dict:
        targets = [s["input_ids"][: self.max_length] for s in samples]
        sources = []
        for sample, target in zip(samples, targets):
            source = self.noise(target, sample["epoch"], sample["index"])
            if len(source) > self.max_length:  # only insertion noise can grow a sample
                source = np.concatenate([source[: self.max_length - 1], source[-1:]])
            sources.append(source)
        return {**self._pad(sources, "input_ids", self.pad), **self._targets(targets)}

    def _pad(self, rows: list[np.ndarray], name: str, pad: int) -> dict:
        width = max(len(r) for r in rows)
        out = np.full((len(rows), width), pad, dtype=np.int64)
        lengths = np.array([len(r) for r in rows])
        out[np.arange(width)[None, :] < lengths[:, None]] = np.concatenate(rows)
        ids = torch.from_numpy(out)
        return {name: ids, "attention_mask": (ids != pad).long() if name == "input_ids" else None}

    def _targets(self, targets: list[np.ndarray]) -> dict:
        labels = self._pad(targets, "labels", -100)["labels"]
        decoder_input_ids = torch.full_like(labels, self.pad)
        decoder_input_ids[:, 0] = self.start
        decoder_input_ids[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] == -100, self.pad)
        return {"labels": labels, "decoder_input_ids": decoder_input_ids}
