"""Samples/s of the pretraining loader resumed on another layout (it reads the checkpoint's streams and cuts their
batches into this run's micro-batches), next to the same loader reading its own layout, in the same run, in this
process (--num_workers 0): one epoch of ``--rows`` rows from its start.

- own layout: 1 process x --train_batch_size 64 (the peer);
- another layout: 1 x 32 x accumulation 2 at a position of 1 x 64: every batch of 64 read, noised, and cut into
  two micro-batches padded again;
- another layout, whole batches: 1 x 64 at a position of 2 processes x 32: both processes' streams read, their
  batches of 32 cut into this run's micro-batches of 64 (one from each stream, padded again);
- own layout 1 x 32: the noise in batches of 32, as those streams run it.

    python benchmarks/bench_pretraining_layouts.py [--rows 4000] [--length 128]
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bart.data.noise import NoiseConfig  # noqa: E402
from bart.data.pretraining_dataset import build_pretraining_loader  # noqa: E402
from bart.tokenization.build_tokenizer import build_tokenizer_folder  # noqa: E402
from bart.tokenization.tokenization_bart import BartTokenizer  # noqa: E402
from benchmarks.corpora import write_shards  # noqa: E402


def _rate(loader, position=None) -> tuple[float, int]:
    """Samples/s over one epoch from its start (``position``: another layout's, read through position_of)."""
    loader.set_epoch(0)
    if position is not None:
        loader.seek(loader.position_of(position, "bench"))
    start = time.perf_counter()
    samples = sum(int((b["labels"] != -100).any(-1).sum()) for b in loader)
    return samples / (time.perf_counter() - start), samples


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()
    work = tempfile.mkdtemp()
    tokenizer = BartTokenizer.from_pretrained(build_tokenizer_folder(os.path.join(work, "tok")))
    folder = os.path.join(work, "shards")
    write_shards(folder, [args.rows // 4] * 4, seed=1, words=(args.length * 2 // 3, args.length * 2 // 3 + 20))

    def loader(batch, accumulation=1):
        return build_pretraining_loader(folder, tokenizer, batch, args.length, NoiseConfig(), seed=0,
                                        num_workers=0, accumulation=accumulation)

    own = loader(64)
    own.set_epoch(0)
    start = own.position()
    # the positions of 2 processes x 32 at their epoch's start: each names its streams' layout
    two = [{**start, "layout": {**start["layout"], "processes": 2, "batch_size": 32},
            "streams": {**start["streams"], "processes": 2, "batch_size": 32}} for _ in range(2)]
    rows = [("own layout: 1 x 64", *_rate(own)),
            ("1 x 32 x accumulation 2 at 1 x 64's position", *_rate(loader(32, 2), [start])),
            ("1 x 64 at 2 x 32's position", *_rate(loader(64), two)),
            ("own layout: 1 x 32 (batches of 32 noised, as 2 x 32's streams do)", *_rate(loader(32)))]
    peer = rows[0][1]
    print(f"| loader ({args.rows} rows, length {args.length}, this process) | samples | samples/s | vs own layout |")
    print("|---|---|---|---|")
    for name, rate, samples in rows:
        print(f"| {name} | {samples:,} | {rate:,.0f} | {rate / peer:.2f}x |")


if __name__ == "__main__":
    main()
