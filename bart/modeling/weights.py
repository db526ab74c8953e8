"""Reading and writing BART weights.

``load_pretrained`` accepts
- this project's checkpoints (``.ckpt``): a raw state dict, ``{"model": ...}`` (training
  checkpoints, which also carry ``"config"``; best-validation ones also numpy metrics), ``{"state_dict": ...}``
  (Lightning-style, keys under ``model.``), with or without ``module.`` (DDP) and ``_orig_mod.``
  (torch.compile) prefixes;
- Hugging Face folders written by transformers 4.x/5.x or by :func:`save_pretrained`: config.json
  (null generation keys, ``transformers_version``, ``torch_dtype``/``dtype`` tolerated; ``model_type``
  "mbart" means Pre-LN), generation_config.json for the generation defaults, and model.safetensors,
  sharded safetensors (model.safetensors.index.json) or pytorch_model.bin (sharded or not);
- fairseq BART checkpoints (``bart.large/model.pt``), see :mod:`bart.modeling.fairseq`;
- NVIDIA's Pre-LN names (``encoder.last_layernorm`` for the final norm of a stack).
Loading is strict by default and never runs code from a file: ``torch.load(weights_only=True)`` with
only numpy scalars/arrays and ``argparse.Namespace`` added to what it may rebuild.
``save_pretrained`` writes a folder that transformers' ``from_pretrained`` loads unchanged.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
import tempfile

import torch

from bart.configuration.configuration_bart import ARCHITECTURE_KEYS, BartConfig
from bart.files.checkpoint_io import CheckpointError, first_line, read_json_object
from bart.files.checkpoint_io import safe_load as read_checkpoint_file
from bart.files.file_modes import give_new_file_mode
from bart.generation.options import (
    OPTION_BY_NAME,
    TOKEN_IDS,
    generation_config_json,
    read_generation_config,
    single_token_id,
)
from bart.hub import looks_like_hub_id, resolve_model_path
from bart.modeling.vocab_padding import fit_vocab_rows, unpadded_state_dict

TIED_KEYS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
             "lm_head.weight")
_PREFIXES = ("module.", "_orig_mod.")
_ANY_STEP = re.compile(r"step(\d+)")  # a step number in a checkpoint's name
_RENAMES = ((".last_layernorm.", ".layer_norm."),)


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


def _check_and_load(model, state: dict, path: str, strict: bool, files: dict | None = None) -> None:
    expected = model.state_dict()
    stored = state
    # the model's state dict, as files, holds the tokenizer's vocab_size rows (bart.modeling.vocab_padding): a file
    # written with padded rows is cut to them; load_state_dict pads them to the model's rows
    state = fit_vocab_rows(state, model.config.vocab_size, model.config.vocab_size)
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
    check_weight_values({k: stored.get(k, v) for k, v in loadable.items()}, expected, path, files)
    model.load_state_dict(loadable, strict=False)


# The dtypes a weight file may store: load_state_dict casts them to the model's dtype without loss of meaning.
# Anything else (integers, bool, complex, float8 without its scales) is not BART weights as stored: an integer
# table would be cast to whole numbers (a float model quantized or truncated by a bad conversion: mostly zeros).
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_weight_values(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], path: str,
                        files: dict[int, str] | None = None) -> None:
    """Refuse, in one line naming the file and the tensor, a tensor the model cannot use: one whose model
    counterpart (``expected``) is floating point but which is stored as another dtype (integer, bool, complex,
    float8), or which holds NaN/inf. ``files``: the file each tensor was read from (by ``id``: a folder's
    model.safetensors or shard), else ``path``. Tensors shared under several names (tied embeddings) are
    checked once."""
    files = files or {}
    weights, seen = {}, set()
    for key, value in state.items():
        if key in expected and expected[key].is_floating_point() and id(value) not in seen:
            weights[key] = value
            seen.add(id(value))
    wrong = [k for k, v in weights.items() if v.dtype not in FLOAT_DTYPES]
    if wrong:
        key, value = wrong[0], weights[wrong[0]]
        dtypes = sorted({str(weights[k].dtype).replace("torch.", "") for k in wrong})
        more = f" (and {len(wrong) - 1} more of its {len(weights)} weight tensors: {', '.join(dtypes)})" if len(wrong) > 1 else ""
        raise CheckpointError(
            f"{files.get(id(value), path)}: tensor {key} is stored as {str(value.dtype).replace('torch.', '')}{more}, "
            f"not as floating-point weights (float32, float16, bfloat16): loaded, the model would get "
            f"{'0/1' if value.dtype == torch.bool else 'whole-number'} weights; the file was converted or quantized "
            f"wrongly: use the original floating-point weights")
    for key, value in weights.items():
        # a sum is finite exactly when no value is NaN/inf, unless finite values overflow it: then count them
        # (6x faster than isfinite().all() on CPU: no bool tensor; float32 accumulation for half tensors)
        total = value.sum(dtype=torch.float64 if value.dtype == torch.float64 else torch.float32)
        if bool(torch.isfinite(total)):
            continue
        finite = torch.isfinite(value)
        if not bool(finite.all()):
            bad = value.numel() - int(finite.sum())
            raise CheckpointError(
                f"{files.get(id(value), path)}: tensor {key} holds {bad} NaN/inf value(s) of {value.numel()}: the "
                f"weights are damaged (a diverged run or a broken conversion); use an earlier checkpoint or the "
                f"original weights")


def config_from_folder(folder: str) -> BartConfig:
    """The :class:`BartConfig` of a Hugging Face folder (transformers 4.x/5.x or this project's).

    ``model_type`` "mbart" means Pre-LN. Null generation keys take their defaults and
    ``generation_config.json`` overrides them, as transformers' ``generate`` does. The folder's
    ``dtype``/``torch_dtype`` is the storage precision transformers wrote: kept as ``torch_dtype`` for
    reference, never a reason to cast the model (``dtype`` stays null)."""
    path = os.path.join(folder, "config.json")
    values = read_json_object(path)
    if values.get("model_type") not in (None, "bart", "mbart"):
        raise CheckpointError(f"{path}: model_type {values.get('model_type')!r} is not BART or mBART; this "
                              f"project loads BART-architecture models only")
    if values.get("model_type") == "mbart":
        values.setdefault("pre_ln", True)
        values["model_type"] = "bart"
        if values.get("decoder_start_token_id") is None:  # mBART starts from the last token, </s>
            values["decoder_start_token_id"] = values.get("eos_token_id", 2)
    if "transformers_version" in values or "torch_dtype" in values:
        stored = values.pop("dtype", None) or values.get("torch_dtype")
        if stored is not None:
            values["torch_dtype"] = stored
        values["dtype"] = None
    for key in TOKEN_IDS:
        if key in values:
            values[key] = single_token_id(values[key], key, path)
    values.update(read_generation_config(folder, values))
    try:
        return BartConfig(**values)
    except ValueError as err:
        raise CheckpointError(f"{err} (in {path})") from err


def _load_safetensors(path: str) -> dict:
    from safetensors.torch import load_file
    try:
        return load_file(path)
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error types
        raise CheckpointError(f"{path} is not a readable safetensors file ({first_line(err)}); it may be "
                              f"truncated (an interrupted download or copy): fetch it again") from err


def _load_sharded(folder: str, index_name: str, read, files: dict | None = None) -> dict:
    index_path = os.path.join(folder, index_name)
    weight_map = read_json_object(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path} has no weight_map; the shard index is damaged")
    state = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = os.path.join(folder, shard)
        if not os.path.isfile(shard_path):
            raise CheckpointError(f"{index_path} lists the shard {shard}, which is missing from {folder}; "
                                  f"download or copy the whole folder again")
        tensors = read(shard_path)
        if files is not None:
            files.update({id(v): shard_path for v in tensors.values()})
        state.update(tensors)
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise CheckpointError(f"{index_path}: tensors {missing[:5]} are listed but not in their shards")
    return state


def _folder_state(folder: str, files: dict | None = None) -> dict:
    """Weights of a folder: model.safetensors, sharded safetensors, pytorch_model.bin (sharded or not).
    ``files`` (when given) gets the file each tensor was read from, by the tensor's ``id``."""
    files = {} if files is None else files
    for name in ("model.safetensors", "pytorch_model.bin"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            state = _load_safetensors(path) if name.endswith(".safetensors") else read_checkpoint_file(path)
            files.update({id(v): path for v in state.values()})
            return state
        if os.path.isfile(path + ".index.json"):
            return _load_sharded(folder, name + ".index.json",
                                 _load_safetensors if name.endswith(".safetensors") else read_checkpoint_file, files)
    raise FileNotFoundError(f"{folder} holds no weights: neither model.safetensors (or a sharded "
                            f"model.safetensors.index.json) nor pytorch_model.bin")


def single_checkpoint_in(folder: str) -> str | None:
    """A folder without config.json holding one checkpoint file (a fairseq ``bart.large/`` folder)."""
    names = [n for n in ("model.pt", "checkpoint_best.pt", "checkpoint_last.pt") if os.path.isfile(os.path.join(folder, n))]
    return os.path.join(folder, names[0]) if names else None


def resolve_weights(path: str) -> str:
    """Starting weights: a checkpoint file, a Hugging Face folder (config.json), or a folder of
    checkpoints (a run's output folder), from which the one with the highest step in its name is taken
    (ties: the newest)."""
    if os.path.isfile(path) or os.path.isfile(os.path.join(path, "config.json")):
        return path
    if os.path.isdir(path):
        found = glob.glob(os.path.join(path, "*.ckpt")) + glob.glob(os.path.join(path, "*.pt"))
        if found:
            def order(candidate):
                steps = _ANY_STEP.findall(os.path.basename(candidate))
                return (int(steps[-1]) if steps else -1, os.path.getmtime(candidate))
            chosen = max(found, key=order)
            print(f"[checkpoint] {path}: starting from {os.path.basename(chosen)}")
            return chosen
        raise FileNotFoundError(f"{path} holds no checkpoint (*.ckpt, *.pt) and no Hugging Face config.json")
    raise FileNotFoundError(f"no checkpoint at {path}")


def _architecture_of_tensors(state: dict[str, torch.Tensor]) -> dict:
    """What the tensors of a checkpoint without a config say of its architecture (``state`` in our names):
    sizes, layer counts, and Pre-LN (a final layer norm per stack). Heads, activation and embedding scaling
    leave no trace in the shapes."""
    values: dict = {"pre_ln": _has_final_norm(state)}
    shared = state.get("model.shared.weight")
    if shared is not None and shared.dim() == 2:
        values["vocab_size"], values["d_model"] = int(shared.shape[0]), int(shared.shape[1])
    positions = state.get("model.encoder.embed_positions.weight")
    if positions is not None and positions.dim() == 2:
        values["max_position_embeddings"] = int(positions.shape[0]) - 2  # BART's learned offset of 2 rows
    for stack in ("encoder", "decoder"):
        layers = {int(k.split(".")[3]) for k in state if k.startswith(f"model.{stack}.layers.") and k.split(".")[3].isdigit()}
        if layers:
            values[f"{stack}_layers"] = max(layers) + 1
        fc1 = state.get(f"model.{stack}.layers.0.fc1.weight")
        if fc1 is not None and fc1.dim() == 2:
            values[f"{stack}_ffn_dim"] = int(fc1.shape[0])
    return values


def _flag_text(key: str, value) -> str:
    if isinstance(value, bool):
        return f"--{key}" if value else f"--no-{key}"
    return f"--{key} {value}"


def architecture_from_checkpoint(config: BartConfig, stored: dict, path: str, explicit: dict,
                                 source: str) -> BartConfig:
    """``config`` with the architecture ``stored`` with the weights (every key of ARCHITECTURE_KEYS it has);
    everything else (generation settings, dropout, dtype, token ids) stays ``config``'s. ``explicit``: the
    architecture values the user chose on the command line (``{"pre_ln": True}`` from ``--pre_ln``; None: not
    chosen): one that contradicts the weights is an error naming both. ``source`` says where ``stored`` was
    read (for the messages)."""
    for key, value in explicit.items():
        if value is not None and key in stored and stored[key] != value:
            raise CheckpointError(
                f"{path}: {key} {stored[key]!r} ({source}) vs {_flag_text(key, value)} (command line); the model's "
                f"architecture comes from its checkpoint: drop {_flag_text(key, value)}, or give a checkpoint "
                f"with {key} {value!r}")
    values = config.to_dict()
    changed = []
    for key in ARCHITECTURE_KEYS:
        if key in stored and stored[key] != values.get(key):
            changed.append(f"{key} {stored[key]!r} (config file: {values.get(key)!r})")
            values[key] = stored[key]
    if not changed:
        return config
    for key in ("normalize_before", "add_final_layer_norm"):  # the older names of pre_ln follow it
        if key in values:
            values[key] = values["pre_ln"]
    try:
        new = BartConfig(**values)
    except ValueError as err:
        raise CheckpointError(f"{path}: the architecture of {source} does not make a valid model: {err}") from err
    if os.environ.get("RANK", "0") == "0":
        print(f"note: {path}: the architecture of {source}: " + ", ".join(changed) +
              "; the config file gives the generation settings", file=sys.stderr)
    return new


def load_pretrained(cls, path, config: BartConfig | None = None, strict: bool = True, map_location="cpu",
                    explicit: dict | None = None):
    """A ``cls`` model holding the weights at ``path`` (see the module's docstring for the formats).

    Without ``explicit``, ``config`` (when given) is the architecture, and one stored with the weights
    must agree with it. With ``explicit`` (the architecture flags of a command line, e.g.
    ``{"pre_ln": args.pre_ln}``; entries None when not given, ``{}`` for none), the architecture comes from
    the weights: a training or weights checkpoint's stored config, a folder's config.json, a fairseq
    checkpoint's, else what the tensors show (sizes, layers, Pre-LN); ``config`` gives everything else
    (generation settings) and what the weights cannot tell (heads, activation), and an explicit value that
    contradicts the weights is an error naming both."""
    path = os.path.expanduser(os.fspath(path))
    if looks_like_hub_id(path):  # a hub id (downloaded, or its cache offline) as transformers does
        path = resolve_model_path(path)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")) and single_checkpoint_in(path):
        path = single_checkpoint_in(path)  # fairseq's extracted bart.large/ holds model.pt, dict.txt, no config
    source = "its stored config"
    files: dict[int, str] = {}  # the file each tensor came from (a folder's weights file or shard)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")) and config is None:
            raise FileNotFoundError(f"{path} has no config.json; pass config=BartConfig(...)")
        folder_config = config_from_folder(path) if os.path.isfile(os.path.join(path, "config.json")) else None
        state = _folder_state(path, files)
        config = config or folder_config
        stored_config = folder_config.to_dict() if folder_config else None
        source = "its config.json"
    else:
        data = read_checkpoint_file(path, map_location)
        state = _state_dict_of(data, path)
        stored_config = data.get("config") if isinstance(data.get("config"), dict) else None
        from bart.modeling.fairseq import import_fairseq, is_fairseq_checkpoint
        if stored_config is None and is_fairseq_checkpoint(data, state):
            state, fairseq_config = import_fairseq(data, state, None, path)
            stored_config = fairseq_config.to_dict()
            config = config or fairseq_config
            source = "its fairseq tensors and args"
        if config is None and stored_config is None:
            stored_config = _config_beside(path)
        if config is None:
            if stored_config is None:
                raise CheckpointError(f"{path} carries no model config; pass config=BartConfig(...) (on the command line: --config CONFIG.json)")
            config = BartConfig(**stored_config)
    state = normalize_keys(state)
    if explicit is not None:
        if stored_config is None:
            stored_config, source = _architecture_of_tensors(state), "its tensors"
        config = architecture_from_checkpoint(config, stored_config, path, explicit, source)
    elif stored_config is not None:
        differs = [k for k in ARCHITECTURE_KEYS if k in stored_config and stored_config[k] != getattr(config, k)]
        if differs:
            raise CheckpointError(
                f"{path} was saved with a different model: " +
                ", ".join(f"{k} {stored_config[k]!r} (checkpoint) vs {getattr(config, k)!r} (given config)"
                          for k in differs))
    prefix = _prefix_of(path, stored_config)
    if prefix and not getattr(config, "prefix", None):  # the input prefix it was fine-tuned with (--source_prefix)
        config = BartConfig(**dict(config.to_dict(), prefix=prefix))
    model = cls(config)
    _check_and_load(model, state, path, strict, files)
    if config.dtype is not None:
        model.to({"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
                  "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}[config.dtype])
    return model.eval()


RUN_CONFIG = "run_config.json"  # what a training run writes beside its checkpoints (bart.cli.args.write_run_config)


def _prefix_of(path: str, stored: dict | None) -> str | None:
    """The source prefix the weights at ``path`` were fine-tuned with: their stored config's ``prefix``, else (a raw
    state dict such as final_step.ckpt) that of the run_config.json beside it; None where none was used."""
    if stored and stored.get("prefix"):
        return stored["prefix"]
    found = None if os.path.isdir(path) else (_run_model_config(path) or {}).get("prefix")
    return found if isinstance(found, str) and found else None


def _run_model_config(path: str) -> dict | None:
    """``model_config`` of the run_config.json beside ``path`` (the run that wrote it), or None."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), RUN_CONFIG), encoding="utf-8") as f:
            found = json.load(f).get("model_config")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) else None


def _config_beside(path: str) -> dict | None:
    """The model config of the run that wrote ``path`` (a raw state dict such as fine-tuning's final_step.ckpt):
    ``model_config`` of the run_config.json beside it, or None; a line says it is used."""
    found = _run_model_config(path)
    if found is not None:
        print(f"[checkpoint] {path} carries no model config: using the one of the run that wrote it "
              f"({os.path.join(os.path.dirname(os.path.abspath(path)), RUN_CONFIG)})", file=sys.stderr, flush=True)
    return found


def hf_config_dict(config: BartConfig) -> dict:
    """The model's config as transformers expects it (BART, or mBART for Pre-LN).

    Generation settings go to generation_config.json (:func:`bart.generation.options.generation_config_json`), as
    transformers >= 4.41 keeps them; the token ids stay here too. ``tokenizer_class`` says which
    tokenizer AutoTokenizer builds: for a Pre-LN model typed mBART it would otherwise pick mBART's
    SentencePiece tokenizer, which BART's byte-level BPE files cannot feed."""
    values = config.to_dict()
    values.pop("dtype", None)
    for key in OPTION_BY_NAME:  # the classic generation keys among them
        if key not in TOKEN_IDS and key != "use_cache":
            values.pop(key, None)
    values.setdefault("tokenizer_class", "BartTokenizer")
    if config.pre_ln:
        values.update(model_type="mbart", architectures=["MBartForConditionalGeneration"])
    else:
        values.update(model_type="bart", architectures=["BartForConditionalGeneration"])
    return values


def write_model_files(model, folder: str) -> list[str]:
    """model.safetensors (tied embeddings stored once), config.json and generation_config.json into an
    existing ``folder``; returns the names written."""
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in unpadded_state_dict(model).items()
             if k not in TIED_KEYS[1:]}
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    give_new_file_mode(os.path.join(folder, "model.safetensors"))  # safetensors writes it 0600
    for name, values in (("config.json", hf_config_dict(model.config)),
                         ("generation_config.json", generation_config_json(model.config))):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(values, f, indent=2, sort_keys=True)
            f.write("\n")
    return ["model.safetensors", "config.json", "generation_config.json"]


def save_pretrained(model, folder) -> None:
    """config.json + generation_config.json + model.safetensors, each file replaced atomically."""
    folder = os.path.abspath(os.fspath(folder))
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".save-", dir=parent)
    try:
        names = write_model_files(model, staging)
        os.makedirs(folder, exist_ok=True)
        for name in names:
            os.replace(os.path.join(staging, name), os.path.join(folder, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
