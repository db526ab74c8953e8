"""Generation parity with transformers' generate on the same weights (no downloads)."""
import itertools

import pytest
import torch
import torch.nn.functional as F
import transformers

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration
from tests.helpers.generation_parity import (
    Transformers457,
    difference,
    report,
    run_both,
)
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


# The calls whose semantics transformers 5.x changed (tests/helpers/generation_parity.py): compared with
# transformers 4.57's outputs, live or recorded.
def _beam_sampling(settings, attention_mask):
    return bool(settings.get("do_sample")) and settings.get("num_beams", 1) > 1


def _mask_inferred(settings, attention_mask):
    return attention_mask is None and settings.get("pad_token_id", 1) is not None


def _forced_eos_suppressed(settings, attention_mask):
    forced = settings.get("forced_eos_token_id")
    return forced is not None and set([forced] if isinstance(forced, int) else forced) <= set(
        settings.get("suppress_tokens") or ())


def _pair(seed: int, init_std: float, pre_ln: bool = False, **generation_config):
    torch.manual_seed(seed)
    config = dict(TINY, init_std=init_std, **generation_config)
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


def _grid_against_baseline(ours, hf, ids, mask, max_length: int, grid):
    """Greedy and 4 beams: each of the settings ``grid(baseline, num_beams)`` builds from transformers'
    unconstrained output, compared with transformers. Returns (problems, total, changed), changed
    counting the cases whose output differs from the baseline (the option acted)."""
    problems, total, changed = [], 0, 0
    for num_beams in (1, 4):
        base = dict(num_beams=num_beams, max_length=max_length)
        baseline = hf.generate(ids, attention_mask=mask, **base)
        for case in grid(baseline, num_beams):
            settings = dict(base, **case)
            got, expected = run_both(ours, hf, ids, mask, settings)
            total += 1
            problems += [p for p in [difference(got, expected, settings)] if p]
            changed += expected.shape != baseline.shape or not torch.equal(expected, baseline)
    return problems, total, changed


def _sampled_against_transformers(ours, hf, ids, mask, settings_list: list, generator_seed_offset: int):
    """Each sampling setting twice: after torch.manual_seed(i) (the global generator) and with
    generator= seeded with offset + i. Returns (problems, total, distinct outputs)."""
    problems, total, distinct = [], 0, set()
    for index, settings in enumerate(settings_list):
        for seed, use_generator in ((index, False), (generator_seed_offset + index, True)):
            got, expected = run_both(ours, hf, ids, mask, settings, seed=seed, use_generator=use_generator)
            total += 1
            problems += [p for p in [difference(got, expected, dict(settings, seed=seed))] if p]
            distinct.add(tuple(got.flatten().tolist()))
    return problems, total, distinct


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


def test_every_option_has_transformers_default_and_the_config_takes_the_table():
    """One table of options (bart.generation.options.OPTIONS): each default is transformers'
    GenerationConfig()'s where transformers has the option (the not-implemented ones too); BartConfig's
    classic generation keys, their types and the keys it knows come from the table, not a copy."""
    from bart.configuration import configuration_bart
    from bart.generation.options import KINDS, NOT_IMPLEMENTED, OPTIONS
    reference = transformers.GenerationConfig()
    # transformers 5.x leaves an unset option None and applies its default at generate time (the table
    # _get_default_generation_params); 4.57 stores the default on the object
    applied = getattr(reference, "_get_default_generation_params", dict)()
    compared = 0
    for name, default in [(o.name, o.default) for o in OPTIONS] + list(NOT_IMPLEMENTED.items()):
        if hasattr(reference, name):
            value = getattr(reference, name)
            if value is None and name not in applied:  # 5.x: unset and not in its table means off
                assert default in (None, False), name
            else:
                assert (applied[name] if value is None else value) == default, name
            compared += 1
    assert compared >= len(OPTIONS)  # transformers (4.57 and 5.x) has every option of the table
    assert len({o.name for o in OPTIONS}) == len(OPTIONS) and not set(NOT_IMPLEMENTED) & {o.name for o in OPTIONS}
    classic = {o.name: o for o in OPTIONS if o.classic}
    assert {k: configuration_bart._DEFAULTS[k] for k in classic} == {k: o.default for k, o in classic.items()}
    assert all(configuration_bart._TYPES[k] == KINDS[o.kind].types for k, o in classic.items())
    config = BartConfig(**TINY)
    assert all(getattr(config, k) == o.default for k, o in classic.items())
    for option in OPTIONS:  # a known key, never taken for a misspelling
        BartConfig(**{option.name: None})


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
    for error in (TypeError, ValueError):  # an unexpected keyword is both
        with pytest.raises(error, match="num_beam_typo"):
            ours.generate(ids, num_beam_typo=3)
    with pytest.raises(ValueError, match="divisible"):
        ours.generate(ids, num_beams=4, num_beam_groups=3, diversity_penalty=1.0)


@pytest.mark.parametrize("settings,named", [
    (dict(penalty_alpha=0.6), "penalty_alpha"),                   # transformers options not implemented here
    (dict(typical_p=0.9, force_words_ids=[[5]]), "force_words_ids"),
    (dict(prefix_allowed_tokens_fn=lambda batch, ids: [5]), "prefix_allowed_tokens_fn"),
    (dict(stopping_criteria=[3]), "stopping_criteria"),
    (dict(generation_config={"num_beams": 2, "constraints": ["x"]}), "constraints"),
    (dict(generation_config=[("num_beams", 2)]), "generation_config"),  # neither a GenerationConfig nor a dict
    (dict(encoder_repetition_penalty=1.5, num_beams=2), "encoder_repetition_penalty"),  # invalid values
    (dict(encoder_repetition_penalty=0.0), "encoder_repetition_penalty"),
    (dict(suppress_tokens=[3, 99]), "suppress_tokens"),
    (dict(begin_suppress_tokens=5), "begin_suppress_tokens"),
    (dict(sequence_bias={(5, 99): 1.0}), "sequence_bias"),
    (dict(sequence_bias={(5,): "high"}), "sequence_bias"),
    (dict(sequence_bias={}), "sequence_bias"),
    (dict(exponential_decay_length_penalty=(-1, 1.5)), "exponential_decay_length_penalty"),
    (dict(exponential_decay_length_penalty=(2, 1.5), eos_token_id=None), "exponential_decay_length_penalty"),
    (dict(do_sample=True, typical_p=0.0), "typical_p"),
    (dict(do_sample=True, min_p=1.5), "min_p"),
    (dict(do_sample=True, epsilon_cutoff=1.0), "epsilon_cutoff"),
    (dict(do_sample=True, eta_cutoff=-0.1), "eta_cutoff"),
    (dict(max_time=-1), "max_time"),
    (dict(max_time="1s"), "max_time"),
    (dict(output_attentions=True), "output_attentions"),
    (dict(do_sample=True, num_beams=4, num_beam_groups=2, diversity_penalty=1.0), "num_beam_groups"),
    (dict(do_sample=True, temperature=0.0), "temperature"),         # invalid values
    (dict(do_sample=True, top_p=1.5), "top_p"),
    (dict(do_sample=True, top_k=-1), "top_k"),
    (dict(repetition_penalty=0.0), "repetition_penalty"),
    (dict(repetition_penalty="high"), "repetition_penalty"),
    (dict(bad_words_ids=[[5], [99]]), "bad_words_ids"),             # 99 is outside the vocabulary
    (dict(bad_words_ids=[]), "bad_words_ids"),
    (dict(bad_words_ids=[[5, -1]]), "bad_words_ids"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(min_new_tokens=-2), "min_new_tokens"),
    (dict(eos_token_id=[2, 3]), "eos_token_id"),
    (dict(generator=7), "generator"),
    (dict(max_length=None), "max_length"),                          # explicit None where None means nothing
    (dict(num_beams=None), "num_beams"),
    (dict(length_penalty=None, num_beams=2), "length_penalty"),
    (dict(early_stopping=None), "early_stopping"),
    (dict(num_return_sequences=None), "num_return_sequences"),
    (dict(num_beam_groups=None), "num_beam_groups"),
])
def test_unsupported_or_invalid_options_are_value_errors_naming_the_option(settings, named):
    ours, _ = _pair(7, 0.2)
    ids, _ = _inputs(7)
    with pytest.raises(ValueError, match=named):
        ours.generate(ids, **dict({"max_length": 10}, **settings))


# --- explicit arguments beat the config, None included ----------------------------------------

# generation settings stored in the model config (ours and transformers' alike)
CONFIGURED = dict(num_beams=4, max_length=16, forced_bos_token_id=0, forced_eos_token_id=2, no_repeat_ngram_size=2,
                  min_length=9, repetition_penalty=1.6, bad_words_ids=[[10]], encoder_no_repeat_ngram_size=2)
OVERRIDES = ["forced_eos_token_id", "forced_bos_token_id", "no_repeat_ngram_size", "min_length", "repetition_penalty",
             "bad_words_ids", "encoder_no_repeat_ngram_size", "decoder_start_token_id", "pad_token_id", "eos_token_id",
             "max_new_tokens", "min_new_tokens", "diversity_penalty", "temperature", "top_k", "top_p", "do_sample"]
# with these set to None the output must change (the config's value really is overridden)
CHANGES_OUTPUT = ["forced_eos_token_id", "forced_bos_token_id", "no_repeat_ngram_size", "min_length",
                  "repetition_penalty", "bad_words_ids", "decoder_start_token_id", "eos_token_id"]


def test_explicit_none_overrides_the_config_like_transformers(one_thread):
    ours, hf = _pair(8, 0.3, **CONFIGURED)
    with torch.no_grad():
        for model in (ours, hf):
            model.final_logits_bias[0, 2] = 2.0  # EOS at several steps, so min_length matters
    hf = Transformers457(hf)  # generation keys in the model config: 5.x leaves them out
    ids, mask = _inputs(8)
    problems, total = [], 0
    for num_beams in (None, 1):  # the config's 4 beams, and greedy
        beams = {} if num_beams is None else {"num_beams": num_beams}
        baseline, expected = run_both(ours, hf, ids, mask, beams)
        problems += [p for p in [difference(baseline, expected, beams)] if p]
        assert expected.shape[1] == 16 and bool((expected[:, 1] == 0).all())  # the config is in effect
        for key in OVERRIDES:
            settings = dict(beams, **{key: None})
            got, expected = run_both(ours, hf, ids, mask, settings)
            total += 1
            problems += [p for p in [difference(got, expected, settings)] if p]
            if key in CHANGES_OUTPUT:
                assert not torch.equal(got[:, :baseline.shape[1]], baseline[:, :got.shape[1]]), settings
            if key == "forced_eos_token_id":  # no longer forced: some row runs to max_length without EOS
                assert bool((got[:, -1] != 2).any())
    assert not problems, report(problems, total)
    assert total == 2 * len(OVERRIDES)
    # max_length=None is fine when max_new_tokens gives the length
    got, expected = run_both(ours, hf, ids, mask, dict(max_length=None, max_new_tokens=6))
    assert torch.equal(got, expected) and got.shape[1] == 7
    # use_cache=None is False, as for every flag (transformers 4.57's output for it matches neither
    # cache on nor off, so it is compared with ours here, not with transformers)
    assert torch.equal(ours.generate(ids, attention_mask=mask, use_cache=None),
                       ours.generate(ids, attention_mask=mask, use_cache=False))


def test_default_max_length_like_transformers(one_thread):
    """An untouched max_length of 20 means 20 new tokens in transformers (21 with the start token);
    20 passed explicitly means 20 in all."""
    ours, hf = _pair(9, 0.3)
    ids, mask = _inputs(9)
    for settings in (dict(num_beams=1), dict(num_beams=3), dict(num_beams=1, max_length=20)):
        got, expected = run_both(ours, hf, ids, mask, settings)
        assert torch.equal(got, expected), settings
        assert got.shape[1] == (20 if "max_length" in settings else 21)


def test_attention_mask_inferred_like_transformers(one_thread):
    """Without an attention_mask, pad positions are masked only when pad occurs in the input and is not
    EOS; with pad_token_id=None, pad is EOS, which every source contains, so nothing is masked."""
    ours, hf = _pair(15, 0.3)
    hf = Transformers457(hf, _mask_inferred)
    ids, _ = _inputs(15)  # row 1 is padded with 1
    for settings in (dict(num_beams=1), dict(num_beams=3, pad_token_id=None)):
        settings = dict(settings, max_length=12)
        got, expected = ours.generate(ids, **settings), hf.generate(ids, **settings)
        assert torch.equal(got, expected), settings
    from bart.generation.options import resolve as _options
    from bart.generation.session import default_attention_mask
    assert torch.equal(default_attention_mask(ids, _options(ours.config, {})), (ids != 1).long())
    assert bool((default_attention_mask(ids, _options(ours.config, {"pad_token_id": None})) == 1).all())


# --- options beyond the original grid: repetition_penalty, bad_words_ids, max/min_new_tokens ---------


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


# --- the decoding machinery: static cache, finished rows leaving the batch, batch independence ----------


def test_static_cache_equals_dynamic_cache(one_thread):
    """Step by step, with a beam reorder and sources leaving in between, the static cache gives the
    logits of the concatenating cache (the same kernels on the same values, the same LM head: equal)
    and those of a full forward without a cache (to tolerance)."""
    from bart.generation.session import Decoder
    from bart.modeling.modeling_bart import StaticCache
    ours, _ = _pair(16, 0.3)
    ids, mask = _ragged_inputs(16)
    beams, steps = 3, 7
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        encoder_hidden = ours.model.encoder(ids, mask)
        static = Decoder(ours, encoder_hidden, mask, True, beams, steps + 1)
        assert isinstance(static.cache, StaticCache)
        decoder = ours.model.decoder
        dynamic, live = None, [0, 1, 2]
        tokens = torch.full((3 * beams, 1), 2, dtype=torch.long)
        for step in range(steps):
            got = static.next_logits(tokens).clone()
            hidden, dynamic = decoder(tokens[:, -1:] if dynamic else tokens, encoder_hidden[live], mask[live],
                                      past_key_values=dynamic, use_cache=True)
            assert torch.equal(got, static.lm_head(hidden[:, -1]))
            full, _ = decoder(tokens, encoder_hidden[live], mask[live])
            torch.testing.assert_close(got, ours.lm_logits(full[:, -1]), atol=1e-5, rtol=1e-5)
            # a beam takes the history of a beam of its own source (as in beam search)
            rows = (torch.randint(0, beams, (tokens.shape[0],), generator=generator)
                    + torch.arange(tokens.shape[0]) // beams * beams)
            if step == 3:  # the middle source leaves
                keep = [0, 2]
                rows = torch.cat([rows[:beams], rows[-beams:]])
                static.keep_sources(keep, rows)
                live = [live[i] for i in keep]
            else:
                static.reorder(rows)
            dynamic = [(k[rows], v[rows], ck, cv) for k, v, ck, cv in dynamic]
            if step == 3:
                dynamic = [(k, v, ck[keep], cv[keep]) for k, v, ck, cv in dynamic]
            tokens = torch.cat([tokens[rows], torch.randint(4, 99, (rows.shape[0], 1), generator=generator)], 1)


def _count_drops(monkeypatch):
    """How many times finished sources leave the running batch during the calls that follow."""
    from bart.generation.session import Decoder
    calls = []
    original = Decoder.keep_sources
    monkeypatch.setattr(Decoder, "keep_sources", lambda self, sources, rows: (calls.append(len(sources)),
                                                                               original(self, sources, rows)))
    return calls


@pytest.mark.parametrize("seed,eos_bias", [(17, 4.5), (5, 3.0)])
def test_rows_finishing_at_different_steps_match_transformers(one_thread, monkeypatch, seed, eos_bias):
    """EOS made likely: sources finish at different steps, leave the running batch, and the outputs
    (with the cache and without) are still transformers' tokens."""
    ours, hf = _pair(seed, 0.3)
    with torch.no_grad():
        for model in (ours, hf):
            model.final_logits_bias[0, 2] = eos_bias
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (6, 14), generator=generator)
    ids[:, 0], ids[:, -1] = 0, 2
    ids[1, 9:], ids[1, 8], ids[4, 6:], ids[4, 5] = 1, 2, 1, 2
    mask = (ids != 1).long()
    drops = _count_drops(monkeypatch)
    problems, total, lengths, dropped = [], 0, set(), 0
    for settings in (dict(num_beams=1), dict(num_beams=1, no_repeat_ngram_size=3, min_length=4),
                     dict(num_beams=4), dict(num_beams=4, early_stopping=True),
                     dict(num_beams=3, length_penalty=2.0, num_return_sequences=2),
                     dict(num_beams=4, no_repeat_ngram_size=2, encoder_no_repeat_ngram_size=2, early_stopping=True),
                     dict(num_beams=4, use_cache=False), dict(num_beams=1, use_cache=False)):
        settings = dict(dict(no_repeat_ngram_size=2), **settings, max_length=20)  # no loops on one token
        before = len(drops)
        got, expected = run_both(ours, hf, ids, mask, settings)
        dropped += len(drops) > before
        total += 1
        problems += [p for p in [difference(got, expected, settings)] if p]
        lengths |= {int((row[1:] != 1).sum()) for row in expected}
    assert not problems, report(problems, total)
    assert dropped >= total - 1 and len(lengths) >= 5  # sources did leave early, at different lengths


def test_batch_of_one_equals_batched(one_thread):
    """Each source alone gives the tokens it gets in a batch (finished neighbours leaving the batch
    change nothing for the others)."""
    ours, _ = _pair(18, 0.3)
    with torch.no_grad():
        ours.final_logits_bias[0, 2] = 3.0
    ids, mask = _ragged_inputs(18, lengths=(12, 8, 5, 10))
    for settings in (dict(num_beams=1), dict(num_beams=4), dict(num_beams=4, early_stopping=True, length_penalty=2.0),
                     dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0, num_return_sequences=2)):
        settings = dict(settings, max_length=20, no_repeat_ngram_size=3)
        batched = ours.generate(ids, attention_mask=mask, **settings)
        count = settings.get("num_return_sequences", 1)
        for row in range(ids.shape[0]):
            alone = ours.generate(ids[row:row + 1], attention_mask=mask[row:row + 1], **settings)
            expected = batched[row * count:(row + 1) * count]
            width = max(alone.shape[1], expected.shape[1])
            assert torch.equal(_pad_to(alone, width), _pad_to(expected, width)), (settings, row)


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


@pytest.mark.parametrize("settings", [dict(num_beams=4, no_repeat_ngram_size=2),
                                      dict(num_beams=6, num_beam_groups=3, diversity_penalty=0.5)])
def test_beam_reorder_moves_only_what_it_must(one_thread, monkeypatch, settings):
    """A beam step reorders the cache by moving only each parent's further children into the slots of parents
    without children (StaticCache.reorder, mapped): the same tokens as moving every row's history every step,
    with fewer histories copied."""
    from bart.generation import cache as cache_module
    made = []
    original = cache_module.StaticCache.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(cache_module.StaticCache, "__init__", recording)
    model = _tiny_model(1, 0.0)
    ids, mask = _ragged_inputs(1)
    kwargs = dict(settings, max_length=12, min_length=11, attention_mask=mask)
    mapped = model.generate(ids, **kwargs)
    moved = made[-1].moved_rows
    monkeypatch.setattr(cache_module.StaticCache, "mapped", property(lambda self: False, lambda self, value: None),
                        raising=False)
    every = model.generate(ids, **kwargs)
    assert torch.equal(mapped, every)
    assert moved < made[-1].moved_rows
