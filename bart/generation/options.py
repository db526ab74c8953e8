"""The options of ``generate``: how each is resolved (call > ``generation_config=`` > the model's config >
transformers' defaults), checked, and handed to the searches as one :class:`GenerationOptions`.

Every option is resolved as transformers resolves it: a value passed to ``generate`` wins, ``None``
included (``forced_eos_token_id=None`` turns the forced EOS off even where the config sets one); then
a value a passed ``generation_config=`` sets (one that differs from ``GenerationConfig()``'s); then
the model's config (from config.json and generation_config.json), and an option nothing sets takes
the default of transformers' ``GenerationConfig`` (``top_k=50``, ``temperature=1.0``, ...). An
option of transformers' generate that is not implemented here is refused whether it is passed, in
the ``generation_config`` passed, or in the model's config. An unknown keyword,
or an option of transformers' ``generate`` this project does not implement, is an error naming it:
run_eval.py passes extra ``--key value`` pairs through, and a typo must not be ignored.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import torch

from bart.generation import logits_processors as lp


@dataclass
class GenerationOptions:
    max_length: int
    min_length: int
    num_beams: int
    num_beam_groups: int
    diversity_penalty: float
    length_penalty: float
    no_repeat_ngram_size: int
    encoder_no_repeat_ngram_size: int
    early_stopping: object  # True, False or "never"
    num_return_sequences: int
    decoder_start_token_id: int
    bos_token_id: Optional[int]
    eos_token_id: Optional[int]  # None: no hypothesis ends before max_length
    pad_token_id: int
    forced_bos_token_id: Optional[int]
    forced_eos_token_id: Optional[int]
    output_scores: bool
    return_dict_in_generate: bool
    use_cache: bool
    repetition_penalty: float = 1.0
    bad_words_ids: Optional[list] = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    sequence_bias: Optional[dict] = None  # {(token ids): bias}
    encoder_repetition_penalty: float = 1.0
    remove_invalid_values: bool = False
    exponential_decay_length_penalty: Optional[tuple] = None  # (start_index, decay_factor)
    suppress_tokens: Optional[list] = None
    begin_suppress_tokens: Optional[list] = None
    renormalize_logits: bool = False
    min_p: Optional[float] = None
    typical_p: float = 1.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    max_time: Optional[float] = None  # seconds from the call; the step that passes it is the last
    logits_processor: tuple = ()  # the caller's processors: (input_ids, scores) -> scores, after the built-in ones
    stopping_criteria: tuple = ()  # the caller's criteria: (input_ids, scores) -> bool per row, or one bool
    generator: Optional[torch.Generator] = None  # for sampling; None: torch's global generator
    bad_words: Optional[lp.BadWords] = None  # bad_words_ids prepared on the device
    biases: Optional[lp.SequenceBias] = None  # sequence_bias prepared on the device
    suppress_tokens_tensor: Optional[torch.Tensor] = None
    begin_suppress_tokens_tensor: Optional[torch.Tensor] = None
    start_time: float = 0.0  # time.monotonic() when generate was called
    prompt: Optional[torch.Tensor] = None  # the decoder's first tokens (B, P); prepare() makes the start token's

    def prepare(self, device, vocab_size: int, sources: int) -> None:
        """The tensors the search and the processors use, made once per call on the model's device for
        ``sources`` inputs; without decoder_input_ids the prompt is the decoder start token."""
        if self.prompt is None:
            self.prompt = torch.full((sources, 1), self.decoder_start_token_id, dtype=torch.long, device=device)
        self.prompt = self.prompt.to(device)
        if self.bad_words_ids is not None:
            self.bad_words = lp.BadWords(self.bad_words_ids, self.eos_token_id, device)
        if self.sequence_bias is not None:
            self.biases = lp.SequenceBias(self.sequence_bias, vocab_size, device)
        if self.suppress_tokens is not None:
            self.suppress_tokens_tensor = torch.tensor(self.suppress_tokens, dtype=torch.long, device=device)
        if self.begin_suppress_tokens is not None:
            self.begin_suppress_tokens_tensor = torch.tensor(self.begin_suppress_tokens, dtype=torch.long,
                                                             device=device)

    @property
    def prompt_length(self) -> int:
        return self.prompt.shape[1]

    def prompt_rows(self, per_source: int) -> torch.Tensor:
        """(B * per_source, P): each source's first decoder tokens, once per hypothesis."""
        return self.prompt.repeat_interleave(per_source, dim=0)

    def time_is_up(self) -> bool:
        return self.max_time is not None and time.monotonic() - self.start_time > self.max_time

    def custom_stop(self, tokens: torch.Tensor, scores: Optional[tuple]) -> Optional[torch.Tensor]:
        """The caller's stopping criteria on ``tokens`` (N, L): (N,) bool, True where a row stops."""
        if not self.stopping_criteria:
            return None
        stop = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
        for criterion in self.stopping_criteria:
            result = criterion(tokens, scores)
            stop |= torch.as_tensor(result, dtype=torch.bool, device=tokens.device).expand_as(stop)
        return stop


@dataclass
class GenerateOutput:
    """What ``return_dict_in_generate=True`` returns (field names as in transformers)."""
    sequences: torch.Tensor
    sequences_scores: Optional[torch.Tensor] = None
    scores: Optional[tuple] = None

    def __getitem__(self, key: str):
        return getattr(self, key)


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
    "sequence_bias": None, "encoder_repetition_penalty": 1.0, "remove_invalid_values": False,
    "exponential_decay_length_penalty": None, "suppress_tokens": None, "begin_suppress_tokens": None,
    "renormalize_logits": False, "min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "max_time": None,
}
# an explicit None turns these off (the value that means "off")
_OFF_WHEN_NONE = {"min_length": 0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
                  "diversity_penalty": 0.0, "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 0,
                  "top_p": 1.0, "encoder_repetition_penalty": 1.0, "typical_p": 1.0, "epsilon_cutoff": 0.0,
                  "eta_cutoff": 0.0}
# flags: an explicit None is False, as in transformers
_FLAGS = ("do_sample", "output_scores", "return_dict_in_generate", "use_cache", "remove_invalid_values",
          "renormalize_logits")
# options without an "off" value: an explicit None is an error, as it is in transformers
_REQUIRED = ("num_beams", "num_beam_groups", "length_penalty", "early_stopping", "num_return_sequences")
# accepted, no effect in one process; output_attentions / output_hidden_states only when false
_OTHER = {"synced_gpus", "output_attentions", "output_hidden_states", "generator", "generation_config",
          "logits_processor", "stopping_criteria", "decoder_input_ids"}
_ACCEPTED = set(_DEFAULTS) | _OTHER
# options of transformers' generate that are not implemented here
_NOT_IMPLEMENTED = {
    "penalty_alpha", "top_h", "dola_layers", "force_words_ids", "constraints", "guidance_scale",
    "negative_prompt_ids", "negative_prompt_attention_mask", "prefix_allowed_tokens_fn", "streamer",
    "assistant_model", "prompt_lookup_num_tokens", "stop_strings", "output_logits", "low_memory",
    "cache_implementation", "watermarking_config",
    "token_healing", "num_assistant_tokens", "max_matching_ngram_size",
    "forced_decoder_ids", "use_model_defaults", "custom_generate", "tokenizer", "inputs_embeds",
}
# the not-implemented options whose GenerationConfig default is neither None nor False
_NOT_IMPLEMENTED_DEFAULTS = {"num_assistant_tokens": 20}
# every option generate() reads from the model's config (and from a generation_config.json), with the
# default of transformers' GenerationConfig
OPTION_DEFAULTS = dict(_DEFAULTS)


def set_unimplemented(values: Mapping) -> dict:
    """The entries of ``values`` (a config or generation_config.json) that set an option of
    transformers' generate this project does not implement to something other than its default."""
    return {k: v for k, v in values.items() if k in _NOT_IMPLEMENTED and v is not None and v is not False
            and v != _NOT_IMPLEMENTED_DEFAULTS.get(k)}


# keys of a GenerationConfig that describe it rather than set an option
_METADATA = {"transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash"}


def _generation_config_values(generation_config) -> dict:
    """The options a ``generation_config=`` argument sets: a transformers ``GenerationConfig`` (its
    values that differ from ``GenerationConfig()``'s, as transformers takes them) or a mapping (its
    entries that differ from those defaults). transformers' rule: these beat the model's config, and
    the keyword arguments of the call beat them."""
    if generation_config is None:
        return {}
    if isinstance(generation_config, (str, os.PathLike)):  # run_eval.py --generation_config PATH
        path = os.fspath(generation_config)
        if os.path.isdir(path):
            path = os.path.join(path, "generation_config.json")
        if not os.path.isfile(path):
            raise GenerationOptionError(f"generate: generation_config {os.fspath(generation_config)!r} is not a "
                                        f"generation_config.json file nor a folder with one")
        try:
            with open(path) as f:
                generation_config = json.load(f)
        except (OSError, ValueError) as err:
            raise GenerationOptionError(f"generate: generation_config {path}: not readable JSON ({err})") from None
        if not isinstance(generation_config, Mapping):
            raise GenerationOptionError(f"generate: generation_config {path}: a JSON object is needed")
    if hasattr(generation_config, "to_diff_dict"):
        values = dict(generation_config.to_diff_dict())
    elif isinstance(generation_config, Mapping):
        values = {k: v for k, v in generation_config.items() if k not in _DEFAULTS or v != _DEFAULTS[k]}
    else:
        raise GenerationOptionError(f"generate: generation_config must be a transformers GenerationConfig, a dict or "
                                    f"the path of a generation_config.json, got {type(generation_config).__name__}")
    values = {k: v for k, v in values.items() if k not in _METADATA}
    if values.get("temperature") == 0.0:  # transformers: temperature 0 means greedy
        values["do_sample"] = False
    return values


def _resolve(config, kwargs: dict, passed_config: dict) -> dict:
    values = {}
    for key, default in _DEFAULTS.items():
        value = kwargs.get(key, passed_config.get(key, _NOT_PASSED))
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
_NUMBERS = ("length_penalty", "diversity_penalty", "repetition_penalty", "temperature", "top_p",
            "encoder_repetition_penalty", "typical_p", "epsilon_cutoff", "eta_cutoff")


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
    for key in ("min_p", "max_time"):
        value = values[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise GenerationOptionError(f"generate: {key} must be a number or None, got {value!r}")


def _are_token_ids(value, vocab_size: int, non_empty: bool = True) -> bool:
    """A list or tuple of ints in [0, vocab_size) (bools are not ids), non-empty unless told."""
    return isinstance(value, (list, tuple)) and (len(value) > 0 or not non_empty) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in value)


def _bad_words_ids(value, vocab_size: int):
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(_are_token_ids(word, vocab_size) for word in value)
    if not ok:
        raise GenerationOptionError(f"generate: bad_words_ids must be a non-empty list of non-empty lists of token "
                                    f"ids in [0, {vocab_size}), got {value!r}")
    return [list(word) for word in value]


def _token_list(key: str, value, vocab_size: int) -> Optional[list]:
    if value is None:
        return None
    if not _are_token_ids(value, vocab_size, non_empty=False):
        raise GenerationOptionError(f"generate: {key} must be a list of token ids in [0, {vocab_size}), got {value!r}")
    return list(value)


def _sequence_bias(value, vocab_size: int) -> Optional[dict]:
    """transformers' two forms, {(ids...): bias} or [[[ids...], bias], ...], as one dict in their order."""
    if value is None:
        return None
    pairs = list(value.items()) if isinstance(value, Mapping) else value
    ok = isinstance(pairs, (list, tuple)) and len(pairs) > 0 and all(
        isinstance(pair, (list, tuple)) and len(pair) == 2 and _are_token_ids(pair[0], vocab_size)
        and isinstance(pair[1], (int, float)) and not isinstance(pair[1], bool) for pair in pairs)
    if not ok:
        raise GenerationOptionError(f"generate: sequence_bias must map non-empty sequences of token ids in "
                                    f"[0, {vocab_size}) to a bias ({{(5, 6): -2.0}} or [[[5, 6], -2.0]]), "
                                    f"got {value!r}")
    return {tuple(ids): float(bias) for ids, bias in pairs}


def _decoder_prompt(value, start: Optional[int], vocab_size: int) -> Optional[torch.Tensor]:
    """``decoder_input_ids`` (B, P) as the decoder's first tokens; the decoder start token is put in
    front when no row begins with it (transformers' rule)."""
    if value is None:
        return None
    if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[1] == 0 or value.is_floating_point() \
            or bool(((value < 0) | (value >= vocab_size)).any()):
        raise GenerationOptionError(f"generate: decoder_input_ids must be a (batch, length) tensor of token ids in "
                                    f"[0, {vocab_size}), got {value!r}")
    value = value.long()
    if start is not None and bool((value[:, 0] != start).all()):
        value = torch.cat([torch.full_like(value[:, :1], start), value], dim=1)
    return value


def _decay(value) -> Optional[tuple]:
    if value is None:
        return None
    ok = (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], int)
          and not isinstance(value[0], bool) and value[0] >= 0 and isinstance(value[1], (int, float))
          and not isinstance(value[1], bool))
    if not ok:
        raise GenerationOptionError(f"generate: exponential_decay_length_penalty must be (start_index, decay_factor) "
                                    f"with start_index >= 0, got {value!r}")
    return int(value[0]), float(value[1])


def _options(config, kwargs: dict) -> GenerationOptions:
    passed_config = _generation_config_values(kwargs.get("generation_config"))
    for source, names in (("", set(kwargs)), (" (in generation_config)", set(passed_config))):
        not_implemented = sorted(names & _NOT_IMPLEMENTED)
        if not_implemented:
            raise GenerationOptionError(f"generate: option(s) {not_implemented}{source} of transformers' generate are "
                                        "not implemented in this project")
        unknown = sorted(names - _ACCEPTED)
        if unknown:
            raise GenerationOptionError(f"generate() got unknown argument(s) {unknown}{source}; accepted: "
                                        f"{sorted(_ACCEPTED)}")
    in_config = sorted(set(set_unimplemented(vars(config))) - set(passed_config))
    if in_config:
        key = in_config[0]
        raise GenerationOptionError(f"generate: the model's config sets {key}={getattr(config, key)!r} (from its "
                                    f"generation_config.json or config.json), an option of transformers' generate "
                                    f"this project does not implement, so its outputs would differ; remove it there "
                                    f"or set model.config.{key} = None")
    for flag in ("output_attentions", "output_hidden_states"):
        if kwargs.get(flag, passed_config.get(flag)):
            raise GenerationOptionError(f"generate({flag}=True) is not supported")
    generator = kwargs.get("generator")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise GenerationOptionError(f"generate: generator must be a torch.Generator, got {type(generator).__name__}")
    custom = {}
    for key in ("logits_processor", "stopping_criteria"):
        value = kwargs.get(key) or ()
        if not isinstance(value, (list, tuple)) or not all(callable(item) for item in value):
            kind = "LogitsProcessorList" if key == "logits_processor" else "StoppingCriteriaList"
            raise GenerationOptionError(f"generate: {key} must be a list of callables (input_ids, scores) -> ..., "
                                        f"as transformers' {kind}, got {value!r}")
        custom[key] = tuple(value)
    values = _resolve(config, kwargs, passed_config)
    if values["max_new_tokens"] is not None:  # max_new_tokens wins over max_length, as in transformers
        if isinstance(values["max_new_tokens"], int) and values["max_new_tokens"] < 1:
            raise GenerationOptionError(f"generate: max_new_tokens must be >= 1, got {values['max_new_tokens']}")
    elif values["max_length"] is None:
        raise GenerationOptionError("generate: max_length=None needs max_new_tokens")
    _check_types(values)
    if values["decoder_start_token_id"] is None:
        values["decoder_start_token_id"] = values["bos_token_id"]
    prompt = _decoder_prompt(kwargs.get("decoder_input_ids"), values["decoder_start_token_id"], config.vocab_size)
    length = 1 if prompt is None else prompt.shape[1]  # the decoder's tokens before the first generated one
    if values["max_new_tokens"] is not None:
        values["max_length"] = values["max_new_tokens"] + length
    elif "max_length" not in kwargs and values["max_length"] == _DEFAULTS["max_length"]:
        # transformers: the untouched default of 20 means 20 new tokens (capped by the positions)
        values["max_length"] = min(values["max_length"] + length,
                                   getattr(config, "max_position_embeddings", 20 + length))
    if values["min_new_tokens"] is not None:  # min_new_tokens wins over min_length
        if values["min_new_tokens"] < 0:
            raise GenerationOptionError(f"generate: min_new_tokens must be >= 0, got {values['min_new_tokens']}")
        values["min_length"] = values["min_new_tokens"] + length
    if isinstance(values["max_length"], int) and length >= values["max_length"]:
        raise GenerationOptionError(f"generate: decoder_input_ids have {length} tokens (with the decoder start token), "
                                    f"max_length is {values['max_length']}: nothing is left to generate; raise "
                                    f"max_length or use max_new_tokens")
    if values["pad_token_id"] is None:  # transformers pads with EOS then
        values["pad_token_id"] = values["eos_token_id"]
    values["bad_words_ids"] = _bad_words_ids(values["bad_words_ids"], config.vocab_size)
    values["sequence_bias"] = _sequence_bias(values["sequence_bias"], config.vocab_size)
    values["suppress_tokens"] = _token_list("suppress_tokens", values["suppress_tokens"], config.vocab_size)
    values["begin_suppress_tokens"] = _token_list("begin_suppress_tokens", values["begin_suppress_tokens"],
                                                  config.vocab_size)
    values["exponential_decay_length_penalty"] = _decay(values["exponential_decay_length_penalty"])
    values["remove_invalid_values"] = bool(values["remove_invalid_values"])
    values["renormalize_logits"] = bool(values["renormalize_logits"])
    values["do_sample"], values["use_cache"] = bool(values["do_sample"]), bool(values["use_cache"])
    values["output_scores"], values["return_dict_in_generate"] = (bool(values["output_scores"]),
                                                                  bool(values["return_dict_in_generate"]))
    del values["max_new_tokens"], values["min_new_tokens"]
    opts = GenerationOptions(**values, generator=generator, **custom, prompt=prompt)
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
    if opts.encoder_repetition_penalty <= 0:
        raise GenerationOptionError(f"generate: encoder_repetition_penalty must be > 0, got "
                                    f"{opts.encoder_repetition_penalty}")
    if opts.encoder_repetition_penalty != 1.0 and (opts.num_beams > 1 or opts.num_return_sequences > 1):
        raise GenerationOptionError("generate: encoder_repetition_penalty works with one hypothesis per source "
                                    "(num_beams=1, num_return_sequences=1): transformers applies it to the first "
                                    "batch-size rows of the beams, not to each source's hypotheses")
    if opts.exponential_decay_length_penalty is not None and opts.eos_token_id is None:
        raise GenerationOptionError("generate: exponential_decay_length_penalty needs an eos_token_id")
    if opts.max_time is not None and opts.max_time < 0:
        raise GenerationOptionError(f"generate: max_time must be >= 0 seconds, got {opts.max_time}")
    if opts.do_sample:  # the warpers exist only when sampling (transformers ignores them otherwise)
        if opts.temperature <= 0:
            raise GenerationOptionError(f"generate: temperature must be > 0 with do_sample=True, got "
                                        f"{opts.temperature} (for greedy decoding use do_sample=False)")
        if opts.top_k < 0:
            raise GenerationOptionError(f"generate: top_k must be >= 0, got {opts.top_k}")
        if not 0.0 <= opts.top_p <= 1.0:
            raise GenerationOptionError(f"generate: top_p must be in [0, 1], got {opts.top_p}")
        if opts.min_p is not None and not 0.0 <= opts.min_p <= 1.0:
            raise GenerationOptionError(f"generate: min_p must be in [0, 1], got {opts.min_p}")
        if not 0.0 < opts.typical_p <= 1.0:
            raise GenerationOptionError(f"generate: typical_p must be in (0, 1] (1: off), got {opts.typical_p}")
        for key in ("epsilon_cutoff", "eta_cutoff"):
            if not 0.0 <= getattr(opts, key) < 1.0:
                raise GenerationOptionError(f"generate: {key} must be in [0, 1) (0: off), got {getattr(opts, key)}")
    for key in ("decoder_start_token_id", "pad_token_id"):
        if getattr(opts, key) is None:
            raise GenerationOptionError(f"generate: {key} is not set in the call nor in the config"
                                        + (" (nor bos_token_id)" if key == "decoder_start_token_id" else
                                           " (nor eos_token_id)"))
