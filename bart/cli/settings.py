"""The run's settings: one typed record of sections, built once from the command line, read by everything after it.

Each setting is ONE field of a section (:class:`ModelSettings`, :class:`DataSettings`, ...: :data:`SECTIONS`),
declared with :func:`bart.cli.args.flag`: its type, its one default, its help, its spellings, the scripts that take it
and argparse's keywords. The scripts' parsers are generated from these fields
(:func:`bart.cli.parsing.build_parser`), so a new flag is its field here and its use. ``Settings`` holds the
sections; every read names the section (``settings.schedule.max_steps``), while construction, :meth:`Settings.replace`
and :meth:`Settings.as_dict` (run_config.json, the checkpoints' record) stay flat: the names are unique.

The record checks itself when it is made: the run's :class:`~bart.runtime.precision.Precision` is made from the
final precision flags, and the rules that span several flags are its own checks (:data:`_RULES`). Parsing a
command line into it and settling it at run start: :mod:`bart.cli.parsing`.

One record serves the three scripts: a flag a script lacks keeps its field's default, the value that
means "not used".
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
from dataclasses import dataclass
from typing import ClassVar

from bart.cli.args import (
    ALL,
    EVAL,
    FINETUNE,
    NON_NEGATIVE,
    NON_NEGATIVE_FLOAT,
    POSITIVE,
    POSITIVE_FLOAT,
    PRETRAIN,
    PROBABILITY,
    TRAINING,
    _bool_or_path,
    count_or_all,
    flag,
    int_at_least,
    reference,
    setting,
    updates_or_fraction,
    updates_or_ratio,
)
from bart.configuration.shipped import SHIPPED
from bart.data.noise import NoiseConfig
from bart.errors import UserError
from bart.evaluation import TASK_METRICS, VAL_METRICS, check_val_metric
from bart.generation.precision import DECODE_PRECISIONS, check_decode_precision
from bart.optim import OPTIMIZERS
from bart.optim.schedulers import SCHEDULES
from bart.runtime.affinity import DEFAULT_MODE as DEFAULT_AFFINITY
from bart.runtime.affinity import MODES as AFFINITY_MODES
from bart.runtime.precision import FLAGS as PRECISION_DEFAULTS
from bart.runtime.precision import FP8_LIBRARY, Precision, TrainingOnly


class SettingsError(ValueError):
    """A rule between flags that the command line breaks: one line, argparse's exit 2 at parse time."""


def _strategies() -> dict:
    """--distributed_strategy's choices and help, from the strategies' table (a training module: read when a
    training script's parser is built, so run_eval.py loads none)."""
    from bart.training.strategy import DEFAULT_STRATEGY, STRATEGIES
    notes = {name: [cls.summary] * bool(cls.summary) + ["the default"] * (name == DEFAULT_STRATEGY)
             for name, cls in STRATEGIES.items()}
    kinds = [f"{name} ({', '.join(said)})" if said else name for name, said in notes.items()]
    return dict(choices=STRATEGIES, help=f": {', '.join(kinds)}")


def _resume_changes() -> dict:
    from bart.training.checkpoint import (
        allowable_changes,  # the training scripts' (as STRATEGIES): the fields' resume="may_change", and the rest
    )
    choices = allowable_changes(SECTIONS.values())
    return dict(choices=choices, help=f": {', '.join(choices)}")


def _compile_backends() -> dict:
    from bart.training.compilation import (
        COMPILE_BACKENDS,  # the training scripts' (as STRATEGIES)
    )
    return dict(choices=COMPILE_BACKENDS)


def _compile_scopes() -> dict:
    from bart.training.compilation import COMPILE_SCOPES
    return dict(choices=COMPILE_SCOPES)


def _val_metric(value: str) -> str:
    """transformers' spelling too: ``eval_rougeL`` is ``rougeL``."""
    return value[len("eval_"):] if value.startswith("eval_") else value


def _now() -> dict:
    return dict(const=datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))


# -- the sections: each field one setting, its flag declared on it (bart.cli.args.flag) --------------------------
@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """The model: its config, tokenizer, regularisation and how it runs (checkpointing, compile)."""
    GROUP: ClassVar[str] = "model"
    config_path: str | None = flag(
        None, f"a shipped config ({', '.join(SHIPPED)}) or a BART config.json's path", required=True,
        scripts=ALL, quick=ALL, metavar="FILE",
        per_script={EVAL: dict(position=1, help=f"the model's config: a shipped one ({', '.join(SHIPPED)}) or a "
                                                f"path")})
    pre_ln: bool | None = flag(
        None, "Pre-LN layers (mBART-style); --no-pre_ln: BART's post-LN (default: the config's)", scripts=ALL,
        action=argparse.BooleanOptionalAction, quick=ALL)
    tokenizer: str | None = flag(
        None, "tokenizer folder or hub id (default: the starting weights' own, else $TOKENIZER)",
        scripts=ALL, quick=(PRETRAIN,))
    model_revision: str | None = flag(
        None, "hub revision (branch, tag or commit) of starting weights or MODEL_PATH given by id",
        scripts=ALL, metavar="REV")
    allow_tokenizer_mismatch: bool = flag(
        False, "use --tokenizer / $TOKENIZER even where it differs from the starting weights' own", scripts=ALL,
        action="store_true")
    dropout: float | None = flag(None, "dropout (default: the config's)", type=PROBABILITY, quick=TRAINING)
    attention_dropout: float | None = flag(None, "attention dropout (default: the config's)", type=PROBABILITY,
                                           quick=TRAINING)
    encoder_layerdrop: float | None = flag(None, "LayerDrop of encoder layers", type=PROBABILITY)
    decoder_layerdrop: float | None = flag(None, "LayerDrop of decoder layers", type=PROBABILITY)
    gradient_checkpointing: bool = flag(False, "recompute activations in backward", action="store_true")
    compile: bool | None = flag(
        None, "torch.compile the model for training (default: on with CUDA, off on CPU)",
        action=argparse.BooleanOptionalAction)
    compile_backend: str = flag(
        "inductor", "--compile's backend: inductor, or aot_eager / eager to check its graphs cheaply",
        lazy=_compile_backends)
    compile_scope: str = flag(
        "model", "what --compile compiles: the model in one graph, or its layers (a shorter compile)",
        lazy=_compile_scopes)
    cast_weights_once: bool = flag(
        False, "with --bf16/--fp16/--fp8, eager: cast weights once per update, not in every micro-batch",
        action="store_true")
    # the process's own, applied once at run start (bart.cli.start.begin_run), never while parsing
    cache_dir: str | None = reference()  # where hub downloads are cached: HF_HUB_CACHE for the run
    cudnn_benchmark: bool | None = reference()  # torch.backends.cudnn.benchmark for the run (None: left as is)
    cudnn_deterministic: bool | None = reference()  # torch.backends.cudnn.deterministic for the run


@dataclass(frozen=True, kw_only=True)
class DataSettings:
    """The training data: where it is, the task, the lengths, the batches and the loader."""
    GROUP: ClassVar[str] = "data"
    data_dir: str | None = flag(
        None, "training data folder", required=True, scripts=ALL, quick=ALL,
        per_script={EVAL: dict(position=2, help="folder with {type_path}.source and .target"),
                    FINETUNE: dict(required=False, help="folder with {train,val,test}.source and .target (or "
                                                        "--train_file ...)")})
    train_file: str | None = flag(
        None, "a .csv, .json, .jsonl or .parquet file of training examples instead of --data_dir",
        scripts=(FINETUNE,), metavar="FILE")
    validation_file: str | None = flag(None, "the same for the validation examples", scripts=(FINETUNE,),
                                       metavar="FILE")
    test_file: str | None = flag(None, "the same for the test examples (--do_predict)", scripts=(FINETUNE,),
                                 metavar="FILE")
    dataset_name: str | None = flag(
        None, "a Hugging Face dataset (hub id or folder) instead of --data_dir (needs datasets)",
        scripts=(FINETUNE,), metavar="NAME")
    dataset_config_name: str | None = flag(
        None, "--dataset_name's configuration (cnn_dailymail: 3.0.0)", scripts=(FINETUNE,), metavar="NAME")
    text_column: str | None = flag(
        None, "the texts' column in those files or dataset (default: found, e.g. article, document)",
        scripts=(FINETUNE,), metavar="NAME")
    summary_column: str | None = flag(
        None, "their column of summaries (default: found, e.g. highlights, summary)", scripts=(FINETUNE,),
        metavar="NAME")
    task: str = flag("summarization", "summarization or translation",
                     scripts=ALL, choices=(*TASK_METRICS, "pretraining"), refused_in=(PRETRAIN,),
                     per_script={PRETRAIN: dict(default="pretraining"),
                                 EVAL: dict(choices=tuple(TASK_METRICS))})
    prefix: str | None = flag(
        None, "text put in front of every source; kept in the model config (run_eval.py applies it)",
        scripts=(FINETUNE, EVAL), metavar="TEXT", resume="may_change", resume_unset="",
        per_script={FINETUNE: dict(options=("--source_prefix", "--prefix")),
                    EVAL: dict(options=("--prefix", "--source_prefix"),
                               help="text put in front of every source (default: the model config's prefix)")})
    n_train: int | None = flag(None, "use only the first N training examples (-1, the default: all)",
                                  type=count_or_all(1), refused_in=(PRETRAIN,))
    max_source_length: int = flag(1024, "encoder length in tokens", type=POSITIVE, scripts=ALL, quick=ALL,
                                  per_script={PRETRAIN: dict(default=128)})
    max_target_length: int | None = flag(
        None, "decoder length in tokens", type=POSITIVE, quick=(FINETUNE,),
        per_script={FINETUNE: dict(default=56), PRETRAIN: dict(help="decoder length in tokens: must equal "
                                                                    "--max_source_length (the source is rebuilt)")})
    train_batch_size: int = flag(32, "sequences per micro-batch per process", type=POSITIVE, quick=TRAINING)
    auto_find_batch_size: bool = flag(
        False, "out of memory early on: halve the batch, double the accumulation, start again",
        action="store_true")
    max_tokens_per_batch: int | None = flag(
        None, "token-budget batches", type=POSITIVE, refused_in=(PRETRAIN,), resume="same",
        resume_note="the global batch is processes x --gradient_accumulation_steps micro-batches of it")
    sortish_sampler: bool = flag(False, "length-grouped shuffled batches", action="store_true", refused_in=(PRETRAIN,),
                                 quick=(FINETUNE,))
    num_workers: int = flag(4, "data loader worker processes", type=NON_NEGATIVE, quick=(PRETRAIN,))
    noise: NoiseConfig | None = setting(
        None, "pretrain.py: BART's denoising noise (--mlm_probability, --permute_sentence_ratio, ...: "
              "bart.data.noise.add_noise_args)")
    buffer_size: int = reference(16384)  # the shuffle window of pretrain.py's loader (its rows)


@dataclass(frozen=True, kw_only=True)
class OptimizationSettings:
    """The optimizer, its update and what it trains; the stops on a loss that is not finite."""
    GROUP: ClassVar[str] = "optimization"
    learning_rate: float = flag(5e-5, "peak learning rate", type=NON_NEGATIVE_FLOAT, quick=TRAINING, resume="same")
    optim: str = flag("adamw", "the optimizer: adamw, lamb (= --lamb) or adafactor (wants a larger rate, e.g. 1e-2)",
                      choices=OPTIMIZERS, metavar="NAME")
    use_nvlamb: bool = flag(False, "LAMB trust ratio on every tensor (NVLAMB)", action="store_true", resume="same")
    weight_decay: float = flag(0.0, "decoupled weight decay (not on biases/norms)", type=NON_NEGATIVE_FLOAT,
                               resume="same", quick=TRAINING)
    adam_epsilon: float = flag(1e-8, "the optimizer's epsilon", type=POSITIVE_FLOAT, resume="same")
    adam_betas: tuple = flag((0.9, 0.999), "the optimizer's beta1 and beta2", type=PROBABILITY, nargs=2,
                             resume="same")
    gradient_clip_val: float = flag(1.0, "clip the global gradient norm to this (0: off)", "--gradient_clip_val",
                                    "--max_grad_norm", type=NON_NEGATIVE_FLOAT, quick=TRAINING)
    gradient_accumulation_steps: int = flag(1, "micro-batches per optimizer update", type=POSITIVE, quick=TRAINING)
    freeze_encoder: bool = flag(False, "no gradients for the encoder", action="store_true")
    freeze_embeds: bool = flag(False, "freeze token and position embeddings", action="store_true", quick=(FINETUNE,))
    max_consecutive_nonfinite: int = flag(5, "bf16/fp32: stop after this many consecutive NaN/inf losses",
                                          type=POSITIVE)
    min_loss_scale: float = flag(1e-4, "fp16: stop when the dynamic loss scale falls below this (every update "
                                       "overflowing)", type=POSITIVE_FLOAT)


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings:
    """The learning-rate schedule and the run's length in updates (epochs become updates at run start)."""
    GROUP: ClassVar[str] = "schedule"
    lr_scheduler: str = flag("linear", "the learning-rate schedule: %(choices)s", choices=SCHEDULES, metavar="NAME",
                             per_script={PRETRAIN: dict(default="polynomial")}, resume="may_change", schedule=True,
                             quick=TRAINING)
    warmup_steps: int | float = flag(
        0, "updates of linear learning-rate warmup, or below 1 that fraction of --max_steps",
        type=updates_or_ratio, quick=TRAINING, resume="may_change", schedule=True)
    lr_end: float = flag(1e-7, "polynomial schedule: the learning rate it decays to (at most --learning_rate)",
                         type=NON_NEGATIVE_FLOAT, resume="may_change", schedule=True)
    max_steps: int | None = flag(None, "optimizer updates in this run (required)", type=POSITIVE, quick=TRAINING,
                                    per_script={FINETUNE: dict(help="optimizer updates in this run (required, or "
                                                                    "--max_epochs)")})
    max_epochs: int | None = reference()
    min_epochs: int | None = reference()
    min_steps: int | None = reference()


@dataclass(frozen=True, kw_only=True)
class LossSettings:
    """The training loss."""
    GROUP: ClassVar[str] = "loss"
    label_smoothing: float = flag(0.0, "label smoothing of the loss", type=PROBABILITY, resume="may_change",
                                  quick=(FINETUNE,))
    fused_cross_entropy: bool = flag(
        False, "LM head and loss in token chunks, never all logits at once (less memory, same loss)",
        action="store_true")


@dataclass(frozen=True, kw_only=True)
class RandomnessSettings:
    """Where the run's random streams start."""
    GROUP: ClassVar[str] = "randomness"
    seed: int = flag(42, "seed of the weights' initialisation, the data order and dropout", type=NON_NEGATIVE,
                     scripts=ALL, per_script={EVAL: dict(help="seeds torch before generating (sampling)", type=int)},
                     resume="may_change", quick=TRAINING)


@dataclass(frozen=True, kw_only=True)
class ValidationSettings:
    """Validation during training: its rows, when it runs, what ranks checkpoints and stops early."""
    GROUP: ClassVar[str] = "validation"
    n_val: int | None = flag(
        None, "validation examples per evaluation (-1, the default: all; 0: none)", type=count_or_all(0),
        quick=TRAINING, resume="may_change",
        per_script={PRETRAIN: dict(help="rows held out of training for the validation loss (default none)")})
    val_check_interval: int | float = flag(
        0, "validate every N updates (0: at the end), or every F in (0, 1.0] of an epoch",
        type=updates_or_fraction, quick=TRAINING, resume="may_change",
        per_script={PRETRAIN: dict(help="validate every N updates (0: at the end; needs --n_val)")})
    val_metric: str | None = flag(
        None, "what best-k and early stopping rank by (default: rouge2, or bleu for translation)",
        type=_val_metric,
        choices=VAL_METRICS, metavar="NAME", refused_in=(PRETRAIN,), resume="may_change")
    val_max_target_length: int | None = flag(None, "longest generation in validation", type=POSITIVE,
                                                refused_in=(PRETRAIN,), quick=(FINETUNE,))
    early_stopping_patience: int = flag(
        -1, "stop after N validations in a row without improvement (-1, the default: never)",
        type=int_at_least(-1), refused_in=(PRETRAIN,))
    early_stopping_threshold: float = flag(
        0.0, "an improvement of --val_metric by X or less does not reset the patience", type=NON_NEGATIVE_FLOAT,
        metavar="X", refused_in=(PRETRAIN,))
    save_top_k: int = flag(1, "keep the K best validation checkpoints", type=NON_NEGATIVE, refused_in=(PRETRAIN,),
                           quick=(FINETUNE,), metavar="K")
    num_sanity_val_steps: int | None = reference()


@dataclass(frozen=True, kw_only=True)
class PredictionSettings:
    """Training or not, and the test split's predictions after it."""
    GROUP: ClassVar[str] = "prediction"
    do_train: bool = flag(True, "train (--no-do_train: predict only)", action=argparse.BooleanOptionalAction,
                          refused_in=(PRETRAIN,))
    do_predict: bool = flag(False, "write test predictions after training", action="store_true",
                            refused_in=(PRETRAIN,), quick=(FINETUNE,))
    n_test: int | None = flag(None, "test examples for --do_predict (-1, the default: all)", type=count_or_all(1),
                                 refused_in=(PRETRAIN,))
    test_max_target_length: int | None = flag(None, "longest generation in prediction (--do_predict)",
                                                 type=POSITIVE, refused_in=(PRETRAIN,))


@dataclass(frozen=True, kw_only=True)
class GenerationSettings:
    """Generation in validation, prediction and evaluation (run_eval.py keeps the reference's ``--bs`` and
    ``--max_target_length`` as aliases)."""
    GROUP: ClassVar[str] = "generation"
    eval_beams: int | None = flag(
        None, "beams (default: the model config's num_beams; 0: greedy, as the reference)",
        "--eval_beams", "--num_beams", scripts=ALL, type=NON_NEGATIVE, refused_in=(PRETRAIN,), quick=(FINETUNE, EVAL))
    eval_max_gen_length: int | None = flag(
        None, "longest generated sequence in tokens", scripts=ALL, type=POSITIVE, refused_in=(PRETRAIN,), quick=(EVAL,),
        per_script={EVAL: dict(default=142, options=("--eval_max_gen_length", "--max_target_length"))})
    eval_batch_size: int | None = flag(
        None, "sources per generation batch", scripts=ALL, type=POSITIVE, quick=(FINETUNE, EVAL),
        per_script={FINETUNE: dict(default=8), EVAL: dict(default=8, options=("--eval_batch_size", "--bs")),
                    PRETRAIN: dict(help="sequences per held-out loss batch (default: --train_batch_size)")})


@dataclass(frozen=True, kw_only=True)
class CheckpointSettings:
    """The run's folder, its checkpoints, resuming and the starting weights."""
    GROUP: ClassVar[str] = "checkpoints"
    output_dir: str = flag("results", "checkpoints, logs and run_config.json go here", quick=TRAINING)
    resume_from_checkpoint: bool | str | None = flag(
        None, "resume from this checkpoint; True / auto: the newest in --output_dir (auto: if any)",
        type=_bool_or_path, quick=TRAINING, once=True, metavar="PATH")
    overwrite_output_dir: bool = flag(
        False, "a new run over another run's files in --output_dir: remove them (else refused)",
        action="store_true", once=True, quick=TRAINING)
    allow_resume_change: tuple = flag((), "resume although the checkpoint's run had another NAME", nargs="+",
                                      metavar="NAME", lazy=_resume_changes)
    init_checkpoint: str | None = flag(
        None, "start a new run from this checkpoint's model weights only (phase 2)", quick=TRAINING)
    from_scratch: bool = flag(False, "start from random weights (no checkpoint)", scripts=(FINETUNE,),
                              action="store_true", quick=(FINETUNE,))
    phase1_end_step: int = flag(0, "updates phase 1 ran: phase 2 numbers its updates after them", type=NON_NEGATIVE,
                                quick=(PRETRAIN,))
    save_checkpoint_steps: int = flag(0, "save every N updates (0: at the end)", type=NON_NEGATIVE, quick=(PRETRAIN,))
    keep_checkpoints: int = flag(3, "keep the newest K step checkpoints (0: all)", type=NON_NEGATIVE)


@dataclass(frozen=True, kw_only=True)
class LoggingSettings:
    """What the run logs, and where."""
    GROUP: ClassVar[str] = "logging"
    log_freq: int = flag(10, "log every N updates", type=POSITIVE, quick=(PRETRAIN,))
    json_summary: str | None = flag(
        None, "dllogger JSON log (default: OUTPUT_DIR/dllogger.json)", "--json-summary", "--json_summary", scripts=ALL,
        per_script={EVAL: dict(help="dllogger log (default SAVE_PATH/dllogger.json)")}, quick=ALL)
    tensorboard_dir: str | None = flag(
        None, "TensorBoard event folder, written by rank 0 (default: OUTPUT_DIR/tensorboard)")
    no_tensorboard: bool = flag(False, "write no TensorBoard events", action="store_true")
    wandb_project: str | None = flag(None, "also log to this Weights & Biases project (needs the wandb package)")
    weights_summary: str | None = reference()
    progress_bar_refresh_rate: int | None = reference()  # 0: no progress display (PROGRESS=off at run start)


@dataclass(frozen=True, kw_only=True)
class PrecisionSettings:
    """The precision flags; the run's :class:`~bart.runtime.precision.Precision` is made from them
    (:attr:`Settings.precision`). Their defaults are :data:`bart.runtime.precision.FLAGS`, with which a run's
    record that lacks them is read."""
    GROUP: ClassVar[str] = "precision"
    fp16: bool = flag(PRECISION_DEFAULTS["fp16"], "fp16 autocast with loss scaling", scripts=ALL, quick=ALL,
                      action="store_true")
    bf16: bool = flag(PRECISION_DEFAULTS["bf16"], "bf16 autocast", scripts=ALL, quick=ALL, action="store_true")
    fp8: bool = flag(PRECISION_DEFAULTS["fp8"], f"float8 linear layers ({FP8_LIBRARY}) under bf16 autocast; CUDA "
                     f"capability 8.9+", scripts=ALL, action="store_true",
                     per_script={EVAL: dict(action=TrainingOnly, help=argparse.SUPPRESS)}, quick=TRAINING)
    fp8_emulate: bool = flag(PRECISION_DEFAULTS["fp8_emulate"], "--fp8 with the float8 products emulated: any "
                             "device, slow (tests, CPU checks)", scripts=ALL, action="store_true",
                             per_script={EVAL: dict(action=TrainingOnly, help=argparse.SUPPRESS)})
    tf32: bool = flag(PRECISION_DEFAULTS["tf32"], "TF32 matmuls on Ampere+ for the fp32 parts (--no-tf32 for strict "
                      "fp32)", scripts=ALL, action=argparse.BooleanOptionalAction, quick=ALL)

    @classmethod
    def named(cls, name: str, emulate_fp8: bool = False) -> PrecisionSettings:
        """The flags that choose the precision ``name`` (:data:`bart.runtime.precision.PRECISIONS`)."""
        chosen = {"fp32": dict(tf32=False), "tf32": {}, "bf16": dict(bf16=True), "fp16": dict(fp16=True),
                  "fp8": dict(fp8=True, fp8_emulate=emulate_fp8)}[name]
        return cls(**chosen)


@dataclass(frozen=True, kw_only=True)
class DistributedSettings:
    """Several processes: how they share the model, wait for each other and sit on the CPUs."""
    GROUP: ClassVar[str] = "distributed"
    distributed_strategy: str | None = flag(None, "how processes share the model", lazy=_strategies)
    allreduce_post_accumulation_half_precision: bool = flag(
        False, "all-reduce gradients in bf16/fp16 once per update (fp32 parameters)",
        "--allreduce_post_accumulation_half_precision", "--allreduce_post_accumulation_fp16", action="store_true",
        quick=(PRETRAIN,))
    dist_timeout: float = flag(10.0, "minutes a collective waits for the other ranks before the run stops, naming "
                                     "them", scripts=ALL, type=POSITIVE_FLOAT, metavar="MINUTES")
    rendezvous_timeout: float = flag(
        600.0, "seconds processes wait for each other at start-up (then: stop, naming the missing)",
        scripts=ALL, type=POSITIVE_FLOAT,
        metavar="SECONDS")
    heartbeat_timeout: float = flag(
        60.0, "seconds without a heartbeat from a process before the job ends, naming it (0: off)", scripts=ALL,
        type=NON_NEGATIVE_FLOAT, metavar="SECONDS")
    affinity: str = flag(
        DEFAULT_AFFINITY, "CPU affinity of each GPU process (modes: docs/TRAINING.md; default: %(default)s)",
        choices=AFFINITY_MODES, metavar="MODE")
    local_rank: int | None = flag(None, "set by old launchers; torchrun's LOCAL_RANK is used", "--local_rank",
                                     "--local-rank", type=int)  # run_eval.py: the reference's row (SPECS)


@dataclass(frozen=True, kw_only=True)
class HubSettings:
    """The best model uploaded to the Hugging Face hub at the end."""
    GROUP: ClassVar[str] = "publishing"
    push_to_hub: str | None = flag(
        None, "at the end, upload best_tfmr/ to the hub's model repository REPO (OWNER/NAME)",
        scripts=(FINETUNE,), metavar="REPO", nargs="?", const=True)
    hub_private_repo: bool = flag(False, "with --push_to_hub: make the repository private", scripts=(FINETUNE,),
                                  action="store_true")


@dataclass(frozen=True, kw_only=True)
class EvaluationSettings:
    """run_eval.py's own: the model, the split, the output and how it decodes."""
    GROUP: ClassVar[str] = "evaluation"
    model_path: str | None = flag(None, "checkpoint (.ckpt) or Hugging Face folder", scripts=(EVAL,),
                                     per_script={EVAL: dict(position=0)})
    save_path: str | None = flag(None, "output folder", scripts=(EVAL,), per_script={EVAL: dict(position=3)})
    overwrite: bool = flag(False, "replace an earlier evaluation of the same split in SAVE_PATH (else it is refused)",
                           scripts=(EVAL,), action="store_true")
    type_path: str = flag("test", "split to evaluate (train, val, test)", scripts=(EVAL,), quick=(EVAL,),
                          metavar="SPLIT")
    n_obs: int | None = flag(None, "only the first N examples (-1: all)", scripts=(EVAL,), type=count_or_all(1),
                                quick=(EVAL,))
    num_return_sequences: int = flag(1, "sequences generated per source", scripts=(EVAL,), type=POSITIVE)
    info: str | None = flag(None, "a note stored in the metrics file (no value: the current date and time)",
                               scripts=(EVAL,), nargs="?", lazy=_now)
    dump_args: bool = flag(False, "store the generation arguments in the metrics file", "--dump-args", "--dump_args",
                           scripts=(EVAL,), action="store_true")
    decode_precision: str = flag(
        "fp32", "weights to decode with: fp32, a bf16 copy, or int8 linear layers (CPU)", scripts=(EVAL,),
        choices=DECODE_PRECISIONS, quick=(EVAL,))
    compile_generation: bool | str = flag(
        False, "the decode step under torch.compile (reduce-overhead: CUDA graphs)",
        scripts=(EVAL,), nargs="?", const="default", choices=("default", "reduce-overhead"))
    device: str | None = reference()
    debug: bool | None = reference()
    generate_kwargs: dict = setting(None, "extra --key value pairs of run_eval.py's command line, as generate() options",
                                    factory=dict)


# The record's sections, in --help's order: attribute name -> class
SECTIONS = {"model": ModelSettings, "data": DataSettings, "optimization": OptimizationSettings,
            "schedule": ScheduleSettings, "loss": LossSettings, "randomness": RandomnessSettings,
            "validation": ValidationSettings, "prediction": PredictionSettings, "generation": GenerationSettings,
            "checkpoints": CheckpointSettings, "logging": LoggingSettings, "precision_flags": PrecisionSettings,
            "distributed": DistributedSettings, "hub": HubSettings, "evaluation": EvaluationSettings}
_SECTION_OF = {f.name: name for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)}


class Settings:
    """The run's settings: one record of sections (:data:`SECTIONS`), each field one setting, read by its section
    (``settings.schedule.max_steps``); construction takes sections or flat values (``Settings(max_steps=3)``: the
    names are unique) and checks the rules that span flags (:data:`_RULES`)."""
    script: str
    given: frozenset
    model: ModelSettings
    data: DataSettings
    optimization: OptimizationSettings
    schedule: ScheduleSettings
    loss: LossSettings
    randomness: RandomnessSettings
    validation: ValidationSettings
    prediction: PredictionSettings
    generation: GenerationSettings
    checkpoints: CheckpointSettings
    logging: LoggingSettings
    precision_flags: PrecisionSettings
    distributed: DistributedSettings
    hub: HubSettings
    evaluation: EvaluationSettings
    precision: Precision
    """The run's one precision, made from :attr:`precision_flags` when the record is made (its needs checked
    by ``parse_command_line``); handed to the trainer, validation, prediction and evaluation."""

    def __init__(self, script: str = "", given: frozenset = frozenset(), **values) -> None:
        object.__setattr__(self, "script", script)
        object.__setattr__(self, "given", frozenset(given))
        values.pop("precision", None)  # made from the flags, never given
        kept = values.pop("_precision", None)  # replace(): the record's own, its flags unchanged
        for name, cls in SECTIONS.items():
            section = values.pop(name, None) or cls()
            own = {key: values.pop(key) for key in [k for k in values if _SECTION_OF.get(k) == name]}
            object.__setattr__(self, name, dataclasses.replace(section, **own) if own else section)
        if values:
            raise TypeError(f"Settings has no setting {', '.join(sorted(values))}")
        try:  # one Precision per run: a checked copy (resolved) keeps the record's
            precision = kept or Precision.from_flags(**dataclasses.asdict(self.precision_flags))
        except UserError as err:
            raise SettingsError(str(err)) from None
        object.__setattr__(self, "precision", precision)
        for rule in _RULES:
            message = rule(self)
            if message:
                raise SettingsError(message)

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}: Settings are built once "
                                              f"(bart.cli.parsing.resolved makes a checked copy)")

    def __eq__(self, other) -> bool:
        return isinstance(other, Settings) and (self.script, self.given, self.sections()) == \
            (other.script, other.given, other.sections())

    def __repr__(self) -> str:
        return f"Settings(script={self.script!r}, {', '.join(f'{k}={v!r}' for k, v in self.sections().items())})"

    def sections(self) -> dict:
        return {name: getattr(self, name) for name in SECTIONS}

    def replace(self, **values) -> Settings:
        """A copy with ``values`` (flat names or sections) replaced, checked again; the run's Precision stays the
        same object unless a precision flag changes."""
        same = not ({"precision_flags", *(f.name for f in dataclasses.fields(PrecisionSettings))} & values.keys())
        return Settings(script=self.script, given=self.given, **{**self.sections(), **values},
                        **({"_precision": self.precision} if same else {}))

    def as_dict(self) -> dict:
        """The values as run_config.json and the checkpoints record them: flat, one key per setting (plus the
        precision's name), without :attr:`given`."""
        values = {"script": self.script}
        for section in self.sections().values():
            values.update({f.name: getattr(section, f.name) for f in dataclasses.fields(section)})
        values["precision"] = self.precision
        values["noise"] = None if self.data.noise is None else dataclasses.asdict(self.data.noise)
        return values


def generation_kwargs(settings: Settings, max_length: int | None) -> dict:
    """The generate() options the flags set; ``max_length`` is the script's resolved length."""
    values = {"num_beams": settings.generation.eval_beams, "max_length": max_length}
    return {k: v for k, v in values.items() if v is not None}


# -- the rules that span several flags (each: a message when broken, else None) --------------------------
def _max_steps_required(s: Settings):
    if s.script in TRAINING and s.schedule.max_steps is None and not s.schedule.max_epochs:
        return ("the following arguments are required: --max_steps"
                + (" (or --max_epochs)" if s.script == FINETUNE else ""))


def _lr_end_below_learning_rate(s: Settings):
    lr_end, learning_rate = s.schedule.lr_end, s.optimization.learning_rate
    if s.script in TRAINING and s.schedule.lr_scheduler == "polynomial" and lr_end > learning_rate:
        return (f"--lr_end {lr_end:g} exceeds --learning_rate {learning_rate:g}: the polynomial schedule decays from "
                f"the learning rate down to --lr_end; lower --lr_end")


def _pretraining_target_is_the_source(s: Settings):
    if s.script == PRETRAIN and s.data.max_target_length not in (None, s.data.max_source_length):
        return "pretraining reconstructs the source: --max_target_length must equal --max_source_length"


def _pretraining_validation_needs_rows(s: Settings):
    if s.script == PRETRAIN and s.validation.val_check_interval and not s.validation.n_val:
        return "--val_check_interval needs held-out rows: add --n_val N"


def _finetuning_needs_weights(s: Settings):
    weights = s.checkpoints
    if s.script == FINETUNE and not (weights.init_checkpoint or weights.from_scratch or weights.resume_from_checkpoint):
        return "give the starting weights (--init_checkpoint / --model_name_or_path), or --from_scratch"


def _early_stopping_needs_validation(s: Settings):
    validation = s.validation
    if s.script == FINETUNE and validation.early_stopping_patience and (validation.n_val == 0 or
                                                                         not validation.val_check_interval):
        return "--early_stopping_patience needs validation during training: --val_check_interval N, --n_val not 0"


def table_files_folder(output_dir: str) -> str:
    """Where --train_file/--validation_file/--test_file's rows are written as {split}.source/.target: the run's
    --data_dir from then on (bart.cli.builder.table_files_as_data_dir)."""
    return os.path.join(output_dir, "data")


def _finetuning_data(s: Settings):
    if s.script != FINETUNE:
        return None
    files = [f"--{name}" for name, value in (("train_file", s.data.train_file),
                                             ("validation_file", s.data.validation_file),
                                             ("test_file", s.data.test_file), ("dataset_name", s.data.dataset_name))
             if value]
    # (not the folder they became)
    if s.data.data_dir and files and s.data.data_dir != table_files_folder(s.checkpoints.output_dir):
        return f"--data_dir and {files[0]}: the data comes from one place; give one"
    if s.data.dataset_name and len(files) > 1:
        return f"{files[0]} and --dataset_name: the data comes from one place; give one"
    if s.data.dataset_config_name and not s.data.dataset_name:
        return "--dataset_config_name names a configuration of --dataset_name NAME: add --dataset_name, or drop it"
    if not s.data.data_dir and not s.data.train_file and not s.data.dataset_name:
        return ("the following arguments are required: --data_dir (train/val/test.source and .target), "
                "--train_file FILE or --dataset_name NAME")
    if s.data.train_file and not s.data.validation_file and s.validation.n_val != 0 and not s.data.data_dir:
        return "--train_file without --validation_file: add --validation_file FILE, or --n_val 0 (no validation)"
    if s.data.train_file and s.prediction.do_predict and not s.data.test_file:
        return "--do_predict with --train_file: add --test_file FILE"
    if s.hub.push_to_hub is True:  # transformers' switch without --hub_model_id after it
        return "--push_to_hub: name the repository, --push_to_hub OWNER/NAME (or --push_to_hub --hub_model_id OWNER/NAME)"
    if s.hub.push_to_hub and (s.validation.n_val == 0 or s.validation.save_top_k == 0):
        return ("--push_to_hub uploads the best validation checkpoint (best_tfmr/), which needs validation (--n_val "
                "not 0) and --save_top_k >= 1")
    if s.hub.hub_private_repo and not s.hub.push_to_hub:
        return "--hub_private_repo applies to the repository --push_to_hub makes; add --push_to_hub REPO or drop it"
    return None


def _val_metric_of_the_task(s: Settings):
    if s.script == FINETUNE and s.validation.val_metric is not None:
        return check_val_metric(s.data.task, s.validation.val_metric)


def _cast_weights_once_needs_autocast(s: Settings):
    if not s.model.cast_weights_once:
        return None
    if s.precision.autocast_dtype is None:
        return (f"--cast_weights_once casts the weights to the autocast dtype, and this run computes in "
                f"{s.precision.name}: add --bf16 or --fp16, or drop --cast_weights_once")
    if s.model.compile:
        return "--cast_weights_once is an eager path (a compiled step fuses its casts): drop --compile or it"
    if s.distributed.distributed_strategy == "fsdp":
        return ("--cast_weights_once casts whole weights and FSDP holds shards of them: drop --cast_weights_once "
                "or use --distributed_strategy ddp")


def _compile_scope_needs_compile(s: Settings):
    if s.model.compile_scope != "model" and s.model.compile is False:
        return (f"--compile_scope {s.model.compile_scope} says what --compile compiles, and this run has --no-compile: "
                f"drop one of them")


def _decode_precision_with_autocast(s: Settings):
    if s.script == EVAL:
        try:  # a bf16/int8 copy of the weights under --bf16/--fp16 autocast: one home, bart.generation.precision
            check_decode_precision(s.evaluation.decode_precision, s.precision.name)
        except UserError as err:
            return str(err)


_RULES = (_max_steps_required, _lr_end_below_learning_rate, _pretraining_target_is_the_source,
          _pretraining_validation_needs_rows, _finetuning_needs_weights, _early_stopping_needs_validation,
          _finetuning_data, _val_metric_of_the_task, _cast_weights_once_needs_autocast,
          _compile_scope_needs_compile, _decode_precision_with_autocast)


__all__ = ["Settings", "SettingsError", "SECTIONS", "PRETRAIN", "FINETUNE", "EVAL", "TRAINING"]
