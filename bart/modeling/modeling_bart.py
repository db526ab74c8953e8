"""BART encoder-decoder (post-LN, as in the paper) and its Pre-LN variant (as in mBART).

Parameter names follow Hugging Face ``BartForConditionalGeneration`` (and mBART's ``layer_norm``
after each stack for Pre-LN), so Hugging Face weights load with ``strict=True``. Attention runs
through ``torch.nn.functional.scaled_dot_product_attention``; nothing in the forward pass syncs
with the host. Weight loading and saving live in :mod:`bart.modeling.weights`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bart.configuration.configuration_bart import BartConfig
from bart.generation import generate
from bart.generation.cache import StaticCache, StaticLayerCache, padding_mask_to_bool
from bart.generation.precision import forget_packed
from bart.modeling.cross_entropy import cross_entropy, linear_cross_entropy
from bart.modeling.vocab_padding import fit_vocab_rows, head_bias, padded_vocab_size
from bart.modeling.weight_casts import head_weight, linear, projections

# One decoder layer's cache: (self_key, self_value, cross_key, cross_value), each (B, H, T, Dh).
LayerCache = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


_ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_python": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
}


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from labels: prepend ``decoder_start_token_id``, drop the last token, -100 → pad."""
    shifted = labels.new_empty(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == -100, pad_token_id)




@dataclass
class Seq2SeqLMOutput:
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    past_key_values: list[LayerCache] | None = None
    encoder_last_hidden_state: torch.Tensor | None = None

    def __getitem__(self, key: str):
        return getattr(self, key)


@dataclass
class Seq2SeqModelOutput:
    last_hidden_state: torch.Tensor
    past_key_values: list[LayerCache] | None = None
    encoder_last_hidden_state: torch.Tensor | None = None


class BartLearnedPositionalEmbedding(nn.Embedding):
    """Learned positions; BART reserves the first two rows (offset 2)."""

    offset = 2

    def __init__(self, num_positions: int, embedding_dim: int) -> None:
        super().__init__(num_positions + self.offset, embedding_dim)

    def forward(self, seq_len: int, past_length: int = 0) -> torch.Tensor:  # type: ignore[override]
        if past_length + seq_len > self.num_embeddings - self.offset:
            raise ValueError(f"sequence length {past_length + seq_len} exceeds max_position_embeddings "
                             f"{self.num_embeddings - self.offset}")
        positions = torch.arange(past_length, past_length + seq_len, device=self.weight.device)
        return super().forward(positions + self.offset)


class BartAttention(nn.Module):
    """Multi-head attention with SDPA.

    For cross-attention the key/value batch may be smaller than the query batch by an integer
    factor r (beam search: one encoder output per source, r beams per source); the beams are folded
    into the query length so keys and values are never repeated.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

    def _project(self, states: torch.Tensor, names: str) -> tuple[torch.Tensor, ...]:
        """Several projections (``names``: "qkv", "kv") of the same states, split into heads. In training as ONE matrix
        multiplication (fewer GEMMs forward and backward; the weights are concatenated per call, not
        stored fused, so parameter names stay Hugging Face's). Without autograd (generation, one token
        per step, bound by reading weights) that copy would cost more than it saves: one GEMM each. Layers
        that own their product (``--fp8``'s ``Float8Linear``: a scale per weight) also run one GEMM each. Under
        :func:`~bart.modeling.weight_casts.cast_once` the concatenation made for the update is used."""
        cast = projections(self, names)
        if cast is not None:
            return tuple(self._heads(x) for x in F.linear(states, *cast).split(self.embed_dim, dim=-1))
        layers = [getattr(self, f"{name}_proj") for name in names]
        if not torch.is_grad_enabled() or any(type(p) is not nn.Linear for p in layers):
            return tuple(self._heads(p(states)) for p in layers)
        weight = torch.cat([p.weight for p in layers])
        bias = torch.cat([p.bias for p in layers])
        return tuple(self._heads(x) for x in F.linear(states, weight, bias).split(self.embed_dim, dim=-1))

    def project_kv(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._project(states, "kv")

    def project_qkv(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._project(states, "qkv")

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value: tuple[torch.Tensor, torch.Tensor] | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        query: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``key_value`` are projected (B_kv, H, S, Dh) keys/values; None → self-attention.
        ``query``: the already projected (B, H, T, Dh) queries, when the caller projected them."""
        batch, q_len, _ = hidden_states.shape
        if key_value is None:
            query, key, value = self.project_qkv(hidden_states)
        else:
            key, value = key_value
            if query is None:
                query = self._heads(linear(self.q_proj, hidden_states))
        fold = batch // key.shape[0]
        if fold > 1:  # (B*r, H, T, Dh) → (B, H, r*T, Dh)
            query = query.view(key.shape[0], fold, self.num_heads, q_len, self.head_dim)
            query = query.transpose(1, 2).reshape(key.shape[0], self.num_heads, fold * q_len, self.head_dim)
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, is_causal=is_causal and attn_mask is None,
            dropout_p=self.dropout if self.training else 0.0)
        if fold > 1:
            out = out.view(key.shape[0], self.num_heads, fold, q_len, self.head_dim).transpose(1, 2)
            out = out.reshape(batch, self.num_heads, q_len, self.head_dim)
        return linear(self.out_proj, out.transpose(1, 2).reshape(batch, q_len, self.embed_dim))


class _Residual:
    """The one place where Pre-LN and post-LN differ: where the norm sits around a branch."""

    @staticmethod
    def apply(x: torch.Tensor, norm: nn.LayerNorm, branch, dropout: float, training: bool, pre_ln: bool):
        if pre_ln:
            return x + F.dropout(branch(norm(x)), dropout, training)
        return norm(x + F.dropout(branch(x), dropout, training))


class _Layer(nn.Module):
    """What encoder and decoder layers share: self-attention, the feed-forward block, their norms."""

    def __init__(self, config: BartConfig, heads: int, ffn_dim: int) -> None:
        super().__init__()
        dim = config.d_model
        self.pre_ln, self.dropout = config.pre_ln, config.dropout
        self.activation_dropout = config.activation_dropout
        self.activation = _ACTIVATIONS[config.activation_function]
        self.self_attn = BartAttention(dim, heads, config.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, dim)
        self.final_layer_norm = nn.LayerNorm(dim)

    def _ffn(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self.fc2, F.dropout(self.activation(linear(self.fc1, x)), self.activation_dropout, self.training))

    def _residual(self, x: torch.Tensor, norm: nn.LayerNorm, branch) -> torch.Tensor:
        return _Residual.apply(x, norm, branch, self.dropout, self.training, self.pre_ln)


class BartEncoderLayer(_Layer):
    def __init__(self, config: BartConfig) -> None:
        super().__init__(config, config.encoder_attention_heads, config.encoder_ffn_dim)

    def forward(self, hidden: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        hidden = self._residual(hidden, self.self_attn_layer_norm, lambda h: self.self_attn(h, attn_mask=attn_mask))
        return self._residual(hidden, self.final_layer_norm, self._ffn)


class BartDecoderLayer(_Layer):
    def __init__(self, config: BartConfig) -> None:
        super().__init__(config, config.decoder_attention_heads, config.decoder_ffn_dim)
        self.encoder_attn = BartAttention(config.d_model, config.decoder_attention_heads, config.attention_dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)

    def _self_attention(self, h, self_mask, past, new_cache: list):
        query, key, value = self.self_attn.project_qkv(h)
        if isinstance(past, StaticLayerCache):
            key, value = past.append(key, value)
        elif past is not None:
            key, value = torch.cat([past[0], key], dim=2), torch.cat([past[1], value], dim=2)
        new_cache.extend((key, value))
        # A single new query over a cache sees every key: no causal mask needed.
        causal = self_mask is None and h.shape[1] > 1
        return self.self_attn(h, key_value=(key, value), attn_mask=self_mask, is_causal=causal, query=query)

    def forward(self, hidden, encoder_hidden, cross_mask, self_mask=None, past=None, use_cache: bool = False):
        """``past``: a :data:`LayerCache` (grown by concatenation, returned anew) or a
        :class:`StaticLayerCache` (written in place; then no cache is returned)."""
        new_cache: list[torch.Tensor] = []
        hidden = self._residual(hidden, self.self_attn_layer_norm,
                                lambda h: self._self_attention(h, self_mask, past, new_cache))
        if isinstance(past, StaticLayerCache):
            cross_kv, use_cache = past.cross, False
        elif past is not None:
            cross_kv = (past[2], past[3])
        else:
            cross_kv = self.encoder_attn.project_kv(encoder_hidden)
        hidden = self._residual(hidden, self.encoder_attn_layer_norm,
                                lambda h: self.encoder_attn(h, key_value=cross_kv, attn_mask=cross_mask))
        hidden = self._residual(hidden, self.final_layer_norm, self._ffn)
        cache = (new_cache[0], new_cache[1], cross_kv[0], cross_kv[1]) if use_cache else None
        return hidden, cache


class _Stack(nn.Module):
    """What encoder and decoder share: token and position embeddings, their norm, the final norm."""

    def __init__(self, config: BartConfig, embed_tokens: nn.Embedding, layer_cls, num_layers: int, layerdrop: float):
        super().__init__()
        self.config = config
        self.dropout, self.layerdrop = config.dropout, layerdrop
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = embed_tokens
        self.embed_positions = BartLearnedPositionalEmbedding(config.max_position_embeddings, config.d_model)
        self.layers = nn.ModuleList(layer_cls(config) for _ in range(num_layers))
        self.layernorm_embedding = nn.LayerNorm(config.d_model)
        if config.pre_ln:
            self.layer_norm = nn.LayerNorm(config.d_model)
        self.gradient_checkpointing = bool(getattr(config, "gradient_checkpointing", False))

    def embed(self, input_ids: torch.Tensor, past_length: int = 0,
              token_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """``token_embeddings``: ``embed_tokens(input_ids)`` when the caller already looked them up."""
        if token_embeddings is None:
            token_embeddings = self.embed_tokens(input_ids)
        tokens = token_embeddings * self.embed_scale
        hidden = tokens + self.embed_positions(input_ids.shape[1], past_length).to(tokens.dtype)
        return F.dropout(self.layernorm_embedding(hidden), self.dropout, self.training)

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(hidden) if self.config.pre_ln else hidden

    def drop_layer(self) -> bool:
        # LayerDrop (training only). The draw happens on the host's RNG: no device sync.
        return self.training and self.layerdrop > 0 and torch.rand(()).item() < self.layerdrop

    def run_layer(self, layer, *args):
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(layer, *args, use_reentrant=False)
        return layer(*args)


class BartEncoder(_Stack):
    def __init__(self, config: BartConfig, embed_tokens: nn.Embedding) -> None:
        super().__init__(config, embed_tokens, BartEncoderLayer, config.encoder_layers, config.encoder_layerdrop)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.embed(input_ids, token_embeddings=token_embeddings)
        attn_mask = None if attention_mask is None else padding_mask_to_bool(attention_mask)
        for layer in self.layers:
            if not self.drop_layer():
                hidden = self.run_layer(layer, hidden, attn_mask)
        return self.final_norm(hidden)


class BartDecoder(_Stack):
    def __init__(self, config: BartConfig, embed_tokens: nn.Embedding) -> None:
        super().__init__(config, embed_tokens, BartDecoderLayer, config.decoder_layers, config.decoder_layerdrop)

    @staticmethod
    def _self_mask(attention_mask: torch.Tensor | None, q_len: int, past_length: int,
                   device: torch.device) -> torch.Tensor | None:
        """Boolean causal (+ padding) mask. None where SDPA's ``is_causal`` (no cache, no padding) or
        no mask at all (one new token over a cache) is exact."""
        if attention_mask is None and (past_length == 0 or q_len == 1):
            return None
        total = past_length + q_len
        keep = torch.ones(q_len, total, dtype=torch.bool, device=device).tril(past_length)[None, None]
        if attention_mask is not None:
            keep = keep & attention_mask[:, None, None, :total].to(torch.bool)
        return keep

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask=None, attention_mask=None,
                past_key_values: list[LayerCache] | None = None, use_cache: bool = False,
                token_embeddings: torch.Tensor | None = None):
        """Returns (hidden_states, new cache or None). The cache holds each layer's self and cross K/V.
        ``past_key_values`` may be a :class:`StaticCache`: it is written in place and returned."""
        if isinstance(past_key_values, StaticCache):
            return self._forward_static(input_ids, encoder_hidden_states, encoder_attention_mask, past_key_values)
        past_length = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        hidden = self.embed(input_ids, past_length, token_embeddings)
        cross_mask = None if encoder_attention_mask is None else padding_mask_to_bool(encoder_attention_mask)
        self_mask = self._self_mask(attention_mask, input_ids.shape[1], past_length, hidden.device)
        caches: list[LayerCache] = []
        for i, layer in enumerate(self.layers):
            past = None if past_key_values is None else past_key_values[i]
            if use_cache or past is not None or not self.drop_layer():
                hidden, cache = self.run_layer(layer, hidden, encoder_hidden_states, cross_mask, self_mask, past, use_cache)
                if use_cache:
                    caches.append(cache)
        return self.final_norm(hidden), (caches if use_cache else None)

    def _forward_static(self, input_ids, encoder_hidden_states, encoder_attention_mask, cache: StaticCache):
        """Incremental decoding on a preallocated cache (inference: no layer drop, no checkpointing). Rows
        run in the order of the cache's buffer rows (``cache.order()``: a beam reorder moved no more than it
        must) and come back in the caller's."""
        order = cache.order()
        if order is not None:
            input_ids = input_ids.index_select(0, order)
        hidden = self.embed(input_ids, cache.length)
        cross_mask = None if encoder_attention_mask is None else padding_mask_to_bool(encoder_attention_mask)
        self_mask = self._self_mask(None, input_ids.shape[1], cache.length, hidden.device)
        for i, layer in enumerate(self.layers):
            hidden, _ = layer(hidden, encoder_hidden_states, cross_mask, self_mask, cache.layer(i))
        cache.length += input_ids.shape[1]
        hidden = self.final_norm(hidden)
        return (hidden if order is None else hidden.index_select(0, cache.slots)), cache


def _fit_vocab_rows(module, state, prefix, *args) -> None:
    """load_state_dict's pre-hook: the vocabulary tensors of ``state`` (any rows: unpadded files, another
    padding) fitted to this model's rows, in place of the originals."""
    _replace(state, prefix, padded_vocab_size(module.config), module.config.vocab_size)


def _strip_vocab_rows(module, state, prefix, local_metadata) -> None:
    """state_dict's post-hook: the vocabulary tensors cut to the tokenizer's rows (views), so that a state dict,
    and every file written from one, holds ``vocab_size`` rows as transformers' does. A sharded (FSDP) tensor
    stays whole: the strategy gathers it, and the trainer cuts the full tensor (``Trainer.model_file_state``)."""
    if not any(hasattr(p, "placements") for p in module.parameters()):  # DTensor: sharded
        _replace(state, prefix, module.config.vocab_size, module.config.vocab_size)


def _replace(state, prefix: str, rows: int, vocab_size: int) -> None:
    ours = {k: v for k, v in state.items() if k.startswith(prefix)}
    fitted = fit_vocab_rows(ours, rows, vocab_size)
    for key, value in fitted.items():
        if value is not ours[key]:
            state[key] = value


class BartPreTrainedModel(nn.Module):
    config_class = BartConfig

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            # the tokenizer's rows only (the same random draws as an unpadded table); padded rows stay zero
            rows = min(module.num_embeddings, getattr(module, "real_rows", module.num_embeddings))
            nn.init.normal_(module.weight[:rows], mean=0.0, std=std)
            with torch.no_grad():
                module.weight[rows:].zero_()
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def gradient_checkpointing_enable(self, enabled: bool = True) -> None:
        for module in self.modules():
            if isinstance(module, _Stack):
                module.gradient_checkpointing = enabled
        self.config.gradient_checkpointing = enabled

    @classmethod
    def from_pretrained(cls, path, config: BartConfig | None = None, strict: bool = True, map_location="cpu",
                        explicit: dict | None = None):
        """Build from a project ``.ckpt`` or a Hugging Face folder; see :mod:`bart.modeling.weights`
        (``explicit``: the architecture comes from the checkpoint, see ``load_pretrained``)."""
        from bart.modeling.weights import load_pretrained
        return load_pretrained(cls, path, config=config, strict=strict, map_location=map_location, explicit=explicit)

    def save_pretrained(self, folder) -> None:
        """Write a folder Hugging Face ``from_pretrained`` loads (config.json, generation_config.json, model.safetensors)."""
        from bart.modeling.weights import save_pretrained
        save_pretrained(self, folder)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype


class BartModel(BartPreTrainedModel):
    def __init__(self, config: BartConfig) -> None:
        super().__init__()
        self.config = config
        # the padded table (bart.modeling.vocab_padding), its real rows drawn as an unpadded table's would be
        # (the same random numbers: a seed gives the model it gave before padding), the padded rows zero
        table = torch.zeros(padded_vocab_size(config), config.d_model)
        nn.init.normal_(table[:config.vocab_size])
        self.shared = nn.Embedding(table.shape[0], config.d_model, config.pad_token_id, _weight=table)
        if config.pad_token_id is not None:
            with torch.no_grad():
                self.shared.weight[config.pad_token_id].zero_()
        self.shared.real_rows = config.vocab_size
        self.encoder = BartEncoder(config, self.shared)
        self.decoder = BartDecoder(config, self.shared)
        self.apply(self._init_weights)
        self.register_load_state_dict_pre_hook(_fit_vocab_rows)
        self.register_state_dict_post_hook(_strip_vocab_rows)

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs: torch.Tensor | None = None, past_key_values=None, use_cache: bool = False):
        if decoder_input_ids is None:
            if input_ids is None:
                raise ValueError("BartModel needs decoder_input_ids (or input_ids to shift right)")
            decoder_input_ids = shift_tokens_right(input_ids, self.config.pad_token_id,
                                                   self.config.decoder_start_token_id)
        decoder_tokens = None
        if encoder_outputs is None:
            encoder_tokens = None
            if past_key_values is None and self.encoder.embed_tokens is self.decoder.embed_tokens is self.shared:
                # One lookup for both stacks: in backward the shared table then gets one dense gradient
                # from the lookups instead of two (each a zero-filled vocab x d_model buffer, then summed).
                both = self.shared(torch.cat([input_ids.reshape(-1), decoder_input_ids.reshape(-1)]))
                encoder_tokens, decoder_tokens = both.split([input_ids.numel(), decoder_input_ids.numel()])
                encoder_tokens = encoder_tokens.view(*input_ids.shape, -1)
                decoder_tokens = decoder_tokens.view(*decoder_input_ids.shape, -1)
            encoder_outputs = self.encoder(input_ids, attention_mask, encoder_tokens)
        hidden, cache = self.decoder(decoder_input_ids, encoder_outputs, attention_mask, decoder_attention_mask,
                                     past_key_values, use_cache, decoder_tokens)
        return Seq2SeqModelOutput(hidden, cache, encoder_outputs)


class BartForConditionalGeneration(BartPreTrainedModel):
    def __init__(self, config: BartConfig) -> None:
        super().__init__()
        self.config = config
        self.model = BartModel(config)
        rows = padded_vocab_size(config)  # the tokenizer's vocabulary padded (bart.modeling.vocab_padding)
        self.register_buffer("final_logits_bias", torch.zeros(1, rows))
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)  # the random draws of before
        self.lm_head.weight = self.model.shared.weight  # tied
        self.lm_head.out_features = rows
        self.register_load_state_dict_pre_hook(_fit_vocab_rows)
        self.register_state_dict_post_hook(_strip_vocab_rows)

    def get_encoder(self) -> BartEncoder:
        return self.model.encoder

    def layers(self) -> list:
        """The encoder's layers, then the decoder's: what FSDP shards one by one, ``--compile_scope layers`` compiles
        and ``--cast_weights_once`` casts."""
        return [*self.model.encoder.layers, *self.model.decoder.layers]

    def padded_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over every row of the (padded) LM head: the aligned product; the padded columns are -inf."""
        bias = head_bias(self.final_logits_bias[0], self.config.vocab_size).to(hidden.dtype)
        weight = head_weight(self.lm_head)
        if not isinstance(weight, torch.Tensor):  # a decoding copy's head (oneDNN-packed or int8) owns its product
            return self.lm_head(hidden) + bias
        # the bias inside the matrix multiplication: no second pass over the (tokens x vocab) logits
        return F.linear(hidden, weight, bias)

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the tokenizer's ``vocab_size`` words: a view of :meth:`padded_logits`' real columns."""
        return self.padded_logits(hidden)[..., :self.config.vocab_size]

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                labels=None, encoder_outputs=None, past_key_values=None, use_cache: bool = False,
                label_smoothing: float = 0.0, reduction: str = "mean", return_dict: bool = True,
                fused_cross_entropy: bool = False):
        """Loss ignores label -100; ``reduction="sum"`` lets a training loop normalise by the number of
        target tokens of a whole optimizer step. ``label_smoothing`` spreads that mass uniformly.
        ``fused_cross_entropy`` (with labels): the LM head and the loss in token chunks, so the
        (tokens x vocab) logits never exist; ``logits`` is then None."""
        if labels is not None and decoder_input_ids is None:
            decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
        out = self.model(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask,
                         encoder_outputs, past_key_values, use_cache)
        loss = logits = None
        if labels is not None and fused_cross_entropy:
            hidden = out.last_hidden_state
            loss = linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), self.lm_head.weight, labels.reshape(-1),
                                        bias=head_bias(self.final_logits_bias[0], self.config.vocab_size),
                                        label_smoothing=label_smoothing, reduction=reduction,
                                        classes=self.config.vocab_size)
        elif labels is not None:
            padded = self.padded_logits(out.last_hidden_state)  # the loss over the padded columns (-inf: no mass)
            loss = cross_entropy(padded.view(-1, padded.shape[-1]).float(), labels.reshape(-1), ignore_index=-100,
                                 label_smoothing=label_smoothing, reduction=reduction, classes=self.config.vocab_size)
            logits = padded[..., :self.config.vocab_size]
        else:
            logits = self.lm_logits(out.last_hidden_state)
        result = Seq2SeqLMOutput(loss, logits, out.past_key_values, out.encoder_last_hidden_state)
        if not return_dict:
            return tuple(v for v in (result.loss, result.logits) if v is not None)
        return result

    def generate(self, input_ids: torch.Tensor, **kwargs):
        """Greedy or beam search; see :func:`bart.generation.generate` for the arguments."""
        return generate(self, input_ids, **kwargs)

    def train(self, mode: bool = True):
        if mode:  # training changes the weights: the packed decoding copy kept beside the model goes
            forget_packed(self)
        return super().train(mode)
