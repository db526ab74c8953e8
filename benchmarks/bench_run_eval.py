"""run_eval.py throughput against transformers' generate on the same weights and inputs.

A bart-base-sized model (configs/config_base.json) with random weights is saved as a checkpoint;
a split of English-looking sources of at least 512 tokens is written. This project's side is the
whole ``run_eval.main`` path (read split → tokenize → sort → generate → decode → write → ROUGE),
timed by its own ``runtime_s`` (tokenize + generate + decode). The peer tokenizes the same sources,
calls ``transformers.BartForConditionalGeneration.generate`` (sdpa) batch by batch with the same
settings and decodes. The generated texts must be identical, otherwise the run stops.

    python benchmarks/bench_run_eval.py [--examples 16] [--bs 8] [--threads 2]
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import run_eval  # noqa: E402
from bart.tokenization.build_tokenizer import build_tokenizer_folder  # noqa: E402
from bart.tokenization.tokenization_bart import BartTokenizer  # noqa: E402


def english_like_sources(tokenizer, count: int, words: int, seed: int) -> list[str]:
    """Sentences of random whole-word vocabulary entries (about one token per word)."""
    vocab = [t[1:] for t in tokenizer.get_vocab() if t.startswith("\u0120") and t[1:].isalpha() and t[1:].islower()]
    rng = random.Random(seed)
    sources = []
    for _ in range(count):
        sentences = []
        while sum(len(s.split()) for s in sentences) < words:
            sentence = " ".join(rng.choice(vocab) for _ in range(rng.randint(8, 20)))
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
        sources.append(" ".join(sentences))
    return sources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/config_base.json")
    parser.add_argument("--examples", type=int, default=16)
    parser.add_argument("--bs", type=int, default=8)
    parser.add_argument("--source_length", type=int, default=512)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    work = tempfile.mkdtemp(prefix="bench_run_eval_")
    tokenizer_dir = build_tokenizer_folder(os.path.join(work, "tokenizer"))
    tokenizer = BartTokenizer.from_pretrained(tokenizer_dir)
    values = json.load(open(os.path.join(ROOT, args.config)))
    # transformers' aliases (num_hidden_layers, ...) left out: 5.x reads a leftover one over encoder_layers
    hf_values = {k: v for k, v in values.items() if k not in ("pre_ln", "dtype", *transformers.BartConfig.attribute_map)}
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(**hf_values, attn_implementation="sdpa")).eval()
    checkpoint = os.path.join(work, "model.ckpt")
    torch.save({"model": hf.state_dict()}, checkpoint)
    data = os.path.join(work, "data")
    os.makedirs(data)
    sources = english_like_sources(tokenizer, args.examples, args.source_length + 64, seed=0)
    for side, lines in (("source", sources), ("target", ["a reference summary ."] * len(sources))):
        with open(os.path.join(data, f"test.{side}"), "w") as f:
            f.writelines(line + "\n" for line in lines)
    settings = dict(num_beams=args.num_beams, max_length=args.new_tokens + 1, min_length=0, no_repeat_ngram_size=3,
                    length_penalty=2.0, early_stopping=True, forced_bos_token_id=0, forced_eos_token_id=2)

    def ours():
        extra = [x for k, v in settings.items() if k not in ("num_beams", "max_length") for x in (f"--{k}", str(v))]
        result = run_eval.main([checkpoint, os.path.join(ROOT, args.config), data, os.path.join(work, "out"),
                                "--bs", str(args.bs), "--max_source_length", str(args.source_length),
                                "--eval_beams", str(args.num_beams), "--eval_max_gen_length", str(args.new_tokens + 1),
                                "--tokenizer", tokenizer_dir, *extra])
        with open(os.path.join(work, "out", "test_generations.txt")) as f:
            return f.read().splitlines(), result["runtime_s"]

    def peer():
        start = time.perf_counter()
        texts = []
        for i in range(0, len(sources), args.bs):
            enc = tokenizer(sources[i:i + args.bs], max_length=args.source_length, truncation=True, padding=True,
                            return_tensors="pt")
            with torch.no_grad():
                out = hf.generate(enc["input_ids"], attention_mask=enc["attention_mask"], **settings)
            texts += [t.strip() for t in tokenizer.batch_decode(out, skip_special_tokens=True,
                                                                clean_up_tokenization_spaces=False)]
        return texts, time.perf_counter() - start

    ours_texts, ours_s = ours()
    peer_texts, peer_s = peer()
    if ours_texts != peer_texts:
        raise SystemExit("generated texts differ: the comparison would be meaningless")
    lengths = [len(tokenizer(s, max_length=args.source_length, truncation=True)["input_ids"]) for s in sources]
    print(f"\nrun_eval, cpu threads {args.threads}: {args.examples} examples, batch {args.bs}, beams {args.num_beams}, "
          f"sources {min(lengths)}-{max(lengths)} tokens, up to {args.new_tokens} new tokens, identical texts: yes")
    print("| implementation | seconds | summaries/s | speedup |")
    print("|---|---|---|---|")
    print(f"| transformers {transformers.__version__} generate | {peer_s:.2f} | {args.examples / peer_s:.3f} | 1.00x |")
    print(f"| run_eval.py (this project) | {ours_s:.2f} | {args.examples / ours_s:.3f} | {peer_s / ours_s:.2f}x |")


if __name__ == "__main__":
    main()
