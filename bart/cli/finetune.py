#!/usr/bin/env python3
"""Fine-tune BART for summarization (or translation) on {train,val,test}.source/.target files."""
import json

import torch

from bart.cli import builder
from bart.cli.exits import run_main
from bart.cli.parsing import parse_command_line, resolve_epochs
from bart.cli.reference_flags import validate_before_training, weights_summary
from bart.cli.settings import FINETUNE, Settings, generation_kwargs
from bart.data.summarization import read_split
from bart.hub import check_can_push, resolve_model_path
from bart.modeling.weights import resolve_weights
from bart.runtime import distributed as dist_utils
from bart.training.checkpoint import save_final_weights

LENGTHS = ("max_source_length", "max_target_length", "val_max_target_length", "test_max_target_length",
           "eval_max_gen_length")


def parse_args(argv=None) -> Settings:
    return parse_command_line(FINETUNE, argv, __doc__)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.hub.push_to_hub:  # a valid repository id, a token: before anything is trained
        check_can_push(args.hub.push_to_hub)
    args, env = builder.start_run(args)
    args = builder.table_files_as_data_dir(args, env)  # --train_file ...: OUTPUT_DIR/data
    init = None if args.checkpoints.from_scratch or args.checkpoints.resume_from_checkpoint else \
        resolve_weights(resolve_model_path(args.checkpoints.init_checkpoint, args.model.model_revision))
    args, tokenizer, model = builder.build_model_and_tokenizer(args, init, LENGTHS)
    if args.logging.weights_summary and env.is_main:
        print(weights_summary(model, args.logging.weights_summary), flush=True)
    torch.manual_seed(args.randomness.seed + env.rank)
    if args.prediction.do_predict:  # a missing or empty test split fails now, not after training
        read_split(args.data.data_dir, "test", args.prediction.n_test)
    train = builder.finetuning_loader(args, tokenizer, env)
    builder.check_global_batch(args, train, env.world_size)
    args = resolve_epochs(args, len(train.sampler))  # --max_epochs, fractional --val_check_interval: updates
    gen_kwargs = generation_kwargs(args, args.generation.eval_max_gen_length or args.validation.val_max_target_length)
    validation = builder.finetuning_validation(args, tokenizer, gen_kwargs)
    trainer = builder.build_trainer(args, model, train, env, total_steps=args.schedule.max_steps, eval_hook=validation,
                                    tokenizer=tokenizer, loader_for=lambda s: builder.finetuning_loader(s, tokenizer, env),
                                    final_checkpoint_name="_epoch{epoch}_step{step}.ckpt", varying_lengths=True)
    if validation is not None:  # the interrupted run's top-k goes on; a validation at step 0 when asked for
        validation.begin(trainer, bool(args.checkpoints.resume_from_checkpoint), validate_before_training(args))
    summary = trainer.fit() if args.prediction.do_train else {}
    if args.prediction.do_train and (path := save_final_weights(args.checkpoints.output_dir, trainer)):
        summary["final_weights"] = path
    if args.prediction.do_predict:
        summary["test"] = builder.predict_test_split(args, trainer, model, tokenizer, gen_kwargs,
                                                     summary.get("final_weights"))
    if args.prediction.do_train and validation is not None:  # best_tfmr/, and the hub's copy
        summary.update(builder.hand_off_best(args, env))
    if validation is not None:
        summary["validation"] = validation.history
    if env.is_main:
        print(json.dumps({k: v for k, v in summary.items() if k != "validation"}, default=str))
    trainer.close()  # the DDP wrapper and its Reducer go before the process group (cleanup)
    dist_utils.cleanup()
    return summary


def console_main() -> None:
    """The ``bart-finetune`` console script (pyproject.toml): ``python finetune.py``."""
    run_main(main, "finetune.py")


if __name__ == "__main__":
    console_main()
