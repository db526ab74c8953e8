"""Samples/s of the pretraining input path in ONE worker process: parquet read + tokenize + noise
(this project's loader), next to a straightforward per-sample, per-token Python implementation of
the same noise run on the same token arrays in the same run.

    python benchmarks/bench_pretraining_loader.py [--rows 4000]
Targets (issue): >= 3,300 samples/s at length 128 and >= 700 at 512 per worker (10x one A100).
"""
import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bart.data.noise import NoiseConfig  # noqa: E402
from bart.data.pretraining_dataset import build_pretraining_loader  # noqa: E402
from bart.tokenization.build_tokenizer import build_tokenizer_folder  # noqa: E402
from bart.tokenization.tokenization_bart import BartTokenizer  # noqa: E402
from benchmarks.corpora import write_shards  # noqa: E402


def python_noise(tokens, starts, ends, mask_id, rng, ratio=0.3, lam=3.5, mask_random=0.1, vocab_high=50264):
    """The same noise written plainly, one sample and one token at a time: sentence permutation,
    Poisson spans over whole words (one <mask> or random token per span), zero-length spans inserted."""
    sentences, current = [], []
    for t in tokens[1:-1]:
        current.append(t)
        if ends[t]:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    rng.shuffle(sentences)
    words = []
    for t in (t for s in sentences for t in s):
        if not words or starts[t]:
            words.append([])
        words[-1].append(t)
    budget, lengths = math.ceil(len(words) * ratio), []
    while sum(lengths) < budget:
        lengths.append(int(rng.poisson(lam)))
    if lengths:
        lengths[-1] -= sum(lengths) - budget
    zero = lengths.count(0)
    lengths = [n for n in lengths if n > 0]
    rng.shuffle(lengths)
    cuts = sorted(rng.choice(len(words) - budget + len(lengths), size=len(lengths), replace=False))
    out, word, span = [], 0, 0
    for place in range(len(words) - budget + len(lengths)):
        if span < len(cuts) and place == cuts[span]:
            out.append(int(rng.integers(4, vocab_high)) if rng.random() < mask_random else mask_id)
            word += lengths[span]
            span += 1
        else:
            out.extend(words[word])
            word += 1
    for _ in range(zero):
        out.insert(int(rng.integers(0, len(out) + 1)), mask_id)
    return np.array([tokens[0]] + out + [tokens[-1]])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=4000)
    args = parser.parse_args()
    work = tempfile.mkdtemp()
    tokenizer = BartTokenizer.from_pretrained(build_tokenizer_folder(os.path.join(work, "tok")))
    starts, ends = tokenizer.word_start_mask().numpy(), tokenizer.sentence_end_mask().numpy()
    print("| length | full loader path (read+tokenize+noise), samples/s | target | noise only: this project "
          "(batches of 64) | noise only: plain per-sample Python | noise ratio |")
    print("|---|---|---|---|---|---|")
    for length, words, target in ((128, 90, 3300), (512, 380, 700)):
        folder = os.path.join(work, f"shards{length}")
        write_shards(folder, [args.rows // 4] * 4, seed=length, words=(words, words + 20))
        loader = build_pretraining_loader(folder, tokenizer, 64, length, NoiseConfig(), seed=0, num_workers=0)
        loader.set_epoch(0)
        start = time.perf_counter()
        samples = sum(b["input_ids"].shape[0] for b in loader)
        ours = samples / (time.perf_counter() - start)
        rows = [t for f in sorted(os.listdir(folder)) if f.endswith(".parquet")
                for t in pq.read_table(os.path.join(folder, f)).column("sentences").to_pylist()][:500]
        docs = [np.array([0] + ids[: length - 2] + [2]) for ids in tokenizer.encode_batch_fast(rows, add_special_tokens=False)]
        noise = loader.collator.noise
        start = time.perf_counter()
        for i in range(0, len(docs), 64):  # batches of 64, as the loader's collator does
            noise.batch(docs[i:i + 64], [0] * len(docs[i:i + 64]), range(i, i + len(docs[i:i + 64])))
        vectorised = len(docs) / (time.perf_counter() - start)
        start = time.perf_counter()
        for i, d in enumerate(docs):  # a generator per sample: noise a pure function of (seed, epoch, index)
            python_noise(d, starts, ends, tokenizer.mask_token_id, np.random.default_rng([0, 0, i]))
        plain = len(docs) / (time.perf_counter() - start)
        print(f"| {length} | {ours:,.0f} | {target:,} | {vectorised:,.0f} | {plain:,.0f} | {vectorised / plain:.1f}x |")


if __name__ == "__main__":
    main()
