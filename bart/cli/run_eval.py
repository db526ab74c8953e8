#!/usr/bin/env python3
"""Generate summaries (or translations) for a data split, score them, and report latency/throughput.

    python run_eval.py MODEL_PATH CONFIG_PATH DATA_DIR SAVE_PATH [--type_path test] [--bs 8] ...

MODEL_PATH: a fine-tuning or pretraining checkpoint (.ckpt) or a Hugging Face folder. Outputs in
SAVE_PATH: {type_path}_generations.txt (one line per input, in input order), {type_path}_rouge.json
(or _bleu.json) and a dllogger log. Extra ``--key value`` pairs go to generate (an unknown key fails).
Run under torchrun to shard the work over several processes.
"""
import torch

from bart.cli import start
from bart.cli.exits import run_main
from bart.cli.parsing import fit_lengths, parse_command_line
from bart.cli.reference_flags import write_debug_references
from bart.cli.settings import EVAL, Settings, generation_kwargs
from bart.data.summarization import read_split
from bart.evaluation import refuse_earlier_evaluation, run_evaluation
from bart.generation import check_generate_options
from bart.generation.precision import for_decoding
from bart.hub import resolve_model_path
from bart.modeling.modeling_bart import BartForConditionalGeneration
from bart.modeling.weights import resolve_weights
from bart.runtime import distributed as dist_utils
from bart.tokenization.vocab_check import require_vocab_size


def parse_args(argv=None) -> Settings:
    return parse_command_line(EVAL, argv, __doc__)


def main(argv=None) -> dict:
    args = start.begin_run(parse_args(argv), "CONFIG_PATH")  # a shipped config's name: its file
    precision = args.precision  # the run's one Precision, made at parse time (--decode_precision checked with it)
    env = dist_utils.init_distributed(timeout_minutes=args.distributed.dist_timeout,
                                      backend="gloo" if args.evaluation.device == "cpu" else None,
                                      rendezvous_timeout_s=args.distributed.rendezvous_timeout,
                                      heartbeat_timeout_s=args.distributed.heartbeat_timeout)
    # one evaluation per folder; an earlier one's files are replaced only with --overwrite
    start.lock_output_dir(args.evaluation.save_path, env, flag="SAVE_PATH",
                          check=lambda: refuse_earlier_evaluation(args))
    # a missing or empty split: before anything is loaded
    split = read_split(args.data.data_dir, args.evaluation.type_path, args.evaluation.n_obs)
    torch.manual_seed(args.randomness.seed + env.rank)  # do_sample draws from torch's generator
    precision.configure()
    config = start.model_config(args, training=False)
    # a run's folder: its newest checkpoint
    model_path = resolve_weights(resolve_model_path(args.evaluation.model_path, args.model.model_revision))
    tokenizer = start.tokenizer_for(args, [model_path])  # the model's own; before the weights are loaded
    # the architecture from the checkpoint (its config, else its tensors); an explicit --pre_ln must agree
    model = BartForConditionalGeneration.from_pretrained(model_path, config=config,
                                                         explicit={"pre_ln": args.model.pre_ln})
    args = fit_lengths(args, model.config.max_position_embeddings, ("max_source_length", "eval_max_gen_length"),
                       args.model.config_path)
    device = start.device_for(env) if args.evaluation.device in (None, "cuda") else torch.device(args.evaluation.device)
    model = for_decoding(model.to(device).eval(), args.evaluation.decode_precision, args.evaluation.compile_generation,
                         autocast=precision.autocast_dtype is not None)  # int8 on CPU only; CPU: packed layers
    gen_kwargs = {**generation_kwargs(args, args.generation.eval_max_gen_length), **args.evaluation.generate_kwargs,
                  "num_return_sequences": args.evaluation.num_return_sequences,
                  "compile_generation": args.evaluation.compile_generation}
    require_vocab_size(tokenizer, model.config, config_name=args.model.config_path)
    check_generate_options(model, gen_kwargs)  # an unknown or bad --KEY VALUE: before anything is recorded
    if env.is_main:  # SAVE_PATH/git_log.json, appended once the inputs are known usable (nothing written before)
        start.record_start(args.evaluation.save_path, env.world_size)
    result = run_evaluation(model, tokenizer, args, gen_kwargs, precision, is_main=env.is_main, split=split)
    if args.evaluation.debug and env.is_main:
        write_debug_references(args)
    dist_utils.cleanup()
    return result


def console_main() -> None:
    """The ``bart-run-eval`` console script (pyproject.toml): ``python run_eval.py``."""
    run_main(main, "run_eval.py")


if __name__ == "__main__":
    console_main()
