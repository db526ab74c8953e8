"""Training step (forward + backward, fp32) time of this project's model vs transformers' BART
(attn_implementation="sdpa") on the same weights and batch.

    python benchmarks/bench_model.py [--config configs/config_base.json] [--batch 8] [--source 512] [--target 128]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="configs/config_base.json")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--source", type=int, default=512)
    parser.add_argument("--target", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="blocks per model")
    parser.add_argument("--block", type=int, default=2, help="timed steps per block")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    values = dict(json.load(open(args.config)), dropout=0.0)
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(
        **{k: v for k, v in values.items() if k not in ("pre_ln", "dtype")}, attn_implementation="sdpa"))
    ours = BartForConditionalGeneration(BartConfig(**values))
    ours.load_state_dict(hf.state_dict())
    hf, ours = hf.to(args.device).train(), ours.to(args.device).train()
    ids = torch.randint(4, 50000, (args.batch, args.source), device=args.device)
    labels = torch.randint(4, 50000, (args.batch, args.target), device=args.device)
    decoder_input_ids = torch.cat([torch.full_like(labels[:, :1], 2), labels[:, :-1]], 1)

    def step(model):
        if args.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model(input_ids=ids, decoder_input_ids=decoder_input_ids, labels=labels).loss.backward()
        if args.device == "cuda":
            torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    # Training runs one model step after step, so each model is timed in blocks of consecutive steps
    # (the first step of a block, which re-touches memory the other model used, is not counted);
    # blocks alternate, so drifts of the machine hit both alike.
    times = {"ours": [], "hf": []}
    for _ in range(args.repeats):
        for name, model in (("ours", ours), ("hf", hf)):
            step(model)
            times[name].extend(step(model) for _ in range(args.block))
    t_ours, t_hf = statistics.median(times["ours"]), statistics.median(times["hf"])
    print(f"\ntraining step (fwd+bwd, fp32), {args.device}, threads {args.threads}, {os.path.basename(args.config)}, "
          f"batch {args.batch} x {args.source}/{args.target}")
    print(f"median of {len(times['ours'])} steps each\n| implementation | median s/step | ratio |\n|---|---|---|")
    print(f"| transformers {transformers.__version__} (sdpa) | {t_hf:.3f} | 1.00x |")
    print(f"| this project | {t_ours:.3f} | {t_hf / t_ours:.2f}x |")


if __name__ == "__main__":
    main()
