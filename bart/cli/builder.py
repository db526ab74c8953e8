"""Building a run from parsed flags: the pieces pretrain.py and finetune.py share."""
from __future__ import annotations

import argparse
import os
import random
import sys

import numpy as np
import torch

from bart.configuration.configuration_bart import BartConfig
from bart.modeling.modeling_bart import BartForConditionalGeneration
from bart.optim import build_optimizer, build_scheduler, describe_optimizer
from bart.cli.args import write_run_config
from bart.training.float8 import convert_to_float8, float8_summary
from bart.training.trainer import Trainer, TrainerConfig, strategy_for
from utils import distributed as dist_utils, provenance
from utils.checkpoint_io import remove_stale_partials
from utils.dllogger_compat import Logger, drop_records_after
from utils.errors import UserError
from utils.metric_writers import build_writers, config_text


def seed_everything(seed: int, rank: int = 0) -> None:
    """Same seed for the model's initialisation on every rank; per-rank streams for dropout."""
    random.seed(seed + rank)
    np.random.seed(seed + rank)
    torch.manual_seed(seed)


def setup_distributed(args: argparse.Namespace) -> dist_utils.DistributedEnv:
    env = dist_utils.read_env()
    if args.local_rank is not None and args.local_rank != env.local_rank:
        raise SystemExit(f"--local_rank {args.local_rank} disagrees with the launcher's LOCAL_RANK {env.local_rank}")
    # --affinity before the process group starts its threads, so that they inherit it
    if torch.cuda.is_available() and args.affinity != "disabled":
        dist_utils.set_cpu_affinity(args.affinity, env)
    elif args.affinity != "disabled" and "affinity" in getattr(args, "_given", ()):
        print(f"note: --affinity {args.affinity} pins GPU processes near their GPU; this run has no GPU, so its "
              f"CPU affinity is left as it is", file=sys.stderr)
    return dist_utils.init_distributed(env, timeout_minutes=args.dist_timeout,
                                       rendezvous_timeout_s=args.rendezvous_timeout)


def lock_output_dir(folder: str, env: dist_utils.DistributedEnv, flag: str = "--output_dir") -> None:
    """One run per folder: rank 0 takes ``folder``'s run lock (:mod:`utils.run_lock`) before anything is
    written there; the other ranks wait for its decision and stop with it (exit 2 on every rank)."""
    from utils import run_lock
    from utils.errors import one_line

    error = None
    if env.is_main:
        try:
            run_lock.acquire(folder, flag=flag)
        except (UserError, OSError) as err:
            error = err
    refused = None if error is None else one_line(error)
    if env.distributed:
        refused = dist_utils.all_gather_objects(refused)[0]
    if error is not None:
        raise error
    if refused:
        raise run_lock.RunLockBusy(f"rank 0 did not start the run: {refused}")


def device_for(env: dist_utils.DistributedEnv) -> torch.device:
    return torch.device("cuda", env.local_rank % torch.cuda.device_count()) if torch.cuda.is_available() \
        else torch.device("cpu")


def compile_default(args: argparse.Namespace, device: torch.device) -> bool:
    """--compile / --no-compile as given; neither: on for CUDA training, off on CPU."""
    return args.compile if args.compile is not None else device.type == "cuda"


def model_config(args: argparse.Namespace, training: bool = True) -> BartConfig:
    """The config file with the command line's overrides applied before the model is built.
    Training keeps fp32 parameters (autocast handles precision); evaluation keeps the file's dtype."""
    config = BartConfig.from_json_file(args.config_path)
    for flag in ("dropout", "attention_dropout", "encoder_layerdrop", "decoder_layerdrop"):
        value = getattr(args, flag, None)
        if value is not None:
            setattr(config, flag, value)
    if getattr(args, "pre_ln", None) is not None:
        config.set_pre_ln(args.pre_ln)
    config.gradient_checkpointing = bool(getattr(args, "gradient_checkpointing", False))
    if training:
        config.dtype = None
    config.validate()
    return config


def check_lengths(args: argparse.Namespace, config: BartConfig, flags) -> None:
    """Token lengths must fit the model's positions. A length the user gave that does not fit is an
    error naming the flag; a default that does not fit is lowered to the model's positions, with a note."""
    limit = config.max_position_embeddings
    given = getattr(args, "_given", None)
    for flag in flags:
        value = getattr(args, flag, None)
        if value is None or value <= limit:
            continue
        if given is not None and flag not in given:
            print(f"note: --{flag} defaults to {value} but the model has {limit} positions; using {limit}",
                  file=sys.stderr)
            setattr(args, flag, limit)
            continue
        raise UserError(f"--{flag} {value} exceeds the model's max_position_embeddings {limit} "
                        f"({getattr(args, 'config_path', 'the config')}); use at most {limit} or a model with more positions")


def load_tokenizer(args: argparse.Namespace, model_path: str | None = None):
    """The tokenizer the starting weights were trained with (``model_path``; when resuming, the checkpoint
    resumed from), checked against ``--tokenizer`` / ``$TOKENIZER`` (``--allow_tokenizer_mismatch`` overrides);
    from scratch: ``--tokenizer``, else ``$TOKENIZER``, else ``$BART_DEFAULT_TOKENIZER``, else
    facebook/bart-large. See :mod:`bart.cli.tokenizer_choice`."""
    from bart.tokenization.tokenization_bart import BartTokenizer
    from bart.cli.tokenizer_choice import choose_tokenizer
    from bart.training.checkpoint import resumable_checkpoints
    from utils.checkpoint_io import CheckpointError

    allow = bool(getattr(args, "allow_tokenizer_mismatch", False))
    resume = getattr(args, "resume_from_checkpoint", None)
    candidates = [model_path]
    if model_path is None and isinstance(resume, str):
        candidates = [resume]
    elif model_path is None and resume:  # True: the newest readable training checkpoint, as the resume takes it
        candidates = [path for _, path in reversed(resumable_checkpoints(args.output_dir))] or [None]
    for i, candidate in enumerate(candidates):
        try:
            choice = choose_tokenizer(candidate, args.tokenizer, allow_mismatch=allow)
            break
        except CheckpointError:
            if i == len(candidates) - 1:
                raise
    return BartTokenizer.from_pretrained(choice.path)


def save_run_files(args: argparse.Namespace, tokenizer, config: BartConfig, world_size: int) -> None:
    """Rank 0: the resolved run configuration and the tokenizer next to the checkpoints, so that
    run_eval.py and bart.export find the tokenizer a checkpoint was trained with."""
    write_run_config(args, args.output_dir, {"world_size": world_size, "model_config": config.to_dict()})
    tokenizer.save_pretrained(args.output_dir)
    record_start(args.output_dir, world_size)


def record_start(folder: str, world_size: int) -> str:
    """Rank 0: this start's provenance (commit, versions, GPUs, container, command line) appended to
    ``folder``/git_log.json (:mod:`utils.provenance`); a resume adds a record, never replaces one."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return provenance.append_start(folder, provenance.collect(root, extra={"world_size": world_size}))


def build_model(args: argparse.Namespace, config: BartConfig, init_from: str | None = None) -> BartForConditionalGeneration:
    """A fresh model, or one holding ``init_from``'s weights (a local path: the entry scripts resolve hub ids
    first; strict; Pre-LN must match); under --fp8 with float8 linear layers (:mod:`bart.training.float8`)."""
    if init_from:
        model = BartForConditionalGeneration.from_pretrained(init_from, config=config)
    else:
        model = BartForConditionalGeneration(config)
    model.gradient_checkpointing_enable(config.gradient_checkpointing)
    if args.precision.uses_float8:  # the run's one Precision, made at parse time
        convert_to_float8(model, emulate=args.precision.emulate_fp8)
    return model.train()


def freeze_parameters(model: BartForConditionalGeneration, encoder: bool = False, embeddings: bool = False) -> None:
    """No gradients for the whole encoder and/or the token and position embeddings."""
    modules = []
    if embeddings:
        modules += [model.model.shared, model.model.encoder.embed_positions, model.model.decoder.embed_positions]
    if encoder:
        modules.append(model.model.encoder)
    for module in modules:
        for p in module.parameters():
            p.requires_grad = False


def build_trainer(args: argparse.Namespace, model, train_data, env, total_steps: int, eval_hook=None,
                  final_checkpoint_name: str | None = None, label_smoothing: float = 0.0) -> Trainer:
    """The trainer, its dllogger log and metric writers (TensorBoard, W&B; rank 0), and the start-of-run
    banner (printed, in run_config.json, in TensorBoard)."""
    device = device_for(env)
    model.to(device)
    config = TrainerConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, gradient_accumulation_steps=args.gradient_accumulation_steps,
        precision=args.precision, gradient_clip_val=args.gradient_clip_val, label_smoothing=label_smoothing,
        log_freq=args.log_freq, save_checkpoint_steps=args.save_checkpoint_steps, keep_checkpoints=args.keep_checkpoints,
        max_consecutive_nonfinite=args.max_consecutive_nonfinite, min_loss_scale=args.min_loss_scale, step_offset=args.phase1_end_step,
        val_check_interval=getattr(args, "val_check_interval", 0),
        allreduce_half_precision=args.allreduce_post_accumulation_half_precision, compile=compile_default(args, device),
        fused_cross_entropy=args.fused_cross_entropy, distributed_strategy=args.distributed_strategy,
        find_unused_parameters=bool(model.config.encoder_layerdrop or model.config.decoder_layerdrop),
        final_checkpoint_name=final_checkpoint_name,
        run_args={k: v for k, v in vars(args).items() if not k.startswith("_")})
    strategy = strategy_for(config, env.world_size, device)
    strategy.prepare(model)  # before the optimizer: FSDP replaces the parameters by shards
    optimizer, clips_internally = build_optimizer(
        model, "lamb" if args.lamb else "adamw", lr=args.learning_rate, weight_decay=args.weight_decay,
        betas=tuple(args.adam_betas), eps=args.adam_epsilon, max_grad_norm=args.gradient_clip_val,
        use_nvlamb=getattr(args, "use_nvlamb", False))
    scheduler = build_scheduler(optimizer, args.lr_scheduler, args.warmup_steps, total_steps, lr_end=args.lr_end)
    if env.is_main:
        for path, size in remove_stale_partials(args.output_dir):
            print(f"[checkpoint] removed {path} ({size / 2**20:.1f} MiB), left by a write that was killed midway",
                  file=sys.stderr)
    trainer = Trainer(model, optimizer, scheduler, train_data, config, clips_internally=clips_internally,
                      logger=Logger(None, rank=env.rank, stdout=False), eval_hook=eval_hook, device=device,
                      strategy=strategy)
    resumed_from = trainer.resume(args.resume_from_checkpoint) if args.resume_from_checkpoint else None
    json_path = args.json_summary or os.path.join(args.output_dir, "dllogger.json")
    if resumed_from and env.is_main:  # the log continues from the checkpoint's step: no step twice
        drop_records_after(json_path, trainer.global_step)
    trainer.logger = logger = Logger(json_path, rank=env.rank, append=bool(resumed_from))
    logger.metadata("loss", {"unit": "nat/token"})
    logger.metadata("seq/s", {"unit": "sequences/s"})
    resume_step = None
    if resumed_from:
        logger.log(step=trainer.global_step, data={"resumed_from": resumed_from})
        resume_step = trainer.global_step
    if env.is_main:
        banner = run_banner(args, trainer, env.world_size, data_rows(train_data, eval_hook))
        print("\n".join(["== run =="] + [f"  {k}: {v}" for k, v in banner.items()]), flush=True)
        resolved = write_run_config(args, args.output_dir, {"world_size": env.world_size, "run_banner": banner,
                                                             "model_config": model.config.to_dict()})
        tensorboard_dir = None if args.no_tensorboard else args.tensorboard_dir or os.path.join(args.output_dir,
                                                                                                  "tensorboard")
        logger.add_writers(build_writers(tensorboard_dir, args.wandb_project, args.output_dir, resolved, resume_step))
        logger.text("run_config", config_text(resolved))
        trainer.run_folder_check = watch_run_files(args.output_dir, json_path, tensorboard_dir)
    return trainer


def watch_run_files(output_dir: str, json_path: str, tensorboard_dir: str | None):
    """What the Trainer checks at its log and checkpoint writes (rank 0): the folder, the log, run_config.json,
    the tokenizer saved there, TensorBoard's folder and the run lock (see ``Trainer.run_folder_check``)."""
    from bart.hub import TOKENIZER_FILES
    from utils import run_lock

    lock = run_lock.held(output_dir)
    files = {os.path.basename(json_path): [json_path], "run_config.json": [os.path.join(output_dir, "run_config.json")],
             "tokenizer files": [os.path.join(output_dir, n) for n in TOKENIZER_FILES
                                 if os.path.isfile(os.path.join(output_dir, n))]}
    if tensorboard_dir and os.path.isdir(tensorboard_dir):
        files[os.path.basename(os.path.normpath(tensorboard_dir)) + "/"] = [tensorboard_dir]
    if lock is not None:
        files[run_lock.LOCK_NAME] = [lock.path]
    return run_lock.RunFolderWatch(output_dir, {k: v for k, v in files.items() if v}, lock)


def data_rows(train_data, eval_hook) -> dict:
    """Row counts of the training data (pretraining: the shards' rows less the held-out ones) and of validation."""
    dataset, rows = getattr(train_data, "dataset", None), {}
    if hasattr(dataset, "num_rows"):
        rows.update(train=dataset.num_rows - len(dataset.held_out), held_out=len(dataset.held_out))
    elif dataset is not None:
        rows["train"] = len(dataset)
    if hasattr(eval_hook, "sources"):
        rows["val"] = len(eval_hook.sources)
    return rows


def check_global_batch(args: argparse.Namespace, train_data, world_size: int) -> None:
    """A global batch (sequences per update) larger than the training data would silently hold fewer
    sequences than it says: refused in one line naming the rows and the batch, before anything is written.
    Token-budget batches (--max_tokens_per_batch) are sized by tokens, not sequences."""
    rows = data_rows(train_data, None).get("train")
    if rows is None or getattr(args, "max_tokens_per_batch", None):
        return
    accumulation = args.gradient_accumulation_steps
    per_update = args.train_batch_size * accumulation * world_size
    if per_update <= rows:
        return
    fits = rows // (accumulation * world_size)
    fix = (f"lower --train_batch_size to at most {fits}" if fits else
           "lower --gradient_accumulation_steps or the processes, or add data")
    raise UserError(f"a global batch of {per_update} sequences per update (--train_batch_size {args.train_batch_size} "
                    f"x {accumulation} accumulation x {world_size} processes) is larger than the {rows} training rows "
                    f"of {args.data_dir}: each update would hold fewer sequences than it says; {fix}")


def run_banner(args: argparse.Namespace, trainer: Trainer, world_size: int, data_rows: dict) -> dict:
    """The implementation choices in effect for this run (what ran, not only what was asked)."""
    if trainer.device.type == "cuda":
        kernels = [name for name, on in (("flash", torch.backends.cuda.flash_sdp_enabled()),
                                         ("mem_efficient", torch.backends.cuda.mem_efficient_sdp_enabled()),
                                         ("cudnn", torch.backends.cuda.cudnn_sdp_enabled()),
                                         ("math", torch.backends.cuda.math_sdp_enabled())) if on]
        attention = f"torch scaled_dot_product_attention, CUDA kernels enabled: {', '.join(kernels)}"
    else:
        attention = f"torch scaled_dot_product_attention on {trainer.device.type} (flash-attention CPU kernel or math)"
    precision = trainer.precision
    tf32 = torch.backends.cuda.matmul.allow_tf32 if trainer.device.type == "cuda" else "n/a (no CUDA)"
    per_update = args.train_batch_size * args.gradient_accumulation_steps * world_size
    max_tokens = getattr(args, "max_tokens_per_batch", None)
    if max_tokens:
        batch = f"token budget {max_tokens * args.gradient_accumulation_steps * world_size} source tokens per update"
    else:
        batch = (f"{per_update} sequences per update (at most {per_update * args.max_source_length} source tokens: "
                 f"{args.train_batch_size} x {args.gradient_accumulation_steps} accumulation x {world_size} processes)")
    return {
        "optimizer": describe_optimizer(trainer.optimizer),
        "attention": attention + (", gradient checkpointing" if trainer.model.config.gradient_checkpointing else ""),
        "precision": (f"{precision.name} (autocast {precision.autocast_dtype or 'off'}, loss scaling "
                      f"{'on' if trainer.scaler is not None else 'off'}, TF32 matmul {tf32}"
                      + (f", {float8_summary(trainer.model)})" if precision.uses_float8 else ")")),
        "compile": trainer.compilation is not None,
        "device": str(trainer.device),
        "world_size": world_size,
        "distribution": trainer.strategy.name,
        "global_batch": batch,
        "steps": (f"{trainer.config.max_steps} updates (numbered from {trainer.config.step_offset + 1}), warmup "
                  f"{args.warmup_steps}, {args.lr_scheduler} schedule"
                  + (f", resumed after {trainer.step}" if trainer.step else "")),
        "data_rows": data_rows,
    }

