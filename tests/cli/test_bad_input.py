"""Bad input, table-driven: every case is one line on stderr naming the flag, key or file, exit code 2,
no traceback, nothing written. The entry scripts run in-process through their real ``run_main``
(as ``python script.py ...`` would) so the table stays cheap."""
import json
import os

import pytest
import torch

from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry as _main
from tests.helpers.summaries import write_summarization_data

CONFIG = micro_config()


@pytest.fixture(scope="module")
def world(tmp_path_factory, inputs):
    """Inputs laid out as users have them, good (the shared ones: tests/helpers/inputs.py) and bad."""
    base = tmp_path_factory.mktemp("bad_input")
    w = {"tok": inputs.tokenizer, "base": str(base)}

    def config(name, **changes):
        path = base / f"{name}.json"
        path.write_text(json.dumps({**CONFIG, **changes}))
        return str(path)

    w["cfg"] = inputs.config()
    w["cfg_typo"] = str(base / "typo.json")
    (base / "typo.json").write_text(json.dumps({**CONFIG, "d_modle": 64}))
    w["cfg_type"] = config("wrong_type", d_model="big")
    w["cfg_heads"] = config("heads", d_model=30)
    w["cfg_bias"] = config("bias_logits", add_bias_logits=True)
    w["cfg_static"] = config("static_pos", static_position_embeddings=True)
    w["cfg_other"] = config("other", d_model=48)
    (base / "not_json.json").write_text("{ d_model: 32 ")
    w["cfg_not_json"] = str(base / "not_json.json")
    (base / "list.json").write_text("[1, 2]")
    w["cfg_list"] = str(base / "list.json")
    w["data"] = inputs.summaries(16, 4, 4)
    w["data_no_test"] = write_summarization_data(str(base / "no_test"), sizes=(("train", 16), ("val", 4)))
    w["data_empty_test"] = write_summarization_data(str(base / "empty_test"), sizes=(("train", 16), ("val", 4), ("test", 0)))
    w["data_blank_line"] = write_summarization_data(str(base / "blank"), sizes=(("train", 16), ("val", 4), ("test", 4)))
    with open(os.path.join(w["data_blank_line"], "val.source"), "a") as f:  # training's would be skipped, counted
        f.write("\n")
    with open(os.path.join(w["data_blank_line"], "val.target"), "a") as f:
        f.write("Something.\n")
    w["shards"] = inputs.shards((8, 8))
    os.makedirs(base / "no_shards")
    w["no_shards"] = str(base / "no_shards")
    (base / "empty.ckpt").write_bytes(b"")
    w["empty_ckpt"] = str(base / "empty.ckpt")
    (base / "text.ckpt").write_text("this is a text file, not a checkpoint\n")
    w["text_ckpt"] = str(base / "text.ckpt")
    (base / "a_file").write_text("x")
    w["a_file"] = str(base / "a_file")
    os.makedirs(base / "empty_folder")
    w["empty_folder"] = str(base / "empty_folder")
    # a real weights checkpoint and a real training checkpoint of the tiny model
    w["weights"] = inputs.weights()
    run = base / "run"
    _main("finetune.py", ["--config_path", w["cfg"], "--data_dir", w["data"], "--tokenizer", w["tok"],
                          "--init_checkpoint", w["weights"], "--max_steps", "1", "--train_batch_size", "4",
                          "--n_val", "0", "--max_source_length", "32", "--max_target_length", "16",
                          "--num_workers", "0", "--output_dir", str(run)])
    w["run"] = str(run)
    w["train_ckpt"] = str(run / "_epoch0_step1.ckpt")
    assert os.path.isfile(w["train_ckpt"]), os.listdir(run)
    return w


FT = ["--config_path", "{cfg}", "--data_dir", "{data}", "--tokenizer", "{tok}", "--init_checkpoint", "{weights}",
      "--max_steps", "1", "--train_batch_size", "4", "--n_val", "0", "--num_workers", "0",
      "--max_source_length", "32", "--max_target_length", "16", "--output_dir", "{out}"]
PT = ["--config_path", "{cfg}", "--data_dir", "{shards}", "--tokenizer", "{tok}", "--max_steps", "1",
      "--train_batch_size", "2", "--max_source_length", "32", "--num_workers", "0", "--output_dir", "{out}"]
EV = ["{weights}", "{cfg}", "{data}", "{out}", "--tokenizer", "{tok}", "--max_source_length", "32",
      "--max_target_length", "8", "--bs", "2"]


def _with(base: list[str], **flags) -> list[str]:
    """``base`` with flags replaced or added (value None removes the flag)."""
    argv = list(base)
    for flag, value in flags.items():
        name = "--" + flag
        if name in argv:
            i = argv.index(name)
            del argv[i:i + 2]
        if value is not None:
            argv += [name] + ([] if value == "" else [str(value)])
    return argv


# (id, script, argv, words the one line must contain)
CASES = [
    # flag values out of range or of the wrong type
    ("ft-max_steps-0", "finetune.py", _with(FT, max_steps=0), ["--max_steps", ">= 1"]),
    ("ft-batch-0", "finetune.py", _with(FT, train_batch_size=0), ["--train_batch_size", ">= 1"]),
    ("ft-batch-negative", "finetune.py", _with(FT, train_batch_size=-4), ["--train_batch_size"]),
    ("ft-accum-0", "finetune.py", _with(FT, gradient_accumulation_steps=0), ["--gradient_accumulation_steps"]),
    ("ft-log_freq-0", "finetune.py", _with(FT, log_freq=0), ["--log_freq"]),
    ("ft-lr-negative", "finetune.py", _with(FT, learning_rate=-1e-4), ["--learning_rate"]),
    ("ft-lr-nan", "finetune.py", _with(FT, learning_rate="nan"), ["--learning_rate", "finite"]),
    ("ft-lr-text", "finetune.py", _with(FT, learning_rate="fast"), ["--learning_rate", "fast"]),
    ("ft-dropout-1.5", "finetune.py", _with(FT, dropout=1.5), ["--dropout"]),
    ("ft-smoothing-1", "finetune.py", _with(FT, label_smoothing=1.0), ["--label_smoothing"]),
    ("ft-warmup-negative", "finetune.py", _with(FT, warmup_steps=-1), ["--warmup_steps"]),
    ("ft-workers-negative", "finetune.py", _with(FT, num_workers=-1), ["--num_workers"]),
    ("ft-beams-negative", "finetune.py", _with(FT, eval_beams=-1), ["--eval_beams"]),  # 0 is greedy, as the reference
    ("ft-n_val-negative", "finetune.py", _with(FT, n_val=-2), ["--n_val", "-1 for all"]),  # -1 is all, as the reference
    ("ft-source-0", "finetune.py", _with(FT, max_source_length=0), ["--max_source_length"]),
    ("ft-seed-negative", "finetune.py", _with(FT, seed=-1), ["--seed"]),
    ("ft-top_k-negative", "finetune.py", _with(FT, save_top_k=-1), ["--save_top_k"]),
    ("ft-tokens-0", "finetune.py", _with(FT, max_tokens_per_batch=0), ["--max_tokens_per_batch"]),
    ("ft-clip-negative", "finetune.py", _with(FT, gradient_clip_val=-1), ["--gradient_clip_val"]),
    ("ft-betas", "finetune.py", FT + ["--adam_betas", "0.9", "1.5"], ["--adam_betas"]),
    ("ft-dist_timeout-0", "finetune.py", _with(FT, dist_timeout=0), ["--dist_timeout"]),
    ("pt-max_steps-0", "pretrain.py", _with(PT, max_steps=0), ["--max_steps"]),
    ("pt-max_steps-text", "pretrain.py", _with(PT, max_steps="ten"), ["--max_steps", "ten"]),
    ("ev-bs-0", "run_eval.py", _with(EV, bs=0), ["--bs"]),
    ("ev-n_obs-0", "run_eval.py", _with(EV, n_obs=0), ["--n_obs"]),
    ("ev-return-0", "run_eval.py", _with(EV, num_return_sequences=0), ["--num_return_sequences"]),
    # relations between flags
    ("ft-fp16-bf16", "finetune.py", FT + ["--fp16", "--bf16"], ["--fp16", "--bf16"]),
    ("ev-fp16-bf16", "run_eval.py", EV + ["--fp16", "--bf16"], ["--fp16", "--bf16"]),
    ("ft-fp8-fp16", "finetune.py", FT + ["--fp8", "--fp16"], ["--fp16 with --fp8", "choose one"]),
    ("pt-fp8-bf16", "pretrain.py", PT + ["--bf16", "--fp8", "--fp8_emulate"], ["--bf16 with --fp8", "bf16 autocast"]),
    ("pt-fp8_emulate-alone", "pretrain.py", PT + ["--fp8_emulate"], ["--fp8_emulate", "add --fp8"]),
    ("ev-fp8", "run_eval.py", EV + ["--fp8"], ["--fp8 is a training precision", "--bf16"]),
    ("ev-fp8_emulate", "run_eval.py", EV + ["--fp8_emulate"], ["--fp8_emulate is a training precision"]),
    ("pt-lr-below-lr_end", "pretrain.py", _with(PT, learning_rate=1e-8), ["--lr_end", "--learning_rate"]),
    ("ft-source-over-positions", "finetune.py", _with(FT, max_source_length=100), ["--max_source_length", "64"]),
    ("ft-target-over-positions", "finetune.py", _with(FT, max_target_length=65), ["--max_target_length", "64"]),
    ("pt-source-over-positions", "pretrain.py", _with(PT, max_source_length=128), ["--max_source_length", "64"]),
    ("ev-source-over-positions", "run_eval.py", _with(EV, max_source_length=100), ["--max_source_length", "64"]),
    ("ev-gen-over-positions", "run_eval.py", _with(EV, max_target_length=100), ["--eval_max_gen_length", "64"]),
    ("ft-output-is-file", "finetune.py", _with(FT, output_dir="{a_file}"), ["a_file", "is a file"]),
    ("pt-output-is-file", "pretrain.py", _with(PT, output_dir="{a_file}"), ["a_file", "is a file"]),
    ("ev-save-is-file", "run_eval.py", ["{weights}", "{cfg}", "{data}", "{a_file}"], ["a_file", "is a file"]),
    ("pt-finetune-flag", "pretrain.py", PT + ["--eval_beams", "4"], ["--eval_beams", "finetune.py"]),
    ("pt-no-do_train", "pretrain.py", PT + ["--no-do_train"], ["--do_train"]),
    ("ev-unknown-generate-option", "run_eval.py", EV + ["--num_beamz", "4"], ["num_beamz"]),
    # config files
    ("cfg-misspelled-key", "finetune.py", _with(FT, config_path="{cfg_typo}"), ["d_modle", "d_model"]),
    ("cfg-wrong-type", "finetune.py", _with(FT, config_path="{cfg_type}"), ["d_model", "big", "wrong_type.json"]),
    ("cfg-heads", "finetune.py", _with(FT, config_path="{cfg_heads}"), ["d_model", "heads"]),
    ("cfg-bias-logits", "finetune.py", _with(FT, config_path="{cfg_bias}"), ["add_bias_logits"]),
    ("cfg-static-positions", "pretrain.py", _with(PT, config_path="{cfg_static}"), ["static_position_embeddings"]),
    ("cfg-not-json", "finetune.py", _with(FT, config_path="{cfg_not_json}"), ["not_json.json", "JSON"]),
    ("cfg-a-list", "run_eval.py", ["{weights}", "{cfg_list}", "{data}", "{out}"], ["list.json", "object"]),
    ("cfg-missing", "finetune.py", _with(FT, config_path="{base}/nope.json"), ["nope.json"]),
    # checkpoints
    ("ft-init-empty-file", "finetune.py", _with(FT, init_checkpoint="{empty_ckpt}"), ["empty.ckpt", "0 bytes"]),
    ("ft-init-text-file", "finetune.py", _with(FT, init_checkpoint="{text_ckpt}"), ["text.ckpt"]),
    ("ft-init-missing", "finetune.py", _with(FT, init_checkpoint="{base}/missing.ckpt"), ["missing.ckpt"]),
    ("ft-init-empty-folder", "finetune.py", _with(FT, init_checkpoint="{empty_folder}"), ["empty_folder"]),
    ("ev-model-text-file", "run_eval.py", ["{text_ckpt}", "{cfg}", "{data}", "{out}", "--tokenizer", "{tok}"], ["text.ckpt"]),
    ("ev-model-empty-file", "run_eval.py", ["{empty_ckpt}", "{cfg}", "{data}", "{out}", "--tokenizer", "{tok}"], ["empty.ckpt"]),
    ("ft-resume-missing", "finetune.py", FT + ["--resume_from_checkpoint", "{base}/gone.ckpt"], ["gone.ckpt"]),
    ("ft-resume-weights-file", "finetune.py", FT + ["--resume_from_checkpoint", "{weights}"], ["weights.ckpt"]),
    ("ft-resume-other-config", "finetune.py", _with(FT, config_path="{cfg_other}") + ["--resume_from_checkpoint",
                                                                                     "{train_ckpt}"], ["d_model", "48"]),
    ("ft-init-other-config", "finetune.py", _with(FT, config_path="{cfg_other}"), ["weights.ckpt"]),
    # data
    ("ft-data-missing", "finetune.py", _with(FT, data_dir="{base}/nodata"), ["nodata"]),
    ("ft-predict-no-test", "finetune.py", _with(FT, data_dir="{data_no_test}") + ["--do_predict"], ["test.source"]),
    ("ft-predict-empty-test", "finetune.py", _with(FT, data_dir="{data_empty_test}") + ["--do_predict"], ["test.source"]),
    ("ft-blank-line", "finetune.py", _with(FT, data_dir="{data_blank_line}", n_val=5), ["val.source:5", "empty"]),
    ("ev-empty-split", "run_eval.py", ["{weights}", "{cfg}", "{data_empty_test}", "{out}", "--tokenizer", "{tok}"],
     ["test.source"]),
    ("ev-missing-split", "run_eval.py", EV + ["--type_path", "dev"], ["dev.source"]),
    ("pt-data-missing", "pretrain.py", _with(PT, data_dir="{base}/noshards"), ["noshards"]),
    ("pt-data-no-parquet", "pretrain.py", _with(PT, data_dir="{no_shards}"), ["no_shards"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(case, world, tmp_path, capsys):
    name, script, argv, words = case
    values = dict(world, out=str(tmp_path / "out"))
    argv = [a.format(**values) for a in argv]
    code = _main(script, argv)
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith(("note:", "[checkpoint]", "[generate]"))]
    assert code == 2, f"exit {code}, stderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error:"), err[-3000:]
    for word in words:
        assert word.format(**values) in lines[0], (word, lines[0])
    out = tmp_path / "out"  # nothing half-made: no checkpoint, no log, no record of a start (not: run_eval's)
    assert not out.exists() or not [f for f in os.listdir(out) if f.endswith((".ckpt", ".partial")) or f == "git_log.json"]


@pytest.mark.parametrize("torchao, gpus, flags, words", [
    (False, [(9, 0)], [], ["torchao is not installed", "pip install torchao==0.18.0"]),
    (True, [], [], ["compute capability 8.9", "no CUDA GPU is visible", "--bf16", "--fp8_emulate"]),
    (True, [(9, 0), (8, 0)], [], ["compute capability 8.9", "GPU 1 (NVIDIA A100-SXM4-80GB) has 8.0", "--bf16"]),
    (True, [], ["--fp8_emulate"], ["finds no linear layer", "1 encoder and 1 decoder layers", "--bf16"]),
], ids=["no-torchao", "no-gpu", "gpu-below-8.9", "nothing-to-convert"])
def test_fp8_that_cannot_run_here_is_one_line_before_anything_runs(world, tmp_path, capsys, monkeypatch,
                                                                     torchao, gpus, flags, words):
    """--fp8 where it cannot be honoured (torchao missing, no CUDA, a GPU without float8 tensor cores; a
    model whose every linear layer stays in bf16: one layer per stack): one line before training starts
    naming the fix, exit 2, nothing written. torchao's presence and the GPUs are stood in for, so that every
    case runs on any machine."""
    import importlib.machinery
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        (importlib.machinery.ModuleSpec(name, None) if torchao else None) if name == "torchao" else find_spec(name, *a)))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(gpus))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(gpus))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: gpus[index])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: ["NVIDIA H100", "NVIDIA A100-SXM4-80GB"][index])
    out = tmp_path / "out"
    code = _main("pretrain.py", [a.format(**dict(world, out=str(out))) for a in PT + ["--fp8", *flags]])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pretrain.py: error: --fp8 "), err[-3000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not out.exists() or not [f for f in os.listdir(out) if f.endswith((".ckpt", ".partial"))]
