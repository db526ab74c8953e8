"""Operators per training step and host reads per decode, counted on CPU: what a GPU would launch and wait for.

Training (``--part train``): one update (forward and backward of each of ``--micro_batches`` micro-batches,
clipping, optimizer step, zero_grad) of bart-base's layers and heads (configs/config_base.json; ``--d_model``/
``--ffn``/``--vocab`` narrow the widths, which change no count) under torch.profiler, after one warm-up update.
Contenders (``--contenders``, comma-separated):
- ``hf_fused`` / ``hf_foreach``: transformers' BartForConditionalGeneration (sdpa) in a plain loop, with
  ``torch.optim.AdamW(fused=True)`` / ``(foreach=True)``: the peers, measured in the same run;
- ``adamw``: this project's ``Trainer.train_step`` with AdamW as ``--optim adamw`` builds it (foreach on CPU,
  fused on CUDA), today's default;
- ``lamb``: the same with the project's multi-tensor (``torch._foreach_*``) LAMB, ``--optim lamb`` without apex;
- ``lamb_loop``: the same LAMB math issued tensor by tensor (benchmarks/bench_lamb.py's ``LoopLamb``): what the
  multi-tensor step replaces;
- ``adamw_cast_once``: ``adamw`` with ``--cast_weights_once`` (the matrices cast to the autocast dtype once per
  update instead of at every use; bf16/fp16 only).
Every contender runs in each precision of ``--precisions`` (bf16, fp32). Counted per kind, from the profiler's
operator tree (each operator once, at the outermost level where it is one kernel's worth of work):
``kernels`` (leaf operators, less views and allocations; a ``_foreach_*`` call counts once: one multi-tensor
launch on CUDA, where CPU loops per tensor), ``casts`` (``aten::_to_copy``: dtype or device changes),
``copies`` (``aten::copy_`` outside a cast) and ``layout`` (those of them under ``contiguous``/``clone``/
``reshape``, plus ``cat``/``stack``), ``elementwise`` (arithmetic, comparisons, dropout, activations: the
outermost such operator), ``optimizer`` (operators under ``optimizer.step``; ``per-tensor`` of them not
``_foreach_*``/fused), ``host reads`` (``aten::_local_scalar_dense``: ``.item()``, ``bool()``, ...: a device sync
on CUDA). The ratio column divides ``kernels`` by the first peer's in the same precision.

Decoding (``--part decode``): host reads per ``generate`` call of bart-base's layers at the same widths (8 sources of
``--decode_source`` tokens), beam search and greedy, with ``sync_every`` 1 (a read after every step) and each of ``--sync_every``: the calls that wait for the device on
CUDA (``bool()``, ``int()``, ``.item()``, ``.tolist()``, ``nonzero``, ...: counted through a TorchFunctionMode),
index uploads (``torch.tensor`` of host lists, list indexing: a copy a CUDA stream orders after the queued work),
decoder steps and row-steps (the work the later reads add: done rows run on until the next read). Rows
finish at different steps (EOS made likely, as in summarization), and the tokens must equal those of
``sync_every=1``.

    python benchmarks/count_step_ops.py [--part train,decode] [--precisions bf16,fp32]
        [--contenders hf_fused,hf_foreach,adamw,lamb,lamb_loop,adamw_cast_once] [--micro_batches 1 4]
        [--sync_every 2 4 8] [--json F]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

import torch
from torch.overrides import TorchFunctionMode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu_training import make_batches  # noqa: E402

from bart.cli.settings import PrecisionSettings, Settings  # noqa: E402
from bart.configuration import BartConfig  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402
from bart.optim import build_optimizer, build_scheduler, decay_groups  # noqa: E402
from bart.training.strategy import prepared_strategy  # noqa: E402
from bart.training.trainer import Trainer  # noqa: E402

DECODE_CONFIG = "configs/config_base.json"  # the decodes' layers and heads (at --d_model/--ffn/--vocab widths)
CONTENDERS = ("hf_fused", "hf_foreach", "adamw", "lamb", "lamb_loop", "adamw_cast_once")
LR, WEIGHT_DECAY, CLIP = 1e-4, 0.01, 1.0

# operators that are no kernel: views, metadata, allocations
_NO_KERNEL = {"aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::transpose", "aten::t", "aten::permute",
              "aten::expand", "aten::expand_as", "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze",
              "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::narrow", "aten::chunk", "aten::detach",
              "aten::alias", "aten::_reshape_alias", "aten::reshape", "aten::flatten", "aten::unflatten",
              "aten::view_as", "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resolve_conj",
              "aten::resolve_neg", "aten::lift_fresh", "aten::detach_", "aten::resize_", "aten::set_",
              "aten::to", "aten::contiguous", "aten::clone", "aten::dropout", "aten::linear", "aten::matmul",
              "aten::unfold", "aten::result_type", "aten::is_nonzero", "aten::numel", "aten::size", "aten::stride",
              "aten::_has_compatible_shallow_copy_type", "aten::is_same_size", "aten::_nested_tensor_from_mask_left_aligned",
              "aten::scalar_tensor", "aten::_to_copy"}
_LAYOUT_PARENTS = {"aten::contiguous", "aten::clone", "aten::reshape", "aten::flatten", "aten::_reshape_copy",
                   "aten::repeat", "aten::repeat_interleave"}
_ELEMENTWISE = {f"aten::{name}" for base in (
    "add", "sub", "rsub", "mul", "div", "neg", "where", "masked_fill", "fill", "zero", "pow", "sqrt", "rsqrt", "exp",
    "log", "clamp", "clamp_min", "clamp_max", "addcmul", "addcdiv", "lerp", "sign", "abs", "reciprocal", "maximum",
    "minimum", "eq", "ne", "gt", "lt", "ge", "le", "logical_and", "logical_or", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_not", "native_dropout", "native_dropout_backward", "gelu", "gelu_backward", "relu",
    "threshold_backward", "silu", "tanh", "bernoulli", "isfinite", "nan_to_num", "ones_like", "zeros_like",
    "full_like", "sigmoid", "exp2", "log1p", "expm1")
    for name in (base, base + "_")}


def _is_foreach(name: str) -> bool:
    return name.startswith("aten::_foreach_") or name.startswith("aten::_fused_")


def _ancestors(event):
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def classify(events) -> dict:
    """Per-kind operator counts of one profiled update (see the module docstring)."""
    counts = collections.Counter()
    for e in events:
        name = e.name
        if not name.startswith("aten::"):
            continue
        above = list(_ancestors(e))
        aten_above = [a.name for a in above if a.name.startswith("aten::")]
        in_optimizer = any(a.name == "## optimizer ##" for a in above)
        under_foreach = any(_is_foreach(a) for a in aten_above)
        if name == "aten::_local_scalar_dense":
            counts["host reads"] += 1
        if name == "aten::_to_copy" and not under_foreach:
            counts["casts"] += 1
        if name == "aten::copy_" and not under_foreach and "aten::_to_copy" not in aten_above:
            counts["copies"] += 1
            if aten_above and aten_above[0] in _LAYOUT_PARENTS:
                counts["layout"] += 1
        if name in ("aten::cat", "aten::stack") and not any(a in ("aten::cat", "aten::stack") for a in aten_above):
            counts["layout"] += 1
        if name in _ELEMENTWISE and not under_foreach and not any(a in _ELEMENTWISE for a in aten_above):
            counts["elementwise"] += 1
        if in_optimizer and not aten_above:
            counts["optimizer"] += 1
            if not _is_foreach(name):
                counts["per-tensor"] += 1
        # a kernel: a foreach call once, else a leaf operator that is no view or allocation, not inside a foreach
        if under_foreach or name in _NO_KERNEL:
            continue
        leaf = not any(c.name.startswith("aten::") and c.name not in _NO_KERNEL for c in e.cpu_children)
        if _is_foreach(name) or leaf:
            counts["kernels"] += 1
    return counts


def _marked(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step`` in a profiler range named "## optimizer ##" (through the optimizer's step hooks)."""
    ranges = []
    optimizer.register_step_pre_hook(
        lambda *_: ranges.append(torch.profiler.record_function("## optimizer ##").__enter__()))
    optimizer.register_step_post_hook(lambda *_: ranges.pop().__exit__(None, None, None))


def geometry(args, config: str | None = None) -> dict:
    values = dict(json.load(open(os.path.join(ROOT, config or args.config))))
    if not args.full_width:
        heads = values["encoder_attention_heads"]
        values.update(d_model=args.d_model, encoder_ffn_dim=args.ffn, decoder_ffn_dim=args.ffn, vocab_size=args.vocab,
                      max_position_embeddings=max(args.source, args.target, args.decode_source, args.new_tokens) + 2,
                      encoder_attention_heads=min(heads, args.d_model // 8),
                      decoder_attention_heads=min(heads, args.d_model // 8))
    return values


def hf_step(state_dict, values, precision: str, kind: str):
    import transformers
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(
        **{k: v for k, v in values.items() if k not in ("pre_ln", "dtype", *transformers.BartConfig.attribute_map)},
        attn_implementation="sdpa"))
    hf.load_state_dict(state_dict)
    hf.train()
    optimizer = torch.optim.AdamW(hf.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, eps=1e-6, **{kind: True})
    _marked(optimizer)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def step(batches):
        for batch in batches:
            with autocast:
                loss = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          decoder_input_ids=batch["decoder_input_ids"], labels=batch["labels"]).loss
            (loss / len(batches)).backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step, f"transformers {transformers.__version__} + AdamW({kind})"


def project_step(state_dict, config, name: str, precision: str):
    model = BartForConditionalGeneration(config)
    model.load_state_dict(state_dict)
    if name == "lamb_loop":
        from bench_lamb import LoopLamb
        optimizer, clips = LoopLamb(decay_groups(model, WEIGHT_DECAY), lr=LR, max_grad_norm=CLIP), True
    else:
        optimizer, clips = build_optimizer(model, "lamb" if name.startswith("lamb") else "adamw", lr=LR,
                                           weight_decay=WEIGHT_DECAY, max_grad_norm=CLIP, prefer_apex=False)
    _marked(optimizer)
    scheduler = build_scheduler(optimizer, "linear", 2, 10_000)
    settings = Settings(output_dir=tempfile.mkdtemp(), max_steps=10_000, gradient_clip_val=CLIP,
                        precision_flags=PrecisionSettings.named("bf16" if precision == "bf16" else "fp32"),
                        **({"cast_weights_once": True} if name.endswith("cast_once") else {}))
    trainer = Trainer(model, optimizer, scheduler, [], settings, device=torch.device("cpu"),
                      strategy=prepared_strategy(None, 1, torch.device("cpu"), model), progress_bar=False,
                      clips_internally=clips)
    kind = {"adamw": "AdamW(foreach)", "lamb": "multi-tensor LAMB", "lamb_loop": "per-tensor loop LAMB",
            "adamw_cast_once": "AdamW(foreach), --cast_weights_once"}[name]
    return trainer.train_step, f"this project: {kind}"


def count_training(args) -> list:
    from torch.profiler import ProfilerActivity, profile
    values = geometry(args)
    config = BartConfig(**values)
    torch.manual_seed(0)
    state_dict = BartForConditionalGeneration(config).state_dict()
    rows = []
    columns = ("kernels", "casts", "copies", "layout", "elementwise", "optimizer", "per-tensor", "host reads")
    print(f"\nOperators per training update: {config.encoder_layers}+{config.decoder_layers} layers, "
          f"{sum(p.numel() for p in BartForConditionalGeneration(config).parameters() if p.requires_grad) / 1e6:.1f}M "
          f"parameters, micro-batches of {args.batch} x {args.source}/{args.target}, CPU, torch {torch.__version__}")
    for precision, micro in [(p, m) for m in args.micro_batches for p in args.precisions.split(",")]:
        batches = make_batches(2 * micro, args.batch, args.source, args.target, config.vocab_size, device="cpu")
        print(f"\n{precision}, {micro} micro-batch{'es' if micro > 1 else ''} per update\n"
              f"| contender | {' | '.join(columns)} | kernels vs peer |\n|---|{'---|' * len(columns)}---|")
        peer = None
        for name in args.contenders.split(","):
            if name == "adamw_cast_once" and precision == "fp32":
                continue  # nothing is cast in fp32
            torch.manual_seed(1)
            step, label = (hf_step(state_dict, values, precision, name[3:]) if name.startswith("hf_")
                           else project_step(state_dict, config, name, precision))
            step(batches[:micro])
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step(batches[micro:])
            counts = classify(prof.profiler.function_events)
            peer = peer or (counts["kernels"] if name.startswith("hf_") else None)
            ratio = f"{counts['kernels'] / peer:.2f}x" if peer else "-"
            print(f"| {label} | {' | '.join(str(counts[c]) for c in columns)} | {ratio} |", flush=True)
            rows.append(dict(part="train", precision=precision, micro_batches=micro, contender=name, label=label,
                             **{c: counts[c] for c in columns}))
    return rows


class HostReads(TorchFunctionMode):
    """Counts, while active, the tensor operations that read a value back to the host (a device sync on CUDA) and
    the index lists uploaded to the device."""

    READS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist", "nonzero", "argwhere",
             "masked_select", "unique"}

    def __init__(self):
        super().__init__()
        self.reads = collections.Counter()
        self.uploads = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in self.READS:
            self.reads[name] += 1
        elif name == "tensor" and args and isinstance(args[0], (list, tuple)):
            self.uploads += 1
        elif name in ("__getitem__", "__setitem__") and len(args) > 1 and isinstance(args[1], list):
            self.uploads += 1
        return func(*args, **kwargs)


def count_decoding(args) -> list:
    from bart.generation import session
    values = dict(geometry(args, DECODE_CONFIG), dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                  init_std=0.3, forced_bos_token_id=None, forced_eos_token_id=None, no_repeat_ngram_size=0, min_length=4)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**values)).eval()
    with torch.no_grad():
        model.final_logits_bias[0, 2] = args.eos_bias  # EOS likely: rows finish at different steps
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, values["vocab_size"], (args.decode_batch, args.decode_source), generator=g)
    steps = []
    original = session.Decoder.next_logits

    def counted(self, tokens):
        steps.append(tokens.shape[0])
        return original(self, tokens)
    session.Decoder.next_logits = counted
    rows = []
    print(f"\nHost reads per generate call: {args.decode_batch} sources of {args.decode_source} tokens, up to "
          f"{args.new_tokens} new tokens, EOS bias {args.eos_bias}, CPU, torch {torch.__version__}")
    print("| search | sync_every | host reads | per step | index uploads | decoder steps | row-steps | reads vs k=1 "
          "| row-steps vs k=1 | tokens as k=1 |\n|---|---|---|---|---|---|---|---|---|---|")
    try:
        for search, settings in (("beam 4", dict(num_beams=4, no_repeat_ngram_size=3)),
                                 ("greedy", dict(num_beams=1, no_repeat_ngram_size=3))):
            reference = first = None
            for k in (1, *args.sync_every):
                steps.clear()
                with HostReads() as counter:
                    out = model.generate(ids, max_length=args.new_tokens + 1, sync_every=k, **settings)
                reference = out if reference is None else reference
                same = out.shape == reference.shape and bool(torch.equal(out, reference))
                reads = sum(counter.reads.values())
                first = first or (reads, sum(steps))
                print(f"| {search} | {k} | {reads} | {reads / max(1, len(steps)):.2f} | {counter.uploads} "
                      f"| {len(steps)} | {sum(steps)} | {reads / first[0]:.2f}x | {sum(steps) / first[1]:.2f}x "
                      f"| {'yes' if same else 'NO'} |", flush=True)
                rows.append(dict(part="decode", search=search, sync_every=k, host_reads=reads,
                                 reads_by_kind=dict(counter.reads), uploads=counter.uploads, steps=len(steps),
                                 row_steps=sum(steps), same_tokens=same))
    finally:
        session.Decoder.next_logits = original
    return rows


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="train,decode", help="train, decode or both, comma-separated")
    parser.add_argument("--config", default="configs/config_base.json",
                        help="the training part's layers and heads (post-LN: transformers' BART is)")
    parser.add_argument("--full_width", action="store_true", help="the config's widths too (slower; same counts)")
    parser.add_argument("--d_model", type=int, default=64)
    parser.add_argument("--ffn", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--source", type=int, default=64)
    parser.add_argument("--target", type=int, default=32)
    parser.add_argument("--precisions", default="bf16,fp32")
    parser.add_argument("--micro_batches", type=int, nargs="+", default=[1, 4],
                        help="micro-batches per update (gradient accumulation), one table each")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"comma-separated, of {CONTENDERS}")
    parser.add_argument("--decode_batch", type=int, default=8)
    parser.add_argument("--decode_source", type=int, default=64, help="source length of the decodes")
    parser.add_argument("--new_tokens", type=int, default=48)
    parser.add_argument("--eos_bias", type=float, default=8.0, help="added to EOS's logit (rows finish at "
                        "different steps, some not at all, with the default widths)")
    parser.add_argument("--sync_every", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    unknown = [n for n in args.contenders.split(",") if n not in CONTENDERS]
    unknown += [p for p in args.part.split(",") if p not in ("train", "decode")]
    unknown += [p for p in args.precisions.split(",") if p not in ("bf16", "fp32")]
    if unknown:
        parser.error(f"unknown {unknown}: contenders {CONTENDERS}, parts train/decode, precisions bf16/fp32")
    torch.set_num_threads(args.threads)
    rows = []
    if "train" in args.part:
        rows += count_training(args)
    if "decode" in args.part:
        rows += count_decoding(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
