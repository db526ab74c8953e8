"""Training throughput and MFU of bart-large on one GPU: this project vs transformers, same batches.

Shapes (NVIDIA's published single-GPU settings): pretraining at 128 (batch 200) and 512 (batch 32),
fine-tuning with the XSum shape (1024 source / 60 target tokens, batch 40). Batches are random
token ids with no padding, made on the GPU once per shape, so the loader is not timed (the loader
has its own benchmark: benchmarks/bench_pretraining_loader.py).

Contenders, all from the same random weights, bf16 autocast with fp32 master weights:
- ``hf``: transformers ``BartForConditionalGeneration`` (attn_implementation="sdpa") in a plain loop:
  forward with labels, backward, clip_grad_norm_, ``torch.optim.AdamW(fused=True)``, zero_grad; ``hf_compile``: the
  same with the model under ``torch.compile`` (the peer of ``--compile``);
- ``adamw``: this project's ``Trainer.train_step`` with AdamW(fused=True);
- ``lamb``: the same with LAMB, the pretraining optimizer (apex FusedLAMB when importable, else the
  project's foreach LAMB: the table names which); ``lamb_foreach``: the project's foreach LAMB always;
- ``lamb_fce`` / ``adamw_fce``: with ``--fused_cross_entropy`` (LM head + loss in token chunks);
- ``lamb_compile`` / ``lamb_fce_compile`` / ``adamw_compile``: the same under ``--compile`` (the whole model in one
  graph, the default); ``lamb_layers_compile`` / ``adamw_layers_compile``: under ``--compile --compile_scope layers``
  (each layer compiled, a shorter compile);
- ``lamb_fce_fp8_compile``: ``lamb_fce_compile`` under ``--fp8`` (torchao's float8 linear layers, LM head, first and
  last layer in bf16: bart/training/float8.py; CUDA compute capability >= 8.9; emulated on ``--device cpu``). Its
  MFU counts the same model FLOPs against the same bf16 peaks.

Model FLOPs per sequence (forward x 3 for training): every matrix multiplication counts
2 x (its parameters) x (tokens it sees): encoder layers on the S source tokens, decoder layers on the
T target tokens except the cross-attention key/value projections (on S), the LM head (d x vocab)
on T; attention adds 4 x d x (S^2 per encoder layer, T^2 + T x S per decoder layer), causal masks
counted in full as is usual. Embedding lookups, norms and softmax are not counted. MFU divides
the achieved FLOP/s by (a) the bf16 matmul peak measured in this run (8192^3, best of 10) and
(b) the datasheet dense bf16 peak (--peak_tflops, H100 SXM: 989).

    python benchmarks/bench_gpu_training.py [--shapes pretrain128,pretrain512,xsum]
        [--contenders hf,adamw,lamb,lamb_fce] [--steps 10] [--warmup 3] [--profile]
    python benchmarks/bench_gpu_training.py --lengths xsum [--contenders hf,hf_tokens,adamw,adamw_tokens]
        [--examples 2000] [--batch 40] [--max_tokens_per_batch 40960]

Fine-tuning at XSum's lengths (``--lengths xsum``, in place of the shapes): ``--examples`` sources and targets whose
lengths are drawn from lognormal distributions with XSum's published means (Narayan et al. 2018: documents of 431
words, summaries of 23; here as tokens), cut at 1024 and 60 tokens, random token ids. Every contender trains on the
same examples after ``--warmup`` updates of its own batches; ``_tokens`` contenders (``hf_tokens``,
``adamw_tokens``, ``lamb_tokens``, ``adamw_compile_tokens``, ...) take them in token-budget batches (the fine-tuning loader's
``SortishSampler`` with ``--max_tokens_per_batch``, default batch x 1024: the same longest padded batch), the others
in shuffled batches of ``--batch`` padded to their longest row. ``_compile`` contenders compile with dynamic
sizes, as fine-tuning does, in their warm-up updates. The figure is tokens of real text per second (source
and target, padding excluded), with the share of padding in the batches. ``--source_length``/``--target_length``
shrink the caps (and the means with them) for dry runs.

benchmarks/gpu_suite.py runs it one shape per process with --json (rewritten after every row, so a
process stopped part-way keeps the rows it finished), --shrink_on_oom (a batch that does not fit is
retried at 3/4, 1/2, 1/4, 1/8 of it: the row says which batch ran) and --measured_tflops (the peak its
peaks part measured); its dry run adds --device cpu, a tiny --config, --batch/--source_length/
--target_length and --compile_backend eager (dynamo traces the step, no code generation).
"""
import argparse
import functools
import gc
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bart.cli.settings import PrecisionSettings, Settings  # noqa: E402
from bart.configuration import BartConfig  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402
from bart.optim import build_optimizer, build_scheduler  # noqa: E402
from bart.training.float8 import convert_to_float8  # noqa: E402
from bart.training.strategy import prepared_strategy  # noqa: E402
from bart.training.trainer import Trainer  # noqa: E402

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


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measured_peak_tflops(size: int = 8192, device: str = "cuda") -> float:
    """bf16 matmul TFLOP/s of size^3 products, best of 10 (CUDA events on a GPU, the wall clock on CPU)."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(10):
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        else:
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e12


def make_batches(count, batch, source, target, vocab, seed=0, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(4, vocab, (batch, source), device=device, generator=g)
        labels = torch.randint(4, vocab, (batch, target), device=device, generator=g)
        dec = torch.cat([torch.full_like(labels[:, :1], 2), labels[:, :-1]], 1)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": dec,
                    "labels": labels})
    return out


def hf_step_fn(state_dict, values, device="cuda", compiled=False):
    """transformers' model in a plain loop; ``compiled``: its forward under torch.compile (inductor), as a transformers
    user turns it on (``torch_compile=True``), the peer of this project's --compile."""
    import transformers  # here: the suite's profile part runs the project's step without it
    with torch.device(device):  # initialised where it runs (the weights are then the state dict's)
        hf = transformers.BartForConditionalGeneration(transformers.BartConfig(
            # a config's leftover aliases (num_hidden_layers, ...) would win over its real keys in transformers 5.x
            **{k: v for k, v in values.items() if k not in ("pre_ln", "dtype", *transformers.BartConfig.attribute_map)},
            attn_implementation="sdpa"))
    hf.load_state_dict(state_dict)
    model = hf.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, eps=1e-6, fused=True)
    forward = torch.compile(model) if compiled else model

    def step(batch):
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = forward(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         decoder_input_ids=batch["decoder_input_ids"], labels=batch["labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, f"transformers {transformers.__version__} sdpa + AdamW(fused){' + torch.compile' * compiled}"


def project_step_fn(state_dict, config, name, device="cuda", varying_lengths=False):
    with torch.device(device):
        model = BartForConditionalGeneration(config)
    model.load_state_dict(state_dict)
    model = model.to(device)
    if "fp8" in name:
        convert_to_float8(model, emulate=not device.startswith("cuda"))
    optimizer_name = "adamw" if name.startswith("adamw") else "lamb"
    optimizer, clips = build_optimizer(model, optimizer_name, lr=LR, weight_decay=WEIGHT_DECAY, max_grad_norm=CLIP,
                                       prefer_apex="foreach" not in name)
    scheduler = build_scheduler(optimizer, "linear", 2, 10_000)
    trainer = Trainer(model, optimizer, scheduler, [], Settings(
        output_dir=tempfile.mkdtemp(), max_steps=10_000,
        precision_flags=PrecisionSettings.named("fp8" if "fp8" in name else "bf16"), gradient_clip_val=CLIP,
        fused_cross_entropy="fce" in name, compile_scope="layers" if "layers" in name else "model"),
        strategy=prepared_strategy(None, 1, torch.device(device), model),
        compile="compile" in name, varying_lengths=varying_lengths, progress_bar=False, clips_internally=clips,
        device=torch.device(device))
    kind = type(optimizer).__name__
    kind = {"FusedLAMB": "apex FusedLAMB", "Lamb": "foreach LAMB",
            "AdamW": f"AdamW({'fused' if optimizer.defaults.get('fused') else 'foreach'})"}.get(kind, kind)
    label = f"this project: {kind}"
    label += "".join(s for k, s in (("fce", " + fused CE"), ("fp8", " + fp8"), ("compile", " + compile"),
                                    ("layers", " (layers)")) if k in name)
    return (lambda batch: trainer.train_step([batch])), label


def contender_step_fn(name, state_dict, config, values, device="cuda", varying_lengths=False):
    """The step and label of contender ``name``: transformers' (``hf``, ``hf_compile``) or this project's."""
    if name.startswith("hf"):
        return hf_step_fn(state_dict, values, device, compiled=name == "hf_compile")
    return project_step_fn(state_dict, config, name, device, varying_lengths=varying_lengths)


def time_steps(step, batches, warmup, device="cuda", first: list | None = None):
    """Seconds per update after ``warmup`` updates, and peak memory in GiB (CUDA: max allocated;
    CPU: the process's peak resident set). ``first``: gets the seconds of the first update (the one that
    compiles, under --compile), timed on its own."""
    start = time.perf_counter()
    for i, batch in enumerate(batches[:warmup]):
        step(batch)
        if i == 0 and first is not None:
            synchronize(device)
            first.append(time.perf_counter() - start)
    synchronize(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for batch in batches[warmup:]:
        step(batch)
    synchronize(device)
    seconds = (time.perf_counter() - start) / (len(batches) - warmup)
    if device.startswith("cuda"):
        return seconds, torch.cuda.max_memory_allocated() / 2 ** 30
    return seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def top_kernels(prof, device="cuda", rows=15) -> tuple[float, list]:
    """(total ms, rows) of a profile: GPU kernels by self device time (CPU: operators by self CPU time)."""
    key = "self_device_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0 and not e.key.startswith("ProfilerStep")]
    total = sum(getattr(e, key) for e in events)
    events.sort(key=lambda e: -getattr(e, key))
    return total / 1e3, [dict(kernel=e.key, calls=e.count, ms=getattr(e, key) / 1e3,
                              share=getattr(e, key) / total) for e in events[:rows]]


def print_kernels(title, total_ms, rows) -> None:
    print(f"\ntop kernels of {title} ({total_ms:.1f} ms)")
    print("| kernel | calls | ms | share |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel'][:110]} | {r['calls']} | {r['ms']:.1f} | {100 * r['share']:.1f}% |")


def profile_step(step, batches, rows=15, device="cuda"):
    from torch.profiler import ProfilerActivity, profile
    step(batches[0])
    synchronize(device)
    activity = ProfilerActivity.CUDA if device.startswith("cuda") else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        step(batches[1])
        synchronize(device)
    total, found = top_kernels(prof, device, rows)
    print_kernels("one step", total, found)
    return {"total_ms": total, "rows": found}


def versions(device="cuda") -> str:
    import transformers
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = "?"
    container = os.environ.get("NVIDIA_PYTORCH_VERSION") or os.environ.get("PYTORCH_VERSION") or "none (not NGC)"
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "CPU"
    return (f"{name}, driver {driver}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
            f"transformers {transformers.__version__}, NGC container {container}")


CONTENDERS = ("hf", "hf_compile", "adamw", "adamw_fce", "adamw_compile", "adamw_layers_compile", "lamb", "lamb_foreach", "lamb_fce",
              "lamb_compile", "lamb_layers_compile", "lamb_fce_compile", "lamb_fce_fp8_compile")
LENGTH_CONTENDERS = ("hf", "hf_tokens", "hf_compile", "adamw", "adamw_tokens", "lamb", "lamb_tokens", "adamw_fce",
                     "adamw_fce_tokens", "adamw_compile", "adamw_compile_tokens", "adamw_layers_compile",
                     "adamw_layers_compile_tokens")
# XSum's published mean lengths (Narayan et al. 2018, words; here tokens) and the recipe's caps for XSum
XSUM_LENGTHS = {"source_mean": 431, "target_mean": 23, "source_max": 1024, "target_max": 60}


def xsum_like_lengths(count: int, source_max: int, target_max: int, seed: int = 0) -> tuple[list, list]:
    """(source lengths, target lengths) of ``count`` examples: lognormal with XSum's means scaled by the caps' share
    of the recipe's (1024, 60), cut at the caps, at least 4 tokens."""
    g = torch.Generator().manual_seed(seed)

    def draw(mean: float, sigma: float, cap: int) -> list:
        mu = math.log(mean) - sigma * sigma / 2  # a lognormal of this mean
        return torch.exp(mu + sigma * torch.randn(count, generator=g)).round().clamp(4, cap).long().tolist()
    scale_source = source_max / XSUM_LENGTHS["source_max"]
    scale_target = target_max / XSUM_LENGTHS["target_max"]
    return (draw(XSUM_LENGTHS["source_mean"] * scale_source, 0.6, source_max),
            draw(XSUM_LENGTHS["target_mean"] * scale_target, 0.35, target_max))


def length_batches(sources: list, targets: list, vocab: int, batch: int, max_tokens: int | None, device="cuda",
                   seed: int = 0) -> list[dict]:
    """The examples of these lengths (random token ids) in batches: shuffled, ``batch`` at a time, or with
    ``max_tokens`` the fine-tuning loader's token-budget batches (``SortishSampler``); each padded to its longest
    row (pad 1, labels -100 there)."""
    from bart.data.summarization import SortishSampler
    g = torch.Generator().manual_seed(seed)
    if max_tokens:
        groups = list(SortishSampler(sources, batch, seed=seed, max_tokens=max_tokens))
    else:
        order = torch.randperm(len(sources), generator=g).tolist()
        groups = [order[i:i + batch] for i in range(0, len(order), batch)]
    out = []
    for group in groups:
        width, height = max(sources[i] for i in group), max(targets[i] for i in group)
        ids = torch.full((len(group), width), 1, dtype=torch.long)
        labels = torch.full((len(group), height), -100, dtype=torch.long)
        for row, i in enumerate(group):
            ids[row, :sources[i]] = torch.randint(4, vocab, (sources[i],), generator=g)
            labels[row, :targets[i]] = torch.randint(4, vocab, (targets[i],), generator=g)
        decoder_ids = torch.cat([torch.full_like(labels[:, :1], 2), labels[:, :-1]], 1).masked_fill(
            torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], 1) == -100, 1)
        decoder_ids[:, 0] = 2
        out.append({k: v.to(device) for k, v in dict(input_ids=ids, attention_mask=(ids != 1).long(),
                                                     decoder_input_ids=decoder_ids, labels=labels).items()})
    return out


def real_tokens(batch: dict) -> int:
    return int(batch["attention_mask"].sum()) + int((batch["labels"] != -100).sum())


def run_lengths(args, config, values, state_dict, done=lambda rows: None) -> list:
    """--lengths xsum: every contender on the same XSum-like examples; tokens of real text per second. A compiled
    contender compiles for any length (as fine-tuning does) in its warm-up updates. ``done(rows)``: after each row."""
    source_max = args.source_length or XSUM_LENGTHS["source_max"]
    target_max = args.target_length or XSUM_LENGTHS["target_max"]
    batch = args.batch or SHAPES["xsum"][0]
    max_tokens = args.max_tokens_per_batch or batch * source_max
    sources, targets = xsum_like_lengths(args.examples, source_max, target_max)
    print(f"\nfine-tuning at XSum's lengths: {os.path.basename(args.config)}, {args.examples} examples, source mean "
          f"{sum(sources) / len(sources):.0f} (max {source_max}), target mean {sum(targets) / len(targets):.1f} "
          f"(max {target_max}), bf16; batches of {batch} padded to their longest, or token budgets of {max_tokens}")
    print("| contender | batching | updates timed | sequences/update | real tokens/s | padding | s/update | peak GiB "
          "| vs hf |\n|---|---|---|---|---|---|---|---|---|")
    rows, reference = [], None
    batchings = {}
    for name in args.contenders.split(","):
        budget = name.endswith("_tokens")
        key = "tokens" if budget else "padded"
        if key not in batchings:
            batchings[key] = length_batches(sources, targets, config.vocab_size, batch, max_tokens if budget else None,
                                            device=args.device)
        batches = batchings[key]
        if len(batches) <= args.warmup:
            raise SystemExit(f"--examples {args.examples} make {len(batches)} {key} batches, not more than --warmup "
                             f"{args.warmup}: give more examples")
        base = name[:-len("_tokens")] if budget else name
        step, label = contender_step_fn(base, state_dict, config, values, args.device, varying_lengths=True)
        for b in batches[:args.warmup]:
            step(b)
        synchronize(args.device)
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        timed = batches[args.warmup:]
        start = time.perf_counter()
        for b in timed:
            step(b)
        synchronize(args.device)
        seconds = time.perf_counter() - start
        memory = (torch.cuda.max_memory_allocated() if args.device.startswith("cuda")
                  else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2 ** 30
        real = sum(real_tokens(b) for b in timed)
        padded = sum(b["input_ids"].numel() + b["labels"].numel() for b in timed)
        rate = real / seconds
        reference = reference or (rate if name == "hf" else None)
        ratio = f"{rate / reference:.2f}x" if reference else "-"
        sequences = sum(b["input_ids"].shape[0] for b in timed) / len(timed)
        print(f"| {label} | {key} | {len(timed)} | {sequences:.1f} | {rate:,.0f} | {100 * (1 - real / padded):.1f}% "
              f"| {seconds / len(timed):.4f} | {memory:.1f} | {ratio} |", flush=True)
        rows.append(dict(lengths="xsum", contender=name, label=label, batching=key, updates=len(timed),
                         sequences_per_update=sequences, real_tokens_s=rate, padding=1 - real / padded,
                         seconds_per_update=seconds / len(timed), peak_gib=memory,
                         vs_hf=rate / reference if reference else None))
        done(rows)
        del step
    return rows


def _batch_candidates(batch: int, shrink: bool) -> list:
    """The batch, then (--shrink_on_oom) 3/4, 1/2, 1/4 and 1/8 of it."""
    smaller = [batch * 3 // 4, batch // 2, batch // 4, batch // 8] if shrink else []
    return [batch] + sorted({b for b in smaller if 1 <= b < batch}, reverse=True)


def time_fitting(step, batches, warmup, device, candidates, first: list | None = None):
    """(batch, seconds, GiB, batches that ran out of memory): the first candidate batch that fits,
    each a slice of the same batches; (None, None, None, tried) when none fits. ``first``: see time_steps."""
    out_of_memory = []
    for size in candidates:
        try:
            seconds, memory = time_steps(step, [{k: v[:size] for k, v in b.items()} for b in batches], warmup, device,
                                         first)
            return size, seconds, memory, out_of_memory
        except torch.OutOfMemoryError:
            out_of_memory.append(size)
        gc.collect()  # the failed step's tensors are freed with its traceback, outside the except block
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return None, None, None, out_of_memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/config.json")
    parser.add_argument("--shapes", default="pretrain128,pretrain512,xsum")
    parser.add_argument("--contenders", default="hf,adamw,lamb,lamb_fce", help=f"comma-separated, of {CONTENDERS}")
    parser.add_argument("--steps", type=int, default=10, help="timed updates per contender")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peak_tflops", type=float, default=989.0, help="datasheet dense bf16 peak")
    parser.add_argument("--profile", action="store_true", help="top kernels of one step of the last contender")
    parser.add_argument("--json", help="also write the rows here (rewritten after every row)")
    parser.add_argument("--device", default="cuda", help="cuda; cpu for dry runs of the code paths (tiny --config)")
    parser.add_argument("--batch", type=int, help="batch size instead of each shape's")
    parser.add_argument("--source_length", type=int, help="source length instead of each shape's")
    parser.add_argument("--target_length", type=int, help="target length instead of each shape's")
    parser.add_argument("--shrink_on_oom", action="store_true",
                        help="a batch that runs out of memory is retried at 3/4, 1/2, 1/4, 1/8 of it")
    parser.add_argument("--measured_tflops", type=float,
                        help="the measured bf16 matmul peak to divide by (measured here when not given)")
    parser.add_argument("--lengths", choices=("xsum",),
                        help="fine-tuning at XSum's length distribution instead of --shapes (see above)")
    parser.add_argument("--examples", type=int, default=2000, help="--lengths: the examples every contender trains on")
    parser.add_argument("--max_tokens_per_batch", type=int,
                        help="--lengths: the _tokens contenders' token budget (default: batch x the source cap)")
    parser.add_argument("--compile_backend", default="inductor",
                        help="torch.compile backend of the *_compile contenders (eager: dynamo only, for dry runs)")
    args = parser.parse_args()
    known = LENGTH_CONTENDERS if args.lengths else CONTENDERS
    unknown = [n for n in args.contenders.split(",") if n not in known]
    unknown += [n for n in args.shapes.split(",") if n not in SHAPES]
    if unknown:
        parser.error(f"unknown contender or shape {unknown}: contenders {known}, shapes {tuple(SHAPES)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("bench_gpu_training.py needs a CUDA GPU (--device cpu runs the code paths on CPU)")
    if args.compile_backend != "inductor":  # the Trainer calls torch.compile(model)
        torch.compile = functools.partial(torch.compile, backend=args.compile_backend)
    torch.backends.cuda.matmul.allow_tf32 = True
    values = dict(json.load(open(os.path.join(ROOT, args.config))))
    config = BartConfig(**values)
    torch.manual_seed(0)
    state_dict = BartForConditionalGeneration(config).state_dict()
    if args.lengths:
        version_line = versions(args.device)
        print(version_line)

        def write_rows(rows):  # after every row: a process stopped part-way keeps the rows it finished
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"versions": version_line, "rows": rows}, f, indent=1)
        write_rows(run_lengths(args, config, values, state_dict, write_rows))
        return
    peak = args.measured_tflops or measured_peak_tflops(device=args.device)
    version_line = versions(args.device)
    print(f"{version_line}\nmeasured bf16 matmul peak {peak:.0f} TFLOP/s, datasheet {args.peak_tflops:.0f}")
    results = []

    def write_json(profile=None):
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"versions": version_line, "peak_tflops": peak, "datasheet_tflops": args.peak_tflops,
                           "rows": results, "profile": profile}, f, indent=1)

    profile = None
    for shape in args.shapes.split(","):
        batch, source, target = SHAPES[shape]
        batch, source, target = args.batch or batch, args.source_length or source, args.target_length or target
        flops = model_flops_per_sequence(config, source, target)
        batches = make_batches(args.warmup + 2 + args.steps, batch, source, target, config.vocab_size,
                               device=args.device)
        print(f"\n{shape}: {os.path.basename(args.config)}, batch {batch} x {source}/{target}, bf16, "
              f"{flops / 1e12:.3f} TFLOP per sequence, mean over {args.steps} updates after {args.warmup}")
        print("| contender | batch | s/update | seq/s | tokens/s (src+tgt) | TFLOP/s | MFU measured | MFU datasheet "
              "| peak GiB | vs hf |\n|---|---|---|---|---|---|---|---|---|---|")
        reference = None
        step = None
        for name in args.contenders.split(","):
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
            step, label = contender_step_fn(name, state_dict, config, values, args.device)
            # a compiled contender's first update compiles: one more warm-up update, its compile time reported
            # apart (first update minus a timed one), never in s/update
            warmup = args.warmup + (1 if "compile" in name else 0)
            first: list = []
            size, seconds, memory, oom = time_fitting(step, batches[:warmup + args.steps], warmup, args.device,
                                                      _batch_candidates(batch, args.shrink_on_oom), first)
            compile_s = max(0.0, first[-1] - seconds) if first and seconds and "compile" in name else None
            if size is None:
                print(f"| {label} | out of memory at {oom} | | | | | | | | |")
                results.append(dict(shape=shape, contender=name, label=label, out_of_memory=oom))
                write_json()
                step = None
                continue
            seq_s = size / seconds
            reference = reference or (seq_s if name == "hf" else None)
            achieved = flops * seq_s / 1e12
            ratio = f"{seq_s / reference:.2f}x" if reference else "-"
            print(f"| {label} | {size} | {seconds:.4f} | {seq_s:,.1f} | {seq_s * (source + target):,.0f} "
                  f"| {achieved:.0f} | {100 * achieved / peak:.1f}% | {100 * achieved / args.peak_tflops:.1f}% "
                  f"| {memory:.1f} | {ratio} |", flush=True)
            if compile_s is not None:
                print(f"  ({label}: compiling took {compile_s:.1f} s, the first update {first[-1]:.1f} s; not in "
                      f"s/update)", flush=True)
            results.append(dict(shape=shape, contender=name, label=label, batch=size, source=source, target=target,
                                out_of_memory=oom, seconds=seconds, seq_s=seq_s, tokens_s=seq_s * (source + target),
                                tflops=achieved, mfu_measured=achieved / peak,
                                mfu_datasheet=achieved / args.peak_tflops,
                                peak_gib=memory, vs_hf=seq_s / reference if reference else None,
                                compile_s=compile_s))
            write_json()
            if not (args.profile and name == args.contenders.split(",")[-1]):
                del step
                step = None
        if args.profile and step is not None:
            profile = profile_step(step, [{k: v[:size] for k, v in b.items()} for b in batches[:2]], device=args.device)
            del step
    write_json(profile)


if __name__ == "__main__":
    main()
