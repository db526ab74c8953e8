"""Score processors for generation, vectorised over all hypotheses (no per-hypothesis Python loop).

Each function takes the decoder tokens so far ``tokens`` (N, L), including the decoder start
token, and the next-token scores ``scores`` (N, V), and returns the modified scores. The processors
(everything above the sampling warpers) modify ``scores`` IN PLACE and return it: generation owns a
preallocated scores buffer per call, and a (N, V) copy per processor and step would be the largest
allocations of a decode step. The semantics match transformers' processors of the same names, so
outputs agree token for token.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

NEG_INF = float("-inf")


def _ban(scores: torch.Tensor, tokens: torch.Tensor, hit: torch.Tensor) -> torch.Tensor:
    """Set scores[n, tokens[n, j]] to -inf wherever hit[n, j], in place. A minimum with -inf (hit) or
    +inf (no hit): a token listed twice, once hit and once not, is banned whatever the order."""
    if tokens.numel() == 0:
        return scores
    bound = torch.full(hit.shape, float("inf"), dtype=scores.dtype, device=scores.device).masked_fill_(hit, NEG_INF)
    return scores.scatter_reduce_(1, tokens, bound, reduce="amin")


def no_repeat_ngram(tokens: torch.Tensor, scores: torch.Tensor, n: int) -> torch.Tensor:
    """Forbid any token that would repeat an n-gram already in the hypothesis."""
    length = tokens.shape[1]
    if n <= 0 or length < n:  # no complete n-gram yet
        return scores
    if n == 1:
        return _ban(scores, tokens, torch.ones_like(tokens, dtype=torch.bool))
    windows = tokens.unfold(1, n, 1)                      # (N, L-n+1, n)
    last = tokens[:, length - n + 1:]                     # the current (n-1)-gram
    hit = (windows[:, :, :-1] == last[:, None, :]).all(-1)
    return _ban(scores, windows[:, :, -1], hit)


def encoder_no_repeat_ngram(tokens: torch.Tensor, scores: torch.Tensor, n: int,
                            encoder_ids: torch.Tensor) -> torch.Tensor:
    """Forbid tokens that would produce an n-gram of the source. ``encoder_ids`` (B, S); the N
    hypotheses are N // B consecutive rows per source."""
    length = tokens.shape[1]
    if n <= 0 or length + 1 < n or encoder_ids.shape[1] < n:
        return scores
    per_source = tokens.shape[0] // encoder_ids.shape[0]
    windows = encoder_ids.unfold(1, n, 1).repeat_interleave(per_source, dim=0)  # (N, S-n+1, n)
    if n == 1:
        hit = torch.ones(windows.shape[:2], dtype=torch.bool, device=tokens.device)
    else:
        last = tokens[:, length - n + 1:]
        hit = (windows[:, :, :-1] == last[:, None, :]).all(-1)
    return _ban(scores, windows[:, :, -1], hit)


def repetition_penalty(tokens: torch.Tensor, scores: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's penalty on every token already in the hypothesis (decoder start token included):
    negative scores are multiplied by ``penalty``, positive ones divided, once per token."""
    picked = scores.gather(1, tokens)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    return scores.scatter_(1, tokens, picked)


class BadWords:
    """``bad_words_ids`` prepared once per ``generate`` call: single tokens are always banned, the
    last token of a longer sequence only after its prefix. As in transformers, a sequence that is
    just the EOS token is dropped, and a sequence longer than the hypothesis is not checked yet."""

    def __init__(self, bad_words_ids: Sequence[Sequence[int]], eos_token_id: Optional[int], device):
        words = [list(word) for word in bad_words_ids if eos_token_id is None or list(word) != [eos_token_id]]
        single = sorted({word[0] for word in words if len(word) == 1})
        self.single = torch.tensor(single, dtype=torch.long, device=device)
        by_length: dict[int, list[list[int]]] = {}
        for word in words:
            if len(word) > 1:
                by_length.setdefault(len(word), []).append(word)
        self.longer = [(n, torch.tensor(group, dtype=torch.long, device=device)) for n, group in sorted(by_length.items())]


def bad_words(tokens: torch.Tensor, scores: torch.Tensor, words: BadWords) -> torch.Tensor:
    if words.single.numel():
        scores = scores.index_fill_(1, words.single, NEG_INF)
    length = tokens.shape[1]
    for n, group in words.longer:                         # group (K, n)
        if n > length:
            continue
        last = tokens[:, length - n + 1:]                 # (N, n-1)
        hit = (last[:, None, :] == group[None, :, :-1]).all(-1)  # (N, K)
        scores = _ban(scores, group[:, -1].expand(tokens.shape[0], -1), hit)
    return scores


def min_length(tokens: torch.Tensor, scores: torch.Tensor, minimum: int, eos_token_id: int) -> torch.Tensor:
    if tokens.shape[1] < minimum:
        scores[:, eos_token_id] = NEG_INF
    return scores


def force_token(scores: torch.Tensor, token_id: int) -> torch.Tensor:
    scores.fill_(NEG_INF)
    scores[:, token_id] = 0
    return scores


# --- not in place: diversity and the sampling warpers return new tensors ---------------------------


def hamming_diversity(scores: torch.Tensor, previous_tokens: torch.Tensor, penalty: float,
                      num_sources: int) -> torch.Tensor:
    """Penalise tokens that earlier beam groups chose at this step. ``scores`` (B*group_size, V),
    ``previous_tokens`` (B, k) tokens of the earlier groups for each source."""
    if previous_tokens.numel() == 0 or penalty == 0:
        return scores
    counts = torch.zeros(num_sources, scores.shape[1], dtype=scores.dtype, device=scores.device)
    counts.scatter_add_(1, previous_tokens, torch.ones_like(previous_tokens, dtype=scores.dtype))
    group_size = scores.shape[0] // num_sources
    return scores - penalty * counts.repeat_interleave(group_size, dim=0)


# --- sampling warpers (transformers' TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper) ---


def temperature(scores: torch.Tensor, value: float) -> torch.Tensor:
    return scores / value


def top_k(scores: torch.Tensor, k: int, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Keep the ``k`` highest scores (ties with the k-th included)."""
    k = min(max(k, min_tokens_to_keep), scores.shape[-1])
    kth = scores.topk(k, dim=-1).values[..., -1:]
    return scores.masked_fill(scores < kth, NEG_INF)


def top_p(scores: torch.Tensor, p: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Keep the smallest set of most probable tokens whose probabilities add up to at least ``p``."""
    sorted_scores, order = scores.sort(dim=-1, descending=False)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - p)
    remove[..., -min_tokens_to_keep:] = False
    return scores.masked_fill(remove.scatter(1, order, remove), NEG_INF)
