"""A plain reference for diverse (group) beam search, for the parity tests.

transformers 4.57 no longer ships group beam search (it fetches it from the hub), so this is the classic
algorithm of transformers <= 4.55 (``_group_beam_search`` with ``BeamSearchScorer(num_beam_groups=...)``
and ``BeamHypotheses``), written plainly: no KV cache, the whole decoder runs every step, Python loops
over sources, groups, beams and candidates.
"""
import math

import torch
import torch.nn.functional as F


class _Hypotheses:
    """Finished hypotheses of one (source, group), as transformers' classic ``BeamHypotheses``."""

    def __init__(self, size, length_penalty, early_stopping, max_length):
        self.size, self.length_penalty = size, length_penalty
        self.early_stopping, self.max_length = early_stopping, max_length
        self.beams = []  # (score, tokens without the eos)
        self.worst_score = 1e9

    def add(self, tokens, sum_logprobs, generated_len):
        """``generated_len``: tokens after the decoder start token, the eos included."""
        score = sum_logprobs / generated_len ** self.length_penalty
        if len(self.beams) < self.size or score > self.worst_score:
            self.beams.append((score, tokens))
            if len(self.beams) > self.size:
                ranked = sorted((s, i) for i, (s, _) in enumerate(self.beams))
                del self.beams[ranked[0][1]]
                self.worst_score = ranked[1][0]
            else:
                self.worst_score = min(score, self.worst_score)

    def is_done(self, best_sum_logprobs, generated_len):
        """``best_sum_logprobs``: the best of this step's candidates (finished ones included)."""
        if len(self.beams) < self.size:
            return False
        if self.early_stopping is True:
            return True
        if self.early_stopping == "never" and self.length_penalty > 0.0:
            generated_len = self.max_length - 1
        return self.worst_score >= best_sum_logprobs / generated_len ** self.length_penalty


def _process_row(tokens, scores, *, no_repeat_ngram_size, min_length, max_length, eos, forced_bos, forced_eos):
    """transformers' processors for one hypothesis ``tokens`` (a list, the start token included)."""
    scores = scores.clone()
    n, length = no_repeat_ngram_size, len(tokens)
    if n > 0 and length + 1 >= n:  # ban every token that would repeat an n-gram of the hypothesis
        prefix = tokens[length - n + 1:]
        for i in range(length - n + 1):
            if tokens[i:i + n - 1] == prefix:
                scores[tokens[i + n - 1]] = -math.inf
    if length < min_length:
        scores[eos] = -math.inf
    for forced, step in ((forced_bos, 1), (forced_eos, max_length - 1)):
        if forced is not None and length == step:
            scores[:] = -math.inf
            scores[forced] = 0.0
    return scores


@torch.no_grad()
def reference_group_beam_search(model, input_ids, attention_mask, *, num_beams, num_beam_groups,
                                 diversity_penalty, max_length, length_penalty=1.0, early_stopping=False,
                                 no_repeat_ngram_size=0, min_length=0, num_return_sequences=1,
                                 forced_bos_token_id=None, forced_eos_token_id=None):
    """(sequences padded with pad_token_id, their scores, decoding steps taken)."""
    config = model.config
    start, eos, pad = config.decoder_start_token_id, config.eos_token_id, config.pad_token_id
    batch, group_size = input_ids.shape[0], num_beams // num_beam_groups
    # hypothesis rows: source-major, then group, then beam
    source_ids, source_mask = input_ids.repeat_interleave(num_beams, 0), attention_mask.repeat_interleave(num_beams, 0)

    def rows_of(source, group):
        return [source * num_beams + group * group_size + i for i in range(group_size)]

    tokens = [[start] for _ in range(batch * num_beams)]
    beam_scores = torch.full((batch * num_beams,), -1e9)
    beam_scores[::group_size] = 0.0  # only the first beam of each group is alive at the start
    hyps = [[_Hypotheses(group_size, length_penalty, early_stopping, max_length) for _ in range(num_beam_groups)]
            for _ in range(batch)]
    done = [[False] * num_beam_groups for _ in range(batch)]
    processors = dict(no_repeat_ngram_size=no_repeat_ngram_size, min_length=min_length, max_length=max_length,
                      eos=eos, forced_bos=forced_bos_token_id, forced_eos=forced_eos_token_id)
    steps = 0
    while len(tokens[0]) < max_length:
        cur_len = len(tokens[0])  # start token included = generated length once this step's token is added
        logits = model(input_ids=source_ids, attention_mask=source_mask,
                       decoder_input_ids=torch.tensor(tokens)).logits[:, -1].float()
        log_probs = F.log_softmax(logits, dim=-1)
        vocab = log_probs.shape[-1]
        chosen = [pad] * (batch * num_beams)     # the token each row takes at this step
        parent = list(range(batch * num_beams))  # the row each row continues
        next_scores = beam_scores.clone()
        for g in range(num_beam_groups):
            for b in range(batch):
                rows = rows_of(b, g)
                if done[b][g]:  # a finished group idles on pad tokens with score 0
                    for r in rows:
                        chosen[r], parent[r], next_scores[r] = pad, rows[0], 0.0
                    continue
                scores = log_probs[rows].clone()
                for token in chosen[b * num_beams:b * num_beams + g * group_size]:  # Hamming diversity
                    scores[:, token] -= diversity_penalty
                scores = torch.stack([_process_row(tokens[r], scores[i], **processors) for i, r in enumerate(rows)])
                totals = (scores + beam_scores[rows][:, None]).view(-1)
                top_scores, top_index = totals.topk(2 * group_size)
                kept = 0
                for rank in range(2 * group_size):
                    beam, token = divmod(int(top_index[rank]), vocab)
                    if token == eos:
                        if rank < group_size:  # eos candidates ranked >= group_size are ignored
                            hyps[b][g].add(tokens[rows[beam]], float(top_scores[rank]), cur_len)
                    else:
                        r = rows[kept]
                        chosen[r], parent[r], next_scores[r] = token, rows[beam], top_scores[rank]
                        kept += 1
                    if kept == group_size:
                        break
                done[b][g] = done[b][g] or hyps[b][g].is_done(float(top_scores.max()), cur_len)
        tokens = [tokens[parent[r]] + [chosen[r]] for r in range(batch * num_beams)]
        beam_scores = next_scores
        steps += 1
        if all(all(groups) for groups in done):
            break
    sequences, sequence_scores = [], []
    for b in range(batch):
        for g in range(num_beam_groups):
            if not done[b][g]:  # at max_length the running beams count as hypotheses
                for r in rows_of(b, g):
                    hyps[b][g].add(tokens[r], float(beam_scores[r]), len(tokens[r]) - 1)
        ranked = sorted((h for g in range(num_beam_groups) for h in hyps[b][g].beams), key=lambda h: h[0])
        for _ in range(num_return_sequences):
            score, hyp = ranked.pop()
            sequences.append(hyp + [eos] if len(hyp) < max_length else hyp)
            sequence_scores.append(score)
    width = max(map(len, sequences))
    return torch.tensor([s + [pad] * (width - len(s)) for s in sequences]), torch.tensor(sequence_scores), steps
