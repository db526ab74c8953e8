#!/usr/bin/env python3
"""BART denoising pretraining on LDDL Parquet shards (docs/TRAINING.md: Pretraining)."""
# The flow: Settings -> the tokenizer and model -> the LDDL loader with BART's noise (and the held-out rows of
# --n_val) -> PretrainingValidation -> Trainer.fit().
import torch

from bart.cli import builder
from bart.cli.exits import run_main
from bart.cli.parsing import parse_command_line
from bart.cli.settings import PRETRAIN, Settings
from bart.hub import resolve_model_path
from bart.runtime import distributed as dist_utils
from bart.training.validation import PretrainingValidation


def parse_args(argv=None) -> Settings:
    return parse_command_line(PRETRAIN, argv, __doc__)


def main(argv=None) -> dict:
    args = parse_args(argv)
    args, env = builder.start_run(args)
    weights = args.checkpoints.init_checkpoint
    init = None if args.checkpoints.resume_from_checkpoint or not weights else resolve_model_path(
        weights, args.model.model_revision)
    args, tokenizer, model = builder.build_model_and_tokenizer(args, init, ("max_source_length",))
    torch.manual_seed(args.randomness.seed + env.rank)  # per-rank dropout streams; the weights are already equal
    loader = builder.pretraining_loader(args, tokenizer, env)
    builder.check_global_batch(args, loader, env.world_size)
    validation = PretrainingValidation.from_loader(loader,
                                                   args.generation.eval_batch_size or args.data.train_batch_size)
    trainer = builder.build_trainer(args, model, loader, env, total_steps=args.schedule.max_steps, eval_hook=validation,
                                    tokenizer=tokenizer, loader_for=lambda s: builder.pretraining_loader(s, tokenizer, env))
    summary = trainer.fit()
    if env.is_main:
        print(f"pretraining done: {summary}")
    trainer.close()  # the DDP wrapper and its Reducer go before the process group (cleanup)
    dist_utils.cleanup()
    return summary


def console_main() -> None:
    """The ``bart-pretrain`` console script (pyproject.toml): ``python pretrain.py``."""
    run_main(main, "pretrain.py")


if __name__ == "__main__":
    console_main()
