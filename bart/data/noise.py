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
The whole batch is noised at once: its documents are concatenated into one flat array with a
segment id per token, and every step is a handful of numpy operations over that array (no Python
loop over samples or tokens). Random numbers come from a counter-based generator: the value for
(sample, purpose, position) is a hash of (seed, epoch, sample index, purpose, position), so the
noise of a sample is a pure function of (seed, epoch, sample index) whatever batch it lands in,
and a resumed run sees the same noise.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, fields

import numpy as np
import torch

MIN_DOCUMENT_TOKENS = 1  # tokens a document needs between <s> and </s> to be noised


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
        group.add_argument(f"--{f.name}", type=type(f.default), default=f.default, help=_HELP[f.name],
                           metavar="N" if isinstance(f.default, int) else "X")


def noise_config_from_args(args: argparse.Namespace) -> NoiseConfig:
    return NoiseConfig(**{f.name: vars(args)[f.name] for f in fields(NoiseConfig)})


# ---------------------------------------------------------------------------------------------
# counter-based random numbers
_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
(_PERMUTE_PICK, _PERMUTE_ORDER, _SPAN_DRAW, _SPAN_ORDER, _SPAN_GAPS, _MASK_RANDOM, _RANDOM_TOKEN,
 _INSERT_PLACE, _INSERT_TOKEN, _ROTATE, _ROTATE_OFFSET) = range(1, 12)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective scramble of uint64 values (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def sample_keys(seed: int, epochs, indices) -> np.ndarray:
    """One uint64 key per sample from (seed, epoch, index)."""
    with np.errstate(over="ignore"):
        base = _mix(np.full(len(indices), seed & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64) + _GOLDEN)
        base = _mix(base + np.asarray(epochs, dtype=np.int64).astype(np.uint64) * _GOLDEN)
        return _mix(base ^ (np.asarray(indices, dtype=np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFFFFFF)))


def uniforms(keys: np.ndarray, purpose: int, counters: np.ndarray) -> np.ndarray:
    """Uniform doubles in [0, 1), a pure function of (key, purpose, counter); arrays broadcast."""
    with np.errstate(over="ignore"):
        x = _mix(keys ^ (np.uint64(purpose) * _GOLDEN))
        x = _mix(x + np.asarray(counters).astype(np.uint64) * _GOLDEN)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


# ---------------------------------------------------------------------------------------------
# segmented helpers: a batch is (values, lengths), segment s owning values[off[s]:off[s]+len[s]]
def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)


def _positions(lengths: np.ndarray) -> np.ndarray:
    """Position of every element inside its segment."""
    total = int(lengths.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(_offsets(lengths), lengths)


def _ranks(segment: np.ndarray, keys: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Rank of each element's key among its segment's keys (0 = smallest)."""
    order = np.lexsort((keys, segment))
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys), dtype=np.int64) - np.repeat(_offsets(lengths), lengths)
    return rank


def _ceil(values: np.ndarray, ratio: float) -> np.ndarray:
    return np.ceil(values * ratio).astype(np.int64)


@dataclass
class FlatBatch:
    """The inner tokens (no <s>/</s>) of a batch, concatenated."""
    tokens: np.ndarray    # int64, all samples' inner tokens
    lengths: np.ndarray   # int64 per sample
    keys: np.ndarray      # uint64 per sample

    @property
    def segment(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.lengths)), self.lengths)

    def documents(self, bos: int, eos: int) -> list[np.ndarray]:
        pieces = np.split(self.tokens, np.cumsum(self.lengths)[:-1])
        return [np.concatenate([[bos], p, [eos]]).astype(np.int64) for p in pieces]


def poisson_table(lam: float) -> np.ndarray:
    """Cumulative Poisson(lam) probabilities up to the length where the mass drops below 1e-7;
    longer draws are clipped to that length."""
    pmf = [math.exp(-lam)]
    while pmf[-1] >= 1e-7 or len(pmf) <= lam:
        pmf.append(pmf[-1] * lam / len(pmf))
    return np.cumsum(pmf[:-1])


def poisson_draws(keys: np.ndarray, width: int, cdf: np.ndarray) -> np.ndarray:
    """``width`` Poisson draws per key (inverse CDF of counter-based uniforms), shape (keys, width)."""
    draws = np.searchsorted(cdf, uniforms(keys[:, None], _SPAN_DRAW, np.arange(width)[None, :]), side="right")
    return np.minimum(draws, cdf.size - 1)


def span_plan(n_words: np.ndarray, keys: np.ndarray, ratio: float, lam: float, cdf: np.ndarray):
    """Word-level plan of every sample: (sample of each span, first word, length in words) with the
    spans of a sample in word order and never overlapping, plus zero-length draws per sample.

    ``ceil(n_words * ratio)`` words per sample are covered by Poisson draws (the last trimmed);
    the draws are shuffled and the uncovered words spread over the len(spans)+1 gaps at random."""
    samples = len(n_words)
    budget = _ceil(n_words, ratio)
    width = int(2 * budget.max(initial=0) / lam + 8)
    while True:  # counters make a wider draw extend the narrower one
        draws = poisson_draws(keys, width, cdf)
        total = np.cumsum(draws, axis=1)
        if (total[:, -1] >= budget).all():
            break
        width *= 2
    last = np.argmax(total >= budget[:, None], axis=1)
    column = np.arange(width)[None, :]
    valid = (column <= last[:, None]) & (budget[:, None] > 0)
    trimmed = budget - (total[np.arange(samples), last] - draws[np.arange(samples), last])
    draws = np.where(column == last[:, None], trimmed[:, None], draws)
    zero = (valid & (draws == 0)).sum(axis=1)
    rows, cols = np.nonzero(valid & (draws > 0))
    span_len = draws[rows, cols]
    count = np.bincount(rows, minlength=samples)
    span_len = span_len[np.lexsort((uniforms(keys[rows], _SPAN_ORDER, cols), rows))]  # shuffled per sample
    # cut points: count[s] distinct places among (uncovered words + spans), in order
    places = n_words - budget + count
    place_seg = np.repeat(np.arange(samples), places)
    place = _positions(places)
    chosen = _ranks(place_seg, uniforms(keys[place_seg], _SPAN_GAPS, place), places) < count[place_seg]
    cut = place[chosen]
    index_in_sample = _positions(count)
    covered = np.concatenate([[0], np.cumsum(span_len)])
    before = covered[:-1] - np.repeat(covered[_offsets(count)], count)  # span words earlier in the sample
    return rows, cut - index_in_sample + before, span_len, zero


class DenoisingNoise:
    """Noises whole batches (``batch``) or one document (``__call__``); see the module docstring."""

    def __init__(self, config: NoiseConfig, word_starts: torch.Tensor, sentence_ends: torch.Tensor,
                 mask_token_id: int, seed: int = 0, bos: int = 0, eos: int = 2) -> None:
        self.config = config
        self.word_starts = word_starts.numpy().astype(bool)
        self.sentence_ends = sentence_ends.numpy().astype(bool)
        self.mask, self.seed = mask_token_id, seed
        self.bos, self.eos = bos, eos
        # random replacement tokens: ordinary tokens only (GPT-2 range), never specials or <mask>
        self.random_low, self.random_high = 4, mask_token_id
        self.cdf = poisson_table(config.poisson_lambda)

    def __call__(self, tokens: np.ndarray, epoch: int, index: int) -> np.ndarray:
        return self.batch([tokens], [epoch], [index])[0]

    def flatten(self, documents: list[np.ndarray], epochs, indices) -> FlatBatch:
        lengths = np.array([len(d) - 2 for d in documents], dtype=np.int64)
        if (lengths < MIN_DOCUMENT_TOKENS).any():
            raise ValueError(f"every document needs <s>, at least {MIN_DOCUMENT_TOKENS} token(s) and </s>")
        tokens = np.concatenate([np.asarray(d[1:-1], dtype=np.int64) for d in documents])
        return FlatBatch(tokens, lengths, sample_keys(self.seed, epochs, indices))

    def batch(self, documents: list[np.ndarray], epochs, indices) -> list[np.ndarray]:
        """Noised copies of ``<s> ... </s>`` documents (each from its own (epoch, index))."""
        cfg = self.config
        flat = self.flatten(documents, epochs, indices)
        if cfg.permute_sentence_ratio > 0:
            flat = self.permute_sentences(flat)
        inserts = np.zeros(len(flat.lengths), dtype=np.int64)
        if cfg.mlm_probability > 0:
            flat, inserts = self.mask_spans(flat)
        if cfg.insert_ratio > 0:
            inserts = inserts + _ceil(flat.lengths + 2, cfg.insert_ratio)
        if inserts.any():
            flat = self.insert_tokens(flat, inserts)
        if cfg.rotate_ratio > 0:
            flat = self.rotate(flat)
        return flat.documents(self.bos, self.eos)

    def _random_tokens(self, keys: np.ndarray, counters: np.ndarray) -> np.ndarray:
        span = self.random_high - self.random_low
        return self.random_low + (uniforms(keys, _RANDOM_TOKEN, counters) * span).astype(np.int64)

    def permute_sentences(self, flat: FlatBatch) -> FlatBatch:
        segment, offsets = flat.segment, _offsets(flat.lengths)
        ends = self.sentence_ends[flat.tokens]
        ends[offsets + flat.lengths - 1] = True  # the last token closes a sentence
        end_at = np.flatnonzero(ends)
        sent_seg = segment[end_at]
        sent_start = np.concatenate([[0], end_at[:-1] + 1])
        sent_len = end_at + 1 - sent_start
        n = np.bincount(sent_seg, minlength=len(flat.lengths))
        k = _ceil(n, self.config.permute_sentence_ratio)
        place = _positions(n)
        keys = flat.keys[sent_seg]
        eligible = ((n >= 2) & (k >= 2))[sent_seg]
        chosen = eligible & (_ranks(sent_seg, uniforms(keys, _PERMUTE_PICK, place), n) < k[sent_seg])
        slots = np.flatnonzero(chosen)  # by sample, then position
        contents = slots[np.lexsort((uniforms(keys[slots], _PERMUTE_ORDER, place[slots]), sent_seg[slots]))]
        order = np.arange(len(sent_seg))
        order[slots] = contents
        gather = np.repeat(sent_start[order], sent_len[order]) + _positions(sent_len[order])
        return FlatBatch(flat.tokens[gather], flat.lengths, flat.keys)

    def mask_spans(self, flat: FlatBatch) -> tuple[FlatBatch, np.ndarray]:
        """Returns the masked batch and the zero-length spans of each sample (inserted later)."""
        cfg = self.config
        segment, offsets = flat.segment, _offsets(flat.lengths)
        is_start = self.word_starts[flat.tokens]
        is_start[offsets] = True  # a document's first token begins a word
        word_of_token = np.cumsum(is_start) - 1
        n_words = np.bincount(segment[is_start], minlength=len(flat.lengths))
        span_seg, first_word, span_len, zero = span_plan(n_words, flat.keys, cfg.mlm_probability,
                                                          cfg.poisson_lambda, self.cdf)
        start = _offsets(n_words)[span_seg] + first_word
        total_words = int(n_words.sum())
        coverage = np.bincount(start, minlength=total_words + 1) - np.bincount(start + span_len, minlength=total_words + 1)
        word_masked = np.cumsum(coverage)[:total_words] > 0
        span_first = np.zeros(total_words, dtype=bool)
        span_first[start] = True
        masked = word_masked[word_of_token]
        if cfg.replace_length == 1:
            replace = is_start & span_first[word_of_token]
        elif cfg.replace_length == -1:
            replace = masked
        else:
            replace = np.zeros_like(masked)
        tokens = flat.tokens.copy()
        where = np.flatnonzero(replace)
        if len(where):
            keys, position = flat.keys[segment[where]], where - offsets[segment[where]]
            values = np.full(len(where), self.mask, dtype=np.int64)
            use_random = uniforms(keys, _MASK_RANDOM, position) < cfg.mask_random
            values[use_random] = self._random_tokens(keys[use_random], position[use_random])
            tokens[where] = values
        keep = ~masked | replace
        lengths = np.bincount(segment[keep], minlength=len(flat.lengths))
        return FlatBatch(tokens[keep], lengths, flat.keys), zero

    def insert_tokens(self, flat: FlatBatch, counts: np.ndarray) -> FlatBatch:
        """``counts[s]`` <mask>/random tokens at random places of sample s (never outside <s>..</s>)."""
        lengths = flat.lengths + counts
        segment = np.repeat(np.arange(len(lengths)), lengths)
        place = _positions(lengths)
        keys = flat.keys[segment]
        rank = _ranks(segment, uniforms(keys, _INSERT_PLACE, place), lengths)
        is_noise = rank < counts[segment]
        out = np.empty(int(lengths.sum()), dtype=np.int64)
        out[~is_noise] = flat.tokens
        n_random = _ceil(counts, self.config.mask_random)
        noise_at = np.flatnonzero(is_noise)
        values = np.full(len(noise_at), self.mask, dtype=np.int64)
        use_random = rank[noise_at] < n_random[segment[noise_at]]
        values[use_random] = self._random_tokens(keys[noise_at][use_random] ^ np.uint64(_INSERT_TOKEN),
                                                 place[noise_at][use_random])
        out[noise_at] = values
        return FlatBatch(out, lengths, flat.keys)

    def rotate(self, flat: FlatBatch) -> FlatBatch:
        """With probability rotate_ratio a document starts at a random token (the rest wraps)."""
        samples = np.arange(len(flat.lengths))
        turn = (uniforms(flat.keys, _ROTATE, samples * 0) < self.config.rotate_ratio) & (flat.lengths >= 2)
        shift = np.where(turn, (uniforms(flat.keys, _ROTATE_OFFSET, samples * 0) * flat.lengths).astype(np.int64), 0)
        segment = flat.segment
        within = (_positions(flat.lengths) + shift[segment]) % flat.lengths[segment]
        return FlatBatch(flat.tokens[_offsets(flat.lengths)[segment] + within], flat.lengths, flat.keys)



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
        sources = self.noise.batch(targets, [s["epoch"] for s in samples], [s["index"] for s in samples])
        sources = [source if len(source) <= self.max_length  # only insertion noise can grow a sample
                   else np.concatenate([source[: self.max_length - 1], source[-1:]]) for source in sources]
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
