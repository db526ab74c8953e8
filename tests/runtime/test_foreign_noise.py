"""No line on stderr the project did not write: torchao's import lines (transformers 5 imports torchao whenever
it loads a model), torch's deprecations of torchao's registrations and transformers' progress bars stay out of
``python -m bart.export`` (its verify step and ``--ct2``'s conversion), ``from_pretrained`` and run_eval.py, each
in a fresh process (the lines come once per process, at torchao's first import); every other record of those
loggers still shows (bart/runtime/foreign_noise.py)."""
import enum
import importlib.util
import json
import logging
import os
import subprocess
import sys

import pytest
import torch

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration
from bart.runtime.foreign_noise import KNOWN_NOISE, drop_known_noise
from tests.helpers import ROOT

TINY = dict(vocab_size=50265, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
# the lines run_eval.py itself writes on stderr before its metrics (its notes and its progress)
RUN_EVAL_LINES = ("note: ", "[generate] ")


def _run(args, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "TORCHAO_"))
           and k != "TOKENIZER"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"))
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_only_the_known_records_are_dropped():
    drop_known_noise()
    drop_known_noise()  # once per logger, whatever the number of calls
    assert [len(logging.getLogger(n).filters) for n in ("torchao", "torch.utils._pytree")] == [1, 1]
    Torchao = enum.Enum("KernelPreference", "AUTO")
    Torchao.__module__ = "torchao.quantization.quantize_.common.kernel_preference"
    Other = enum.Enum("Other", "A")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    loggers = [logging.getLogger(n.logger) for n in KNOWN_NOISE]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        so = "/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so"
        logging.getLogger("torchao").warning(f"Failed to load {so}: Could not load this library: {so}")
        logging.getLogger("torchao").warning("Skipping import of cpp extensions due to incompatible torch version.")
        logging.getLogger("torchao.kernel.intmm").warning("Warning: Detected no triton, on systems without Triton "
                                                          "certain kernels will not work")
        deprecation = ("%s is an Enum subclass and is now natively supported by torch.compile as an opaque value "
                       "type. Calling register_constant() on Enum subclasses is deprecated")
        logging.getLogger("torch.utils._pytree").warning(deprecation, Torchao)
        assert seen == []
        logging.getLogger("torchao").warning("Failed to load the float8 config")  # not a kernel library: kept
        logging.getLogger("torch.utils._pytree").warning(deprecation, Other)  # another library's Enum: kept
        assert seen == ["Failed to load the float8 config", deprecation % Other]
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


@pytest.mark.slow
def test_stderr_of_export_from_pretrained_and_run_eval_is_the_projects_own(tmp_path, tokenizer_dir):
    torch.manual_seed(0)
    config = BartConfig(**TINY)
    torch.save({"model": BartForConditionalGeneration(config).state_dict(), "config": config.to_dict(), "step": 1},
               tmp_path / "model.ckpt")
    out = tmp_path / "out"
    ct2 = ["--ct2", str(tmp_path / "ct2")] if importlib.util.find_spec("ctranslate2") else []
    assert _run(["-m", "bart.export", str(tmp_path / "model.ckpt"), str(out), "--tokenizer", tokenizer_dir, *ct2],
                tmp_path) == ""
    loads = ("import transformers\n"
             "from bart.modeling import BartForConditionalGeneration\n"
             "from bart.tokenization.tokenization_bart import BartTokenizer\n"
             f"BartForConditionalGeneration.from_pretrained({str(out)!r}); BartTokenizer.from_pretrained({str(out)!r})\n"
             "transformers.utils.logging.disable_progress_bar()  # transformers' own bar, which its caller asked for\n"
             f"transformers.AutoModelForSeq2SeqLM.from_pretrained({str(out)!r})\n")
    assert _run(["-c", loads], tmp_path) == ""
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.source").write_text("The council approved the budget.\nRain flooded the harbour.\n")
    (data / "test.target").write_text("Budget approved.\nHarbour flooded.\n")
    stderr = _run(["run_eval.py", str(out), str(out / "config.json"), str(data), str(tmp_path / "eval"), "--device",
                   "cpu", "--bs", "2", "--eval_max_gen_length", "8"], tmp_path)
    # its notes and progress, then its metrics as one JSON document: a line of anyone else's breaks the parse
    rest = "\n".join(line for line in stderr.splitlines() if not line.startswith(RUN_EVAL_LINES))
    assert set(json.loads(rest)) >= {"rouge1", "rougeL", "n_obs"}, stderr
    assert (tmp_path / "eval" / "test_generations.txt").is_file()
