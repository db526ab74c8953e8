"""transformers' spellings of this recipe's settings: what a user of ``run_summarization.py`` (its
``Seq2SeqTrainingArguments``, ``DataTrainingArguments`` and ``ModelArguments``) types out of habit.

Where the meaning is this recipe's, the spelling is a hidden alias of the field's own flag (:data:`ALIASES`: the
same destination, type and choices; ``--help-all`` shows the recipe's spelling, docs/REFERENCE_FLAGS.md both).
Where it is not, :data:`ANSWERS` gives the equivalent in one line (argparse's error, exit 2), or translates
the values that have one (``--report_to none`` is ``--no_tensorboard``).

    add_peer_spellings(parser, "finetune.py")            # after the script's own flags (bart.cli.parsing)
    apply_peer_spellings(namespace, parser, argv)         # the answers, before anything is built
"""
from __future__ import annotations

import argparse

from bart.cli.args import (  # the scripts' names: one home
    EVAL,
    FINETUNE,
    TRAINING,
)

# (transformers' spelling, this recipe's field, the scripts that take it): the same meaning, the same values
ALIASES = (
    ("--per_device_train_batch_size", "train_batch_size", TRAINING),
    ("--per_device_eval_batch_size", "eval_batch_size", (FINETUNE, EVAL)),
    ("--max_train_samples", "n_train", (FINETUNE,)),
    ("--max_eval_samples", "n_val", (FINETUNE,)),
    ("--max_predict_samples", "n_test", (FINETUNE,)),
    ("--lr_scheduler_type", "lr_scheduler", TRAINING),
    ("--warmup_ratio", "warmup_steps", TRAINING),  # a fraction of the updates: --warmup_steps 0.1 (transformers 5)
    ("--num_train_epochs", "max_epochs", (FINETUNE,)),
    ("--save_total_limit", "keep_checkpoints", TRAINING),
    ("--save_steps", "save_checkpoint_steps", TRAINING),
    ("--logging_steps", "log_freq", TRAINING),
    ("--eval_steps", "val_check_interval", TRAINING),
    ("--generation_num_beams", "eval_beams", (FINETUNE,)),
    ("--generation_max_length", "eval_max_gen_length", (FINETUNE,)),
    ("--metric_for_best_model", "val_metric", (FINETUNE,)),  # eval_rougeL is rougeL (the field's own type)
    ("--hub_model_id", "push_to_hub", (FINETUNE,)),  # transformers' repository name (its --push_to_hub is a switch)
)


def _fraction(text: str) -> float:
    """--warmup_ratio: a fraction of the run's updates in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction of the updates such as 0.1, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"a fraction of the updates must be in [0, 1), got {text}")
    return value


def _whole_epochs(text: str) -> int:
    """--num_train_epochs: transformers takes a float (3.0); the recipe counts whole epochs."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of epochs, got {text!r}") from None
    if value != int(value) or value < 1:
        raise argparse.ArgumentTypeError(f"whole epochs of 1 or more are counted here (--max_epochs), got {text}; "
                                         f"for part of an epoch give --max_steps") from None
    return int(value)


_OWN_TYPES = {"--warmup_ratio": _fraction, "--num_train_epochs": _whole_epochs}


def add_peer_spellings(parser: argparse.ArgumentParser, script: str) -> None:
    """Each alias of ``script`` as a hidden action with the field's destination, type and choices (its default is
    the field's, so the record reads the same whichever spelling was typed)."""
    actions = {}
    for action in parser._actions:
        actions.setdefault(action.dest, action)
    for option, dest, scripts in ALIASES:
        own = actions.get(dest)
        if script not in scripts or own is None or option in parser._option_string_actions:
            continue
        if isinstance(own, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            parser.add_argument(option, dest=dest, action=type(own), default=own.default, help=argparse.SUPPRESS)
            continue
        parser.add_argument(option, dest=dest, type=_OWN_TYPES.get(option, own.type), choices=own.choices,
                            nargs=own.nargs, default=own.default, metavar=own.metavar, help=argparse.SUPPRESS)
    if script in TRAINING:
        parser.add_argument("--report_to", nargs="+", default=None, metavar="TARGET", help=argparse.SUPPRESS,
                            choices=("all", "none", "tensorboard", "wandb"))


def apply_peer_spellings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--report_to``: TensorBoard only where named (tensorboard, all; none is --no_tensorboard); wandb (or all)
    needs the project's name, which transformers takes from the environment and this recipe from --wandb_project."""
    targets = getattr(args, "report_to", None)
    if not targets:
        return
    if "none" in targets and len(targets) > 1:
        parser.error(f"--report_to {' '.join(targets)}: none reports nowhere; give it alone")
    if not {"tensorboard", "all"} & set(targets):  # transformers reports only to the targets named
        args.no_tensorboard = True
    if ("wandb" in targets or "all" in targets) and not args.wandb_project:
        parser.error(f"--report_to {' '.join(targets)}: W&B needs its project here: add --wandb_project NAME "
                     f"(TensorBoard events are written by default; --no_tensorboard turns them off)")
