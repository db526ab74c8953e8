"""Issue 29, cases 2, 3 and 8: inputs a cluster user meets that the run cannot use, each refused in one line
(exit 2, no traceback, nothing written) instead of a silent wrong run: weight files holding integer/bool/
complex tensors, NaN/inf or tables of the wrong shape; contradictory flags; old-Mac (CR-only) line ends,
a config vocab_size below the tokenizer's, a train split smaller than the processes; and the permissions
of what the project writes (the umask's, not mkdtemp's 0700). Entry scripts run in-process through their
real ``run_main`` (as tests/cli/test_bad_input.py does); one torchrun run for the two-process case."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from bart.errors import UserError
from bart.modeling.weights import CheckpointError
from tests.helpers import ROOT
from tests.helpers.corpus import SMALL_VOCAB_SIZE, micro_config, write_shards
from tests.helpers.entry import run_entry as _main
from tests.helpers.summaries import write_summarization_data

CONFIG = micro_config()
TIED = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")


def _model(**changes):
    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    torch.manual_seed(0)
    return BartForConditionalGeneration(BartConfig(**{**CONFIG, **changes})).eval()


def _hf_folder(folder: str, state: dict) -> str:
    """A Hugging Face folder (config.json from save_pretrained) whose model.safetensors holds ``state``."""
    from safetensors.torch import save_file

    from bart.modeling.weights import save_pretrained
    save_pretrained(_model(), folder)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    return folder


def _state(**changes) -> dict:
    return {k: v.clone() for k, v in _model(**changes).state_dict().items() if k not in TIED}


@pytest.fixture(scope="module")
def world(tmp_path_factory, small_tokenizer_dir):
    base = tmp_path_factory.mktemp("unusable")
    w = {"tok": small_tokenizer_dir, "base": str(base)}
    for name, changes in (("cfg", {}), ("cfg_small_vocab", {"vocab_size": SMALL_VOCAB_SIZE - 10})):
        (base / f"{name}.json").write_text(json.dumps({**CONFIG, **changes}))
        w[name] = str(base / f"{name}.json")
    w["data"] = write_summarization_data(str(base / "data"), sizes=(("train", 16), ("val", 4), ("test", 4)))
    w["shards"] = os.path.dirname(write_shards(str(base / "shards"), [8, 8])[0])
    w["weights"] = str(base / "weights.ckpt")
    torch.save(_model().state_dict(), w["weights"])
    # case 2: an int32 safetensors folder (the issue's: fine-tuning went on with loss ln(vocab)), an int8 .ckpt,
    # a NaN in a float table
    w["hf_int32"] = _hf_folder(str(base / "hf_int32"), {k: v.to(torch.int32) for k, v in _state().items()})
    w["int8_ckpt"] = str(base / "int8.ckpt")
    torch.save({k: v.to(torch.int8) for k, v in _model().state_dict().items()}, w["int8_ckpt"])
    nan = _state()
    nan["model.encoder.layers.0.fc1.weight"][3, 5] = float("nan")
    w["hf_nan"] = _hf_folder(str(base / "hf_nan"), nan)
    # case 8: a checkpoint whose vocabulary is smaller than the tokenizer's (run_eval.py takes the architecture
    # from the checkpoint), CR-only split files, a one-example train split
    small = _model(vocab_size=SMALL_VOCAB_SIZE - 10)
    w["small_vocab_ckpt"] = str(base / "small_vocab.ckpt")
    torch.save({"model": small.state_dict(), "config": small.config.to_dict()}, w["small_vocab_ckpt"])
    w["data_cr"] = str(base / "data_cr")
    os.makedirs(w["data_cr"])
    for name in os.listdir(w["data"]):
        with open(os.path.join(w["data"], name), "rb") as f:
            data = f.read()
        with open(os.path.join(w["data_cr"], name), "wb") as f:
            f.write(data.replace(b"\n", b"\r"))
    w["data_one"] = write_summarization_data(str(base / "data_one"), sizes=(("train", 1), ("val", 4), ("test", 4)))
    return w


def _one_line(capsys, code: int, script: str) -> str:
    # LDDL's logger keeps the stream of an earlier in-process run (closed by pytest's capture): logging's own
    # "--- Logging error ---" report of that, not the run's output
    err = re.sub(r"--- Logging error ---\n.*?\nArguments: \(.*?\)\n", "", capsys.readouterr().err, flags=re.S)
    lines = [line for line in err.strip().splitlines()
             if not line.startswith(("note:", "[checkpoint]", "[generate]", "[data]", "[train]", "LDDL - "))]
    assert code == 2, f"exit {code}, stderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    prefix = "bart.export" if script == "bart.export" else script
    assert len(lines) == 1 and lines[0].startswith(f"{prefix}: error:"), err[-3000:]
    return lines[0]


def _written(folder: str) -> list[str]:
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


FT = ["--config_path", "{cfg}", "--data_dir", "{data}", "--tokenizer", "{tok}", "--max_steps", "1",
      "--train_batch_size", "4", "--n_val", "0", "--num_workers", "0", "--max_source_length", "32",
      "--max_target_length", "16", "--output_dir", "{out}"]
EV = ["{model}", "{cfg}", "{data}", "{out}", "--tokenizer", "{tok}", "--max_source_length", "32",
      "--max_target_length", "8", "--bs", "2"]
PT = ["--config_path", "{cfg}", "--data_dir", "{shards}", "--tokenizer", "{tok}", "--max_steps", "1",
      "--train_batch_size", "2", "--max_source_length", "32", "--num_workers", "0", "--output_dir", "{out}"]


def _argv(template: list[str], world: dict, out: str, **values) -> list[str]:
    return [a.format(**{**world, "out": out, **values}) for a in template]


# -- case 2: weights the model cannot use ---------------------------------------------------------------------
# (entry point, argv, the file and the tensor the line must name). Old code: finetune.py exit 0 with loss
# ln(1024) = 6.931 (whole-number weights), run_eval.py exit 0 writing "!!!", bart.export exit 0 writing the
# folder; NaN: finetune.py ran and stopped after 5 NaN updates (exit 3), naming no tensor.
ENTRY_CASES = [
    ("finetune-int32-safetensors", "finetune.py", FT + ["--init_checkpoint", "{hf_int32}"],
     ["hf_int32/model.safetensors", "final_logits_bias", "int32"]),
    ("finetune-nan-safetensors", "finetune.py", FT + ["--init_checkpoint", "{hf_nan}"],
     ["hf_nan/model.safetensors", "model.encoder.layers.0.fc1.weight", "1 NaN/inf"]),
    ("run_eval-int8-ckpt", "run_eval.py", EV, ["int8.ckpt", "int8"]),
    ("export-int32-safetensors", "bart.export", ["{hf_int32}", "{out}", "--tokenizer", "{tok}"],
     ["hf_int32/model.safetensors", "int32"]),
    ("export-nan-safetensors", "bart.export", ["{hf_nan}", "{out}", "--tokenizer", "{tok}"],
     ["hf_nan/model.safetensors", "model.encoder.layers.0.fc1.weight"]),
]


@pytest.mark.parametrize("case", ENTRY_CASES, ids=[c[0] for c in ENTRY_CASES])
def test_unusable_weights_are_refused_by_each_entry_point(case, world, tmp_path, capsys):
    name, script, template, words = case
    out = str(tmp_path / "out")
    code = _main(script, _argv(template, world, out, model=world["int8_ckpt"]))
    line = _one_line(capsys, code, script)
    for word in words:
        assert word in line, (word, line)
    assert not [f for f in _written(out) if f.endswith((".ckpt", ".safetensors", ".txt", ".json"))], _written(out)


def test_a_resumed_training_checkpoint_with_nan_weights_is_refused_naming_the_tensor(world, tmp_path, capsys):
    """A run's own _step{N}.ckpt whose weights went bad on disk (old code: resumed and trained on NaN until
    --max_consecutive_nonfinite stopped it, exit 3, naming no tensor)."""
    out = tmp_path / "out"
    argv = _argv(FT, world, str(out)) + ["--init_checkpoint", world["weights"]]
    assert _main("finetune.py", argv) == 0
    path = out / "_epoch0_step1.ckpt"
    state = torch.load(path, weights_only=True)
    state["model"]["model.decoder.layers.0.fc2.weight"][0, 0] = float("inf")
    torch.save(state, path)
    capsys.readouterr()
    code = _main("finetune.py", argv + ["--max_steps", "2", "--resume_from_checkpoint", str(path),
                                        "--allow_resume_change", "max_steps"])
    line = _one_line(capsys, code, "finetune.py")
    assert "_epoch0_step1.ckpt" in line and "model.decoder.layers.0.fc2.weight" in line, line


def _sharded(folder, state: dict) -> str:
    """transformers' sharded layout: model.safetensors.index.json and two shards."""
    from safetensors.torch import save_file

    from bart.modeling.weights import save_pretrained
    save_pretrained(_model(), str(folder))  # config.json and generation_config.json
    os.remove(os.path.join(folder, "model.safetensors"))
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    for shard, names in shards.items():
        save_file({k: state[k].contiguous() for k in names}, os.path.join(folder, shard), metadata={"format": "pt"})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {k: s for s, names in shards.items() for k in names}}, f)
    return str(folder)


def _fairseq(path, state: dict) -> str:
    """The weights named and laid out as fairseq's BARTModel.state_dict() (bart.large/model.pt)."""
    out = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.") and k != "model.shared.weight"}
    out["encoder.embed_tokens.weight"] = out["decoder.embed_tokens.weight"] = state["model.shared.weight"]
    torch.save({"model": out, "args": {"arch": "bart_large", "encoder_attention_heads": 4,
                                       "decoder_attention_heads": 4}}, path)
    return str(path)


def _changed(key: str, value) -> dict:
    state = {k: v.clone() for k, v in _model().state_dict().items()}
    state[key] = value(state[key]) if callable(value) else value
    if key == "model.shared.weight":
        for tied in TIED:
            state[tied] = state[key]
    return state


FC1 = "model.decoder.layers.0.fc1.weight"
# (id, write(tmp_path) -> path given to from_pretrained, file named, tensor named, words)
KIND_CASES = [
    ("sharded-safetensors-bool", lambda t: _sharded(t / "sharded", {k: (v.bool() if k == FC1 else v) for k, v in
                                                                    _state().items()}),
     "model-0000", FC1, "bool"),
    ("pytorch_model.bin-complex", lambda t: _bin(t, _changed(FC1, lambda v: v.to(torch.complex64))),
     "pytorch_model.bin", FC1, "complex64"),
    ("training-ckpt-inf-fp16", lambda t: _save(t / "_step5.ckpt", {
        "kind": "bart-training-checkpoint", "model": _changed(FC1, lambda v: v.half().index_fill_(1, torch.tensor([0]),
                                                                                                  float("inf"))),
        "config": _model().config.to_dict(), "step": 5}), "_step5.ckpt", FC1, "NaN/inf"),
    ("weights-ckpt-int64", lambda t: _save(t / "best.ckpt", {"kind": "bart-weights", "model": _changed(
        "model.shared.weight", lambda v: v.long()), "config": _model().config.to_dict()}),
     "best.ckpt", "model.shared.weight", "int64"),
    ("lightning-ckpt-nan", lambda t: _save(t / "lightning.ckpt", {"state_dict": {
        "model." + k: v for k, v in _changed(FC1, lambda v: v * float("nan")).items()}}),
     "lightning.ckpt", FC1, f"{64 * 32} NaN/inf"),
    ("float8", lambda t: _save(t / "fp8.ckpt", _changed(FC1, lambda v: v.to(torch.float8_e4m3fn))),
     "fp8.ckpt", FC1, "float8_e4m3fn"),
    ("fairseq-int32", lambda t: _fairseq(t / "model.pt", _changed(FC1, lambda v: v.int())),
     "model.pt", FC1, "int32"),
    ("fairseq-nan", lambda t: _fairseq(t / "model.pt", _changed("model.shared.weight", lambda v: v.index_fill(
        0, torch.tensor([7]), float("nan")))), "model.pt", "model.shared.weight", f"{32} NaN/inf"),
]


def _save(path, obj) -> str:
    torch.save(obj, path)
    return str(path)


def _bin(tmp_path, state: dict) -> str:
    folder = tmp_path / "bin"
    from bart.modeling.weights import save_pretrained
    save_pretrained(_model(), str(folder))
    os.remove(folder / "model.safetensors")
    torch.save(state, folder / "pytorch_model.bin")
    return str(folder)


@pytest.mark.parametrize("case", KIND_CASES, ids=[c[0] for c in KIND_CASES])
def test_every_weight_file_kind_refuses_unusable_tensors_naming_file_and_tensor(case, tmp_path):
    from bart.modeling import BartForConditionalGeneration
    name, write, file_named, tensor, words = case
    path = write(tmp_path)
    config = None if name.startswith(("sharded", "pytorch", "training", "weights", "fairseq")) else _model().config
    with pytest.raises(CheckpointError) as err:
        BartForConditionalGeneration.from_pretrained(path, config=config)
    text = str(err.value)
    first = text.split(":")[0]
    assert file_named in os.path.basename(first) and os.path.isfile(first), text  # the file itself, not its folder
    assert f"tensor {tensor} " in text and words in text and "\n" not in text, text


def test_fairseq_table_of_the_wrong_rank_is_one_line(tmp_path):
    from bart.modeling import BartForConditionalGeneration
    state = _changed("model.shared.weight", lambda v: v[:, 0].contiguous())
    path = _fairseq(tmp_path / "model.pt", state)  # old code: ValueError (not enough values to unpack), a traceback
    with pytest.raises(CheckpointError, match=rf"model.pt: tensor encoder.embed_tokens.weight has shape \({SMALL_VOCAB_SIZE},\)"):
        BartForConditionalGeneration.from_pretrained(path)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_floating_weights_of_any_width_still_load_unchanged(dtype, tmp_path):
    """No false refusal: half, bfloat16 and double tables load, as the model's float32 of the same values."""
    from bart.modeling import BartForConditionalGeneration
    state = {k: v.to(dtype) for k, v in _model().state_dict().items()}
    model = BartForConditionalGeneration.from_pretrained(_save(tmp_path / "w.ckpt", state), config=_model().config)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, state[key].float(), atol=0, rtol=0)


# -- case 3: contradictory flags -------------------------------------------------------------------------------
# (id, script, extra flags, words the one line must contain). Old code: each ran, one flag silently winning.
CONTRADICTIONS = [
    ("scratch-init", "finetune.py", ["--from_scratch", "--init_checkpoint", "{weights}"],
     ["--from_scratch", "--init_checkpoint"]),
    ("scratch-model_name_or_path", "finetune.py", ["--from_scratch", "--model_name_or_path", "{weights}"],
     ["--from_scratch", "--model_name_or_path"]),
    ("scratch-weights_only", "finetune.py", ["--from_scratch", "--load_model_weights_only", "{weights}"],
     ["--from_scratch", "--load_model_weights_only"]),
    ("init-and-model_name_or_path", "finetune.py", ["--init_checkpoint", "{weights}", "--model_name_or_path",
                                                     "{hf_nan}"], ["--init_checkpoint", "--model_name_or_path"]),
    ("no_tensorboard-tensorboard_dir", "finetune.py", ["--init_checkpoint", "{weights}", "--no_tensorboard",
                                                        "--tensorboard_dir", "{base}/tb"],
     ["--no_tensorboard", "--tensorboard_dir"]),
    ("pt-no_tensorboard-tensorboard_dir", "pretrain.py", ["--no_tensorboard", "--tensorboard_dir", "{base}/tb"],
     ["--no_tensorboard", "--tensorboard_dir"]),
    ("use_nvlamb-without-lamb", "pretrain.py", ["--use_nvlamb"], ["--use_nvlamb", "--lamb"]),
    ("val_check_interval-n_val-0", "finetune.py", ["--init_checkpoint", "{weights}", "--val_check_interval", "2"],
     ["--val_check_interval 2", "--n_val 0"]),
    ("auto-weights_only", "finetune.py", ["--init_checkpoint", "{weights}", "--resume_from_checkpoint", "auto",
                                          "--load_model_weights_only"], ["--load_model_weights_only", "PATH"]),
]


@pytest.mark.parametrize("case", CONTRADICTIONS, ids=[c[0] for c in CONTRADICTIONS])
def test_contradictory_flags_are_one_line(case, world, tmp_path, capsys):
    name, script, extra, words = case
    out = str(tmp_path / "out")
    code = _main(script, _argv((FT if script == "finetune.py" else PT) + extra, world, out))
    line = _one_line(capsys, code, script)
    for word in words:
        assert word in line, (word, line)
    assert not os.path.exists(out)  # refused at parse time: nothing made


@pytest.mark.parametrize("extra", [
    ["--init_checkpoint", "{weights}", "--resume_from_checkpoint", "auto"],      # the scripts' phase 2 / restarts
    ["--init_checkpoint", "{weights}", "--resume_from_checkpoint", "True"],      # "the same command, resumed"
    ["--from_scratch", "--resume_from_checkpoint", "auto"],
    ["--init_checkpoint", "{weights}", "--model_name_or_path", "{weights}"],     # the same weights twice
    ["--resume_from_checkpoint={weights}", "--load_model_weights_only"],         # the reference's spelling
    ["--init_checkpoint", "{weights}", "--lamb", "--use_nvlamb", "--no_tensorboard"],
    ["--init_checkpoint", "{weights}", "--val_check_interval", "0"],  # run_summarization.sh with N_VAL=0
], ids=["auto", "true", "scratch-auto", "same-weights", "reference-weights-only", "nvlamb", "script-n_val-0"])
def test_compatible_flags_still_parse(extra, world, tmp_path):
    import finetune
    args = finetune.parse_args(_argv(FT + extra, world, str(tmp_path / "out")))
    assert args.init_checkpoint in (None, world["weights"])


# -- case 8: line ends, vocabulary size, too few examples, permissions ---------------------------------------
def test_cr_only_split_is_read_line_by_line_by_run_eval(world, tmp_path, capsys):
    """Old code: the CR-only test split was one example (run_eval wrote one generation for four sources)."""
    out = str(tmp_path / "out")
    code = _main("run_eval.py", _argv(EV, world, out, model=world["weights"], data=world["data_cr"]))
    assert code == 0, capsys.readouterr().err[-3000:]
    with open(os.path.join(out, "test_generations.txt"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 4


def test_run_eval_into_a_training_folder_keeps_its_log(world, tmp_path, capsys):
    """Old code: run_eval.py without --json-summary into a fine-tuning folder wrote its dllogger.json anew, so the
    training run's log was lost. Now the evaluation's record is appended (and said once); twice, two records."""
    from bart.records.dllogger_compat import read_dllogger
    out = tmp_path / "out"
    out.mkdir()
    training = 'DLLL {"timestamp": "1", "datetime": "x", "elapsedtime": 1.0, "type": "LOG", "step": 3, "data": {"loss": 2.5}}\n'
    (out / "dllogger.json").write_text(training)
    for again in ([], ["--overwrite"]):  # the second replaces the first's generations (refused without --overwrite)
        code = _main("run_eval.py", _argv(EV, world, str(out), model=world["weights"], data=world["data"]) + again)
        assert code == 0, capsys.readouterr().err[-3000:]
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[run_eval]") and "appended" in line]
    assert len(said) == 2 and str(out / "dllogger.json") in said[0], said
    records = [r for r in read_dllogger(str(out / "dllogger.json")) if r["type"] == "LOG"]
    assert records[0]["step"] == 3 and records[0]["data"] == {"loss": 2.5}  # the training log, kept
    assert len([r for r in records if r["step"] == [] and "rouge1" in r["data"]]) == 2


def test_line_ends_of_every_kind_read_the_same(world, tmp_path):
    from bart.data.summarization import read_split
    expected = read_split(world["data"], "train")
    assert len(expected[0]) == 16
    for name, end in (("crlf", b"\r\n"), ("cr", b"\r")):
        folder = tmp_path / name
        folder.mkdir()
        for side in ("source", "target"):
            data = open(os.path.join(world["data"], f"train.{side}"), "rb").read()
            (folder / f"train.{side}").write_bytes(data.replace(b"\n", end).rstrip(end))  # no final line end too
        assert read_split(str(folder), "train") == expected, name


def test_mixed_line_ends_count_mismatch_is_one_line_naming_the_cause(tmp_path):
    from bart.data.summarization import read_split
    (tmp_path / "train.source").write_bytes(b"First source.\nSecond one, with a stray \r inside.\nThird.\n")
    (tmp_path / "train.target").write_bytes(b"A.\nB.\nC.\n")
    with pytest.raises(UserError) as err:
        read_split(str(tmp_path), "train")
    text = str(err.value)
    assert "train.source has 4 lines but" in text and "train.target has 3" in text, text
    assert "mixes line ends" in text and "train.source" in text.split("mixes")[0], text


def test_tokenizer_corpus_and_xsum_read_cr_only_lines(tmp_path):
    import io
    import tarfile

    from bart.data.prepare_summarization import convert_xsum
    from bart.tokenization.train_tokenizer import iter_corpus
    corpus = tmp_path / "old_mac.txt"
    corpus.write_bytes(b"one line\rtwo line\r\rthree\r")
    assert list(iter_corpus([str(corpus)])) == ["one line", "two line", "three"]  # old code: one text
    tarball = tmp_path / "xsum.tar"
    with tarfile.open(tarball, "w") as tar:
        for split in ("train", "val", "test"):
            # a line separator (U+2028) inside an article is not a line end: str.splitlines shifted every later
            # source against its target
            for side, data in (("source", "Article one\u2028 continued.\rArticle two.\r"), ("target", "One.\rTwo.\r")):
                payload = data.encode("utf-8")
                info = tarfile.TarInfo(f"xsum/{split}.{side}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    convert_xsum(str(tarball), str(tmp_path / "out"))
    assert (tmp_path / "out" / "train.source").read_text().splitlines() == ["Article one continued.", "Article two."]


@pytest.mark.parametrize("script", ["finetune.py", "pretrain.py", "run_eval.py"])
def test_config_vocab_size_below_the_tokenizer_exits_2(script, world, tmp_path, capsys):
    """Old code: SystemExit("error: ...") - one line, but exit 1, as a crash."""
    out = str(tmp_path / "out")
    if script == "run_eval.py":  # the checkpoint decides the architecture there
        argv = _argv(EV, world, out, model=world["small_vocab_ckpt"])
    else:
        argv = _argv(FT + ["--from_scratch"] if script == "finetune.py" else PT, world, out, cfg=world["cfg_small_vocab"])
    line = _one_line(capsys, _main(script, argv), script)
    assert f"has {SMALL_VOCAB_SIZE} tokens but" in line and f"vocab_size {SMALL_VOCAB_SIZE - 10}" in line, line


@pytest.mark.parametrize("script", ["pretrain.py", "finetune.py"])
def test_a_global_batch_larger_than_the_data_is_one_line(script, world, tmp_path, capsys):
    """Old code: exit 0; the banner said 1000 sequences per update, each held the 16 rows there are."""
    out = str(tmp_path / "out")
    argv = _argv(PT if script == "pretrain.py" else FT + ["--init_checkpoint", "{weights}"], world, out)
    line = _one_line(capsys, _main(script, argv + ["--train_batch_size", "1000"]), script)
    assert "global batch of 1000 sequences" in line and "larger than the 16 training rows" in line, line
    assert "--train_batch_size to at most 16" in line, line
    assert not os.path.exists(os.path.join(out, "run_config.json"))  # refused before anything is written


def _first_loss(out: str) -> float:
    from bart.records.dllogger_compat import read_dllogger
    return next(r["data"]["loss"] for r in read_dllogger(os.path.join(out, "dllogger.json"))
                if r["type"] == "LOG" and r["step"] == 1 and "loss" in r["data"])


@pytest.fixture(scope="module")
def plain_loss(world, tmp_path_factory):
    """The first loss of one fine-tuning update on the plain files (the peer of the two tests below)."""
    out = str(tmp_path_factory.mktemp("plain") / "out")
    assert _main("finetune.py", _argv(FT + ["--init_checkpoint", "{weights}", "--log_freq", "1"], world, out)) == 0
    return _first_loss(out)


def test_a_byte_order_mark_is_removed_and_said_once(world, plain_loss, tmp_path, capsys):
    """Old code: the mark reached the tokenizer as text of the first line, and the loss differed."""
    data = tmp_path / "bom"
    data.mkdir()
    for name in os.listdir(world["data"]):
        (data / name).write_bytes(b"\xef\xbb\xbf" + open(os.path.join(world["data"], name), "rb").read())
    out = str(tmp_path / "out")
    capsys.readouterr()
    assert _main("finetune.py", _argv(FT + ["--init_checkpoint", "{weights}", "--log_freq", "1"], world, out,
                                      data=str(data))) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "byte-order mark" in line]
    assert sorted(said) == [f"note: {data / n} starts with a UTF-8 byte-order mark: removed (it is not part of the "
                            f"text)" for n in ("train.source", "train.target")], said
    assert _first_loss(out) == pytest.approx(plain_loss, abs=1e-6)


def test_a_config_key_nothing_reads_is_named_in_one_line(world, plain_loss, tmp_path, capsys):
    """Old code: exit 0, no note, the key copied into run_config.json as if it meant something."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "foo_bar": 1, "dropuot_prob": 0.3}))
    out = str(tmp_path / "out")
    capsys.readouterr()
    assert _main("finetune.py", _argv(FT + ["--init_checkpoint", "{weights}", "--log_freq", "1"], world, out,
                                      cfg=str(config))) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "read by no part" in line]
    assert said == [f"note: BartConfig: key 'foo_bar' (in {config}) is read by no part of this project: it changes "
                    f"nothing",
                    f"note: BartConfig: key 'dropuot_prob' (in {config}) is read by no part of this project: it "
                    f"changes nothing (keys it might mean: dropout)"], said
    assert _first_loss(out) == pytest.approx(plain_loss, abs=1e-6)


@pytest.mark.parametrize("script", ["pretrain.py", "finetune.py"])
def test_a_model_too_big_for_the_memory_is_one_line(script, world, tmp_path, capsys):
    """Old code: a traceback from model construction ending in "DefaultCPUAllocator: can't allocate memory"."""
    config = tmp_path / "huge.json"
    config.write_text(json.dumps({**CONFIG, "encoder_ffn_dim": 2 ** 38}))  # fc1 alone: 32 TiB
    out = str(tmp_path / "out")
    argv = _argv(PT if script == "pretrain.py" else FT + ["--from_scratch"], world, out, cfg=str(config))
    line = _one_line(capsys, _main(script, argv), script)
    assert "out of memory: asked for 32.0 TiB; the limit that applies is " in line, line
    assert "--train_batch_size" in line and "d_model, layers, ffn dims" in line, line


def test_out_of_memory_under_a_ulimit_names_the_limit_and_the_size(world, tmp_path):
    """pretrain.py under a real RLIMIT_AS (``ulimit -v``) smaller than the machine's RAM. Was: "asked for 32768.0 GiB;
    this machine has <RAM>", the ulimit that refused it unnamed."""
    import resource

    from bart.runtime.memory import host_memory

    limit = 6 * 2 ** 30
    if (host_memory()[0] or 0) <= limit:
        pytest.skip("the machine's RAM is below the ulimit this test sets")
    config = tmp_path / "huge.json"
    config.write_text(json.dumps({**CONFIG, "encoder_ffn_dim": 2 ** 38}))  # fc1 alone: 32 TiB
    argv = _argv(PT, world, str(tmp_path / "out"), cfg=str(config))
    out = subprocess.run([sys.executable, "pretrain.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT),
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    lines = [line for line in out.stderr.strip().splitlines() if not line.startswith(("note:", "LDDL - "))]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("pretrain.py: error: out of memory: asked for 32.0 TiB; the limit that applies is this "
                               "process's RLIMIT_AS 6.0 GiB (ulimit -v), "), lines
    assert " of it in use (this machine has " in lines[0], lines


def _in_a_memory_cgroup(limit: int, command: list[str]):
    """``command`` run inside a new cgroup-v1 memory cgroup of ``limit`` bytes (swap included where the kernel
    accounts it); None where this machine does not let the test make one (no root, no v1 memory controller)."""
    folder = f"/sys/fs/cgroup/memory/bart_test_{os.getpid()}"
    try:
        os.mkdir(folder)
    except OSError:
        return None
    try:
        with open(os.path.join(folder, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        if os.path.exists(os.path.join(folder, "memory.memsw.limit_in_bytes")):
            with open(os.path.join(folder, "memory.memsw.limit_in_bytes"), "w") as f:
                f.write(str(limit))
        return subprocess.run(["sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "$@"', "sh", *command], cwd=ROOT,
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT))
    finally:
        os.rmdir(folder)


def test_out_of_memory_in_a_real_cgroup_is_one_line_before_the_kernel_kills(world, tmp_path):
    """finetune.py in a real memory cgroup whose limit holds the model (51M parameters, 0.2 GiB) but not its
    gradients and optimizer state. Was: the kernel's kill (exit 137, no line) at the optimizer's first step."""
    config = tmp_path / "wide.json"
    config.write_text(json.dumps({**CONFIG, "d_model": 768, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
                                  "encoder_layers": 3, "decoder_layers": 3}))
    argv = _argv(FT + ["--from_scratch"], world, str(tmp_path / "out"), cfg=str(config))
    out = _in_a_memory_cgroup(900 * 2 ** 20, [sys.executable, "finetune.py", *argv])
    if out is None:
        pytest.skip("this machine does not let the test make a memory cgroup (cgroup v1, root)")
    lines = [line for line in out.stderr.strip().splitlines() if not line.startswith(("note:", "["))]
    assert out.returncode == 2 and len(lines) == 1, (out.returncode, out.stderr[-3000:])
    assert lines[0].startswith("finetune.py: error: out of memory ahead: training ") and \
        "parameters needs about " in lines[0] and "the cgroup's memory limit 900.0 MiB (/sys/fs/cgroup/memory/bart_test_" \
        in lines[0] and "--train_batch_size" in lines[0], lines


def _fake_root(tmp_path, cgroup_lines, files):
    for path, text in {"proc/self/cgroup": "\n".join(cgroup_lines) + "\n",
                       "proc/meminfo": "MemTotal:       67108864 kB\nMemAvailable:   33554432 kB\n", **files}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_out_of_memory_in_a_cgroup_names_its_limit(tmp_path, version):
    """A SLURM job's cgroup (the job's limit on its folder; the step's below says none): the cgroup's limit is the
    one named, with its usage, and a size the allocator gave in MiB reads in MiB. Was: the machine's RAM and
    "asked for 0.1 GiB"."""
    from bart.runtime.memory import out_of_memory

    gib = 2 ** 30
    if version == "v2":
        root = _fake_root(tmp_path, ["0::/system.slice/slurmstepd.scope/job_7/step_0"], {
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.max": f"{4 * gib}\n",
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/memory.max": "max\n",
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.current": f"{3 * gib}\n"})
        named = "the cgroup's memory.max 4.0 GiB (/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.max)"
    else:
        root = _fake_root(tmp_path, ["5:cpuset:/slurm/uid_0/job_7", "4:memory:/slurm/uid_0/job_7/step_0"], {
            "sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.limit_in_bytes": f"{4 * gib}\n",
            "sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.usage_in_bytes": f"{3 * gib}\n",
            "sys/fs/cgroup/memory/slurm/uid_0/job_7/step_0/memory.limit_in_bytes": "9223372036854771712\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"})
        named = "the cgroup's memory limit 4.0 GiB (/sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.limit_in_bytes)"
    err = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                       "tried to allocate 67108864 bytes. Error code 12 (Cannot allocate memory)")
    said = out_of_memory(err, root=root)
    assert said.startswith(f"out of memory: asked for 64.0 MiB; the limit that applies is {named}"), said
    if version == "v2":
        assert ", 3.0 GiB of it in use (this machine has 64.0 GiB, 32.0 GiB available)" in said, said


def test_out_of_memory_of_unknown_size_says_so():
    """Python's MemoryError gives no size: the line says so instead of a size it does not know."""
    from bart.runtime.memory import UNKNOWN_SIZE, out_of_memory

    assert out_of_memory(MemoryError()).startswith(f"out of memory: asked for {UNKNOWN_SIZE}; the limit that applies")


def test_cuda_out_of_memory_reads_as_one_sentence():
    from bart.runtime.memory import out_of_memory
    err = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 GiB. GPU 0 has a total capacity of "
                                 "139.80 GiB of which 120.12 GiB is free. Including non-PyTorch memory, ...")
    said = out_of_memory(err)
    assert said.startswith("out of GPU memory: asked for 256.00 GiB"), said
    assert out_of_memory(RuntimeError("shape mismatch")) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_batch_too_big_for_the_gpu_is_one_line(world, tmp_path, capsys):
    """Logits of 256 rows x 32 tokens x a 4M-token vocabulary: 128 GiB asked of the GPU at the first update."""
    from tests.helpers.summaries import write_summarization_data
    config = tmp_path / "wide.json"
    config.write_text(json.dumps({**CONFIG, "vocab_size": 2 ** 22}))
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 256), ("val", 4), ("test", 4)))
    argv = _argv(FT + ["--from_scratch"], world, str(tmp_path / "out"), cfg=str(config), data=data)
    line = _one_line(capsys, _main("finetune.py", argv + ["--train_batch_size", "256"]), "finetune.py")
    assert line.startswith("finetune.py: error: out of GPU memory: asked for ") and " GiB free now)" in line, line


def test_train_split_smaller_than_the_processes_is_one_line(world):
    from bart.data.summarization import SortishSampler, build_finetuning_loader
    from bart.tokenization.tokenization_bart import BartTokenizer
    tokenizer = BartTokenizer.from_pretrained(world["tok"])
    with pytest.raises(UserError, match=r"train.source has 1 usable example\(s\), fewer than the 2 processes"):
        build_finetuning_loader(world["data_one"], tokenizer, 32, 16, 4, world_size=2, rank=0)
    # batches of one example that do not divide among the ranks: not a ValueError; the update short of an example
    # fills it with a filler (index 3 + i: example i, its labels ignored), and every example is trained on each epoch
    for epoch in range(4):
        dealt = []
        for rank in range(2):
            sampler = SortishSampler([5, 6, 7], batch_size=1, num_replicas=2, rank=rank, seed=0)
            sampler.set_epoch(epoch)
            dealt += [[i for batch in sampler for i in batch]]
        assert len(dealt[0]) == len(dealt[1]) == 2
        examples, fillers = [i for i in dealt[0] + dealt[1] if i < 3], [i - 3 for i in dealt[0] + dealt[1] if i >= 3]
        assert sorted(examples) == [0, 1, 2] and len(fillers) == 1 and fillers[0] in examples
    dataset = build_finetuning_loader(world["data_one"], tokenizer, 32, 16, 4).dataset
    batch = dataset.collate([dataset[0], dataset[len(dataset)]])  # example 0, and example 0 as a filler
    assert batch["input_ids"][0].tolist() == batch["input_ids"][1].tolist()
    assert (batch["labels"][0] != -100).any() and (batch["labels"][1] == -100).all()  # no loss, no gradient


def test_one_line_train_split_under_torchrun_is_one_line_per_rank(world, tmp_path):
    """Old code: ValueError "1 examples cannot feed 2 ranks" with a traceback from each rank."""
    out = str(tmp_path / "out")
    argv = _argv(FT + ["--init_checkpoint", "{weights}"], world, out, data=world["data_one"])
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "finetune.py", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("finetune.py:")]
    assert proc.returncode != 0 and len(ours) == 2 and ours[0] == ours[1], proc.stderr[-3000:]
    assert "fewer than the 2 processes" in ours[0] and "--nproc_per_node" in ours[0], ours
    assert "[rank0]" not in proc.stderr and "ValueError" not in proc.stderr, proc.stderr[-3000:]
    assert "exitcode  : 2" in proc.stderr, proc.stderr[-3000:]


@pytest.fixture
def umask():
    def set_mask(mask):
        os.umask(mask)
    old = os.umask(0o022)
    yield set_mask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["umask022", "umask077"])
def test_what_the_project_writes_gets_the_umasks_permissions(mask, umask, tmp_path):
    """Old code: build_tokenizer/train_tokenizer folders 0700, model.safetensors 0600, whatever the umask."""
    from bart.files.checkpoint_io import atomic_save
    from bart.modeling.weights import save_pretrained
    from bart.scoring.nltk_data import ensure_punkt
    from bart.tokenization.train_tokenizer import train_tokenizer
    from tests.helpers.corpus import write_tokenizer_corpus
    umask(mask)
    folder_mode, file_mode = 0o777 & ~mask, 0o666 & ~mask
    corpus = write_tokenizer_corpus(str(tmp_path / "corpus"), lines=200)
    tokenizer = train_tokenizer([corpus], str(tmp_path / "tok"), 400)["folder"]
    save_pretrained(_model(), str(tmp_path / "hf"))
    atomic_save(str(tmp_path / "w.ckpt"), {"x": torch.zeros(2)})
    punkt = os.path.join(ensure_punkt(str(tmp_path / "nltk")), "tokenizers", "punkt_tab", "english")
    mode = lambda p: os.stat(p).st_mode & 0o777  # noqa: E731
    assert {p: oct(mode(p)) for p in (tokenizer, punkt)} == {p: oct(folder_mode) for p in (tokenizer, punkt)}
    files = [os.path.join(tokenizer, "vocab.json"), str(tmp_path / "hf" / "model.safetensors"), str(tmp_path / "w.ckpt")]
    assert {p: oct(mode(p)) for p in files} == {p: oct(file_mode) for p in files}


def test_value_check_counts_only_real_nan_and_inf():
    """The fast check sums each tensor: finite values whose sum overflows are not NaN/inf; -inf and +inf
    together (a NaN sum) are counted as two."""
    from bart.modeling.weights import check_weight_values
    large = {"w": torch.full((10,), 3e38)}
    check_weight_values(large, large, "big.ckpt")
    both = {"w": torch.tensor([1.0, float("inf"), float("-inf")])}
    with pytest.raises(CheckpointError, match=r"big.ckpt: tensor w holds 2 NaN/inf value\(s\) of 3"):
        check_weight_values(both, both, "big.ckpt")


def test_the_memory_ahead_is_the_optimizers_own(tmp_path):
    """What training adds per parameter is the chosen optimizer's (bart.optim.TRAINING_BYTES): under a 1 GiB cgroup
    with 0.5 GiB in use, 50M parameters fit with Adafactor's factored state and not with AdamW's two moments."""
    from bart.optim import TRAINING_BYTES
    from bart.runtime.memory import MemoryAhead, check_training_fits

    gib = 2 ** 30
    root = _fake_root(tmp_path, ["0::/job"], {"sys/fs/cgroup/job/memory.max": f"{gib}\n",
                                              "sys/fs/cgroup/job/memory.current": f"{gib // 2}\n"})
    check_training_fits(50_000_000, TRAINING_BYTES["adafactor"], root=root)  # 191 MiB: fits
    with pytest.raises(MemoryAhead, match=r"training 50,000,000 parameters needs about 572\.2 MiB more"):
        check_training_fits(50_000_000, TRAINING_BYTES["adamw"], root=root)
