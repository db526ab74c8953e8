"""A small training run on synthetic batches through the real Trainer (used by resume/DDP tests).

    python -m tests.helpers.train_driver OUTPUT_DIR --max_steps 10 [--resume PATH] [--batch_size 8] \
        [--then OUTPUT_DIR2 FLAGS...]
Prints nothing special; the dllogger log in OUTPUT_DIR holds per-step loss and learning rate.
Under torchrun it runs data-parallel (gloo), each rank taking its share of every batch.
``--then`` starts another run after the first, in the same processes and process group (one launch, several
runs: each builds its model, optimizer and strategy afresh from the seed, as a new launch would); a later run
may resume from an earlier one's checkpoint. ``main(argv)`` runs them in the calling process (one process).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bart.modeling import BartForConditionalGeneration  # noqa: E402
from bart.optim import build_optimizer, build_scheduler  # noqa: E402
from bart.records.dllogger_compat import Logger  # noqa: E402
from bart.runtime import distributed as dist_utils  # noqa: E402
from bart.training.trainer import Trainer, strategy_for  # noqa: E402
from tests.helpers.synthetic import (  # noqa: E402
    SyntheticBatches,
    run_settings,  # noqa: E402
    tiny_config,
)

THEN = "--then"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("--max_steps", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--grad_accum", type=int, default=1)
    parser.add_argument("--num_batches", type=int, default=4)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--optimizer", default="lamb")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--half_allreduce", action="store_true")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--save_every", type=int, default=1)
    parser.add_argument("--dump_params", default=None)
    parser.add_argument("--strategy", default=None, help="ddp or fsdp (default: ddp under torchrun)")
    return parser


def _runs(argv: list[str]) -> list[list[str]]:
    runs = [[]]
    for arg in argv:
        if arg == THEN:
            runs.append([])
        else:
            runs[-1].append(arg)
    return runs


def train(args, env) -> None:
    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=args.dropout))
    torch.manual_seed(100 + env.rank)
    settings = run_settings(args.precision, output_dir=args.output_dir, max_steps=args.max_steps, log_freq=1,
                            gradient_accumulation_steps=args.grad_accum, save_checkpoint_steps=args.save_every,
                            keep_checkpoints=0, allreduce_post_accumulation_half_precision=args.half_allreduce,
                            distributed_strategy=args.strategy)
    strategy = strategy_for(settings, env.world_size, torch.device("cpu"), model)  # before the optimizer (FSDP shards)
    optimizer, clips = build_optimizer(model, args.optimizer, lr=3e-3, weight_decay=0.01, max_grad_norm=1.0)
    scheduler = build_scheduler(optimizer, "polynomial", 3, args.max_steps)
    data = SyntheticBatches(args.num_batches, args.batch_size // env.world_size, env.rank, env.world_size)
    logger = Logger(os.path.join(args.output_dir, "log.json"), rank=env.rank, stdout=False, append=bool(args.resume))
    trainer = Trainer(model, optimizer, scheduler, data, settings, clips_internally=clips, logger=logger,
                      strategy=strategy, progress_bar=False)
    if args.resume:
        trainer.resume(args.resume)
    trainer.fit()
    params = trainer.model_file_state() if args.dump_params else None  # as files hold it; collective under FSDP
    if args.dump_params and env.local_rank == 0:  # one file per node
        torch.save({k: v.detach().clone() for k, v in params.items()}, args.dump_params)
    logger.close()


def main(argv: list[str] | None = None) -> None:
    runs = [_parser().parse_args(run) for run in _runs(sys.argv[1:] if argv is None else argv)]
    env = dist_utils.init_distributed()
    for args in runs:
        train(args, env)
    dist_utils.cleanup()


if __name__ == "__main__":
    main()
