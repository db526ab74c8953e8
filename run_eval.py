#!/usr/bin/env python3
"""Generate summaries (or translations) for a data split, score them, and report latency/throughput.

    python run_eval.py MODEL_PATH CONFIG_PATH DATA_DIR SAVE_PATH [--type_path test] [--bs 8] ...

MODEL_PATH: a fine-tuning or pretraining checkpoint (.ckpt) or a Hugging Face folder. Outputs in
SAVE_PATH: {type_path}_generations.txt (one line per input, in input order), {type_path}_rouge.json
(or _bleu.json) and a dllogger log. Extra ``--key value`` pairs go to generate (an unknown key fails).
Run under torchrun to shard the work over several processes.
"""
import argparse
import json
import os
import sys
import time

import torch

from bart.configuration.configuration_bart import BartConfig
from bart.data.summarization import read_split
from bart.evaluation import generate_texts, latency_stats, score
from bart.modeling.modeling_bart import BartForConditionalGeneration
from bart.tokenization.tokenization_bart import BartTokenizer
from bart.tokenization.vocab_check import require_vocab_size
from utils import distributed as dist_utils
from utils.dllogger_compat import Logger


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_path", help="checkpoint (.ckpt) or Hugging Face folder")
    parser.add_argument("config_path", help="BART config.json the model was built with")
    parser.add_argument("data_dir", help="folder with {type_path}.source and .target")
    parser.add_argument("save_path", help="output folder")
    parser.add_argument("--type_path", default="test", help="split to evaluate (train, val, test)")
    parser.add_argument("--bs", type=int, default=8, help="batch size")
    parser.add_argument("--n_obs", type=int, default=None, help="only the first N examples")
    parser.add_argument("--num_return_sequences", type=int, default=1)
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True,
                        help="TF32 matmuls on Ampere+ for the fp32 parts (--no-tf32 for strict fp32)")
    parser.add_argument("--eval_max_gen_length", type=int, default=None, help="max generated length (config's)")
    parser.add_argument("--eval_beams", type=int, default=None, help="beams (config's)")
    parser.add_argument("--max_source_length", type=int, default=1024)
    parser.add_argument("--max_target_length", type=int, default=142,
                        help="longest summary in tokens (generation's max_length unless --eval_max_gen_length)")
    parser.add_argument("--pre_ln", action=argparse.BooleanOptionalAction, default=None,
                        help="Pre-LN model (default: the config's); must match the checkpoint")
    parser.add_argument("--json-summary", "--json_summary", dest="json_summary", default=None,
                        help="dllogger log (default SAVE_PATH/dllogger.json)")
    parser.add_argument("--task", choices=("summarization", "translation"), default="summarization")
    parser.add_argument("--prefix", default="", help="text put in front of every source")
    parser.add_argument("--info", default=None, help="a note stored in the metrics file")
    parser.add_argument("--dump-args", "--dump_args", dest="dump_args", action="store_true",
                        help="store the generation arguments in the metrics file")
    parser.add_argument("--tokenizer", default=os.environ.get("TOKENIZER", "facebook/bart-large"))
    args, rest = parser.parse_known_args(argv)
    if len(rest) % 2 or any(not k.startswith("--") for k in rest[::2]):
        parser.error(f"extra arguments must be --key value pairs for generate, got {rest}")
    args.generate_kwargs = {k[2:]: _value(v) for k, v in zip(rest[::2], rest[1::2])}
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    env = dist_utils.init_distributed()
    device = torch.device("cuda", env.local_rank % torch.cuda.device_count()) if torch.cuda.is_available() \
        else torch.device("cpu")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32
    config = BartConfig.from_json_file(args.config_path)
    if args.pre_ln is not None:
        config.pre_ln = args.pre_ln
    model = BartForConditionalGeneration.from_pretrained(args.model_path, config=config).to(device).eval()
    tokenizer = BartTokenizer.from_pretrained(args.tokenizer)
    require_vocab_size(tokenizer, config, args.tokenizer, args.config_path)
    sources, targets = read_split(args.data_dir, args.type_path, args.n_obs)
    gen_kwargs = dict(args.generate_kwargs, num_return_sequences=args.num_return_sequences)
    if args.eval_beams is not None:
        gen_kwargs["num_beams"] = args.eval_beams
    gen_kwargs.setdefault("max_length", args.eval_max_gen_length or args.max_target_length)
    dtype = torch.float16 if args.fp16 else torch.bfloat16 if args.bf16 else None
    start = time.perf_counter()
    predictions, latencies = generate_texts(model, tokenizer, [args.prefix + s for s in sources], args.bs,
                                            args.max_source_length, gen_kwargs, dtype)
    elapsed = time.perf_counter() - start
    all_latencies = [x for part in dist_utils.all_gather_objects(latencies) for x in part]
    result = {}
    if env.is_main:
        os.makedirs(args.save_path, exist_ok=True)
        with open(os.path.join(args.save_path, f"{args.type_path}_generations.txt"), "w", encoding="utf-8") as f:
            f.writelines(p.replace("\n", " ") + "\n" for p in predictions)
        result = score(args.task, predictions, targets)
        stats = latency_stats(all_latencies, len(sources), elapsed)
        result.update(n_obs=len(sources), runtime_s=round(elapsed, 4), seconds_per_sample=round(elapsed / len(sources), 6))
        if args.info:
            result["info"] = args.info
        if args.dump_args:
            result["generate_kwargs"] = gen_kwargs
        name = "bleu" if args.task == "translation" else "rouge"
        with open(os.path.join(args.save_path, f"{args.type_path}_{name}.json"), "w") as f:
            json.dump(result, f, indent=2)
        logger = Logger(args.json_summary or os.path.join(args.save_path, "dllogger.json"))
        logger.log(step=(), data={**{k: v for k, v in result.items() if isinstance(v, (int, float))}, **stats})
        logger.close()
        print(json.dumps(result, indent=2), file=sys.stderr)
    dist_utils.cleanup()
    return result


if __name__ == "__main__":
    main()
