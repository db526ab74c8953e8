"""What every entry script does first, training or not (run_eval.py too): the process group, the run
folder's lock and provenance record (git_log.json), the device, the config with the command line's
overrides, the tokenizer. Nothing here
knows training (:mod:`bart.cli.builder` builds a training run on top of it)."""
from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch

from bart.cli.console import DISTRIBUTION
from bart.cli.parsing import resolved
from bart.cli.settings import Settings
from bart.configuration.configuration_bart import BartConfig
from bart.configuration.shipped import config_file
from bart.errors import UserError
from bart.files.checkpoint_io import CheckpointError
from bart.records import provenance
from bart.runtime import distributed as dist_utils


def seed_everything(seed: int, rank: int = 0) -> None:
    """Same seed for the model's initialisation on every rank; per-rank streams for dropout."""
    random.seed(seed + rank)
    np.random.seed(seed + rank)
    torch.manual_seed(seed)


def setup_distributed(args: Settings) -> dist_utils.DistributedEnv:
    env = dist_utils.read_env()
    if args.distributed.local_rank is not None and args.distributed.local_rank != env.local_rank:
        raise SystemExit(f"--local_rank {args.distributed.local_rank} disagrees with the launcher's LOCAL_RANK "
                         f"{env.local_rank}")
    # --affinity before the process group starts its threads, so that they inherit it
    if torch.cuda.is_available() and args.distributed.affinity != "disabled":
        dist_utils.set_cpu_affinity(args.distributed.affinity, env)
    elif args.distributed.affinity != "disabled" and "affinity" in args.given:
        print(f"note: --affinity {args.distributed.affinity} pins GPU processes near their GPU; this run has no GPU, "
              f"so its CPU affinity is left as it is", file=sys.stderr)
    return dist_utils.init_distributed(env, timeout_minutes=args.distributed.dist_timeout,
                                       rendezvous_timeout_s=args.distributed.rendezvous_timeout,
                                       heartbeat_timeout_s=args.distributed.heartbeat_timeout)


def lock_output_dir(folder: str, env: dist_utils.DistributedEnv, flag: str = "--output_dir", check=None) -> None:
    """One run per folder: rank 0 takes ``folder``'s run lock (:mod:`bart.runtime.run_lock`) before anything is
    written there, then runs ``check`` (a refusal of what the folder holds: raises a UserError); the other ranks
    wait for its decision and stop with it (exit 2 on every rank)."""
    from bart.runtime import run_lock

    if os.path.exists(folder) and not os.path.isdir(folder):  # every rank: the same one line
        raise UserError(f"output folder {folder} is a file; choose a folder (see --help)")
    def take_and_check():
        run_lock.acquire(folder, flag=flag)
        if check is not None:
            check()

    rank_zero_decides(env, take_and_check, refused=run_lock.RunLockBusy)


def rank_zero_decides(env: dist_utils.DistributedEnv, decide, errors=(UserError, OSError), refused=UserError) -> None:
    """``decide()`` runs on rank 0 and every rank ends with its outcome: rank 0 raises what it raised (one of
    ``errors``), the other ranks a ``refused`` naming it in one line; nothing raised, every rank goes on."""
    from bart.errors import one_line

    error = None
    if env.is_main:
        try:
            decide()
        except errors as err:
            error = err
    said = None if error is None else one_line(error)
    if env.distributed:
        said = dist_utils.all_gather_objects(said)[0]
    if error is not None:
        raise error
    if said:
        raise refused(f"rank 0 did not start the run: {said}")


def device_for(env: dist_utils.DistributedEnv) -> torch.device:
    return torch.device("cuda", env.local_rank % torch.cuda.device_count()) if torch.cuda.is_available() \
        else torch.device("cpu")


def begin_run(args: Settings, flag: str = "--config_path") -> Settings:
    """The first thing at run start, every rank: the process settings the flags ask for applied once
    (:func:`configure_process`), and ``config_path`` as a file: a shipped config's name
    (:mod:`bart.configuration.shipped`) as its file; an unknown name or a missing file one line listing the names."""
    configure_process(args)
    return resolved(args, config_path=config_file(args.model.config_path, flag))


def configure_process(args: Settings) -> None:
    """What the run's settings ask of the process, which parsing leaves alone: the hub cache (--cache_dir:
    HF_HUB_CACHE, which bart.hub and transformers read), no progress display (--progress_bar_refresh_rate 0:
    PROGRESS=off, which bart.records.progress reads) and cuDNN's benchmark and deterministic flags (--benchmark,
    --deterministic). A setting left unset leaves the process as it was."""
    if args.model.cache_dir:
        os.environ["HF_HUB_CACHE"] = args.model.cache_dir
    if args.logging.progress_bar_refresh_rate == 0:
        os.environ["PROGRESS"] = "off"
    for name, value in (("benchmark", args.model.cudnn_benchmark), ("deterministic", args.model.cudnn_deterministic)):
        if value is not None:
            setattr(torch.backends.cudnn, name, bool(value))


def model_config(args: Settings, training: bool = True) -> BartConfig:
    """The config file (``args.config_path``, as :func:`begin_run` left it) with the command line's overrides
    applied before the model is built.
    Training keeps fp32 parameters (autocast handles precision); evaluation keeps the file's dtype."""
    config = BartConfig.from_json_file(args.model.config_path)
    for key, value in (("dropout", args.model.dropout), ("attention_dropout", args.model.attention_dropout),
                       ("encoder_layerdrop", args.model.encoder_layerdrop),
                       ("decoder_layerdrop", args.model.decoder_layerdrop)):
        if value is not None:
            setattr(config, key, value)
    if args.model.pre_ln is not None:
        config.set_pre_ln(args.model.pre_ln)
    config.gradient_checkpointing = args.model.gradient_checkpointing
    if training:
        config.dtype = None
    config.validate()
    return config


def record_start(folder: str, world_size: int) -> str:
    """Rank 0: this start's provenance (commit, versions, GPUs, container, command line) appended to
    ``folder``/git_log.json (:mod:`bart.records.provenance`); a resume adds a record, never replaces one. The code's
    origin: the checkout's git state, or for an installed copy its version and the commit it was built from."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bart/
    origin = provenance.package_origin(DISTRIBUTION, package_dir)  # an installed copy: version, commit built from
    return provenance.append_start(folder, provenance.collect(os.path.dirname(package_dir), package=origin,
                                                              extra={"world_size": world_size}))


def tokenizer_for(args: Settings, candidates: list):
    """The tokenizer of the first of ``candidates`` (model paths, None: from scratch) whose checkpoint can be
    read (:func:`bart.tokenization.tokenizer_choice.choose_tokenizer` with ``--tokenizer`` / ``--allow_tokenizer_mismatch``);
    the last one's error when none can."""
    from bart.tokenization.tokenization_bart import BartTokenizer
    from bart.tokenization.tokenizer_choice import choose_tokenizer

    for i, candidate in enumerate(candidates):
        try:
            choice = choose_tokenizer(candidate, args.model.tokenizer,
                                      allow_mismatch=args.model.allow_tokenizer_mismatch)
            break
        except CheckpointError:
            if i == len(candidates) - 1:
                raise
    return BartTokenizer.from_pretrained(choice.path)
