"""fairseq BART checkpoints (``bart.large/model.pt``, ``bart.base``, mBART) in Hugging Face names.

fairseq's parameter names are Hugging Face's without the ``model.`` prefix (``encoder.layers.N.
self_attn.k_proj``, ``fc1``/``fc2``, ``self_attn_layer_norm``, ``final_layer_norm``, ``encoder_attn``,
``layernorm_embedding``, ``encoder.layer_norm`` for Pre-LN); the differences are those transformers'
``convert_bart_original_pytorch_checkpoint_to_pytorch.py`` handles: ``encoder.version`` /
``decoder.version`` / ``_float_tensor`` buffers are dropped, the shared embedding is
``decoder.embed_tokens`` and ``decoder.output_projection.weight`` is the (tied) LM head, and the
learned positions already carry BART's offset of 2 rows. The model geometry comes from the tensors;
heads, activation, dropout and embedding scaling from the checkpoint's ``args`` (argparse
namespace) or ``cfg["model"]``, with the arch's defaults (``bart_large``, ``bart_base``,
``mbart_large``) for what is missing.

Use the tokenizer the weights were trained with (for facebook's checkpoints, ``facebook/bart-large``,
whose ids are fairseq's dictionary order), not the project's GPT-2-order tokenizer folder.
"""
from __future__ import annotations

import re
from typing import Any

import torch

from bart.configuration.configuration_bart import BartConfig
from bart.files.checkpoint_io import CheckpointError

DROPPED = ("encoder.version", "decoder.version", "model.encoder.version", "model.decoder.version",
           "encoder.embed_positions._float_tensor", "decoder.embed_positions._float_tensor", "_float_tensor")
_ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "bart_large": dict(heads=16, normalize_before=False, activation_fn="gelu", no_scale_embedding=True),
    "bart_base": dict(heads=12, normalize_before=False, activation_fn="gelu", no_scale_embedding=True),
    "mbart_large": dict(heads=16, normalize_before=True, activation_fn="gelu", no_scale_embedding=False),
    "mbart_base": dict(heads=12, normalize_before=True, activation_fn="gelu", no_scale_embedding=False),
}


def _model_args(data: dict) -> dict[str, Any]:
    """The model arguments of a fairseq checkpoint as a plain dict ({} when it has none)."""
    args = data.get("args")
    if args is not None and not isinstance(args, dict):
        args = vars(args)
    if not args and isinstance(data.get("cfg"), dict):
        model = data["cfg"].get("model")
        args = model if isinstance(model, dict) else vars(model) if model is not None else {}
    return dict(args or {})


def is_fairseq_checkpoint(data: dict, state: dict[str, torch.Tensor]) -> bool:
    """A fairseq checkpoint: its weights are named ``encoder.*``/``decoder.*`` without a shared table,
    or it carries fairseq's ``args``/``cfg`` next to ``model``."""
    if any(k.startswith(("model.", "shared.")) for k in state):
        return False
    if not any(k.startswith("encoder.embed_tokens") for k in state):
        return False
    return ("args" in data or "cfg" in data or "decoder.output_projection.weight" in state
            or "encoder.version" in state or "decoder.embed_tokens.weight" in state)


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal tables, NaN in the same places counting as equal (damaged values are the value check's to report)."""
    if a.shape != b.shape:
        return False
    if torch.equal(a, b):
        return True
    try:
        return torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
    except RuntimeError:  # dtypes allclose does not take
        return False


def fairseq_to_hf(state: dict[str, torch.Tensor], where: str = "checkpoint") -> dict[str, torch.Tensor]:
    """Hugging Face BART names for a fairseq BART state dict (a new dict; tensors shared)."""

    state = {k: v for k, v in state.items()
             if k not in DROPPED and not k.endswith("._float_tensor") and not k.startswith("classification_heads.")}
    decoder_embed = state.get("decoder.embed_tokens.weight", state.get("encoder.embed_tokens.weight"))
    if decoder_embed is None:
        raise CheckpointError(f"{where}: a fairseq checkpoint without encoder/decoder.embed_tokens.weight")
    for key in ("encoder.embed_tokens.weight", "decoder.output_projection.weight"):
        other = state.pop(key, None)
        if other is not None and not _same_values(other, decoder_embed):
            raise CheckpointError(
                f"{where}: {key} differs from decoder.embed_tokens.weight; this project ties the encoder, decoder "
                f"and output embeddings (fairseq --share-all-embeddings, as bart.large) and cannot load untied ones")
    state.pop("decoder.embed_tokens.weight", None)
    out = {"model." + k: v for k, v in state.items()}
    out["model.shared.weight"] = decoder_embed
    return out


def _count_layers(state: dict, stack: str) -> int:
    numbers = {int(m.group(1)) for k in state if (m := re.match(rf"{stack}\.layers\.(\d+)\.", k))}
    return max(numbers) + 1 if numbers else 0


def config_from_fairseq(data: dict, state: dict[str, torch.Tensor], where: str = "checkpoint") -> BartConfig:
    """A :class:`BartConfig` for a fairseq checkpoint: sizes from the tensors (``state`` in fairseq names),
    the rest from its ``args``/``cfg`` and arch defaults."""

    args = _model_args(data)
    for key in ("encoder.embed_tokens.weight", "encoder.embed_positions.weight", "decoder.embed_positions.weight",
                "encoder.layers.0.fc1.weight", "decoder.layers.0.fc1.weight"):
        if key in state and state[key].dim() != 2:  # the model's sizes are read from these tables
            raise CheckpointError(f"{where}: tensor {key} has shape {tuple(state[key].shape)}, not the (rows, "
                                  f"columns) table a BART model holds there; the file is damaged or not BART weights")
    arch = str(args.get("arch") or args.get("_name") or "bart_large")
    defaults = _ARCH_DEFAULTS.get(arch, _ARCH_DEFAULTS["mbart_large" if arch.startswith("mbart") else "bart_large"])
    try:
        vocab_size, d_model = state["encoder.embed_tokens.weight"].shape
        encoder_positions = state["encoder.embed_positions.weight"].shape[0]
        decoder_positions = state["decoder.embed_positions.weight"].shape[0]
        encoder_ffn = state["encoder.layers.0.fc1.weight"].shape[0]
        decoder_ffn = state["decoder.layers.0.fc1.weight"].shape[0]
    except KeyError as err:
        raise CheckpointError(f"{where}: a fairseq checkpoint without {err.args[0]}; only BART-style "
                              f"encoder-decoders with learned positions can be imported") from err
    if encoder_positions != decoder_positions:
        raise CheckpointError(f"{where}: encoder and decoder position tables differ ({encoder_positions} vs "
                              f"{decoder_positions} rows); BART needs one max_position_embeddings")

    def arg(name: str, default: Any) -> Any:
        value = args.get(name)
        return default if value is None else value

    pre_ln = "encoder.layer_norm.weight" in state or bool(arg("encoder_normalize_before", defaults["normalize_before"]))
    heads_default = defaults["heads"] if d_model % defaults["heads"] == 0 else max(1, d_model // 64)
    activation = str(arg("activation_fn", defaults["activation_fn"]))
    return BartConfig(
        vocab_size=int(vocab_size), d_model=int(d_model), max_position_embeddings=int(encoder_positions) - 2,
        encoder_layers=_count_layers(state, "encoder"), decoder_layers=_count_layers(state, "decoder"),
        encoder_ffn_dim=int(encoder_ffn), decoder_ffn_dim=int(decoder_ffn),
        encoder_attention_heads=int(arg("encoder_attention_heads", heads_default)),
        decoder_attention_heads=int(arg("decoder_attention_heads", heads_default)),
        activation_function="gelu_new" if activation == "gelu_accurate" else activation,  # tanh approximation
        dropout=float(arg("dropout", 0.1)), attention_dropout=float(arg("attention_dropout", 0.0)),
        activation_dropout=float(arg("activation_dropout", arg("relu_dropout", 0.0))),
        scale_embedding=not bool(arg("no_scale_embedding", defaults["no_scale_embedding"])),
        pre_ln=pre_ln)


def import_fairseq(data: dict, state: dict[str, torch.Tensor], config: BartConfig | None,
                   where: str = "checkpoint") -> tuple[dict[str, torch.Tensor], BartConfig]:
    """(state dict in Hugging Face names, config) for a fairseq checkpoint; ``config`` wins when given."""
    inferred = config_from_fairseq(data, state, where)
    return fairseq_to_hf(state, where), (config or inferred)
