"""The vocabulary padded for the hardware: the one home of the padded rows.

The model's embedding (shared with the LM head) and ``final_logits_bias`` hold
``padded_vocab_size(config)`` rows: the tokenizer's ``vocab_size`` rounded up to a multiple of
``config.pad_vocab_to_multiple_of`` (128 by default; 1 turns padding off). With 50,265 words the LM
head's products were (tokens x 1024) @ (1024 x 50,265): no tensor-core kernel takes an odd
dimension, so the GPU ran them on alignment-1 kernels (26% of a training step). Padded to 50,304
every product of the model has dimensions that are multiples of 64.

The padded rows are zero, are never looked up (token ids stay below ``vocab_size``), and never
predicted: the model computes its logits over all rows (the aligned product) and hands out the real
columns only (a view), and the loss sees the padded columns at -inf (``head_bias``): softmax gives them
nothing, so they get no gradient and the loss, the real rows' gradients and every generated token are
those of the unpadded model.

Files never show the padding: ``config.vocab_size`` stays the tokenizer's, and the model's
``state_dict()`` holds ``vocab_size`` rows (a post-hook cuts them: views), as transformers' does, so every
file written from it (Hugging Face folders, export, project checkpoints, ``final_step.ckpt``) has the
tokenizer's rows; ``load_state_dict`` fits any rows (a file written before padding, an NGC/fairseq/
Hugging Face file, one padded to another multiple) to the model's (a pre-hook). Under FSDP the sharded
tensors stay whole and the trainer cuts the gathered ones. Optimizer state (internal: by parameter)
keeps the padded rows; one saved before padding is fitted (``fit_optimizer_rows``), so such a run resumes.
"""
from __future__ import annotations

import torch

# state-dict names (last parts) of the tensors with one row per vocabulary entry, and that axis
VOCAB_TENSORS = {"shared.weight": 0, "embed_tokens.weight": 0, "lm_head.weight": 0, "final_logits_bias": 1}
DEFAULT_MULTIPLE = 128


def padded_vocab_size(config) -> int:
    """``config.vocab_size`` rounded up to a multiple of ``config.pad_vocab_to_multiple_of``."""
    multiple = max(1, int(getattr(config, "pad_vocab_to_multiple_of", DEFAULT_MULTIPLE) or 1))
    return -(-config.vocab_size // multiple) * multiple


def vocab_axis(key: str) -> int | None:
    """The vocabulary axis of the state-dict entry ``key``, or None for any other tensor."""
    for name, axis in VOCAB_TENSORS.items():
        if key == name or key.endswith("." + name):
            return axis
    return None


def fit_rows(tensor: torch.Tensor, rows: int, axis: int) -> torch.Tensor:
    """``tensor`` with ``rows`` entries along ``axis``: cut (a view), or padded with zeros."""
    have = tensor.shape[axis]
    if have == rows:
        return tensor
    if have > rows:
        return tensor.narrow(axis, 0, rows)
    shape = list(tensor.shape)
    shape[axis] = rows - have
    return torch.cat([tensor, tensor.new_zeros(shape)], dim=axis)


def is_padding_of(rows: int, vocab_size: int) -> bool:
    """Are ``rows`` entries ``vocab_size`` ones, or those padded to a multiple of a power of two (8 to 1024)?"""
    return rows == vocab_size or (rows > vocab_size and any(
        rows == -(-vocab_size // multiple) * multiple for multiple in (8, 16, 32, 64, 128, 256, 512, 1024)))


def fit_vocab_rows(state: dict, rows: int, vocab_size: int) -> dict:
    """A new dict: each vocabulary tensor of ``state`` (the embedding, LM head, final_logits_bias) fitted to
    ``rows`` entries, when it holds ``vocab_size`` or a padded count of them (``is_padding_of``); anything else
    as it is (another model size stays for the loader to report). Tied tensors stay one tensor."""
    out, done = {}, {}
    for key, value in state.items():
        axis = vocab_axis(key)
        if axis is None or not isinstance(value, torch.Tensor) or value.dim() <= axis \
                or value.shape[axis] == rows or not is_padding_of(value.shape[axis], vocab_size):
            out[key] = value
            continue
        if id(value) not in done:
            done[id(value)] = fit_rows(value, rows, axis)
        out[key] = done[id(value)]
    return out


def unpadded_state_dict(model) -> dict:
    """``model.state_dict()`` as files hold it: vocabulary tensors cut to ``config.vocab_size`` rows (views)."""
    vocab = model.config.vocab_size
    return fit_vocab_rows(model.state_dict(), vocab, vocab)


def unpad_state(state: dict, vocab_size: int) -> dict:
    """A state dict (e.g. the full one a strategy gathered) with its vocabulary tensors cut to ``vocab_size``."""
    return fit_vocab_rows(state, vocab_size, vocab_size)


def head_bias(bias: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The LM head's bias over all its rows for the loss: ``bias`` on the real columns, -inf on the padded ones."""
    if bias.shape[-1] == vocab_size:
        return bias
    return bias.masked_fill(torch.arange(bias.shape[-1], device=bias.device) >= vocab_size, float("-inf"))


def fit_optimizer_rows(optimizer_state: dict, params: dict, vocab_size: int) -> dict:
    """Optimizer state (torch's layout: ``state`` keyed by index or parameter name, ``param_groups`` listing
    them) with the per-parameter tensors of the vocabulary parameters fitted to the parameter's rows (zeros for
    padded rows: a run saved before padding resumes). ``params``: index or name -> parameter, as the keys."""
    state = optimizer_state.get("state")
    if not isinstance(state, dict):
        return optimizer_state
    fitted = {}
    for key, entry in state.items():
        param = params.get(key)
        if param is None or not isinstance(entry, dict) or param.dim() == 0:
            fitted[key] = entry
            continue
        rows = param.shape[0]
        fitted[key] = {name: (fit_rows(value, rows, 0)
                              if isinstance(value, torch.Tensor) and value.dim() == param.dim()
                              and value.shape[1:] == param.shape[1:] and value.shape[0] != rows
                              and is_padding_of(value.shape[0], vocab_size) else value)
                       for name, value in entry.items()}
    return {**optimizer_state, "state": fitted}
