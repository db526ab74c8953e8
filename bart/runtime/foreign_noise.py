"""Lines other libraries log on import that say nothing to this project's users, dropped by name.

transformers 5.x imports torchao (a base requirement: ``--fp8``) whenever it loads a model (its torchao
quantizer is imported by every ``from_pretrained``), and so does CTranslate2's converter through
transformers. torchao's import then logs, on stderr, one line per optional C++/CUDA kernel library its
wheel ships that this build of torch cannot load (``Failed to load .../torchao/_C_mxfp8...so``, or
``Skipping import of cpp extensions ...`` where torch is older than its kernels), and torch logs a
deprecation for each Enum that torchao registers with ``torch.utils._pytree``. The project uses none of
those kernels (float8 training's products are torch's ``_scaled_mm``) and cannot act on the deprecation.

:func:`drop_known_noise` puts a :class:`logging.Filter` on those two loggers that drops exactly the
records in :data:`KNOWN_NOISE` (logger, the record's test, why it says nothing); every other record of
those loggers, and every other logger, is untouched. ``import bart`` installs it once per process, so it
applies to whatever loads transformers after that: ``python -m bart.export`` (its verify step and the
CTranslate2 conversion), the entry scripts, and a user's own ``AutoModel.from_pretrained`` in a program
that imported ``bart``.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import NamedTuple


class Noise(NamedTuple):
    logger: str
    matches: Callable[[logging.LogRecord], bool]
    why: str


def _torchao_kernel_library(record: logging.LogRecord) -> bool:
    message = str(record.msg)
    return message.startswith("Failed to load ") and "torchao" in message and ".so" in message or \
        message.startswith("Skipping import of cpp extensions")


def _torchao_enum_deprecation(record: logging.LogRecord) -> bool:
    registered = record.args[0] if isinstance(record.args, tuple) and record.args else None
    return "is an Enum subclass and is now natively supported" in str(record.msg) and \
        str(getattr(registered, "__module__", "")).startswith("torchao")


def _torchao_without_triton(record: logging.LogRecord) -> bool:
    return str(record.msg).startswith("Warning: Detected no triton")


KNOWN_NOISE = (
    Noise("torchao", _torchao_kernel_library,
          "torchao's optional C++/CUDA kernel libraries that this build of torch cannot load; none is used here"),
    Noise("torchao.kernel.intmm", _torchao_without_triton,
          "torchao's int8 Triton kernels, absent without Triton (CPU); none is used here (shown where a program "
          "configures logging)"),
    Noise("torch.utils._pytree", _torchao_enum_deprecation,
          "torch's deprecation of torchao's own pytree registration of its Enums; torchao's to change"),
)


def _torch_dtype_deprecation(record: logging.LogRecord) -> bool:
    return str(record.msg).startswith("`torch_dtype` is deprecated!")


# CTranslate2 4.x's converter loads the model with transformers' ``torch_dtype=``, which transformers 5.x calls
# deprecated: dropped only while the project runs the converter (a user's own torch_dtype keeps its warning)
CONVERTER_NOISE = tuple(Noise(name, _torch_dtype_deprecation, "CTranslate2's converter passes transformers' old "
                              "torch_dtype argument; CTranslate2's to change")
                        for name in ("transformers.modeling_utils", "transformers.configuration_utils"))


class _DropKnown(logging.Filter):
    def __init__(self, noises: tuple):
        super().__init__()
        self.noises = noises

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(noise.matches(record) for noise in self.noises)


@contextlib.contextmanager
def dropped(noises: tuple):
    """The records of ``noises`` dropped for the block only."""
    installed = []
    for name in dict.fromkeys(noise.logger for noise in noises):
        installed.append((logging.getLogger(name), _DropKnown(tuple(n for n in noises if n.logger == name))))
        installed[-1][0].addFilter(installed[-1][1])
    try:
        yield
    finally:
        for logger, found in installed:
            logger.removeFilter(found)


def drop_known_noise() -> None:
    """Install the filters of :data:`KNOWN_NOISE` (once per logger; calling again changes nothing)."""
    for name in dict.fromkeys(noise.logger for noise in KNOWN_NOISE):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropKnown) for f in logger.filters):
            logger.addFilter(_DropKnown(tuple(noise for noise in KNOWN_NOISE if noise.logger == name)))


@contextlib.contextmanager
def no_transformers_progress_bars():
    """transformers' own progress bars ("Loading weights") off for the block: a command that loads a model
    with transformers as one step of its work (bart.export's check, CTranslate2's converter) shows its own
    output, not transformers'."""
    from transformers.utils import logging as transformers_logging

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers_logging.enable_progress_bar()
