"""The linear layers' weights cast to the autocast dtype once per optimizer update (``--cast_weights_once``).

Under bf16/fp16 autocast each forward pass casts every linear layer's fp32 weight and bias (autocast keeps the cast
of a parameter for the rest of its context, so within one forward a weight is cast once), and the fused Q/K/V and
K/V products concatenate their fp32 weights and cast the concatenation at every call. An update of N micro-batches
opens N autocast contexts: N casts of every weight and N concatenations.

:func:`cast_once` makes them once for the whole update: each linear layer's weight and bias, and each attention's
concatenated projections, in the autocast dtype, as tensors of the autograd graph (their gradients reach the fp32
parameters through the cast, as autocast's do), which the model's products use while the context is open. The
values are autocast's: the same products, the same losses. The backward passes still convert each micro-batch's
gradients to fp32 (into the fp32 ``.grad`` every micro-batch adds to).

Only plain ``nn.Linear`` layers are cast (``--fp8``'s float8 layers own their products); the chunked LM head of
``--fused_cross_entropy`` casts its own chunks (``lm_head=False``).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

_CAST = "_cast_for_update"  # the attribute (in the module's __dict__) that holds a module's casts while open


def linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``, with the weight and bias :func:`cast_once` cast for this update where it did."""
    cast = layer.__dict__.get(_CAST)
    return layer(x) if cast is None else F.linear(x, *cast)


def projections(attention: nn.Module, names: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The concatenated weight and bias of ``attention``'s projections ``names`` ("qkv" or "kv") cast for this
    update, or None."""
    return attention.__dict__.get(_CAST, {}).get(names)


def head_weight(lm_head: nn.Module):
    """The LM head's weight: cast for this update where :func:`cast_once` did, else its own ``weight`` (None for a
    head without one)."""
    cast = lm_head.__dict__.get(_CAST)
    return getattr(lm_head, "weight", None) if cast is None else cast[0]


def _plain(layer: nn.Module) -> bool:
    return type(layer) is nn.Linear


@contextlib.contextmanager
def cast_once(model: nn.Module, dtype: torch.dtype | None, lm_head: bool = True):
    """While open, ``model``'s (a BartForConditionalGeneration) linear products use its weights cast to ``dtype``
    once, here; None: nothing is cast (no autocast). ``lm_head``: the LM head's weight too."""
    marked: list[nn.Module] = []

    def mark(module: nn.Module, cast) -> None:
        module.__dict__[_CAST] = cast
        marked.append(module)

    def cast_linear(layer: nn.Linear) -> tuple:
        return layer.weight.to(dtype), None if layer.bias is None else layer.bias.to(dtype)

    try:
        if dtype is not None:
            for layer in model.layers():
                attentions = [(layer.self_attn, "qkv")]
                if hasattr(layer, "encoder_attn"):  # cross-attention: the queries apart, keys and values together
                    attentions.append((layer.encoder_attn, "kv"))
                for attention, names in attentions:
                    fused = [getattr(attention, f"{name}_proj") for name in names]
                    if all(_plain(p) for p in fused):
                        mark(attention, {names: (torch.cat([p.weight for p in fused]).to(dtype),
                                                 torch.cat([p.bias for p in fused]).to(dtype))})
                    others = [attention.out_proj] + ([attention.q_proj] if names == "kv" else [])
                    for other in others:
                        if _plain(other):
                            mark(other, cast_linear(other))
                for fc in (layer.fc1, layer.fc2):
                    if _plain(fc):
                        mark(fc, cast_linear(fc))
            if lm_head and _plain(model.lm_head):
                mark(model.lm_head, (model.lm_head.weight.to(dtype), None))
        yield
    finally:
        for module in marked:
            module.__dict__.pop(_CAST, None)
