"""Generation parity with transformers' generate on the same weights (no downloads)."""
import itertools

import pytest
import torch
import torch.nn.functional as F
import transformers

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration
from tests.helpers.group_beam_reference import reference_group_beam_search

TINY = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
            dropout=0.0, forced_eos_token_id=None)

GRID = [
    dict(num_beams=1),
    dict(num_beams=1, no_repeat_ngram_size=3, min_length=6),
    dict(num_beams=4),
    dict(num_beams=6),
    dict(num_beams=4, length_penalty=2.0),
    dict(num_beams=4, no_repeat_ngram_size=3),
    dict(num_beams=6, no_repeat_ngram_size=3, length_penalty=2.0, min_length=8),
    dict(num_beams=4, min_length=10),
    dict(num_beams=4, early_stopping=True),
    dict(num_beams=4, early_stopping=False, length_penalty=2.0),
    dict(num_beams=5, early_stopping="never", length_penalty=1.5),
    dict(num_beams=4, num_return_sequences=3),
    dict(num_beams=4, forced_bos_token_id=0, forced_eos_token_id=2),
    dict(num_beams=4, encoder_no_repeat_ngram_size=2),
    dict(num_beams=4, max_new_tokens=9),
]


def _pair(seed: int, init_std: float, pre_ln: bool = False):
    torch.manual_seed(seed)
    config = dict(TINY, init_std=init_std)
    if pre_ln:
        hf = transformers.MBartForConditionalGeneration(transformers.MBartConfig(**config, scale_embedding=False))
    else:
        hf = transformers.BartForConditionalGeneration(transformers.BartConfig(**config))
    ours = BartForConditionalGeneration(BartConfig(**config, pre_ln=pre_ln))
    ours.load_state_dict(hf.state_dict())
    return ours.eval(), hf.eval()


def _inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (3, 14), generator=generator)
    ids[:, 0], ids[:, -1] = 0, 2
    ids[1, 9:] = 1  # a padded row
    ids[1, 8] = 2
    return ids, (ids != 1).long()


@pytest.mark.parametrize("seed,init_std", [(0, 0.3), (1, 0.1)])
def test_sequences_match_transformers(seed, init_std):
    ours, hf = _pair(seed, init_std)
    ids, mask = _inputs(seed)
    distinct = set()
    for settings in GRID:
        settings = dict({"max_length": 20}, **settings)
        expected = hf.generate(ids, attention_mask=mask, **settings)
        got = ours.generate(ids, attention_mask=mask, **settings)
        assert got.shape == expected.shape, settings
        assert torch.equal(got, expected), settings
        distinct.add(tuple(got.flatten().tolist()))
    assert len(distinct) >= 5  # the settings really change the outputs


def test_scores_match_transformers():
    ours, hf = _pair(2, 0.2)
    ids, mask = _inputs(2)
    kwargs = dict(num_beams=4, max_length=16, num_return_sequences=2, return_dict_in_generate=True, output_scores=True)
    got, expected = ours.generate(ids, attention_mask=mask, **kwargs), hf.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(got.sequences, expected.sequences)
    torch.testing.assert_close(got.sequences_scores, expected.sequences_scores, atol=1e-5, rtol=1e-5)
    assert len(got.scores) == len(expected.scores)
    torch.testing.assert_close(got.scores[0], expected.scores[0], atol=1e-5, rtol=1e-5)


def test_pre_ln_matches_mbart():
    ours, hf = _pair(3, 0.2, pre_ln=True)
    ids, mask = _inputs(3)
    for settings in (dict(num_beams=1), dict(num_beams=4, no_repeat_ngram_size=3)):
        expected = hf.generate(ids, attention_mask=mask, max_length=18, decoder_start_token_id=2, **settings)
        assert torch.equal(ours.generate(ids, attention_mask=mask, max_length=18, **settings), expected)


def test_cache_off_equals_cache_on():
    ours, _ = _pair(4, 0.2)
    ids, mask = _inputs(4)
    on = ours.generate(ids, attention_mask=mask, num_beams=4, max_length=16)
    assert torch.equal(on, ours.generate(ids, attention_mask=mask, num_beams=4, max_length=16, use_cache=False))


def test_defaults_come_from_config():
    ours, _ = _pair(5, 0.2)
    ids, mask = _inputs(5)
    ours.config.num_beams, ours.config.max_length, ours.config.no_repeat_ngram_size = 3, 11, 2
    assert torch.equal(ours.generate(ids, attention_mask=mask),
                       ours.generate(ids, attention_mask=mask, num_beams=3, max_length=11, no_repeat_ngram_size=2))


def test_diverse_groups():
    ours, _ = _pair(6, 0.3)
    ids, mask = _inputs(6)
    one_group = ours.generate(ids, attention_mask=mask, num_beams=4, max_length=14, num_beam_groups=1)
    assert torch.equal(one_group, ours.generate(ids, attention_mask=mask, num_beams=4, max_length=14))
    out = ours.generate(ids, attention_mask=mask, num_beams=4, max_length=14, num_beam_groups=4,
                        diversity_penalty=100.0, num_return_sequences=4, no_repeat_ngram_size=0)
    firsts = out.view(3, 4, -1)[:, :, 1]
    # with a huge penalty every group starts with a different token
    assert all(len(set(row.tolist())) == 4 for row in firsts)


def test_unknown_arguments_fail_loudly():
    ours, _ = _pair(7, 0.2)
    ids, _ = _inputs(7)
    with pytest.raises(TypeError, match="num_beam_typo"):
        ours.generate(ids, num_beam_typo=3)
    with pytest.raises(NotImplementedError, match="sampling"):
        ours.generate(ids, do_sample=True)
    with pytest.raises(ValueError, match="divisible"):
        ours.generate(ids, num_beams=4, num_beam_groups=3, diversity_penalty=1.0)


# --- diverse (group) beam search ---------------------------------------------------------------
# The reference is tests/helpers/group_beam_reference.py (the classic transformers algorithm).


def _tiny_model(seed: int, eos_bias: float):
    """Ours alone (the reference needs no transformers model); ``eos_bias`` makes eos likely so that
    hypotheses finish at many different steps."""
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(BartConfig(**TINY, init_std=0.3)).eval()
    with torch.no_grad():
        model.final_logits_bias[0, model.config.eos_token_id] = eos_bias
    return model


def _ragged_inputs(seed: int, lengths=(12, 8, 5)):
    """Sources of different lengths, right-padded."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (len(lengths), max(lengths)), generator=generator)
    ids[:, 0] = 0
    for row, length in enumerate(lengths):
        ids[row, length - 1], ids[row, length:] = 2, 1
    return ids, (ids != 1).long()


def _pad_to(sequences: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(sequences, (0, width - sequences.shape[1]), value=1)


@pytest.fixture
def one_thread():
    """Tiny matmuls gain nothing from threads, and on shared cores they slow the test down a lot."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


DIVERSE_GRID = [dict(diversity_penalty=dp, length_penalty=lp, early_stopping=es, no_repeat_ngram_size=ngram,
                     return_all=return_all)
                for dp, lp, es, ngram, return_all in itertools.product((0.5, 2.0), (1.0, 2.0), (True, False), (0, 3),
                                                                        (False, True))]


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
