"""``model.generate``: greedy and beam search written in this project (no transformers import).

Defaults come from the model's config (``num_beams``, ``max_length``, ``min_length``,
``length_penalty``, ``no_repeat_ngram_size``, ``early_stopping``, forced BOS/EOS, ...), as in the
reference recipe. An unknown keyword is an error: run_eval.py passes extra ``--key value`` pairs
through, and a typo must not be ignored.
"""
from __future__ import annotations

from typing import Optional

import torch

from bart.generation.search import GenerateOutput, GenerationOptions, _Decoder, beam_search, greedy_search

_FROM_CONFIG = ("max_length", "min_length", "num_beams", "num_beam_groups", "diversity_penalty",
                "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "early_stopping",
                "num_return_sequences", "decoder_start_token_id", "bos_token_id", "eos_token_id",
                "pad_token_id", "forced_bos_token_id", "forced_eos_token_id", "output_scores",
                "return_dict_in_generate", "use_cache")
_ACCEPTED = set(_FROM_CONFIG) | {"attention_mask", "max_new_tokens", "do_sample", "output_attentions",
                                 "output_hidden_states", "synced_gpus"}


def _options(config, kwargs: dict) -> GenerationOptions:
    unknown = sorted(set(kwargs) - _ACCEPTED)
    if unknown:
        raise TypeError(f"generate() got unknown argument(s) {unknown}; accepted: {sorted(_ACCEPTED)}")
    if kwargs.get("do_sample"):
        raise NotImplementedError("generate(do_sample=True): sampling is not implemented; use beam search "
                                  "or greedy decoding (do_sample=False)")
    for flag in ("output_attentions", "output_hidden_states"):
        if kwargs.get(flag):
            raise NotImplementedError(f"generate({flag}=True) is not supported")
    values = {key: kwargs[key] if kwargs.get(key) is not None else getattr(config, key, None) for key in _FROM_CONFIG}
    if kwargs.get("max_new_tokens") is not None:
        values["max_length"] = kwargs["max_new_tokens"] + 1  # + the decoder start token
    for key, default in (("min_length", 0), ("num_beam_groups", 1), ("diversity_penalty", 0.0),
                         ("length_penalty", 1.0), ("no_repeat_ngram_size", 0), ("encoder_no_repeat_ngram_size", 0),
                         ("num_return_sequences", 1), ("early_stopping", False), ("output_scores", False),
                         ("return_dict_in_generate", False), ("use_cache", True), ("max_length", 20),
                         ("num_beams", 1)):
        if values[key] is None:
            values[key] = default
    if values["decoder_start_token_id"] is None:
        values["decoder_start_token_id"] = values["bos_token_id"]
    opts = GenerationOptions(**values)
    _check(opts)
    return opts


def _check(opts: GenerationOptions) -> None:
    if opts.early_stopping not in (True, False, "never"):
        raise ValueError(f"generate: early_stopping must be True, False or 'never', got {opts.early_stopping!r}")
    if opts.num_beams < 1 or opts.max_length < 2:
        raise ValueError(f"generate: need num_beams >= 1 and max_length >= 2, got {opts.num_beams}, {opts.max_length}")
    if opts.num_beams % opts.num_beam_groups:
        raise ValueError(f"generate: num_beams {opts.num_beams} is not divisible by num_beam_groups {opts.num_beam_groups}")
    if opts.num_beam_groups > 1 and opts.diversity_penalty == 0.0:
        raise ValueError("generate: num_beam_groups > 1 needs diversity_penalty > 0 (else the groups are "
                         "copies of each other)")
    if opts.num_return_sequences > opts.num_beams:
        raise ValueError(f"generate: num_return_sequences {opts.num_return_sequences} > num_beams {opts.num_beams}")
    if opts.num_beams == 1 and opts.num_return_sequences != 1:
        raise ValueError("generate: greedy decoding returns one sequence per input; set num_beams > 1")
    for key in ("decoder_start_token_id", "eos_token_id", "pad_token_id"):
        if getattr(opts, key) is None:
            raise ValueError(f"generate: {key} is not set in the call nor in the config")


@torch.inference_mode()
def generate(model, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None, **kwargs):
    """Summaries (or translations) of ``input_ids`` (B, S).

    Returns a LongTensor (B * num_return_sequences, L) padded with pad_token_id, or with
    ``return_dict_in_generate=True`` a :class:`GenerateOutput` (sequences, sequences_scores for beam
    search, scores per step when ``output_scores``)."""
    opts = _options(model.config, kwargs)
    if input_ids.dim() != 2:
        raise ValueError(f"generate: input_ids must be (batch, length), got shape {tuple(input_ids.shape)}")
    input_ids = input_ids.to(model.device)
    if attention_mask is None:
        attention_mask = (input_ids != opts.pad_token_id).long()
    attention_mask = attention_mask.to(model.device)
    was_training = model.training
    model.eval()
    try:
        encoder_hidden = model.model.encoder(input_ids, attention_mask)
        decoder = _Decoder(model, encoder_hidden, attention_mask, opts.use_cache)
        search = greedy_search if opts.num_beams == 1 else beam_search
        sequences, sequence_scores, scores = search(decoder, opts, input_ids)
    finally:
        model.train(was_training)
    if opts.return_dict_in_generate:
        return GenerateOutput(sequences, sequence_scores if opts.output_scores else None, scores)
    return sequences


__all__ = ["generate", "GenerateOutput", "GenerationOptions"]
