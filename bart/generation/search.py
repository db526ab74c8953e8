"""Greedy decoding, sampling, beam search and beam sampling for BART, written for speed on a KV cache.

The encoder runs once per source and each decoder layer projects the encoder output to keys and
values once; beams share them (the decoder folds beams into the query length), so nothing of the
source is repeated ``num_beams`` times. The self-attention cache is a preallocated
:class:`~bart.generation.cache.StaticCache`: a step writes its position in place, and beam
search reorders the filled positions with one ``index_select(out=)`` into a second buffer. The
logits and log-probs of a step go to buffers made once per call and the score processors work in
place, so a decode step allocates nothing of size rows x vocab or rows x cache (on a machine where
fresh memory is expensive, e.g. page faults in a VM, those allocations were most of the time).
Sources that are done (greedy: a row that produced EOS) leave the running batch: their decoder
rows, cache rows and bookkeeping are compacted away, so finished rows stop costing work; their
results are kept. One host sync per step (the stopping check, which also says who is done). The
beam bookkeeping is tensor-shaped over (batch, beams) and follows transformers' vectorised beam
search step for step, so the same weights give the same sequences. Sampling draws with
``torch.multinomial`` on the same processed scores, in the same order and shapes as transformers'
``_sample`` and ``_beam_search(do_sample=True)``, so the same generator state gives the same tokens.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from bart.generation import logits_processors as lp
from bart.generation.cache import StaticCache

NEG = -1.0e9
_LM_HEAD_SLICE = 1024  # vocabulary rows per LM-head product on CPU (see _Decoder.lm_head)


@dataclass
class GenerationOptions:
    max_length: int
    min_length: int
    num_beams: int
    num_beam_groups: int
    diversity_penalty: float
    length_penalty: float
    no_repeat_ngram_size: int
    encoder_no_repeat_ngram_size: int
    early_stopping: object  # True, False or "never"
    num_return_sequences: int
    decoder_start_token_id: int
    bos_token_id: Optional[int]
    eos_token_id: Optional[int]  # None: no hypothesis ends before max_length
    pad_token_id: int
    forced_bos_token_id: Optional[int]
    forced_eos_token_id: Optional[int]
    output_scores: bool
    return_dict_in_generate: bool
    use_cache: bool
    repetition_penalty: float = 1.0
    bad_words_ids: Optional[list] = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    sequence_bias: Optional[dict] = None  # {(token ids): bias}
    encoder_repetition_penalty: float = 1.0
    remove_invalid_values: bool = False
    exponential_decay_length_penalty: Optional[tuple] = None  # (start_index, decay_factor)
    suppress_tokens: Optional[list] = None
    begin_suppress_tokens: Optional[list] = None
    renormalize_logits: bool = False
    min_p: Optional[float] = None
    typical_p: float = 1.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    max_time: Optional[float] = None  # seconds from the call; the step that passes it is the last
    logits_processor: tuple = ()  # the caller's processors: (input_ids, scores) -> scores, after the built-in ones
    stopping_criteria: tuple = ()  # the caller's criteria: (input_ids, scores) -> bool per row, or one bool
    generator: Optional[torch.Generator] = None  # for sampling; None: torch's global generator
    bad_words: Optional[lp.BadWords] = None  # bad_words_ids prepared on the device
    biases: Optional[lp.SequenceBias] = None  # sequence_bias prepared on the device
    suppress_tokens_tensor: Optional[torch.Tensor] = None
    begin_suppress_tokens_tensor: Optional[torch.Tensor] = None
    start_time: float = 0.0  # time.monotonic() when generate was called
    prompt: Optional[torch.Tensor] = None  # the decoder's first tokens (B, P); prepare() makes the start token's

    def prepare(self, device, vocab_size: int, sources: int) -> None:
        """The tensors the search and the processors use, made once per call on the model's device for
        ``sources`` inputs; without decoder_input_ids the prompt is the decoder start token."""
        if self.prompt is None:
            self.prompt = torch.full((sources, 1), self.decoder_start_token_id, dtype=torch.long, device=device)
        self.prompt = self.prompt.to(device)
        if self.bad_words_ids is not None:
            self.bad_words = lp.BadWords(self.bad_words_ids, self.eos_token_id, device)
        if self.sequence_bias is not None:
            self.biases = lp.SequenceBias(self.sequence_bias, vocab_size, device)
        if self.suppress_tokens is not None:
            self.suppress_tokens_tensor = torch.tensor(self.suppress_tokens, dtype=torch.long, device=device)
        if self.begin_suppress_tokens is not None:
            self.begin_suppress_tokens_tensor = torch.tensor(self.begin_suppress_tokens, dtype=torch.long,
                                                             device=device)

    @property
    def prompt_length(self) -> int:
        return self.prompt.shape[1]

    def prompt_rows(self, per_source: int) -> torch.Tensor:
        """(B * per_source, P): each source's first decoder tokens, once per hypothesis."""
        return self.prompt.repeat_interleave(per_source, dim=0)

    def time_is_up(self) -> bool:
        return self.max_time is not None and time.monotonic() - self.start_time > self.max_time

    def custom_stop(self, tokens: torch.Tensor, scores: Optional[tuple]) -> Optional[torch.Tensor]:
        """The caller's stopping criteria on ``tokens`` (N, L): (N,) bool, True where a row stops."""
        if not self.stopping_criteria:
            return None
        stop = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
        for criterion in self.stopping_criteria:
            result = criterion(tokens, scores)
            stop |= torch.as_tensor(result, dtype=torch.bool, device=tokens.device).expand_as(stop)
        return stop


@dataclass
class GenerateOutput:
    """What ``return_dict_in_generate=True`` returns (field names as in transformers)."""
    sequences: torch.Tensor
    sequences_scores: Optional[torch.Tensor] = None
    scores: Optional[tuple] = None

    def __getitem__(self, key: str):
        return getattr(self, key)


class _Decoder:
    """One incremental decoder over the shared encoder output; the cache lives here.

    With ``use_cache`` the cache is a :class:`StaticCache` made once for the whole call: cross
    K/V projected once per source, self K/V written in place. The logits and log-probs of a step
    go to two buffers made at the first step (the one with the most rows), so a step allocates
    nothing of size rows x vocab. The tensors ``next_logits`` / ``log_softmax`` return are those
    buffers: valid until the next step (clone what must outlive it)."""

    def __init__(self, model, encoder_hidden: torch.Tensor, encoder_mask: torch.Tensor, use_cache: bool,
                 rows_per_source: int = 1, max_length: int = 0):
        self.model, self.encoder_hidden, self.encoder_mask = model, encoder_hidden, encoder_mask
        self.cache = None
        if use_cache:
            layers = model.model.decoder.layers
            cross = [layer.encoder_attn.project_kv(encoder_hidden) for layer in layers]
            attention = layers[0].self_attn
            self.cache = StaticCache(len(layers), encoder_hidden.shape[0] * rows_per_source, attention.num_heads,
                                     attention.head_dim, max_length, cross, cross[0][0].dtype, encoder_hidden.device)
        self.logits_buffer: Optional[torch.Tensor] = None
        self.log_probs_buffer: Optional[torch.Tensor] = None
        self.transposed_buffer: Optional[torch.Tensor] = None  # CPU, < 16 rows: the (V, N) product of lm_head
        self.slice_buffer: Optional[torch.Tensor] = None  # CPU, >= 16 rows: one (N, 1024) slice of the logits

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
        """float32 logits (N, V) of the last hidden states ``hidden`` (N, D), into the logits buffer.

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
        if hidden.dtype == weight.dtype == bias.dtype == torch.float32 and not torch.is_autocast_enabled(hidden.device.type):
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
        return out.copy_(self.model.lm_logits(hidden))

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


def process_scores(opts: GenerationOptions, tokens: torch.Tensor, scores: torch.Tensor,
                   encoder_ids: torch.Tensor) -> torch.Tensor:
    """The configured processors in transformers' order (``_get_logits_processor``); ``scores`` is
    modified in place (see :mod:`bart.generation.logits_processors`)."""
    if opts.biases is not None:
        scores = lp.sequence_bias(tokens, scores, opts.biases)
    if opts.encoder_repetition_penalty != 1.0:  # one hypothesis row per source (checked in generate)
        scores = lp.encoder_repetition_penalty(scores, opts.encoder_repetition_penalty, encoder_ids)
    if opts.repetition_penalty != 1.0:
        scores = lp.repetition_penalty(tokens, scores, opts.repetition_penalty)
    scores = lp.no_repeat_ngram(tokens, scores, opts.no_repeat_ngram_size)
    scores = lp.encoder_no_repeat_ngram(tokens, scores, opts.encoder_no_repeat_ngram_size, encoder_ids)
    if opts.bad_words is not None:
        scores = lp.bad_words(tokens, scores, opts.bad_words)
    if opts.min_length > 0 and opts.eos_token_id is not None:  # min_new_tokens is folded into min_length
        scores = lp.min_length(tokens, scores, opts.min_length, opts.eos_token_id)
    length = tokens.shape[1]
    if opts.forced_bos_token_id is not None and length == 1:
        scores = lp.force_token(scores, opts.forced_bos_token_id)
    if opts.forced_eos_token_id is not None and length == opts.max_length - 1:
        scores = lp.force_token(scores, opts.forced_eos_token_id)
    if opts.remove_invalid_values:
        scores = lp.remove_invalid_values(scores)
    if opts.exponential_decay_length_penalty is not None:
        start, factor = opts.exponential_decay_length_penalty
        scores = lp.exponential_decay_length_penalty(tokens, scores, start + opts.prompt_length - 1, factor,
                                                     opts.eos_token_id)
    if opts.suppress_tokens_tensor is not None:
        scores = lp.suppress_tokens(scores, opts.suppress_tokens_tensor)
    # transformers suppresses at the first generated position, the second when a BOS token is forced
    # (and the decoder starts from the start token alone)
    begin = opts.prompt_length + (opts.prompt_length == 1 and opts.forced_bos_token_id is not None)
    if opts.begin_suppress_tokens_tensor is not None and length == begin:
        scores = lp.suppress_tokens(scores, opts.begin_suppress_tokens_tensor)
    for processor in opts.logits_processor:  # transformers appends the caller's after its own
        scores = processor(tokens, scores)
    return scores


def warp_scores(opts: GenerationOptions, scores: torch.Tensor, min_tokens_to_keep: int) -> torch.Tensor:
    """After the processors: when sampling, the warpers in transformers' order (temperature, top-k,
    top-p, min-p, typical, epsilon, eta); then, sampling or not, ``renormalize_logits``."""
    if opts.do_sample:
        if opts.temperature != 1.0:
            scores = lp.temperature(scores, opts.temperature)
        if opts.top_k != 0:
            scores = lp.top_k(scores, opts.top_k, min_tokens_to_keep)
        if opts.top_p < 1.0:
            scores = lp.top_p(scores, opts.top_p, min_tokens_to_keep)
        if opts.min_p is not None:
            scores = lp.min_p(scores, opts.min_p, min_tokens_to_keep)
        if opts.typical_p < 1.0:
            scores = lp.typical_p(scores, opts.typical_p, min_tokens_to_keep)
        if 0.0 < opts.epsilon_cutoff < 1.0:
            scores = lp.epsilon_cutoff(scores, opts.epsilon_cutoff, min_tokens_to_keep)
        if 0.0 < opts.eta_cutoff < 1.0:
            scores = lp.eta_cutoff(scores, opts.eta_cutoff, min_tokens_to_keep)
    if opts.renormalize_logits:
        scores = scores.log_softmax(dim=-1)
    return scores


def _is_eos(tokens: torch.Tensor, opts: GenerationOptions) -> torch.Tensor:
    if opts.eos_token_id is None:
        return torch.zeros_like(tokens, dtype=torch.bool)
    return tokens == opts.eos_token_id


def _drops_finished(opts: GenerationOptions) -> bool:
    """Whether finished sources leave the running batch. Not when sampling (the draws over fewer rows
    would differ from transformers', which draws for every row), with ``output_scores`` (the scores
    of finished rows are part of the output) nor with the caller's processors or criteria (they see
    every row, as in transformers)."""
    return not (opts.do_sample or opts.output_scores or opts.logits_processor or opts.stopping_criteria)


def greedy_search(decoder: _Decoder, opts: GenerationOptions, encoder_ids: torch.Tensor):
    """Greedy decoding, or with ``do_sample`` multinomial sampling (num_return_sequences rows per source).
    A finished row stops costing work (greedy only): it leaves the running batch and its tokens wait,
    padded, in the output."""
    rows = encoder_ids.shape[0] * (opts.num_return_sequences if opts.do_sample else 1)
    device = encoder_ids.device
    drop = _drops_finished(opts) and not getattr(decoder, "fixed_rows", False)
    output = torch.full((rows, opts.max_length), opts.pad_token_id, dtype=torch.long, device=device)
    live = list(range(rows))  # output rows of the running rows
    tokens = opts.prompt_rows(rows // encoder_ids.shape[0])
    unfinished = torch.ones(rows, dtype=torch.bool, device=device)
    all_scores = []
    while tokens.shape[1] < opts.max_length:
        scores = process_scores(opts, tokens, decoder.next_logits(tokens), encoder_ids)
        scores = warp_scores(opts, scores, min_tokens_to_keep=1)
        if opts.do_sample:
            next_tokens = torch.multinomial(F.softmax(scores, dim=-1), 1, generator=opts.generator).squeeze(1)
        else:
            next_tokens = scores.argmax(-1)
        if opts.output_scores:
            all_scores.append(scores.clone())  # scores may be the decoder's buffer
        next_tokens = next_tokens.masked_fill_(~unfinished, opts.pad_token_id)
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=1)
        unfinished &= ~_is_eos(next_tokens, opts)
        stop = opts.custom_stop(tokens, tuple(all_scores) if opts.output_scores else None)
        if stop is not None:
            unfinished &= ~stop
        if opts.time_is_up():  # max_time: this step's tokens are the last
            break
        if not drop:
            if not bool(unfinished.any()):  # the one host sync per step
                break
            continue
        flags = unfinished.tolist()  # the one host sync per step
        if all(flags) or tokens.shape[1] >= opts.max_length:
            continue
        gone = [i for i, flag in enumerate(flags) if not flag]
        output[[live[i] for i in gone], :tokens.shape[1]] = tokens[gone]
        keep = [i for i, flag in enumerate(flags) if flag]
        if not keep:
            break
        index = torch.tensor(keep, device=device)
        tokens, unfinished, encoder_ids = tokens[index], unfinished[index], encoder_ids[index]
        decoder.keep_sources(keep, index)
        live = [live[i] for i in keep]
    length = tokens.shape[1]
    output[live, :length] = tokens
    return output[:, :length], None, tuple(all_scores) if opts.output_scores else None


def _gather(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor (B, K, ...) rows picked by index (B, J) → (B, J, ...)."""
    while index.dim() < tensor.dim():
        index = index.unsqueeze(-1)
    return tensor.gather(1, index.expand(*index.shape[:2], *tensor.shape[2:]))


class _BeamState:
    """Running and finished beams of one beam group, shaped (batch, beams, ...)."""

    def __init__(self, batch: int, beams: int, max_length: int, prompt: torch.Tensor, fill: int, device):
        """``prompt``: the (batch, P) first decoder tokens of each source."""
        self.beams = beams
        self.running = torch.full((batch, beams, max_length), fill, dtype=torch.long, device=device)
        self.running[:, :, :prompt.shape[1]] = prompt[:, None, :]
        self.finished = self.running.clone()
        self.running_scores = torch.zeros(batch, beams, device=device)
        self.running_scores[:, 1:] = NEG
        self.finished_scores = torch.full((batch, beams), NEG, device=device)
        self.is_finished = torch.zeros(batch, beams, dtype=torch.bool, device=device)
        self.improvable = torch.ones(batch, 1, dtype=torch.bool, device=device)
        self.hits_stop = torch.zeros(batch, beams, dtype=torch.bool, device=device)
        self.generated = torch.zeros(batch, beams, dtype=torch.long, device=device)  # tokens after the prompt

    def step(self, log_probs: torch.Tensor, cur_len: int, opts: GenerationOptions, last: bool,
             scores: Optional[tuple] = None) -> torch.Tensor:
        """Advance with (batch, beams, V) processed log-probs; returns the source beam (batch, beams).
        ``last``: every candidate of this step stops (max_length reached, or max_time passed);
        ``scores``: what the caller's stopping criteria get (the scores so far with output_scores)."""
        batch, beams, vocab = log_probs.shape
        keep = 2 * beams
        # in place: log_probs is the decoder's step buffer (or a copy of it), not needed after this
        totals = log_probs.add_(self.running_scores[:, :, None]).view(batch, beams * vocab)
        if opts.do_sample:  # beam sampling: draw the candidates (without replacement), unsorted
            top_index = torch.multinomial(F.softmax(totals, dim=-1), keep, generator=opts.generator)
            top_scores = totals.gather(1, top_index)
        else:
            top_scores, top_index = totals.topk(keep, dim=1)
        source_beam, token = top_index // vocab, top_index % vocab
        candidates = _gather(self.running, source_beam)
        candidates[:, :, cur_len] = token
        ended = _is_eos(token, opts)  # by EOS or by the caller's criteria
        stop = opts.custom_stop(candidates[:, :, :cur_len + 1].reshape(batch * keep, cur_len + 1), scores)
        if stop is not None:
            ended = ended | stop.view(batch, keep)
        hits_stop = ended | last
        # continue with the best candidates that did not stop; rank them before adding NEG to all of
        # them at max_length (-1e9 + x rounds to a multiple of 64 in float32: the order would be lost,
        # and with beam groups the tokens of this last step feed the diversity penalty of later groups)
        running_scores = top_scores + hits_stop.float() * NEG
        pick = (top_scores + ended.float() * NEG).topk(beams, dim=1).indices
        self.running = _gather(candidates, pick)
        self.running_scores = _gather(running_scores, pick)
        chosen_source = _gather(source_beam, pick)
        # candidates among the top `beams` that stopped become finished hypotheses
        in_top = torch.zeros(keep, dtype=torch.bool, device=log_probs.device)
        in_top[:beams] = True
        just_finished = hits_stop & in_top
        generated = cur_len + 1 - opts.prompt_length  # tokens after the prompt, the new one included
        finished_scores = top_scores / (generated ** opts.length_penalty)
        full = self.is_finished.all(-1, keepdim=True) & (opts.early_stopping is True)
        finished_scores = finished_scores + full.float() * NEG + (~self.improvable).float() * NEG
        finished_scores = finished_scores + (~just_finished).float() * NEG
        merged_scores = torch.cat([self.finished_scores, finished_scores], dim=1)
        best = merged_scores.topk(beams, dim=1).indices
        self.finished = _gather(torch.cat([self.finished, candidates], dim=1), best)
        self.finished_scores = _gather(merged_scores, best)
        self.is_finished = _gather(torch.cat([self.is_finished, just_finished], dim=1), best)
        self.generated = _gather(torch.cat([self.generated, torch.full_like(just_finished, generated, dtype=torch.long)], 1), best)
        self.hits_stop = hits_stop
        # plain beam search follows transformers >= 4.50 (best running beam); group beam search follows
        # the classic BeamSearchScorer, whose is_done takes the best of all candidates, eos ones included
        best = top_scores[:, :1] if opts.num_beam_groups > 1 else self.running_scores[:, :1]
        self._update_improvable(cur_len + 1, opts, best)
        return chosen_source

    _FIELDS = ("running", "finished", "running_scores", "finished_scores", "is_finished", "improvable",
               "hits_stop", "generated")

    def select(self, sources: torch.Tensor) -> "_BeamState":
        """The state of ``sources`` only (indices into this state's sources)."""
        picked = object.__new__(_BeamState)
        picked.beams = self.beams
        for name in self._FIELDS:
            setattr(picked, name, getattr(self, name).index_select(0, sources))
        return picked

    def results(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.finished, self.finished_scores, self.generated

    def done(self, opts: GenerationOptions) -> torch.Tensor:
        """(batch, 1) bool: sources for which this group takes no further part (classic ``_done``)."""
        return ~self.improvable | (self.is_finished.all(-1, keepdim=True) & (opts.early_stopping is True))

    def _update_improvable(self, cur_len: int, opts: GenerationOptions, best: torch.Tensor) -> None:
        if opts.early_stopping == "never" and opts.length_penalty > 0.0:
            best_length = opts.max_length - opts.prompt_length
        else:
            best_length = cur_len - opts.prompt_length
        best_running = best / (best_length ** opts.length_penalty)
        worst_finished = torch.where(self.is_finished, self.finished_scores.min(1, keepdim=True).values,
                                     torch.full_like(self.finished_scores, NEG))
        self.improvable = self.improvable & (best_running > worst_finished).any(-1, keepdim=True)

    def open(self, opts: GenerationOptions) -> torch.Tensor:
        """Scalar bool tensor: does this group still need steps?"""
        exists_open = ~(self.is_finished.all() & (opts.early_stopping is True))
        return self.improvable.any() & exists_open & ~self.hits_stop.all()


def beam_search(decoder: _Decoder, opts: GenerationOptions, encoder_ids: torch.Tensor):
    """Beam search; with ``num_beam_groups`` > 1, diverse (group) beam search: each group of
    num_beams / groups beams runs its own search and is penalised (Hamming diversity) for tokens
    that earlier groups chose at the same step.

    A source whose groups are all done (no running beam can still improve its finished ones, or all
    are finished with ``early_stopping=True``) keeps its finished hypotheses as they are, in
    transformers as here: it leaves the running batch (its decoder rows, cache rows and bookkeeping)
    so that it stops costing work; its results wait in ``results``."""
    batch, device = encoder_ids.shape[0], encoder_ids.device
    groups = opts.num_beam_groups
    group_size = opts.num_beams // groups
    states = [_BeamState(batch, group_size, opts.max_length, opts.prompt,
                         opts.pad_token_id, device) for _ in range(groups)]
    results = [tuple(t.clone() for t in state.results()) for state in states]  # (finished, scores, generated) of every source, by group
    drop = _drops_finished(opts) and not getattr(decoder, "fixed_rows", False)
    live = list(range(batch))  # original indices of the running sources
    all_scores = []
    cur_len = opts.prompt_length
    while True:
        batch = len(live)
        # rows of the decoder batch: source-major, then group, then beam
        tokens = torch.stack([s.running[:, :, :cur_len] for s in states], 1).view(-1, cur_len)
        log_probs = decoder.log_softmax(decoder.next_logits(tokens)).view(batch, groups, group_size, -1)
        step_scores, sources, chosen = [], [], []
        last = cur_len + 1 >= opts.max_length or opts.time_is_up()
        for g, state in enumerate(states):
            group_log_probs = log_probs[:, g].reshape(batch * group_size, -1)  # a view with one group
            if groups > 1:
                previous = torch.stack(chosen, 1).view(batch, -1) if chosen else tokens.new_zeros(batch, 0)
                group_log_probs = lp.hamming_diversity(group_log_probs, previous, opts.diversity_penalty, batch)
            group_tokens = state.running[:, :, :cur_len].reshape(batch * group_size, cur_len)
            group_log_probs = process_scores(opts, group_tokens, group_log_probs, encoder_ids)
            group_log_probs = warp_scores(opts, group_log_probs, min_tokens_to_keep=2)
            if opts.output_scores:  # a copy: step() adds the running scores in place
                step_scores.append(group_log_probs.view(batch, group_size, -1).clone())
            done = state.done(opts)  # a group already done for a source idles on pad tokens
            so_far = tuple(all_scores) + (torch.stack(step_scores, 1).view(batch * group_size, -1),) \
                if opts.output_scores and opts.stopping_criteria and groups == 1 else None
            source = state.step(group_log_probs.view(batch, group_size, -1), cur_len, opts, last, so_far)
            sources.append(source + g * group_size)
            chosen.append(state.running[:, :, cur_len].masked_fill(done, opts.pad_token_id))
        if opts.output_scores:
            all_scores.append(torch.stack(step_scores, 1).view(batch * opts.num_beams, -1))
        offsets = torch.arange(batch, device=device)[:, None] * opts.num_beams
        rows = torch.cat(sources, 1) + offsets  # (batch, num_beams) decoder rows of the next step
        cur_len += 1
        still_open = torch.stack([s.open(opts) for s in states]).any()
        if not drop:
            if last or not bool(still_open):  # the one host sync per step
                break
            decoder.reorder(rows.view(-1))
            continue
        done = torch.stack([s.done(opts).view(-1) for s in states]).all(0)
        flags = torch.cat([still_open.view(1), done]).tolist()  # the one host sync per step
        if last or not flags[0]:
            break
        keep = [i for i, finished in enumerate(flags[1:]) if not finished]
        if len(keep) == batch:
            decoder.reorder(rows.view(-1))
            continue
        if not keep:
            break
        gone = [i for i, finished in enumerate(flags[1:]) if finished]
        for state, stored in zip(states, results):
            for full, part in zip(stored, state.results()):
                full[[live[i] for i in gone]] = part[gone]
        index = torch.tensor(keep, device=device)
        states = [state.select(index) for state in states]
        encoder_ids = encoder_ids[index]
        decoder.keep_sources(keep, rows[index].view(-1))  # rows of the cache before compaction
        live = [live[i] for i in keep]
    for state, stored in zip(states, results):
        for full, part in zip(stored, state.results()):
            full[live] = part
    return _finalize(results, opts, all_scores)


def _finalize(results: list, opts: GenerationOptions, all_scores):
    """``results``: (finished, finished_scores, generated) of every source, one triple per group."""
    finished = torch.cat([r[0] for r in results], 1)
    scores = torch.cat([r[1] for r in results], 1)
    generated = torch.cat([r[2] for r in results], 1)
    if len(results) > 1:  # best hypotheses over all groups
        order = scores.topk(scores.shape[1], dim=1).indices
        finished, scores, generated = _gather(finished, order), _gather(scores, order), _gather(generated, order)
    count = opts.num_return_sequences
    sequences = finished[:, :count].reshape(-1, finished.shape[-1])
    sequence_scores = scores[:, :count].reshape(-1)
    length = opts.prompt_length + int(generated[:, :count].max())
    return sequences[:, :length], sequence_scores, tuple(all_scores) if opts.output_scores else None
