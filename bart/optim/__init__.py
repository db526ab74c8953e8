"""Optimizers (multi-tensor LAMB, AdamW) with weight-decay groups, and LR schedules."""
from __future__ import annotations

import torch

from bart.optim.lamb import Lamb
from bart.optim.schedulers import SCHEDULES, build_scheduler, lr_factor

__all__ = ["Lamb", "build_optimizer", "build_scheduler", "lr_factor", "SCHEDULES", "decay_groups"]


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay for matrices and embeddings only: parameters with fewer than 2 dimensions
    (biases, LayerNorm weights) are not decayed. Grouped by dimension, not by name."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _apex_lamb():
    try:
        from apex.optimizers import FusedLAMB
        return FusedLAMB
    except Exception:  # apex is optional: absent or built without CUDA extensions
        return None


def build_optimizer(model: torch.nn.Module, name: str, lr: float, weight_decay: float,
                    betas=(0.9, 0.999), eps: float = 1e-6, max_grad_norm: float = 1.0,
                    use_nvlamb: bool = False, prefer_apex: bool = True):
    """Returns ``(optimizer, clips_internally)``. LAMB clips by the global norm itself; for AdamW the
    training loop calls ``clip_grad_norm_``. apex's FusedLAMB is used when importable on CUDA."""
    groups = decay_groups(model, weight_decay)
    on_cuda = next(model.parameters()).is_cuda
    if name == "lamb":
        apex_lamb = _apex_lamb() if (prefer_apex and on_cuda) else None
        if apex_lamb is not None:
            return apex_lamb(groups, lr=lr, betas=betas, eps=eps, max_grad_norm=max_grad_norm,
                             use_nvlamb=use_nvlamb), True
        return Lamb(groups, lr=lr, betas=betas, eps=eps, max_grad_norm=max_grad_norm, use_nvlamb=use_nvlamb), True
    if name == "adamw":
        kind = {"fused": True} if on_cuda else {"foreach": True}
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **kind), False
    raise ValueError(f"unknown optimizer {name!r}; choose 'lamb' or 'adamw'")
