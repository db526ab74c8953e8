"""The run's settings: one typed record, built once from the command line, read by everything after it.

    settings = parse_command_line("finetune.py", argv, __doc__)   # flags -> Settings (exit 2 on a mistake)

Construction is the only place flags are rewritten: the reference recipe's spellings are translated
(:mod:`bart.cli.reference_flags`), the flags the command line gave are noted (:attr:`Settings.given`), the
pairs that contradict each other are refused (:data:`bart.cli.args.CONTRADICTIONS`), and the rules that span
several flags are the record's own checks (:meth:`Settings.__post_init__`). Nothing here reads the disk:
what depends on it or on what the run builds (``--resume_from_checkpoint auto``: :func:`bart.cli.builder.start_run`;
the model's positions: :func:`fit_lengths`; the loader's epoch length: :func:`resolve_epochs`) is settled at
run start by :func:`resolved` (``dataclasses.replace``), which checks the record again.

One record serves the three scripts: a flag a script lacks keeps its field's default, the value that
means "not used" (its ``--help`` default where the scripts share it). To add a flag: its ``add_argument``
in :mod:`bart.cli.args` (the group of its concept) and its field here, with a docstring.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from typing import Optional, Union

from bart.cli.args import FINETUNE_ONLY, build_parser, check_namespace, generate_option_pairs, given_flags, reject_unused
from bart.cli.reference_flags import apply_reference_args
from bart.data.noise import NoiseConfig, noise_config_from_args
from bart.evaluation import task_metric
from bart.utils.errors import UserError
from bart.utils.precision import Precision

PRETRAIN, FINETUNE, EVAL = "pretrain.py", "finetune.py", "run_eval.py"
TRAINING = (PRETRAIN, FINETUNE)


class SettingsError(ValueError):
    """A rule between flags that the command line breaks: one line, argparse's exit 2 at parse time."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    script: str = ""
    """The entry script these settings are for (pretrain.py, finetune.py, run_eval.py); its rules apply."""
    given: frozenset = frozenset()
    """The flags (destinations) the command line gave: a default may be adapted with a note, a given value never."""

    # -- model ---------------------------------------------------------------------------------------
    config_path: Optional[str] = None
    """The BART config.json the model is built from (run_eval.py: the generation settings' file): as given, a
    shipped config's name or a path; from run start (``start.resolve_config``) the file's path."""
    pre_ln: Optional[bool] = None
    """Pre-LN (True) or post-LN (False) over the config file's ``pre_ln``; None: the file's (run_eval.py: the checkpoint's)."""
    tokenizer: Optional[str] = None
    """The tokenizer folder or hub id the user named (else ``$TOKENIZER``); checked against the weights' own."""
    allow_tokenizer_mismatch: bool = False
    """Use :attr:`tokenizer` even where it differs from the tokenizer the starting weights were trained with."""
    dropout: Optional[float] = None
    """Dropout over the config's; None keeps the config's."""
    attention_dropout: Optional[float] = None
    """Attention dropout over the config's; None keeps the config's."""
    encoder_layerdrop: Optional[float] = None
    """LayerDrop of encoder layers over the config's; None keeps the config's."""
    decoder_layerdrop: Optional[float] = None
    """LayerDrop of decoder layers over the config's; None keeps the config's."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (less memory, more time)."""
    compile: Optional[bool] = None
    """``torch.compile`` the model for training (``--compile`` / ``--no-compile``); None: on with CUDA, off on CPU."""
    compile_backend: str = "inductor"
    """``--compile``'s backend (``torch.compile(backend=...)``): inductor, or aot_eager (the same graphs, eager kernels)."""
    fused_cross_entropy: bool = False
    """The LM head and the loss in token chunks: the (tokens x vocab) logits are never stored."""

    # -- data ----------------------------------------------------------------------------------------
    data_dir: Optional[str] = None
    """Training data (LDDL shards; fine-tuning and run_eval.py: the {split}.source/.target folder)."""
    max_source_length: int = 1024
    """Encoder length in tokens (lowered to the model's positions at run start when not given)."""
    max_target_length: Optional[int] = None
    """Decoder length in tokens for training (pretraining: None, the source length)."""
    num_workers: int = 4
    """Data loader worker processes."""
    train_batch_size: int = 32
    """Sequences per micro-batch per process."""
    noise: Optional[NoiseConfig] = None
    """pretrain.py: BART's denoising noise (``--mlm_probability``, ``--permute_sentence_ratio``, ...)."""
    buffer_size: Optional[int] = None
    """pretrain.py: rows shuffled together in each loader worker's window (None: 16384)."""

    # -- optimization ----------------------------------------------------------------------------------
    learning_rate: float = 5e-5
    """Peak learning rate."""
    lamb: bool = False
    """LAMB (multi-tensor; apex FusedLAMB where installed) instead of AdamW."""
    use_nvlamb: bool = False
    """LAMB's trust ratio on every tensor (NVLAMB); only with :attr:`lamb`."""
    weight_decay: float = 0.0
    """Decoupled weight decay (not on biases and norms)."""
    adam_epsilon: float = 1e-8
    """The optimizer's epsilon."""
    adam_betas: tuple = (0.9, 0.999)
    """The optimizer's (beta1, beta2)."""
    gradient_clip_val: float = 1.0
    """Clip the global gradient norm to this (0: off)."""
    lr_scheduler: str = "linear"
    """The learning-rate schedule's name (:data:`bart.optim.schedulers.SCHEDULES`)."""
    warmup_steps: int = 0
    """Updates of linear warmup."""
    lr_end: float = 1e-7
    """The polynomial schedule's final learning rate (at most :attr:`learning_rate`)."""
    max_steps: Optional[int] = None
    """Optimizer updates in this run (finetune.py: with ``--max_epochs``, the smaller; resolved at run start)."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per update."""
    max_consecutive_nonfinite: int = 5
    """bf16/fp32: stop after this many non-finite losses in a row."""
    min_loss_scale: float = 1e-4
    """fp16: stop when the dynamic loss scale falls below this."""

    # -- precision -------------------------------------------------------------------------------------
    fp16: bool = False
    """fp16 autocast with loss scaling."""
    bf16: bool = False
    """bf16 autocast."""
    tf32: bool = True
    """TF32 products for the fp32 parts on GPUs that have them."""
    fp8: bool = False
    """Training: float8 linear layers (torchao) under bf16 autocast (refused by run_eval.py's parser)."""
    fp8_emulate: bool = False
    """With :attr:`fp8`: the float8 products emulated in higher precision (any device; tests)."""
    precision: Precision = Precision()
    """The run's one precision, made from the final precision flags (``--precision 16`` translated) and
    checked (``require_supported``) at parse time; handed to the trainer, validation, prediction, evaluation."""

    # -- distributed -----------------------------------------------------------------------------------
    distributed_strategy: Optional[str] = None
    """How several processes share the model (:data:`bart.training.strategy.STRATEGIES`; None: DDP)."""
    allreduce_post_accumulation_half_precision: bool = False
    """All-reduce the gradients in the autocast dtype once per update."""
    dist_timeout: float = 10.0
    """Minutes a collective waits for the other ranks."""
    rendezvous_timeout: float = 600.0
    """Seconds the processes wait for each other at start-up."""
    heartbeat_timeout: float = 60.0
    """Seconds without a heartbeat from a rank's process before the job ends naming it (0: off)."""
    affinity: str = "disabled"
    """CPU affinity of each GPU process (:mod:`bart.utils.affinity`); run_eval.py: left alone."""
    local_rank: Optional[int] = None
    """An old launcher's ``--local_rank``: must equal torchrun's LOCAL_RANK."""

    # -- checkpoints and logging -----------------------------------------------------------------------
    output_dir: str = "results"
    """Checkpoints, logs, run_config.json and the tokenizer go here."""
    resume_from_checkpoint: Union[bool, str, None] = None
    """True: the newest training checkpoint of :attr:`output_dir`; a path; None: a new run. ``"auto"`` until
    run start, where it becomes True or None (:func:`bart.cli.builder.start_run`)."""
    overwrite_output_dir: bool = False
    """A new run into an :attr:`output_dir` holding another run's checkpoints or log removes that run's files first
    (:func:`bart.training.checkpoint.remove_earlier_run`); without it such a folder is refused."""
    allow_resume_change: tuple = ()
    """What a resume may find changed from its checkpoint's run (``precision``, ``distributed_strategy``:
    :data:`bart.training.checkpoint.ALLOWABLE_CHANGES`); anything else that differs is refused."""
    init_checkpoint: Optional[str] = None
    """Starting weights of a new run (``--model_name_or_path``, ``--load_model_weights_only`` translated)."""
    from_scratch: bool = False
    """finetune.py: random starting weights."""
    phase1_end_step: int = 0
    """Updates phase 1 ran: phase 2 numbers its updates after them."""
    save_checkpoint_steps: int = 0
    """Save a training checkpoint every N updates (0: at the end only)."""
    keep_checkpoints: int = 3
    """Keep the newest K step checkpoints (0: all)."""
    log_freq: int = 10
    """Log every N updates."""
    json_summary: Optional[str] = None
    """The dllogger log (None: OUTPUT_DIR/dllogger.json, run_eval.py: SAVE_PATH/dllogger.json)."""
    tensorboard_dir: Optional[str] = None
    """TensorBoard's folder (None: OUTPUT_DIR/tensorboard)."""
    no_tensorboard: bool = False
    """Write no TensorBoard events."""
    wandb_project: Optional[str] = None
    """Also log to this Weights & Biases project."""
    seed: int = 42
    """Seed of the weights' initialisation, the data order and dropout (run_eval.py: sampling)."""

    # -- generation ------------------------------------------------------------------------------------
    eval_beams: Optional[int] = None
    """Beams of generation (None: the model config's ``num_beams``); the reference's 0 is translated."""
    eval_max_gen_length: Optional[int] = None
    """Longest generated sequence in tokens (None: ``val_max_target_length``, then the config's)."""
    eval_batch_size: Optional[int] = None
    """Sources per generation batch (pretrain.py: held-out rows per loss batch; None: the training batch)."""

    # -- fine-tuning and validation --------------------------------------------------------------------
    task: str = "summarization"
    """summarization, translation (run_eval.py, finetune.py) or pretraining (pretrain.py)."""
    n_train: Optional[int] = None
    """Only the first N training examples (None: all)."""
    n_val: Optional[int] = None
    """Validation examples (None: all; 0: no validation); pretrain.py: rows held out (None: none)."""
    n_test: Optional[int] = None
    """Test examples of ``--do_predict`` (None: all)."""
    val_max_target_length: Optional[int] = None
    """Longest generation in validation."""
    test_max_target_length: Optional[int] = None
    """Longest generation in prediction."""
    val_metric: Optional[str] = None
    """The metric validation ranks by (finetune.py: the task's, :func:`bart.evaluation.task_metric`)."""
    val_check_interval: Union[int, float] = 0
    """Updates between validations (0: at the end); a float is a fraction of an epoch until run start."""
    early_stopping_patience: int = -1
    """Validations without improvement before stopping (finetune.py after construction: 0 never, as Lightning counts)."""
    min_epochs: Optional[int] = None
    """Early stopping does not end the run before this many epochs (resolved into :attr:`min_steps`)."""
    min_steps: Optional[int] = None
    """Early stopping does not end the run before this many updates."""
    max_epochs: Optional[int] = None
    """finetune.py: at most this many epochs (resolved into :attr:`max_steps` at run start)."""
    num_sanity_val_steps: Optional[int] = None
    """finetune.py: -1 validates before the first update, 0 does not (None: when validating during training)."""
    weights_summary: Optional[str] = None
    """finetune.py: print parameter counts (``top`` or ``full``)."""
    save_top_k: int = 1
    """Keep the K best validation checkpoints."""
    label_smoothing: float = 0.0
    """Label smoothing of the loss."""
    freeze_encoder: bool = False
    """No gradients for the encoder."""
    freeze_embeds: bool = False
    """No gradients for the token and position embeddings."""
    sortish_sampler: bool = False
    """Length-grouped shuffled batches."""
    max_tokens_per_batch: Optional[int] = None
    """Token-budget batches instead of :attr:`train_batch_size` sequences."""
    do_train: bool = True
    """Train (``--no-do_train``: predict only)."""
    do_predict: bool = False
    """Write test predictions after training."""

    # -- run_eval.py -----------------------------------------------------------------------------------
    model_path: Optional[str] = None
    """MODEL_PATH: a checkpoint, a run's folder or a Hugging Face folder / hub id."""
    save_path: Optional[str] = None
    """SAVE_PATH: the output folder."""
    overwrite: bool = False
    """Replace an earlier evaluation of the same split in :attr:`save_path`; without it such a folder is refused."""
    type_path: str = "test"
    """The split to evaluate."""
    n_obs: Optional[int] = None
    """Only the first N examples of the split."""
    num_return_sequences: int = 1
    """Sequences generated per source."""
    prefix: str = ""
    """Text put in front of every source."""
    info: Optional[str] = None
    """A note stored in the metrics file."""
    dump_args: bool = False
    """Store the generation arguments in the metrics file."""
    decode_precision: str = "fp32"
    """The weights to decode with (:data:`bart.generation.precision.DECODE_PRECISIONS`)."""
    compile_generation: Union[bool, str] = False
    """The decode step under ``torch.compile`` (a mode name) or not (False)."""
    device: Optional[str] = None
    """cpu, cuda or cuda:N (None: cuda when available)."""
    debug: Optional[bool] = None
    """Also write the references of the evaluated examples as SAVE_PATH/{type_path}.target."""
    generate_kwargs: dict = field(default_factory=dict)
    """Extra ``--key value`` pairs of the command line, as generate() options."""

    def __post_init__(self) -> None:
        for rule in _RULES:
            message = rule(self)
            if message:
                raise SettingsError(message)

    def as_dict(self) -> dict:
        """The values as run_config.json and the checkpoints record them (without :attr:`given`)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "given"}
        values["noise"] = None if self.noise is None else dataclasses.asdict(self.noise)
        return values


# -- the rules that span several flags (each: a message when broken, else None) --------------------------
def _max_steps_required(s: Settings):
    if s.script in TRAINING and s.max_steps is None and not s.max_epochs:
        return ("the following arguments are required: --max_steps"
                + (" (or --max_epochs)" if s.script == FINETUNE else ""))


def _lr_end_below_learning_rate(s: Settings):
    if s.script in TRAINING and s.lr_scheduler == "polynomial" and s.lr_end > s.learning_rate:
        return (f"--lr_end {s.lr_end:g} exceeds --learning_rate {s.learning_rate:g}: the polynomial "
                f"schedule decays from the learning rate down to --lr_end; lower --lr_end")


def _pretraining_target_is_the_source(s: Settings):
    if s.script == PRETRAIN and s.max_target_length not in (None, s.max_source_length):
        return "pretraining reconstructs the source: --max_target_length must equal --max_source_length"


def _pretraining_validation_needs_rows(s: Settings):
    if s.script == PRETRAIN and s.val_check_interval and not s.n_val:
        return "--val_check_interval needs held-out rows: add --n_val N"


def _finetuning_needs_weights(s: Settings):
    if s.script == FINETUNE and not (s.init_checkpoint or s.from_scratch or s.resume_from_checkpoint):
        return "give the starting weights (--init_checkpoint / --model_name_or_path), or --from_scratch"


def _early_stopping_needs_validation(s: Settings):
    if s.script == FINETUNE and s.early_stopping_patience and (s.n_val == 0 or not s.val_check_interval):
        return "--early_stopping_patience needs validation during training: --val_check_interval N, --n_val not 0"


_RULES = (_max_steps_required, _lr_end_below_learning_rate, _pretraining_target_is_the_source,
          _pretraining_validation_needs_rows, _finetuning_needs_weights, _early_stopping_needs_validation)


# -- construction --------------------------------------------------------------------------------------
_FIELDS = {f.name for f in dataclasses.fields(Settings)} - {"script", "given", "noise"}


def parse_command_line(script: str, argv=None, description: Optional[str] = None) -> Settings:
    """``script``'s command line as :class:`Settings`; a mistake is argparse's one line and exit 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(script, description)
    namespace, rest = parser.parse_known_args(argv) if script == EVAL else (parser.parse_args(argv), [])
    given = given_flags(parser, argv)
    check_namespace(namespace, parser, argv, given)  # contradictions and precision, on the flags as typed
    apply_reference_args(namespace, parser, script, argv, given)
    if script == PRETRAIN:
        reject_unused(namespace, parser, FINETUNE_ONLY, PRETRAIN, "fine-tuning (finetune.py)")
    values = {name: value for name, value in vars(namespace).items() if name in _FIELDS}
    if script == FINETUNE:
        values["init_checkpoint"] = namespace.init_checkpoint or namespace.init_checkpoint_alias
        if namespace.val_metric is None:
            values["val_metric"] = task_metric(namespace.task)
    try:
        if script == PRETRAIN:
            values["noise"] = noise_config_from_args(namespace)  # its own checks: one line, not a traceback
        if script == EVAL:
            values["generate_kwargs"] = generate_option_pairs(rest)
        return Settings(script=script, given=frozenset(given), **values)
    except (SettingsError, ValueError) as err:
        parser.error(str(err))


# -- run start: what depends on the disk, the model or the loader --------------------------------------
def resolved(settings: Settings, **values) -> Settings:
    """The settings with ``values`` replaced (checked again); a broken rule is a :class:`UserError`."""
    try:
        return dataclasses.replace(settings, **values)
    except SettingsError as err:
        raise UserError(f"{err} (see --help)") from None


def resolve_epochs(settings: Settings, batches_per_epoch: int) -> Settings:
    """Epoch-counted flags as updates, with B batches per process per epoch and A accumulation steps
    (E = B / A updates per epoch):

    - ``--val_check_interval F`` (a fraction, or ``--check_val_every_n_epoch N`` as F = N): every
      max(1, floor(F x E)) updates (Lightning: every floor(F x B) batches);
    - ``--max_epochs N``: at most ceil(N x B / A) updates, fewer if ``--max_steps`` is smaller;
    - ``--min_epochs N``: early stopping waits for ceil(N x B / A) updates (and ``--min_steps``).
    """
    accumulation = settings.gradient_accumulation_steps
    values = {}
    if isinstance(settings.val_check_interval, float):
        values["val_check_interval"] = max(1, math.floor(settings.val_check_interval * (batches_per_epoch / accumulation)))
    if settings.max_epochs:
        steps = max(1, math.ceil(settings.max_epochs * batches_per_epoch / accumulation))
        values["max_steps"] = min(settings.max_steps, steps) if settings.max_steps else steps
    min_steps = settings.min_steps or 0
    if settings.min_epochs:
        min_steps = max(min_steps, math.ceil(settings.min_epochs * batches_per_epoch / accumulation))
    values["min_steps"] = min_steps
    return resolved(settings, **values)


def fit_lengths(settings: Settings, limit: int, names, config_name: str = "the config") -> Settings:
    """Token lengths must fit the model's ``limit`` positions. A length the user gave that does not fit is
    an error naming the flag; a default that does not fit is lowered to ``limit``, with a note."""
    lowered = {}
    for name in names:
        value = getattr(settings, name)
        if value is None or value <= limit:
            continue
        if name not in settings.given:
            print(f"note: --{name} defaults to {value} but the model has {limit} positions; using {limit}",
                  file=sys.stderr)
            lowered[name] = limit
            continue
        raise UserError(f"--{name} {value} exceeds the model's max_position_embeddings {limit} "
                        f"({config_name}); use at most {limit} or a model with more positions")
    return resolved(settings, **lowered) if lowered else settings


__all__ = ["Settings", "SettingsError", "parse_command_line", "resolved", "resolve_epochs",
           "fit_lengths", "PRETRAIN", "FINETUNE", "EVAL", "TRAINING"]
