"""pretrain.py as users run it: the contract's flags, a tiny run that learns, loud failures."""
import json
import os
import subprocess

import pytest

from bart.records.dllogger_compat import read_dllogger
from tests.helpers import ROOT
from tests.helpers.corpus import SMALL_VOCAB_SIZE, write_shards
from tests.helpers.entry import run_entry

CONTRACT_FLAGS = """--config_path --warmup_steps --max_steps --data_dir --learning_rate --n_val --train_batch_size
--gradient_accumulation_steps --max_source_length --max_target_length --val_max_target_length --eval_max_gen_length
--weight_decay --dropout --lamb --pre_ln --allreduce_post_accumulation_half_precision --output_dir
--resume_from_checkpoint --load_model_weights_only --lr_scheduler --adam_epsilon --gradient_clip_val --max_grad_norm
--attention_dropout --encoder_layerdrop --decoder_layerdrop --num_workers --eval_batch_size --fp16 --bf16 --seed
--log_freq --save_checkpoint_steps --json-summary --label_smoothing --mlm_probability --permute_sentence_ratio
--freeze_encoder --freeze_embeds --sortish_sampler --max_tokens_per_batch --n_train --n_test --test_max_target_length
--eval_beams --val_metric --save_top_k --do_train --do_predict --local_rank --init_checkpoint --phase1_end_step
--allreduce_post_accumulation --allreduce_post_accumulation_fp16 --keep_checkpoints --compile --no-pre_ln""".split()


def _in_process(capsys, *args):
    """``python pretrain.py ARGS`` run in this process (tests.helpers.entry: its exit code, one line for a user's
    mistake): what it printed, as the subprocess's ``returncode``, ``stdout``, ``stderr``."""
    capsys.readouterr()
    code = run_entry("pretrain.py", list(args))
    said = capsys.readouterr()
    return subprocess.CompletedProcess(["pretrain.py", *args], code, said.out, said.err)


def test_help_lists_every_contract_flag(capsys):
    out = _in_process(capsys, "--help-all")  # --help: the quick start's flags, ending with where the rest are
    assert out.returncode == 0
    missing = [flag for flag in CONTRACT_FLAGS if flag not in out.stdout]
    assert not missing


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cfg")
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    # the small trained tokenizer's vocabulary: the point here is the run, not GPT-2's 50k softmax
    values.update(d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128,
                  vocab_size=SMALL_VOCAB_SIZE)
    path = folder / "config.json"
    path.write_text(json.dumps(values))
    return str(path)


@pytest.mark.slow
def test_tiny_pretraining_lowers_the_loss(tmp_path, tiny_config, small_tokenizer_dir):
    data = os.path.dirname(write_shards(str(tmp_path / "shards"), [40, 40])[0])
    # in this process (about the run's results; test_monitoring runs pretrain.py as a process), without capsys:
    # LDDL's dataset logger keeps the stderr it finds, which must outlive this test
    assert run_entry("pretrain.py", [
        "--config_path", tiny_config, "--data_dir", data, "--tokenizer", small_tokenizer_dir, "--max_steps", "40",
        "--train_batch_size", "8", "--max_source_length", "64", "--learning_rate", "5e-2", "--warmup_steps", "4",
        "--lamb", "--weight_decay", "0.01", "--log_freq", "5", "--num_workers", "0", "--dropout", "0.0",
        "--output_dir", str(tmp_path / "out")]) == 0
    losses = [r["data"]["loss"] for r in read_dllogger(str(tmp_path / "out" / "dllogger.json"))
              if r["type"] == "LOG" and "loss" in r["data"]]
    assert len(losses) == 8 and losses[-1] < losses[0] - 1.5, losses
    saved = json.load(open(tmp_path / "out" / "run_config.json"))
    assert saved["max_steps"] == 40 and saved["model_config"]["pre_ln"] is True
    # phase 2 from phase 1's weights only, numbering its steps after phase 1's
    assert run_entry("pretrain.py", [
        "--config_path", tiny_config, "--data_dir", data, "--tokenizer", small_tokenizer_dir, "--max_steps", "2",
        "--train_batch_size", "4", "--max_source_length", "64", "--num_workers", "0", "--log_freq", "1",
        "--init_checkpoint", str(tmp_path / "out" / "_step40.ckpt"), "--phase1_end_step", "40",
        "--output_dir", str(tmp_path / "phase2")]) == 0
    assert os.path.exists(tmp_path / "phase2" / "_step42.ckpt")
    first = [r["data"]["loss"] for r in read_dllogger(str(tmp_path / "phase2" / "dllogger.json"))
             if r["type"] == "LOG" and "loss" in r["data"]][0]
    assert first < losses[0] - 1.0  # it started from the trained weights


def test_finetuning_flags_fail_loudly(tmp_path, tiny_config, capsys):
    out = _in_process(capsys, "--config_path", tiny_config, "--data_dir", str(tmp_path), "--max_steps", "1", "--eval_beams", "4")
    assert out.returncode != 0 and "--eval_beams is a fine-tuning (finetune.py) flag" in out.stderr


def test_missing_data_folder_is_named(tmp_path, tiny_config, small_tokenizer_dir, capsys):
    out = _in_process(capsys, "--config_path", tiny_config, "--data_dir", str(tmp_path / "nope"), "--tokenizer", small_tokenizer_dir,
               "--max_steps", "1")
    assert out.returncode != 0 and "no pretraining data folder at" in out.stderr
