"""The decode session of one ``generate`` call: the encoder output shared by every hypothesis, the
decoder's cache, the LM head into per-call buffers, and which rows are finished.

The encoder runs once per source and each decoder layer projects the encoder output to keys and
values once; beams share them (the decoder folds beams into the query length), so nothing of the
source is repeated ``num_beams`` times. The self-attention cache is a preallocated
:class:`~bart.generation.cache.StaticCache`: a step writes its position in place, and beam
search reorders the filled positions with one ``index_select(out=)`` into a second buffer. The
logits and log-probs of a step go to buffers made once per call and the score processors work in
place, so a decode step allocates nothing of size rows x vocab or rows x cache (on a machine where
fresh memory is expensive, e.g. page faults in a VM, those allocations were most of the time).
Sources that are done leave the running batch: their decoder rows, cache rows and bookkeeping are
compacted away (:meth:`Decoder.keep_sources`), so finished rows stop costing work.
"""
from __future__ import annotations

import torch

from bart.generation.cache import StaticCache
from bart.generation.options import GenerationOptions
from bart.runtime.precision import autocast_in_effect

_LM_HEAD_SLICE = 1024  # vocabulary rows per LM-head product on CPU (see Decoder.lm_head)


class Decoder:
    """One incremental decoder over the shared encoder output; the cache lives here.

    With ``use_cache`` the cache is a :class:`StaticCache` made once for the whole call: cross
    K/V projected once per source, self K/V written in place. The logits and log-probs of a step
    go to two buffers made at the first step (the one with the most rows), so a step allocates
    nothing of size rows x vocab. The tensors ``next_logits`` / ``log_softmax`` return are those
    buffers: valid until the next step (clone what must outlive it)."""

    def __init__(self, model, encoder_hidden: torch.Tensor, encoder_mask: torch.Tensor, use_cache: bool,
                 rows_per_source: int = 1, max_length: int = 0, mapped: bool = True):
        """``mapped``: a beam reorder copies only the histories it must, reading on the host how many
        (:meth:`StaticCache.reorder`); False: it gathers every live row, with no read."""
        self.model, self.encoder_hidden, self.encoder_mask = model, encoder_hidden, encoder_mask
        self.cache = None
        if use_cache:
            layers = model.model.decoder.layers
            cross = [layer.encoder_attn.project_kv(encoder_hidden) for layer in layers]
            attention = layers[0].self_attn
            self.cache = StaticCache(len(layers), encoder_hidden.shape[0] * rows_per_source, attention.num_heads,
                                     attention.head_dim, max_length, cross, cross[0][0].dtype, encoder_hidden.device)
            self.cache.mapped = mapped
        self.logits_buffer: torch.Tensor | None = None
        self.log_probs_buffer: torch.Tensor | None = None
        self.transposed_buffer: torch.Tensor | None = None  # CPU, < 16 rows: the (V, N) product of lm_head
        self.slice_buffer: torch.Tensor | None = None  # CPU, >= 16 rows: one (N, 1024) slice of the logits

    def next_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """float32 logits of the next token for every row of ``tokens`` (N, L)."""
        decoder = self.model.model.decoder
        if self.cache is not None:
            hidden, _ = decoder(tokens[:, self.cache.length:], self.encoder_hidden, self.encoder_mask,
                                past_key_values=self.cache)
        else:
            hidden, _ = decoder(tokens, self.encoder_hidden, self.encoder_mask)
        return self.lm_head(hidden[:, -1])

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits (N, V) of the last hidden states ``hidden`` (N, D): the tokenizer's V columns of
        the product over the LM head's (padded) rows, a view of the logits buffer (see ``_head``); the padded
        rows' columns are never returned, so never processed, predicted or sampled."""
        return self._head(hidden)[:, :self.model.config.vocab_size]

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits (N, V') over all rows V' of the (padded: bart.modeling.vocab_padding) LM head, into
        the logits buffer.

        On CPU in float32, below 16 rows the product is taken as weight @ hidden^T (vocab rows, the
        few decoder rows as columns) into a (V, N) buffer and transposed once into the logits: MKL
        runs this orientation 1.2-2x faster for so few rows; its values differ from hidden @ weight^T
        by float rounding, as the fused bias already made them differ from transformers'
        linear-then-add. From 16 rows on it is hidden @ weight^T in slices of 1,024 vocabulary rows
        (each slice's (N, 1024) product stays in the cache before it is copied into the logits):
        the same values as one product (each logit is the same dot product), 1.1-1.4x faster on one
        thread and up to 1.15x on two than the transposed orientation (bart-base, 16-256 rows,
        MKL 2024.2, measured on the 2-core test machine)."""
        rows, vocab = hidden.shape[0], self.model.final_logits_bias.shape[1]
        if self.logits_buffer is None:
            self.logits_buffer = torch.empty(rows, vocab, dtype=torch.float32, device=hidden.device)
        out = self.logits_buffer[:rows]
        weight, bias = getattr(self.model.lm_head, "weight", None), self.model.final_logits_bias[0]
        if not isinstance(weight, torch.Tensor):  # an int8 dynamically quantized head (decode precision int8)
            return torch.add(self.model.lm_head(hidden), bias, out=out)
        if hidden.dtype == weight.dtype == bias.dtype == torch.float32 and autocast_in_effect(hidden.device.type) is None:
            if hidden.device.type != "cpu":
                return torch.addmm(bias, hidden, weight.t(), out=out)  # what F.linear computes, into the buffer
            if rows >= 16:
                if self.slice_buffer is None:
                    self.slice_buffer = torch.empty(rows * _LM_HEAD_SLICE, dtype=torch.float32)
                for start in range(0, vocab, _LM_HEAD_SLICE):
                    end = min(start + _LM_HEAD_SLICE, vocab)
                    part = self.slice_buffer[:rows * (end - start)].view(rows, end - start)
                    out[:, start:end].copy_(torch.addmm(bias[start:end], hidden, weight[start:end].t(), out=part))
                return out
            if self.transposed_buffer is None:
                self.transposed_buffer = torch.empty(vocab * rows, dtype=torch.float32)
            transposed = self.transposed_buffer[:vocab * rows].view(vocab, rows)
            return out.copy_(torch.addmm(bias[:, None], weight, hidden.t(), out=transposed).t())
        return out.copy_(self.model.padded_logits(hidden))

    def log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        if self.log_probs_buffer is None:
            self.log_probs_buffer = torch.empty_like(logits)
        return torch._log_softmax(logits, -1, False, out=self.log_probs_buffer[:logits.shape[0]])

    def reorder(self, rows: torch.Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(rows)

    def keep_sources(self, sources: list[int], rows: torch.Tensor) -> None:
        """Only ``sources`` (increasing indices into the live sources) stay; ``rows``: the decoder rows
        that stay, in their next order (indices into the live rows)."""
        index = torch.tensor(sources, device=self.encoder_mask.device)
        self.encoder_mask = self.encoder_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.keep_sources(sources, rows)
        else:
            self.encoder_hidden = self.encoder_hidden.index_select(0, index)


def is_eos(tokens: torch.Tensor, opts: GenerationOptions) -> torch.Tensor:
    if opts.eos_token_id is None:
        return torch.zeros_like(tokens, dtype=torch.bool)
    return tokens == opts.eos_token_id


def drops_finished(opts: GenerationOptions) -> bool:
    """Whether finished sources leave the running batch. Not when sampling (the draws over fewer rows
    would differ from transformers', which draws for every row), with ``output_scores`` (the scores
    of finished rows are part of the output) nor with the caller's processors or criteria (they see
    every row, as in transformers)."""
    return not (opts.do_sample or opts.output_scores or opts.logits_processor or opts.stopping_criteria)


def default_attention_mask(input_ids: torch.Tensor, opts: GenerationOptions) -> torch.Tensor:
    """transformers' rule: pad positions are masked when pad occurs in the input and is not EOS."""
    pad_in_input = bool((input_ids == opts.pad_token_id).any())
    if pad_in_input and opts.pad_token_id != opts.eos_token_id:
        return (input_ids != opts.pad_token_id).long()
    return torch.ones_like(input_ids)
