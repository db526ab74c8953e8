"""Command-line flags of the three entry points, as argument groups: one name, one default, one meaning.

:func:`build_parser` assembles a script's parser: pretrain.py and finetune.py take :func:`add_shared_args`
(every group), run_eval.py its positional arguments and the architecture, precision and generation groups;
each script then the reference recipe's flags (:mod:`bart.cli.reference_flags`). Old names from the
reference and the BERT recipe are aliases of the same destination (``--max_grad_norm`` =
``--gradient_clip_val``, ``--num_beams`` = ``--eval_beams``). Flags that only fine-tuning uses are
accepted by pretrain.py's parser (so reference command lines parse) but :func:`reject_unused` fails loudly
when one is set to anything but its default. The parsed flags become :class:`bart.cli.settings.Settings`.
To add a flag: put it in the group of its concept here, and its field in ``Settings``; one the trainer reads is
also a ``TrainerConfig`` field of the same name (``bart.cli.builder.trainer_config`` passes it).
"""
from __future__ import annotations

import argparse
import ast
import datetime
import json
import math
import os

from bart.cli.reference_flags import add_reference_args
from bart.configuration.shipped import names_help
from bart.data.noise import add_noise_args
from bart.evaluation import TASK_METRICS
from bart.generation.precision import DECODE_PRECISIONS
from bart.optim.schedulers import SCHEDULES
from bart.utils.affinity import add_affinity_arg
from bart.utils.checkpoint_io import atomic_write_text
from bart.utils.errors import UserError
from bart.utils.precision import Precision, add_precision_args

FINETUNE_ONLY = ("n_test", "n_train", "eval_beams", "val_metric", "save_top_k", "sortish_sampler",
                 "max_tokens_per_batch", "do_predict", "val_max_target_length", "test_max_target_length",
                 "eval_max_gen_length", "task", "early_stopping_patience", "do_train")


def _bool_or_path(value: str):
    """--resume_from_checkpoint: True (the newest checkpoint in --output_dir), "auto", or a path."""
    if value.lower() == "auto":
        return "auto"  # resolved at run start (bart.cli.builder.start_run); ./auto is a file
    return True if value.lower() in ("true", "1", "yes", "latest") else value


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error: ``script: error: message (see --help)``, exit code 2. The full
    usage text stays behind --help, so the line that names the flag is not buried under it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# -- value checks: a bad value is one argparse line naming the flag, the value and the range ---------
def int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    parse.__name__ = f"int>={low}"
    return parse


def float_in(low: float, high: float | None = None, low_open: bool = False, high_open: bool = True):
    """A finite float in [low, high) (``low_open``/``high_open`` choose the interval's ends)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        too_low = value <= low if low_open else value < low
        too_high = high is not None and (value >= high if high_open else value > high)
        if too_low or too_high:
            span = f"{'(' if low_open else '['}{low:g}, {'inf)' if high is None else f'{high:g}' + (')' if high_open else ']')}"
            raise argparse.ArgumentTypeError(f"must be in {span}, got {value:g}")
        return value
    parse.__name__ = "number"
    return parse


def count_or_all(low: int):
    """A number of examples, or -1 for all of them (the reference's convention): -1 parses as None."""
    def parse(text: str):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, or -1 for all, got {text!r}") from None
        if value == -1:
            return None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, or -1 for all, got {value}")
        return value
    parse.__name__ = f"int>={low}|-1"
    return parse


def updates_or_fraction(text: str):
    """``--val_check_interval``: a whole number of updates (0: only at the end), or a fraction in (0, 1]
    written with a decimal point: that fraction of an epoch of the training data (``1.0``: every epoch)."""
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of updates or a fraction of an epoch, got {text!r}") from None
    if isinstance(value, int) and value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 updates, got {value}")
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"a fraction of an epoch must be in (0, 1], got {text}")
    return value


updates_or_fraction.__name__ = "updates|fraction"
POSITIVE = int_at_least(1)
NON_NEGATIVE = int_at_least(0)
PROBABILITY = float_in(0.0, 1.0)                 # dropout, smoothing: [0, 1)
POSITIVE_FLOAT = float_in(0.0, None, low_open=True)
NON_NEGATIVE_FLOAT = float_in(0.0, None)


def add_generation_args(parser: argparse.ArgumentParser, batch_alias: str | None = None,
                        max_length_alias: str | None = None) -> None:
    """Generation in validation, prediction and evaluation (the same flags in every script; run_eval.py
    keeps the reference's ``--bs`` and ``--max_target_length`` as aliases)."""
    gen = parser.add_argument_group("generation")
    gen.add_argument("--eval_beams", "--num_beams", dest="eval_beams", type=NON_NEGATIVE, default=None,
                     help="beams (default: the model config's num_beams; 0: no beam search, i.e. greedy, as the "
                          "reference)")
    gen.add_argument("--eval_max_gen_length", *([max_length_alias] if max_length_alias else []),
                     dest="eval_max_gen_length", type=POSITIVE, default=None,
                     help="longest generated sequence in tokens")
    gen.add_argument("--eval_batch_size", *([batch_alias] if batch_alias else []), dest="eval_batch_size", type=POSITIVE,
                     default=None, help="sources per generation batch")


def _value(text: str):
    """A command-line value as Python: numbers, true/false/none, lists ("[[5, 6]]"), else the text."""
    lowered = text.strip().lower()
    if lowered in ("true", "false", "none"):
        return {"true": True, "false": False, "none": None}[lowered]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def generate_option_pairs(rest: list[str]) -> dict:
    """Extra ``--key value`` pairs of a command line as generate() options (numbers, booleans, None)."""
    if len(rest) % 2 or any(not k.startswith("--") for k in rest[::2]):
        raise ValueError(f"extra arguments must be --key value pairs for generate, got {rest}")
    return {k[2:]: _value(v) for k, v in zip(rest[::2], rest[1::2])}


def generation_kwargs(args: argparse.Namespace, max_length: int | None) -> dict:
    """The generate() options the flags set; ``max_length`` is the script's resolved length."""
    values = {"num_beams": args.eval_beams, "max_length": max_length}
    return {k: v for k, v in values.items() if v is not None}


def add_shared_args(parser: argparse.ArgumentParser) -> None:
    add_model_args(parser)
    add_data_args(parser)
    add_optimization_args(parser)
    add_precision_args(parser)
    add_distributed_args(parser)
    add_checkpoint_args(parser)
    add_generation_args(parser)
    add_finetuning_args(parser)


def add_architecture_args(group) -> None:
    """The flags every script that builds a model takes (run_eval.py too)."""
    group.add_argument("--pre_ln", action=argparse.BooleanOptionalAction, default=None,
                       help="Pre-LN (layer norm inside each residual branch, a final norm per stack); "
                            "--no-pre_ln for BART's post-LN. Default: the config file's pre_ln")
    group.add_argument("--tokenizer", default=None,
                       help="tokenizer folder or hub id (default: $TOKENIZER). With starting weights their own "
                            "tokenizer is used and a different one is refused; from scratch: else "
                            "$BART_DEFAULT_TOKENIZER, else facebook/bart-large (offline: python -m "
                            "bart.tokenization.build_tokenizer DIR)")
    group.add_argument("--allow_tokenizer_mismatch", action="store_true",
                       help="use --tokenizer / $TOKENIZER even where it differs from the tokenizer the starting "
                            "weights were trained with (their ids then mean other tokens)")


def add_model_args(parser: argparse.ArgumentParser) -> None:
    from bart.training.compilation import COMPILE_BACKENDS  # the training scripts' group (as STRATEGIES)
    model = parser.add_argument_group("model")
    model.add_argument("--config_path", required=True,
                       help=f"a shipped config's name ({names_help()}) or a BART config.json's path")
    add_architecture_args(model)
    model.add_argument("--dropout", type=PROBABILITY, default=None, help="dropout (default: the config's)")
    model.add_argument("--attention_dropout", type=PROBABILITY, default=None, help="attention dropout (default: the config's)")
    model.add_argument("--encoder_layerdrop", type=PROBABILITY, default=None, help="LayerDrop of encoder layers")
    model.add_argument("--decoder_layerdrop", type=PROBABILITY, default=None, help="LayerDrop of decoder layers")
    model.add_argument("--gradient_checkpointing", action="store_true", help="recompute activations in backward")
    model.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                       help="torch.compile the model for training (the log says when it compiles, how long it took, "
                            "and each recompile; a compile failure is one warning and the run goes on eager). "
                            "Default: on with CUDA, off on CPU (eager: compiling costs minutes a short CPU run does "
                            "not recover); --no-compile: eager")
    model.add_argument("--compile_backend", choices=COMPILE_BACKENDS, default="inductor",
                       help="--compile's backend: inductor (torch.compile's default: generated kernels), aot_eager "
                            "(the same graphs and graph breaks, run by eager kernels: a cheap check of what "
                            "inductor would compile)")
    model.add_argument("--fused_cross_entropy", action="store_true",
                       help="LM head and loss computed in token chunks: the (tokens x vocab) logits are never "
                            "stored (less memory for large batches; same loss and gradients)")


def add_data_args(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument("--data_dir", required=True, help="training data folder")
    data.add_argument("--max_source_length", type=POSITIVE, default=1024, help="encoder length in tokens")
    data.add_argument("--max_target_length", type=POSITIVE, default=None,
                      help="decoder length in tokens (pretraining: = max_source_length)")
    data.add_argument("--num_workers", type=NON_NEGATIVE, default=4, help="data loader worker processes")
    data.add_argument("--train_batch_size", type=POSITIVE, default=32, help="sequences per micro-batch per process")


def add_optimization_args(parser: argparse.ArgumentParser) -> None:
    optim = parser.add_argument_group("optimization")
    optim.add_argument("--learning_rate", type=NON_NEGATIVE_FLOAT, default=5e-5)
    optim.add_argument("--lamb", action="store_true", help="LAMB (multi-tensor; apex FusedLAMB if installed) "
                                                           "instead of AdamW")
    optim.add_argument("--use_nvlamb", action="store_true", help="LAMB trust ratio on every tensor (NVLAMB)")
    optim.add_argument("--weight_decay", type=NON_NEGATIVE_FLOAT, default=0.0, help="decoupled weight decay (not on biases/norms)")
    optim.add_argument("--adam_epsilon", type=POSITIVE_FLOAT, default=1e-8)
    optim.add_argument("--adam_betas", type=PROBABILITY, nargs=2, default=(0.9, 0.999))
    optim.add_argument("--gradient_clip_val", "--max_grad_norm", dest="gradient_clip_val", type=NON_NEGATIVE_FLOAT, default=1.0,
                       help="clip the global gradient norm to this (0: off)")
    optim.add_argument("--lr_scheduler", choices=SCHEDULES, default="linear")
    optim.add_argument("--warmup_steps", type=NON_NEGATIVE, default=0)
    optim.add_argument("--lr_end", type=NON_NEGATIVE_FLOAT, default=1e-7,
                       help="polynomial schedule: the learning rate it decays to (must not exceed --learning_rate)")
    optim.add_argument("--max_steps", type=POSITIVE, default=None,
                       help="optimizer updates in this run (required; finetune.py: or --max_epochs)")
    optim.add_argument("--gradient_accumulation_steps", type=POSITIVE, default=1)
    optim.add_argument("--max_consecutive_nonfinite", type=POSITIVE, default=5,
                       help="bf16/fp32: stop after this many consecutive NaN/inf losses")
    optim.add_argument("--min_loss_scale", type=POSITIVE_FLOAT, default=1e-4,
                       help="fp16: stop when the dynamic loss scale falls below this (every update overflowing)")


def add_dist_timeout_arg(group) -> None:
    """The flag every script that may run as several processes takes (run_eval.py too)."""
    group.add_argument("--dist_timeout", type=POSITIVE_FLOAT, default=10.0,
                       help="minutes a collective waits for the other ranks before the run stops naming the rank "
                            "(a hung or dead process); checkpoint writes and validation must fit in it")
    group.add_argument("--rendezvous_timeout", type=POSITIVE_FLOAT, default=600.0, metavar="SECONDS",
                       help="seconds the processes of a multi-process run wait for each other at start-up (and "
                            "after a torchrun --max_restarts restart) before it stops naming the ones missing")
    group.add_argument("--heartbeat_timeout", type=NON_NEGATIVE_FLOAT, default=60.0, metavar="SECONDS",
                       help="seconds without a heartbeat from a process (stopped, frozen, its machine gone) before "
                            "the job ends naming it; a busy process keeps beating (bart.utils.heartbeat); 0: off")


def add_distributed_args(parser: argparse.ArgumentParser) -> None:
    from bart.training.strategy import DEFAULT_STRATEGY, STRATEGIES  # the training scripts' group: run_eval.py loads
    # no training module
    notes = {name: [cls.summary] * bool(cls.summary) + ["the default"] * (name == DEFAULT_STRATEGY)
             for name, cls in STRATEGIES.items()}
    kinds = [f"{name} ({', '.join(said)})" if said else name for name, said in notes.items()]
    dist = parser.add_argument_group("distributed")
    dist.add_argument("--distributed_strategy", choices=STRATEGIES, default=None,
                      help=f"how several processes share the model: {', '.join(kinds)}")
    dist.add_argument("--allreduce_post_accumulation_half_precision", "--allreduce_post_accumulation_fp16",
                      dest="allreduce_post_accumulation_half_precision", action="store_true",
                      help="all-reduce gradients in bf16/fp16 once per update (fp32 parameters)")
    add_dist_timeout_arg(dist)
    add_affinity_arg(dist)
    dist.add_argument("--local_rank", "--local-rank", type=int, default=None,
                      help="set by old launchers; torchrun's LOCAL_RANK is used")


def add_checkpoint_args(parser: argparse.ArgumentParser) -> None:
    from bart.training.checkpoint import ALLOWABLE_CHANGES  # the training scripts' group (as STRATEGIES)

    ckpt = parser.add_argument_group("checkpoints and logging")
    ckpt.add_argument("--output_dir", default="results", help="checkpoints, logs and run_config.json go here")
    ckpt.add_argument("--resume_from_checkpoint", type=_bool_or_path, default=None,
                      help="True: the newest training checkpoint in --output_dir (none there is an error); auto: "
                           "that one when there is one, else a new run (one command for a first start and its "
                           "restarts); or a path. Restores everything")
    ckpt.add_argument("--overwrite_output_dir", action="store_true",
                      help="a new run into an --output_dir that holds another run's checkpoints or log: remove "
                           "that run's files (checkpoints, logs, rankings, predictions, tokenizer, TensorBoard "
                           "events; nothing else) and start over. Without it such a folder is refused")
    ckpt.add_argument("--allow_resume_change", nargs="+", choices=ALLOWABLE_CHANGES, default=(), metavar="NAME",
                      help=f"resume although the checkpoint was written with another {' / '.join(ALLOWABLE_CHANGES)} "
                           f"(the run says what changed); any other difference from the checkpoint's run is refused")
    ckpt.add_argument("--init_checkpoint", dest="init_checkpoint", default=None,
                      help="start a new run from this checkpoint's model weights only (phase 2)")
    ckpt.add_argument("--load_model_weights_only", nargs="?", const=True, default=None, metavar="PATH",
                      help="the reference's --resume_from_checkpoint=P --load_model_weights_only: a new run from "
                           "P's weights only (= --init_checkpoint P); with a PATH, the same as --init_checkpoint PATH")
    ckpt.add_argument("--phase1_end_step", type=NON_NEGATIVE, default=0,
                      help="updates phase 1 ran: phase 2 numbers its updates after them")
    ckpt.add_argument("--save_checkpoint_steps", type=NON_NEGATIVE, default=0, help="save every N updates (0: at the end)")
    ckpt.add_argument("--keep_checkpoints", type=NON_NEGATIVE, default=3, help="keep the newest K step checkpoints (0: all)")
    ckpt.add_argument("--log_freq", type=POSITIVE, default=10, help="log every N updates")
    ckpt.add_argument("--json-summary", "--json_summary", dest="json_summary", default=None,
                      help="dllogger JSON log (default: OUTPUT_DIR/dllogger.json)")
    ckpt.add_argument("--tensorboard_dir", default=None,
                      help="TensorBoard event folder, written by rank 0 (default: OUTPUT_DIR/tensorboard)")
    ckpt.add_argument("--no_tensorboard", action="store_true", help="write no TensorBoard events")
    ckpt.add_argument("--wandb_project", default=None,
                      help="also log to this Weights & Biases project (needs the wandb package)")
    ckpt.add_argument("--seed", type=NON_NEGATIVE, default=42)


def add_finetuning_args(parser: argparse.ArgumentParser) -> None:
    ft = parser.add_argument_group("fine-tuning and evaluation (finetune.py)")
    ft.add_argument("--task", choices=(*TASK_METRICS, "pretraining"), default="summarization",
                    help="finetune.py: summarization or translation; pretrain.py: pretraining")
    ft.add_argument("--n_train", type=count_or_all(1), default=None,
                    help="use only the first N training examples (-1, the default: all)")
    ft.add_argument("--n_val", type=count_or_all(0), default=None,
                    help="finetune.py: validation examples per evaluation (-1, the default: all; 0: none); "
                         "pretrain.py: rows held out of training for the validation loss (default none)")
    ft.add_argument("--n_test", type=count_or_all(1), default=None,
                    help="test examples for --do_predict (-1, the default: all)")
    ft.add_argument("--val_max_target_length", type=POSITIVE, default=None)
    ft.add_argument("--test_max_target_length", type=POSITIVE, default=None)
    ft.add_argument("--val_metric", choices=(*(m.ranked_by for m in TASK_METRICS.values()), "loss"), default=None,
                    help="the metric validation ranks checkpoints by (default: the task's; loss: the token loss)")
    ft.add_argument("--val_check_interval", type=updates_or_fraction, default=0,
                    help="validate every N updates (0: at the end; pretrain.py: needs --n_val), or, written with "
                         "a decimal point, every F in (0, 1] of an epoch of the training data (finetune.py: "
                         "1.0 = every epoch)")
    ft.add_argument("--early_stopping_patience", type=int_at_least(-1), default=-1,
                    help="stop after N validations in a row without improvement of --val_metric (-1, the "
                         "default: never; 0 stops at the first one, as Lightning's patience 0 did)")
    ft.add_argument("--save_top_k", type=NON_NEGATIVE, default=1, help="keep the K best validation checkpoints")
    ft.add_argument("--label_smoothing", type=PROBABILITY, default=0.0)
    ft.add_argument("--freeze_encoder", action="store_true")
    ft.add_argument("--freeze_embeds", action="store_true", help="freeze token and position embeddings")
    ft.add_argument("--sortish_sampler", action="store_true", help="length-grouped shuffled batches")
    ft.add_argument("--max_tokens_per_batch", type=POSITIVE, default=None, help="token-budget batches")
    ft.add_argument("--do_train", action=argparse.BooleanOptionalAction, default=True)
    ft.add_argument("--do_predict", action="store_true", help="write test predictions after training")


def _auto_with_weights_only(args) -> bool:
    return args.resume_from_checkpoint == "auto" and args.load_model_weights_only is True


# Flags that contradict each other: given together on a command line, one of them would silently win (or do
# nothing). (flag, other flag or None, when: the values that contradict (None: any), why). A row applies when
# the command line gave the flag (and the other, when named: :func:`given_flags`) and ``when`` holds; the run is
# then refused at parse time in one line naming both. (--fp16 with --bf16: bart.utils.precision's rule. Not here:
# --resume_from_checkpoint with the starting weights (--init_checkpoint): "the same command plus
# --resume_from_checkpoint True" is how a run is resumed, and ``auto`` starts from them when there is nothing
# to resume.)
CONTRADICTIONS = (
    ("from_scratch", "init_checkpoint", None, "random weights or a checkpoint's: give one"),
    ("from_scratch", "init_checkpoint_alias", None, "random weights or a checkpoint's: give one"),
    ("from_scratch", "load_model_weights_only", None, "random weights or a checkpoint's: give one"),
    ("init_checkpoint", "init_checkpoint_alias", lambda a: a.init_checkpoint != a.init_checkpoint_alias,
     "both name the starting weights, and they differ: give one"),
    ("resume_from_checkpoint", "load_model_weights_only", _auto_with_weights_only,
     "auto resumes this run from its own checkpoints; --load_model_weights_only starts a new run from a "
     "checkpoint's weights: give that checkpoint's PATH instead of auto"),
    ("overwrite_output_dir", "resume_from_checkpoint", None,
     "--resume_from_checkpoint goes on with the run in --output_dir; --overwrite_output_dir removes it and starts "
     "over: give one"),
    ("no_tensorboard", "tensorboard_dir", None, "no TensorBoard events are written, so the folder would stay unused: "
                                                "drop one"),
    ("use_nvlamb", None, lambda a: not a.lamb,
     "NVLAMB is a LAMB option but the optimizer is AdamW without --lamb: add --lamb, or drop it"),
    ("val_check_interval", "n_val", lambda a: a.n_val == 0 and bool(a.val_check_interval),
     "--n_val 0 turns validation off, so it would never run: give --n_val N, or drop it"),
)


def _shown(parser: argparse.ArgumentParser, args: argparse.Namespace, dest: str, argv: list[str]) -> str:
    """A flag as the command line gave it: the spelling typed (an alias included) and its value."""
    action = next(action for action in parser._actions if action.dest == dest)
    typed = next((o for token in argv for o in action.option_strings if token == o or token.startswith(o + "=")),
                 action.option_strings[0])
    value = vars(args)[dest]
    bare = action.nargs == 0 or (action.nargs == "?" and value == action.const) or value is None
    return typed if bare else f"{typed} {value}"


def given_flags(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The destinations of the flags the command line gave (any spelling, ``--flag value`` or ``--flag=value``)."""
    return {action.dest for action in parser._actions for option in action.option_strings
            if any(token == option or token.startswith(option + "=") for token in argv)}


def check_namespace(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: list[str], given: set[str]) -> None:
    """The rules on the flags as typed, before the reference's spellings are translated: the first row of
    :data:`CONTRADICTIONS` the command line hits, and the precision flags' own rules and needs (one of
    --fp16/--bf16/--fp8; --fp8: torchao, the GPU); argparse's one-line error (exit 2)."""
    for flag, other, when, why in CONTRADICTIONS:
        if flag in given and (other is None or other in given) and (when is None or when(args)):
            both = _shown(parser, args, flag, argv) + ("" if other is None else " with " + _shown(parser, args, other, argv))
            parser.error(f"{both}: {why}")
    try:  # the precision flags' rules; the run's Precision is made when the flags are final (reference_flags)
        Precision.check_flags(args.fp16, args.bf16, args.fp8, args.fp8_emulate)
    except UserError as err:
        parser.error(str(err))


def reject_unused(args: argparse.Namespace, parser: argparse.ArgumentParser, names, script: str, other: str) -> None:
    """Fail loudly when a flag this script does not use was changed from its default."""
    for name in names:
        if vars(args)[name] != parser.get_default(name):
            parser.error(f"--{name} is a {other} flag and has no effect in {script}; remove it")


def write_run_config(values: dict, output_dir: str, extra: dict | None = None) -> dict:
    """The resolved run configuration (``Settings.as_dict()``) next to the results (run_config.json);
    returns it as written (plain JSON values)."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "run_config.json")
    text = json.dumps({**values, **(extra or {})}, indent=2, sort_keys=True, default=str)
    atomic_write_text(path, text)
    return json.loads(text)


def add_eval_args(parser: argparse.ArgumentParser) -> None:
    """run_eval.py's own: the reference's positional arguments and what a run of generation takes."""
    parser.add_argument("model_path", help="checkpoint (.ckpt) or Hugging Face folder")
    parser.add_argument("config_path", help=f"the config the model was built with: a shipped config's name "
                                            f"({names_help()}) or a BART config.json's path")
    parser.add_argument("data_dir", help="folder with {type_path}.source and .target")
    parser.add_argument("save_path", help="output folder")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier evaluation of the same split in SAVE_PATH ({type_path}_generations.txt, "
                             "its metrics file); without it such a folder is refused")
    parser.add_argument("--type_path", default="test", help="split to evaluate (train, val, test)")
    parser.add_argument("--n_obs", type=count_or_all(1), default=None, help="only the first N examples (-1: all)")
    parser.add_argument("--num_return_sequences", type=POSITIVE, default=1)
    parser.add_argument("--max_source_length", type=POSITIVE, default=1024)
    parser.add_argument("--json-summary", "--json_summary", dest="json_summary", default=None,
                        help="dllogger log (default SAVE_PATH/dllogger.json)")
    parser.add_argument("--task", choices=tuple(TASK_METRICS), default="summarization")
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


def add_finetune_args(parser: argparse.ArgumentParser) -> None:
    """finetune.py's own: where the starting weights come from."""
    add_shared_args(parser)
    parser.add_argument("--model_name_or_path", dest="init_checkpoint_alias", default=None,
                        help="starting weights: a .ckpt, a folder holding one, or a Hugging Face folder "
                             "(same as --init_checkpoint)")
    parser.add_argument("--from_scratch", action="store_true", help="start from random weights (no checkpoint)")


def add_pretrain_args(parser: argparse.ArgumentParser) -> None:
    add_shared_args(parser)
    add_noise_args(parser)


# script -> (its own flags, the defaults it sets over the groups', argparse's formatter)
SCRIPTS = {
    "pretrain.py": (add_pretrain_args, dict(lr_scheduler="polynomial", max_source_length=128, task="pretraining"),
                    argparse.HelpFormatter),
    "finetune.py": (add_finetune_args, dict(max_target_length=56, lr_scheduler="linear"), argparse.HelpFormatter),
    "run_eval.py": (add_eval_args, dict(eval_batch_size=8, eval_max_gen_length=142),
                    argparse.RawDescriptionHelpFormatter),
}


def build_parser(script: str, description: str | None = None) -> ArgumentParser:
    """``script``'s parser: its flags (:data:`SCRIPTS`), then the reference recipe's spellings of it."""
    add_own, defaults, formatter = SCRIPTS[script]
    parser = ArgumentParser(prog=script, description=description, formatter_class=formatter)
    add_own(parser)
    add_reference_args(parser, script)
    parser.set_defaults(**defaults)
    return parser
