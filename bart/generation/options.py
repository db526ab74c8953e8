"""The options of ``generate``, one record per option in one table (:data:`OPTIONS`): its name, transformers'
default, its kind of value, what an explicit ``None`` means, and its check. Resolution, the checks, and
generation_config.json read and written are here, beside the table; :mod:`bart.configuration` (the
classic keys and their defaults) and :mod:`bart.modeling.weights` (HF folders) take what they need from it.

Every option is resolved as transformers resolves it: a value passed to ``generate`` wins, ``None``
included (``forced_eos_token_id=None`` turns the forced EOS off even where the config sets one); then
a value a passed ``generation_config=`` sets (one that differs from transformers 4.57's
``GenerationConfig()`` defaults, whichever transformers is installed: 5.x's defaults are None); then
the model's config (from config.json and generation_config.json), and an option nothing sets takes
the default of transformers 4.57's ``GenerationConfig`` (``top_k=50``, ``temperature=1.0``, ...). An
option of transformers' generate that is not implemented here (:data:`NOT_IMPLEMENTED`) is refused
whether it is passed, in the ``generation_config`` passed, or in the model's config. An unknown keyword
is an error naming it: run_eval.py passes extra ``--key value`` pairs through, and a typo must not be
ignored.

To add an option: its row in :data:`OPTIONS`, its processor (:mod:`bart.generation.logits_processors`)
and its line in the processor order (:func:`bart.generation.processing.logits_processors`).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from bart.files.checkpoint_io import CheckpointError, read_json_object


class GenerationOptionError(ValueError, TypeError):
    """An unknown, unsupported or invalid ``generate`` option (a ValueError; also a TypeError, which an
    unexpected keyword argument raises in Python)."""


REQUIRED = object()  # ``Option.off`` of an option without an "off" value: an explicit None is an error


@dataclass(frozen=True)
class Kind:
    """A kind of option value: the Python types a config file may hold for it, and the check (and
    conversion) of a resolved value, before any option is derived from another."""
    types: tuple | None
    convert: Callable[[str, Any], Any]


def _as_is(key: str, value):
    return value


def _int(key: str, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        listed = key == "eos_token_id" and isinstance(value, (list, tuple))
        hint = " (a list of EOS ids is not supported)" if listed else ""
        raise GenerationOptionError(f"generate: {key} must be an int, got {value!r}{hint}")
    return value


def _number(key: str, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise GenerationOptionError(f"generate: {key} must be a number{' or None' if key in _NONE_IS_OFF else ''}, "
                                    f"got {value!r}")
    return value


KINDS = {
    "int": Kind((int,), _int),
    "token id": Kind((int,), _int),
    "number": Kind((int, float), _number),
    "flag": Kind((bool,), lambda key, value: bool(value)),  # an explicit None is False, as in transformers
    "choice": Kind((bool, str), _as_is),  # the option's check says which values
    "structure": Kind(None, _as_is),  # lists, pairs, maps: the option's check reads and normalizes them
}


@dataclass(frozen=True)
class Option:
    """One option of ``generate``.

    ``default``: transformers' ``GenerationConfig()`` value. ``kind``: a key of :data:`KINDS`. ``off``: what
    an explicit ``None`` means (a value; None: None itself, the option is then unset; :data:`REQUIRED`: an
    error, as in transformers). ``check``: ``(key, value, values, vocab_size) -> value``, run on the
    resolved values (``values``) after the lengths and fallback ids are derived; raises
    :class:`GenerationOptionError` naming the option. ``classic``: a key of transformers' PretrainedConfig,
    which :class:`~bart.configuration.BartConfig` holds with this default."""
    name: str
    default: Any
    kind: str
    off: Any = None
    check: Callable | None = None
    classic: bool = False


def _at_least(bound):
    def check(key, value, values, vocab_size):
        if value is not None and value < bound:
            raise GenerationOptionError(f"generate: {key} must be >= {bound}, got {value}")
        return value
    return check


def _above(bound):
    def check(key, value, values, vocab_size):
        if value <= bound:
            raise GenerationOptionError(f"generate: {key} must be > {bound}, got {value}")
        return value
    return check


def _within(low, high, low_open=False, high_open=False, note=""):
    def check(key, value, values, vocab_size):
        if value is not None and not ((low < value if low_open else low <= value)
                                      and (value < high if high_open else value <= high)):
            interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
            raise GenerationOptionError(f"generate: {key} must be in {interval}{note}, got {value}")
        return value
    return check


def _sampling(check):
    """A warper's check: the warpers exist only when sampling (transformers ignores them otherwise)."""
    def when_sampling(key, value, values, vocab_size):
        return check(key, value, values, vocab_size) if values["do_sample"] else value
    return when_sampling


def _temperature(key, value, values, vocab_size):
    if value <= 0:
        raise GenerationOptionError(f"generate: temperature must be > 0 with do_sample=True, got {value} (for greedy "
                                    f"decoding use do_sample=False)")
    return value


def _one_of(*choices):
    def check(key, value, values, vocab_size):
        if value not in choices:
            raise GenerationOptionError(f"generate: {key} must be {', '.join(map(repr, choices))}, got {value!r}")
        return value
    return check


def _are_token_ids(value, vocab_size: int, non_empty: bool = True) -> bool:
    """A list or tuple of ints in [0, vocab_size) (bools are not ids), non-empty unless told."""
    return isinstance(value, (list, tuple)) and (len(value) > 0 or not non_empty) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in value)


def _bad_words_ids(key, value, values, vocab_size):
    if value is None:
        return None
    if not (isinstance(value, (list, tuple)) and len(value) > 0 and all(_are_token_ids(w, vocab_size) for w in value)):
        raise GenerationOptionError(f"generate: bad_words_ids must be a non-empty list of non-empty lists of token "
                                    f"ids in [0, {vocab_size}), got {value!r}")
    return [list(word) for word in value]


def _token_list(key, value, values, vocab_size):
    if value is None:
        return None
    if not _are_token_ids(value, vocab_size, non_empty=False):
        raise GenerationOptionError(f"generate: {key} must be a list of token ids in [0, {vocab_size}), got {value!r}")
    return list(value)


def _sequence_bias(key, value, values, vocab_size):
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


def _decay(key, value, values, vocab_size):
    if value is None:
        return None
    ok = (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], int)
          and not isinstance(value[0], bool) and value[0] >= 0 and isinstance(value[1], (int, float))
          and not isinstance(value[1], bool))
    if not ok:
        raise GenerationOptionError(f"generate: exponential_decay_length_penalty must be (start_index, decay_factor) "
                                    f"with start_index >= 0, got {value!r}")
    if values["eos_token_id"] is None:
        raise GenerationOptionError("generate: exponential_decay_length_penalty needs an eos_token_id")
    return int(value[0]), float(value[1])


def _set_by_now(fallback):
    def check(key, value, values, vocab_size):
        if value is None:
            raise GenerationOptionError(f"generate: {key} is not set in the call nor in the config (nor {fallback})")
        return value
    return check


_CUTOFF = _within(0.0, 1.0, high_open=True, note=" (0: off)")

# Every option generate takes, in transformers' GenerationConfig order. The checks run in this order:
# max_new_tokens/min_new_tokens before the max_length/min_length they set.
OPTIONS = (
    # lengths
    Option("max_new_tokens", None, "int", check=_at_least(1)),
    Option("max_length", 20, "int", check=_at_least(2), classic=True),
    Option("min_new_tokens", None, "int", check=_at_least(0)),
    Option("min_length", 0, "int", off=0, check=_at_least(0), classic=True),
    Option("early_stopping", False, "choice", off=REQUIRED, check=_one_of(True, False, "never"), classic=True),
    Option("max_time", None, "number", check=_at_least(0)),  # seconds from the call; the step passing it is the last
    # the search
    Option("do_sample", False, "flag"),
    Option("num_beams", 1, "int", off=REQUIRED, check=_at_least(1), classic=True),
    Option("num_beam_groups", 1, "int", off=REQUIRED, check=_at_least(1), classic=True),
    Option("use_cache", True, "flag"),
    # the warpers (sampling) and the processors
    Option("temperature", 1.0, "number", off=1.0, check=_sampling(_temperature)),
    Option("top_k", 50, "int", off=0, check=_sampling(_at_least(0))),
    Option("top_p", 1.0, "number", off=1.0, check=_sampling(_within(0.0, 1.0))),
    Option("min_p", None, "number", check=_sampling(_within(0.0, 1.0))),
    Option("typical_p", 1.0, "number", off=1.0, check=_sampling(_within(0.0, 1.0, low_open=True, note=" (1: off)"))),
    Option("epsilon_cutoff", 0.0, "number", off=0.0, check=_sampling(_CUTOFF)),
    Option("eta_cutoff", 0.0, "number", off=0.0, check=_sampling(_CUTOFF)),
    Option("diversity_penalty", 0.0, "number", off=0.0, classic=True),
    Option("repetition_penalty", 1.0, "number", off=1.0, check=_above(0)),
    Option("encoder_repetition_penalty", 1.0, "number", off=1.0, check=_above(0)),
    Option("length_penalty", 1.0, "number", off=REQUIRED, classic=True),
    Option("no_repeat_ngram_size", 0, "int", off=0, check=_at_least(0), classic=True),
    Option("bad_words_ids", None, "structure", check=_bad_words_ids),
    Option("renormalize_logits", False, "flag"),
    Option("forced_bos_token_id", None, "token id"),
    Option("forced_eos_token_id", None, "token id"),
    Option("remove_invalid_values", False, "flag"),
    Option("exponential_decay_length_penalty", None, "structure", check=_decay),  # (start_index, decay_factor)
    Option("suppress_tokens", None, "structure", check=_token_list),
    Option("begin_suppress_tokens", None, "structure", check=_token_list),
    Option("sequence_bias", None, "structure", check=_sequence_bias),  # {(token ids): bias}
    Option("encoder_no_repeat_ngram_size", 0, "int", off=0, check=_at_least(0), classic=True),
    Option("num_return_sequences", 1, "int", off=REQUIRED, check=_at_least(1), classic=True),
    Option("output_scores", False, "flag", classic=True),
    Option("return_dict_in_generate", False, "flag", classic=True),
    # special tokens (the token ids a model's config.json also holds)
    Option("bos_token_id", None, "token id"),
    Option("eos_token_id", None, "token id"),  # None: no hypothesis ends before max_length
    Option("pad_token_id", None, "token id", check=_set_by_now("eos_token_id")),  # transformers pads with EOS then
    Option("decoder_start_token_id", None, "token id", check=_set_by_now("bos_token_id")),
)
OPTION_BY_NAME = {option.name: option for option in OPTIONS}
_NONE_IS_OFF = {option.name for option in OPTIONS if option.off is None}
# the token ids among the options, in the order a config file writes them
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "forced_bos_token_id",
             "forced_eos_token_id")
# token ids that generation_config.json may leave out: config.json's then stay (the other settings default)
_FALLBACK_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")

# options of transformers' generate that are not implemented here, with GenerationConfig's default
NOT_IMPLEMENTED = {
    "penalty_alpha": None, "top_h": None, "dola_layers": None, "force_words_ids": None, "constraints": None,
    "guidance_scale": None, "negative_prompt_ids": None, "negative_prompt_attention_mask": None,
    "prefix_allowed_tokens_fn": None, "streamer": None, "assistant_model": None, "prompt_lookup_num_tokens": None,
    "stop_strings": None, "output_logits": None, "low_memory": None, "cache_implementation": None,
    "watermarking_config": None, "token_healing": False, "num_assistant_tokens": 20, "max_matching_ngram_size": None,
    "forced_decoder_ids": None, "use_model_defaults": None, "custom_generate": None, "tokenizer": None,
    "inputs_embeds": None,
}
# arguments of the call that are not options of a config: accepted, no effect in one process
# (synced_gpus); output_attentions / output_hidden_states only when false
_CALL_ONLY = {"synced_gpus", "output_attentions", "output_hidden_states", "generator", "generation_config",
              "logits_processor", "stopping_criteria", "decoder_input_ids"}
_ACCEPTED = set(OPTION_BY_NAME) | _CALL_ONLY
# keys of a GenerationConfig that describe it rather than set an option
_METADATA = {"transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash"}
_NOT_PASSED = object()  # tells "not passed" from an explicit None


def set_unimplemented(values: Mapping) -> dict:
    """The entries of ``values`` (a config or generation_config.json) that set an option of
    transformers' generate this project does not implement to something other than its default."""
    return {k: v for k, v in values.items() if k in NOT_IMPLEMENTED and v is not None and v is not False
            and v != NOT_IMPLEMENTED[k]}


class GenerationOptions:
    """The resolved options of one call: an attribute per option of :data:`OPTIONS` (``max_new_tokens`` and
    ``min_new_tokens`` folded into ``max_length`` and ``min_length``), and what the call gave besides: the
    caller's processors and stopping criteria, the generator, the decoder's first tokens."""

    def __init__(self, values: dict, generator: torch.Generator | None = None, logits_processor: tuple = (),
                 stopping_criteria: tuple = (), prompt: torch.Tensor | None = None):
        vars(self).update(values)
        self.generator = generator  # for sampling; None: torch's global generator
        self.logits_processor = logits_processor  # (input_ids, scores) -> scores, after the built-in ones
        self.stopping_criteria = stopping_criteria  # (input_ids, scores) -> bool per row, or one bool
        self.prompt = prompt  # the decoder's first tokens (B, P); prepare() makes the start token's
        self.start_time = 0.0  # time.monotonic() when generate was called

    def prepare(self, device, sources: int) -> None:
        """The prompt on the model's device for ``sources`` inputs; without decoder_input_ids the decoder
        start token."""
        if self.prompt is None:
            self.prompt = torch.full((sources, 1), self.decoder_start_token_id, dtype=torch.long, device=device)
        self.prompt = self.prompt.to(device)

    @property
    def prompt_length(self) -> int:
        return self.prompt.shape[1]

    def prompt_rows(self, per_source: int) -> torch.Tensor:
        """(B * per_source, P): each source's first decoder tokens, once per hypothesis."""
        return self.prompt.repeat_interleave(per_source, dim=0)

    def time_is_up(self) -> bool:
        return self.max_time is not None and time.monotonic() - self.start_time > self.max_time

    def custom_stop(self, tokens: torch.Tensor, scores: tuple | None) -> torch.Tensor | None:
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
    sequences_scores: torch.Tensor | None = None
    scores: tuple | None = None

    def __getitem__(self, key: str):
        return getattr(self, key)


def _generation_config_values(generation_config) -> dict:
    """The options a ``generation_config=`` argument sets: a transformers ``GenerationConfig`` (its
    values that differ from ``GenerationConfig()``'s, as transformers takes them), a mapping (its
    entries that differ from those defaults) or the path of a generation_config.json (or its folder).
    transformers' rule: these beat the model's config, and the keyword arguments of the call beat them."""
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
    if hasattr(generation_config, "to_diff_dict"):  # 5.x's also lists the values equal to 4.57's defaults
        generation_config = dict(generation_config.to_diff_dict())
    if isinstance(generation_config, Mapping):
        values = {k: v for k, v in generation_config.items()
                  if k not in OPTION_BY_NAME or v != OPTION_BY_NAME[k].default}
    else:
        raise GenerationOptionError(f"generate: generation_config must be a transformers GenerationConfig, a dict or "
                                    f"the path of a generation_config.json, got {type(generation_config).__name__}")
    values = {k: v for k, v in values.items() if k not in _METADATA}
    if values.get("temperature") == 0.0:  # transformers: temperature 0 means greedy
        values["do_sample"] = False
    return values


def _resolved_values(config, kwargs: dict, passed_config: dict) -> dict:
    """Each option's value: the call's, else the passed generation_config's, else the config's, else the
    default; an explicit None means the option's ``off``; then its kind's check."""
    values = {}
    for option in OPTIONS:
        key = option.name
        value = kwargs.get(key, passed_config.get(key, _NOT_PASSED))
        if value is _NOT_PASSED:  # not passed: the config's value, else transformers' default
            value = getattr(config, key, None)
            if value is None:
                value = option.default
        elif value is None:  # passed as None: it overrides the config
            if option.off is REQUIRED:
                raise GenerationOptionError(f"generate: {key}=None is not a valid value (it overrides the "
                                            f"config's {getattr(config, key, None)!r}); pass a value or leave it out")
            value = option.off
        values[key] = KINDS[option.kind].convert(key, value)
    return values


def _decoder_prompt(value, start: int | None, vocab_size: int) -> torch.Tensor | None:
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


def _derive(values: dict, config, kwargs: dict) -> torch.Tensor | None:
    """The options that follow from others, as transformers derives them: the lengths from the
    ``*_new_tokens`` ones and the prompt, the decoder start token from BOS, padding from EOS. Returns the
    decoder prompt of ``decoder_input_ids`` (None without)."""
    if values["max_new_tokens"] is None and values["max_length"] is None:
        raise GenerationOptionError("generate: max_length=None needs max_new_tokens")
    if values["decoder_start_token_id"] is None:
        values["decoder_start_token_id"] = values["bos_token_id"]
    prompt = _decoder_prompt(kwargs.get("decoder_input_ids"), values["decoder_start_token_id"], config.vocab_size)
    length = 1 if prompt is None else prompt.shape[1]  # the decoder's tokens before the first generated one
    if values["max_new_tokens"] is not None:  # max_new_tokens wins over max_length, as in transformers
        values["max_length"] = values["max_new_tokens"] + length
    elif "max_length" not in kwargs and values["max_length"] == OPTION_BY_NAME["max_length"].default:
        # transformers: the untouched default of 20 means 20 new tokens (capped by the positions)
        values["max_length"] = min(values["max_length"] + length,
                                   getattr(config, "max_position_embeddings", 20 + length))
    if values["min_new_tokens"] is not None:  # min_new_tokens wins over min_length
        values["min_length"] = values["min_new_tokens"] + length
    if values["pad_token_id"] is None:  # transformers pads with EOS then
        values["pad_token_id"] = values["eos_token_id"]
    return prompt


def _check_together(values: dict, prompt_length: int) -> None:
    """The rules that span several options."""
    if prompt_length >= values["max_length"]:
        raise GenerationOptionError(f"generate: decoder_input_ids have {prompt_length} tokens (with the decoder start "
                                    f"token), max_length is {values['max_length']}: nothing is left to generate; raise "
                                    f"max_length or use max_new_tokens")
    beams, groups, returned, sampling = (values["num_beams"], values["num_beam_groups"], values["num_return_sequences"],
                                         values["do_sample"])
    if beams % groups:
        raise GenerationOptionError(f"generate: num_beams {beams} is not divisible by num_beam_groups {groups}")
    if groups > 1 and values["diversity_penalty"] == 0.0:
        raise GenerationOptionError("generate: num_beam_groups > 1 needs diversity_penalty > 0 (else the groups are "
                                    "copies of each other)")
    if groups > 1 and sampling:
        raise GenerationOptionError("generate: do_sample=True with num_beam_groups > 1 (diverse beam search) is not "
                                    "supported, as in transformers")
    if beams > 1 and returned > beams:
        raise GenerationOptionError(f"generate: num_return_sequences {returned} > num_beams {beams}")
    if beams == 1 and not sampling and returned != 1:
        raise GenerationOptionError("generate: greedy decoding returns one sequence per input; set num_beams > 1 "
                                    "or do_sample=True")
    if values["encoder_repetition_penalty"] != 1.0 and (beams > 1 or returned > 1):
        raise GenerationOptionError("generate: encoder_repetition_penalty works with one hypothesis per source "
                                    "(num_beams=1, num_return_sequences=1): transformers applies it to the first "
                                    "batch-size rows of the beams, not to each source's hypotheses")


def resolve(config, kwargs: dict) -> GenerationOptions:
    """The :class:`GenerationOptions` of a call to ``generate(**kwargs)`` on a model with ``config``."""
    passed_config = _generation_config_values(kwargs.get("generation_config"))
    for source, names in (("", set(kwargs)), (" (in generation_config)", set(passed_config))):
        not_implemented = sorted(names & set(NOT_IMPLEMENTED))
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
    values = _resolved_values(config, kwargs, passed_config)
    prompt = _derive(values, config, kwargs)
    for option in OPTIONS:
        if option.check is not None:
            values[option.name] = option.check(option.name, values[option.name], values, config.vocab_size)
    _check_together(values, 1 if prompt is None else prompt.shape[1])
    del values["max_new_tokens"], values["min_new_tokens"]
    return GenerationOptions(values, generator=generator, prompt=prompt, **custom)


# -- generation_config.json ---------------------------------------------------------------------------

def single_token_id(value, key: str, path: str):
    """transformers may write a token id as a list (``"eos_token_id": [2]``); BART uses one."""
    if isinstance(value, list):
        if len(value) == 1:
            return value[0]
        raise CheckpointError(f"{path}: '{key}' lists several ids {value}; this project supports one")
    return value


def read_generation_config(folder: str, config_values: dict | None = None) -> dict:
    """Generation settings from ``folder/generation_config.json`` ({} without one), in config keys:
    every option ``generate`` takes (repetition_penalty, do_sample, suppress_tokens, ... as well as
    the classic ones), and the options of transformers' generate that this project does not
    implement when the file sets them, so that ``generate`` refuses them instead of decoding
    differently from transformers. As in transformers, the file is the whole generation config: a
    setting it leaves out takes transformers' default (None here, which the config reads as its
    default), not the value config.json (``config_values``) may still carry; only the token ids
    (bos/eos/pad/decoder start) fall back to config.json's."""
    path = os.path.join(folder, "generation_config.json")
    if not os.path.isfile(path):
        return {}
    values = read_json_object(path)
    out = {}
    for key in OPTION_BY_NAME:
        if key not in values:
            if key in (config_values or {}) and key not in _FALLBACK_IDS:
                out[key] = None  # config.json's value does not apply
            continue
        value = single_token_id(values[key], key, path) if key in TOKEN_IDS else values[key]
        if value is None and key in _FALLBACK_IDS:
            continue  # unset: config.json's id stays
        out[key] = value
    out.update(set_unimplemented(values))
    return out


def generation_config_json(config) -> dict:
    """generation_config.json for transformers: the token ids and every option ``config`` sets to other
    than transformers' default, so ``model.generate()`` there decodes as ours does."""
    values: dict = {key: getattr(config, key) for key in TOKEN_IDS if getattr(config, key, None) is not None}
    for option in OPTIONS:
        value = getattr(config, option.name, None)
        if option.name not in TOKEN_IDS and value is not None and value != option.default:
            # sequence_bias as transformers writes it: [[[ids...], bias], ...]
            values[option.name] = [[list(i), b] for i, b in value.items()] if isinstance(value, dict) else value
    values["_from_model_config"] = False
    return values
