"""Pretraining throughput: this project's training loop vs a plain loop over transformers' BART.

The batches come from the project's real input path (generated parquet shards → tokenizer →
BART noise) at length 128 and are materialised once, so every contender trains on the same
batches. Contenders, each from the same random bart-base weights (configs/config_base.json):

- transformers BartForConditionalGeneration (attn_implementation="sdpa") + torch AdamW (foreach),
  a plain loop: forward with labels, backward, clip_grad_norm_, step, scheduler, zero_grad;
- this project: ``Trainer.train_step`` (token-normalised loss, clipping, scheduler) with AdamW;
- this project: the same with LAMB (the pretraining optimizer);
- optionally (``--compile``) this project + AdamW with the model under torch.compile.

The first ``--warmup`` updates of each contender are not timed. seq/s counts sequences, tokens/s
counts target tokens (labels != -100).

    python benchmarks/bench_pretraining.py [--batch 16] [--steps 4] [--threads 2] [--compile]
"""
import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bart.cli.settings import PrecisionSettings, Settings  # noqa: E402
from bart.configuration import BartConfig  # noqa: E402
from bart.data.noise import NoiseConfig  # noqa: E402
from bart.data.pretraining_dataset import build_pretraining_loader  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402
from bart.optim import build_optimizer, build_scheduler  # noqa: E402
from bart.tokenization.build_tokenizer import build_tokenizer_folder  # noqa: E402
from bart.tokenization.tokenization_bart import BartTokenizer  # noqa: E402
from bart.training.strategy import prepared_strategy  # noqa: E402
from bart.training.trainer import Trainer  # noqa: E402
from benchmarks.corpora import write_shards  # noqa: E402

LR, WEIGHT_DECAY, CLIP = 1e-4, 0.01, 1.0


def make_batches(count: int, batch: int, length: int) -> list[dict]:
    work = tempfile.mkdtemp(prefix="bench_pretraining_")
    tokenizer = BartTokenizer.from_pretrained(build_tokenizer_folder(os.path.join(work, "tok")))
    folder = os.path.join(work, "shards")
    write_shards(folder, [count * batch] * 2, seed=0, words=(90, 110))
    loader = build_pretraining_loader(folder, tokenizer, batch, length, NoiseConfig(), seed=0, num_workers=0)
    loader.set_epoch(0)
    batches = []
    for b in loader:
        if b["input_ids"].shape[0] == batch:
            batches.append(b)
        if len(batches) == count:
            return batches
    raise SystemExit(f"the generated shards gave only {len(batches)} full batches")


def timed(step_fn, batches: list[dict], warmup: int) -> list[float]:
    times = []
    for i, batch in enumerate(batches):
        start = time.perf_counter()
        step_fn(batch)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def hf_plain_loop(hf_model, batches, warmup):
    model = copy.deepcopy(hf_model).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, eps=1e-6, foreach=True)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, 2, 1000)

    def step(batch):
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     decoder_input_ids=batch["decoder_input_ids"], labels=batch["labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    return timed(step, batches, warmup)


def project_loop(state_dict, config, optimizer_name, batches, warmup, compile_model=False):
    model = BartForConditionalGeneration(config)
    model.load_state_dict(state_dict)
    optimizer, clips = build_optimizer(model, optimizer_name, lr=LR, weight_decay=WEIGHT_DECAY, max_grad_norm=CLIP)
    scheduler = build_scheduler(optimizer, "linear", 2, 1000)
    trainer = Trainer(model, optimizer, scheduler, [], Settings(
        output_dir=tempfile.mkdtemp(), max_steps=len(batches), precision_flags=PrecisionSettings.named("fp32"),
        gradient_clip_val=CLIP), strategy=prepared_strategy(None, 1, torch.device("cpu"), model),
        compile=compile_model, progress_bar=False, clips_internally=clips)
    return timed(lambda batch: trainer.train_step([batch]), batches, warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/config_base.json")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4, help="timed updates per contender")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also time the project's loop under torch.compile")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batches = make_batches(args.steps + args.warmup, args.batch, args.length)
    values = json.load(open(os.path.join(ROOT, args.config)))
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(
        **{k: v for k, v in values.items() if k not in ("pre_ln", "dtype")}, attn_implementation="sdpa"))
    config = BartConfig(**values)
    tokens = statistics.mean(int((b["labels"] != -100).sum()) for b in batches)
    rows = [(f"transformers {transformers.__version__} (sdpa) + torch AdamW, plain loop",
             hf_plain_loop(hf, batches, args.warmup)),
            ("this project: Trainer + AdamW", project_loop(hf.state_dict(), config, "adamw", batches, args.warmup)),
            ("this project: Trainer + LAMB", project_loop(hf.state_dict(), config, "lamb", batches, args.warmup))]
    if args.compile:
        rows.append(("this project: Trainer + AdamW, --compile",
                     project_loop(hf.state_dict(), config, "adamw", batches, args.warmup + 1, compile_model=True)))
    print(f"\npretraining updates (fp32), cpu threads {args.threads}, {os.path.basename(args.config)}, batch "
          f"{args.batch} x {args.length}, {tokens:.0f} target tokens per batch, median of {args.steps} updates")
    print("| loop | s/update | seq/s | tokens/s | ratio |")
    print("|---|---|---|---|---|")
    reference = statistics.median(rows[0][1])
    for name, times in rows:
        t = statistics.median(times)
        print(f"| {name} | {t:.3f} | {args.batch / t:.2f} | {tokens / t:,.0f} | {reference / t:.2f}x |")


if __name__ == "__main__":
    main()
