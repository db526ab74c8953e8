"""Reduced-precision decoding (bart/generation/precision.py, run_eval.py --decode_precision / --compile_generation):
int8 really int8, bf16 really bf16, the given model untouched, token agreement with fp32 on a small trained
model, the flags through run_eval.py, contradictory combinations refused in one line."""
import importlib
import json

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from bart.errors import UserError
from bart.generation.precision import (
    DECODE_PRECISIONS,
    check_decode_precision,
    prepare_for_decoding,
)
from bart.modeling.modeling_bart import BartForConditionalGeneration
from tests.helpers.synthetic import collate, example, tiny_config

SETTINGS = dict(max_new_tokens=14, eos_token_id=2, pad_token_id=1, decoder_start_token_id=2, bos_token_id=0,
                forced_bos_token_id=None, forced_eos_token_id=None)


@pytest.fixture(scope="module")
def trained():
    """A tiny model with weights of std 0.2: peaked next-token distributions (hypotheses run to
    max_new_tokens), unlike the default std 0.02 whose tiny model stops at once. Its agreement
    figures are lower bounds: a d_model-32 layer has the coarsest per-tensor int8 scales."""
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                                     init_std=0.2, max_position_embeddings=64)).eval()
    sources = collate([example(10_000 + i) for i in range(24)])
    return model, sources


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_int8_linear_layers_are_int8_and_the_given_model_is_untouched(trained):
    model, _ = trained
    before = _state(model)
    kinds_before = [type(m) for m in model.modules()]
    quantized = prepare_for_decoding(model, "int8")
    dynamic = torch.ao.nn.quantized.dynamic.Linear
    linears = [m for m in quantized.modules() if isinstance(m, (nn.Linear, dynamic))]
    # every projection, both feed-forward layers and the LM head: 2 encoder layers x 6, 2 decoder layers x 10, head
    assert len(linears) == 2 * 6 + 2 * 10 + 1
    assert all(type(m) is dynamic for m in linears), {type(m) for m in linears}
    assert all(m.weight().dtype == torch.qint8 for m in linears)
    assert quantized.model.shared.weight.dtype == torch.float32  # the embeddings stay fp32
    assert [type(m) for m in model.modules()] == kinds_before
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.lm_head.weight is model.model.shared.weight  # still tied


def test_bf16_is_a_bf16_copy_and_fp32_is_the_model_itself(trained):
    model, _ = trained
    half = prepare_for_decoding(model, "bf16")
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert prepare_for_decoding(model, "fp32") is model


# measured: bf16 0.967 (greedy) / 0.953 (beam 4), int8 0.783 / 0.742 of the tokens; bart-base sizes are in
# benchmarks/bench_generation.py's table (with the ROUGE change)
@pytest.mark.parametrize("precision,minimum", [("bf16", 0.93), ("int8", 0.7)])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_tokens_agree_with_fp32(trained, precision, minimum, num_beams):
    """The share of equal tokens (positions of the fp32 output) against fp32 decoding, and not all equal:
    the reduced precision really decodes with other numbers."""
    model, sources = trained
    settings = dict(SETTINGS, num_beams=num_beams, no_repeat_ngram_size=3 if num_beams > 1 else 0)
    reference = model.generate(sources["input_ids"], attention_mask=sources["attention_mask"], **settings)
    got = prepare_for_decoding(model, precision).generate(sources["input_ids"],
                                                          attention_mask=sources["attention_mask"], **settings)
    width = max(reference.shape[1], got.shape[1])
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=1)  # noqa: E731
    agreement = (pad(reference) == pad(got)).float().mean().item()
    assert reference.shape[1] == 15  # the hypotheses run to max_new_tokens: 14 positions compared per row
    assert minimum <= agreement < 1.0, (precision, num_beams, agreement)


def test_bad_precisions_are_one_line():
    with pytest.raises(UserError, match="--decode_precision 'fp8' is not one of fp32, bf16, int8"):
        check_decode_precision("fp8")
    with pytest.raises(UserError, match="--decode_precision bf16 with --fp16: .*drop one of them"):
        check_decode_precision("bf16", "fp16")
    with pytest.raises(UserError, match="int8 runs on CPU only.*cuda"):
        check_decode_precision("int8", device="cuda")
    check_decode_precision("fp32", "bf16")  # --bf16 autocast alone, as before
    assert DECODE_PRECISIONS == ("fp32", "bf16", "int8")


@pytest.fixture(scope="module")
def eval_world(tmp_path_factory, small_tokenizer_dir):
    from tests.helpers.corpus import micro_config
    from tests.helpers.summaries import write_summarization_data
    base = tmp_path_factory.mktemp("decode_precision")
    config = micro_config()
    (base / "config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    from bart.configuration import BartConfig
    torch.save(BartForConditionalGeneration(BartConfig(**config)).state_dict(), base / "weights.ckpt")
    data = write_summarization_data(str(base / "data"), sizes=(("train", 4), ("val", 4), ("test", 4)))
    return [str(base / "weights.ckpt"), str(base / "config.json"), data], small_tokenizer_dir, base


def _run_eval(argv):
    from tests.helpers.entry import run_entry
    return run_entry("run_eval.py", argv)


def test_run_eval_decodes_with_the_precision_and_compile_asked(eval_world, monkeypatch, tmp_path):
    positional, tok, _ = eval_world
    run_eval = importlib.import_module("bart.cli.run_eval")
    seen = {}
    original = run_eval.run_evaluation

    def spy(model, tokenizer, args, gen_kwargs, *rest, **kw):
        seen["model"], seen["gen_kwargs"] = model, dict(gen_kwargs)
        return original(model, tokenizer, args, gen_kwargs, *rest, **kw)

    monkeypatch.setattr(run_eval, "run_evaluation", spy)
    monkeypatch.setattr("bart.generation.compiled._compiled", lambda model, mode: lambda *a: (seen.setdefault(
        "mode", mode), __import__("bart.generation.compiled", fromlist=["x"]).static_step(model, *a))[1])
    out = tmp_path / "out"
    code = _run_eval(positional + [str(out), "--tokenizer", tok, "--device", "cpu", "--bs", "2", "--max_target_length",
                                   "8", "--max_source_length", "32", "--decode_precision", "int8", "--compile_generation"])
    assert code == 0
    layers = [m for m in seen["model"].modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert layers and not any(type(m) is nn.Linear for m in seen["model"].modules())
    assert seen["gen_kwargs"]["compile_generation"] == "default" and seen["mode"] == "default"
    assert len((out / "test_generations.txt").read_text().splitlines()) == 4


@pytest.mark.parametrize("argv,words", [
    (["--decode_precision", "bf16", "--bf16"], ["--decode_precision bf16", "--bf16", "drop one"]),
    (["--decode_precision", "int8", "--fp16"], ["--decode_precision int8", "--fp16"]),
    (["--decode_precision", "fp8"], ["--decode_precision", "fp8"]),
    (["--compile_generation", "max-autotune"], ["--compile_generation", "max-autotune"]),
])
def test_run_eval_refuses_in_one_line(eval_world, tmp_path, capsys, argv, words):
    positional, tok, _ = eval_world
    out = tmp_path / "out"
    code = _run_eval(positional + [str(out), "--tokenizer", tok, "--device", "cpu"] + argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert all(w in err[-1] for w in words), err
    assert not out.exists()  # refused before anything was written


# -- fp32, packed: the linear layers' weights in oneDNN's blocked layout (run_eval.py's CPU default) ---------
PACKED_SETTINGS = [dict(num_beams=1), dict(num_beams=4, no_repeat_ngram_size=3),
                   dict(num_beams=4, min_new_tokens=6, length_penalty=2.0), dict(num_beams=3, early_stopping=True)]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
@pytest.mark.parametrize("pre_ln", [False, True], ids=["post_ln", "pre_ln"])
def test_packed_fp32_decodes_the_same_tokens_and_leaves_the_model_untouched(pre_ln):
    from bart.generation.precision import PackedLinear, can_pack

    torch.manual_seed(1)
    model = BartForConditionalGeneration(tiny_config(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                                     init_std=0.2, max_position_embeddings=64,
                                                     pre_ln=pre_ln)).eval()
    before = _state(model)
    assert can_pack(model)
    packed = prepare_for_decoding(model, "fp32", packed=True)
    assert packed is not model
    # every projection, both feed-forward layers and the tied LM head are packed; the given model keeps its own
    assert sum(type(m) is PackedLinear for m in packed.modules()) == 2 * 6 + 2 * 10 + 1
    assert not any(type(m) is nn.Linear for m in packed.modules())
    assert sum(type(m) is nn.Linear for m in model.modules()) == 2 * 6 + 2 * 10 + 1
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.lm_head.weight is model.model.shared.weight
    sources = collate([example(20_000 + i) for i in range(12)])
    sources["attention_mask"][3, 5:] = 0  # a padded source
    with torch.no_grad():
        for settings in PACKED_SETTINGS:
            want = model.generate(sources["input_ids"], attention_mask=sources["attention_mask"], packed=False,
                                  **SETTINGS, **settings)
            got = packed.generate(sources["input_ids"], attention_mask=sources["attention_mask"], **SETTINGS, **settings)
            assert torch.equal(got, want), settings
            assert (want != SETTINGS["pad_token_id"]).sum(1).float().mean() > 5  # hypotheses of some length
    # not for what it cannot take: a bf16 model, or unasked
    assert prepare_for_decoding(model, "fp32") is model
    assert not can_pack(model.to(torch.float16))
    assert prepare_for_decoding(model.to(torch.bfloat16), "fp32", packed=True) is model  # "fp32" packs fp32 only


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
def test_packed_linear_takes_what_a_linear_takes():
    from bart.generation.precision import PackedLinear, can_pack

    torch.manual_seed(3)
    for bias in (True, False):
        linear = nn.Linear(24, 40, bias=bias)
        packed = PackedLinear(linear)
        assert not hasattr(packed, "weight")
        for x in (torch.randn(5, 24), torch.randn(2, 3, 24), torch.randn(24, 7).t(), torch.randn(0, 24)):
            with torch.no_grad():
                got, want = packed(x), linear(x)
            assert got.shape == want.shape and got.dtype == torch.float32
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not can_pack(nn.ReLU())  # no parameters: nothing to pack (and no error)
    # the fused exact GELU is F.gelu of the product bit for bit
    linear = nn.Linear(24, 40)
    x = torch.randn(33, 24)
    with torch.no_grad():
        assert torch.equal(PackedLinear(linear, gelu=True)(x), F.gelu(PackedLinear(linear)(x)))


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
@pytest.mark.parametrize("activation", ["gelu", "gelu_new", "relu"])
def test_packing_fuses_only_the_exact_gelu_and_the_layers_give_the_same_values(activation):
    from bart.generation.precision import PackedLinear, pack_linears

    torch.manual_seed(2)
    model = BartForConditionalGeneration(tiny_config(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                                     activation_function=activation)).eval()
    packed = pack_linears(model)
    fused = [m.fc1.attr == "gelu" for m in packed.modules() if isinstance(getattr(m, "fc1", None), PackedLinear)]
    assert len(fused) == 4 and all(f == (activation == "gelu") for f in fused)
    sources = collate([example(30_000 + i) for i in range(3)])
    decoder_ids = sources["input_ids"][:, :7]
    with torch.no_grad():
        want = model(sources["input_ids"], attention_mask=sources["attention_mask"], decoder_input_ids=decoder_ids)
        got = packed(sources["input_ids"], attention_mask=sources["attention_mask"], decoder_input_ids=decoder_ids)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-4)
    if activation == "gelu":  # the int8 copy's forward too (its head is a quantized module, not a weight)
        with torch.no_grad():
            int8 = prepare_for_decoding(model, "int8")(sources["input_ids"], attention_mask=sources["attention_mask"],
                                                       decoder_input_ids=decoder_ids)
        assert int8.logits.shape == want.logits.shape
        assert (int8.logits.argmax(-1) == want.logits.argmax(-1)).float().mean() > 0.8


@pytest.mark.skipif(not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
                    reason="no oneDNN bf16 on this CPU")
def test_bf16_packed_keeps_bf16_weights_and_decodes_close_to_bf16():
    from bart.generation.precision import PackedLinear

    torch.manual_seed(1)
    model = BartForConditionalGeneration(tiny_config(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                                     init_std=0.2, max_position_embeddings=64)).eval()
    plain, packed = prepare_for_decoding(model, "bf16"), prepare_for_decoding(model, "bf16", packed=True)
    layers = [m for m in packed.modules() if type(m) is PackedLinear]
    assert len(layers) == 2 * 6 + 2 * 10 + 1 and all(m.packed_weight.dtype == torch.bfloat16 for m in layers)
    assert all(m.attr == "none" for m in layers)  # no fused GELU in bf16 (it would not be F.gelu's rounding)
    assert next(model.parameters()).dtype == torch.float32  # the given model untouched
    sources = collate([example(20_000 + i) for i in range(12)])
    with torch.no_grad():
        want = plain.generate(sources["input_ids"], attention_mask=sources["attention_mask"], **SETTINGS, num_beams=4)
        got = packed.generate(sources["input_ids"], attention_mask=sources["attention_mask"], **SETTINGS, num_beams=4)
    assert got.shape[0] == want.shape[0] == 12
    width = min(got.shape[1], want.shape[1])
    assert (got[:, :width] == want[:, :width]).float().mean() > 0.8


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
def test_compiling_a_packed_copy_is_refused_in_one_line():
    from bart.generation import GenerationOptionError

    model = BartForConditionalGeneration(tiny_config()).eval()
    packed = prepare_for_decoding(model, "fp32", packed=True)
    sources = collate([example(i) for i in range(2)])
    with pytest.raises(GenerationOptionError, match="packed decoding copy"):
        packed.generate(sources["input_ids"], attention_mask=sources["attention_mask"], max_length=6,
                        compile_generation=True)


def test_a_decoding_copy_is_not_prepared_again():
    model = BartForConditionalGeneration(tiny_config()).eval()
    copies = {"int8": prepare_for_decoding(model, "int8")}
    if torch.backends.mkldnn.is_available():
        copies["packed"] = prepare_for_decoding(model, "fp32", packed=True)
    for kind, made in copies.items():
        for precision in DECODE_PRECISIONS:
            with pytest.raises(UserError, match=f"already a decoding copy \\({kind}\\)"):
                prepare_for_decoding(made, precision, packed=True)


# -- plain model.generate() on CPU: the packed copy kept beside the model (its tensors untouched) -----------
def _packed_tiny(pre_ln=False, seed=1):
    torch.manual_seed(seed)
    return BartForConditionalGeneration(tiny_config(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, init_std=0.2,
                                                    max_position_embeddings=64, pre_ln=pre_ln)).eval()


def _decode(model, sources, **settings):
    if settings.get("do_sample"):
        settings = dict(settings, generator=torch.Generator().manual_seed(7))
    return model.generate(sources["input_ids"], attention_mask=sources["attention_mask"], **SETTINGS, **settings)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
@pytest.mark.parametrize("pre_ln", [False, True], ids=["post_ln", "pre_ln"])
def test_plain_generate_decodes_with_packed_weights_beside_the_model(pre_ln):
    """generate() on an fp32 eval model on CPU decodes with the packed copy kept beside the model: the tokens
    of the model's own weights (packed=False), over greedy, beam, sampling and processors, a padded source;
    the model's parameters, modules and state_dict() stay as they were; training mode drops the copy."""
    from bart.generation import precision

    model = _packed_tiny(pre_ln)
    before, parameters = _state(model), list(model.parameters())
    sources = collate([example(30_000 + i) for i in range(6)])
    sources["attention_mask"][2, 4:] = 0  # a padded source
    for settings in PACKED_SETTINGS + [dict(do_sample=True, top_k=8), dict(do_sample=True, num_beams=2)]:
        want = _decode(model, sources, packed=False, **settings)
        assert precision._BESIDE.get(model) is None or settings is not PACKED_SETTINGS[0]
        assert torch.equal(_decode(model, sources, **settings), want), settings
    stamp, packed = precision._BESIDE[model]
    assert sum(type(m) is precision.PackedLinear for m in packed.modules()) == 2 * 6 + 2 * 10 + 1
    assert not any(type(m) is precision.PackedLinear for m in model.modules())
    assert list(model.parameters()) == parameters and list(model.state_dict()) == list(before)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert packed.model.shared.weight is model.model.shared.weight  # the copy shares the model's tensors
    model.train()
    assert model not in precision._BESIDE
    _decode(model, sources, num_beams=2)  # a model in training mode decodes with its own weights
    assert model not in precision._BESIDE and model.training


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")
def test_plain_generate_follows_the_weights_and_leaves_training_alone():
    """After an optimizer step, load_state_dict or a move to another dtype, the next generate decodes with
    the new weights (the copy beside the model is made again); a model that generated trains exactly as
    one that did not (same loss, same gradients)."""
    from bart.generation import precision

    model, twin = _packed_tiny(seed=2), _packed_tiny(seed=2)
    sources = collate([example(40_000 + i) for i in range(4)])
    settings = dict(num_beams=3, no_repeat_ngram_size=3)
    first = _decode(model, sources, **settings)
    made = precision._BESIDE[model][1]
    losses = []
    for trained in (model, twin):  # training forward/backward (dropout on): the one that generated and its twin
        trained.train()
        torch.manual_seed(0)
        losses.append(trained(**sources).loss)
        losses[-1].backward()
    assert torch.equal(losses[0], losses[1])
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), twin.parameters()))
    model.eval()
    torch.optim.SGD(model.parameters(), lr=50.0).step()  # in place, in eval mode: only the tensors' versions tell
    second = _decode(model, sources, **settings)
    assert precision._BESIDE[model][1] is not made
    assert torch.equal(second, _decode(model, sources, packed=False, **settings)) and not torch.equal(second, first)
    other = _packed_tiny(seed=3)
    model.load_state_dict(other.state_dict())
    assert torch.equal(_decode(model, sources, **settings), _decode(other, sources, packed=False, **settings))
    model.double()  # not fp32: decoded with its own weights, the copy dropped
    _decode(model, sources, **settings)
    assert model not in precision._BESIDE
    model.float()
    assert torch.equal(_decode(model, sources, **settings), _decode(other, sources, packed=False, **settings))
    with pytest.raises(ValueError, match="packed must be True or False"):
        _decode(model, sources, packed="yes")
