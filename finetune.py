#!/usr/bin/env python3
"""Fine-tune BART for summarization (or translation) on {train,val,test}.source/.target files."""
import argparse
import os
import json

import torch

from bart.data.summarization import build_finetuning_loader, read_split
from bart.cli import run_main
from bart.evaluation import predict_split
from bart.hub import resolve_model_path
from bart.tokenization.vocab_check import require_vocab_size
from bart.cli import builder
from bart.cli.args import ArgumentParser, add_shared_args, check_args, generation_kwargs
from bart.training.checkpoint import resolve_weights, write_final_weights
from bart.cli.reference_flags import (add_reference_args, apply_reference_args, resolve_epochs,
                                           validate_before_training, weights_summary)
from bart.training.validation import Validation
from utils import distributed as dist_utils


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(prog=os.path.basename(__file__), description=__doc__)
    add_shared_args(parser)
    parser.add_argument("--model_name_or_path", dest="init_checkpoint_alias", default=None,
                        help="starting weights: a .ckpt, a folder holding one, or a Hugging Face folder "
                             "(same as --init_checkpoint)")
    parser.add_argument("--from_scratch", action="store_true", help="start from random weights (no checkpoint)")
    add_reference_args(parser, "finetune.py")
    parser.set_defaults(max_target_length=56, lr_scheduler="linear")
    args = parser.parse_args(argv)
    check_args(args, parser, argv)
    apply_reference_args(args, parser, "finetune.py", argv)
    args.init_checkpoint = args.init_checkpoint or args.init_checkpoint_alias
    if not args.init_checkpoint and not args.from_scratch and not args.resume_from_checkpoint:
        parser.error("give the starting weights (--init_checkpoint / --model_name_or_path), or --from_scratch")
    args.val_metric = args.val_metric or ("bleu" if args.task == "translation" else "rouge2")
    if args.early_stopping_patience and (args.n_val == 0 or not args.val_check_interval):
        parser.error("--early_stopping_patience needs validation during training: --val_check_interval N, --n_val not 0")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    env = builder.setup_distributed(args)
    builder.lock_output_dir(args.output_dir, env)  # one run per folder, before anything is written there
    builder.seed_everything(args.seed, env.rank)
    init = None if args.from_scratch or args.resume_from_checkpoint else \
        resolve_weights(resolve_model_path(args.init_checkpoint))
    tokenizer = builder.load_tokenizer(args, init)
    config = builder.model_config(args)
    builder.check_lengths(args, config, ("max_source_length", "max_target_length", "val_max_target_length",
                                         "test_max_target_length", "eval_max_gen_length"))
    require_vocab_size(tokenizer, config, config_name=args.config_path)
    model = builder.build_model(args, config, init_from=init)
    builder.freeze_parameters(model, encoder=args.freeze_encoder, embeddings=args.freeze_embeds)
    if args.weights_summary and env.is_main:
        print(weights_summary(model, args.weights_summary), flush=True)
    torch.manual_seed(args.seed + env.rank)
    if args.do_predict:
        read_split(args.data_dir, "test", args.n_test)  # a missing or empty test split fails now, not after training
    train = build_finetuning_loader(args.data_dir, tokenizer, args.max_source_length, args.max_target_length,
                                    args.train_batch_size, env.world_size, env.rank, args.seed, args.n_train,
                                    args.sortish_sampler, args.max_tokens_per_batch, args.num_workers)
    builder.check_global_batch(args, train, env.world_size)
    resolve_epochs(args, len(train.sampler))  # --max_epochs, fractional --val_check_interval: updates
    gen_kwargs = generation_kwargs(args, args.eval_max_gen_length or args.val_max_target_length)
    batch_size = args.eval_batch_size or 8
    validation = None if args.n_val == 0 else Validation(
        args.data_dir, tokenizer, args.task, args.val_metric, args.n_val, args.max_source_length,
        args.max_target_length, batch_size, gen_kwargs, args.output_dir, args.save_top_k,
        args.early_stopping_patience, min_steps=args.min_steps)
    if validation is not None and args.resume_from_checkpoint and env.is_main:
        validation.best.restore()  # the top-k of the interrupted run goes on
    if env.is_main:
        builder.save_run_files(args, tokenizer, config, env.world_size)
    trainer = builder.build_trainer(args, model, train, env, total_steps=args.max_steps, eval_hook=validation,
                                    final_checkpoint_name="_epoch{epoch}_step{step}.ckpt",
                                    label_smoothing=args.label_smoothing)
    if validation is not None and validate_before_training(args) and trainer.step == 0:
        trainer.logger.log(step=trainer.global_step, data={f"val_{k}": v for k, v in validation(trainer).items()})
    summary = trainer.fit() if args.do_train else {}
    if args.do_train:
        weights = trainer.model_file_state()  # collective under FSDP
        if env.is_main:
            summary["final_weights"] = write_final_weights(args.output_dir, weights)
    if args.do_predict:
        test_kwargs = dict(gen_kwargs, max_length=args.test_max_target_length or gen_kwargs.get("max_length")
                           or model.config.max_length)
        with trainer.strategy.whole_model(model) as whole:  # collective; FSDP: the gathered weights
            summary["test"] = predict_split(whole, tokenizer, args.data_dir, "test", args.output_dir, args.task,
                                            batch_size, args.max_source_length, test_kwargs, args.n_test, args.precision)
    if validation is not None:
        summary["validation"] = validation.history
    if env.is_main:
        print(json.dumps({k: v for k, v in summary.items() if k != "validation"}, default=str))
    dist_utils.cleanup()
    return summary


def console_main() -> None:
    """The ``bart-finetune`` console script (pyproject.toml): ``python finetune.py``."""
    run_main(main, "finetune.py")


if __name__ == "__main__":
    console_main()
