"""``generate(compile_generation=...)``: the decoder's per-token step as one function of fixed-shape tensors
under ``torch.compile``.

    False                    the eager step (the default)
    True / "default"         torch.compile (inductor) of the static step; CPU or GPU
    "reduce-overhead"        the same function compiled with CUDA graphs (GPU; on CPU inductor ignores the
                             graphs and it runs as "default")

The static step (:class:`CompiledDecoder`) takes one new token per row, the position as a (1,) device
tensor, the preallocated self-attention cache of :class:`~bart.generation.cache.StaticCache` (read
over all ``max_length`` positions with a mask, so the shapes never change from step to step; the step's
keys/values are returned and written into their slot with one ``index_copy_``), the cross-attention keys/values projected once per source and
the encoder mask; it returns the fp32 logits of the LM head. Nothing in it reads a Python number that
changes per step, so one graph serves the whole call (and every later call of the same shapes). The
running batch keeps its rows: finished sources are not compacted away (that would change the shapes),
their rows idle on pad tokens as in transformers, so results are the same sequences. The first step of
a multi-token decoder prompt (``decoder_input_ids``) runs eager. The logits processors and the beam
bookkeeping stay the eager, tensor-shaped code of :mod:`bart.generation.greedy` and :mod:`bart.generation.beam` (no Python per beam; one
host sync per step, the stopping check).

Tokens equal the eager path's wherever float rounding does not flip a choice: the compiled kernels
round differently from eager ones (fused layer norms, another GEMM orientation for the LM head), as the
eager path already differs from transformers by rounding; tests/generation/test_generation_compiled.py checks token
identity on greedy and beam settings. Measured (one beam-search decode step, bart-base, 4 beams,
512-token sources, 2 threads on the 2-core test CPU, medians of 10 interleaved, load 0.9-1.3): batch 1
eager 26.1 ms, compiled 25.6 ms; batch 8 eager 71.8 ms, compiled 75.0 ms; bf16 batch 8 eager 34.0 ms,
compiled 36.8 ms. The step is bound by its GEMMs (84% of an eager step at batch 1: reading the weights),
which inductor hands to the same MKL/oneDNN kernels, and the eager step's Python costs ~2 ms; so on CPU the
compiled step is not faster and eager stays the default. Compile time: 2-10 s per shape (bart-base).
"""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from bart.generation.cache import StaticLayerCache, padding_mask_to_bool
from bart.generation.session import Decoder

MODES = {True: "default", "default": "default", "reduce-overhead": "reduce-overhead"}


def compile_mode(value) -> str | None:
    """None for the eager step, else the ``torch.compile`` mode; ValueError naming the value otherwise."""
    if value is False or value is None:
        return None
    if isinstance(value, (bool, str)) and value in MODES:
        return MODES[value]
    raise ValueError(f"generate: compile_generation must be False, True, 'default' or 'reduce-overhead', got {value!r}")


class _PositionCache(StaticLayerCache):
    """One layer's view of the cache for the static step: the keys/values read are the cache's (every
    position; the mask hides the unwritten ones) with this step's key/value in the slot ``slot`` marks.
    Nothing is written here: a graph that wrote into a slice of its input cache copied the whole buffer
    per layer (functionalization), 13 ms of a 40 ms step at batch 1; the new keys/values are returned and
    written by the caller with one ``index_copy_``."""

    def __init__(self, key: torch.Tensor, value: torch.Tensor, cross: tuple, slot: torch.Tensor, new: list) -> None:
        self.key, self.value, self._cross, self.slot, self.new = key, value, cross, slot, new

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.new.extend((key, value))
        return torch.where(self.slot, key, self.key), torch.where(self.slot, value, self.value)

    @property
    def cross(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._cross


def static_step(model, token: torch.Tensor, position: torch.Tensor, kv: torch.Tensor, cross: list,
                cross_mask: torch.Tensor | None, head: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 logits (N, V) of the next token after ``token`` (N, 1) at ``position`` ((1,) long), the step's
    keys/values (layers, 2, N, H, 1, Dh) for the cache's slot ``position``); ``kv``: the (layers, 2, N, H,
    max_length, Dh) self-attention cache, read only. ``head=False``: the last hidden states (N, D) instead
    of the logits (the caller applies the LM head)."""
    decoder = model.model.decoder
    embed = decoder.embed_positions
    hidden = decoder.embed_tokens(token) * decoder.embed_scale
    hidden = hidden + embed.weight.index_select(0, position + embed.offset).to(hidden.dtype)
    hidden = decoder.layernorm_embedding(hidden)
    places = torch.arange(kv.shape[4], device=kv.device)
    self_mask = (places <= position).view(1, 1, 1, -1)
    slot = (places == position).view(1, 1, -1, 1)
    new: list = []
    for i, layer in enumerate(decoder.layers):
        hidden, _ = layer(hidden, None, cross_mask, self_mask, _PositionCache(kv[i, 0], kv[i, 1], cross[i], slot, new))
    written = torch.stack(new).view(kv.shape[0], 2, *new[0].shape)
    hidden = decoder.final_norm(hidden)[:, -1]
    if not head:
        return hidden, written
    bias = model.final_logits_bias[0]
    head_module = model.lm_head
    vocab = model.config.vocab_size  # the product over the padded rows, the tokenizer's columns returned
    if isinstance(getattr(head_module, "weight", None), torch.Tensor):
        return F.linear(hidden, head_module.weight, bias.to(hidden.dtype))[:, :vocab].float(), written
    return (head_module(hidden).float() + bias)[:, :vocab], written  # an int8 dynamically quantized head


_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _compiled(model, mode: str):
    per_model = _COMPILED.setdefault(model, {})
    if mode not in per_model:
        per_model[mode] = torch.compile(lambda *args: static_step(model, *args), mode=mode, dynamic=False,
                                        fullgraph=False)
    return per_model[mode]


def make_decoder(model, encoder_hidden, encoder_mask, rows_per_source: int, max_length: int, mode: str):
    class CompiledDecoder(Decoder):
        """The :class:`~bart.generation.session.Decoder` whose one-token steps run the compiled static step;
        its rows stay fixed for the call (``fixed_rows``: the search keeps finished sources)."""
        fixed_rows = True

        def __init__(self):
            super().__init__(model, encoder_hidden, encoder_mask, True, rows_per_source, max_length)
            cache = self.cache
            cache.mapped = False  # the captured step reads the buffer rows as the rows (a reorder moves them all)
            cache.buffer.zero_()  # positions not yet written are read (masked): no NaN from torch.empty
            cache.spare = torch.zeros_like(cache.buffer)
            if mode == "reduce-overhead":  # CUDA graphs: the cache buffers (graph inputs) keep fixed addresses
                torch._dynamo.mark_static_address(cache.buffer)
                torch._dynamo.mark_static_address(cache.spare)
            self.cross_mask = None if encoder_mask is None else padding_mask_to_bool(encoder_mask)
            self.position = torch.zeros(1, dtype=torch.long, device=encoder_hidden.device)
            self.step = _compiled(model, mode)
            self.mode = mode
            # on CPU the LM head stays the eager one (Decoder.lm_head: MKL's fast orientation for few rows, vocabulary
            # slices for many, into the logits buffer); measured faster there than the compiled product
            self.head = encoder_hidden.device.type != "cpu"

        def next_logits(self, tokens: torch.Tensor) -> torch.Tensor:
            cache = self.cache
            new = tokens[:, cache.length:]
            if new.shape[1] != 1 or cache.rows != tokens.shape[0]:
                return super().next_logits(tokens)  # a decoder prompt's first step
            self.position.fill_(cache.length)
            if self.mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            out, written = self.step(new.contiguous(), self.position, cache.buffer, cache.cross, self.cross_mask,
                                     self.head)
            cache.buffer.index_copy_(4, self.position, written)  # the step's keys/values into their slot
            cache.length += 1
            # valid until the next step, as the eager decoder's buffer
            return out if self.head else self.lm_head(out)

    return CompiledDecoder()
