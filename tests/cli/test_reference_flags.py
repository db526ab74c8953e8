"""The reference recipe's command lines: every flag of NVIDIA's BART ``pretrain.py``, ``finetune.py`` and
``run_eval.py`` works with the reference's meaning or is refused in one line naming its replacement, and the
table of docs/REFERENCE_FLAGS.md lists exactly those flags.

The flag lists below were read from the reference's source (DeepLearningExamples, PyTorch/LanguageModeling/BART):
``training_base.py`` (``BaseTransformer.add_model_specific_args``, ``add_generic_args``), ``pretrain.py``,
``finetune.py`` and ``run_eval.py`` at the current commit, and the first release's ``finetune.py``
(a8607016), which added ``pl.Trainer.add_argparse_args``: every ``Trainer.__init__`` argument of PyTorch
Lightning 1.1.5 (the version its Dockerfile pinned) whose type includes str, int, float or bool. They are
written out here; the test never reads the reference.
"""
import operator
import os
import re
import shlex
import subprocess
import sys
from dataclasses import FrozenInstanceError
from types import SimpleNamespace

import pytest
import torch

from bart.files.checkpoint_io import safe_load
from bart.runtime.precision import Precision
from tests.helpers import ROOT

FLAGS_DOC = open(os.path.join(ROOT, "docs", "REFERENCE_FLAGS.md"), encoding="utf-8").read()
PT, FT, EV = "pretrain.py", "finetune.py", "run_eval.py"

TRAINING_BASE = """--config_path --cache_dir --resume_from_checkpoint --encoder_layerdrop --decoder_layerdrop --dropout
--attention_dropout --learning_rate --lr_scheduler --weight_decay --gradient_clip_val --adam_epsilon --max_steps
--warmup_steps --num_workers --min_num_train_epochs --train_batch_size --eval_batch_size --adafactor --lamb --affinity
--allreduce_post_accumulation_half_precision""".split()
GENERIC = """--output_dir --fp16 --bf16 --n_tpu_cores --max_grad_norm --do_train --do_predict --gradient_accumulation_steps
--seed --data_dir --log_freq --save_checkpoint_steps --profile --pre_ln""".split()
PRETRAIN_OWN = """--max_source_length --load_model_weights_only --freeze_encoder --freeze_embeds --logger_name --n_train
--buffer_size --task --label_smoothing --mlm_probability --permute_sentence_ratio --src_lang --tgt_lang
--early_stopping_patience --local_rank --json-summary""".split()
FINETUNE_OWN = """--max_source_length --max_target_length --val_max_target_length --test_max_target_length
--freeze_encoder --freeze_embeds --sortish_sampler --max_tokens_per_batch --logger_name --n_train --n_val --n_test
--task --label_smoothing --src_lang --tgt_lang --eval_beams --val_metric --eval_max_gen_length --save_top_k
--early_stopping_patience --json-summary --distill --layers --do_encoder --do_decoder --local_rank --gpus
--load_model_weights_only""".split()
LIGHTNING_1_1_5 = """--logger --checkpoint_callback --default_root_dir --gradient_clip_val --process_position --num_nodes
--num_processes --gpus --auto_select_gpus --tpu_cores --log_gpu_memory --progress_bar_refresh_rate --overfit_batches
--track_grad_norm --check_val_every_n_epoch --fast_dev_run --accumulate_grad_batches --max_epochs --min_epochs
--max_steps --min_steps --limit_train_batches --limit_val_batches --limit_test_batches --val_check_interval
--flush_logs_every_n_steps --log_every_n_steps --accelerator --sync_batchnorm --precision --weights_summary
--weights_save_path --num_sanity_val_steps --truncated_bptt_steps --resume_from_checkpoint --profiler --benchmark
--deterministic --reload_dataloaders_every_epoch --auto_lr_find --replace_sampler_ddp --terminate_on_nan
--auto_scale_batch_size --prepare_data_per_node --plugins --amp_backend --amp_level --distributed_backend
--automatic_optimization --move_metrics_to_cpu --enable_pl_optimizer""".split()
RUN_EVAL = """--type_path --device --prefix --task --bs --n_obs --num_return_sequences --fp16 --bf16 --dump-args --info
--eval_max_gen_length --eval_beams --max_source_length --max_target_length --sync_timeout --debug --json-summary
--distill --layers --do_encoder --do_decoder --pre_ln --local_rank""".split()
REFERENCE = {PT: set(TRAINING_BASE + GENERIC + PRETRAIN_OWN),
             FT: set(TRAINING_BASE + GENERIC + FINETUNE_OWN + LIGHTNING_1_1_5),
             EV: set(RUN_EVAL)}
assert len(LIGHTNING_1_1_5) == 51


def readme_table() -> dict:
    """{flag: {script: status}} from docs/REFERENCE_FLAGS.md's table (empty cells: not a flag of that script)."""
    section = FLAGS_DOC.split("\n## The table", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        flag = cells[0].strip("`")
        assert flag not in rows, f"{flag} twice in the table"
        rows[flag] = {script: cell for script, cell in zip((PT, FT, EV), cells[1:]) if cell}
    return rows


TABLE = readme_table()
CELLS = [(flag, script, status) for flag, cells in TABLE.items() for script, status in cells.items()]


def replacement(status: str) -> str:
    """The first word of the first `backticked` text after "refused": what the one line must name."""
    after = status.split("refused", 1)[1]
    found = re.search(r"`([^`]+)`", after)
    assert found, f"a refused status names no replacement in backticks: {status}"
    return found.group(1).split()[0]


# -- parsing in-process --------------------------------------------------------------------------------
def _parse(script: str, argv: list[str]):
    import finetune
    import pretrain
    import run_eval
    if any(a.startswith(("--load_model_weights_only", "--init_checkpoint", "--model_name_or_path")) for a in argv):
        argv = [a for a in argv if a != "--from_scratch"]  # _base's --from_scratch contradicts starting weights
    return {PT: pretrain, FT: finetune, EV: run_eval}[script].parse_args(argv)


def _base(script: str, out: str) -> list[str]:
    if script == EV:
        return ["model.ckpt", "config.json", "data", out]
    base = ["--config_path", "config.json", "--data_dir", "data", "--max_steps", "3", "--output_dir", out]
    return base + (["--from_scratch"] if script == FT else [])


@pytest.fixture(autouse=True)
def _restore_globals(monkeypatch):
    """Flags that set process state (HF_HUB_CACHE, PROGRESS, cudnn) leave it as it was; no launcher."""
    for name in ("HF_HUB_CACHE", "PROGRESS", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.setenv(name, "")  # noted, so that the test's end removes what a flag set (delenv alone notes
        monkeypatch.delenv(name)      # nothing where the variable was absent)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", torch.backends.cudnn.deterministic)


def _launch(monkeypatch, gpus: int = 0, local: int = 1, nodes: int = 1) -> None:
    """As if torchrun started ``local`` processes on each of ``nodes`` nodes that each see ``gpus`` GPUs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    if local * nodes > 1:
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("LOCAL_RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", str(local * nodes))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local))


# Working values: flag -> (argv, {attribute: value after parsing}, launch); (flag, script) keys override.
WORKS = {
    "--config_path": (["--config_path", "other.json"], {"model.config_path": "other.json"}),
    "--cache_dir": (["--cache_dir", "/tmp/hub_cache"], {"model.cache_dir": "/tmp/hub_cache"}),
    "--resume_from_checkpoint": (["--resume_from_checkpoint", "True"], {"checkpoints.resume_from_checkpoint": True}),
    "--encoder_layerdrop": (["--encoder_layerdrop", "0.1"], {"model.encoder_layerdrop": 0.1}),
    "--decoder_layerdrop": (["--decoder_layerdrop", "0.1"], {"model.decoder_layerdrop": 0.1}),
    "--dropout": (["--dropout", "0.2"], {"model.dropout": 0.2}),
    "--attention_dropout": (["--attention_dropout", "0.1"], {"model.attention_dropout": 0.1}),
    "--learning_rate": (["--learning_rate=1e-4"], {"optimization.learning_rate": 1e-4}),
    "--lr_scheduler": (["--lr_scheduler", "cosine_w_restarts"], {"schedule.lr_scheduler": "cosine_w_restarts"}),
    "--weight_decay": (["--weight_decay", "0.1"], {"optimization.weight_decay": 0.1}),
    "--gradient_clip_val": (["--gradient_clip_val=0.1"], {"optimization.gradient_clip_val": 0.1}),
    "--adam_epsilon": (["--adam_epsilon", "1e-6"], {"optimization.adam_epsilon": 1e-6}),
    "--max_steps": (["--max_steps", "7"], {"schedule.max_steps": 7}),
    "--warmup_steps": (["--warmup_steps", "2"], {"schedule.warmup_steps": 2}),
    "--num_workers": (["--num_workers", "4"], {"data.num_workers": 4}),
    "--min_num_train_epochs": (["--min_num_train_epochs", "0"], {"schedule.min_epochs": 0}),
    ("--min_num_train_epochs", FT): (["--min_num_train_epochs", "2"], {"schedule.min_epochs": 2}),
    "--train_batch_size": (["--train_batch_size=40"], {"data.train_batch_size": 40}),
    "--eval_batch_size": (["--eval_batch_size=16"], {"generation.eval_batch_size": 16}),
    "--lamb": (["--lamb"], {"optimization.optim": "lamb"}),
    "--affinity": (["--affinity", "disabled"], {"distributed.affinity": "disabled"}),
    "--allreduce_post_accumulation_half_precision": (["--allreduce_post_accumulation_half_precision"],
                                                     {"distributed.allreduce_post_accumulation_half_precision": True}),
    "--output_dir": ([], {}),  # the base command line gives it
    "--fp16": (["--fp16"], {"precision_flags.fp16": True}),
    "--bf16": (["--bf16"], {"precision_flags.bf16": True}),
    "--max_grad_norm": (["--max_grad_norm", "0.5"], {"optimization.gradient_clip_val": 0.5}),
    "--do_train": (["--do_train"], {"prediction.do_train": True}),
    "--do_predict": (["--do_predict"], {"prediction.do_predict": True}),
    "--gradient_accumulation_steps": (["--gradient_accumulation_steps=4"],
                                      {"optimization.gradient_accumulation_steps": 4}),
    "--seed": (["--seed", "7"], {"randomness.seed": 7}),
    "--data_dir": (["--data_dir=other"], {"data.data_dir": "other"}),
    "--log_freq": (["--log_freq=5"], {"logging.log_freq": 5}),
    "--save_checkpoint_steps": (["--save_checkpoint_steps=5"], {"checkpoints.save_checkpoint_steps": 5}),
    "--pre_ln": (["--pre_ln"], {"model.pre_ln": True}),
    "--max_source_length": (["--max_source_length=64"], {"data.max_source_length": 64}),
    "--max_target_length": (["--max_target_length=24"], {"data.max_target_length": 24}),
    ("--max_target_length", EV): (["--max_target_length=24"], {"generation.eval_max_gen_length": 24}),
    "--val_max_target_length": (["--val_max_target_length=24"], {"validation.val_max_target_length": 24}),
    "--test_max_target_length": (["--test_max_target_length=24"], {"prediction.test_max_target_length": 24}),
    "--load_model_weights_only": (["--resume_from_checkpoint=phase1/_step95040.ckpt", "--load_model_weights_only"],
                                  {"checkpoints.init_checkpoint": "phase1/_step95040.ckpt",
                                   "checkpoints.resume_from_checkpoint": None}),
    "--freeze_encoder": (["--freeze_encoder"], {"optimization.freeze_encoder": True}),
    "--freeze_embeds": (["--freeze_embeds"], {"optimization.freeze_embeds": True}),
    "--sortish_sampler": (["--sortish_sampler"], {"data.sortish_sampler": True}),
    "--max_tokens_per_batch": (["--max_tokens_per_batch", "4096"], {"data.max_tokens_per_batch": 4096}),
    "--logger_name": (["--logger_name", "default"], {}),
    "--n_train": (["--n_train", "-1"], {"data.n_train": None}),
    "--n_val": (["--n_val", "-1"], {"validation.n_val": None}),
    "--n_test": (["--n_test", "-1"], {"prediction.n_test": None}),
    "--buffer_size": (["--buffer_size", "128"], {"data.buffer_size": 128}),
    "--task": (["--task", "translation"], {"data.task": "translation"}),
    ("--task", PT): (["--task", "pretraining"], {"data.task": "pretraining"}),
    "--label_smoothing": (["--label_smoothing", "0.1"], {"loss.label_smoothing": 0.1}),
    "--mlm_probability": (["--mlm_probability", "0.3"], {"data.noise.mlm_probability": 0.3}),
    "--permute_sentence_ratio": (["--permute_sentence_ratio", "1.0"], {"data.noise.permute_sentence_ratio": 1.0}),
    "--src_lang": (["--src_lang", ""], {}),
    "--tgt_lang": (["--tgt_lang", ""], {}),
    "--eval_beams": (["--eval_beams", "0"], {"generation.eval_beams": 1}),
    ("--eval_beams", EV): (["--eval_beams=0", "--num_return_sequences", "3"], {"generation.eval_beams": 3}),
    "--val_metric": (["--val_metric", "loss"], {"validation.val_metric": "loss"}),
    "--eval_max_gen_length": (["--eval_max_gen_length=60"], {"generation.eval_max_gen_length": 60}),
    "--save_top_k": (["--save_top_k", "2"], {"validation.save_top_k": 2}),
    "--early_stopping_patience": (["--early_stopping_patience", "-1"], {"validation.early_stopping_patience": -1}),
    ("--early_stopping_patience", FT): (["--early_stopping_patience=0", "--val_check_interval", "10"],
                                        {"validation.early_stopping_patience": 1}),
    "--local_rank": (["--local_rank", "0"], {"distributed.local_rank": 0}),
    "--json-summary": (["--json-summary", "log.json"], {"logging.json_summary": "log.json"}),
    "--gpus": (["--gpus", "8"], {}, dict(gpus=8, local=8)),
    "--type_path": (["--type_path", "val"], {"evaluation.type_path": "val"}),
    "--device": (["--device", "cpu"], {"evaluation.device": "cpu"}),
    "--prefix": (["--prefix", "summarize: "], {"data.prefix": "summarize: "}),
    "--bs": (["--bs", "4"], {"generation.eval_batch_size": 4}),
    "--n_obs": (["--n_obs", "10"], {"evaluation.n_obs": 10}),
    "--num_return_sequences": (["--num_return_sequences", "2", "--eval_beams", "2"],
                               {"evaluation.num_return_sequences": 2}),
    "--dump-args": (["--dump-args"], {"evaluation.dump_args": True}),
    "--info": (["--info"], {}),
    "--sync_timeout": (["--sync_timeout", "600"], {"distributed.dist_timeout": 10.0}),
    "--debug": (["--debug"], {"evaluation.debug": True}),
    "--logger": (["--logger", "true"], {}),
    "--checkpoint_callback": (["--checkpoint_callback"], {}),
    "--process_position": (["--process_position", "0"], {}),
    "--num_nodes": (["--num_nodes", "2"], {}, dict(gpus=8, local=8, nodes=2)),
    "--num_processes": (["--num_processes", "2"], {}, dict(local=2)),
    "--auto_select_gpus": (["--auto_select_gpus", "false"], {}),
    "--log_gpu_memory": (["--log_gpu_memory", "min_max"], {}),
    "--progress_bar_refresh_rate": (["--progress_bar_refresh_rate", "1"], {"logging.progress_bar_refresh_rate": 1}),
    "--overfit_batches": (["--overfit_batches", "0"], {}),
    "--track_grad_norm": (["--track_grad_norm", "2"], {}),
    "--check_val_every_n_epoch": (["--check_val_every_n_epoch", "2"], {"validation.val_check_interval": 2.0}),
    "--fast_dev_run": (["--fast_dev_run", "false"], {}),
    "--accumulate_grad_batches": (["--accumulate_grad_batches", "4"], {"optimization.gradient_accumulation_steps": 4}),
    "--max_epochs": (["--max_epochs", "1"], {"schedule.max_epochs": 1}),
    "--min_epochs": (["--min_epochs=0"], {"schedule.min_epochs": 0}),
    "--min_steps": (["--min_steps", "5"], {"schedule.min_steps": 5}),
    "--limit_train_batches": (["--limit_train_batches", "1.0"], {}),
    "--limit_val_batches": (["--limit_val_batches", "1.0"], {}),
    "--limit_test_batches": (["--limit_test_batches", "1.0"], {}),
    "--val_check_interval": (["--val_check_interval", "0.25"], {"validation.val_check_interval": 0.25}),
    "--flush_logs_every_n_steps": (["--flush_logs_every_n_steps", "100"], {}),
    "--log_every_n_steps": (["--log_every_n_steps", "50"], {"logging.log_freq": 50}),
    "--accelerator": (["--accelerator", "ddp"], {"distributed.distributed_strategy": "ddp"}),
    "--sync_batchnorm": (["--sync_batchnorm"], {}),
    "--precision": (["--precision", "16"],
                    {"precision_flags.fp16": True, "precision": Precision("fp16")}),  # the run's one Precision
    "--weights_summary": (["--weights_summary", "top"], {"logging.weights_summary": "top"}),
    "--num_sanity_val_steps": (["--num_sanity_val_steps=0"], {"validation.num_sanity_val_steps": 0}),
    "--profiler": (["--profiler", "false"], {}),
    "--benchmark": (["--benchmark"], {"model.cudnn_benchmark": True}),
    "--deterministic": (["--deterministic", "true"], {"model.cudnn_deterministic": True}),
    "--reload_dataloaders_every_epoch": (["--reload_dataloaders_every_epoch", "false"], {}),
    "--auto_lr_find": (["--auto_lr_find", "false"], {}),
    "--replace_sampler_ddp": (["--replace_sampler_ddp", "true"], {}),
    "--terminate_on_nan": (["--terminate_on_nan"], {"optimization.max_consecutive_nonfinite": 1}),
    "--auto_scale_batch_size": (["--auto_scale_batch_size", "false"], {}),
    "--prepare_data_per_node": (["--prepare_data_per_node", "true"], {}),
    "--amp_backend": (["--amp_backend", "native"], {}),
    "--amp_level": (["--amp_level=O1", "--fp16"], {"precision_flags.fp16": True}),
    "--distributed_backend": (["--distributed_backend", "ddp"], {"distributed.distributed_strategy": "ddp"}),
    "--automatic_optimization": (["--automatic_optimization", "true"], {}),
    "--move_metrics_to_cpu": (["--move_metrics_to_cpu", "true"], {}),
    "--enable_pl_optimizer": (["--enable_pl_optimizer", "false"], {}),
}

# Refused values: flag -> (argv, launch); (flag, script) keys override.
REFUSED = {
    "--min_num_train_epochs": (["--min_num_train_epochs", "2"],),
    "--adafactor": (["--adafactor"],),
    "--n_tpu_cores": (["--n_tpu_cores", "8"],),
    "--do_predict": (["--do_predict"],),
    "--profile": (["--profile"],),
    "--load_model_weights_only": (["--load_model_weights_only"],),
    "--logger_name": (["--logger_name", "wandb"],),
    "--n_train": (["--n_train", "100"],),
    "--task": (["--task", "summarization"],),
    ("--task", FT): (["--task", "pretraining"],),
    "--src_lang": (["--src_lang", "en_XX"],),
    "--tgt_lang": (["--tgt_lang", "ro_RO"],),
    "--early_stopping_patience": (["--early_stopping_patience", "2"],),
    "--distill": (["--distill", "sft", "--layers", "0-6-11", "--do_encoder"],),
    "--layers": (["--layers", "0-6-11"],),
    "--do_encoder": (["--do_encoder"],),
    "--do_decoder": (["--do_decoder"],),
    "--gpus": (["--gpus", "8"], dict(gpus=8, local=1)),
    "--logger": (["--logger", "false"],),
    "--checkpoint_callback": (["--checkpoint_callback", "false"],),
    "--default_root_dir": (["--default_root_dir", "runs"],),
    "--process_position": (["--process_position", "1"],),
    "--num_nodes": (["--num_nodes", "2"],),
    "--num_processes": (["--num_processes", "8"],),
    "--auto_select_gpus": (["--auto_select_gpus"],),
    "--tpu_cores": (["--tpu_cores", "8"],),
    "--overfit_batches": (["--overfit_batches", "10"],),
    "--track_grad_norm": (["--track_grad_norm", "inf"],),
    "--fast_dev_run": (["--fast_dev_run"],),
    "--limit_train_batches": (["--limit_train_batches", "0.1"],),
    "--limit_val_batches": (["--limit_val_batches", "2"],),
    "--limit_test_batches": (["--limit_test_batches", "10"],),
    "--accelerator": (["--accelerator", "dp"],),
    "--precision": (["--precision", "64"],),
    "--weights_save_path": (["--weights_save_path", "ckpts"],),
    "--num_sanity_val_steps": (["--num_sanity_val_steps", "2"],),
    "--truncated_bptt_steps": (["--truncated_bptt_steps", "2"],),
    "--profiler": (["--profiler", "simple"],),
    "--reload_dataloaders_every_epoch": (["--reload_dataloaders_every_epoch"],),
    "--auto_lr_find": (["--auto_lr_find"],),
    "--replace_sampler_ddp": (["--replace_sampler_ddp", "false"],),
    "--auto_scale_batch_size": (["--auto_scale_batch_size", "binsearch"],),
    "--plugins": (["--plugins", "ddp_sharded"],),
    "--amp_backend": (["--amp_backend", "apex"],),
    "--amp_level": (["--amp_level", "O2"],),
    "--distributed_backend": (["--distributed_backend", "horovod"],),
    "--automatic_optimization": (["--automatic_optimization", "false"],),
}


def _case(table: dict, flag: str, script: str):
    return table.get((flag, script), table.get(flag))


def test_the_table_lists_exactly_the_reference_flags():
    for script, flags in REFERENCE.items():
        listed = {flag for flag, cells in TABLE.items() if script in cells}
        assert listed == flags, (script, sorted(listed - flags), sorted(flags - listed))
    assert set(TABLE) == set().union(*REFERENCE.values())
    for flag, script, status in CELLS:
        assert status.startswith(("works", "refused")), (flag, script, status)


def test_the_counts_match_the_table():
    refused = [f for f, cells in TABLE.items() if all(s.startswith("refused") for s in cells.values())]
    partly = [f for f, cells in TABLE.items() if f not in refused and any("refused" in s for s in cells.values())]
    sentence = f"{len(TABLE)} flags: {len(TABLE) - len(refused)} work ({len(partly)} of\nthem"
    assert sentence.replace("\n", " ") in FLAGS_DOC.replace("\n", " "), sentence
    assert f"and {len(refused)} are\nrefused".replace("\n", " ") in FLAGS_DOC.replace("\n", " ")


@pytest.mark.parametrize("flag,script", [(f, s) for f, s, status in CELLS if status.startswith("works")],
                         ids=[f"{f}-{s}" for f, s, status in CELLS if status.startswith("works")])
def test_working_reference_flags_parse_with_the_reference_meaning(flag, script, tmp_path, monkeypatch):
    case = _case(WORKS, flag, script)
    assert case is not None, f"no working case for {flag} ({script})"
    argv, expected, launch = case[0], case[1], case[2] if len(case) > 2 else {}
    _launch(monkeypatch, **launch)
    args = _parse(script, _base(script, str(tmp_path / "out")) + argv)
    for name, value in expected.items():
        assert operator.attrgetter(name)(args) == value, (flag, name, operator.attrgetter(name)(args))


@pytest.mark.parametrize("flag,script,status", [c for c in CELLS if "refused" in c[2]],
                         ids=[f"{f}-{s}" for f, s, status in CELLS if "refused" in status])
def test_refused_reference_flags_name_the_replacement_in_one_line(flag, script, status, tmp_path, monkeypatch,
                                                                    capsys):
    case = _case(REFUSED, flag, script)
    assert case is not None, f"no refused case for {flag} ({script})"
    _launch(monkeypatch, **(case[1] if len(case) > 1 else {}))
    with pytest.raises(SystemExit) as stop:
        _parse(script, _base(script, str(tmp_path / "out")) + case[0])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith(f"{script}: error: "), err
    assert flag in err and replacement(status) in err, (replacement(status), err)
    assert not (tmp_path / "out").exists()


# -- the translations, value by value -------------------------------------------------------------------
def test_weights_only_start_is_init_checkpoint_in_both_spellings(tmp_path):
    out = str(tmp_path / "out")
    for script in (PT, FT):
        ref = _parse(script, _base(script, out) + ["--resume_from_checkpoint=p1/_step5.ckpt", "--load_model_weights_only"])
        assert (ref.checkpoints.init_checkpoint, ref.checkpoints.resume_from_checkpoint) == ("p1/_step5.ckpt", None)
        ours = _parse(script, _base(script, out) + ["--load_model_weights_only", "p1/_step5.ckpt"])
        assert (ours.checkpoints.init_checkpoint, ours.checkpoints.resume_from_checkpoint) == ("p1/_step5.ckpt", None)
        latest = _parse(script, _base(script, out) + ["--resume_from_checkpoint=True", "--load_model_weights_only"])
        # the newest in output_dir
        assert (latest.checkpoints.init_checkpoint, latest.checkpoints.resume_from_checkpoint) == (out, None)


def test_weights_only_conflicting_with_init_checkpoint_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _parse(FT, _base(FT, str(tmp_path)) + ["--resume_from_checkpoint=a.ckpt", "--load_model_weights_only",
                                               "--init_checkpoint", "b.ckpt"])
    assert "give one of them" in capsys.readouterr().err


@pytest.mark.parametrize("value,internal", [("-1", 0), ("0", 1), ("1", 1), ("3", 3)])
def test_early_stopping_patience_keeps_lightnings_meaning(value, internal, tmp_path):
    """Lightning stopped when its wait count reached the patience: 0 and 1 both stop at the first validation
    without improvement; the reference's -1 (its default) never stops. Internally 0 is "never"."""
    args = _parse(FT, _base(FT, str(tmp_path)) + ["--early_stopping_patience", value, "--val_check_interval", "5"])
    assert args.validation.early_stopping_patience == internal
    assert _parse(FT, _base(FT, str(tmp_path))).validation.early_stopping_patience == 0  # the default: never


def test_val_check_interval_integer_is_updates_and_decimal_is_a_fraction(tmp_path):
    assert _parse(FT, _base(FT, str(tmp_path)) + ["--val_check_interval", "1"]).validation.val_check_interval == 1
    assert _parse(FT, _base(FT, str(tmp_path)) + ["--val_check_interval", "1.0"]).validation.val_check_interval == 1.0


@pytest.mark.parametrize("value", ["1.5", "0.0", "-0.5", "-3", "often"])
def test_val_check_interval_out_of_range_is_one_line(value, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        _parse(FT, _base(FT, str(tmp_path)) + [f"--val_check_interval={value}"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "--val_check_interval" in err


def test_pretraining_refuses_a_fraction_of_an_epoch_and_all_rows_held_out(tmp_path, capsys):
    for extra, words in ((["--n_val", "8", "--val_check_interval", "0.5"], "number of updates"),
                         (["--n_val", "-1"], "--n_val -1")):
        with pytest.raises(SystemExit):
            _parse(PT, _base(PT, str(tmp_path)) + extra)
        assert words in capsys.readouterr().err


def test_max_steps_or_max_epochs_is_required(tmp_path, capsys):
    argv = [a for a in _base(FT, str(tmp_path)) if a not in ("--max_steps", "3")]
    with pytest.raises(SystemExit):
        _parse(FT, argv)
    assert "--max_steps (or --max_epochs)" in capsys.readouterr().err
    assert _parse(FT, argv + ["--max_epochs", "2"]).schedule.max_steps is None  # resolved from the loader
    with pytest.raises(SystemExit):
        _parse(PT, [a for a in _base(PT, str(tmp_path)) if a not in ("--max_steps", "3")])
    assert "required: --max_steps" in capsys.readouterr().err


@pytest.mark.parametrize("batches,accumulation,flags,expected", [
    # B batches per process per epoch, A accumulation steps: E = B / A updates per epoch
    (10, 1, dict(max_epochs=2), dict(max_steps=20)),
    (10, 3, dict(max_epochs=1), dict(max_steps=4)),                      # ceil(10 / 3)
    (10, 1, dict(max_epochs=5, max_steps=7), dict(max_steps=7)),         # whichever ends first
    (10, 1, dict(max_epochs=1, max_steps=70), dict(max_steps=10)),
    (10, 2, dict(val_check_interval=0.5), dict(val_check_interval=2)),   # floor(0.5 x 10 / 2)
    (10, 1, dict(val_check_interval=1.0), dict(val_check_interval=10)),
    (10, 1, dict(val_check_interval=0.01), dict(val_check_interval=1)),  # at least every update
    (10, 1, dict(val_check_interval=3), dict(val_check_interval=3)),     # an integer stays updates
    (10, 2, dict(val_check_interval=2.0), dict(val_check_interval=10)),  # --check_val_every_n_epoch 2
    (10, 2, dict(min_epochs=2), dict(min_steps=10)),
    (10, 2, dict(min_epochs=1, min_steps=8), dict(min_steps=8)),
])
def test_epochs_become_updates(batches, accumulation, flags, expected):
    from bart.cli.parsing import resolve_epochs
    from bart.cli.settings import Settings
    args = resolve_epochs(Settings(**{**dict(gradient_accumulation_steps=accumulation), **flags}), batches)
    for name, value in expected.items():
        assert args.as_dict()[name] == value, (name, args.as_dict()[name])


def test_launcher_checks_of_gpus_nodes_processes(tmp_path, monkeypatch, capsys):
    out = str(tmp_path)
    _launch(monkeypatch, gpus=8, local=8)
    assert _parse(FT, _base(FT, out) + ["--gpus", "-1"])  # -1: every GPU of the node, 8 processes
    _launch(monkeypatch, gpus=0, local=1)
    assert _parse(FT, _base(FT, out) + ["--gpus", "0"])  # CPU training where there is no GPU
    for launch, argv, words in ((dict(gpus=8, local=8), ["--gpus", "0"], "CUDA_VISIBLE_DEVICES="),
                                (dict(gpus=0, local=1), ["--gpus", "1"], "no CUDA GPU"),
                                (dict(gpus=4, local=4), ["--gpus", "8"], "4 visible GPU"),
                                (dict(gpus=8, local=2), ["--gpus", "0,1"], "CUDA_VISIBLE_DEVICES=0,1"),
                                (dict(gpus=8, local=8, nodes=1), ["--num_nodes", "2"], "torchrun --nnodes 2")):
        _launch(monkeypatch, **launch)
        with pytest.raises(SystemExit):
            _parse(FT, _base(FT, out) + argv)
        assert words in capsys.readouterr().err, (argv, words)


def test_run_eval_device_and_local_rank_checks(tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "out")
    _launch(monkeypatch, gpus=0)
    for argv, words in ((["--device", "cuda"], "--device cpu"), (["--device", "tpu"], "cpu, cuda"),
                        (["--local_rank", "3"], "LOCAL_RANK 0")):
        with pytest.raises(SystemExit):
            _parse(EV, _base(EV, out) + argv)
        assert words in capsys.readouterr().err


def test_process_state_flags_are_settings_the_run_applies_at_its_start(tmp_path, monkeypatch):
    """Parsing leaves the process alone (its environment, cuDNN's flags): the values are the record's, and the
    run's start applies them."""
    from bart.cli.start import begin_run
    from bart.hub import cache_dir

    for name, value in (("benchmark", False), ("deterministic", False)):
        monkeypatch.setattr(torch.backends.cudnn, name, value)
    environ = dict(os.environ)
    settings = _parse(FT, _base(FT, str(tmp_path)) + ["--cache_dir", "~/hub", "--progress_bar_refresh_rate", "0",
                                                      "--benchmark", "--deterministic", "true"])
    assert dict(os.environ) == environ
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic) == (False, False)
    assert (settings.model.cache_dir, settings.logging.progress_bar_refresh_rate) == (os.path.expanduser("~/hub"), 0)
    assert (settings.model.cudnn_benchmark, settings.model.cudnn_deterministic) == (True, True)
    begin_run(settings.replace(config_path="tiny"))
    assert cache_dir() == os.path.expanduser("~/hub") and os.environ["PROGRESS"] == "off"
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic) == (True, True)
    begin_run(_parse(FT, _base(FT, str(tmp_path / "again"))).replace(config_path="tiny"))  # unset: left as they are
    assert os.environ["PROGRESS"] == "off" and torch.backends.cudnn.benchmark


def test_weights_summary_counts_every_parameter():
    from bart.cli.reference_flags import weights_summary
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Sequential(torch.nn.Linear(4, 2)))
    model[0].weight.requires_grad = False
    top = weights_summary(model, "top")
    assert "  0 " in top and "  1 " in top and "1.0" not in top and "  14 trainable of 26 parameters" in top
    assert "1.0" in weights_summary(model, "full")


# -- the reference's command lines through the real entry scripts -------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, small_tokenizer_dir):
    import json

    from tests.helpers.corpus import micro_config, random_weights
    from tests.helpers.summaries import write_summarization_data

    base = tmp_path_factory.mktemp("reference_flags")
    data = write_summarization_data(str(base / "data"), sizes=(("train", 40), ("val", 6), ("test", 4)))
    config = base / "config.json"
    config.write_text(json.dumps(micro_config(dropout=0.0)))
    (base / "phase1").mkdir()
    weights = random_weights(str(config), str(base / "phase1" / "_step5.ckpt"))
    return SimpleNamespace(base=base, data=data, config=str(config), weights=weights, tok=small_tokenizer_dir)


def _script(script, *argv):
    """``python SCRIPT ARGV`` in this process (these tests are about what the flags do, not the process's exit)."""
    from tests.helpers.entry import run_entry
    assert run_entry(script, list(argv)) == 0


def test_reference_finetune_command_line_runs(tiny_run, monkeypatch):
    """The reference's run_summarization.sh and first-release benchmark flags on one command line: epochs,
    a fractional validation interval, -1 = all, 0 beams, weights only, Lightning's precision flags."""
    from bart.records.dllogger_compat import read_dllogger
    out = tiny_run.base / "ft"
    line = (f"finetune.py --data_dir={tiny_run.data} --config_path={tiny_run.config} --output_dir={out} --gpus 0 "
            f"--learning_rate=1e-3 --do_train --n_val -1 --train_batch_size=8 --gradient_accumulation_steps=2 "
            f"--eval_batch_size=6 --max_epochs 2 --warmup_steps 0 --min_epochs=0 --val_check_interval 0.5 "
            f"--max_source_length=64 --max_target_length=16 --val_max_target_length=16 --eval_max_gen_length=16 "
            f"--sortish_sampler --lr_scheduler polynomial --label_smoothing 0.1 --weight_decay 0.1 --dropout 0.1 "
            f"--attention_dropout 0.1 --gradient_clip_val=0.1 --early_stopping_patience=-1 --num_sanity_val_steps=0 "
            f"--eval_beams 0 --freeze_embeds --amp_level=O1 --seed 42 --log_freq 1 --num_workers 0 "
            f"--resume_from_checkpoint={tiny_run.weights} --load_model_weights_only --tokenizer {tiny_run.tok}")
    monkeypatch.delenv("TOKENIZER", raising=False)
    _script(*shlex.split(line))
    # 40 examples, updates of 8 x 2 = 16: 3 per epoch (the last one short, as Lightning steps at an epoch's end),
    # 2 epochs = 6 updates; validation every floor(0.5 x 3) = 1 update, none before the first, all 6 examples
    records = [r for r in read_dllogger(str(out / "dllogger.json")) if r["type"] == "LOG" and r["step"] != ()]
    val_steps = [r["step"] for r in records if "val_rouge2" in r["data"]]
    assert val_steps == [1, 2, 3, 4, 5, 6], val_steps
    train_steps = sorted({r["step"] for r in records if "loss" in r["data"]})
    assert train_steps == [1, 2, 3, 4, 5, 6]
    import json
    run = json.load(open(out / "run_config.json"))
    assert (run["max_steps"], run["val_check_interval"], run["eval_beams"], run["n_val"]) == (6, 1, 1, None)
    assert (run["init_checkpoint"], run["resume_from_checkpoint"]) == (tiny_run.weights, None)


def test_reference_run_eval_command_line_runs(tiny_run, monkeypatch):
    """run_eval_summarization.sh's line with --eval_beams 0 (the reference ran one beam) and the reference's
    --device, --debug, --info, --sync_timeout, --local_rank: the same generations as --eval_beams 1."""
    monkeypatch.delenv("TOKENIZER", raising=False)
    outs = []
    for beams, extra in (("0", "--device cpu --debug --info --sync_timeout 600 --local_rank=0"), ("1", "")):
        out = tiny_run.base / f"eval_{beams}"
        _script(*shlex.split(f"run_eval.py --task summarization --bs 2 --max_source_length=64 --max_target_length=12 "
                             f"--eval_max_gen_length=12 --eval_beams={beams} {extra} --tokenizer {tiny_run.tok} "
                             f"{tiny_run.weights} {tiny_run.config} {tiny_run.data} {out}"))
        outs.append(out)
    assert (outs[0] / "test_generations.txt").read_text() == (outs[1] / "test_generations.txt").read_text()
    targets = open(os.path.join(tiny_run.data, "test.target")).read()
    assert (outs[0] / "test.target").read_text() == targets and not (outs[1] / "test.target").exists()


def test_reference_pretraining_phase2_command_line_runs(tiny_run, monkeypatch):
    """run_pretraining_phase2.sh's line (weights only from phase 1, --task/--n_train/--early_stopping_patience at
    the reference's values) plus flags that now serve pretraining: --freeze_embeds keeps phase 1's embeddings,
    the held-out loss runs in --eval_batch_size batches, --buffer_size is the shuffle window."""
    import importlib
    import json

    from bart.cli.exits import run_main
    from tests.helpers.corpus import write_shards

    shards = os.path.dirname(write_shards(str(tiny_run.base / "shards"), [12, 12])[0])
    out = tiny_run.base / "phase2"
    argv = shlex.split(
        f"--data_dir={shards} --config_path={tiny_run.config} --output_dir={out} --num_workers 0 --learning_rate=1e-3 "
        f"--do_train --train_batch_size=4 --gradient_accumulation_steps=1 --max_steps=2 --warmup_steps=1 "
        f"--max_source_length=64 --lr_scheduler polynomial --label_smoothing 0 --weight_decay 0.1 --dropout 0.1 "
        f"--attention_dropout 0.1 --gradient_clip_val=0.1 --resume_from_checkpoint={tiny_run.weights} "
        f"--load_model_weights_only --save_checkpoint_steps=2 --log_freq=1 --allreduce_post_accumulation_half_precision "
        f"--seed 7 --lamb --task pretraining --n_train -1 --early_stopping_patience -1 --freeze_embeds "
        f"--n_val 3 --val_check_interval 2 --eval_batch_size 2 --buffer_size 5 --tokenizer {tiny_run.tok}")
    pretrain = importlib.import_module("bart.cli.pretrain")
    import bart.data.pretraining_dataset as pretraining_dataset
    seen = {}
    build, from_loader = pretraining_dataset.build_pretraining_loader, pretrain.PretrainingValidation.from_loader

    def build_loader(*a, **k):
        seen["loader"] = build(*a, **k)
        return seen["loader"]

    def validation(loader, batch_size):
        seen["eval_batch"] = batch_size
        return from_loader(loader, batch_size)

    monkeypatch.setattr(pretraining_dataset, "build_pretraining_loader", build_loader)
    monkeypatch.setattr(pretrain.PretrainingValidation, "from_loader", validation)
    summary = {}
    run_main(lambda: summary.update(pretrain.main(argv)), "pretrain.py")
    assert summary["steps"] == 2
    start = torch.load(tiny_run.weights)
    end = safe_load(str(out / "_step2.ckpt"))["model"]
    assert torch.equal(end["model.shared.weight"], start["model.shared.weight"])  # frozen, from phase 1
    assert not torch.equal(end["model.encoder.layers.0.fc1.weight"], start["model.encoder.layers.0.fc1.weight"])
    run = json.load(open(out / "run_config.json"))
    assert (run["init_checkpoint"], run["resume_from_checkpoint"], run["buffer_size"]) == (tiny_run.weights, None, 5)
    assert seen["eval_batch"] == 2 and seen["loader"].dataset._shuffle_buffer_size == 5


def test_early_stopping_waits_for_min_steps():
    """--min_epochs / --min_steps: a patience that has run out does not end the run before the minimum."""
    from bart.training.validation import Validation
    validation = Validation.__new__(Validation)
    validation.patience, validation.min_steps, validation.lower_is_better, validation.threshold = 1, 4, True, 0.0
    validation.best_value, validation.best_step, validation.without_improvement, validation.metric_name = None, None, 0, "loss"
    stops = []
    for step, loss in ((1, 1.0), (2, 2.0), (3, 2.0), (4, 2.0)):
        trainer = SimpleNamespace(step=step, global_step=step, request_stop=lambda reason, s=step: stops.append(s))
        validation._early_stopping(trainer, loss)
    assert stops == [4]


# -- the settings record (bart/cli/settings.py) ---------------------------------------------------------------
# Destinations that construction consumes: the reference's own spellings (``ref_*``), the ones translated onto a
# field, and the noise flags (one ``NoiseConfig`` field).
_CONSUMED = {"init_checkpoint_alias", "check_val_every_n_epoch", "load_model_weights_only", "config_file", "lamb",
             "report_to"}  # transformers' --report_to: translated onto --no_tensorboard (bart.cli.peer_flags)


@pytest.mark.parametrize("script", [PT, FT, EV])
def test_every_flag_reaches_a_settings_field(script):
    """A flag added to a parser without its Settings field would be parsed and then dropped: never."""
    import dataclasses

    from bart.cli.parsing import build_parser
    from bart.cli.settings import SECTIONS
    from bart.data.noise import NoiseConfig
    fields = {f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)}
    noise = {f.name for f in dataclasses.fields(NoiseConfig)}
    dests = {a.dest for a in build_parser(script)._actions if a.dest not in ("help", "help_all")}
    missing = {d for d in dests if d not in fields and not d.startswith("ref_") and d not in _CONSUMED | noise}
    assert not missing, missing


def test_every_settings_field_says_what_it_is():
    """Every field has one description: its flag's help, its reference flag's help (SPECS), or a doc of its own."""
    import dataclasses

    from bart.cli.reference_flags import SPECS
    from bart.cli.settings import SECTIONS
    spec_help = {spec.dest for spec in SPECS if spec.help}
    for cls in SECTIONS.values():
        for f in dataclasses.fields(cls):
            said = [bool(f.metadata.get("flag") and f.metadata["flag"].help), bool(f.metadata.get("doc")),
                    bool(f.metadata.get("reference")) and f.name in spec_help]
            assert said.count(True) == 1, (cls.__name__, f.name, said)


def test_parsing_reads_no_disk_and_auto_is_settled_at_run_start(tmp_path, capsys):
    """Rules out: parse_args resolved --resume_from_checkpoint auto against the folder (True here) and refused an
    output folder that is a file; both now wait for the run's start, after the process group and the lock."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "_step5.ckpt").write_bytes(b"")
    args = _parse(PT, _base(PT, str(out)) + ["--resume_from_checkpoint", "auto"])
    assert args.checkpoints.resume_from_checkpoint == "auto" and "[checkpoint]" not in capsys.readouterr().out
    (tmp_path / "a_file").write_text("x")
    assert _parse(FT, _base(FT, str(tmp_path / "a_file"))).checkpoints.output_dir == str(tmp_path / "a_file")
    from bart.cli.builder import start_run
    from bart.cli.parsing import resolved
    from bart.errors import UserError
    with pytest.raises(UserError, match="is a file; choose a folder"):  # a shipped config: the folder is what is wrong
        start_run(_parse(FT, _base(FT, str(tmp_path / "a_file")) + ["--config_path", "tiny"]))
    with pytest.raises(FrozenInstanceError):
        args.max_steps = 4  # built once: a change is a checked copy
    assert resolved(args, max_steps=4).schedule.max_steps == 4 and args.schedule.max_steps == 3


def test_run_eval_and_export_load_no_training_module():
    """Inference imports no training code (not: run_eval.py and bart.export imported bart.training.checkpoint)."""
    code = ("import sys, run_eval, bart.export; run_eval.parse_args(['m', 'c.json', 'd', 'out']); "
            "print(sorted(m for m in sys.modules if m.startswith('bart.training')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                         capture_output=True, text=True, timeout=None)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])


def test_the_doc_lists_every_transformers_spelling():
    from bart.cli.peer_flags import ALIASES

    section = FLAGS_DOC.split("\n## transformers' spellings", 1)[1]
    listed = {row.split("|")[1].strip().strip("`").split()[0] for row in section.splitlines() if row.startswith("| `--")}
    assert {option for option, _, _ in ALIASES} | {"--metric_for_best_model", "--report_to"} <= listed
