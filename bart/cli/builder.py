"""Building a training run from its settings (:class:`bart.cli.settings.Settings`), the one owner of its
assembly: the environment and lock (:func:`start_run`), the tokenizer and model, the loaders and validation, the
strategy (built and prepared once, before the optimizer), optimizer, schedule and :class:`Trainer`; on top of
:mod:`bart.cli.start` (what every entry script does first). The run's ``Precision`` is the record's own, made
when the flags are parsed (``settings.precision``)."""
from __future__ import annotations

import json
import os
import sys

import torch

from bart.cli.args import write_run_config
from bart.cli.parsing import fit_lengths, resolve_warmup, resolved
from bart.cli.settings import Settings, table_files_folder
from bart.cli.start import (
    begin_run,
    device_for,
    lock_output_dir,
    model_config,
    rank_zero_decides,
    record_start,
    seed_everything,
    setup_distributed,
    tokenizer_for,
)
from bart.configuration.configuration_bart import BartConfig
from bart.errors import UserError
from bart.files.checkpoint_io import (
    CheckpointError,
    atomic_write_text,
    remove_stale_partials,
)
from bart.files.json_files import read_json
from bart.modeling.modeling_bart import BartForConditionalGeneration
from bart.optim import (
    TRAINING_BYTES,
    build_optimizer,
    build_scheduler,
    describe_optimizer,
)
from bart.records.dllogger_compat import Logger, drop_records_after
from bart.records.metric_writers import build_writers, config_text
from bart.runtime import distributed as dist_utils
from bart.runtime.memory import check_training_fits
from bart.tokenization.vocab_check import require_vocab_size
from bart.training.checkpoint import (
    earlier_run,
    remove_earlier_run,
    resolve_resume,
    resumable_checkpoints,
    stopped_before_a_checkpoint,
)
from bart.training.float8 import convert_to_float8, float8_summary
from bart.training.trainer import Trainer, strategy_for


def start_run(args: Settings) -> tuple[Settings, dist_utils.DistributedEnv]:
    """A training run's start: the process group, the output folder's lock (one run per folder, before
    anything is written there), the seeds, and ``--resume_from_checkpoint auto`` settled against the folder; before
    all of them, the process settings applied and ``--config_path`` as a file (:func:`begin_run`)."""
    args = begin_run(args)
    env = setup_distributed(args)
    lock_output_dir(args.checkpoints.output_dir, env)
    seed_everything(args.randomness.seed, env.rank)
    resume = args.checkpoints.resume_from_checkpoint
    if resume in ("auto", True):  # True when the folder holds a training checkpoint, else None
        args = resolved(args, resume_from_checkpoint=resolve_resume(resume, args.checkpoints.output_dir,
                                                                    announce=env.is_main))
    if not args.checkpoints.resume_from_checkpoint:
        claim_new_run_folder(args, env)
    elif args.data.auto_find_batch_size:
        args = batch_found_before(args, env)
    return args, env


def batch_found_before(args: Settings, env: dist_utils.DistributedEnv) -> Settings:
    """A resume under --auto_find_batch_size goes on with the batch its run found (run_config.json beside the
    checkpoint records it): a smaller per-process batch with the same global batch, where the command asks for
    the larger one it started from."""
    resume = args.checkpoints.resume_from_checkpoint
    folder = args.checkpoints.output_dir if resume is True else os.path.dirname(os.path.abspath(resume))
    found = read_json(os.path.join(folder, "run_config.json"), None) or {}
    batch, accumulation = found.get("train_batch_size"), found.get("gradient_accumulation_steps")
    if not (found.get("auto_find_batch_size") and isinstance(batch, int) and isinstance(accumulation, int)):
        return args
    asked = args.data.train_batch_size
    if batch >= asked or batch * accumulation != asked * args.optimization.gradient_accumulation_steps:
        return args
    if env.is_main:
        print(f"[auto_find_batch_size] resuming with batch {batch} x {accumulation} accumulation, the batch the run "
              f"found ({os.path.join(folder, 'run_config.json')})", flush=True)
    return resolved(args, train_batch_size=batch, gradient_accumulation_steps=accumulation)


def claim_new_run_folder(args: Settings, env: dist_utils.DistributedEnv) -> None:
    """A new run never starts over on top of another run's work: a folder holding another run's checkpoints is
    refused in one line (``earlier_run``: go on with --resume_from_checkpoint auto, or start over with
    --overwrite_output_dir); --overwrite_output_dir removes that run's files first (``remove_earlier_run``), so
    that nothing of it mixes with this run's. A folder whose run stopped before its first checkpoint (its log
    and records only: a kill, a stop signal, a requeue, a restart) is that run starting again, its log kept
    (:func:`start_log` appends to it). Rank 0 decides, every rank ends with its decision."""
    json_path = args.logging.json_summary or os.path.join(args.checkpoints.output_dir, "dllogger.json")

    def claim():
        if not args.checkpoints.overwrite_output_dir:
            refused = earlier_run(args.checkpoints.output_dir, json_path)
            if refused:
                raise UserError(refused)
            records = stopped_before_a_checkpoint(args.checkpoints.output_dir, json_path)
            if records and env.is_main:
                names = ", ".join(os.path.basename(p) for p in records[:4]) + (", ..." if len(records) > 4 else "")
                print(f"[checkpoint] {args.checkpoints.output_dir} holds the records of a run that stopped before its "
                      f"first checkpoint ({names}): starting it again from update 1; its log goes on", flush=True)
        else:
            keep = (args.checkpoints.init_checkpoint, args.model.tokenizer or os.environ.get("TOKENIZER"))
            removed = remove_earlier_run(args.checkpoints.output_dir, json_path, keep=keep)
            if removed:
                shown = ", ".join(os.path.basename(p.rstrip(os.sep)) for p in removed[:6])
                more = ", ..." if len(removed) > 6 else ""
                print(f"[checkpoint] --overwrite_output_dir: removed the earlier run's {len(removed)} file(s) from "
                      f"{args.checkpoints.output_dir} ({shown}{more}): starting a new run", flush=True)

    rank_zero_decides(env, claim, errors=(UserError, CheckpointError, OSError))


def start_log(json_path: str, rank: int, resumed_from: str | None, step: int) -> Logger:
    """The run's dllogger log. A resume goes on from the checkpoint's step (later records, written by the
    attempt that was interrupted after its last checkpoint, are dropped: no step twice) and records where it
    resumed from; a start into a log left by a run that stopped before its first checkpoint appends to it and
    records the new attempt (``{"attempt": N}`` at step 0), so that no record of the earlier one is lost."""
    earlier = not resumed_from and os.path.isfile(json_path) and os.path.getsize(json_path) > 0
    if (resumed_from or earlier) and rank == 0:  # a start again keeps every step: only a line a kill cut off goes
        drop_records_after(json_path, step if resumed_from else sys.maxsize)
    attempt = _attempts(json_path) + 1 if earlier else 1
    logger = Logger(json_path, rank=rank, append=bool(resumed_from) or earlier)
    logger.metadata("loss", {"unit": "nat/token"})
    logger.metadata("seq/s", {"unit": "sequences/s"})
    if resumed_from:
        logger.log(step=step, data={"resumed_from": resumed_from})
    elif earlier:
        logger.log(step=0, data={"attempt": attempt})
    return logger


def _attempts(json_path: str) -> int:
    """How many starts from update 1 a log holds (the first has no ``attempt`` record)."""
    from bart.records.dllogger_compat import read_dllogger

    marks = [r["data"]["attempt"] for r in read_dllogger(json_path)
             if r.get("type") == "LOG" and isinstance(r.get("data"), dict) and "attempt" in r["data"]]
    return max([1] + [m for m in marks if isinstance(m, int)])


DATA_SOURCE = "source.json"  # in OUTPUT_DIR/data: what --train_file ... / --dataset_name read (run_config.json's data_source)


def table_files_as_data_dir(args: Settings, env: dist_utils.DistributedEnv) -> Settings:
    """--train_file/--validation_file/--test_file or --dataset_name (transformers' flags): their rows written once
    (rank 0) as OUTPUT_DIR/data/{train,val,test}.source/.target, through the same checks as the recipe's own files,
    with what was read in OUTPUT_DIR/data/source.json (run_config.json's ``data_source``); that folder is the run's
    --data_dir from then on (run_config.json records it)."""
    files = {split: path for split, path in (("train", args.data.train_file), ("val", args.data.validation_file),
                                             ("test", args.data.test_file)) if path}
    if not files and not args.data.dataset_name:
        return args
    from bart.data.prepare_summarization import convert_dataset, convert_files

    folder = table_files_folder(args.checkpoints.output_dir)
    splits = ("train",) + ("val",) * (args.validation.n_val != 0) + ("test",) * bool(args.prediction.do_predict)

    def convert():
        try:
            if args.data.dataset_name:
                counts, read = convert_dataset(args.data.dataset_name, args.data.dataset_config_name, splits, folder,
                                               args.data.text_column, args.data.summary_column)
                config = read["dataset_config_name"]
                origin = args.data.dataset_name + (f" ({config})" if config not in (None, "default") else "")
            else:
                counts = convert_files(files, folder, args.data.text_column, args.data.summary_column)
                read, origin = {"files": files}, ", ".join(files.values())
        except ValueError as err:
            raise UserError(str(err)) from None
        atomic_write_text(os.path.join(folder, DATA_SOURCE), json.dumps(read, indent=1, sort_keys=True))
        print(f"[data] {', '.join(f'{split} {n}' for split, n in counts.items())} examples from {origin}, as {folder}",
              flush=True)

    rank_zero_decides(env, convert, errors=(UserError, OSError))
    return resolved(args, data_dir=folder)


def load_tokenizer(args: Settings, model_path: str | None = None):
    """The tokenizer the starting weights were trained with (``model_path``; when resuming, the checkpoint
    resumed from: with True the newest readable one, as the resume takes it), checked against ``--tokenizer`` /
    ``$TOKENIZER`` (``--allow_tokenizer_mismatch`` overrides); from scratch: ``--tokenizer``, else
    ``$TOKENIZER``, else ``$BART_DEFAULT_TOKENIZER``, else facebook/bart-large. See
    :mod:`bart.tokenization.tokenizer_choice`."""
    resume = args.checkpoints.resume_from_checkpoint
    candidates = [model_path]
    if model_path is None and isinstance(resume, str):
        candidates = [resume]
    elif model_path is None and resume:
        candidates = [path for _, path in reversed(resumable_checkpoints(args.checkpoints.output_dir))] or [None]
    return tokenizer_for(args, candidates)


def build_model_and_tokenizer(args: Settings, init_from: str | None, lengths) -> tuple:
    """(settings, tokenizer, model) of a training run: the tokenizer of the starting weights ``init_from`` (see
    :func:`load_tokenizer`), the config with the flags' overrides, the token ``lengths`` (flag names) fitted to
    its positions, the vocabulary checked against the tokenizer, the model built, its frozen parts and
    ``--source_prefix`` in its config."""
    tokenizer = load_tokenizer(args, init_from)
    config = model_config(args)
    args = fit_lengths(args, config.max_position_embeddings, lengths, args.model.config_path)
    require_vocab_size(tokenizer, config, config_name=args.model.config_path)
    model = build_model(args, config, init_from=init_from)
    freeze_parameters(model, encoder=args.optimization.freeze_encoder, embeddings=args.optimization.freeze_embeds)
    if args.data.prefix:  # --source_prefix: the model's own from now on (its checkpoints, the export, run_eval.py)
        model.config.prefix = args.data.prefix
    return args, tokenizer, model


def pretraining_loader(args: Settings, tokenizer, env: dist_utils.DistributedEnv):
    """pretrain.py's loader: LDDL shards with BART's noise (and the held-out rows of --n_val)."""
    from bart.data.pretraining_dataset import (
        build_pretraining_loader,  # LDDL imports transformers: seconds
    )
    return build_pretraining_loader(args.data.data_dir, tokenizer, args.data.train_batch_size,
                                    args.data.max_source_length, args.data.noise, seed=args.randomness.seed,
                                    num_workers=args.data.num_workers,
                                    local_rank=env.local_rank, n_val=args.validation.n_val or 0,
                                    shuffle_buffer_size=args.data.buffer_size,
                                    accumulation=args.optimization.gradient_accumulation_steps)


def finetuning_loader(args: Settings, tokenizer, env: dist_utils.DistributedEnv):
    """finetune.py's loader: the train split's batches for this rank (plain, length-grouped or token-budget)."""
    from bart.data.summarization import build_finetuning_loader
    return build_finetuning_loader(args.data.data_dir, tokenizer, args.data.max_source_length,
                                   args.data.max_target_length, args.data.train_batch_size, world_size=env.world_size,
                                   rank=env.rank, seed=args.randomness.seed, n_obs=args.data.n_train,
                                   sortish=args.data.sortish_sampler, max_tokens=args.data.max_tokens_per_batch,
                                   num_workers=args.data.num_workers, prefix=args.data.prefix or "",
                                   accumulation=args.optimization.gradient_accumulation_steps)


def finetuning_validation(args: Settings, tokenizer, gen_kwargs: dict):
    """finetune.py's validation (None with --n_val 0): the val split's metric, best-k and early stopping."""
    from bart.training.validation import Validation
    if args.validation.n_val == 0:
        return None
    validation = args.validation
    return Validation(args.data.data_dir, tokenizer, task=args.data.task, metric=validation.val_metric,
                      n_val=validation.n_val, max_source_length=args.data.max_source_length,
                      max_target_length=validation.val_max_target_length or args.data.max_target_length,
                      batch_size=args.generation.eval_batch_size, gen_kwargs=gen_kwargs,
                      output_dir=args.checkpoints.output_dir, save_top_k=validation.save_top_k,
                      early_stopping_patience=validation.early_stopping_patience, min_steps=args.schedule.min_steps,
                      early_stopping_threshold=validation.early_stopping_threshold, prefix=args.data.prefix or "")


def predict_test_split(args: Settings, trainer: Trainer, model, tokenizer, gen_kwargs: dict,
                       trained: str | None) -> dict:
    """finetune.py's --do_predict: the test split generated by the trained model (FSDP: its gathered weights, a
    collective), scored and written to --output_dir (``trained``: the weights file it names)."""
    from bart.evaluation import predict_split
    test_kwargs = dict(gen_kwargs, max_length=args.prediction.test_max_target_length or gen_kwargs.get("max_length")
                       or model.config.max_length)
    with trainer.strategy.whole_model(model) as whole:
        return predict_split(whole, tokenizer, args.data.data_dir, "test", args.checkpoints.output_dir, args.data.task,
                             args.generation.eval_batch_size, args.data.max_source_length, test_kwargs,
                             args.prediction.n_test, args.precision, trained=trained, prefix=args.data.prefix or "")


def hand_off_best(args: Settings, env: dist_utils.DistributedEnv) -> dict:
    """finetune.py after a run that validated, on rank 0: the best checkpoint as a Hugging Face folder (best_tfmr/,
    with its tokenizer) and, with --push_to_hub, that folder uploaded once; what was made, by name."""
    from bart.export import export_best
    from bart.hub import push_folder
    best = export_best(args.checkpoints.output_dir) if env.is_main else None
    if not best:
        return {}
    made = {"best_tfmr": best["out_dir"]}
    if args.hub.push_to_hub:  # once, at the end, the verified folder
        made["hub_url"] = push_folder(best["out_dir"], args.hub.push_to_hub, private=args.hub.hub_private_repo)
        print(f"pushed {best['out_dir']} to {made['hub_url']}", flush=True)
    return made


def save_run_files(args: Settings, tokenizer, world_size: int) -> None:
    """Rank 0, once a resume is accepted: the tokenizer next to the checkpoints (so that run_eval.py and
    bart.export find the tokenizer a checkpoint was trained with) and this start in the provenance record."""
    if tokenizer is not None:
        tokenizer.save_pretrained(args.checkpoints.output_dir)
    record_start(args.checkpoints.output_dir, world_size)


def build_model(args: Settings, config: BartConfig, init_from: str | None = None) -> BartForConditionalGeneration:
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


def compile_default(args: Settings, device: torch.device) -> bool:
    """--compile / --no-compile as given; neither: on for CUDA training, off on CPU."""
    return args.model.compile if args.model.compile is not None else device.type == "cuda"


def build_trainer(args: Settings, model, train_data, env, total_steps: int, eval_hook=None,
                  final_checkpoint_name: str | None = None, varying_lengths: bool = False, tokenizer=None,
                  loader_for=None) -> Trainer:
    """The trainer over the run's settings, its strategy (built and prepared here, once, before the optimizer),
    optimizer and schedule, its dllogger log and metric writers (TensorBoard, W&B; rank 0), and the start-of-run
    banner (printed, in run_config.json, in TensorBoard). The run's files (``tokenizer``'s copy, the start's
    record, the log, run_config.json) are written once the resume, if any, was accepted: a refused one writes
    nothing. ``loader_for``: the training loader of a settings' batch (--auto_find_batch_size rebuilds it; the
    batch it finds is written to run_config.json again)."""
    if args.data.auto_find_batch_size and args.data.max_tokens_per_batch:
        raise UserError("--auto_find_batch_size halves --train_batch_size, but --max_tokens_per_batch sizes the "
                        "batches by tokens: lower --max_tokens_per_batch instead, or drop one of them")
    args = resolve_warmup(args, total_steps)  # --warmup_ratio / a fraction: updates, as the record keeps them
    device = device_for(env)
    model.to(device)
    layerdrop = bool(model.config.encoder_layerdrop or model.config.decoder_layerdrop)
    strategy = strategy_for(args, env.world_size, device, model, find_unused_parameters=layerdrop)
    if device.type == "cpu":  # before the gradients and optimizer state: over a cgroup's limit the kernel kills
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        sharded = env.world_size if args.distributed.distributed_strategy == "fsdp" and env.world_size > 1 else 1
        check_training_fits(trainable // sharded, TRAINING_BYTES[args.optimization.optim], env.local_world_size)
    optimization, schedule = args.optimization, args.schedule
    optimizer, clips_internally = build_optimizer(
        model, optimization.optim, lr=optimization.learning_rate, weight_decay=optimization.weight_decay,
        betas=tuple(optimization.adam_betas), eps=optimization.adam_epsilon,
        max_grad_norm=optimization.gradient_clip_val, use_nvlamb=optimization.use_nvlamb)
    scheduler = build_scheduler(optimizer, schedule.lr_scheduler, schedule.warmup_steps, total_steps,
                                lr_end=schedule.lr_end)
    if env.is_main:
        for path, size in remove_stale_partials(args.checkpoints.output_dir):
            print(f"[checkpoint] removed {path} ({size / 2**20:.1f} MiB), left by a write that was killed midway",
                  file=sys.stderr)
    trainer = Trainer(model, optimizer, scheduler, train_data, args, strategy=strategy,
                      clips_internally=clips_internally, logger=Logger(None, rank=env.rank, stdout=False),
                      eval_hook=eval_hook, device=device, compile=compile_default(args, device),
                      varying_lengths=varying_lengths,
                      final_checkpoint_name=final_checkpoint_name,
                      loader_for=loader_for if args.data.auto_find_batch_size else None)
    resume = args.checkpoints.resume_from_checkpoint
    resumed_from = trainer.resume(resume) if resume else None
    if env.is_main:
        save_run_files(args, tokenizer, env.world_size)
    json_path = args.logging.json_summary or os.path.join(args.checkpoints.output_dir, "dllogger.json")
    trainer.logger = logger = start_log(json_path, env.rank, resumed_from, trainer.global_step)
    resume_step = trainer.global_step if resumed_from else None
    if env.is_main:
        banner = run_banner(args, trainer, env.world_size, data_rows(train_data, eval_hook))
        print("\n".join(["== run =="] + [f"  {k}: {v}" for k, v in banner.items()]), flush=True)
        output_dir = args.checkpoints.output_dir
        source = read_json(os.path.join(args.data.data_dir, DATA_SOURCE), None) \
            if args.data.data_dir == table_files_folder(output_dir) else None

        def record(settings: Settings, banner: dict) -> dict:
            return write_run_config(settings.as_dict(), settings.checkpoints.output_dir, {
                "world_size": env.world_size, "run_banner": banner, "model_config": model.config.to_dict(),
                **({"data_source": source} if source else {})})

        resolved = record(args, banner)
        trainer.batch_found = lambda found: record(found, run_banner(found, trainer, env.world_size,
                                                                     data_rows(trainer.train_data, eval_hook)))
        tensorboard_dir = None if args.logging.no_tensorboard else \
            args.logging.tensorboard_dir or os.path.join(output_dir, "tensorboard")
        logger.add_writers(build_writers(tensorboard_dir, args.logging.wandb_project, output_dir, resolved,
                                         resume_step))
        logger.text("run_config", config_text(resolved))
        trainer.run_folder_check = watch_run_files(output_dir, json_path, tensorboard_dir)
    return trainer


def watch_run_files(output_dir: str, json_path: str, tensorboard_dir: str | None):
    """What the Trainer checks at its log and checkpoint writes (rank 0): the folder, the log, run_config.json,
    the tokenizer saved there, TensorBoard's folder and the run lock (see ``Trainer.run_folder_check``)."""
    from bart.hub import TOKENIZER_FILES
    from bart.runtime import run_lock

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


def check_global_batch(args: Settings, train_data, world_size: int) -> None:
    """A global batch (sequences per update) larger than the training data would silently hold fewer
    sequences than it says: refused in one line naming the rows and the batch, before anything is written.
    Token-budget batches (--max_tokens_per_batch) are sized by tokens, not sequences."""
    rows = data_rows(train_data, None).get("train")
    if rows is None or args.data.max_tokens_per_batch:
        return
    accumulation = args.optimization.gradient_accumulation_steps
    per_update = args.data.train_batch_size * accumulation * world_size
    if per_update <= rows:
        return
    fits = rows // (accumulation * world_size)
    fix = (f"lower --train_batch_size to at most {fits}" if fits else
           "lower --gradient_accumulation_steps or the processes, or add data")
    raise UserError(f"a global batch of {per_update} sequences per update (--train_batch_size "
                    f"{args.data.train_batch_size} x {accumulation} accumulation x {world_size} processes) is larger "
                    f"than the {rows} training rows of {args.data.data_dir}: each update would hold fewer sequences "
                    f"than it says; {fix}")


def run_banner(args: Settings, trainer: Trainer, world_size: int, data_rows: dict) -> dict:
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
    accumulation = args.optimization.gradient_accumulation_steps
    per_update = args.data.train_batch_size * accumulation * world_size
    max_tokens = args.data.max_tokens_per_batch
    if max_tokens:
        batch = f"token budget {max_tokens * accumulation * world_size} source tokens per update"
    else:
        batch = (f"{per_update} sequences per update (at most {per_update * args.data.max_source_length} source "
                 f"tokens: {args.data.train_batch_size} x {accumulation} accumulation x {world_size} processes)")
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
        "steps": (f"{args.schedule.max_steps} updates (numbered from {args.checkpoints.phase1_end_step + 1}), warmup "
                  f"{args.schedule.warmup_steps}, {args.schedule.lr_scheduler} schedule"
                  + (f", resumed after {trainer.step}" if trainer.step else "")),
        "data_rows": data_rows,
        **({"resumed with changes": "; ".join(f"{name} {change}" for name, change in trainer.resume_changes.items())}
           if trainer.resume_changes else {}),
    }

