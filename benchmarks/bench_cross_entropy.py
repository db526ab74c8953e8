"""LM head + cross-entropy over BART's 50k vocabulary, forward + backward: the plain path
(logits, then the project's cross-entropy), the project's chunked ``linear_cross_entropy``, and
liger-kernel's fused Triton version when it is installed (optional). Time and peak memory: on CUDA
the allocator's peak, on CPU each contender runs in a process of its own and its peak resident memory
above the inputs' is reported. The LM head's rows are padded as the model pads them (``--pad``, 128:
50,265 -> 50,304 rows, the padded columns -inf, the loss over the real ones).

    python benchmarks/bench_cross_entropy.py [--tokens 25600] [--d_model 1024] [--vocab 50265] [--pad 128]
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bart.modeling.cross_entropy import cross_entropy, linear_cross_entropy  # noqa: E402


def plain(h, w, labels, bias, vocab):
    return cross_entropy(F.linear(h, w, bias).float(), labels, reduction="sum", classes=vocab)


def chunked(h, w, labels, bias, vocab):
    return linear_cross_entropy(h, w, labels, bias=bias, reduction="sum", classes=vocab)


def liger():
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except Exception:
        return None
    loss = LigerFusedLinearCrossEntropyLoss(reduction="sum")
    return lambda h, w, labels, bias, vocab: loss(w[:vocab], h, labels)


def inputs(args, device, dtype):
    torch.manual_seed(0)
    rows = -(-args.vocab // args.pad) * args.pad
    h0 = torch.randn(args.tokens, args.d_model, device=device, dtype=dtype)
    w0 = (torch.randn(rows, args.d_model, device=device) * 0.02).to(dtype)
    w0[args.vocab:] = 0
    bias = torch.zeros(rows, device=device, dtype=dtype)
    bias[args.vocab:] = float("-inf")
    labels = torch.randint(0, args.vocab, (args.tokens,), device=device)
    labels[::7] = -100
    return h0, w0, bias, labels


def measure(fn, args, h0, w0, bias, labels, cuda):
    """Median time of forward + backward, peak extra memory (GiB), loss and gradients."""
    h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    times, base = [], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(args.repeats + 2):
        h.grad = w.grad = None
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        start = time.perf_counter()
        loss = fn(h, w, labels, bias, args.vocab)
        loss.backward()
        if cuda:
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - start)
    if cuda:
        peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 30
    else:  # ru_maxrss: KiB on Linux; the inputs and their gradients were resident before the first pass
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 2 ** 20
    return statistics.median(times), peak, (loss.detach().float(), h.grad.float(), w.grad.float())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=25600)
    parser.add_argument("--d_model", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50265)
    parser.add_argument("--pad", type=int, default=128, help="LM-head rows padded to a multiple of this (1: none)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # CPU: one contender in this process, its figures as JSON
    args = parser.parse_args()
    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    contenders = [("logits + cross_entropy (plain)", plain), ("linear_cross_entropy (chunked, this project)", chunked)]
    if cuda and liger() is not None:
        contenders.append(("liger-kernel fused linear CE", liger()))
    if args.one is not None:
        h0, w0, bias, labels = inputs(args, args.device, dtype)
        h0.grad, w0.grad = torch.zeros_like(h0), torch.zeros_like(w0)  # resident before, as the gradients will be
        t, peak, (loss, gh, gw) = measure(dict(contenders)[args.one], args, h0, w0, bias, labels, cuda)
        torch.save({"time": t, "peak": peak, "loss": loss, "gh": gh, "gw": gw}, os.environ["BENCH_OUT"])
        return
    rows, reference = [], None
    for name, fn in contenders:
        if cuda:
            h0, w0, bias, labels = inputs(args, args.device, dtype)
            t, peak, result = measure(fn, args, h0, w0, bias, labels, cuda)
        else:
            out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_ce_{os.getpid()}.pt")
            subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--one", name], check=True,
                           env=dict(os.environ, BENCH_OUT=out))
            got = torch.load(out)
            os.remove(out)
            t, peak, result = got["time"], got["peak"], (got["loss"], got["gh"], got["gw"])
        reference = reference if reference is not None else result
        err = max(float((result[0] - reference[0]).abs() / reference[0].abs()),
                  float((result[1] - reference[1]).norm() / reference[1].norm()),
                  float((result[2] - reference[2]).norm() / reference[2].norm()))
        rows.append((name, t, peak, err))
    rows_of_head = -(-args.vocab // args.pad) * args.pad
    print(f"\nLM head + loss fwd+bwd, {args.device}, {args.tokens} tokens x d {args.d_model} x vocab {args.vocab} "
          f"({rows_of_head} rows), {str(dtype).split('.')[-1]}, median of {args.repeats}, threads "
          f"{torch.get_num_threads()}")
    print("| implementation | ms | peak extra GiB | rel. error vs plain | speed vs plain | memory vs plain |\n"
          "|---|---|---|---|---|---|")
    for name, t, peak, err in rows:
        print(f"| {name} | {1e3 * t:.1f} | {peak:.2f} | {err:.1e} | {rows[0][1] / t:.2f}x | "
              f"{peak / rows[0][2]:.2f}x |")


if __name__ == "__main__":
    main()
