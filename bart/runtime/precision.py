"""Numeric precision of a run, in one place: the flags, the autocast dtype, TF32, the loss scaler.

    fp32  plain fp32 matrix products (TF32 off)
    tf32  fp32 parameters and activations, TF32 matrix products on Ampere+ (the default)
    bf16  bf16 autocast, fp32 master weights
    fp16  fp16 autocast with a dynamic loss scale (torch.amp.GradScaler), fp32 master weights
    fp8   the linear layers' products in float8 (torchao's float8 training: e4m3 activations and weights,
          e5m2 gradients, one dynamic scale per tensor), bf16 autocast for the rest, fp32 master weights;
          CUDA compute capability >= 8.9 (Ada, Hopper, Blackwell), or ``--fp8_emulate`` (any device: the
          float8 rounding in higher-precision products, for tests). Which layers is the model's choice
          (BART's: bart/training/float8.py, applied once by the builder)

A run makes its ``Precision`` once, from the final flags at parse time (``settings.precision``, made with the
run's settings record, :class:`bart.cli.settings.Settings`, from its precision section), and hands it to the trainer,
validation, prediction and evaluation; every autocast of the project is opened by
:meth:`Precision.autocast`. To add a precision, add its name to ``PRECISIONS`` and say here what it
means for the autocast dtype, TF32 and the scaler; the training loop and evaluation follow, and its flag takes
the places docs/ARCHITECTURE.md's "a precision" row names (the Settings field, the resume check, the scripts' values).

These are the precisions of training and (all but fp8, a training precision) of run_eval.py's forward pass
(autocast over fp32 weights). The
weights a model *decodes* with (``run_eval.py --decode_precision fp32|bf16|int8``) are another concept, whose
one home is ``bart/generation/precision.py`` (it refuses a reduced decode precision next to --bf16/--fp16).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
from dataclasses import dataclass

import torch

from bart.errors import UserError

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}
FP8_LIBRARY = "torchao==0.18.0"  # what --fp8 converts the linear layers with (as pinned in requirements.txt)
FP8_MIN_CAPABILITY = (8, 9)      # float8 tensor cores
# The precision flags (destinations) and their defaults: what from_args reads, what a run's record holds
FLAGS = {"fp16": False, "bf16": False, "tf32": True, "fp8": False, "fp8_emulate": False}
FLAGS_SAID = "--fp16/--bf16/--fp8/--no-tf32"  # how a run's precision is chosen, in a message


def autocast_in_effect(device_type: str) -> torch.dtype | None:
    """The dtype autocast computes in on ``device_type`` at this point, None where it is off (or where there is no
    autocast: the meta device, where tests take shapes). Safe inside a compiled model: torch 2.11's dynamo cannot
    trace ``torch.amp.is_autocast_available`` (a graph break, and each break one more graph to compile: the fused
    loss made bart-large's compile 3 graphs and 100 s on an H200), so while compiling, which is never on the meta
    device, it is not asked."""
    if not (torch.compiler.is_compiling() or torch.amp.is_autocast_available(device_type)):
        return None
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


class TrainingOnly(argparse.Action):
    """A training precision's flag on an evaluation command line (run_eval.py's --fp8): refused in one line."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is a training precision (float8 linear layers): an fp8 run's checkpoints "
                     f"hold the same fp32 weights as a bf16 run's; evaluate them with --bf16")


@dataclass(frozen=True)
class Precision:
    name: str = "tf32"
    allow_tf32: bool = True  # --no-tf32 with --bf16/--fp16/--fp8: the fp32 parts stay strict fp32
    emulate_fp8: bool = False  # --fp8_emulate: float8 rounding in higher-precision products (any device)

    def __post_init__(self) -> None:
        if self.name not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.name!r}")
        if self.emulate_fp8 and self.name != "fp8":
            raise ValueError(f"emulate_fp8 is an fp8 setting, the precision is {self.name}")

    def __str__(self) -> str:  # as run_config.json and a checkpoint's run arguments record it
        return self.name

    @staticmethod
    def check_flags(fp16: bool = False, bf16: bool = False, fp8: bool = False, fp8_emulate: bool = False) -> None:
        """The flags' rules, checked as they are parsed: one of --fp16, --bf16 and --fp8; --fp8_emulate with --fp8."""
        chosen = [flag for flag, on in (("--fp16", fp16), ("--bf16", bf16), ("--fp8", fp8)) if on]
        if len(chosen) > 1:
            raise UserError(f"{' with '.join(chosen)}: choose one of --fp16, --bf16 and --fp8"
                            + (" (--fp8 already runs the rest of the model under bf16 autocast)" if fp8 else ""))
        if fp8_emulate and not fp8:
            raise UserError("--fp8_emulate emulates --fp8's float8 products: add --fp8, or drop --fp8_emulate")

    @classmethod
    def from_flags(cls, fp16: bool = False, bf16: bool = False, tf32: bool = True, fp8: bool = False,
                   fp8_emulate: bool = False) -> Precision:
        cls.check_flags(fp16, bf16, fp8, fp8_emulate)
        name = "fp16" if fp16 else "bf16" if bf16 else "fp8" if fp8 else "tf32" if tf32 else "fp32"
        return cls(name, allow_tf32=tf32, emulate_fp8=fp8_emulate)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Precision:
        return cls.from_flags(**{flag: getattr(args, flag, default) for flag, default in FLAGS.items()})

    @classmethod
    def from_record(cls, args: dict) -> Precision | None:
        """The precision a run's recorded flags chose (a checkpoint's or run_config.json's ``args``); None where
        they were not recorded or contradict each other."""
        if not {"fp16", "bf16"} <= args.keys():
            return None
        try:
            return cls.from_flags(**{flag: bool(args.get(flag, default)) for flag, default in FLAGS.items()})
        except ValueError:
            return None

    @property
    def uses_float8(self) -> bool:
        """The model's linear layers are to be converted to float8 ones (see the module docstring)."""
        return self.name == "fp8"

    def require_supported(self) -> None:
        """One line (:class:`UserError`) where this precision cannot be honoured here, before anything is built:
        --fp8 needs torchao, and (unless emulated) every visible GPU of compute capability >= 8.9."""
        if not self.uses_float8:
            return
        if importlib.util.find_spec("torchao") is None:
            raise UserError(f"--fp8 trains through torchao's float8 linear layers and torchao is not installed: "
                            f"pip install {FP8_LIBRARY}")
        if self.emulate_fp8:
            return
        need = ".".join(map(str, FP8_MIN_CAPABILITY))
        if not torch.cuda.is_available():
            raise UserError(f"--fp8 needs an NVIDIA GPU of compute capability {need} or later (float8 tensor cores: "
                            f"Ada, Hopper, Blackwell) and no CUDA GPU is visible: train with --bf16, or add "
                            f"--fp8_emulate to emulate the float8 products (slow; for tests)")
        for index in range(torch.cuda.device_count()):
            capability = torch.cuda.get_device_capability(index)
            if capability < FP8_MIN_CAPABILITY:
                raise UserError(f"--fp8 needs an NVIDIA GPU of compute capability {need} or later (float8 tensor "
                                f"cores); GPU {index} ({torch.cuda.get_device_name(index)}) has "
                                f"{capability[0]}.{capability[1]}: train with --bf16 on it")

    @property
    def autocast_dtype(self) -> torch.dtype | None:
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

    def grad_scaler(self, device_type: str) -> torch.amp.GradScaler | None:
        return torch.amp.GradScaler(device_type) if self.uses_loss_scaling else None


FP32 = Precision("fp32", allow_tf32=False)  # plain fp32, no autocast: the default of library calls given none
