"""LAMB step time on bart-base's parameter shapes: the multi-tensor (torch._foreach_*) implementation
vs a plain per-tensor loop of the same math, same gradients, same device.

    python benchmarks/bench_lamb.py [--device cpu|cuda] [--threads 2] [--steps 5]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bart.configuration import BartConfig  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402
from bart.optim import Lamb, decay_groups  # noqa: E402


class LoopLamb(torch.optim.Optimizer):
    """The per-tensor loop: every operation issued tensor by tensor."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, max_grad_norm=1.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm))

    @torch.no_grad()
    def step(self):
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in params))
        clip = torch.clamp(self.defaults["max_grad_norm"] / (norm + 1e-12), max=1.0)
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["step"] += 1
                g = p.grad * clip
                state["m"].mul_(b1).add_(g, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                u = (state["m"] / (1 - b1 ** state["step"])) / ((state["v"] / (1 - b2 ** state["step"])).sqrt() + group["eps"])
                if group["weight_decay"]:
                    u.add_(p, alpha=group["weight_decay"])
                    pn, un = p.norm(), u.norm()
                    ratio = torch.where((pn > 0) & (un > 0), pn / un, torch.ones_like(pn))
                    p.add_(u * (-group["lr"] * ratio))
                else:
                    p.add_(u, alpha=-group["lr"])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    values = json.load(open(os.path.join(os.path.dirname(__file__), "..", "configs", "config_base.json")))
    model = BartForConditionalGeneration(BartConfig(**values)).to(args.device)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    times = {}
    for name, cls in (("multi-tensor (foreach)", Lamb), ("per-tensor loop", LoopLamb)):
        opt = cls(decay_groups(model, 0.01), lr=1e-4)
        opt.step()  # state allocation outside the timing
        samples = []
        for _ in range(args.steps):
            if args.device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            opt.step()
            if args.device == "cuda":
                torch.cuda.synchronize()
            samples.append(time.perf_counter() - start)
        times[name] = statistics.median(samples)
        del opt
    n = sum(p.numel() for p in params) / 1e6
    base = times["per-tensor loop"]
    print(f"\nLAMB step on bart-base parameters ({n:.0f}M, {len(params)} tensors), {args.device}, threads {args.threads}")
    print("| implementation | ms/step | speedup |\n|---|---|---|")
    for name, t in times.items():
        print(f"| {name} | {t * 1000:.1f} | {base / t:.2f}x |")


if __name__ == "__main__":
    main()
