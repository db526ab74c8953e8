"""Sampling and beam sampling against transformers under the same seed: the global generator or a given one
used and left as transformers leaves it, the scores."""
import itertools

import pytest
import torch

from tests.helpers.generation_parity import (
    Transformers457,
    report,
    run_both,
)
from tests.helpers.generation_parity import beam_sampling as _beam_sampling
from tests.helpers.generation_parity import (
    sampled_against_transformers as _sampled_against_transformers,
)
from tests.helpers.generation_parity import tiny_inputs as _inputs
from tests.helpers.generation_parity import tiny_pair as _pair

# --- sampling and beam sampling ---------------------------------------------------------------

WARPERS = [dict(), dict(temperature=0.7), dict(temperature=1.5), dict(top_k=5), dict(top_k=0), dict(top_p=0.8),
           dict(top_p=0.5, top_k=0), dict(temperature=1.3, top_k=20, top_p=0.9),
           dict(temperature=0.8, top_k=3, top_p=0.7, repetition_penalty=1.2, no_repeat_ngram_size=2)]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_sampling_matches_transformers_under_the_same_seed(one_thread, num_beams):
    """transformers samples with torch.multinomial on the global generator; ours gives the same tokens
    after the same torch.manual_seed, or from a torch.Generator seeded alike."""
    ours, hf = _pair(12, 0.1)  # a flat model: many tokens are likely
    hf = Transformers457(hf, _beam_sampling)
    ids, mask = _inputs(12)
    settings = [dict(warpers, do_sample=True, num_beams=num_beams, max_length=14, num_return_sequences=count)
                for warpers, count in itertools.product(WARPERS, (1, 2))]
    problems, total, distinct = _sampled_against_transformers(ours, hf, ids, mask, settings, 100)
    assert not problems, report(problems, total)
    assert total == 36 and len(distinct) >= 32  # the seeds and settings change the samples


def test_sampling_uses_the_generator_and_leaves_rng_like_transformers(one_thread):
    ours, hf = _pair(13, 0.1)
    ids, mask = _inputs(13)
    settings = dict(do_sample=True, max_length=14, top_k=0)
    first = ours.generate(ids, attention_mask=mask, generator=torch.Generator().manual_seed(1), **settings)
    again = ours.generate(ids, attention_mask=mask, generator=torch.Generator().manual_seed(1), **settings)
    other = ours.generate(ids, attention_mask=mask, generator=torch.Generator().manual_seed(2), **settings)
    assert torch.equal(first, again) and not torch.equal(first, other)
    # the global generator is advanced exactly as transformers advances it
    for num_beams in (1, 3):
        torch.manual_seed(5)
        hf.generate(ids, attention_mask=mask, num_beams=num_beams, **settings)
        after_hf = torch.get_rng_state()
        torch.manual_seed(5)
        ours.generate(ids, attention_mask=mask, num_beams=num_beams, **settings)
        assert torch.equal(torch.get_rng_state(), after_hf)
    # a passed generator leaves the global one alone
    state = torch.get_rng_state()
    ours.generate(ids, attention_mask=mask, generator=torch.Generator().manual_seed(3), **settings)
    assert torch.equal(torch.get_rng_state(), state)
    # top_k=1 sampling is greedy decoding
    greedy = ours.generate(ids, attention_mask=mask, max_length=14)
    assert torch.equal(ours.generate(ids, attention_mask=mask, do_sample=True, top_k=1, max_length=14), greedy)


def test_sampling_scores_match_transformers(one_thread):
    ours, hf = _pair(14, 0.1)
    ids, mask = _inputs(14)
    for num_beams in (1, 3):
        settings = dict(do_sample=True, num_beams=num_beams, max_length=12, top_k=10, temperature=0.9,
                        return_dict_in_generate=True, output_scores=True)
        got, expected = run_both(ours, hf, ids, mask, settings, seed=4)
        assert torch.equal(got.sequences, expected.sequences)
        assert len(got.scores) == len(expected.scores)
        for mine, theirs in zip(got.scores, expected.scores):
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
        if num_beams > 1:
            torch.testing.assert_close(got.sequences_scores, expected.sequences_scores, atol=1e-5, rtol=1e-5)
