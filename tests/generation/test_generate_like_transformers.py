"""generate against transformers' on the same weights (no downloads): sequences and scores over a grid of
settings, Pre-LN against mBART, the cache on and off, defaults from the config and transformers' defaults,
unknown and unsupported options refused."""

import pytest
import torch
import transformers

from bart.configuration import BartConfig
from tests.helpers.generation_parity import (
    TINY,
)
from tests.helpers.generation_parity import tiny_inputs as _inputs
from tests.helpers.generation_parity import tiny_pair as _pair

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
