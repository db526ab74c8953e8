"""LM head + cross-entropy over BART's 50k vocabulary, forward + backward: the plain path
(logits, then the project's cross-entropy), the project's chunked ``linear_cross_entropy``, and
liger-kernel's fused Triton version when it is installed (optional). Time and peak memory.

    python benchmarks/bench_cross_entropy.py [--tokens 25600] [--d_model 1024] [--vocab 50265] [--dtype bf16]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bart.modeling.cross_entropy import cross_entropy, linear_cross_entropy  # noqa: E402


def plain(h, w, labels):
    return cross_entropy(F.linear(h, w).float(), labels, reduction="sum")


def chunked(h, w, labels):
    return linear_cross_entropy(h, w, labels, reduction="sum")


def liger():
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except Exception:
        return None
    loss = LigerFusedLinearCrossEntropyLoss(reduction="sum")
    return lambda h, w, labels: loss(w, h, labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=25600)
    parser.add_argument("--d_model", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50265)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    h0 = torch.randn(args.tokens, args.d_model, device=args.device, dtype=dtype)
    w0 = (torch.randn(args.vocab, args.d_model, device=args.device) * 0.02).to(dtype)
    labels = torch.randint(0, args.vocab, (args.tokens,), device=args.device)
    labels[::7] = -100
    contenders = [("logits + cross_entropy (plain)", plain), ("linear_cross_entropy (chunked, this project)", chunked)]
    if cuda and liger() is not None:
        contenders.append(("liger-kernel fused linear CE", liger()))
    rows, reference = [], None
    for name, fn in contenders:
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        times = []
        for i in range(args.repeats + 2):
            h.grad = w.grad = None
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            start = time.perf_counter()
            loss = fn(h, w, labels)
            loss.backward()
            if cuda:
                torch.cuda.synchronize()
            if i >= 2:
                times.append(time.perf_counter() - start)
        peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 30 if cuda else float("nan")
        reference = reference if reference is not None else (loss.detach().float(), h.grad.float(), w.grad.float())
        err = max(float((loss.detach().float() - reference[0]).abs() / reference[0].abs()),
                  float((h.grad.float() - reference[1]).norm() / reference[1].norm()),
                  float((w.grad.float() - reference[2]).norm() / reference[2].norm()))
        rows.append((name, statistics.median(times), peak, err))
    print(f"\nLM head + loss fwd+bwd, {args.device}, {args.tokens} tokens x d {args.d_model} x vocab {args.vocab}, "
          f"{str(dtype).split('.')[-1]}, median of {args.repeats}")
    print("| implementation | ms | peak extra GiB | rel. error vs plain | speed vs plain |\n|---|---|---|---|---|")
    for name, t, peak, err in rows:
        print(f"| {name} | {1e3 * t:.1f} | {peak:.2f} | {err:.1e} | {rows[0][1] / t:.2f}x |")


if __name__ == "__main__":
    main()
