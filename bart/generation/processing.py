"""The processor order: the logits processors and warpers of a call, built once per call in transformers'
order (``GenerationMixin._get_logits_processor``), one ``if`` per option. Each is a function
``(tokens, scores, encoder_ids) -> scores`` that works in place (see :mod:`bart.generation.logits_processors`);
``tokens`` (N, L) are the hypotheses so far, ``encoder_ids`` the running sources. Diverse beam search's
Hamming penalty depends on the group's step, so :mod:`bart.generation.beam` applies it before these."""
from __future__ import annotations

import torch

from bart.generation import logits_processors as lp
from bart.generation.options import GenerationOptions


def logits_processors(opts: GenerationOptions, vocab_size: int, device) -> list:
    """The processors of ``opts``, then the caller's, then (sampling) the warpers, then renormalization."""
    out = []
    add = out.append
    if opts.sequence_bias is not None:
        biases = lp.SequenceBias(opts.sequence_bias, vocab_size, device)
        add(lambda tokens, scores, sources: lp.sequence_bias(tokens, scores, biases))
    if opts.encoder_repetition_penalty != 1.0:  # one hypothesis row per source (checked in options)
        add(lambda tokens, scores, sources: lp.encoder_repetition_penalty(scores, opts.encoder_repetition_penalty,
                                                                          sources))
    if opts.repetition_penalty != 1.0:
        add(lambda tokens, scores, sources: lp.repetition_penalty(tokens, scores, opts.repetition_penalty))
    if opts.no_repeat_ngram_size > 0:
        add(lambda tokens, scores, sources: lp.no_repeat_ngram(tokens, scores, opts.no_repeat_ngram_size))
    if opts.encoder_no_repeat_ngram_size > 0:
        add(lambda tokens, scores, sources: lp.encoder_no_repeat_ngram(tokens, scores,
                                                                       opts.encoder_no_repeat_ngram_size, sources))
    if opts.bad_words_ids is not None:
        words = lp.BadWords(opts.bad_words_ids, opts.eos_token_id, device)
        add(lambda tokens, scores, sources: lp.bad_words(tokens, scores, words))
    if opts.min_length > 0 and opts.eos_token_id is not None:  # min_new_tokens is folded into min_length
        add(lambda tokens, scores, sources: lp.min_length(tokens, scores, opts.min_length, opts.eos_token_id))
    if opts.forced_bos_token_id is not None:
        add(lambda tokens, scores, sources: lp.force_token(scores, opts.forced_bos_token_id)
            if tokens.shape[1] == 1 else scores)
    if opts.forced_eos_token_id is not None:
        add(lambda tokens, scores, sources: lp.force_token(scores, opts.forced_eos_token_id)
            if tokens.shape[1] == opts.max_length - 1 else scores)
    if opts.remove_invalid_values:
        add(lambda tokens, scores, sources: lp.remove_invalid_values(scores))
    if opts.exponential_decay_length_penalty is not None:
        start, factor = opts.exponential_decay_length_penalty
        start += opts.prompt_length - 1
        add(lambda tokens, scores, sources: lp.exponential_decay_length_penalty(tokens, scores, start, factor,
                                                                                opts.eos_token_id))
    if opts.suppress_tokens is not None:
        suppressed = torch.tensor(opts.suppress_tokens, dtype=torch.long, device=device)
        add(lambda tokens, scores, sources: lp.suppress_tokens(scores, suppressed))
    if opts.begin_suppress_tokens is not None:
        # transformers suppresses at the first generated position, the second when a BOS token is forced
        # (and the decoder starts from the start token alone)
        begin = opts.prompt_length + (opts.prompt_length == 1 and opts.forced_bos_token_id is not None)
        at_begin = torch.tensor(opts.begin_suppress_tokens, dtype=torch.long, device=device)
        add(lambda tokens, scores, sources: lp.suppress_tokens(scores, at_begin) if tokens.shape[1] == begin
            else scores)
    for processor in opts.logits_processor:  # transformers appends the caller's after its own
        add(lambda tokens, scores, sources, processor=processor: processor(tokens, scores))
    if opts.do_sample:  # the warpers, in transformers' order
        keep = 2 if opts.num_beams > 1 else 1  # min_tokens_to_keep
        if opts.temperature != 1.0:
            add(lambda tokens, scores, sources: lp.temperature(scores, opts.temperature))
        if opts.top_k != 0:
            add(lambda tokens, scores, sources: lp.top_k(scores, opts.top_k, keep))
        if opts.top_p < 1.0:
            add(lambda tokens, scores, sources: lp.top_p(scores, opts.top_p, keep))
        if opts.min_p is not None:
            add(lambda tokens, scores, sources: lp.min_p(scores, opts.min_p, keep))
        if opts.typical_p < 1.0:
            add(lambda tokens, scores, sources: lp.typical_p(scores, opts.typical_p, keep))
        if 0.0 < opts.epsilon_cutoff < 1.0:
            add(lambda tokens, scores, sources: lp.epsilon_cutoff(scores, opts.epsilon_cutoff, keep))
        if 0.0 < opts.eta_cutoff < 1.0:
            add(lambda tokens, scores, sources: lp.eta_cutoff(scores, opts.eta_cutoff, keep))
    if opts.renormalize_logits:
        add(lambda tokens, scores, sources: scores.log_softmax(dim=-1))
    return out


def process(processors: list, tokens: torch.Tensor, scores: torch.Tensor, encoder_ids: torch.Tensor) -> torch.Tensor:
    """``scores`` (N, V) through ``processors`` in order."""
    for processor in processors:
        scores = processor(tokens, scores, encoder_ids)
    return scores
