"""Diverse (group) beam search against the reference algorithm (tests/helpers/group_beam_reference.py), with
the processors, and one group against transformers' beam search."""
import itertools

import pytest
import torch

from tests.helpers.generation_parity import pad_to as _pad_to
from tests.helpers.generation_parity import ragged_inputs as _ragged_inputs
from tests.helpers.generation_parity import tiny_model as _tiny_model
from tests.helpers.generation_parity import tiny_pair as _pair
from tests.helpers.group_beam_reference import reference_group_beam_search

# --- diverse (group) beam search ---------------------------------------------------------------
# The reference is tests/helpers/group_beam_reference.py (the classic transformers algorithm).


def _compare_with_reference(model, ids, mask, settings):
    """None if ours equals the reference, else a description of the difference; also the reference."""
    expected, expected_scores, steps = reference_group_beam_search(model, ids, mask, **settings)
    got = model.generate(ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **settings)
    plain = model.generate(ids, attention_mask=mask, **settings)
    width = max(expected.shape[1], got.sequences.shape[1], plain.shape[1])
    same = (torch.equal(_pad_to(got.sequences, width), _pad_to(expected, width))
            and torch.equal(_pad_to(plain, width), _pad_to(expected, width))
            and got.sequences_scores.shape == expected_scores.shape
            and torch.allclose(got.sequences_scores, expected_scores, atol=1e-5, rtol=1e-5))
    problem = None if same else (f"{settings}\n  reference {expected.tolist()} {expected_scores.tolist()}\n"
                                 f"  ours      {got.sequences.tolist()} {got.sequences_scores.tolist()}")
    return problem, expected, steps


def _report(problems, total, shown=3):
    head = f"{len(problems)} of {total} settings differ; the first {min(shown, len(problems))}:\n"
    return head + "\n".join(problems[:shown])


# A half of the 2^5 design (the settings whose levels sum to an even number): every value of each of
# the five options, and every pair of values of any two options, still occur (a resolution-V design),
# at half the searches of the full product.
DIVERSE_GRID = [dict(diversity_penalty=dp, length_penalty=lp, early_stopping=es, no_repeat_ngram_size=ngram,
                     return_all=return_all)
                for levels in itertools.product((0, 1), repeat=5) if sum(levels) % 2 == 0
                for dp, lp, es, ngram, return_all in [[choices[level] for choices, level in zip(
                    ((0.5, 2.0), (1.0, 2.0), (True, False), (0, 3), (False, True)), levels)]]]


@pytest.mark.parametrize("num_beams,num_beam_groups", [(4, 2), (4, 4), (6, 3)])
@pytest.mark.parametrize("seed,eos_bias", [(1, 4.0), (3, 3.0)])
def test_group_beam_search_matches_reference(one_thread, seed, eos_bias, num_beams, num_beam_groups):
    model = _tiny_model(seed, eos_bias)
    ids, mask = _ragged_inputs(seed)
    max_length, eos = 12, model.config.eos_token_id
    problems, distinct, eos_steps, stopped_early = [], set(), set(), False
    for case in DIVERSE_GRID:
        settings = dict(case, num_beams=num_beams, num_beam_groups=num_beam_groups, max_length=max_length,
                        num_return_sequences=num_beams if case["return_all"] else 1)
        del settings["return_all"]
        problem, expected, steps = _compare_with_reference(model, ids, mask, settings)
        if problem:
            problems.append(problem)
        distinct.add(tuple(expected.flatten().tolist()))
        for row in expected[:, 1:].tolist():
            eos_steps.add(row.index(eos) + 1 if eos in row else None)
        stopped_early |= steps < max_length - 1
    assert not problems, _report(problems, len(DIVERSE_GRID))
    # the grid covers what it should: the settings change the outputs, hypotheses end at several
    # steps or run to max_length, and some searches stop before max_length (is_done)
    assert len(distinct) >= 4
    assert len(eos_steps - {None}) >= 3 and None in eos_steps
    assert stopped_early


PROCESSOR_CASES = [
    dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0, min_length=6),
    dict(num_beams=6, num_beam_groups=3, diversity_penalty=1.0, min_length=8, no_repeat_ngram_size=2,
         num_return_sequences=3),
    dict(num_beams=4, num_beam_groups=4, diversity_penalty=0.5, forced_bos_token_id=0, forced_eos_token_id=2,
         num_return_sequences=4),
    dict(num_beams=6, num_beam_groups=3, diversity_penalty=1.0, forced_eos_token_id=2, early_stopping=True,
         num_return_sequences=2),
    dict(num_beams=4, num_beam_groups=2, diversity_penalty=2.0, early_stopping="never", length_penalty=1.5),
    dict(num_beams=6, num_beam_groups=2, diversity_penalty=1.0, early_stopping="never", length_penalty=0.5,
         num_return_sequences=6),
]


def test_group_beam_search_processors_match_reference(one_thread):
    model = _tiny_model(0, 3.0)
    ids, mask = _ragged_inputs(0)
    problems = [problem for settings in PROCESSOR_CASES
                for problem in [_compare_with_reference(model, ids, mask, dict(settings, max_length=12))[0]] if problem]
    assert not problems, _report(problems, len(PROCESSOR_CASES))


def test_group_reference_with_one_group_is_transformers_beam_search(one_thread):
    """Checks the reference itself: with one group it is plain beam search, and then it must equal
    transformers' beam search. early_stopping=True only: for False, transformers >= 4.50 (and ours)
    judge "can a running beam still improve?" by the best running beam, the classic scorer by the best
    of all candidates, finished ones included, so the two may legitimately stop at different steps."""
    ours, hf = _pair(3, 0.3)
    with torch.no_grad():
        for model in (ours, hf):
            model.final_logits_bias[0, 2] = 3.0  # eos at several steps
    ids, mask = _ragged_inputs(3)
    distinct = set()
    for num_beams, length_penalty, ngram, count in itertools.product((2, 4), (1.0, 2.0), (0, 3), (1, 2)):
        settings = dict(num_beams=num_beams, length_penalty=length_penalty, no_repeat_ngram_size=ngram,
                        num_return_sequences=count, early_stopping=True, max_length=12)
        expected = hf.generate(ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **settings)
        got, scores, _ = reference_group_beam_search(ours, ids, mask, num_beam_groups=1, diversity_penalty=0.0,
                                                      **settings)
        width = max(got.shape[1], expected.sequences.shape[1])
        assert torch.equal(_pad_to(got, width), _pad_to(expected.sequences, width)), settings
        torch.testing.assert_close(scores, expected.sequences_scores, atol=1e-5, rtol=1e-5)
        distinct.add(tuple(got.flatten().tolist()))
    assert len(distinct) >= 8
