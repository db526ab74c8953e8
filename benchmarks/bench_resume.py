"""Resuming pretraining late in an epoch: seconds from start to the first update, replaying the
epoch up to the saved batch (the old way) vs seeking to the saved row (this project).

A generated corpus (``--rows`` short documents, default 100,000) is balanced into LDDL shards by
LDDL's own balancer (``shard-*.parquet`` + ``.num_samples.json``, the layout preprocess writes).
A training checkpoint of a tiny BART is placed at ``--at`` (0.9) of epoch 0: the loader is run
once to that batch to learn its position (setup, not timed). Then, each in the same process, from
building the loader to the end of the first update after ``Trainer.resume``:

- replay: the same checkpoint without its data position: the trainer goes through the epoch's
  batches up to the saved one (reading, tokenizing and noising them), as every resume did before;
- seek: the checkpoint as written: each loader worker starts at its saved row.

Both first updates must give the same loss (the resumed run is exact either way).

    python benchmarks/bench_resume.py [--rows 100000] [--shards 8] [--batch_size 32] [--num_workers 0]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bart.cli.settings import Settings  # noqa: E402
from bart.configuration import BartConfig  # noqa: E402
from bart.data.lddl_compat import balance_shards  # noqa: E402
from bart.data.noise import NoiseConfig  # noqa: E402
from bart.data.pretraining_dataset import build_pretraining_loader  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402
from bart.optim import build_optimizer, build_scheduler  # noqa: E402
from bart.records.dllogger_compat import Logger  # noqa: E402
from bart.tokenization.tokenization_bart import BartTokenizer  # noqa: E402
from bart.tokenization.train_tokenizer import train_tokenizer  # noqa: E402
from bart.training.strategy import prepared_strategy  # noqa: E402
from bart.training.trainer import Trainer  # noqa: E402
from benchmarks.corpora import write_shards  # noqa: E402

VOCAB_SIZE = 1024  # a small trained vocabulary: GPT-2's 50,265-way softmax would dominate the tiny model's step
TINY = dict(vocab_size=VOCAB_SIZE, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=130)


def make_corpus(work: str, rows: int, shards: int) -> tuple[str, BartTokenizer]:
    """The balanced LDDL shards and a tokenizer trained on the corpus (python -m bart.tokenization.train_tokenizer)."""
    raw, folder = os.path.join(work, "raw"), os.path.join(work, "pretrain_lddl_128")
    write_shards(raw, [rows // 4] * 3 + [rows - 3 * (rows // 4)], seed=0, words=(12, 40))
    tokenizer = BartTokenizer.from_pretrained(train_tokenizer([raw], os.path.join(work, "tok"), VOCAB_SIZE)["folder"])
    os.makedirs(folder)
    balance_shards(raw, folder, shards)
    shutil.rmtree(raw)
    return folder, tokenizer


class Run:
    """Model, loader and trainer as pretrain.py builds them (tiny model, small vocabulary)."""

    def __init__(self, args, folder: str, tokenizer, out_dir: str) -> None:
        self.loader = build_pretraining_loader(folder, tokenizer, args.batch_size, 128, NoiseConfig(), seed=1,
                                               num_workers=args.num_workers)
        self.decoded = 0
        if not args.num_workers:  # in this process: count the rows tokenized
            decode = self.loader.dataset._decode_rows
            self.loader.dataset._decode_rows = lambda texts: setattr(self, "decoded", self.decoded + len(texts)) or \
                decode(texts)
        torch.manual_seed(0)
        model = BartForConditionalGeneration(BartConfig(**TINY))
        optimizer, clips = build_optimizer(model, "lamb", lr=1e-3, weight_decay=0.01, max_grad_norm=1.0)
        scheduler = build_scheduler(optimizer, "polynomial", 0, 2)
        settings = Settings(output_dir=out_dir, max_steps=2, log_freq=1)
        self.trainer = Trainer(model, optimizer, scheduler, self.loader, settings, clips_internally=clips,
                               strategy=prepared_strategy(None, 1, torch.device("cpu"), model),
                               logger=Logger(None, stdout=False), progress_bar=False)


def first_update(args, folder, tokenizer, checkpoint: str, out_dir: str) -> dict:
    start = time.perf_counter()
    run = Run(args, folder, tokenizer, out_dir)
    run.trainer.resume(checkpoint)
    step = run.trainer.train_step
    done = {}

    def timed(micro):
        out = step(micro)
        done.setdefault("seconds", time.perf_counter() - start)
        done.setdefault("loss", float(out["loss_sum"] / out["tokens"]))
        return out
    run.trainer.train_step = timed
    run.trainer.fit()
    return {**done, "decoded": run.decoded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_workers", type=int, default=0)
    parser.add_argument("--at", type=float, default=0.9, help="fraction of the epoch where the checkpoint is")
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="bench_resume_")
    try:
        start = time.perf_counter()
        folder, tokenizer = make_corpus(work, args.rows, args.shards)
        print(f"[setup] {args.rows:,} rows, a tokenizer trained on them, balanced into {args.shards} LDDL shards "
              f"({time.perf_counter() - start:.0f} s)")

        # setup: the position after the batch at --at of the epoch, in a checkpoint at update 1
        start = time.perf_counter()
        setup = Run(args, folder, tokenizer, os.path.join(work, "setup"))
        setup.loader.set_epoch(0)
        batches = sum(1 for _ in setup.loader)
        skip = int(batches * args.at)
        setup.loader.set_epoch(0)
        iterator = iter(setup.loader)
        for _ in range(skip):
            next(iterator)
        trainer = setup.trainer
        trainer.step, trainer.epoch, trainer.batches_in_epoch = 1, 0, skip
        state = trainer.state_dict()
        del iterator
        seek_ckpt, replay_ckpt = os.path.join(work, "seek.ckpt"), os.path.join(work, "replay.ckpt")
        torch.save(state, seek_ckpt)
        torch.save({**state, "data_position": None}, replay_ckpt)  # what checkpoints held before
        print(f"[setup] epoch of {batches:,} batches of {args.batch_size}; checkpoint after batch {skip:,} "
              f"({time.perf_counter() - start:.0f} s)")

        replay = first_update(args, folder, tokenizer, replay_ckpt, os.path.join(work, "replay"))
        seek = first_update(args, folder, tokenizer, seek_ckpt, os.path.join(work, "seek"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counted = not args.num_workers
    print(f"\nResume at {args.at:.0%} of an epoch of {args.rows:,} rows ({batches:,} batches of {args.batch_size}, "
          f"{args.num_workers} loader workers, 1 CPU thread)\n")
    print("| way | seconds to the first update | rows tokenized before it | first update's loss |")
    print("|---|---|---|---|")
    for name, result in (("replay the epoch (before)", replay), ("seek to the row (now)", seek)):
        rows = f"{result['decoded']:,}" if counted else "-"
        print(f"| {name} | {result['seconds']:.2f} | {rows} | {result['loss']:.6f} |")
    print(f"| **ratio** | **{replay['seconds'] / seek['seconds']:.1f}x faster** | | "
          f"{'same' if replay['loss'] == seek['loss'] else 'DIFFERENT'} |")
    if replay["loss"] != seek["loss"]:
        raise SystemExit("the two resumed runs differ")


if __name__ == "__main__":
    main()
