"""Every option of transformers' generate against transformers: repetition_penalty, bad_words_ids,
max/min_new_tokens, the rest of the logits processors and warpers, max_time, a generation_config argument or
file, the caller's own processors and stopping criteria, decoder_input_ids."""

import pytest
import torch
import transformers

from tests.helpers.generation_parity import (
    Transformers457,
    difference,
    report,
    run_both,
)
from tests.helpers.generation_parity import beam_sampling as _beam_sampling
from tests.helpers.generation_parity import (
    forced_eos_suppressed as _forced_eos_suppressed,
)
from tests.helpers.generation_parity import (
    grid_against_baseline as _grid_against_baseline,
)
from tests.helpers.generation_parity import (
    sampled_against_transformers as _sampled_against_transformers,
)
from tests.helpers.generation_parity import tiny_inputs as _inputs
from tests.helpers.generation_parity import tiny_pair as _pair

# --- repetition_penalty, bad_words_ids, max/min_new_tokens against a grid built from the baseline -----------


def _option_grid(baseline: torch.Tensor, num_beams: int):
    """Deterministic settings; the banned words come from the unconstrained output so they matter."""
    row = baseline[0, 1:].tolist()
    other = baseline[2, 1:].tolist()
    words = {"one token": [[row[0]]], "two tokens": [row[1:3]], "three tokens": [other[2:5]],
             "mixed, with EOS alone (ignored)": [[row[3]], other[0:2], [2], row[4:7]]}
    grid = [dict(repetition_penalty=p) for p in (1.3, 2.0, 0.8)]
    grid += [dict(bad_words_ids=w) for w in words.values()]
    grid += [dict(max_new_tokens=5), dict(max_new_tokens=12, max_length=30), dict(min_new_tokens=12),
             dict(min_new_tokens=15, min_length=3), dict(min_length=9, max_new_tokens=10)]
    grid += [dict(repetition_penalty=1.5, no_repeat_ngram_size=2, bad_words_ids=words["mixed, with EOS alone (ignored)"],
                  min_new_tokens=8, forced_eos_token_id=2)]
    return grid


@pytest.mark.parametrize("seed,init_std,eos_bias", [(10, 0.3, 0.0), (11, 0.2, 2.5)])
def test_new_options_match_transformers(one_thread, seed, init_std, eos_bias):
    ours, hf = _pair(seed, init_std)
    with torch.no_grad():
        for model in (ours, hf):
            model.final_logits_bias[0, 2] = eos_bias  # EOS at several steps, so min lengths matter
    ids, mask = _inputs(seed)
    problems, total, changed = _grid_against_baseline(ours, hf, ids, mask, 18, _option_grid)
    assert not problems, report(problems, total)
    assert total == 26 and changed >= 22, changed  # the options really act


# --- the rest of transformers' processors and warpers, max_time, generation_config ------------------


def _processor_grid(baseline: torch.Tensor, num_beams: int):
    """Settings built from the unconstrained output, so that each one has something to act on."""
    row, other = baseline[0, 1:].tolist(), baseline[2, 1:].tolist()
    grid = [dict(sequence_bias={(row[0],): -100.0}),                       # one token, pushed out
            dict(sequence_bias={(7,): 8.0}),                                # one token, pulled in
            dict(sequence_bias={tuple(row[1:3]): -50.0, (other[3],): -3.0}),  # a two-token sequence and a token
            dict(sequence_bias=[[[row[2], row[3]], -40.0], [[9, 10, 11], 5.0]]),  # transformers' list form
            dict(suppress_tokens=[row[0], other[1], row[4]]),
            dict(begin_suppress_tokens=[row[0], other[0]]),
            dict(begin_suppress_tokens=[row[1]], forced_bos_token_id=row[0]),  # the second position then
            dict(exponential_decay_length_penalty=(2, 1.6)),
            dict(exponential_decay_length_penalty=(0, 0.7), min_new_tokens=3),
            dict(remove_invalid_values=True, no_repeat_ngram_size=1, bad_words_ids=[[row[0]]]),
            dict(renormalize_logits=True, repetition_penalty=1.4),
            dict(sequence_bias={(row[0],): -100.0}, suppress_tokens=[other[0]], begin_suppress_tokens=[row[1]],
                 exponential_decay_length_penalty=(3, 1.3), renormalize_logits=True, no_repeat_ngram_size=2,
                 forced_eos_token_id=2)]
    if num_beams == 1:
        grid += [dict(encoder_repetition_penalty=p) for p in (3.0, 0.4)]
    return grid


@pytest.mark.parametrize("seed,init_std,eos_bias", [(20, 0.3, 1.5), (21, 0.2, 3.0)])
def test_more_processors_match_transformers(one_thread, seed, init_std, eos_bias):
    """sequence_bias, encoder_repetition_penalty, suppress_tokens, begin_suppress_tokens,
    exponential_decay_length_penalty, remove_invalid_values and renormalize_logits: the same tokens as
    transformers' generate, for greedy and beam search, and the options really act."""
    ours, hf = _pair(seed, init_std)
    with torch.no_grad():
        for model in (ours, hf):
            model.final_logits_bias[0, 2] = eos_bias  # EOS competes, so the length penalties matter
    ids, mask = _inputs(seed)
    hf = Transformers457(hf, _forced_eos_suppressed)  # 5.x refuses forcing a token it suppresses
    problems, total, changed = _grid_against_baseline(ours, hf, ids, mask, 16, _processor_grid)
    assert not problems, report(problems, total)
    assert total == 26 and changed >= 20, changed


def test_processed_scores_match_transformers(one_thread):
    """remove_invalid_values and renormalize_logits change scores, not only choices: compare them."""
    ours, hf = _pair(22, 0.3)
    ids, mask = _inputs(22)
    for num_beams in (1, 3):
        settings = dict(num_beams=num_beams, max_length=10, return_dict_in_generate=True, output_scores=True,
                        remove_invalid_values=True, renormalize_logits=True, no_repeat_ngram_size=1,
                        sequence_bias={(5,): 2.0, (6, 7): -1.0})
        got, expected = run_both(ours, hf, ids, mask, settings)
        assert torch.equal(got.sequences, expected.sequences)
        assert len(got.scores) == len(expected.scores)
        for mine, theirs in zip(got.scores, expected.scores):
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
        assert all(bool(torch.isfinite(step).all()) for step in got.scores)  # remove_invalid_values acted
        if num_beams == 1:  # renormalized: each row is a log-distribution
            torch.testing.assert_close(got.scores[0].exp().sum(-1), torch.ones(3), atol=1e-4, rtol=0)


NEW_WARPERS = [dict(min_p=0.2), dict(min_p=0.05, temperature=1.4), dict(typical_p=0.6), dict(typical_p=0.9, top_k=0),
               dict(epsilon_cutoff=0.02), dict(eta_cutoff=0.05, top_k=0), dict(min_p=0.1, typical_p=0.8, top_p=0.9),
               dict(epsilon_cutoff=0.01, eta_cutoff=0.02, renormalize_logits=True, suppress_tokens=[4, 5])]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_more_warpers_match_transformers_under_the_same_seed(one_thread, num_beams):
    ours, hf = _pair(23, 0.1)  # a flat model: the cut-offs have many tokens to drop
    hf = Transformers457(hf, _beam_sampling)
    ids, mask = _inputs(23)
    settings = [dict(warpers, do_sample=True, num_beams=num_beams, max_length=14) for warpers in NEW_WARPERS]
    problems, total, distinct = _sampled_against_transformers(ours, hf, ids, mask, settings, 50)
    assert not problems, report(problems, total)
    assert total == 16 and len(distinct) >= 14
    if num_beams == 1:  # the warpers act: min_p=1 keeps only the most probable token, which is greedy decoding
        greedy = ours.generate(ids, attention_mask=mask, max_length=14)
        assert torch.equal(ours.generate(ids, attention_mask=mask, do_sample=True, min_p=1.0, top_k=0,
                                         max_length=14), greedy)


def test_max_time_like_transformers(one_thread):
    """max_time=0: the first step is the last (its candidates stop as at max_length); a long max_time
    changes nothing."""
    ours, hf = _pair(24, 0.3)
    ids, mask = _inputs(24)
    for num_beams in (1, 4):
        full, _ = run_both(ours, hf, ids, mask, dict(num_beams=num_beams, max_length=12))
        got, expected = run_both(ours, hf, ids, mask, dict(num_beams=num_beams, max_length=12, max_time=0.0))
        assert torch.equal(got, expected) and got.shape[1] == 2, (got, expected)
        assert torch.equal(ours.generate(ids, attention_mask=mask, num_beams=num_beams, max_length=12,
                                         max_time=3600.0), full)


def test_generation_config_argument_like_transformers(one_thread):
    """generate(generation_config=...): its values beat the model's config, the call's keywords beat
    it, and values left at transformers' defaults fall back to the model's (transformers >= 4.50)."""
    ours, hf = _pair(25, 0.3, num_beams=4, no_repeat_ngram_size=2, max_length=14, forced_bos_token_id=0)
    hf = Transformers457(hf)  # generation keys in the model config: 5.x leaves them out
    ids, mask = _inputs(25)
    configs = [transformers.GenerationConfig(num_beams=2, length_penalty=2.0),
               transformers.GenerationConfig(max_new_tokens=6, suppress_tokens=[7, 8]),
               transformers.GenerationConfig(num_beams=1, do_sample=True, top_k=5, temperature=0.8),
               transformers.GenerationConfig(forced_bos_token_id=None, min_length=5)]  # None = default: the model's
    baseline = ours.generate(ids, attention_mask=mask)
    for index, config in enumerate(configs):
        for extra in ({}, {"max_length": 9, "num_beams": 3}):
            settings = dict(extra, generation_config=config)
            got, expected = run_both(ours, hf, ids, mask, settings, seed=index)
            assert torch.equal(got, expected), (config, extra, got, expected)
    assert bool((got[:, 1] == 0).all())  # the model's forced BOS stayed
    # a plain dict works like the GenerationConfig of the same values
    as_dict = ours.generate(ids, attention_mask=mask, generation_config={"num_beams": 2, "length_penalty": 2.0})
    assert torch.equal(as_dict, ours.generate(ids, attention_mask=mask, generation_config=configs[0]))
    assert not torch.equal(as_dict, baseline)


def test_generation_config_path(one_thread, tmp_path):
    """A path (run_eval.py --generation_config PATH): a generation_config.json as transformers' save_pretrained
    writes it, or its folder, acts as the GenerationConfig it holds; a bad path is one error naming it."""
    ours, _ = _pair(25, 0.3, num_beams=4, no_repeat_ngram_size=2, max_length=14)
    ids, mask = _inputs(25)
    config = transformers.GenerationConfig(num_beams=2, length_penalty=2.0, suppress_tokens=[7, 8])
    config.save_pretrained(str(tmp_path))
    expected = ours.generate(ids, attention_mask=mask, generation_config=config)
    for path in (tmp_path, tmp_path / "generation_config.json", str(tmp_path)):
        assert torch.equal(ours.generate(ids, attention_mask=mask, generation_config=path), expected)
    (tmp_path / "broken.json").write_text("{not json")
    for bad, named in ((tmp_path / "missing.json", "missing.json"), (tmp_path / "broken.json", "broken.json")):
        with pytest.raises(ValueError, match=named):
            ours.generate(ids, attention_mask=mask, generation_config=bad)


class _BanAfter:
    """A caller's processor: bans ``token`` once the hypothesis has ``length`` tokens."""

    def __init__(self, token: int, length: int):
        self.token, self.length = token, length

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] >= self.length:
            scores = scores.clone()
            scores[:, self.token] = -float("inf")
        return scores


class _StopOn(transformers.StoppingCriteria):
    """A caller's criterion: a row stops when its last token is ``token``."""

    def __init__(self, token: int):
        self.token = token

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == self.token


def test_callers_processors_and_criteria_like_transformers(one_thread):
    """logits_processor= and stopping_criteria= (transformers' list classes, or plain lists of callables):
    applied after the built-in processors, rows stop where transformers stops them."""
    ours, hf = _pair(26, 0.3)
    ids, mask = _inputs(26)

    def grid(baseline, num_beams):
        row = baseline[0, 1:].tolist()
        return [dict(logits_processor=transformers.LogitsProcessorList([_BanAfter(row[2], 3)])),
                dict(logits_processor=[transformers.NoRepeatNGramLogitsProcessor(2), _BanAfter(row[0], 1)],
                     repetition_penalty=1.3),
                dict(stopping_criteria=transformers.StoppingCriteriaList([_StopOn(row[3])])),
                dict(stopping_criteria=[_StopOn(row[1]), _StopOn(baseline[2, 4].item())],
                     logits_processor=[_BanAfter(row[5], 2)], no_repeat_ngram_size=3)]

    problems, total, changed = _grid_against_baseline(ours, hf, ids, mask, 14, grid)
    assert not problems, report(problems, total)
    assert total == 8 and changed == 8, changed
    for bad in (_BanAfter(5, 2), [5]):
        with pytest.raises(ValueError, match="logits_processor must be a list of callables"):
            ours.generate(ids, logits_processor=bad)


def test_decoder_input_ids_like_transformers(one_thread):
    """decoder_input_ids: the decoder continues the given tokens (the start token is put in front when
    no row has it); max_length counts them, max_new_tokens / min_new_tokens / the default length / the
    length penalty / begin_suppress_tokens / exponential_decay_length_penalty count after them."""
    ours, hf = _pair(27, 0.3)
    with torch.no_grad():
        for model in (ours, hf):
            model.final_logits_bias[0, 2] = 2.0  # EOS at several steps, so the lengths matter
    ids, mask = _inputs(27)
    baseline = hf.generate(ids, attention_mask=mask, num_beams=1, max_length=12)
    prompts = {"start only": baseline[:, :1], "start + 2": baseline[:, :3], "no start": baseline[:, 1:3],
               "others' tokens": torch.tensor([[2, 7], [2, 8], [2, 9]]), "mixed starts": torch.tensor([[2, 7], [5, 8], [2, 9]])}
    problems, total = [], 0
    for name, prompt in prompts.items():
        for settings in (dict(num_beams=1, max_length=12), dict(num_beams=4, max_length=12), dict(num_beams=4),
                         dict(num_beams=3, max_new_tokens=5, min_new_tokens=4, length_penalty=2.0),
                         dict(num_beams=1, no_repeat_ngram_size=2, begin_suppress_tokens=[int(baseline[0, 3])],
                              exponential_decay_length_penalty=(1, 1.5), max_new_tokens=8),
                         dict(num_beams=3, early_stopping="never", max_length=10),
                         dict(do_sample=True, num_beams=1, max_length=10, num_return_sequences=2)):
            settings = dict(settings, decoder_input_ids=prompt)
            got, expected = run_both(ours, hf, ids, mask, settings, seed=total)
            total += 1
            problems += [p for p in [difference(got, expected, dict(settings, prompt=name))] if p]
    assert not problems, report(problems, total)
    assert total == 35
    got = ours.generate(ids, attention_mask=mask, decoder_input_ids=baseline[:, :3], max_length=12)
    assert torch.equal(got[:, :3], baseline[:, :3])  # the prompt is kept
    with pytest.raises(ValueError, match="decoder_input_ids have 4 tokens"):
        ours.generate(ids, attention_mask=mask, decoder_input_ids=baseline[:, :4], max_length=4)
    with pytest.raises(ValueError, match="decoder_input_ids has 2 rows for 3 sources"):
        ours.generate(ids, attention_mask=mask, decoder_input_ids=baseline[:2, :2])
    with pytest.raises(ValueError, match="decoder_input_ids must be"):
        ours.generate(ids, attention_mask=mask, decoder_input_ids=[[2, 5]])
