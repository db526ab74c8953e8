"""LAMB with multi-tensor (``torch._foreach_*``) kernels, computing apex's FusedLAMB math.

One step (fp32 state):
1. one global L2 norm over all gradients; if it exceeds ``max_grad_norm`` every gradient is
   scaled by ``max_grad_norm / norm`` (so no separate clip_grad_norm_ call is needed);
2. per group: ``m = b1*m + (1-b1)*g`` (``grad_averaging``), ``v = b2*v + (1-b2)*g^2``,
   ``u = (m/bc1) / (sqrt(v/bc2) + eps)`` plus ``wd * p`` (decoupled decay, ``adam_w_mode``);
3. per tensor: ``p -= lr * ||p|| / ||u|| * u`` when the group decays (or ``use_nvlamb``) and
   both norms are positive, else ``p -= lr * u``.
Under ``torch.amp.GradScaler`` the scaler unscales the gradients before ``step`` and skips the
step (the step counter included) when they hold inf/nan. Nothing here reads a value back to
the host, so a step never waits for the device.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch


class Lamb(torch.optim.Optimizer):
    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, bias_correction: bool = True,
                 grad_averaging: bool = True, adam_w_mode: bool = True, max_grad_norm: float = 1.0,
                 use_nvlamb: bool = False) -> None:
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"Lamb: invalid lr {lr}, eps {eps} or betas {betas}")
        if not adam_w_mode:
            raise NotImplementedError("Lamb: only adam_w_mode=True (decoupled weight decay) is implemented")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction,
                        grad_averaging=grad_averaging, max_grad_norm=max_grad_norm, use_nvlamb=use_nvlamb)
        super().__init__(params, defaults)
        self.last_grad_norm: torch.Tensor | None = None
        for group in self.param_groups:
            for p in group["params"]:
                if p.dtype != torch.float32:
                    raise TypeError(f"Lamb keeps fp32 parameters and state; got a {p.dtype} parameter "
                                    f"{tuple(p.shape)} (train with autocast, not a half-precision model)")

    def _grads(self):
        return [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = self._grads()
        if not grads:
            return loss
        # 1. global gradient norm and clipping factor (stays on the device)
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        self.last_grad_norm = norm
        max_norm = self.defaults["max_grad_norm"]
        clip = torch.clamp(max_norm / (norm + 1e-12), max=1.0) if max_norm and max_norm > 0 else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update_group(group, params, clip)
        return loss

    def _update_group(self, group: dict, params: list[torch.Tensor], clip) -> None:
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        if clip is not None:
            grads = torch._foreach_mul(grads, clip)
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        states = [self.state[p] for p in params]
        steps = [s["step"] for s in states]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        torch._foreach_add_(steps, 1.0)
        step = steps[0]
        if group["bias_correction"]:
            bc1, bc2 = 1 - beta1 ** step, 1 - beta2 ** step
        else:
            bc1 = bc2 = torch.ones((), device=step.device)
        beta3 = 1 - beta1 if group["grad_averaging"] else 1.0
        # 2. moments and the Adam direction
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=beta3)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        denom = torch._foreach_div(exp_avg_sqs, bc2)
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(exp_avgs, bc1)
        torch._foreach_div_(update, denom)
        weight_decay = group["weight_decay"]
        if weight_decay != 0:
            torch._foreach_add_(update, params, alpha=weight_decay)
        # 3. per-tensor trust ratio
        lr = group["lr"]
        if weight_decay != 0 or group["use_nvlamb"]:
            p_norms = torch.stack(torch._foreach_norm(params))
            u_norms = torch.stack(torch._foreach_norm(update))
            ratios = torch.where((p_norms > 0) & (u_norms > 0), p_norms / u_norms, torch.ones_like(p_norms))
            scaled = torch._foreach_mul(update, list((ratios * -lr).unbind(0)))
            torch._foreach_add_(params, scaled)
        else:
            torch._foreach_add_(params, update, alpha=-lr)
