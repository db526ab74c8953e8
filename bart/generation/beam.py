"""Beam search, beam sampling and diverse (group) beam search on a decode session.

The beam bookkeeping is tensor-shaped over (batch, beams) and follows transformers' vectorised beam
search step for step, so the same weights give the same sequences. Beam sampling draws with
``torch.multinomial`` in the same order and shapes as transformers' ``_beam_search(do_sample=True)``.
A source whose groups are all done leaves the running batch; its results wait. One host sync per
``sync_every`` steps: in between, a done source runs on frozen (its hypotheses cannot change).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from bart.generation import logits_processors as lp
from bart.generation.options import GenerationOptions
from bart.generation.processing import process
from bart.generation.session import Decoder, drops_finished, is_eos

NEG = -1.0e9


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
             scores: tuple | None = None, frozen: torch.Tensor | None = None) -> torch.Tensor:
        """Advance with (batch, beams, V) processed log-probs; returns the source beam (batch, beams).
        ``last``: every candidate of this step stops (max_length reached, or max_time passed);
        ``scores``: what the caller's stopping criteria get (the scores so far with output_scores);
        ``frozen``: (batch,) bool, sources whose finished hypotheses stay as they are (a search that reads
        which sources are done every k-th step: those a read would have stopped)."""
        before = (self.finished, self.finished_scores, self.is_finished, self.generated)
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
        ended = is_eos(token, opts)  # by EOS or by the caller's criteria
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
        if frozen is not None:  # not only below NEG: exact ties among finished ones would be re-ranked by topk
            keep = frozen.view(-1, 1)
            self.finished = torch.where(keep[..., None], before[0], self.finished)
            self.finished_scores = torch.where(keep, before[1], self.finished_scores)
            self.is_finished = torch.where(keep, before[2], self.is_finished)
            self.generated = torch.where(keep, before[3], self.generated)
        # plain beam search follows transformers >= 4.50 (best running beam); group beam search follows
        # the classic BeamSearchScorer, whose is_done takes the best of all candidates, eos ones included
        best = top_scores[:, :1] if opts.num_beam_groups > 1 else self.running_scores[:, :1]
        self._update_improvable(cur_len + 1, opts, best)
        return chosen_source

    _FIELDS = ("running", "finished", "running_scores", "finished_scores", "is_finished", "improvable",
               "hits_stop", "generated")

    def select(self, sources: torch.Tensor) -> _BeamState:
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


def beam_search(decoder: Decoder, opts: GenerationOptions, encoder_ids: torch.Tensor, processors: list,
                sync_every: int = 1):
    """Beam search; with ``num_beam_groups`` > 1, diverse (group) beam search: each group of
    num_beams / groups beams runs its own search and is penalised (Hamming diversity) for tokens
    that earlier groups chose at the same step.

    A source whose groups are all done (no running beam can still improve its finished ones, or all
    are finished with ``early_stopping=True``) keeps its finished hypotheses as they are, in
    transformers as here: it leaves the running batch (its decoder rows, cache rows and bookkeeping)
    so that it stops costing work; its results wait in ``results``. Which sources are done is read on the host
    every ``sync_every`` steps; in between, the sources a read would have stopped run on frozen (their finished
    hypotheses kept as they are, on the device), so every k gives the same sequences."""
    batch, device = encoder_ids.shape[0], encoder_ids.device
    groups = opts.num_beam_groups
    group_size = opts.num_beams // groups
    states = [_BeamState(batch, group_size, opts.max_length, opts.prompt,
                         opts.pad_token_id, device) for _ in range(groups)]
    results = [tuple(t.clone() for t in state.results()) for state in states]  # (finished, scores, generated) of every source, by group
    drop = drops_finished(opts) and not getattr(decoder, "fixed_rows", False)
    live = list(range(batch))  # original indices of the running sources
    all_scores = []
    cur_len = opts.prompt_length
    # sync_every > 1: the sources that a read after every step would have stopped (left the batch, or ended the search)
    frozen = torch.zeros(batch, dtype=torch.bool, device=device) if sync_every > 1 else None
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
            group_log_probs = process(processors, group_tokens, group_log_probs, encoder_ids)
            if opts.output_scores:  # a copy: step() adds the running scores in place
                step_scores.append(group_log_probs.view(batch, group_size, -1).clone())
            done = state.done(opts)  # a group already done for a source idles on pad tokens
            so_far = tuple(all_scores) + (torch.stack(step_scores, 1).view(batch * group_size, -1),) \
                if opts.output_scores and opts.stopping_criteria and groups == 1 else None
            source = state.step(group_log_probs.view(batch, group_size, -1), cur_len, opts, last, so_far, frozen)
            sources.append(source + g * group_size)
            chosen.append(state.running[:, :, cur_len].masked_fill(done, opts.pad_token_id))
        if opts.output_scores:
            all_scores.append(torch.stack(step_scores, 1).view(batch * opts.num_beams, -1))
        offsets = torch.arange(batch, device=device)[:, None] * opts.num_beams
        rows = torch.cat(sources, 1) + offsets  # (batch, num_beams) decoder rows of the next step
        cur_len += 1
        if last:
            break
        still_open = torch.stack([s.open(opts) for s in states]).any()
        done = torch.stack([s.done(opts).view(-1) for s in states]).all(0) if drop else None
        going, stopping = still_open, done  # whether the search goes on; which sources stop (with drop)
        if frozen is not None:
            frozen |= ~still_open if done is None else done | ~still_open
            if (cur_len - opts.prompt_length) % sync_every:  # no read this step
                decoder.reorder(rows.view(-1))
                continue
            going, stopping = ~frozen.all(), frozen
        if not drop:
            if not bool(going):  # the search's host sync (the cache's mapped reorder adds one on CUDA)
                break
            decoder.reorder(rows.view(-1))
            continue
        flags = torch.cat([going.view(1), stopping]).tolist()  # the search's host sync
        if not flags[0]:
            break
        stopped = flags[1:]
        keep = [i for i, finished in enumerate(stopped) if not finished]
        if len(keep) == batch:
            decoder.reorder(rows.view(-1))
            continue
        if not keep:
            break
        gone = torch.tensor([i for i, finished in enumerate(stopped) if finished], device=device)
        gone_sources = torch.tensor([live[i] for i, finished in enumerate(stopped) if finished], device=device)
        for state, stored in zip(states, results):  # two index uploads, not three list indexings per tensor
            for full, part in zip(stored, state.results()):
                full.index_copy_(0, gone_sources, part.index_select(0, gone))
        index = torch.tensor(keep, device=device)
        states = [state.select(index) for state in states]
        encoder_ids = encoder_ids[index]
        frozen = None if frozen is None else frozen[index]
        decoder.keep_sources(keep, rows[index].view(-1))  # rows of the cache before compaction
        live = [live[i] for i in keep]
    live_sources = torch.tensor(live, device=device)
    for state, stored in zip(states, results):
        for full, part in zip(stored, state.results()):
            full.index_copy_(0, live_sources, part)
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
