"""``model.generate``: greedy decoding, sampling, beam search and beam sampling written in this project
(no transformers import), with transformers' options and semantics.

Every option is resolved as transformers resolves it: a value passed to ``generate`` wins, ``None``
included (``forced_eos_token_id=None`` turns the forced EOS off even where the config sets one); an
option not passed comes from the model's config, and one the config does not set takes the default
of transformers' ``GenerationConfig`` (``top_k=50``, ``temperature=1.0``, ...). An unknown keyword,
or an option of transformers' ``generate`` this project does not implement, is an error naming it:
run_eval.py passes extra ``--key value`` pairs through, and a typo must not be ignored.

Sampling (``do_sample=True``) draws from ``generator=`` (a ``torch.Generator``) or, without one,
from torch's global generator: after ``torch.manual_seed(s)`` the tokens are those of transformers'
``generate(do_sample=True, ...)`` after the same seed.
"""
from __future__ import annotations

from typing import Optional

import torch

from bart.generation import logits_processors as lp
from bart.generation.search import GenerateOutput, GenerationOptions, _Decoder, beam_search, greedy_search


class GenerationOptionError(ValueError, TypeError):
    """An unknown, unsupported or invalid ``generate`` option (a ValueError; also a TypeError, which an
    unexpected keyword argument raises in Python)."""


_NOT_PASSED = object()  # tells "not passed" from an explicit None

# transformers' GenerationConfig defaults: used for an option neither passed nor set in the config
_DEFAULTS = {
    "max_length": 20, "max_new_tokens": None, "min_length": 0, "min_new_tokens": None,
    "num_beams": 1, "num_beam_groups": 1, "diversity_penalty": 0.0, "length_penalty": 1.0,
    "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "repetition_penalty": 1.0,
    "bad_words_ids": None, "early_stopping": False, "num_return_sequences": 1,
    "do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0,
    "decoder_start_token_id": None, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None,
    "output_scores": False, "return_dict_in_generate": False, "use_cache": True,
}
# an explicit None turns these off (the value that means "off")
_OFF_WHEN_NONE = {"min_length": 0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
                  "diversity_penalty": 0.0, "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 0,
                  "top_p": 1.0}
# flags: an explicit None is False, as in transformers
_FLAGS = ("do_sample", "output_scores", "return_dict_in_generate", "use_cache")
# options without an "off" value: an explicit None is an error, as it is in transformers
_REQUIRED = ("num_beams", "num_beam_groups", "length_penalty", "early_stopping", "num_return_sequences")
# accepted, no effect in one process; output_attentions / output_hidden_states only when false
_OTHER = {"synced_gpus", "output_attentions", "output_hidden_states", "generator"}
_ACCEPTED = set(_DEFAULTS) | _OTHER
# options of transformers' generate that are not implemented here
_NOT_IMPLEMENTED = {
    "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "penalty_alpha", "top_h", "dola_layers",
    "encoder_repetition_penalty", "force_words_ids", "constraints", "sequence_bias", "suppress_tokens",
    "begin_suppress_tokens", "exponential_decay_length_penalty", "renormalize_logits", "remove_invalid_values",
    "guidance_scale", "negative_prompt_ids", "negative_prompt_attention_mask", "logits_processor",
    "stopping_criteria", "prefix_allowed_tokens_fn", "streamer", "assistant_model", "prompt_lookup_num_tokens",
    "max_time", "stop_strings", "output_logits", "low_memory", "cache_implementation", "watermarking_config",
    "generation_config", "token_healing", "num_assistant_tokens", "max_matching_ngram_size", "decoder_input_ids",
    "forced_decoder_ids", "use_model_defaults", "custom_generate", "tokenizer", "inputs_embeds",
}


def _resolve(config, kwargs: dict) -> dict:
    values = {}
    for key, default in _DEFAULTS.items():
        value = kwargs.get(key, _NOT_PASSED)
        if value is _NOT_PASSED:  # not passed: the config's value, else transformers' default
            value = getattr(config, key, None)
            if value is None:
                value = default
        elif value is None:  # passed as None: it overrides the config
            if key in _OFF_WHEN_NONE:
                value = _OFF_WHEN_NONE[key]
            elif key in _FLAGS:
                value = False
            elif key in _REQUIRED:
                raise GenerationOptionError(f"generate: {key}=None is not a valid value (it overrides the "
                                            f"config's {getattr(config, key, None)!r}); pass a value or leave it out")
        values[key] = value
    return values


_INTEGERS = ("max_length", "max_new_tokens", "min_length", "min_new_tokens", "num_beams", "num_beam_groups",
             "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "num_return_sequences", "top_k",
             "decoder_start_token_id", "bos_token_id", "eos_token_id", "pad_token_id", "forced_bos_token_id",
             "forced_eos_token_id")
_NUMBERS = ("length_penalty", "diversity_penalty", "repetition_penalty", "temperature", "top_p")


def _check_types(values: dict) -> None:
    for key in _INTEGERS:
        value = values[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            hint = " (a list of EOS ids is not supported)" if key == "eos_token_id" and isinstance(value, (list, tuple)) else ""
            raise GenerationOptionError(f"generate: {key} must be an int, got {value!r}{hint}")
    for key in _NUMBERS:
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GenerationOptionError(f"generate: {key} must be a number, got {value!r}")


def _bad_words_ids(value, vocab_size: int):
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(
        isinstance(word, (list, tuple)) and len(word) > 0
        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in word)
        for word in value)
    if not ok:
        raise GenerationOptionError(f"generate: bad_words_ids must be a non-empty list of non-empty lists of token "
                                    f"ids in [0, {vocab_size}), got {value!r}")
    return [list(word) for word in value]


def _options(config, kwargs: dict) -> GenerationOptions:
    not_implemented = sorted(set(kwargs) & _NOT_IMPLEMENTED)
    if not_implemented:
        raise GenerationOptionError(f"generate: option(s) {not_implemented} of transformers' generate are not "
                                    "implemented in this project")
    unknown = sorted(set(kwargs) - _ACCEPTED)
    if unknown:
        raise GenerationOptionError(f"generate() got unknown argument(s) {unknown}; accepted: {sorted(_ACCEPTED)}")
    for flag in ("output_attentions", "output_hidden_states"):
        if kwargs.get(flag):
            raise GenerationOptionError(f"generate({flag}=True) is not supported")
    generator = kwargs.get("generator")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise GenerationOptionError(f"generate: generator must be a torch.Generator, got {type(generator).__name__}")
    values = _resolve(config, kwargs)
    if values["max_new_tokens"] is not None:  # max_new_tokens wins over max_length, as in transformers
        if isinstance(values["max_new_tokens"], int) and values["max_new_tokens"] < 1:
            raise GenerationOptionError(f"generate: max_new_tokens must be >= 1, got {values['max_new_tokens']}")
    elif values["max_length"] is None:
        raise GenerationOptionError("generate: max_length=None needs max_new_tokens")
    _check_types(values)
    if values["max_new_tokens"] is not None:
        values["max_length"] = values["max_new_tokens"] + 1  # + the decoder start token
    elif "max_length" not in kwargs and values["max_length"] == _DEFAULTS["max_length"]:
        # transformers: the untouched default of 20 means 20 new tokens (capped by the positions)
        values["max_length"] = min(values["max_length"] + 1, getattr(config, "max_position_embeddings", 21))
    if values["min_new_tokens"] is not None:  # min_new_tokens wins over min_length
        if values["min_new_tokens"] < 0:
            raise GenerationOptionError(f"generate: min_new_tokens must be >= 0, got {values['min_new_tokens']}")
        values["min_length"] = values["min_new_tokens"] + 1
    if values["decoder_start_token_id"] is None:
        values["decoder_start_token_id"] = values["bos_token_id"]
    if values["pad_token_id"] is None:  # transformers pads with EOS then
        values["pad_token_id"] = values["eos_token_id"]
    values["bad_words_ids"] = _bad_words_ids(values["bad_words_ids"], config.vocab_size)
    values["do_sample"], values["use_cache"] = bool(values["do_sample"]), bool(values["use_cache"])
    values["output_scores"], values["return_dict_in_generate"] = (bool(values["output_scores"]),
                                                                  bool(values["return_dict_in_generate"]))
    del values["max_new_tokens"], values["min_new_tokens"]
    opts = GenerationOptions(**values, generator=generator)
    _check(opts)
    return opts


def _check(opts: GenerationOptions) -> None:
    if opts.early_stopping not in (True, False, "never"):
        raise GenerationOptionError(f"generate: early_stopping must be True, False or 'never', got {opts.early_stopping!r}")
    if opts.num_beams < 1 or opts.max_length < 2:
        raise GenerationOptionError(f"generate: need num_beams >= 1 and max_length >= 2, got {opts.num_beams}, "
                                    f"{opts.max_length}")
    if opts.num_beam_groups < 1 or opts.num_beams % opts.num_beam_groups:
        raise GenerationOptionError(f"generate: num_beams {opts.num_beams} is not divisible by num_beam_groups "
                                    f"{opts.num_beam_groups}")
    if opts.num_beam_groups > 1 and opts.diversity_penalty == 0.0:
        raise GenerationOptionError("generate: num_beam_groups > 1 needs diversity_penalty > 0 (else the groups are "
                                    "copies of each other)")
    if opts.num_beam_groups > 1 and opts.do_sample:
        raise GenerationOptionError("generate: do_sample=True with num_beam_groups > 1 (diverse beam search) is not "
                                    "supported, as in transformers")
    if opts.num_return_sequences < 1:
        raise GenerationOptionError(f"generate: num_return_sequences must be >= 1, got {opts.num_return_sequences}")
    if opts.num_beams > 1 and opts.num_return_sequences > opts.num_beams:
        raise GenerationOptionError(f"generate: num_return_sequences {opts.num_return_sequences} > num_beams "
                                    f"{opts.num_beams}")
    if opts.num_beams == 1 and not opts.do_sample and opts.num_return_sequences != 1:
        raise GenerationOptionError("generate: greedy decoding returns one sequence per input; set num_beams > 1 "
                                    "or do_sample=True")
    if opts.min_length < 0 or opts.no_repeat_ngram_size < 0 or opts.encoder_no_repeat_ngram_size < 0:
        raise GenerationOptionError("generate: min_length, no_repeat_ngram_size and encoder_no_repeat_ngram_size "
                                    "must be >= 0")
    if opts.repetition_penalty <= 0:
        raise GenerationOptionError(f"generate: repetition_penalty must be > 0, got {opts.repetition_penalty}")
    if opts.do_sample:  # the warpers exist only when sampling (transformers ignores them otherwise)
        if opts.temperature <= 0:
            raise GenerationOptionError(f"generate: temperature must be > 0 with do_sample=True, got "
                                        f"{opts.temperature} (for greedy decoding use do_sample=False)")
        if opts.top_k < 0:
            raise GenerationOptionError(f"generate: top_k must be >= 0, got {opts.top_k}")
        if not 0.0 <= opts.top_p <= 1.0:
            raise GenerationOptionError(f"generate: top_p must be in [0, 1], got {opts.top_p}")
    for key in ("decoder_start_token_id", "pad_token_id"):
        if getattr(opts, key) is None:
            raise GenerationOptionError(f"generate: {key} is not set in the call nor in the config"
                                        + (" (nor bos_token_id)" if key == "decoder_start_token_id" else
                                           " (nor eos_token_id)"))


def _attention_mask(input_ids: torch.Tensor, opts: GenerationOptions) -> torch.Tensor:
    """transformers' rule: pad positions are masked when pad occurs in the input and is not EOS."""
    pad_in_input = bool((input_ids == opts.pad_token_id).any())
    if pad_in_input and opts.pad_token_id != opts.eos_token_id:
        return (input_ids != opts.pad_token_id).long()
    return torch.ones_like(input_ids)


@torch.inference_mode()
def generate(model, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None, **kwargs):
    """Summaries (or translations) of ``input_ids`` (B, S).

    Greedy decoding (``num_beams=1``), beam search (``num_beams > 1``), diverse beam search
    (``num_beam_groups > 1``), multinomial sampling (``do_sample=True``) and beam sampling
    (``do_sample=True, num_beams > 1``). Returns a LongTensor (B * num_return_sequences, L) padded
    with pad_token_id, or with ``return_dict_in_generate=True`` a :class:`GenerateOutput`
    (sequences, sequences_scores for beam search, scores per step when ``output_scores``)."""
    opts = _options(model.config, kwargs)
    if input_ids.dim() != 2:
        raise ValueError(f"generate: input_ids must be (batch, length), got shape {tuple(input_ids.shape)}")
    input_ids = input_ids.to(model.device)
    if attention_mask is None:
        attention_mask = _attention_mask(input_ids, opts)
    attention_mask = attention_mask.to(model.device)
    if opts.bad_words_ids is not None:
        opts.bad_words = lp.BadWords(opts.bad_words_ids, opts.eos_token_id, model.device)
    was_training = model.training
    model.eval()
    try:
        encoder_hidden = model.model.encoder(input_ids, attention_mask)
        rows_per_source = opts.num_beams if opts.num_beams > 1 else (opts.num_return_sequences if opts.do_sample else 1)
        decoder = _Decoder(model, encoder_hidden, attention_mask, opts.use_cache, rows_per_source, opts.max_length)
        search = greedy_search if opts.num_beams == 1 else beam_search
        sequences, sequence_scores, scores = search(decoder, opts, input_ids)
    finally:
        model.train(was_training)
    if opts.return_dict_in_generate:
        return GenerateOutput(sequences, sequence_scores if opts.output_scores else None, scores)
    return sequences


__all__ = ["generate", "GenerateOutput", "GenerationOptions", "GenerationOptionError"]
