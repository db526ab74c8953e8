"""``python -m bart.export``: a folder transformers loads (BART and Pre-LN as mBART) and generates from
as the project does; clear one-line errors and no half-written folder."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

from bart.configuration import BartConfig
from bart.export import main as export_main
from bart.modeling import BartForConditionalGeneration
from tests.helpers import ROOT

TEXTS = ["NVIDIA Geforce Won't Run or Uninstall after the update, users say. The driver was rolled back.",
         "The quick brown fox jumps over the lazy dog. It was fast, and the dog did not mind at all."]
TINY = dict(vocab_size=50265, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
            init_std=0.3, dropout=0.0, min_length=6, max_length=24, no_repeat_ngram_size=3, length_penalty=2.0,
            early_stopping=True, forced_bos_token_id=0)


def _export(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_")) and k != "TOKENIZER"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "bart.export", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _export_here(monkeypatch, capsys, *args):
    """``bart.export``'s main in this process (what ``python -m bart.export`` runs), in the environment ``_export``
    gives its processes.
    Returns (exit code, stdout, stderr)."""
    for name in list(os.environ):
        if name.startswith(("HF_", "TRANSFORMERS_")) or name == "TOKENIZER":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    capsys.readouterr()
    code = export_main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _checkpoint(path, pre_ln, num_beams, **overrides):
    """A training checkpoint as finetune.py's best-validation one: weights, config, numpy metrics."""
    torch.manual_seed(0)
    config = BartConfig(**dict(TINY, **overrides), pre_ln=pre_ln, num_beams=num_beams)
    model = BartForConditionalGeneration(config).eval()
    torch.save({"model": model.state_dict(), "config": config.to_dict(), "step": 7,
                "metrics": {"rouge1": np.float64(12.5)}}, path)
    return model


def _project_summaries(model, tokenizer):
    """What run_eval.py does: generate with the model's settings, decode, strip."""
    out = []
    for text in TEXTS:
        batch = tokenizer([text], return_tensors="pt")
        ids = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"])
        out.append(tokenizer.batch_decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)[0].strip())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("pre_ln", [False, True])
def test_export_loads_in_transformers_and_summarizes_as_the_project(pre_ln, tmp_path, tokenizer_dir, tokenizer,
                                                                    monkeypatch, capsys):
    num_beams = 3 if pre_ln else 4
    model = _checkpoint(tmp_path / "best.ckpt", pre_ln, num_beams)
    out = tmp_path / "hf"
    code, _, stderr = _export_here(monkeypatch, capsys, tmp_path / "best.ckpt", out, "--tokenizer", tokenizer_dir)
    assert code == 0, stderr
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "vocab.json", "merges.txt"} <= set(os.listdir(out))
    config = json.load(open(out / "config.json"))
    assert config["model_type"] == ("mbart" if pre_ln else "bart") and config["tokenizer_class"] == "BartTokenizer"
    generation = json.load(open(out / "generation_config.json"))
    assert (generation["num_beams"], generation["max_length"], generation["min_length"], generation["no_repeat_ngram_size"],
            generation["forced_bos_token_id"]) == (num_beams, 24, 6, 3, 0)

    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert isinstance(hf_tokenizer, transformers.BartTokenizerFast)  # not mBART's SentencePiece tokenizer
    assert hf_tokenizer(TEXTS[0]).input_ids == tokenizer(TEXTS[0]).input_ids
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out))
    assert type(hf_model).__name__ == ("MBartForConditionalGeneration" if pre_ln else "BartForConditionalGeneration")

    ours = _project_summaries(model, tokenizer)
    assert ours[0] != ours[1] and all(len(s) > 10 for s in ours)
    # the README's hand-off (transformers 4.57 and 5.x alike; 5.x has no summarization pipeline): generate
    # with the folder's generation_config.json gives the project's summaries
    theirs = []
    for text in TEXTS:
        batch = hf_tokenizer([text], return_tensors="pt")
        theirs.append(hf_tokenizer.decode(hf_model.generate(**batch)[0], skip_special_tokens=True,
                                          clean_up_tokenization_spaces=False).strip())
    assert theirs == ours

    again = BartForConditionalGeneration.from_pretrained(str(out))  # and the project reads its export back
    assert (again.config.pre_ln, again.config.num_beams, again.config.max_length) == (pre_ln, num_beams, 24)
    assert _project_summaries(again, tokenizer) == ours


def test_export_from_a_folder_uses_its_tokenizer_and_replaces_only_with_overwrite(tmp_path, tokenizer_dir,
                                                                                   monkeypatch, capsys):
    _checkpoint(tmp_path / "m.ckpt", False, 4)
    assert _export_here(monkeypatch, capsys, tmp_path / "m.ckpt", tmp_path / "first", "--tokenizer",
                        tokenizer_dir)[0] == 0
    code, stdout, stderr = _export_here(monkeypatch, capsys, tmp_path / "first", tmp_path / "second")  # no --tokenizer
    assert code == 0, stderr
    assert f"tokenizer from {tmp_path / 'first'}" in stdout  # the folder's own
    before = (tmp_path / "second" / "model.safetensors").read_bytes()
    code, _, stderr = _export_here(monkeypatch, capsys, tmp_path / "m.ckpt", tmp_path / "second", "--tokenizer",
                                   tokenizer_dir)
    assert code == 2 and "exists and is not empty; pass --overwrite" in stderr
    assert (tmp_path / "second" / "model.safetensors").read_bytes() == before
    code, _, stderr = _export_here(monkeypatch, capsys, tmp_path / "m.ckpt", tmp_path / "second", "--tokenizer",
                                   tokenizer_dir, "--overwrite")
    assert code == 0, stderr
    assert sorted(os.listdir(tmp_path)) == ["first", "m.ckpt", "second"]  # no staging or backup folder left


def test_overwrite_never_removes_a_run_or_the_checkpoint_being_exported(tmp_path, tokenizer_dir, monkeypatch, capsys):
    """--overwrite replaces an earlier export only: a run's folder (the checkpoint's own), a parent of runs and a
    folder holding the input are refused in one line and left as they were; the folder the line advises works."""
    run = tmp_path / "results" / "run"
    run.mkdir(parents=True)
    _checkpoint(run / "final_step.ckpt", False, 4)
    for name, text in (("dllogger.json", "DLLL {}\n"), ("run_config.json", "{}")):
        (run / name).write_text(text)
    (tmp_path / "results" / "other").mkdir()
    (tmp_path / "results" / "other" / "data.txt").write_text("the user's")

    def tree():
        return sorted((str(p.relative_to(tmp_path)), p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())

    before = tree()
    for out, named in ((run, "dllogger.json, final_step.ckpt, run_config.json"), (tmp_path / "results", "other, run")):
        code, _, stderr = _export_here(monkeypatch, capsys, run / "final_step.ckpt", out, "--tokenizer", tokenizer_dir,
                                       "--overwrite")
        advised = out / "hf_export"
        assert code == 2 and stderr.count("\n") == 1, stderr
        assert (f"OUT_DIR {out} holds {named}, which an export does not write: --overwrite replaces only an earlier "
                f"export's folder; choose a new folder, such as {advised}") in stderr
        assert tree() == before  # nothing removed, nothing half-written
    code, _, stderr = _export_here(monkeypatch, capsys, run / "final_step.ckpt", run / "hf_export", "--tokenizer",
                                   tokenizer_dir, "--overwrite")  # the advised folder, verbatim
    assert code == 0, stderr
    assert {p for p, _ in before} < {p for p, _ in tree()} and (run / "hf_export" / "model.safetensors").is_file()
    # the input inside the folder an export would replace: an export's own weights file, re-exported over it
    shutil.copy(run / "hf_export" / "model.safetensors", run / "hf_export" / "pytorch_model.bin")
    shutil.copy(run / "hf_export" / "config.json", tmp_path / "config.json")
    kept = (run / "hf_export" / "pytorch_model.bin").read_bytes()
    code, _, stderr = _export_here(monkeypatch, capsys, run / "hf_export" / "pytorch_model.bin", run / "hf_export",
                                   "--config", tmp_path / "config.json", "--tokenizer", tokenizer_dir, "--overwrite")
    assert code == 2 and "holds the checkpoint being exported" in stderr and "choose another folder" in stderr, stderr
    assert (run / "hf_export" / "pytorch_model.bin").read_bytes() == kept


def test_bad_inputs_are_one_line_exit_2_and_leave_nothing(tmp_path, tokenizer_dir, monkeypatch, capsys):
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    # fine-tuning's final_step.ckpt (a raw state dict, no config) copied out of its run: it records the run's
    # tokenizer (an anonymous raw state dict of BART-large's size would be an NGC checkpoint: facebook's vocabulary)
    from bart.tokenization.tokenization_bart import BartTokenizer
    from bart.training.checkpoint import write_final_weights
    BartTokenizer.from_pretrained(tokenizer_dir).save_pretrained(str(tmp_path / "run"))
    os.replace(write_final_weights(str(tmp_path / "run"), BartForConditionalGeneration(BartConfig(**TINY)).state_dict()),
               tmp_path / "raw.ckpt")
    shutil.rmtree(tmp_path / "run")
    _checkpoint(tmp_path / "small_vocab.ckpt", False, 4, vocab_size=99)
    cases = [
        ((tmp_path / "missing.ckpt", tmp_path / "out"), "missing.ckpt' does not exist"),
        ((tmp_path / "notes.ckpt", tmp_path / "out"), "notes.ckpt is not a readable checkpoint: its 16 bytes are not a torch checkpoint"),
        ((tmp_path / "raw.ckpt", tmp_path / "out"), "raw.ckpt carries no model config; pass config=BartConfig(...) "
                                                     "(on the command line: --config CONFIG.json)"),
        # fails after the weights were written into the staging folder: nothing may remain
        ((tmp_path / "small_vocab.ckpt", tmp_path / "out", "--tokenizer", tokenizer_dir),
         "has 50262 tokens but the model's vocab_size is 99"),
        ((tmp_path / "small_vocab.ckpt", tmp_path / "out", "--tokenizer", "some-org/some-tokenizer"),
         "tokenizer 'some-org/some-tokenizer' is not a local path and not in the hub cache"),
    ]
    # the first and the last as processes (the hub cache's folder is read when huggingface_hub is imported), the
    # others through the same main in this process (a process each cost ~2.5 CPU-s of imports)
    for i, (args, expected) in enumerate(cases):
        if i in (0, len(cases) - 1):
            done = _export(*args, env_extra={"HF_HOME": str(tmp_path / "hf_home")})
            code, stderr = done.returncode, done.stderr
        else:
            code, _, stderr = _export_here(monkeypatch, capsys, *args)
        assert code == 2, (args, stderr)
        assert expected in stderr, stderr
        assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
        assert stderr.startswith("bart.export: error: ")
    assert sorted(os.listdir(tmp_path)) == ["notes.ckpt", "raw.ckpt", "small_vocab.ckpt"]
    # the same weights file exports once its config is given
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    code, _, stderr = _export_here(monkeypatch, capsys, tmp_path / "raw.ckpt", tmp_path / "out", "--config",
                                   tmp_path / "config.json", "--no-verify", "--tokenizer", tokenizer_dir)
    assert code == 0, stderr
    assert json.load(open(tmp_path / "out" / "config.json"))["d_model"] == 32


def test_the_exported_folder_gets_the_umasks_mode(tmp_path, tokenizer_dir, monkeypatch, capsys):
    """Rules out: the folder was 0755 whatever the umask (shared under 077, not group-writable under 002).
    The export runs in this process under each umask (the mode comes from the process's umask)."""
    _checkpoint(tmp_path / "m.ckpt", False, 2)
    for mask in (0o022, 0o077, 0o002):
        out = tmp_path / f"hf{mask:03o}"
        old = os.umask(mask)
        try:
            code, _, stderr = _export_here(monkeypatch, capsys, tmp_path / "m.ckpt", out, "--tokenizer", tokenizer_dir,
                                           "--no-verify")
        finally:
            os.umask(old)
        assert code == 0, stderr
        assert oct(os.stat(out).st_mode & 0o777) == oct(0o777 & ~mask), f"umask {mask:03o}"
        assert oct(os.stat(out / "model.safetensors").st_mode & 0o777) == oct(0o666 & ~mask), f"umask {mask:03o}"
