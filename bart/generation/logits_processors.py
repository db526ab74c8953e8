"""Score processors for generation, vectorised over all hypotheses (no per-hypothesis Python loop).

Each function takes the decoder tokens so far ``tokens`` (N, L), including the decoder start
token, and the next-token scores ``scores`` (N, V), and returns the modified scores. The processors
(everything above the sampling warpers) modify ``scores`` IN PLACE and return it: generation owns a
preallocated scores buffer per call, and a (N, V) copy per processor and step would be the largest
allocations of a decode step. The semantics match transformers' processors of the same names, so
outputs agree token for token.
"""
from __future__ import annotations

from collections.abc import Sequence

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

    def __init__(self, bad_words_ids: Sequence[Sequence[int]], eos_token_id: int | None, device):
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


class SequenceBias:
    """``sequence_bias`` prepared once per call (transformers' SequenceBiasLogitsProcessor): a bias for
    a single token is always added; a longer sequence's bias is added to its last token when the
    hypothesis ends with the rest. The biases of a step are summed first and added to the scores once,
    in transformers' order, so the sums round alike."""

    def __init__(self, sequence_bias: dict, vocab_size: int, device):
        self.single = torch.zeros(vocab_size, dtype=torch.float, device=device)
        single = [(ids[0], bias) for ids, bias in sequence_bias.items() if len(ids) == 1]
        if single:
            self.single[[i for i, _ in single]] = torch.tensor([b for _, b in single], device=device)
        self.longer = [(torch.tensor(ids[:-1], dtype=torch.long, device=device), ids[-1],
                        torch.tensor(bias, device=device)) for ids, bias in sequence_bias.items() if len(ids) > 1]


def sequence_bias(tokens: torch.Tensor, scores: torch.Tensor, biases: SequenceBias) -> torch.Tensor:
    bias = torch.zeros_like(scores).add_(biases.single)
    zero = torch.zeros((), device=scores.device)
    for prefix, last, value in biases.longer:
        if prefix.numel() + 1 > tokens.shape[1]:  # longer than the hypothesis: not checked yet
            continue
        matching = (tokens[:, tokens.shape[1] - prefix.numel():] == prefix).all(1)
        bias[:, last] += torch.where(matching, value, zero)
    return scores.add_(bias)


def encoder_repetition_penalty(scores: torch.Tensor, penalty: float, encoder_ids: torch.Tensor) -> torch.Tensor:
    """The penalty in reverse on tokens of the source (one hypothesis row per source): source tokens
    become more likely for a penalty above 1."""
    inverse = 1 / penalty
    picked = scores.gather(1, encoder_ids)
    picked = torch.where(picked < 0, picked * inverse, picked / inverse)
    return scores.scatter_(1, encoder_ids, picked)


def remove_invalid_values(scores: torch.Tensor) -> torch.Tensor:
    """NaN to 0 and +-inf to the largest finite values of the dtype (transformers' InfNanRemove)."""
    finfo = torch.finfo(scores.dtype)
    return torch.nan_to_num_(scores, nan=0.0, posinf=finfo.max, neginf=finfo.min)


def exponential_decay_length_penalty(tokens: torch.Tensor, scores: torch.Tensor, start: int, factor: float,
                                     eos_token_id: int) -> torch.Tensor:
    """After ``start`` generated tokens, the EOS score grows by |score| * (factor^k - 1) at the k-th
    further step. ``tokens`` include the decoder start token."""
    length = tokens.shape[1]
    if length > start + 1:
        eos = scores[:, eos_token_id]
        scores[:, eos_token_id] = eos + eos.abs() * (pow(factor, length - start - 1) - 1)
    return scores


def suppress_tokens(scores: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    return scores.index_fill_(1, token_ids, NEG_INF) if token_ids.numel() else scores


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


def min_p(scores: torch.Tensor, p: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Drop tokens less probable than ``p`` times the most probable one."""
    probs = scores.softmax(dim=-1)
    remove = probs < p * probs.max(dim=-1, keepdim=True).values
    order = scores.argsort(dim=-1, descending=True)
    sorted_remove = remove.gather(-1, order)
    sorted_remove[..., :min_tokens_to_keep] = False
    return scores.masked_fill(sorted_remove.scatter(1, order, sorted_remove), NEG_INF)


def typical_p(scores: torch.Tensor, mass: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Locally typical sampling: keep the tokens whose surprisal is closest to the entropy, up to ``mass``."""
    normalized = scores.log_softmax(dim=-1)
    probs = normalized.exp()
    entropy = -(normalized * probs).nansum(-1, keepdim=True)
    shifted = (-normalized - entropy).abs()
    sorted_shifted, order = shifted.sort(descending=False)
    cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
    last = (cumulative < mass).sum(dim=1).clamp_(max=sorted_shifted.shape[-1] - 1)
    remove = sorted_shifted > sorted_shifted.gather(1, last.view(-1, 1))
    remove[..., :min_tokens_to_keep] = False
    return scores.masked_fill(remove.scatter(1, order, remove), NEG_INF)


def _cutoff(scores: torch.Tensor, remove: torch.Tensor, min_tokens_to_keep: int) -> torch.Tensor:
    keep = min(min_tokens_to_keep, scores.shape[-1])
    remove = remove & (scores < scores.topk(keep)[0][..., -1, None])
    return scores.masked_fill(remove, NEG_INF)


def epsilon_cutoff(scores: torch.Tensor, epsilon: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Drop tokens with probability below ``epsilon``."""
    return _cutoff(scores, scores.softmax(dim=-1) < epsilon, min_tokens_to_keep)


def eta_cutoff(scores: torch.Tensor, epsilon: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Drop tokens with probability below min(epsilon, sqrt(epsilon) * exp(-entropy))."""
    epsilon_t = torch.tensor(epsilon, device=scores.device)
    entropy = torch.distributions.Categorical(logits=scores).entropy()
    eta = torch.min(epsilon_t, epsilon_t.sqrt() * torch.exp(-entropy))[..., None]
    return _cutoff(scores, scores.softmax(dim=-1) < eta, min_tokens_to_keep)
