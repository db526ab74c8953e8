"""docs/INFERENCE.md's ONNX commands, run as printed on a folder ``python -m bart.export`` writes (post-LN BART and
Pre-LN as mBART): optimum-onnx's exporter, then onnxruntime's ``ORTModelForSeq2SeqLM.generate``, decode token for
token as this project's ``generate`` (greedy and beam search). optimum-onnx 0.1.0 requires transformers<4.58: it is
installed in CI's transformers 4.57 step only (requirements-transformers4.txt, scripts/run_tests_transformers4.sh);
elsewhere this file is skipped."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("optimum.onnxruntime", reason="optimum-onnx[onnxruntime] is not installed (requirements-"
                                                  "transformers4.txt: CI's transformers 4.57 step)")

import torch  # noqa: E402

from bart.configuration import BartConfig  # noqa: E402
from bart.export import main as export_main  # noqa: E402
from bart.modeling import BartForConditionalGeneration  # noqa: E402
from tests.helpers import ROOT  # noqa: E402

TINY = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128, init_std=0.3, dropout=0.0)
# the folder's generation settings (generation_config.json): what generate() and ORT's generate() run by default
SETTINGS = dict(num_beams=4, min_length=5, max_length=24, no_repeat_ngram_size=3, length_penalty=2.0,
                early_stopping=True, forced_bos_token_id=0)
TEXTS = ["ka lo mi ne su ta ri vo ze pa do gu le ni so fa mu", "te ro bi ya ke lu ka lo ka lo mi mi ne",
         "su ta ri vo ze", "pa do gu le ni so fa mu te ro bi ya ke lu ka lo mi ne su ta ri"]
# the folder's settings, then greedy and beam search with others (lengths, n-gram blocking, length penalty)
CASES = [{}, dict(num_beams=1), dict(num_beams=1, no_repeat_ngram_size=0, min_length=0, max_length=16),
         dict(num_beams=2, length_penalty=1.0), dict(num_beams=4, no_repeat_ngram_size=0, length_penalty=0.5)]
EOS_BIAS = 3.0  # on EOS's logit: rows end at different steps, some at max_length


def _onnx_section():
    text = open(os.path.join(ROOT, "docs", "INFERENCE.md"), encoding="utf-8").read()
    return text.split("\n### ONNX")[1].split("\n## ")[0].split("\n### ")[0]


def _onnx_block():
    """docs/INFERENCE.md's ONNX section's commands: the install line, then the export and decode lines."""
    block = _onnx_section().split("```bash\n")[1].split("```")[0]
    install, rest = block.split("\n", 1)
    return install, rest


def _pins(text):
    return dict(re.findall(r"^([\w-]+(?:\[\w+\])?)==(\S+)", text, flags=re.M))


def test_the_documented_install_line_names_the_pins_ci_tests():
    """The install line's versions are requirements-transformers4.txt's, which this environment holds; the section
    names each version CI tests."""
    from importlib.metadata import version

    install, _ = _onnx_block()
    printed = _pins("\n".join(re.findall(r'"([^"]+)"', install)))
    assert printed == {"transformers": "4.57.6", "optimum-onnx[onnxruntime]": "0.1.0"}, install
    pinned = _pins(open(os.path.join(ROOT, "requirements-transformers4.txt")).read())
    assert {name: pinned[name] for name in printed} == printed
    for name in ("transformers", "optimum-onnx", "optimum", "onnx", "onnxruntime"):
        pin = pinned[name if name != "optimum-onnx" else "optimum-onnx[onnxruntime]"]
        assert version(name) == pin, name
        assert f"{name} {pin}" in " ".join(_onnx_section().split()), name


@pytest.mark.slow
@pytest.mark.parametrize("pre_ln", [False, True])
def test_the_documented_onnx_export_decodes_as_this_project(pre_ln, tmp_path, small_tokenizer_dir, monkeypatch,
                                                            capsys):
    """A tiny model (EOS made likely) through ``bart.export`` into results/bart_hf, then the docs' lines as printed:
    the export in a shell (``.venv-onnx/bin/optimum-cli`` is this interpreter's), the decode's ``python -c`` code in
    this process (no second start-up), both from the folder holding results/. The printed summary is the project's;
    then ORTModelForSeq2SeqLM from the ONNX folder against ``generate`` over CASES, token for token."""
    import shlex

    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    from bart.tokenization.tokenization_bart import BartTokenizer

    tokenizer = BartTokenizer.from_pretrained(small_tokenizer_dir)
    torch.manual_seed(0)
    config = BartConfig(**TINY, **SETTINGS, vocab_size=len(tokenizer), pre_ln=pre_ln)
    model = BartForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, config.eos_token_id] = EOS_BIAS
    torch.save({"model": model.state_dict(), "config": config.to_dict(), "step": 1}, tmp_path / "model.ckpt")
    results = tmp_path / "results"
    assert export_main([str(tmp_path / "model.ckpt"), str(results / "bart_hf"), "--tokenizer",
                        small_tokenizer_dir]) == 0

    _, lines = _onnx_block()
    export, decode = lines.split("\n", 1)
    assert export == (".venv-onnx/bin/optimum-cli export onnx --model results/bart_hf --task "
                      "text2text-generation-with-past results/bart_onnx")
    bin_dir = tmp_path / ".venv-onnx" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "optimum-cli").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m optimum.commands.optimum_cli "$@"\n')
    (bin_dir / "optimum-cli").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_")) and k != "TOKENIZER"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    done = subprocess.run(["bash", "-c", export], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = results / "bart_onnx"
    assert {"encoder_model.onnx", "decoder_model_merged.onnx", "generation_config.json", "tokenizer.json"} <= set(
        os.listdir(folder))

    python, flag, code = shlex.split(decode)
    assert (python, flag) == (".venv-onnx/bin/python", "-c")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    exec(compile(code, "docs/INFERENCE.md (ONNX decode)", "exec"), {"__name__": "__main__"})
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("['")]
    batch = tokenizer(["Some long text ..."], return_tensors="pt")
    summary = tokenizer.batch_decode(model.generate(batch["input_ids"], attention_mask=batch["attention_mask"]),
                                     skip_special_tokens=True)
    assert printed == [repr(summary)] and len(summary[0]) > 5

    # onnxruntime against generate: the folder's settings, greedy and beam search with others
    onnx_model = ORTModelForSeq2SeqLM.from_pretrained(str(folder))
    assert onnx_model.config.model_type == ("mbart" if pre_ln else "bart")
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    pad, eos = config.pad_token_id, config.eos_token_id
    ended_early = cut = 0
    for case in CASES:
        ours = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], **case)
        theirs = onnx_model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **case)
        assert theirs.tolist() == ours.tolist(), case
        lengths = (ours != pad).sum(1)
        max_length = case.get("max_length", SETTINGS["max_length"])
        ended_early += int(((ours == eos).sum(1) == 2).logical_and(lengths < max_length).sum())
        cut += int((lengths == max_length).sum())
    assert ended_early >= 1 and cut >= 1, (ended_early, cut)  # both ways of ending were compared
