"""CUDA-only checks: mixed precision training steps, LAMB on the GPU, generation on the GPU."""
import pytest
import torch

from bart.modeling import BartForConditionalGeneration
from bart.optim import Lamb, build_optimizer, build_scheduler, decay_groups
from bart.training.trainer import Trainer
from tests.helpers.synthetic import (
    SyntheticBatches,
    WalkBatches,
    one_process,
    run_settings,
    tiny_config,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _train(tmp_path, precision, steps=20, **options):
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0)).cuda()
    opt, clips = build_optimizer(model, "lamb", lr=2e-2, weight_decay=0.01)
    sched = build_scheduler(opt, "linear", 2, steps)
    settings = run_settings(precision, output_dir=str(tmp_path), max_steps=steps, log_freq=1, **options)
    trainer = Trainer(model, opt, sched, SyntheticBatches(4, 8), settings, strategy=one_process(model),
                      clips_internally=clips, progress_bar=False)
    trainer.fit()
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast, fp32 master weights
    return [h["loss"] for h in trainer.history]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_tracks_tf32(tmp_path, precision):
    reference = _train(tmp_path / "tf32", "tf32")
    losses = _train(tmp_path / precision, precision)
    assert len(losses) == 20 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    assert abs(losses[0] - reference[0]) < 2e-2 and abs(losses[-1] - reference[-1]) < 5e-2


def test_lamb_on_cuda_matches_cpu():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    gpu = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)).cuda()
    gpu.load_state_dict(cpu.state_dict())
    opts = [Lamb(decay_groups(m, 0.01), lr=1e-2) for m in (cpu, gpu)]
    for _ in range(5):
        grads = [torch.randn_like(p) for p in cpu.parameters()]
        for model, opt in zip((cpu, gpu), opts):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.to(p.device)
            opt.step()
    for a, b in zip(cpu.parameters(), gpu.parameters()):
        torch.testing.assert_close(a, b.cpu(), atol=1e-5, rtol=1e-5)


def test_generation_on_cuda_equals_cpu():
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0, init_std=0.2)).eval()
    ids = torch.randint(4, 64, (3, 12))
    ids[:, -1] = 2
    cpu_out = model.generate(ids, num_beams=4, max_length=16, no_repeat_ngram_size=2)
    gpu_out = model.cuda().generate(ids.cuda(), num_beams=4, max_length=16, no_repeat_ngram_size=2)
    assert torch.equal(cpu_out, gpu_out.cpu())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        half = model.generate(ids.cuda(), num_beams=4, max_length=16)
    assert half.shape[0] == 3


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_fused_cross_entropy_trains_like_the_plain_loss(tmp_path, precision):
    """--fused_cross_entropy under autocast: same losses as the logits path over 20 updates."""
    plain = _train(tmp_path / "plain", precision, label_smoothing=0.1)
    fused = _train(tmp_path / "fused", precision, label_smoothing=0.1, fused_cross_entropy=True)
    # bf16 rounds the logits; the fused path rounds the same products per chunk: both stay close
    assert max(abs(a - b) for a, b in zip(plain, fused)) < 2e-2, (plain, fused)


def test_fused_cross_entropy_large_vocab_bf16_gradients():
    """At BART's vocabulary size under bf16 autocast: loss and gradients of each path (logits + cross-entropy,
    and the chunked LM head + loss) against an fp32 reference, within bounds derived from bf16's precision
    (tests/modeling/test_cross_entropy.py: check_bf16_paths, which runs on CPU there)."""
    from tests.modeling.test_cross_entropy import check_bf16_paths
    check_bf16_paths("cuda", tokens=3000)


def _trained_tiny_model(tmp_path):
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0)).cuda()
    opt, clips = build_optimizer(model, "adamw", lr=3e-3, weight_decay=0.0)
    settings = run_settings("tf32", output_dir=str(tmp_path), max_steps=150, log_freq=50)
    Trainer(model, opt, build_scheduler(opt, "linear", 5, 150), SyntheticBatches(8, 16), settings,
            strategy=one_process(model), clips_internally=clips, progress_bar=False).fit()
    return model.eval()


@pytest.mark.parametrize("beams", [1, 4])
def test_generation_bf16_matches_fp32_tokens(tmp_path, beams):
    """A model that learned its task (reverse the source): bf16 autocast decoding gives fp32's tokens."""
    from tests.helpers.synthetic import collate, example
    model = _trained_tiny_model(tmp_path)
    batch = collate([example(i, epoch=99) for i in range(12)])
    ids, mask = batch["input_ids"].cuda(), batch["attention_mask"].cuda()
    torch.backends.cuda.matmul.allow_tf32 = False
    full = model.generate(ids, attention_mask=mask, num_beams=beams, max_length=14)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        half = model.generate(ids, attention_mask=mask, num_beams=beams, max_length=14)
    assert full.shape == half.shape and torch.equal(full, half)


def test_compile_trains_like_eager_on_cuda(tmp_path):
    eager = _train(tmp_path / "eager", "bf16", steps=6)
    compiled = _train(tmp_path / "compiled", "bf16", steps=6, compile=True)
    assert max(abs(a - b) for a, b in zip(eager, compiled)) < 2e-2, (eager, compiled)


def _fp8_capable() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def _walk_losses(tmp_path, precision, compiled, steps=100):
    """A micro BART (two layers per stack) on copy-task batches of 88 target tokens (no multiple of 16) on the GPU,
    --fp8 converted as the builder converts it (float8 products on the tensor cores, not emulated)."""
    from bart.configuration import BartConfig
    from bart.training.float8 import convert_to_float8
    from tests.helpers.corpus import micro_config

    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**micro_config(encoder_layers=2, decoder_layers=2, vocab_size=64,
                                                                   dropout=0.0)))
    if precision == "fp8":
        assert len(convert_to_float8(model)) == 16
    model = model.cuda()
    opt, clips = build_optimizer(model, "adamw", lr=1e-2, weight_decay=0.0)
    settings = run_settings(precision, output_dir=str(tmp_path), max_steps=steps, log_freq=1)
    trainer = Trainer(model, opt, build_scheduler(opt, "linear", 5, steps), WalkBatches(steps), settings,
                      strategy=one_process(model), clips_internally=clips, progress_bar=False, compile=compiled)
    trainer.fit()
    return [h["loss"] for h in trainer.history]


@pytest.mark.skipif(not _fp8_capable(), reason="--fp8 needs compute capability >= 8.9 (float8 tensor cores)")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fp8_trains_like_bf16(tmp_path, compiled):
    """--fp8 on float8 tensor cores, eager and under --compile: every 25-update mean of the loss within 0.1 nats
    of bf16's over 100 updates (on CPU, in torchao's emulation, 200 updates stay within 0.018: test_trainer.py)."""
    pytest.importorskip("torchao.float8")
    curves = [_walk_losses(tmp_path / p, p, compiled) for p in ("bf16", "fp8")]
    means = [[sum(c[i:i + 25]) / 25 for i in range(0, 100, 25)] for c in curves]
    assert all(len(c) == 100 and all(torch.isfinite(torch.tensor(c))) for c in curves)
    assert means[0][-1] < means[0][0] - 1.5, means  # the task is learned
    assert max(abs(a - b) for a, b in zip(*means)) < 0.1, means
    assert curves[0] != curves[1]  # float8 products did run
