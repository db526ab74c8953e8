"""``--fp8``: BART's linear layers as torchao's ``Float8Linear`` (the precision itself: bart/runtime/precision.py).

A converted layer computes its three products (forward, gradient of the input, gradient of the weight) in
float8 with one dynamic scale per tensor (torchao's "tensorwise" recipe: e4m3 activations and weights, e5m2
gradients); everything else runs under the run's bf16 autocast, and the optimizer keeps fp32 master weights.

Kept in bf16 (:func:`float8_filter`):
- the LM head: tied to the token embeddings, its product is taken from the weight directly
  (``lm_logits``, the chunked loss of ``--fused_cross_entropy``), not through a linear layer to convert (its
  padded 50,304 rows would be a multiple of 16; the tie is why it stays);
- the first layer (``model.encoder.layers.0``: it reads the embeddings) and the last
  (``model.decoder.layers.{N-1}``: it feeds the LM head), as float8 recipes for stability do; with them in
  fp8 too the emulated loss stays as close to bf16's (tests/training/test_trainer.py), so the GPU run may try both;
- any linear layer whose input or output size is not a multiple of 16 (float8 matrix products need it).

Float8 products are training's: outside training (``model.eval()``: validation's loss and generation,
``--do_predict``, any decoding of the converted model) a converted layer computes as the ``nn.Linear`` it replaced,
from its high-precision weight under the run's bf16 autocast (:func:`training_float8_class`). So an fp8 run's
validation and predictions are the tokens of its weights decoded in bf16, those ``run_eval.py --bf16`` and the
export give (tests/e2e/test_matrix.py); torchao's float8 tensors would also refuse generation's inference mode.

Checkpoints are unchanged: ``Float8Linear`` holds the ``nn.Linear``'s own ``weight``/``bias`` Parameters
(same names, shapes, fp32) and no buffers, so state dicts, resumes, export and Hugging Face loading are a
bf16 run's. Attention's fused q/k/v product (one GEMM over the concatenated weights) runs per layer for
converted projections (``BartAttention._project``), each with its own scale.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

from torch import nn
from torch.nn import functional as F

from bart.configuration.configuration_bart import BartConfig
from bart.errors import UserError
from bart.runtime.precision import FP8_LIBRARY


def kept_in_bf16(config: BartConfig) -> tuple[str, ...]:
    """Module-name prefixes whose linear layers stay out of float8: the LM head, the first and last layer."""
    return ("lm_head.", "model.encoder.layers.0.", f"model.decoder.layers.{config.decoder_layers - 1}.")


def float8_filter(config: BartConfig) -> Callable[[nn.Module, str], bool]:
    """torchao's ``module_filter_fn``: True for the linear layers to convert."""
    kept = kept_in_bf16(config)

    def convert(module: nn.Module, name: str) -> bool:
        if not isinstance(module, nn.Linear) or any((name + ".").startswith(prefix) for prefix in kept):
            return False
        return module.in_features % 16 == 0 and module.out_features % 16 == 0

    return convert


@functools.cache
def training_float8_class() -> type:
    """torchao's ``Float8Linear`` whose float8 products are training's only: in eval mode it is the ``nn.Linear``
    it replaced (the high-precision weight's product, bf16 under the run's autocast). Same parameters, no buffer
    of its own: the state dict is ``Float8Linear``'s, which is ``nn.Linear``'s."""
    from torchao.float8.float8_linear import Float8Linear

    class TrainingFloat8Linear(Float8Linear):
        def forward(self, input):
            if self.training:
                return super().forward(input)
            return F.linear(input, self.weight, self.bias)

    return TrainingFloat8Linear


def is_float8(module: nn.Module) -> bool:
    """A linear layer converted by :func:`convert_to_float8` (without importing torchao)."""
    return any(cls.__name__ == "Float8Linear" for cls in type(module).__mro__)


def convert_to_float8(model: nn.Module, emulate: bool = False) -> list[str]:
    """Replace ``model``'s linear layers by ``Float8Linear`` in place (before the strategy wraps and
    ``--compile`` compiles it); ``emulate``: torchao's emulation (any device). Returns the converted names."""
    config = model.config
    selected = float8_filter(config)
    converted = [name for name, module in model.named_modules() if selected(module, name)]
    if not converted:  # --fp8 would be --bf16 under another name
        raise UserError(f"--fp8 finds no linear layer to run in float8 in this model ({config.encoder_layers} encoder "
                        f"and {config.decoder_layers} decoder layers, d_model {config.d_model}): the LM head, the first "
                        f"and the last layer stay in bf16 and float8 products need sizes that are multiples of 16; "
                        f"train it with --bf16")
    try:
        # torchao's import lines about kernels float8 training does not use: dropped (bart/runtime/foreign_noise.py)
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as err:
        raise UserError(f"--fp8 needs torchao's float8 training, which does not import ({err}): "
                        f"pip install {FP8_LIBRARY}") from err
    # pad_inner_dim: the weight gradient's product runs over the batch's tokens, any number of them (fine-tuning's
    # batches): padded to a multiple of 16 there, as float8 products need
    convert_to_float8_training(model, module_filter_fn=selected,
                               config=Float8LinearConfig(emulate=emulate, pad_inner_dim=True))
    # torchao's conversion as it is (its compile fixes included), then each converted layer's class narrowed to
    # the subclass whose eval mode is the high-precision product (same instance, same parameters)
    training_only = training_float8_class()
    for name in converted:
        model.get_submodule(name).__class__ = training_only
    return converted


def float8_summary(model: nn.Module) -> str:
    """How many linear layers compute in float8 (for the run's banner)."""
    float8 = sum(is_float8(m) for m in model.modules())
    linear = sum(isinstance(m, nn.Linear) for m in model.modules())
    emulated = any(getattr(getattr(m, "config", None), "emulate", False) for m in model.modules() if is_float8(m))
    return (f"float8 linear layers {float8} of {linear} (torchao{', emulated' if emulated else ''}; LM head, "
            f"first and last layer in bf16)")
