"""The decoding machinery: the static cache against the dynamic one and a full forward, rows that finish
leaving the batch, a batch of one equal to the batch, a beam step's cache reorder moving only what it must."""

import pytest
import torch

from tests.helpers.generation_parity import difference, report, run_both
from tests.helpers.generation_parity import pad_to as _pad_to
from tests.helpers.generation_parity import ragged_inputs as _ragged_inputs
from tests.helpers.generation_parity import tiny_model as _tiny_model
from tests.helpers.generation_parity import tiny_pair as _pair

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


def _ragged_eos_pair(seed: int, eos_bias: float):
    """Our tiny model with EOS made likely, and six sources (two padded): rows finish at different steps."""
    ours, _ = _pair(seed, 0.3)
    with torch.no_grad():
        ours.final_logits_bias[0, 2] = eos_bias
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (6, 14), generator=generator)
    ids[:, 0], ids[:, -1] = 0, 2
    ids[1, 9:], ids[1, 8], ids[4, 6:], ids[4, 5] = 1, 2, 1, 2
    return ours, ids, (ids != 1).long()


@pytest.mark.parametrize("fixed_rows", [False, True], ids=["rows_leave", "rows_stay"])
def test_reading_done_rows_every_k_steps_gives_the_same_tokens(one_thread, monkeypatch, fixed_rows):
    """sync_every=k reads which rows are done every k-th step: done rows run on frozen in between, so greedy
    decoding, beam search (early stopping on, off and "never", groups, several returned sequences) and the
    uncached decoder give the tokens, and the output width, of a read after every step; with sources leaving
    the batch and with the rows fixed for the call (the compiled step's search)."""
    from bart.generation.session import Decoder
    monkeypatch.setattr(Decoder, "fixed_rows", fixed_rows, raising=False)
    drops = _count_drops(monkeypatch)
    for seed, eos_bias in ((17, 4.5), (5, 3.0)):
        ours, ids, mask = _ragged_eos_pair(seed, eos_bias)
        for settings in (dict(num_beams=1), dict(num_beams=1, min_length=4, no_repeat_ngram_size=3),
                         dict(num_beams=4), dict(num_beams=4, early_stopping=True),
                         dict(num_beams=4, early_stopping="never"),
                         dict(num_beams=3, length_penalty=2.0, num_return_sequences=2),
                         dict(num_beams=6, num_beam_groups=3, diversity_penalty=0.5),
                         dict(num_beams=4, use_cache=False), dict(num_beams=1, use_cache=False)):
            settings = dict(dict(no_repeat_ngram_size=2), **settings, max_length=20, attention_mask=mask)
            every_step = ours.generate(ids, **settings)
            for k in (2, 3, 7, 40):
                got = ours.generate(ids, sync_every=k, **settings)
                assert got.shape == every_step.shape and torch.equal(got, every_step), (seed, settings, k)
    assert bool(drops) != fixed_rows  # sources did leave the batch, or never did


def test_reading_every_k_steps_keeps_the_order_of_tied_hypotheses(one_thread):
    """A peaked model (bart-base's 6+6 layers, narrow, large random weights, EOS likely) finishes hypotheses with
    exactly equal scores (the same tokens in another order, log-probs of 0): a source that a read would have
    stopped keeps its finished hypotheses as they were, not re-ranked among the ties by the steps it runs on."""
    import json

    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    from tests.helpers import ROOT
    values = json.load(open(f"{ROOT}/configs/config_base.json"))
    values.update(d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1024, max_position_embeddings=66,
                  encoder_attention_heads=8, decoder_attention_heads=8, dropout=0.0, init_std=0.3, min_length=4,
                  forced_bos_token_id=None, forced_eos_token_id=None)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**values)).eval()
    with torch.no_grad():
        model.final_logits_bias[0, 2] = 8.0
    ids = torch.randint(4, 1024, (8, 64), generator=torch.Generator().manual_seed(0))
    settings = dict(max_length=49, num_beams=4, no_repeat_ngram_size=3)
    every_step = model.generate(ids, **settings)
    for k in (2, 8):
        assert torch.equal(model.generate(ids, sync_every=k, **settings), every_step), k
    # the case holds a tie: two finished hypotheses of one source with the same score
    out = model.generate(ids[5:6], return_dict_in_generate=True, output_scores=True, num_return_sequences=2, **settings)
    assert out.sequences_scores[0] == out.sequences_scores[1] and not torch.equal(*out.sequences)


def test_sync_every_that_cannot_be_honoured_is_refused():
    """sync_every must be a whole number of steps; with sampling, output_scores or the caller's processors (which
    see every step of every row, as in transformers) only 1 is honoured, and more is refused naming the option."""
    from bart.generation import GenerationOptionError
    model = _tiny_model(1, 0.0)
    ids, mask = _ragged_inputs(1)
    for bad in (0, 2.0, True, "4"):
        with pytest.raises(GenerationOptionError, match="sync_every must be an int >= 1"):
            model.generate(ids, attention_mask=mask, sync_every=bad)
    for settings in (dict(do_sample=True), dict(output_scores=True, return_dict_in_generate=True)):
        with pytest.raises(GenerationOptionError, match="sync_every=3 with do_sample, output_scores"):
            model.generate(ids, attention_mask=mask, sync_every=3, max_length=8, **settings)
