"""generate(compile_generation=...): the static decode step (bart/generation/compiled.py) gives the eager
path's tokens. Most cases run the static step without torch.compile (same shapes, same code, seconds);
two run it under torch.compile (a tiny model: one graph per row count, compiled once per process)."""
import pytest
import torch

import bart.generation.compiled as compiled
import bart.generation.session as session
from bart.generation import GenerationOptionError
from bart.modeling.modeling_bart import BartForConditionalGeneration
from tests.helpers.inductor import scalar_inductor
from tests.helpers.synthetic import tiny_config

BASE = dict(max_new_tokens=12, eos_token_id=2, pad_token_id=1, decoder_start_token_id=2, bos_token_id=0)


def _model(pre_ln=False, eos_bias=0.0, seed=0):
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(tiny_config(init_std=0.2, pre_ln=pre_ln)).eval()
    model.final_logits_bias[0, 2] = eos_bias  # EOS likelier: rows end at different steps (ragged)
    return model


def _sources():
    ids = torch.randint(4, 64, (4, 11), generator=torch.Generator().manual_seed(1))
    ids[1, 8:] = 1  # padded sources: the encoder mask reaches the cross-attention
    ids[3, 5:] = 1
    return ids, (ids != 1).long()


CASES = {
    "greedy": dict(num_beams=1),
    "greedy-min_length": dict(num_beams=1, min_length=9, no_repeat_ngram_size=2),
    "beam-no_repeat": dict(num_beams=4, no_repeat_ngram_size=3),
    "beam-min_length-lp2": dict(num_beams=3, min_length=7, length_penalty=2.0),
    "beam-lp0.5-early": dict(num_beams=4, length_penalty=0.5, early_stopping=True, num_return_sequences=2),
    "beam-never": dict(num_beams=2, early_stopping="never", no_repeat_ngram_size=2),
    "group-beam": dict(num_beams=4, num_beam_groups=2, diversity_penalty=0.5),
    "forced-bos-eos": dict(num_beams=2, forced_bos_token_id=0, forced_eos_token_id=2),
    "repetition-bad-words": dict(num_beams=1, repetition_penalty=1.3, bad_words_ids=[[5], [7, 8]]),
}


# the cases whose sources end at different steps with the EOS bias (post-LN model; checked below)
RAGGED = {"greedy-min_length", "beam-no_repeat", "beam-lp0.5-early", "forced-bos-eos", "group-beam"}


@pytest.fixture
def uncompiled_step(monkeypatch):
    """The static step as plain Python (what torch.compile traces), counting its calls."""
    calls = []

    def fake(model, mode):
        def step(*args):
            calls.append(mode)
            return compiled.static_step(model, *args)
        return step

    monkeypatch.setattr(compiled, "_compiled", fake)
    return calls


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post-ln", "pre-ln"])
@pytest.mark.parametrize("eos_bias", [0.0, 1.5], ids=["long", "ragged-eos"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_static_step_gives_the_eager_tokens(uncompiled_step, monkeypatch, case, pre_ln, eos_bias):
    model = _model(pre_ln, eos_bias)
    ids, mask = _sources()
    settings = dict(BASE, **CASES[case])
    eager_steps = []
    lm_head = session.Decoder.lm_head
    monkeypatch.setattr(session.Decoder, "lm_head", lambda self, h: (eager_steps.append(1), lm_head(self, h))[1])
    expected = model.generate(ids, attention_mask=mask, **settings)
    steps = len(eager_steps)
    got = model.generate(ids, attention_mask=mask, compile_generation=True, **settings)
    assert got.shape == expected.shape and torch.equal(got, expected), (got.tolist(), expected.tolist())
    # every step ran the static step (none of the eager decoder's), as many steps as the eager path
    assert len(uncompiled_step) == steps >= 1 and set(uncompiled_step) == {"default"}
    # ragged: the eager path dropped finished sources, the static one kept its rows and gave the same tokens
    if eos_bias and not pre_ln and case in RAGGED:
        lengths = ((expected != 1) & (expected != 2)).sum(1)
        assert lengths.min() < lengths.max(), expected.tolist()


def test_static_step_with_a_decoder_prompt_and_sampling(uncompiled_step):
    model = _model(eos_bias=1.0)
    ids, mask = _sources()
    prompt = torch.tensor([[2, 5, 6]] * 4)
    for settings in (dict(BASE, num_beams=3, decoder_input_ids=prompt), dict(BASE, do_sample=True, top_k=5)):
        torch.manual_seed(3)
        expected = model.generate(ids, attention_mask=mask, **settings)
        torch.manual_seed(3)
        got = model.generate(ids, attention_mask=mask, compile_generation="reduce-overhead", **settings)
        assert torch.equal(got, expected), (settings, got.tolist(), expected.tolist())
    assert set(uncompiled_step) == {"reduce-overhead"}


def test_bad_compile_generation_values_are_one_line():
    model = _model()
    ids, mask = _sources()
    with pytest.raises(GenerationOptionError, match="compile_generation must be False, True, 'default' or "
                                                    "'reduce-overhead', got 'max-autotune'"):
        model.generate(ids, compile_generation="max-autotune", **BASE)
    with pytest.raises(GenerationOptionError, match="compile_generation needs use_cache=True"):
        model.generate(ids, compile_generation=True, use_cache=False, **BASE)


def test_torch_compile_gives_the_eager_tokens():
    """The real thing: torch.compile (inductor, CPU: scalar C++, tests/helpers/inductor.py) of the static step,
    ragged EOS: one graph without breaks per shape (greedy over 4 sources, beam search over 2 sources x 2 beams:
    cross-attention keys are per source), compiled once and reused by the later call of the same shapes (no
    recompilation per step)."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = _model(eos_bias=1.5)
    ids, mask = _sources()
    cases = [(ids, mask, dict(BASE, num_beams=1)),
             (ids[:2], mask[:2], dict(BASE, num_beams=2, no_repeat_ngram_size=2, min_length=4, length_penalty=1.5)),
             (ids, mask, dict(BASE, num_beams=1, no_repeat_ngram_size=2))]
    for source, source_mask, settings in cases:
        expected = model.generate(source, attention_mask=source_mask, **settings)
        with scalar_inductor():
            got = model.generate(source, attention_mask=source_mask, compile_generation=True, **settings)
        assert torch.equal(got, expected), (settings, got.tolist(), expected.tolist())
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
