"""The reference recipe's flags that this recipe does not spell the same way, so that its command lines
(typed from memory, or from its scripts) run here or stop at once with one line naming what to use.

The reference is NVIDIA's BART recipe: its current ``pretrain.py``, ``finetune.py`` and ``run_eval.py``
(``training_base.add_model_specific_args``, ``add_generic_args``) and the first release's
``finetune.py``, which also took every PyTorch Lightning 1.1.5 ``Trainer`` argument
(``pl.Trainer.add_argparse_args``: ``--gpus``, ``--max_epochs``, ``--val_check_interval``, ...).
Flags whose name and meaning are already this recipe's live in :mod:`bart.cli.args`; the ones
here are either translated onto this recipe's flags (``--max_epochs`` becomes a number of updates,
``--precision 16`` is ``--fp16``) or refused with the replacement (``--adafactor``, ``--tpu_cores``).
docs/REFERENCE_FLAGS.md's table lists every one of them with its status.

    add_reference_args(parser, "finetune.py")   # after the script's own flags (bart.cli.parsing.build_parser)
    apply_reference_args(namespace, parser, "finetune.py", argv, given)  # translate, or refuse in one line

(bart.cli.parsing calls both; it also turns epochs into updates once the loader exists: ``resolve_epochs``.)
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from bart.cli.args import (  # the scripts' names: one home
    EVAL,
    FINETUNE,
    PRETRAIN,
    TRAINING,
    short_metavar,
)

if TYPE_CHECKING:  # bart.cli.parsing imports this module and bart.cli.settings
    from bart.cli.settings import Settings

_TRUE = {"y", "yes", "t", "true", "on", "1"}
_FALSE = {"n", "no", "f", "false", "off", "0"}


# -- value types as Lightning 1.1.5 parsed them ----------------------------------------------------
def lightning_bool(text: str) -> bool:
    """Lightning's ``str_to_bool``: true/false, yes/no, on/off, 1/0 (a bare flag is True)."""
    lowered = str(text).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def lightning_bool_or_str(text: str):
    try:
        return lightning_bool(text)
    except argparse.ArgumentTypeError:
        return str(text)


def int_or_float(text: str):
    """Lightning's rule: a value with a decimal point is a float (a fraction), else an int (a count)."""
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def gpus_value(text: str):
    """Lightning's ``--gpus``: a count (-1: every GPU of the node) or a comma-separated list of indices."""
    if "," in text:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GPUs or a list such as 0,1, got {text!r}") from None


def grad_norm_type(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a norm order such as 2 or inf, got {text!r}") from None


def _always(_value) -> bool:
    return True


def _equals(*values) -> Callable[[Any], bool]:
    return lambda value: value in values


@dataclass(frozen=True)
class Spec:
    """One reference flag: the values that work here (``works``; ``apply`` translates them onto this
    recipe's flags) and, for the others, ``fix``: what to use instead (backticks mark flags/commands)."""
    options: tuple
    scripts: tuple
    dest: str
    kind: str = "value"            # "value", "switch" (store_true), "lightning" (Lightning's bool: bare = True)
    type: Callable | None = str
    works: Callable[[Any], bool] = _always
    fix: str = ""
    help: str = ""
    apply: Callable[[argparse.Namespace, Any, str], None] | None = None
    metavar: str = ""             # what --help shows for the value (default: from the type, bart.cli.args.short_metavar)


# -- translations -----------------------------------------------------------------------------------
def _terminate_on_nan(args, value, _script):
    if value:
        args.max_consecutive_nonfinite = 1


def _accelerator(args, value, _script):
    if args.distributed_strategy not in (None, "ddp"):
        raise _Refusal(f"asks for DDP but --distributed_strategy is {args.distributed_strategy}; give one of them")
    args.distributed_strategy = "ddp"


def _ddp_works(value) -> bool:
    return value == "ddp" or (value == "ddp_cpu" and not torch.cuda.is_available())


def _precision_works(value) -> bool:
    return value in ("16", "32")


def _precision(args, value, _script):
    if value == "16":
        if args.bf16:
            raise _Refusal("means --fp16, but --bf16 is given too; choose one")
        args.fp16 = True
    elif args.fp16 or args.bf16:
        raise _Refusal("means fp32, but --fp16/--bf16 is given too; choose one")


class _Refusal(Exception):
    """A working value that conflicts with another flag: its message completes ``--flag value ...``."""


# -- launcher checks: --gpus, --num_nodes, --num_processes against torchrun/SLURM ------------------
def _launch():
    from bart.runtime.distributed import read_env
    return read_env()


def _gpus(args, value, script):
    env = _launch()
    cuda = torch.cuda.is_available()
    launch = f"torchrun --nproc_per_node {{n}} {script} ..."
    if isinstance(value, str):
        picked = [v for v in value.split(",") if v.strip()]
        raise _Refusal(f"picks GPUs by index: select them with CUDA_VISIBLE_DEVICES={value} and launch "
                       f"{launch.format(n=len(picked))} (one process per GPU)")
    if value == 0:
        if cuda:
            raise _Refusal("asks for CPU training but CUDA GPUs are visible: hide them with CUDA_VISIBLE_DEVICES= "
                           "(or drop --gpus)")
        return
    if not cuda:
        raise _Refusal("but no CUDA GPU is visible (torch.cuda.is_available() is False); drop --gpus to train on CPU")
    count = torch.cuda.device_count()
    wanted = count if value == -1 else value
    if value < -1 or wanted > count:
        raise _Refusal(f"but this node has {count} visible GPU(s); use --gpus {count} or fewer")
    if env.local_world_size != wanted:
        raise _Refusal(f"but {env.local_world_size} process(es) run on this node: launch "
                       f"{launch.format(n=wanted)} (one process per GPU), or drop --gpus")


def _num_processes(args, value, script):
    env = _launch()
    if env.local_world_size != value:
        raise _Refusal(f"but {env.local_world_size} process(es) run on this node: launch "
                       f"torchrun --nproc_per_node {value} {script} ...")


def _num_nodes(args, value, script):
    env = _launch()
    nodes = max(env.world_size // max(env.local_world_size, 1), 1)
    if nodes != value:
        raise _Refusal(f"but the launcher started {nodes} node(s): launch torchrun --nnodes {value} "
                       f"--nproc_per_node N {script} ... on each node")


def _device(args, value, _script):
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError):
        raise _Refusal("is not a device: use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise _Refusal("but no CUDA GPU is visible; use --device cpu")
        if device.index is not None and _launch().world_size > 1:
            raise _Refusal("names one GPU, but several processes run: each uses its local rank's GPU with --device cuda")
    elif device.type != "cpu":
        raise _Refusal("is not supported: use cpu, cuda or cuda:N")


def _sync_timeout(args, value, _script):
    args.dist_timeout = value / 60.0


_NO_DISTILL = "shrink-and-fine-tune distillation is not implemented: fine-tune a smaller model (`--config_path` with fewer layers)"
_ONLY_DISTILL = "used only by --distill, which is not implemented: remove it"

SPECS = (
    # -- the current reference's training_base / add_generic_args (pretrain.py, finetune.py) ----------
    Spec(("--cache_dir",), TRAINING, "cache_dir", type=os.path.expanduser,
         help="reference: where hub downloads are cached (HF_HUB_CACHE for the run)"),
    Spec(("--min_num_train_epochs",), (PRETRAIN,), "min_epochs", type=int, works=_equals(0),
         fix="pretraining has no early stopping and runs exactly --max_steps updates: remove it",
         help="reference: accepted with 0 (pretraining runs --max_steps updates)"),
    Spec(("--min_num_train_epochs", "--min_epochs"), (FINETUNE,), "min_epochs", type=int,
         works=lambda v: v >= 0, fix="must be >= 0",
         help="early stopping does not end the run before this many epochs of the training data"),
    Spec(("--adafactor",), TRAINING, "ref_adafactor", kind="switch", works=_equals(None),
         fix="Adafactor is not implemented: use the default AdamW, or `--lamb`"),
    Spec(("--n_tpu_cores",), TRAINING, "ref_tpu_cores", type=int, works=_equals(None),
         fix="there is no TPU support: train on CUDA GPUs with `torchrun --nproc_per_node N`, or on the CPU"),
    Spec(("--profile",), TRAINING, "ref_profile", kind="switch", works=_equals(None),
         fix="there is no built-in profiler (the reference's flag did nothing): run under `nsys profile`"),
    Spec(("--logger_name",), TRAINING, "ref_logger_name", works=_equals("default"), metavar="NAME",
         fix="for Weights & Biases use `--wandb_project NAME` (dllogger and TensorBoard are always on)",
         help="reference: default (dllogger + TensorBoard) works; for W&B use --wandb_project"),
    Spec(("--src_lang",), TRAINING, "ref_src_lang", works=_equals(""),
         fix="BART's tokenizer has no language codes (that is mBART's): `--src_lang` must stay empty"),
    Spec(("--tgt_lang",), TRAINING, "ref_tgt_lang", works=_equals(""),
         fix="BART's tokenizer has no language codes (that is mBART's): `--tgt_lang` must stay empty"),
    # -- the BERT recipe's spelling (NVIDIA's run_pretraining.py): what it asks for always happens here -------
    Spec(("--allreduce_post_accumulation",), TRAINING, "ref_allreduce_post_accumulation", kind="switch",
         help="accepted: gradients are always all-reduced once per update, after accumulation"),
    Spec(("--buffer_size",), (PRETRAIN,), "buffer_size", type=int, works=lambda v: v >= 1, fix="must be >= 1",
         help="rows shuffled together in each loader worker's window (default {default})"),
    # -- the current reference's finetune.py / run_eval.py ----------------------------------------------
    Spec(("--distill",), (FINETUNE, EVAL), "ref_distill", works=_equals(None), fix=_NO_DISTILL),
    Spec(("--layers",), (FINETUNE, EVAL), "ref_layers", works=_equals(None), fix=_ONLY_DISTILL),
    Spec(("--do_encoder",), (FINETUNE, EVAL), "ref_do_encoder", kind="switch", works=_equals(None), fix=_ONLY_DISTILL),
    Spec(("--do_decoder",), (FINETUNE, EVAL), "ref_do_decoder", kind="switch", works=_equals(None), fix=_ONLY_DISTILL),
    Spec(("--gpus",), (FINETUNE,), "ref_gpus", type=gpus_value, apply=_gpus, metavar="N",
         help="GPUs per node (-1: all): must match the processes torchrun starts on the node"),
    Spec(("--device",), (EVAL,), "device", apply=_device, metavar="NAME",
         help="cpu, cuda (each process its local rank's GPU) or cuda:N (default: cuda if any)"),
    Spec(("--sync_timeout",), (EVAL,), "ref_sync_timeout", type=int, works=lambda v: v > 0, fix="must be > 0",
         metavar="SECONDS",
         apply=_sync_timeout, help="seconds a process waits for the others (= --dist_timeout in minutes)"),
    Spec(("--local_rank", "--local-rank"), (EVAL,), "local_rank", type=int, apply=lambda *a: _local_rank(*a),
         help="set by old launchers (torch.distributed.launch); torchrun's LOCAL_RANK is used"),
    Spec(("--debug",), (EVAL,), "debug", kind="switch",
         help="also write the references of the evaluated examples as SAVE_PATH/{type_path}.target"),
    # -- the first release's finetune.py: PyTorch Lightning 1.1.5's Trainer arguments -----------------
    Spec(("--logger",), (FINETUNE,), "ref_logger", kind="lightning", works=_equals(True),
         fix="the dllogger log is always written; `--no_tensorboard` turns TensorBoard off"),
    Spec(("--checkpoint_callback",), (FINETUNE,), "ref_checkpoint_callback", kind="lightning", works=_equals(True),
         fix="the final checkpoint is always written; `--save_top_k 0` keeps no best-k copies"),
    Spec(("--default_root_dir",), (FINETUNE,), "ref_default_root_dir", works=_equals(None),
         fix="use `--output_dir` for checkpoints and logs"),
    Spec(("--process_position",), (FINETUNE,), "ref_process_position", type=int, works=_equals(0),
         fix="there is one progress display per run: remove it (`PROGRESS=off` hides it)"),
    Spec(("--num_nodes",), (FINETUNE,), "ref_num_nodes", type=int, apply=_num_nodes,
         help="nodes: must match the launcher's (torchrun --nnodes)"),
    Spec(("--num_processes",), (FINETUNE,), "ref_num_processes", type=int, apply=_num_processes,
         help="processes per node: must match the launcher's (torchrun --nproc_per_node)"),
    Spec(("--auto_select_gpus",), (FINETUNE,), "ref_auto_select_gpus", kind="lightning", works=_equals(False),
         fix="choose GPUs with `CUDA_VISIBLE_DEVICES`"),
    Spec(("--tpu_cores",), (FINETUNE,), "ref_tpu_cores2", type=gpus_value, works=_equals(None),
         fix="there is no TPU support: train on CUDA GPUs with `torchrun --nproc_per_node N`, or on the CPU"),
    Spec(("--log_gpu_memory",), (FINETUNE,), "ref_log_gpu_memory", metavar="MODE",
         help="accepted: the peak GPU memory (gpu_mem_peak_gib) is logged on CUDA"),
    Spec(("--progress_bar_refresh_rate",), (FINETUNE,), "progress_bar_refresh_rate", type=int,
         works=lambda v: v >= 0, fix="must be >= 0",
         help="0: no progress display (PROGRESS=off); N: the display is on"),
    Spec(("--overfit_batches",), (FINETUNE,), "ref_overfit_batches", type=int_or_float, works=_equals(0),
         fix="train on a fixed subset with `--n_train N`"),
    Spec(("--track_grad_norm",), (FINETUNE,), "ref_track_grad_norm", type=grad_norm_type, works=_equals(-1, 2),
         fix="only the L2 norm is logged (`grad_norm`, every --log_freq updates)"),
    Spec(("--check_val_every_n_epoch",), (FINETUNE,), "check_val_every_n_epoch", type=int,
         works=lambda v: v >= 1, fix="must be >= 1", help="validate every N epochs of the training data"),
    Spec(("--fast_dev_run",), (FINETUNE,), "ref_fast_dev_run", kind="lightning", type=lightning_bool_or_str,
         works=_equals(False, 0), fix="for a quick check use `--max_steps 1` with --n_val 1"),
    Spec(("--accumulate_grad_batches",), (FINETUNE,), "gradient_accumulation_steps", type=int,
         works=lambda v: v >= 1, fix="must be >= 1", help="= --gradient_accumulation_steps"),
    Spec(("--max_epochs",), (FINETUNE,), "max_epochs", type=int, works=lambda v: v >= 1, fix="must be >= 1",
         help="train at most N epochs of the training data (with --max_steps: whichever ends first)"),
    Spec(("--min_steps",), (FINETUNE,), "min_steps", type=int, works=lambda v: v >= 0, fix="must be >= 0",
         help="early stopping does not end the run before this many updates"),
    Spec(("--limit_train_batches",), (FINETUNE,), "ref_limit_train_batches", type=int_or_float, works=_equals(1.0),
         fix="train on the first N examples with `--n_train N`"),
    Spec(("--limit_val_batches",), (FINETUNE,), "ref_limit_val_batches", type=int_or_float, works=_equals(1.0),
         fix="validate on the first N examples with `--n_val N`"),
    Spec(("--limit_test_batches",), (FINETUNE,), "ref_limit_test_batches", type=int_or_float, works=_equals(1.0),
         fix="predict the first N test examples with `--n_test N`"),
    Spec(("--flush_logs_every_n_steps",), (FINETUNE,), "ref_flush_logs_every_n_steps", type=int,
         works=lambda v: v >= 1, fix="must be >= 1", help="accepted: every log line is flushed as it is written"),
    Spec(("--log_every_n_steps",), (FINETUNE,), "log_freq", type=int, works=lambda v: v >= 1, fix="must be >= 1",
         help="= --log_freq"),
    Spec(("--accelerator",), (FINETUNE,), "ref_accelerator", works=_ddp_works, apply=_accelerator, metavar="NAME",
         fix="processes are started by `torchrun --nproc_per_node N` (DDP; ddp_cpu on a machine without "
             "GPUs); `--distributed_strategy fsdp` shards the model",
         help="ddp (or ddp_cpu without GPUs): DDP over the processes torchrun starts"),
    Spec(("--distributed_backend", "--distributed-backend"), (FINETUNE,), "ref_distributed_backend",
         works=_ddp_works, apply=_accelerator, metavar="NAME",
         fix="processes are started by `torchrun --nproc_per_node N` (DDP; ddp_cpu on a machine without "
             "GPUs); `--distributed_strategy fsdp` shards the model", help="= --accelerator"),
    Spec(("--sync_batchnorm",), (FINETUNE,), "ref_sync_batchnorm", kind="lightning",
         help="accepted: BART has no batch norm to synchronize"),
    Spec(("--precision",), (FINETUNE,), "ref_precision", works=_precision_works, apply=_precision, metavar="{16,32}",
         fix="16 is `--fp16`, 32 the fp32/TF32 default; for bf16 use `--bf16`", help="16: --fp16; 32: fp32/TF32"),
    Spec(("--weights_summary",), (FINETUNE,), "weights_summary", works=_equals("top", "full"), metavar="{top,full}",
         fix="choose `top` (top-level modules) or `full` (every module)",
         help="print the parameter counts of the model's top-level modules (top) or all (full)"),
    Spec(("--weights_save_path",), (FINETUNE,), "ref_weights_save_path", works=_equals(None),
         fix="use `--output_dir` for checkpoints"),
    Spec(("--num_sanity_val_steps",), (FINETUNE,), "num_sanity_val_steps", type=int, works=_equals(0, -1),
         fix="use `0` (no validation before the first update) or -1 (a full one, the default with --val_check_interval)",
         help="0: no validation before the first update; -1: a full one (default: with validation)"),
    Spec(("--truncated_bptt_steps",), (FINETUNE,), "ref_truncated_bptt_steps", type=int, works=_equals(None),
         fix="truncated back-propagation through time is for recurrent models (BART has none): remove it"),
    Spec(("--profiler",), (FINETUNE,), "ref_profiler", type=lightning_bool_or_str, kind="lightning",
         works=_equals(False), fix="there is no built-in profiler: run under `nsys profile`"),
    Spec(("--benchmark",), (FINETUNE,), "cudnn_benchmark", kind="lightning",
         help="sets torch.backends.cudnn.benchmark for the run"),
    Spec(("--deterministic",), (FINETUNE,), "cudnn_deterministic", kind="lightning",
         help="sets torch.backends.cudnn.deterministic for the run (as Lightning 1.1 did)"),
    Spec(("--reload_dataloaders_every_epoch",), (FINETUNE,), "ref_reload_dataloaders", kind="lightning",
         works=_equals(False), fix="the split is read once and reshuffled every epoch; to reread changed files "
                                   "restart with `--resume_from_checkpoint True`"),
    Spec(("--auto_lr_find",), (FINETUNE,), "ref_auto_lr_find", kind="lightning", type=lightning_bool_or_str,
         works=_equals(False), fix="set the learning rate with `--learning_rate`"),
    Spec(("--replace_sampler_ddp",), (FINETUNE,), "ref_replace_sampler_ddp", kind="lightning", works=_equals(True),
         fix="batches are always dealt over the processes (`--sortish_sampler` groups them by length)"),
    Spec(("--terminate_on_nan",), (FINETUNE,), "ref_terminate_on_nan", kind="lightning", apply=_terminate_on_nan,
         help="true: stop at the first non-finite loss (--max_consecutive_nonfinite 1)"),
    Spec(("--auto_scale_batch_size",), (FINETUNE,), "ref_auto_scale_batch_size", kind="lightning",
         type=lightning_bool_or_str, works=_equals(False),
         fix="set the batch with `--train_batch_size` (or `--max_tokens_per_batch`)"),
    Spec(("--prepare_data_per_node",), (FINETUNE,), "ref_prepare_data_per_node", kind="lightning",
         help="accepted: there is no data preparation step (the split is read in place)"),
    Spec(("--plugins",), (FINETUNE,), "ref_plugins", works=_equals(None),
         fix="choose DDP or FSDP with `--distributed_strategy` under torchrun"),
    Spec(("--amp_backend",), (FINETUNE,), "ref_amp_backend", works=_equals("native"),
         fix="mixed precision is torch's native autocast (`--fp16` or `--bf16`)"),
    Spec(("--amp_level",), (FINETUNE,), "ref_amp_level", works=_equals("O1"), metavar="O1",
         fix="`--fp16`/`--bf16` are torch autocast, which is Apex's O1: use O1 or drop it",
         help="O1: what --fp16/--bf16 do (torch autocast)"),
    Spec(("--automatic_optimization",), (FINETUNE,), "ref_automatic_optimization", kind="lightning",
         works=_equals(True), fix="the training loop is this recipe's (`bart/training/trainer.py`): remove it"),
    Spec(("--move_metrics_to_cpu",), (FINETUNE,), "ref_move_metrics_to_cpu", kind="lightning",
         help="accepted: logged metrics are host numbers either way"),
    Spec(("--enable_pl_optimizer",), (FINETUNE,), "ref_enable_pl_optimizer", kind="lightning",
         help="accepted: Lightning's optimizer wrapper; the optimizer runs as it is"),
)


def specs_for(script: str) -> list[Spec]:
    return [spec for spec in SPECS if script in spec.scripts]


def add_reference_args(parser: argparse.ArgumentParser, script: str, defaults: dict | None = None) -> None:
    """The reference's flags of ``script`` that :mod:`bart.cli.args` does not define. Every one
    defaults to None (not given: a setting keeps its field's default, which ``defaults`` gives its help as
    ``{default}``); refused ones stay out of --help."""
    group = parser.add_argument_group("flags of the reference recipe (see docs/REFERENCE_FLAGS.md)")
    for spec in specs_for(script):
        shown = spec.help.replace("{default}", str((defaults or {}).get(spec.dest))) or argparse.SUPPRESS
        metavar = spec.metavar or short_metavar(spec.dest, spec.type)
        if spec.kind == "switch":
            group.add_argument(*spec.options, dest=spec.dest, action="store_const", const=True, default=None,
                               help=shown)
        elif spec.kind == "lightning":
            group.add_argument(*spec.options, dest=spec.dest, nargs="?", const=True, default=None, metavar="BOOL",
                               type=spec.type if spec.type is not str else lightning_bool, help=shown)
        else:
            default = argparse.SUPPRESS if spec.dest in ("gradient_accumulation_steps", "log_freq") else None
            group.add_argument(*spec.options, dest=spec.dest, type=spec.type, default=default, metavar=metavar,
                               help=shown)


def _given_option(spec: Spec, argv) -> str:
    for token in argv or ():
        for option in spec.options:
            if token == option or token.startswith(option + "="):
                return option
    return spec.options[0]


def apply_reference_args(args: argparse.Namespace, parser: argparse.ArgumentParser, script: str, argv: list[str],
                         given: set[str]) -> None:
    """Translate the reference's values onto this recipe's flags (``given``: the flags the command line
    gave), or stop with one line naming the replacement (argparse's error: exit 2, before anything is built)."""
    try:
        _translate_shared(args, script, given)
    except _Refusal as err:
        parser.error(str(err))
    for spec in specs_for(script):
        if spec.dest in ("gradient_accumulation_steps", "log_freq"):
            continue  # plain aliases: argparse checked the value, the destination is this recipe's flag
        value = vars(args)[spec.dest]
        if value is None:
            continue
        option = _given_option(spec, argv)
        shown = option if spec.kind == "switch" else f"{option} {value}"
        if not spec.works(value):
            parser.error(f"{shown}: {_plain(spec.fix)}")
        if spec.apply is not None:
            try:
                spec.apply(args, value, script)
            except _Refusal as err:
                parser.error(f"{shown} {err}")


def _plain(text: str) -> str:
    return text.replace("`", "")


def _translate_shared(args, script: str, given: set[str]) -> None:
    """The reference's values of flags this recipe also has: -1 = all / never, 0 beams, weights only."""
    if script in TRAINING:
        _weights_only(args, script)
    if script == PRETRAIN:
        if "n_val" in given and args.n_val is None:
            raise _Refusal("--n_val -1 (all) would hold every row out of pretraining: give the number of rows to hold out")
        if isinstance(args.val_check_interval, float):
            raise _Refusal(f"--val_check_interval {args.val_check_interval}: pretraining has no epoch length here; "
                           f"give a number of updates (an integer)")
    if script == FINETUNE:
        if args.task == "pretraining":
            raise _Refusal("--task pretraining: finetune.py fine-tunes for summarization or translation; "
                           "pretraining is pretrain.py")
        if args.eval_beams == 0:  # the reference's "no beam search"
            args.eval_beams = 1
        # the reference's -1 (never) and Lightning's patience: 0 and 1 both stop at the first validation
        # without improvement; here 0 is "never"
        # (a value from a --config_file is the record's own, already counted this way: only a typed one is translated)
        patience = args.early_stopping_patience
        if patience < 0 or "early_stopping_patience" in given:
            args.early_stopping_patience = 0 if patience < 0 else max(patience, 1)
        if args.check_val_every_n_epoch is not None:
            if "val_check_interval" in given:
                raise _Refusal("give one of --check_val_every_n_epoch and --val_check_interval")
            args.val_check_interval = float(args.check_val_every_n_epoch)  # epochs: settings.resolve_epochs makes it updates
    if script == EVAL:
        if args.eval_beams == 0:  # the reference ran max(eval_beams, num_return_sequences) beams
            args.eval_beams = max(1, args.num_return_sequences)


def _weights_only(args, script: str) -> None:
    """The reference's ``--resume_from_checkpoint=P --load_model_weights_only``: P's weights start a new run
    (this recipe's ``--init_checkpoint P``); ``--load_model_weights_only P`` is the same."""
    value = args.load_model_weights_only
    if value is None or value is False:
        return
    if value is not True:  # a path: this recipe's older spelling of --init_checkpoint
        source = value
    elif args.resume_from_checkpoint is None:
        raise _Refusal("--load_model_weights_only needs the checkpoint: add --resume_from_checkpoint PATH, "
                       "or use --init_checkpoint PATH")
    else:
        source = args.output_dir if args.resume_from_checkpoint is True else args.resume_from_checkpoint
        args.resume_from_checkpoint = None
    if args.init_checkpoint not in (None, source):
        raise _Refusal(f"--load_model_weights_only takes the weights of {source}, but --init_checkpoint names "
                       f"{args.init_checkpoint}; give one of them")
    args.init_checkpoint = source
    args.load_model_weights_only = True


def weights_summary(model: torch.nn.Module, mode: str) -> str:
    """Lightning's ``weights_summary``: parameter counts of the top-level modules (``top``) or of every
    module (``full``), and the trainable total."""
    depth = 1 if mode == "top" else None
    rows = [(name, type(module).__name__, sum(p.numel() for p in module.parameters()))
            for name, module in model.named_modules()
            if name and (depth is None or name.count(".") < depth)]
    width = max([len(name) for name, _, _ in rows] + [4])
    lines = [f"  {'name':<{width}}  {'type':<28} params"]
    lines += [f"  {name:<{width}}  {kind:<28} {count:,}" for name, kind, count in rows]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    lines.append(f"  {trainable:,} trainable of {total:,} parameters")
    return "\n".join(lines)


def validate_before_training(args: Settings) -> bool:
    """finetune.py's validation before the first update: ``--num_sanity_val_steps -1`` asks for it,
    0 turns it off, and by default it runs when validation runs during training."""
    if args.validation.num_sanity_val_steps is not None:
        return args.validation.num_sanity_val_steps == -1
    return bool(args.validation.val_check_interval)


def write_debug_references(args: Settings) -> str | None:
    """run_eval.py ``--debug``: the references of the evaluated examples as SAVE_PATH/{type_path}.target,
    line for line with {type_path}_generations.txt (as the reference wrote them). Not written over the
    data's own file when SAVE_PATH is the data folder."""
    from bart.data.summarization import read_split
    from bart.files.checkpoint_io import atomic_write_text

    path = os.path.join(args.evaluation.save_path, f"{args.evaluation.type_path}.target")
    if os.path.abspath(args.evaluation.save_path) == os.path.abspath(args.data.data_dir):
        return None
    _, targets = read_split(args.data.data_dir, args.evaluation.type_path, args.evaluation.n_obs)
    atomic_write_text(path, "".join(line + "\n" for line in targets))
    return path


def _local_rank(args, value, _script):
    env = _launch()
    if value != env.local_rank:
        raise _Refusal(f"disagrees with the launcher's LOCAL_RANK {env.local_rank}: drop --local_rank (torchrun sets it)")
