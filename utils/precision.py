"""Numeric precision of a run, in one place: the flags, the autocast dtype, TF32, the loss scaler.

    fp32  plain fp32 matrix products (TF32 off)
    tf32  fp32 parameters and activations, TF32 matrix products on Ampere+ (the default)
    bf16  bf16 autocast, fp32 master weights
    fp16  fp16 autocast with a dynamic loss scale (torch.amp.GradScaler), fp32 master weights

To add a precision (say fp8), add its name to ``PRECISIONS`` and say here what it means for the
autocast dtype, TF32 and the scaler; the training loop, evaluation and the flags follow.

These are the precisions of training and of run_eval.py's forward pass (autocast over fp32 weights). The
weights a model *decodes* with (``run_eval.py --decode_precision fp32|bf16|int8``) are another concept, whose
one home is ``bart/generation/precision.py`` (it refuses a reduced decode precision next to --bf16/--fp16).
"""
from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass
from typing import Optional

import torch

from utils.errors import UserError

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def add_precision_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("precision")
    group.add_argument("--fp16", action="store_true", help="fp16 autocast with loss scaling")
    group.add_argument("--bf16", action="store_true", help="bf16 autocast")
    group.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True,
                       help="TF32 matmuls on Ampere+ for the fp32 parts (--no-tf32 for strict fp32)")


@dataclass(frozen=True)
class Precision:
    name: str = "tf32"
    allow_tf32: bool = True  # --no-tf32 with --bf16/--fp16: the fp32 parts stay strict fp32

    def __post_init__(self) -> None:
        if self.name not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.name!r}")

    @classmethod
    def from_flags(cls, fp16: bool = False, bf16: bool = False, tf32: bool = True) -> "Precision":
        if fp16 and bf16:
            raise UserError("choose one of --fp16 and --bf16")
        return cls("fp16" if fp16 else "bf16" if bf16 else "tf32" if tf32 else "fp32", allow_tf32=tf32)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Precision":
        return cls.from_flags(args.fp16, args.bf16, args.tf32)

    @property
    def autocast_dtype(self) -> Optional[torch.dtype]:
        """The autocast dtype, or None when the run computes in fp32."""
        return _AUTOCAST.get(self.name)

    @property
    def uses_loss_scaling(self) -> bool:
        return self.name == "fp16"

    def configure(self) -> None:
        """TF32 matrix products/convolutions on Ampere+ unless plain fp32 was asked for (process-wide)."""
        allow = self.name != "fp32" and self.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow

    def autocast(self, device_type: str):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type, dtype=self.autocast_dtype)

    def grad_scaler(self, device_type: str) -> Optional[torch.amp.GradScaler]:
        return torch.amp.GradScaler(device_type) if self.uses_loss_scaling else None
