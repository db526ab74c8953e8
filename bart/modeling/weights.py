"""Reading and writing BART weights.

``load_pretrained`` accepts
- this project's checkpoints (``.ckpt``): a raw state dict, ``{"model": ...}`` (training
  checkpoints, which also carry ``"config"``), ``{"state_dict": ...}`` (Lightning-style, keys under
  ``model.``), with or without ``module.`` (DDP) and ``_orig_mod.`` (torch.compile) prefixes;
- Hugging Face folders (config.json + model.safetensors or pytorch_model.bin); ``model_type``
  "mbart" means Pre-LN;
- NVIDIA's Pre-LN names (``encoder.last_layernorm`` for the final norm of a stack).
Loading is strict by default and never unpickles code (``torch.load(weights_only=True)``).
``save_pretrained`` writes a folder that transformers' ``from_pretrained`` loads unchanged.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Optional

import torch

from bart.configuration.configuration_bart import BartConfig
from utils.checkpoint_io import CheckpointError, safe_load

TIED_KEYS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
             "lm_head.weight")
_PREFIXES = ("module.", "_orig_mod.")
_RENAMES = ((".last_layernorm.", ".layer_norm."),)
_GEOMETRY = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_ffn_dim", "decoder_ffn_dim",
             "max_position_embeddings", "pre_ln")


def _state_dict_of(data: dict, path: str) -> dict[str, torch.Tensor]:
    for key in ("model", "state_dict", "module"):
        if isinstance(data.get(key), dict):
            data = data[key]
            break
    tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise CheckpointError(f"{path} holds no tensors (keys: {sorted(data)[:10]})")
    return tensors


def normalize_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip wrapper prefixes, map other naming schemes onto ours, fill tied aliases."""
    out = {}
    for key, value in state.items():
        changed = True
        while changed:
            changed = False
            for prefix in _PREFIXES:
                if key.startswith(prefix):
                    key, changed = key[len(prefix):], True
        for old, new in _RENAMES:
            key = key.replace(old, new)
        out[key] = value
    if not any(k.startswith(("model.encoder.", "model.shared.")) for k in out):
        if any(k.startswith("model.model.") for k in out):  # Lightning module around the model
            out = {k[len("model."):]: v for k, v in out.items() if k.startswith("model.")}
        elif any(k.startswith(("encoder.", "shared.")) for k in out):  # a bare BartModel
            out = {("model." + k if not k.startswith(("lm_head.", "final_logits_bias")) else k): v
                   for k, v in out.items()}
    tied = next((out[k] for k in TIED_KEYS if k in out), None)
    if tied is not None:
        for key in TIED_KEYS:
            out.setdefault(key, tied)
    return out


def _has_final_norm(state: dict) -> bool:
    return "model.encoder.layer_norm.weight" in state or "model.decoder.layer_norm.weight" in state


def _check_and_load(model, state: dict, path: str, strict: bool) -> None:
    expected = model.state_dict()
    if "final_logits_bias" not in state and "final_logits_bias" in expected:
        state["final_logits_bias"] = torch.zeros_like(expected["final_logits_bias"])
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
                  for k in expected if k in state and state[k].shape != expected[k].shape]
    if strict and (missing or unexpected or mismatched):
        hints = []
        if _has_final_norm(state) and not model.config.pre_ln:
            hints.append("the checkpoint has a final layer_norm per stack: it is Pre-LN; set config.pre_ln = True "
                         "(--pre_ln)")
        if not _has_final_norm(state) and model.config.pre_ln:
            hints.append("the checkpoint has no final layer_norm: it is post-LN (BART); set config.pre_ln = False "
                         "(--no-pre_ln)")
        if mismatched:
            hints.append("shapes differ: the checkpoint is for another model size; pass the config it was trained with")
        def show(items):
            return f"{len(items)} {items[:8]}{' ...' if len(items) > 8 else ''}"
        raise CheckpointError(
            f"cannot load {path}: missing keys {show(missing)}; unexpected keys {show(unexpected)}; "
            f"shape mismatches {show(mismatched)}" + "".join(f"\nhint: {h}" for h in hints))
    loadable = {k: v for k, v in state.items() if k in expected and v.shape == expected[k].shape}
    model.load_state_dict(loadable, strict=False)


def _config_from_folder(folder: str) -> BartConfig:
    values = json.load(open(os.path.join(folder, "config.json"), encoding="utf-8"))
    if values.get("model_type") == "mbart":
        values.setdefault("pre_ln", True)
        values["model_type"] = "bart"
        if values.get("decoder_start_token_id") is None:  # mBART starts from the last token, </s>
            values["decoder_start_token_id"] = values.get("eos_token_id", 2)
    return BartConfig(**values)


def _folder_state(folder: str) -> dict:
    safetensors_path = os.path.join(folder, "model.safetensors")
    if os.path.isfile(safetensors_path):
        from safetensors.torch import load_file
        try:
            return load_file(safetensors_path)
        except Exception as err:
            raise CheckpointError(f"{safetensors_path} is not a readable safetensors file ({err})") from err
    bin_path = os.path.join(folder, "pytorch_model.bin")
    if os.path.isfile(bin_path):
        return safe_load(bin_path)
    raise FileNotFoundError(f"{folder} holds neither model.safetensors nor pytorch_model.bin")


def load_pretrained(cls, path, config: Optional[BartConfig] = None, strict: bool = True, map_location="cpu"):
    path = os.fspath(path)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")) and config is None:
            raise FileNotFoundError(f"{path} has no config.json; pass config=BartConfig(...)")
        folder_config = _config_from_folder(path) if os.path.isfile(os.path.join(path, "config.json")) else None
        state = _folder_state(path)
        config = config or folder_config
        stored_config = folder_config.to_dict() if folder_config else None
    else:
        data = safe_load(path, map_location)
        state = _state_dict_of(data, path)
        stored_config = data.get("config") if isinstance(data.get("config"), dict) else None
        if config is None:
            if stored_config is None:
                raise CheckpointError(f"{path} carries no model config; pass config=BartConfig(...)")
            config = BartConfig(**stored_config)
    if stored_config is not None:
        differs = [k for k in _GEOMETRY if k in stored_config and stored_config[k] != getattr(config, k)]
        if differs:
            raise CheckpointError(
                f"{path} was saved with a different model: " +
                ", ".join(f"{k} {stored_config[k]!r} (checkpoint) vs {getattr(config, k)!r} (given config)"
                          for k in differs))
    model = cls(config)
    state = normalize_keys(state)
    _check_and_load(model, state, path, strict)
    if config.dtype is not None:
        model.to({"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
                  "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}[config.dtype])
    return model.eval()


def hf_config_dict(config: BartConfig) -> dict:
    """The model's config as transformers expects it (BART, or mBART for Pre-LN)."""
    values = config.to_dict()
    values.pop("dtype", None)
    if config.pre_ln:
        values.update(model_type="mbart", architectures=["MBartForConditionalGeneration"])
    else:
        values.update(model_type="bart", architectures=["BartForConditionalGeneration"])
    return values


def save_pretrained(model, folder) -> None:
    """config.json + model.safetensors (tied embeddings stored once), written atomically."""
    from safetensors.torch import save_file

    folder = os.path.abspath(os.fspath(folder))
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".save-", dir=parent)
    try:
        state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()
                 if k not in TIED_KEYS[1:]}
        save_file(state, os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(staging, "config.json"), "w", encoding="utf-8") as f:
            json.dump(hf_config_dict(model.config), f, indent=2, sort_keys=True)
        os.makedirs(folder, exist_ok=True)
        for name in ("model.safetensors", "config.json"):
            os.replace(os.path.join(staging, name), os.path.join(folder, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
