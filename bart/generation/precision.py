"""Decode precision: the numbers a model decodes with, chosen knowingly (``run_eval.py --decode_precision``).

    fp32  the model as given (the default; the only one token-identical to transformers' fp32 generate);
          with ``packed`` (on CPU unless compiling or under --bf16/--fp16 autocast, :func:`decodes_packed`:
          run_eval.py's decoding copy, and plain ``model.generate`` through :func:`packed_beside`) a copy whose
          linear layers hold their weights in oneDNN's blocked layout (:class:`PackedLinear`, the exact
          GELU fused into the first feed-forward product): the same tokens in the tests and in every row
          of the benchmark, products 1.9-5x faster than MKL's on the test CPU (an AMD EPYC, where MKL's
          sgemm ran at about half of oneDNN's speed from a decode step's 4 rows to an encoder's 2,048)
    bf16  a bf16 copy of the model (weights and activations; on CPU oneDNN runs its products with
          avx512_bf16/AMX where the CPU has them; with ``packed``, run_eval.py's CPU bf16, on prepacked
          weights: the same values, 1.1-2x faster per product); the logits (rounded to bf16 by the LM
          head's product) are taken to fp32 before the processors
    int8  a copy with every ``nn.Linear`` (the tied LM head included) dynamically quantized to int8
          (``torch.ao.quantization.quantize_dynamic``: int8 weights, activations quantized per call);
          embeddings and layer norms stay fp32. CPU only (quantized kernels are fbgemm/oneDNN's).
          The activations' int8 scale is per tensor, over all rows of a product: a row's tokens can
          depend on the other rows decoded with it (the batch, finished sources leaving it, the compiled
          step keeping them), so int8 outputs are close to fp32's, not a fixed function of one source.

Measured (one decode step of beam search, bart-base, batch 8 x 4 beams, 512-token sources, 2 threads on
the 2-core avx512_bf16 test CPU, medians of 10 interleaved, load 1.9): fp32 68.1 ms; bf16 autocast over the
fp32 weights 66.0 ms (1.03x: every product casts its weights again); the bf16 copy 32.0 ms (2.13x, chosen);
int8 with the LM head quantized 22.0 ms (3.09x, chosen), with an fp32 LM head 40.9 ms (1.67x). Packed
(later, load 0.6-0.8, medians of 16 steps): fp32 packed 36.7 ms, bf16 35.4 ms unpacked, 30.3 ms packed.

This is one home for decode precision. How it relates to the training precision flags of
:mod:`bart.runtime.precision` (``--bf16``/``--fp16``, which are *autocast* over fp32 weights, for training and
for ``run_eval.py``'s forward pass): ``--decode_precision`` changes the weights the model decodes
with. The two are not combined: ``--decode_precision bf16|int8`` with ``--bf16``/``--fp16`` is refused
in one line (:func:`check_decode_precision`): autocast over a bf16 copy is the copy, and autocast
over int8 layers would run the remaining fp32 layers in half precision unasked. ``--bf16`` alone stays
what it was (bf16 autocast, fp32 weights). Token agreement with fp32 and the ROUGE change are measured
by ``benchmarks/bench_generation.py``; :func:`prepare_for_decoding` never changes the model it is given.
"""
from __future__ import annotations

import copy
import itertools
import warnings
import weakref

import torch
from torch import nn
from torch.nn import functional as F

from bart.errors import UserError

DECODE_PRECISIONS = ("fp32", "bf16", "int8")


def check_decode_precision(precision: str, training_precision: str | None = None, device=None) -> None:
    """One line (:class:`UserError`) for a decode precision that cannot be honoured: an unknown name, a
    reduced precision combined with ``--bf16``/``--fp16`` autocast (``training_precision``), int8 off CPU."""
    if precision not in DECODE_PRECISIONS:
        raise UserError(f"--decode_precision {precision!r} is not one of {', '.join(DECODE_PRECISIONS)}")
    if precision != "fp32" and training_precision in ("bf16", "fp16"):
        raise UserError(f"--decode_precision {precision} with --{training_precision}: the two contradict each other "
                        f"(--{training_precision} is autocast over fp32 weights, --decode_precision {precision} decodes "
                        f"with {precision} weights); drop one of them")
    if precision == "int8" and device is not None and torch.device(device).type != "cpu":
        raise UserError(f"--decode_precision int8 runs on CPU only (dynamically quantized int8 linear layers), the "
                        f"model is on {torch.device(device)}; use --decode_precision bf16 there or --device cpu")


def prepare_for_decoding(model: nn.Module, precision: str = "fp32", packed: bool = False) -> nn.Module:
    """The model to decode with at ``precision`` (one of :data:`DECODE_PRECISIONS`), in eval mode.
    ``fp32`` returns ``model`` itself, or with ``packed`` on CPU a copy whose linear layers and LM head
    hold their weights in oneDNN's blocked layout (:func:`pack_linears`: the same products, token-identical
    decoding, 1.3-1.5x faster end to end on the test CPU); ``bf16`` and ``int8`` return a modified copy (the
    given model is never changed: its weights, dtype, modules and training mode stay as they were)."""
    check_decode_precision(precision, device=_device(model))
    made = _decoding_copy_kind(model)
    if made is not None:
        raise UserError(f"prepare_for_decoding: the model given is already a decoding copy ({made}); prepare "
                        f"the {precision} copy from the model itself")
    if precision == "fp32":
        return pack_linears(model) if packed and can_pack(model) and _dtype(model) == torch.float32 else model
    decoded = copy.deepcopy(model).eval()
    if precision == "bf16":
        decoded = decoded.to(torch.bfloat16)
        return _pack_in_place(decoded) if packed and can_pack(decoded) else decoded
    decoded = decoded.float()
    # the LM head is tied to the embeddings: quantizing it gives the head its own int8 copy, the
    # embedding table stays fp32
    with warnings.catch_warnings():  # torch 2.10+: eager-mode quantization is "deprecated" (still supported)
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(decoded, {nn.Linear}, dtype=torch.qint8, inplace=True)


def decodes_packed(compile_generation=False, autocast: bool = False) -> bool:
    """The decoding policy: on CPU, decode with packed linear layers (:class:`PackedLinear`) unless compiling
    (their oneDNN weights are opaque to ``torch.compile``) or under autocast (a packed product would bypass it
    and run in the weights' precision). Where packing applies at all is :func:`can_pack`'s. ``run_eval.py``
    (its decoding copy), ``model.generate`` (the copy beside the model) and the benchmarks follow it."""
    return not compile_generation and not autocast


def for_decoding(model: nn.Module, precision: str = "fp32", compile_generation=False,
                 autocast: bool = False) -> nn.Module:
    """run_eval.py's one call: the model to decode with at ``precision`` on the model's device (int8 is CPU's: one
    line elsewhere), packed on CPU as :func:`decodes_packed` says for ``compile_generation`` and ``autocast``
    (:func:`prepare_for_decoding`). The contradiction with --bf16/--fp16 is refused at parse time
    (:func:`check_decode_precision`, a rule of the run's settings)."""
    return prepare_for_decoding(model, precision, packed=decodes_packed(compile_generation, autocast))


# -- the packed copy beside a model: plain ``model.generate()`` on CPU decodes with it ---------------------
_BESIDE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (fingerprint, packed copy)


def packed_beside(model: nn.Module) -> nn.Module | None:
    """The packed decoding copy of ``model`` that ``generate`` decodes with on CPU (token-identical to the
    model's own weights, 1.3-2x faster), or None where it does not apply: a model in training mode, not
    fp32 on CPU with oneDNN, sharded (DTensor) parameters, or already a decoding copy.

    The copy is kept beside the model, never in it: the model's parameters, buffers, modules,
    ``state_dict()`` and training are untouched. It shares the model's tensors (embeddings, norms, biases,
    config) and holds only the linear layers' weights in oneDNN's blocked layout, made on first use. It is
    made again when any parameter or buffer changes (an optimizer step or ``load_state_dict`` writes in
    place: the tensor's version counter moves; ``.to()``, a replaced tensor: another storage), and dropped
    when the model goes to training (:func:`forget_packed`, called by ``train()``) or is deleted."""
    if model.training or not _packs_plainly(model):
        forget_packed(model)
        return None
    stamp = _fingerprint(model)
    held = _BESIDE.get(model)
    if held is not None and held[0] == stamp:
        return held[1]
    forget_packed(model)  # the stale copy goes before the new one is made
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    shared[id(getattr(model, "config", None))] = getattr(model, "config", None)
    packed = _pack_in_place(copy.deepcopy(model, shared).eval())  # the modules copied, the tensors shared
    _BESIDE[model] = (stamp, packed)
    return packed


def forget_packed(model: nn.Module) -> None:
    """Drop the packed copy kept beside ``model`` (its memory goes with it)."""
    _BESIDE.pop(model, None)


def _packs_plainly(model: nn.Module) -> bool:
    return (_dtype(model) == torch.float32 and all(type(p.data) is torch.Tensor for p in model.parameters())
            and can_pack(model) and _decoding_copy_kind(model) is None)


def _fingerprint(model: nn.Module) -> tuple:
    """What tells that a model's tensors changed: each one's identity, storage, version counter, dtype and
    device (a few microseconds per tensor)."""
    return tuple((id(t), t.data_ptr(), t._version, t.dtype, t.device)
                 for t in itertools.chain(model.parameters(), model.buffers()))


def can_pack(model: nn.Module) -> bool:
    """Whether packing applies: an fp32 model on CPU, or a bf16 one where oneDNN runs bf16 natively, with
    oneDNN's packed-linear kernels in this torch build."""
    device, dtype = _device(model), _dtype(model)
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False  # oneDNN would emulate bf16 on this CPU
    return (device is not None and device.type == "cpu" and dtype in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available() and _has_packed_kernels())


def _has_packed_kernels() -> bool:
    try:
        return bool(torch.ops.mkldnn._reorder_linear_weight and torch.ops.mkldnn._linear_pointwise)
    except (AttributeError, RuntimeError):  # a torch build without them
        return False


class PackedLinear(nn.Module):
    """An fp32 ``nn.Linear`` for decoding on CPU, its weight held in oneDNN's blocked layout
    (``torch.ops.mkldnn._reorder_linear_weight``, once) and its product taken by oneDNN on the dense input
    (``torch.ops.mkldnn._linear_pointwise``, the kernel torch.compile's CPU backend uses for packed
    linear layers): no repacking of the weight and no conversion of the activations per call. On the
    2-core AMD EPYC test machine this ran 1.9-5x faster than ``F.linear`` (MKL's sgemm) for bart-base's
    shapes, from a decode step's 4 rows to an encoder's 2,048 (the LM head over 4 rows 3.3 ms against 16.1),
    and 1.1-2.6x faster than the earlier form that converted the activations to and from oneDNN
    tensors around ``mkldnn_linear`` (the same values bit for bit). No ``weight`` attribute: code that
    reads a plain linear's weight (the training path, the LM head's MKL orientations in
    ``Decoder.lm_head``) calls the module instead. Inference only (no autograd through the weight)."""

    def __init__(self, linear: nn.Linear, gelu: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().contiguous()  # float32 or bfloat16 (can_pack)
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        self.bias = linear.bias.detach().contiguous() if linear.bias is not None else None
        # with ``gelu``, the exact (erf) GELU is applied in the product's epilogue: F.gelu of the output
        # bit for bit (checked by the tests), without a pass over the feed-forward's widest activations
        self.attr, self.algorithm = ("gelu", "none") if gelu else ("none", "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, self.attr, [], self.algorithm)

    def extra_repr(self) -> str:
        fused = ", then exact GELU" if self.attr == "gelu" else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN blocked layout{fused}"


def pack_linears(model: nn.Module) -> nn.Module:
    """A copy of ``model`` (fp32, CPU) for decoding whose every ``nn.Linear``, the tied LM head included,
    is a :class:`PackedLinear`; embeddings and norms are shared with nothing (a deep copy: the given model
    is not changed). The copy's products are oneDNN's instead of MKL's: each value may differ from the
    model's by float rounding (as MKL's orientations already differ from transformers'); the
    token-identity tests decode with both."""
    return _pack_in_place(copy.deepcopy(model).eval())


def _pack_in_place(packed: nn.Module) -> nn.Module:
    for module in list(packed.modules()):
        # a feed-forward block whose activation is the exact GELU (``activation_function`` "gelu", BART's)
        # gets it inside its first product; the layer's own activation becomes the identity
        # (fp32 only: in bf16 the epilogue's GELU of the unrounded product is not F.gelu of the rounded one)
        fc1 = getattr(module, "fc1", None)
        if getattr(module, "activation", None) is F.gelu and type(fc1) is nn.Linear and fc1.weight.dtype == torch.float32:
            module.fc1, module.activation = PackedLinear(module.fc1, gelu=True), _identity
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child))
    return packed


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _decoding_copy_kind(model: nn.Module) -> str | None:
    """What :func:`prepare_for_decoding` made of ``model``, if it made it: "packed" or "int8"; else None."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    for module in model.modules():
        if isinstance(module, PackedLinear):
            return "packed"
        if isinstance(module, DynamicQuantizedLinear):
            return "int8"
    return None


def _dtype(model: nn.Module):
    for tensor in model.parameters():
        return tensor.dtype
    return None


def _device(model: nn.Module):
    for tensor in model.parameters():
        return tensor.device
    return None
