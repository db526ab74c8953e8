"""CUDA-only checks: mixed precision training steps, LAMB on the GPU, generation on the GPU."""
import pytest
import torch

from bart.modeling import BartForConditionalGeneration
from bart.optim import Lamb, build_optimizer, build_scheduler, decay_groups
from bart.training.trainer import Trainer, TrainerConfig
from tests.helpers.synthetic import SyntheticBatches, tiny_config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _train(tmp_path, precision, steps=20):
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0)).cuda()
    opt, clips = build_optimizer(model, "lamb", lr=2e-2, weight_decay=0.01)
    sched = build_scheduler(opt, "linear", 2, steps)
    config = TrainerConfig(output_dir=str(tmp_path), max_steps=steps, log_freq=1, precision=precision, progress_bar=False)
    trainer = Trainer(model, opt, sched, SyntheticBatches(4, 8), config, clips_internally=clips)
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
    for step in range(5):
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
