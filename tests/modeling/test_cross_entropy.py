"""The model's cross-entropy equals F.cross_entropy in value and in the logits' gradient."""
import pytest
import torch
import torch.nn.functional as F

from bart.modeling.cross_entropy import cross_entropy
from tests.helpers import ROOT
from tests.helpers.inductor import untraceable_autocast_query


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_matches_torch(reduction, smoothing):
    generator = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(37, 101, generator=generator)).requires_grad_()
    labels = torch.randint(0, 101, (37,), generator=generator)
    labels[[0, 5, 6, 30]] = -100  # padding
    upstream = torch.tensor(2.5)  # a loss scale or an accumulation factor on top of the loss
    expected = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=smoothing, reduction=reduction)
    (expected * upstream).backward()
    expected_grad, logits.grad = logits.grad, None
    got = cross_entropy(logits, labels, ignore_index=-100, label_smoothing=smoothing, reduction=reduction)
    (got * upstream).backward()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logits.grad, expected_grad, rtol=1e-6, atol=1e-7)
    assert not logits.grad[[0, 5, 6, 30]].any()  # ignored tokens get no gradient


def test_logits_left_untouched_and_errors():
    logits = torch.randn(4, 9, requires_grad=True)
    before = logits.detach().clone()
    cross_entropy(logits, torch.tensor([1, 2, -100, 8])).backward()
    assert torch.equal(logits.detach(), before)
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy(logits, torch.tensor([1, 2, 3, 4]), reduction="none")
    with pytest.raises(ValueError, match="tokens"):
        cross_entropy(logits[None], torch.tensor([[1, 2, 3, 4]]))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linear_cross_entropy_matches_logits_then_loss(smoothing, reduction):
    from bart.modeling.cross_entropy import linear_cross_entropy
    torch.manual_seed(0)
    hidden = torch.randn(37, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(53, 8, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(53, dtype=torch.float64)
    labels = torch.randint(0, 53, (37,))
    labels[::5] = -100
    expected = F.cross_entropy(F.linear(hidden, weight, bias), labels, ignore_index=-100,
                               label_smoothing=smoothing, reduction=reduction)
    expected_grads = torch.autograd.grad(expected * 3.0, (hidden, weight))
    # chunks of 10 tokens: the last chunk is partial, one chunk holds only ignored tokens' neighbours
    loss = linear_cross_entropy(hidden, weight, labels, bias=bias, label_smoothing=smoothing, reduction=reduction,
                                chunk_tokens=10)
    grads = torch.autograd.grad(loss * 3.0, (hidden, weight))
    torch.testing.assert_close(loss, expected)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


def test_fused_cross_entropy_in_the_model_equals_the_plain_loss():
    from bart.modeling import BartForConditionalGeneration
    from tests.helpers.synthetic import tiny_config
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0))
    ids = torch.randint(4, 64, (3, 9))
    labels = torch.randint(4, 64, (3, 5))
    labels[0, 3:] = -100
    results = []
    for fused in (False, True):
        model.zero_grad()
        out = model(input_ids=ids, labels=labels, label_smoothing=0.1, reduction="sum", fused_cross_entropy=fused)
        out.loss.backward()
        results.append((out.loss.detach(), [p.grad.clone() for p in model.parameters()], out.logits))
    torch.testing.assert_close(results[1][0], results[0][0])
    for got, want in zip(results[1][1], results[0][1]):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert results[1][2] is None  # the logits are never built


@pytest.mark.parametrize("autocast", [False, True])
def test_the_fused_loss_compiles_into_the_models_one_graph(monkeypatch, autocast):
    """torch.compile of a model that computes its loss fused, in fp32 and under bf16 autocast, traces one graph
    without a break, where dynamo cannot trace the question whether autocast is available (torch 2.11's: the fused
    loss made bart-large 3 graphs and a 100 s compile on an H200, against 1 graph and 60 s without it), and gives
    the eager loss and gradients."""
    from torch._dynamo.utils import counters

    from bart.modeling import BartForConditionalGeneration
    from tests.helpers.synthetic import tiny_config
    untraceable_autocast_query(monkeypatch)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0))
    ids, labels = torch.randint(4, 64, (3, 9)), torch.randint(4, 64, (3, 5))
    labels[0, 3:] = -100
    results = []
    torch._dynamo.reset()
    counters.clear()
    for forward in (model, torch.compile(model, backend="eager")):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = forward(input_ids=ids, labels=labels, label_smoothing=0.1, fused_cross_entropy=True).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch.testing.assert_close(results[1][0], results[0][0])
    for got, want in zip(results[1][1], results[0][1]):
        torch.testing.assert_close(got, want)


def test_gpu_benchmark_flops_formula_counts_the_models_matmul_weights():
    """bench_gpu_training's model FLOPs: 6 x (each Linear's weights x the tokens it sees) + attention,
    checked against the Linear layers of a real model, not restated from the formula."""
    import importlib.util
    import os

    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    path = os.path.join(ROOT, "benchmarks",
                        "bench_gpu_training.py")
    spec = importlib.util.spec_from_file_location("bench_gpu_training", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    config = BartConfig(vocab_size=100, d_model=16, encoder_layers=2, decoder_layers=3, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=40, decoder_ffn_dim=24, max_position_embeddings=64)
    model = BartForConditionalGeneration(config)
    source, target = 11, 7
    expected = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name != "lm_head":
            on_source = ".encoder." in name or ("encoder_attn." in name and name.split(".")[-1] in ("k_proj", "v_proj"))
            expected += module.weight.numel() * (source if on_source else target)
    expected += config.vocab_size * config.d_model * target  # the real words: padded rows are overhead, not model FLOPs
    d = config.d_model
    attention = 2 * d * (2 * source ** 2 + 3 * (target ** 2 + target * source))
    assert bench.model_flops_per_sequence(config, source, target) == 3 * (2 * expected + 2 * attention)


BF16_UNIT_ROUNDOFF = 2.0 ** -8  # bf16 keeps 8 significant bits: a rounding errs by at most 2^-8 relatively


def bf16_gradients_against_fp32(device: str, tokens: int, vocab: int = 50265, d_model: int = 256):
    """Loss and gradients of each path (plain: bf16 logits then the loss; fused: the chunked LM head + loss)
    under bf16 autocast, as relative errors against the same computation in strict fp32."""
    from bart.modeling.cross_entropy import linear_cross_entropy
    generator = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(tokens, d_model, device=device, generator=generator).requires_grad_()
    weight = (torch.randn(vocab, d_model, device=device, generator=generator) * 0.05).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), device=device, generator=generator)
    labels[::9] = -100
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        loss = cross_entropy(F.linear(hidden, weight), labels)
        reference = (loss.detach(), *torch.autograd.grad(loss, (hidden, weight)))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    errors = {}
    for name in ("plain", "fused"):
        with torch.autocast(device, dtype=torch.bfloat16):
            if name == "fused":
                loss = linear_cross_entropy(hidden, weight, labels, chunk_tokens=max(64, tokens // 4))
            else:
                loss = cross_entropy(F.linear(hidden, weight).float(), labels)
        got = (loss.detach(), *torch.autograd.grad(loss, (hidden, weight)))
        errors[name] = [float((a - b).norm() / b.norm()) for a, b in zip(got, reference)]
    return errors


def check_bf16_paths(device: str, tokens: int, d_model: int = 256) -> None:
    """At BART's vocabulary size under bf16 autocast, each path (plain and fused) against an fp32 reference.
    The bound comes from bf16's precision: a gradient here passes through four bf16 roundings (the operands
    of its product, the softmax gradient and the weight, each rounded once; the logits it came from; the
    product's result), each at most u = 2^-8 relatively, so its relative error is at most 4u (1.6%); the
    loss, a mean of per-token values each off by about one rounding, at most u. (The old test compared the
    two bf16 paths with each other against 1%, which two errors of ~0.7% each could exceed: 1.005% on an
    H200.) The bound does not depend on the width (the products accumulate in fp32). tests/e2e/test_gpu.py runs it on
    CUDA at width 256; on CPU, whose bf16 matmuls are slow, at 64 (2.5 s instead of 22 s, errors alike)."""
    errors = bf16_gradients_against_fp32(device, tokens, d_model=d_model)
    for name, (loss, grad_hidden, grad_weight) in errors.items():
        assert loss < BF16_UNIT_ROUNDOFF, (name, loss)
        assert grad_hidden < 4 * BF16_UNIT_ROUNDOFF, (name, grad_hidden)
        assert grad_weight < 4 * BF16_UNIT_ROUNDOFF, (name, grad_weight)


def test_bf16_loss_and_gradients_of_each_path_against_fp32():
    check_bf16_paths("cpu", tokens=128, d_model=64)
