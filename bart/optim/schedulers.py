"""Learning-rate schedules with linear warmup (values equal transformers' ``get_*_schedule_with_warmup``).

Each run's schedule counts that run's own optimizer updates from 0: a phase-2 run (started with
``--phase1_end_step``) only *numbers* its updates after phase 1's in logs and checkpoint names.
To add a schedule: a branch in :func:`lr_factor` and its name in ``SCHEDULES``.
"""
from __future__ import annotations

import math

from torch.optim.lr_scheduler import LambdaLR

SCHEDULES = ("linear", "cosine", "cosine_w_restarts", "polynomial", "constant")


def _warmup(step: int, warmup_steps: int) -> float | None:
    return step / max(1, warmup_steps) if step < warmup_steps else None


def lr_factor(name: str, step: int, warmup_steps: int, total_steps: int, base_lr: float,
              lr_end: float = 1e-7, power: float = 1.0, num_cycles: float | None = None) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based)."""
    warm = _warmup(step, warmup_steps)
    if warm is not None:
        return warm
    decay_steps = max(1, total_steps - warmup_steps)
    progress = (step - warmup_steps) / decay_steps
    if name == "constant":
        return 1.0
    if name == "linear":
        return max(0.0, (total_steps - step) / decay_steps)
    if name == "cosine":
        cycles = 0.5 if num_cycles is None else num_cycles
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * cycles * 2.0 * progress)))
    if name == "cosine_w_restarts":
        cycles = 1 if num_cycles is None else num_cycles
        if progress >= 1.0:
            return 0.0
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((cycles * progress) % 1.0))))
    if name == "polynomial":
        if lr_end > base_lr:
            raise ValueError(f"polynomial schedule: lr_end {lr_end} must not exceed the learning rate {base_lr}")
        if step > total_steps:
            return lr_end / base_lr
        remaining = 1 - (step - warmup_steps) / decay_steps
        return ((base_lr - lr_end) * remaining ** power + lr_end) / base_lr
    raise ValueError(f"unknown lr scheduler {name!r}; choose one of {SCHEDULES}")


def build_scheduler(optimizer, name: str, warmup_steps: int, total_steps: int, lr_end: float = 1e-7,
                    power: float = 1.0, num_cycles: float | None = None) -> LambdaLR:
    """A LambdaLR (checkpointable through state_dict) following ``name``; see :func:`lr_factor`."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown lr scheduler {name!r}; choose one of {SCHEDULES}")
    if total_steps <= 0 or warmup_steps < 0:
        raise ValueError(f"scheduler needs total_steps > 0 and warmup_steps >= 0, got {total_steps}, {warmup_steps}")
    base_lrs = [group["lr"] for group in optimizer.param_groups]

    def factor_for(base_lr):
        return lambda step: lr_factor(name, step, warmup_steps, total_steps, base_lr,
                                      lr_end, power, num_cycles)

    return LambdaLR(optimizer, [factor_for(lr) for lr in base_lrs])
