#!/usr/bin/env python3
"""Profile of the decode steps of beam search (the encoder excluded): the top operators and their share.

    python benchmarks/profile_decode_step.py [--batch 8] [--beams 4] [--source_len 512] [--new_tokens 16]
        [--compile_generation default] [--decode_precision fp32|bf16|int8] [--packed] [--threads 2]

bart-base shapes (configs/config_base.json), random weights, random source ids; no_repeat_ngram_size 3,
``max_new_tokens`` forced by min_length (every step runs). A first untimed call warms up (and compiles);
the profiled call reports self CPU time per operator over the decode loop only, and the time per step.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import bart.generation as generation  # noqa: E402
from bart.configuration import BartConfig  # noqa: E402
from bart.generation.precision import DECODE_PRECISIONS, prepare_for_decoding  # noqa: E402
from bart.modeling.modeling_bart import BartForConditionalGeneration  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--source_len", type=int, default=512)
    parser.add_argument("--new_tokens", type=int, default=16)
    parser.add_argument("--compile_generation", default="false", choices=("false", "default", "reduce-overhead"))
    parser.add_argument("--decode_precision", default="fp32", choices=DECODE_PRECISIONS)
    parser.add_argument("--packed", action="store_true", help="fp32 with oneDNN-packed linear layers (run_eval's CPU default)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = BartConfig.from_json_file(os.path.join(ROOT, "configs", "config_base.json"))
    model = prepare_for_decoding(BartForConditionalGeneration(config).eval(), args.decode_precision,
                                 packed=args.packed)
    ids = torch.randint(4, config.vocab_size, (args.batch, args.source_len))
    compile_generation = False if args.compile_generation == "false" else args.compile_generation
    settings = dict(num_beams=args.beams, no_repeat_ngram_size=3, max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens, length_penalty=1.0, early_stopping=True,
                    forced_bos_token_id=None, forced_eos_token_id=None, compile_generation=compile_generation)
    start = time.perf_counter()
    model.generate(ids, **settings)
    print(f"warm-up call (compiles with --compile_generation): {time.perf_counter() - start:.1f} s")

    searches = {"beam_search": generation.beam_search, "greedy_search": generation.greedy_search}
    timing = {}

    def profiled(name):
        def run(*a, **k):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                begin = time.perf_counter()
                out = searches[name](*a, **k)
                timing["loop"] = time.perf_counter() - begin
            timing["prof"] = prof
            return out
        return run

    generation.beam_search, generation.greedy_search = profiled("beam_search"), profiled("greedy_search")
    try:
        model.generate(ids, **settings)
    finally:
        generation.beam_search, generation.greedy_search = searches["beam_search"], searches["greedy_search"]
    events = timing["prof"].key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    print(f"decode loop: {timing['loop']:.2f} s for {args.new_tokens} steps = {1000 * timing['loop'] / args.new_tokens:.1f} "
          f"ms/step (batch {args.batch}, beams {args.beams}, source {args.source_len}, {args.decode_precision}{' packed' if args.packed else ''}, "
          f"compile_generation={args.compile_generation}, threads {args.threads}, load {os.getloadavg()[0]:.2f})")
    print("| operator | self CPU ms/step | share | calls/step |\n|---|---|---|---|")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:args.top]:
        print(f"| {e.key} | {e.self_cpu_time_total / 1000 / args.new_tokens:.2f} | "
              f"{100 * e.self_cpu_time_total / total:.1f}% | {e.count / args.new_tokens:.1f} |")
    print(f"operators per step: {sum(e.count for e in events) / args.new_tokens:.0f}")


if __name__ == "__main__":
    main()
