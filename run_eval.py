#!/usr/bin/env python3
"""Generate summaries (or translations) for a data split, score them, and report latency/throughput.

    python run_eval.py MODEL_PATH CONFIG_PATH DATA_DIR SAVE_PATH [--type_path test] [--bs 8] ...

MODEL_PATH: a fine-tuning or pretraining checkpoint (.ckpt) or a Hugging Face folder. Outputs in
SAVE_PATH: {type_path}_generations.txt (one line per input, in input order), {type_path}_rouge.json
(or _bleu.json) and a dllogger log. Extra ``--key value`` pairs go to generate (an unknown key fails).
Run under torchrun to shard the work over several processes.
"""
import argparse
import datetime
import os

import torch

from bart.cli import run_main
from bart.evaluation import run_evaluation
from bart.generation.precision import DECODE_PRECISIONS, check_decode_precision, decodes_packed, prepare_for_decoding
from bart.hub import resolve_model_path
from bart.tokenization.vocab_check import require_vocab_size
from bart.training.checkpoint import resolve_weights
from bart.cli.reference_flags import add_reference_args, apply_reference_args, write_debug_references
from bart.modeling.modeling_bart import BartForConditionalGeneration
from bart.cli import builder
from bart.cli.args import (POSITIVE, ArgumentParser, count_or_all, add_architecture_args, add_dist_timeout_arg, add_generation_args, check_args, generate_option_pairs,
                               generation_kwargs)
from utils import distributed as dist_utils
from utils.precision import add_precision_args


def parse_args(argv=None):
    parser = ArgumentParser(prog=os.path.basename(__file__), description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_path", help="checkpoint (.ckpt) or Hugging Face folder")
    parser.add_argument("config_path", help="BART config.json the model was built with")
    parser.add_argument("data_dir", help="folder with {type_path}.source and .target")
    parser.add_argument("save_path", help="output folder")
    parser.add_argument("--type_path", default="test", help="split to evaluate (train, val, test)")
    parser.add_argument("--n_obs", type=count_or_all(1), default=None, help="only the first N examples (-1: all)")
    parser.add_argument("--num_return_sequences", type=POSITIVE, default=1)
    parser.add_argument("--max_source_length", type=POSITIVE, default=1024)
    parser.add_argument("--json-summary", "--json_summary", dest="json_summary", default=None,
                        help="dllogger log (default SAVE_PATH/dllogger.json)")
    parser.add_argument("--task", choices=("summarization", "translation"), default="summarization")
    parser.add_argument("--prefix", default="", help="text put in front of every source")
    parser.add_argument("--info", nargs="?", const=datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
                        default=None, help="a note stored in the metrics file (no value: the current date and time)")
    parser.add_argument("--seed", type=int, default=42, help="seeds torch before generating (sampling)")
    parser.add_argument("--dump-args", "--dump_args", dest="dump_args", action="store_true",
                        help="store the generation arguments in the metrics file")
    add_architecture_args(parser)
    add_dist_timeout_arg(parser)
    add_precision_args(parser, training=False)
    parser.add_argument("--decode_precision", choices=DECODE_PRECISIONS, default="fp32",
                        help="weights to decode with: fp32, a bf16 copy, int8 dynamically quantized linear layers (CPU); "
                             "see bart/generation/precision.py")
    parser.add_argument("--compile_generation", nargs="?", const="default", default=False,
                        choices=("default", "reduce-overhead"),
                        help="the decode step under torch.compile (no value: default mode; reduce-overhead: CUDA graphs)")
    add_generation_args(parser, batch_alias="--bs", max_length_alias="--max_target_length")
    add_reference_args(parser, "run_eval.py")
    parser.set_defaults(eval_batch_size=8, eval_max_gen_length=142)
    args, rest = parser.parse_known_args(argv)
    check_args(args, parser, argv)
    apply_reference_args(args, parser, "run_eval.py", argv)
    try:
        args.generate_kwargs = generate_option_pairs(rest)
    except ValueError as err:
        parser.error(str(err))
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    precision = args.precision  # the run's one Precision, made at parse time
    check_decode_precision(args.decode_precision, precision.name)  # against --bf16/--fp16
    env = dist_utils.init_distributed(timeout_minutes=args.dist_timeout, backend="gloo" if args.device == "cpu" else None,
                                      rendezvous_timeout_s=args.rendezvous_timeout)
    builder.lock_output_dir(args.save_path, env, flag="SAVE_PATH")  # one evaluation per folder
    if env.is_main:
        builder.record_start(args.save_path, env.world_size)  # SAVE_PATH/git_log.json: appended
    torch.manual_seed(args.seed + env.rank)  # do_sample draws from torch's generator
    precision.configure()
    config = builder.model_config(args, training=False)
    model_path = resolve_weights(resolve_model_path(args.model_path))  # a run's folder: its newest checkpoint
    tokenizer = builder.load_tokenizer(args, model_path)  # the model's own; before the weights are loaded
    # the architecture from the checkpoint (its config, else its tensors); an explicit --pre_ln must agree
    model = BartForConditionalGeneration.from_pretrained(model_path, config=config, explicit={"pre_ln": args.pre_ln})
    builder.check_lengths(args, model.config, ("max_source_length", "eval_max_gen_length"))
    device = builder.device_for(env) if args.device in (None, "cuda") else torch.device(args.device)
    check_decode_precision(args.decode_precision, device=device)  # int8 is CPU's
    model = model.to(device).eval()
    model = prepare_for_decoding(model, args.decode_precision,  # on CPU: packed linear layers, as decodes_packed says
                                 packed=decodes_packed(args.compile_generation, precision.autocast_dtype is not None))
    gen_kwargs = {**generation_kwargs(args, args.eval_max_gen_length), **args.generate_kwargs,
                  "num_return_sequences": args.num_return_sequences, "compile_generation": args.compile_generation}
    require_vocab_size(tokenizer, model.config, config_name=args.config_path)
    result = run_evaluation(model, tokenizer, args, gen_kwargs, precision, is_main=env.is_main)
    if args.debug and env.is_main:
        write_debug_references(args)
    dist_utils.cleanup()
    return result


def console_main() -> None:
    """The ``bart-run-eval`` console script (pyproject.toml): ``python run_eval.py``."""
    run_main(main, "run_eval.py")


if __name__ == "__main__":
    console_main()
