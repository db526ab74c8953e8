"""Training throughput and MFU of bart-large on one GPU: this project vs transformers, same batches.

Shapes (NVIDIA's published single-GPU settings): pretraining at 128 (batch 200) and 512 (batch 32),
fine-tuning with the XSum shape (1024 source / 60 target tokens, batch 40). Batches are random
token ids with no padding, made on the GPU once per shape, so the loader is not timed (the loader
has its own benchmark: benchmarks/bench_pretraining_loader.py).

Contenders, all from the same random weights, bf16 autocast with fp32 master weights:
- ``hf``: transformers ``BartForConditionalGeneration`` (attn_implementation="sdpa") in a plain loop:
  forward with labels, backward, clip_grad_norm_, ``torch.optim.AdamW(fused=True)``, zero_grad;
- ``adamw``: this project's ``Trainer.train_step`` with AdamW(fused=True);
- ``lamb``: the same with LAMB, the pretraining optimizer (apex FusedLAMB when importable, else the
  project's foreach LAMB: the table names which);
- ``lamb_fce``: LAMB with ``--fused_cross_entropy`` (LM head + loss in token chunks);
- ``lamb_compile`` / ``lamb_fce_compile``: the same under ``--compile``.

Model FLOPs per sequence (forward x 3 for training): every matrix multiplication counts
2 x (its parameters) x (tokens it sees): encoder layers on the S source tokens, decoder layers on the
T target tokens except the cross-attention key/value projections (on S), the LM head (d x vocab)
on T; attention adds 4 x d x (S^2 per encoder layer, T^2 + T x S per decoder layer), causal masks
counted in full as is usual. Embedding lookups, norms and softmax are not counted. MFU divides
the achieved FLOP/s by (a) the bf16 matmul peak measured in this run (8192^3, best of 10) and
(b) the datasheet dense bf16 peak (--peak_tflops, H100 SXM: 989).

    python benchmarks/bench_gpu_training.py [--shapes pretrain128,pretrain512,xsum]
        [--contenders hf,adamw,lamb,lamb_fce] [--steps 10] [--warmup 3] [--profile]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bart.configuration import BartConfig  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402
from bart.optim import build_optimizer, build_scheduler  # noqa: E402
from bart.training.trainer import Trainer, TrainerConfig  # noqa: E402

SHAPES = {  # name: (batch, source length, target length)
    "pretrain128": (200, 128, 128),
    "pretrain512": (32, 512, 512),
    "xsum": (40, 1024, 60),
}
LR, WEIGHT_DECAY, CLIP = 1e-4, 0.01, 1.0


def model_flops_per_sequence(c: BartConfig, source: int, target: int) -> float:
    d, f, v = c.d_model, c.encoder_ffn_dim, c.vocab_size
    enc = c.encoder_layers * source * (4 * d * d + 2 * d * f)
    dec = c.decoder_layers * (target * (4 * d * d + 2 * d * d + 2 * d * c.decoder_ffn_dim) + source * 2 * d * d)
    head = target * d * v
    attention = 2 * d * (c.encoder_layers * source ** 2 + c.decoder_layers * (target ** 2 + target * source))
    return 3 * (2 * (enc + dec + head) + 2 * attention)


def measured_peak_tflops() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * 8192 ** 3 / best / 1e12


def make_batches(count, batch, source, target, vocab, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(4, vocab, (batch, source), device="cuda", generator=g)
        labels = torch.randint(4, vocab, (batch, target), device="cuda", generator=g)
        dec = torch.cat([torch.full_like(labels[:, :1], 2), labels[:, :-1]], 1)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": dec,
                    "labels": labels})
    return out


def hf_step_fn(state_dict, values):
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(
        **{k: v for k, v in values.items() if k not in ("pre_ln", "dtype")}, attn_implementation="sdpa"))
    hf.load_state_dict(state_dict)
    model = hf.cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, eps=1e-6, fused=True)

    def step(batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         decoder_input_ids=batch["decoder_input_ids"], labels=batch["labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, f"transformers {transformers.__version__} sdpa + AdamW(fused)"


def project_step_fn(state_dict, config, name):
    model = BartForConditionalGeneration(config)
    model.load_state_dict(state_dict)
    model = model.cuda()
    optimizer_name = "adamw" if name == "adamw" else "lamb"
    optimizer, clips = build_optimizer(model, optimizer_name, lr=LR, weight_decay=WEIGHT_DECAY, max_grad_norm=CLIP)
    scheduler = build_scheduler(optimizer, "linear", 2, 10_000)
    trainer = Trainer(model, optimizer, scheduler, [], TrainerConfig(
        output_dir=tempfile.mkdtemp(), max_steps=10_000, precision="bf16", gradient_clip_val=CLIP,
        compile="compile" in name, fused_cross_entropy="fce" in name, progress_bar=False),
        clips_internally=clips, device=torch.device("cuda"))
    label = f"this project: {type(optimizer).__module__.split('.')[0]}.{type(optimizer).__name__}"
    label += "".join(s for k, s in (("fce", " + fused CE"), ("compile", " + compile")) if k in name)
    return (lambda batch: trainer.train_step([batch])), label


def time_steps(step, batches, warmup):
    for batch in batches[:warmup]:
        step(batch)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for batch in batches[warmup:]:
        step(batch)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / (len(batches) - warmup), torch.cuda.max_memory_allocated() / 2 ** 30


def profile_step(step, batches, rows=15):
    from torch.profiler import ProfilerActivity, profile
    step(batches[0])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(batches[1])
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0)]
    total = sum(getattr(e, "self_device_time_total", 0) for e in events)
    events.sort(key=lambda e: -getattr(e, "self_device_time_total", 0))
    print(f"\ntop kernels of one step ({total / 1e3:.1f} ms of GPU time)")
    print("| kernel | calls | ms | share |\n|---|---|---|---|")
    for e in events[:rows]:
        t = e.self_device_time_total
        print(f"| {e.key[:110]} | {e.count} | {t / 1e3:.1f} | {100 * t / total:.1f}% |")


def versions() -> str:
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = "?"
    container = os.environ.get("NVIDIA_PYTORCH_VERSION") or os.environ.get("PYTORCH_VERSION") or "none (not NGC)"
    return (f"{torch.cuda.get_device_name()}, driver {driver}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
            f"transformers {transformers.__version__}, NGC container {container}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/config.json")
    parser.add_argument("--shapes", default="pretrain128,pretrain512,xsum")
    parser.add_argument("--contenders", default="hf,adamw,lamb,lamb_fce")
    parser.add_argument("--steps", type=int, default=10, help="timed updates per contender")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peak_tflops", type=float, default=989.0, help="datasheet dense bf16 peak")
    parser.add_argument("--profile", action="store_true", help="top kernels of one step of the last contender")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu_training.py needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = True
    values = dict(json.load(open(os.path.join(ROOT, args.config))))
    config = BartConfig(**values)
    torch.manual_seed(0)
    state_dict = BartForConditionalGeneration(config).state_dict()
    peak = measured_peak_tflops()
    print(f"{versions()}\nmeasured bf16 matmul peak {peak:.0f} TFLOP/s, datasheet {args.peak_tflops:.0f}")
    results = []
    for shape in args.shapes.split(","):
        batch, source, target = SHAPES[shape]
        flops = model_flops_per_sequence(config, source, target)
        batches = make_batches(args.warmup + args.steps, batch, source, target, config.vocab_size)
        print(f"\n{shape}: bart-large, batch {batch} x {source}/{target}, bf16, {flops / 1e12:.3f} TFLOP per "
              f"sequence, median over {args.steps} updates after {args.warmup}")
        print("| contender | s/update | seq/s | tokens/s (src+tgt) | TFLOP/s | MFU measured | MFU datasheet "
              "| peak GiB | vs hf |\n|---|---|---|---|---|---|---|---|---|")
        reference = None
        step = None
        for name in args.contenders.split(","):
            torch.cuda.empty_cache()
            step, label = hf_step_fn(state_dict, values) if name == "hf" else project_step_fn(state_dict, config, name)
            try:
                seconds, memory = time_steps(step, batches, args.warmup + (2 if "compile" in name else 0))
            except torch.OutOfMemoryError:
                print(f"| {label} | out of memory | | | | | | | |")
                step = None
                continue
            reference = reference or (seconds if name == "hf" else None)
            achieved = flops * batch / seconds / 1e12
            ratio = f"{reference / seconds:.2f}x" if reference else "-"
            print(f"| {label} | {seconds:.4f} | {batch / seconds:,.1f} | {batch * (source + target) / seconds:,.0f} "
                  f"| {achieved:.0f} | {100 * achieved / peak:.1f}% | {100 * achieved / args.peak_tflops:.1f}% "
                  f"| {memory:.1f} | {ratio} |", flush=True)
            results.append(dict(shape=shape, contender=name, label=label, seconds=seconds, seq_s=batch / seconds,
                                tflops=achieved, mfu_measured=achieved / peak, mfu_datasheet=achieved / args.peak_tflops,
                                peak_gib=memory))
            if not (args.profile and name == args.contenders.split(",")[-1]):
                del step
                step = None
        if args.profile and step is not None:
            profile_step(step, batches)
            del step
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"versions": versions(), "peak_tflops": peak, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
