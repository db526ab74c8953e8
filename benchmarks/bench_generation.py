"""Beam-search speed: this project's generate vs transformers' generate, same weights and inputs.

bart-base geometry (configs/config_base.json) with random weights, beams 4, batch 8, 512-token
sources, up to 128 new tokens, no-repeat 3. EOS is suppressed until the last step (min_length) so
both sides decode the full length. The outputs are checked to be identical before timing counts.

    python benchmarks/bench_generation.py [--threads 2] [--repeats 3] [--device cpu]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bart.configuration import BartConfig  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/config_base.json")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--source_length", type=int, default=512)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    values = json.load(open(args.config))
    values.update(dropout=0.0, forced_bos_token_id=None, forced_eos_token_id=None)
    hf_values = {k: v for k, v in values.items() if k not in ("pre_ln", "dtype")}
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(**hf_values, attn_implementation="sdpa"))
    ours = BartForConditionalGeneration(BartConfig(**values))
    ours.load_state_dict(hf.state_dict())
    hf, ours = hf.to(args.device).eval(), ours.to(args.device).eval()
    ids = torch.randint(4, values["vocab_size"] - 1, (args.batch_size, args.source_length), device=args.device)
    ids[:, 0], ids[:, -1] = 0, 2
    settings = dict(num_beams=args.num_beams, max_length=args.new_tokens + 1, min_length=args.new_tokens,
                    no_repeat_ngram_size=3, length_penalty=1.0, early_stopping=True)

    def run(model):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), **settings)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return out, time.perf_counter() - start

    ours_out, _ = run(ours)  # warm-up
    hf_out, _ = run(hf)
    if not torch.equal(ours_out.cpu(), hf_out.cpu()):
        raise SystemExit("outputs differ: the comparison would be meaningless")
    ours_times, hf_times = [], []
    for _ in range(args.repeats):
        ours_times.append(run(ours)[1])
        hf_times.append(run(hf)[1])
    ours_s, hf_s = statistics.median(ours_times), statistics.median(hf_times)
    print(f"\nbeam search, {args.device}, threads {args.threads}: batch {args.batch_size}, beams {args.num_beams}, "
          f"source {args.source_length}, {ours_out.shape[1] - 1} new tokens, no-repeat 3, identical outputs: yes")
    print("| implementation | median s | summaries/s | speedup |")
    print("|---|---|---|---|")
    print(f"| transformers {transformers.__version__} generate | {hf_s:.2f} | {args.batch_size / hf_s:.2f} | 1.00x |")
    print(f"| this project | {ours_s:.2f} | {args.batch_size / ours_s:.2f} | {hf_s / ours_s:.2f}x |")


if __name__ == "__main__":
    main()
