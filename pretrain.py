#!/usr/bin/env python3
"""BART denoising pretraining on LDDL Parquet shards (see README: Pre-training)."""
import argparse
import os

import torch

from bart.data.noise import add_noise_args, noise_config_from_args
from bart.cli import run_main
from bart.hub import resolve_model_path
from bart.tokenization.vocab_check import require_vocab_size
from bart.cli import builder
from bart.cli.args import FINETUNE_ONLY, ArgumentParser, add_shared_args, check_args, reject_unused
from bart.cli.reference_flags import add_reference_args, apply_reference_args
from bart.training.validation import PretrainingValidation
from utils import distributed as dist_utils


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(prog=os.path.basename(__file__), description=__doc__)
    add_shared_args(parser)
    add_noise_args(parser)
    add_reference_args(parser, "pretrain.py")
    parser.set_defaults(lr_scheduler="polynomial", max_source_length=128, task="pretraining")
    args = parser.parse_args(argv)
    check_args(args, parser, argv)
    apply_reference_args(args, parser, "pretrain.py", argv)
    reject_unused(args, parser, FINETUNE_ONLY, "pretrain.py", "fine-tuning (finetune.py)")
    if args.max_target_length not in (None, args.max_source_length):
        parser.error("pretraining reconstructs the source: --max_target_length must equal --max_source_length")
    if args.val_check_interval and not args.n_val:
        parser.error("--val_check_interval needs held-out rows: add --n_val N")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    # LDDL imports transformers (seconds): after the flags are parsed, so --help and flag mistakes answer at once
    from bart.data.pretraining_dataset import build_pretraining_loader

    env = builder.setup_distributed(args)
    builder.lock_output_dir(args.output_dir, env)  # one run per folder, before anything is written there
    builder.seed_everything(args.seed, env.rank)
    init = None if args.resume_from_checkpoint or not args.init_checkpoint else resolve_model_path(args.init_checkpoint)
    tokenizer = builder.load_tokenizer(args, init)
    config = builder.model_config(args)
    builder.check_lengths(args, config, ("max_source_length",))
    require_vocab_size(tokenizer, config, config_name=args.config_path)
    model = builder.build_model(args, config, init_from=init)
    builder.freeze_parameters(model, encoder=args.freeze_encoder, embeddings=args.freeze_embeds)
    torch.manual_seed(args.seed + env.rank)  # per-rank dropout streams; the weights are already equal
    loader = build_pretraining_loader(args.data_dir, tokenizer, args.train_batch_size, args.max_source_length,
                                      noise_config_from_args(args), args.seed, args.num_workers, env.local_rank,
                                      n_val=args.n_val or 0, shuffle_buffer_size=args.buffer_size or 16384)
    builder.check_global_batch(args, loader, env.world_size)
    validation = PretrainingValidation.from_loader(loader, args.eval_batch_size or args.train_batch_size)
    if env.is_main:
        builder.save_run_files(args, tokenizer, config, env.world_size)
    trainer = builder.build_trainer(args, model, loader, env, total_steps=args.max_steps, eval_hook=validation,
                                    label_smoothing=args.label_smoothing)
    summary = trainer.fit()
    if env.is_main:
        print(f"pretraining done: {summary}")
    dist_utils.cleanup()
    return summary


def console_main() -> None:
    """The ``bart-pretrain`` console script (pyproject.toml): ``python pretrain.py``."""
    run_main(main, "pretrain.py")


if __name__ == "__main__":
    console_main()
