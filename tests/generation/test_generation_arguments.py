"""Explicit arguments of generate beat the config's generation keys (None included), the default max_length and
the attention mask inferred from the padding, as transformers does."""

import torch

from tests.helpers.generation_parity import (
    Transformers457,
    difference,
    report,
    run_both,
)
from tests.helpers.generation_parity import mask_inferred as _mask_inferred
from tests.helpers.generation_parity import tiny_inputs as _inputs
from tests.helpers.generation_parity import tiny_pair as _pair

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
