"""Generation parity with transformers' generate on the same weights (no downloads)."""
import pytest
import torch
import transformers

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration

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
