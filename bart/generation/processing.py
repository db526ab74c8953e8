"""The processor order: the configured logits processors and warpers of one step, in transformers' order
(``_get_logits_processor``), each working in place (see :mod:`bart.generation.logits_processors`)."""
from __future__ import annotations

import torch

from bart.generation import logits_processors as lp
from bart.generation.options import GenerationOptions


def process_scores(opts: GenerationOptions, tokens: torch.Tensor, scores: torch.Tensor,
                   encoder_ids: torch.Tensor) -> torch.Tensor:
    """The configured processors in transformers' order (``_get_logits_processor``); ``scores`` is
    modified in place (see :mod:`bart.generation.logits_processors`)."""
    if opts.biases is not None:
        scores = lp.sequence_bias(tokens, scores, opts.biases)
    if opts.encoder_repetition_penalty != 1.0:  # one hypothesis row per source (checked in generate)
        scores = lp.encoder_repetition_penalty(scores, opts.encoder_repetition_penalty, encoder_ids)
    if opts.repetition_penalty != 1.0:
        scores = lp.repetition_penalty(tokens, scores, opts.repetition_penalty)
    scores = lp.no_repeat_ngram(tokens, scores, opts.no_repeat_ngram_size)
    scores = lp.encoder_no_repeat_ngram(tokens, scores, opts.encoder_no_repeat_ngram_size, encoder_ids)
    if opts.bad_words is not None:
        scores = lp.bad_words(tokens, scores, opts.bad_words)
    if opts.min_length > 0 and opts.eos_token_id is not None:  # min_new_tokens is folded into min_length
        scores = lp.min_length(tokens, scores, opts.min_length, opts.eos_token_id)
    length = tokens.shape[1]
    if opts.forced_bos_token_id is not None and length == 1:
        scores = lp.force_token(scores, opts.forced_bos_token_id)
    if opts.forced_eos_token_id is not None and length == opts.max_length - 1:
        scores = lp.force_token(scores, opts.forced_eos_token_id)
    if opts.remove_invalid_values:
        scores = lp.remove_invalid_values(scores)
    if opts.exponential_decay_length_penalty is not None:
        start, factor = opts.exponential_decay_length_penalty
        scores = lp.exponential_decay_length_penalty(tokens, scores, start + opts.prompt_length - 1, factor,
                                                     opts.eos_token_id)
    if opts.suppress_tokens_tensor is not None:
        scores = lp.suppress_tokens(scores, opts.suppress_tokens_tensor)
    # transformers suppresses at the first generated position, the second when a BOS token is forced
    # (and the decoder starts from the start token alone)
    begin = opts.prompt_length + (opts.prompt_length == 1 and opts.forced_bos_token_id is not None)
    if opts.begin_suppress_tokens_tensor is not None and length == begin:
        scores = lp.suppress_tokens(scores, opts.begin_suppress_tokens_tensor)
    for processor in opts.logits_processor:  # transformers appends the caller's after its own
        scores = processor(tokens, scores)
    return scores


def warp_scores(opts: GenerationOptions, scores: torch.Tensor, min_tokens_to_keep: int) -> torch.Tensor:
    """After the processors: when sampling, the warpers in transformers' order (temperature, top-k,
    top-p, min-p, typical, epsilon, eta); then, sampling or not, ``renormalize_logits``."""
    if opts.do_sample:
        if opts.temperature != 1.0:
            scores = lp.temperature(scores, opts.temperature)
        if opts.top_k != 0:
            scores = lp.top_k(scores, opts.top_k, min_tokens_to_keep)
        if opts.top_p < 1.0:
            scores = lp.top_p(scores, opts.top_p, min_tokens_to_keep)
        if opts.min_p is not None:
            scores = lp.min_p(scores, opts.min_p, min_tokens_to_keep)
        if opts.typical_p < 1.0:
            scores = lp.typical_p(scores, opts.typical_p, min_tokens_to_keep)
        if 0.0 < opts.epsilon_cutoff < 1.0:
            scores = lp.epsilon_cutoff(scores, opts.epsilon_cutoff, min_tokens_to_keep)
        if 0.0 < opts.eta_cutoff < 1.0:
            scores = lp.eta_cutoff(scores, opts.eta_cutoff, min_tokens_to_keep)
    if opts.renormalize_logits:
        scores = scores.log_softmax(dim=-1)
    return scores
