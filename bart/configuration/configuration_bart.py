"""BART configuration: every key of a Hugging Face BART ``config.json``, plus ``pre_ln`` and ``dtype``.

``BartConfig(**json.load(open(path)))`` works as in the recipe's inference snippet. Keys this
class does not know are kept as attributes and written back by :meth:`to_dict`, so a Hugging Face
config survives a round trip unchanged. Known keys are type-checked: a wrong type raises a
``ValueError`` that names the key, the value and the expected type. A known key given as null
(transformers writes ``"num_beams": null`` and friends once it moved them to generation_config.json)
takes its default.
"""
from __future__ import annotations

import copy
import difflib
import json
import os
import sys
from typing import Any

from bart.errors import UserError, did_you_mean
from bart.files.checkpoint_io import read_json_object
from bart.generation.options import KINDS, NOT_IMPLEMENTED, OPTIONS

# Defaults follow transformers' BartConfig (facebook/bart-large geometry).
_DEFAULTS: dict[str, Any] = {
    "model_type": "bart",
    "vocab_size": 50265,
    "max_position_embeddings": 1024,
    "d_model": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
    "activation_function": "gelu",
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "init_std": 0.02,
    "classifier_dropout": 0.0,
    "scale_embedding": False,
    "use_cache": True,
    "num_labels": 3,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "is_encoder_decoder": True,
    "forced_bos_token_id": None,
    "forced_eos_token_id": 2,
    "tie_word_embeddings": True,
    # the classic generation keys of transformers' PretrainedConfig and their defaults: bart.generation.options
    **{option.name: option.default for option in OPTIONS if option.classic},
    # recipe additions
    "pre_ln": False,
    "dtype": None,
    "gradient_checkpointing": False,
    # rows of the embedding / LM head: vocab_size rounded up to this multiple (bart.modeling.vocab_padding);
    # files keep vocab_size rows. 1: no padding
    "pad_vocab_to_multiple_of": 128,
}

# Every config key that decides the model's architecture (what the weights mean), as opposed to what training
# or generation does with it: the weights' stored config decides these when loading (bart.modeling.weights),
# and a resume refuses a checkpoint whose values differ (bart.training.checkpoint's resume checks).
# normalize_before and add_final_layer_norm follow pre_ln (set_pre_ln).
ARCHITECTURE_KEYS = ("vocab_size", "max_position_embeddings", "d_model", "encoder_layers", "decoder_layers",
                     "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
                     "pre_ln", "scale_embedding", "activation_function", "tie_word_embeddings")

_INT = (int,)
_FLOAT = (int, float)
_TYPES: dict[str, tuple] = {
    "vocab_size": _INT, "max_position_embeddings": _INT, "d_model": _INT,
    "encoder_layers": _INT, "encoder_ffn_dim": _INT, "encoder_attention_heads": _INT,
    "decoder_layers": _INT, "decoder_ffn_dim": _INT, "decoder_attention_heads": _INT,
    "encoder_layerdrop": _FLOAT, "decoder_layerdrop": _FLOAT, "dropout": _FLOAT,
    "attention_dropout": _FLOAT, "activation_dropout": _FLOAT, "init_std": _FLOAT,
    "activation_function": (str,), "scale_embedding": (bool,), "use_cache": (bool,),
    "pad_token_id": _INT, "bos_token_id": _INT, "eos_token_id": _INT,
    "decoder_start_token_id": _INT, "forced_bos_token_id": _INT, "forced_eos_token_id": _INT,
    "pre_ln": (bool,), "gradient_checkpointing": (bool,), "tie_word_embeddings": (bool,), "pad_vocab_to_multiple_of": _INT,
    **{option.name: KINDS[option.kind].types for option in OPTIONS if option.classic},
}
# Keys that may be null in a config.json.
_NULLABLE = {"forced_bos_token_id", "forced_eos_token_id", "bos_token_id", "decoder_start_token_id",
             "pad_token_id", "eos_token_id"}
_DTYPES = {None, "float32", "float16", "bfloat16", "fp32", "fp16", "bf16"}
# Keys of transformers' PretrainedConfig and of older BART/mBART config files that this class keeps
# without reading (they change nothing in the model), so none of them is taken for a misspelling.
_KNOWN_EXTRAS = {
    "architectures", "id2label", "label2id", "transformers_version", "_name_or_path", "torch_dtype",
    "output_hidden_states", "output_attentions", "return_dict", "add_cross_attention", "tie_encoder_decoder",
    "is_decoder", "cross_attention_hidden_size", "chunk_size_feed_forward", "problem_type", "tokenizer_class",
    "prefix", "task_specific_params", "finetuning_task", "sep_token_id", "pruned_heads",
    "tf_legacy_loss", "use_bfloat16", "torchscript", "classif_dropout", "output_past", "num_hidden_layers",
    "force_bos_token_to_be_generated", "_commit_hash", "_attn_implementation", "attn_implementation",
    "dropout_rate", "hidden_size",
    "num_attention_heads", "initializer_range", "layer_norm_eps", "vocab_file", "merges_file",
    "normalize_before", "add_final_layer_norm", "add_bias_logits", "normalize_embedding",
    "static_position_embeddings", "extra_pos_embeddings", "gradient_checkpointing",
    # every generate option, implemented or not (generation_config.json; bart.generation reads them from the config)
    *(option.name for option in OPTIONS), *NOT_IMPLEMENTED,
}
# Keys of older BART/mBART configs that change the architecture: their value must be one this model
# implements (normalize_before/add_final_layer_norm are Pre-LN, see _layer_norm_keys).
_UNSUPPORTED_VALUES = {
    "add_bias_logits": (False, "a separate bias on the output logits"),
    "normalize_embedding": (True, "no layer norm after the embeddings"),
    "static_position_embeddings": (False, "sinusoidal (static) position embeddings"),
    "extra_pos_embeddings": (2, "a position offset other than 2"),
}
MAX_VOCAB_MULTIPLE = 1024  # pad_vocab_to_multiple_of's bound: alignment beyond it buys nothing, rows cost compute
_POSITIVE = ("vocab_size", "max_position_embeddings", "d_model", "encoder_attention_heads",
             "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "pad_vocab_to_multiple_of")


class ConfigError(UserError):
    """A config.json key or value this model cannot honour; the message names the key and the fix."""


_NOTED_UNREAD: set = set()  # (key, file) already named in this process: a config is rebuilt from its dict often


def _check_keys(values: dict, source: str | None = None) -> None:
    """A key that is neither known nor kept on purpose but is close to a known one is a misspelling:
    it would be silently ignored, so it is refused with the likely intended name. Any other such key is
    read by no part of the project: named once, in one line, with the keys it might mean."""
    known = set(_DEFAULTS) | _KNOWN_EXTRAS
    for key in values:
        if key in known or key in BartConfig._ALIASES:
            continue
        hint = did_you_mean(key, sorted(_DEFAULTS), cutoff=0.8)
        if hint:
            raise ConfigError(f"BartConfig: unknown key '{key}'{hint}; it would be ignored: fix its name or remove it")
        if (key, source) in _NOTED_UNREAD or (source is None and any(k == key for k, _ in _NOTED_UNREAD)):
            continue
        _NOTED_UNREAD.add((key, source))
        close = difflib.get_close_matches(key, sorted(_DEFAULTS), n=3, cutoff=0.5)
        print(f"note: BartConfig: key '{key}'{f' (in {source})' if source else ''} is read by no part of this "
              f"project: it changes nothing" + (f" (keys it might mean: {', '.join(close)})" if close else ""),
              file=sys.stderr, flush=True)


class BartConfig:
    """Configuration of a BART (post-LN) or Pre-LN BART model.

    Attribute aliases as in transformers: ``hidden_size`` = ``d_model``, ``num_hidden_layers`` =
    ``encoder_layers``, ``num_attention_heads`` = ``encoder_attention_heads``.
    """

    model_type = "bart"

    def __init__(self, **kwargs: Any) -> None:
        # transformers writes "torch_dtype" (4.x) or "dtype" (5.x); keep what was given.
        _check_keys(kwargs)
        values = copy.deepcopy(_DEFAULTS)
        values.update(copy.deepcopy(kwargs))
        if "pre_ln" not in kwargs and isinstance(kwargs.get("normalize_before"), bool):
            # an mBART-style config.json without pre_ln: normalize_before says it (with a final norm per stack)
            final_norm = kwargs.get("add_final_layer_norm", kwargs["normalize_before"])
            if final_norm != kwargs["normalize_before"]:
                raise ConfigError(f"BartConfig: 'normalize_before': {json.dumps(kwargs['normalize_before'])} with "
                                  f"'add_final_layer_norm': {json.dumps(final_norm)} is not implemented (Pre-LN here has "
                                  f"a final layer norm per stack, post-LN none); set both alike, or set 'pre_ln'")
            values["pre_ln"] = kwargs["normalize_before"]
        # transformers >= 4.41 writes moved generation keys as null ("num_beams": null, "max_length": null):
        # null means "not set here", so the default applies (generation_config.json, when present, sets them).
        for key, value in kwargs.items():
            if value is None and key in _DEFAULTS and key not in _NULLABLE and key != "dtype":
                values[key] = copy.deepcopy(_DEFAULTS[key])
        for key, value in values.items():
            object.__setattr__(self, key, value)
        if isinstance(self.pre_ln, bool):  # 'pre_ln' wins over the older names (normalize_before, ...)
            self.set_pre_ln(self.pre_ln)
        self.validate()

    # -- aliases (transformers' attribute_map); a key stored in the file wins ---------
    _ALIASES = {"hidden_size": "d_model", "num_hidden_layers": "encoder_layers",
                "num_attention_heads": "encoder_attention_heads"}

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails
        target = BartConfig._ALIASES.get(name)
        if target is not None:
            return getattr(self, target)
        raise AttributeError(f"BartConfig has no attribute {name!r}")

    def set_pre_ln(self, value: bool) -> None:
        """Choose Pre-LN or post-LN; the older names of the same choice (``normalize_before``,
        ``add_final_layer_norm``), when the file has them, follow, so a saved config never says both."""
        self.pre_ln = bool(value)
        for key in ("normalize_before", "add_final_layer_norm"):
            if key in vars(self):
                setattr(self, key, bool(value))

    # -- checks --------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ``ValueError`` (a :class:`UserError`) naming the key for a value of the wrong type or range."""
        for key, (supported, meaning) in _UNSUPPORTED_VALUES.items():
            value = vars(self).get(key)
            if value is not None and value != supported:
                raise ConfigError(f"BartConfig: '{key}': {json.dumps(value)} asks for {meaning}, which this model "
                                  f"does not implement; set it to {json.dumps(supported)} or remove it")
        for key, types in _TYPES.items():
            value = getattr(self, key, None)
            if value is None and key in _NULLABLE:
                continue
            # bool is an int subclass: refuse True where a number is expected
            wrong_bool = isinstance(value, bool) and bool not in types
            if wrong_bool or not isinstance(value, types):
                expected = " or ".join(t.__name__ for t in types)
                raise ConfigError(
                    f"BartConfig: '{key}' must be {expected}, got {value!r} "
                    f"({type(value).__name__}); fix the value in the config file")
        for key in _POSITIVE:
            if getattr(self, key) <= 0:
                raise ConfigError(f"BartConfig: '{key}' must be positive, got {getattr(self, key)}")
        multiple = self.pad_vocab_to_multiple_of  # an alignment: a power of two, 1 (no padding) to 1,024
        if multiple > MAX_VOCAB_MULTIPLE or multiple & (multiple - 1):
            raise ConfigError(f"BartConfig: 'pad_vocab_to_multiple_of' must be a power of two from 1 (no padding) to "
                              f"{MAX_VOCAB_MULTIPLE}, got {multiple} (it would make the vocabulary "
                              f"{-(-self.vocab_size // multiple) * multiple:,} rows for {self.vocab_size:,} tokens); "
                              f"use 128 (the default: the GPUs' aligned kernels) or 1")
        for key in ("encoder", "decoder"):
            heads = getattr(self, f"{key}_attention_heads")
            if self.d_model % heads:
                raise ConfigError(f"BartConfig: d_model {self.d_model} is not divisible by "
                                 f"{key}_attention_heads {heads}")
        if self.dtype not in _DTYPES:
            raise ConfigError(f"BartConfig: 'dtype' must be one of {sorted(d for d in _DTYPES if d)}"
                             f" or null, got {self.dtype!r}")
        if self.activation_function not in ("gelu", "relu", "gelu_new", "gelu_python", "silu",
                                            "swish", "tanh"):
            raise ConfigError(f"BartConfig: unsupported activation_function "
                             f"{self.activation_function!r}")

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        values = copy.deepcopy(dict(vars(self)))
        for alias, target in BartConfig._ALIASES.items():  # a stored alias follows its key: transformers 5.x
            if alias in values:                            # reads num_hidden_layers over encoder_layers
                values[alias] = values[target]
        return values

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json_string())

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        os.makedirs(folder, exist_ok=True)
        self.to_json_file(os.path.join(folder, "config.json"))

    @classmethod
    def from_dict(cls, values: dict[str, Any], **overrides: Any) -> BartConfig:
        return cls(**{**values, **overrides})

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> BartConfig:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"BartConfig: no config file at {path}")
        values = read_json_object(os.fspath(path))  # CheckpointError (a ValueError) naming the file
        try:
            _check_keys(values, os.fspath(path))
            return cls(**values)
        except ValueError as err:
            raise ConfigError(f"{err} (in {path})") from err

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **overrides: Any) -> BartConfig:
        """Read ``path`` (a config.json, or a folder holding one)."""
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        config = cls.from_json_file(path)
        for key, value in overrides.items():
            config.set_pre_ln(value) if key == "pre_ln" else setattr(config, key, value)
        config.validate()
        return config

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BartConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"BartConfig {self.to_json_string()}"
