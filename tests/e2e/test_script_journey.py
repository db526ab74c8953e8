"""The evaluation script across two nodes, as a user starts it on each. (Public weights by hub id through
run_summarization.sh's 16 positional values and pass-through flags, the reference's eval script name and
argument order, and the export of the run are in tests/e2e/test_journey.py, beside the Quick Start's step 5 from
facebook/bart-large that they repeated.)"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import transformers

from bart.records.dllogger_compat import read_dllogger
from tests.helpers import ROOT
from tests.helpers.entry import run_entry
from tests.helpers.summaries import write_summarization_data

TINY = dict(vocab_size=50265, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)


def _bash(args, env, timeout=600):
    out = subprocess.run(["bash", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    return out


def _summary(path):
    return {k: v for r in read_dllogger(path) if r["type"] == "LOG" and r["step"] == [] for k, v in r["data"].items()}


@pytest.mark.slow
def test_evaluation_runs_on_two_nodes(tmp_path, tokenizer_dir, monkeypatch):
    """run_eval_summarization.sh under NNODES=2 (two torchrun agents on 127.0.0.1, one process each):
    the sources are shared out and the generations equal a one-process run's, in input order."""
    import socket
    torch.manual_seed(0)
    folder = tmp_path / "model"
    transformers.BartForConditionalGeneration(transformers.BartConfig(**TINY)).save_pretrained(folder)
    for name in os.listdir(tokenizer_dir):
        shutil.copy(os.path.join(tokenizer_dir, name), folder / name)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("test", 6),))
    args = ["scripts/run_eval_summarization.sh", str(folder), "2", "1", "fp32", "2", "32", "8", data, str(config),
            "false"]
    base = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    base.pop("TOKENIZER", None)
    # one process: what the script runs for these values (NUM_GPU 1: the interpreter alone), in this process
    monkeypatch.delenv("TOKENIZER", raising=False)
    assert run_entry("run_eval.py", [str(folder), str(config), data, str(tmp_path / "one"), "--type_path", "test",
                                     "--bs", "2", "--eval_beams", "2", "--max_source_length", "32",
                                     "--max_target_length", "8", "--no-tf32", "--no-pre_ln"]) == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    nodes = [subprocess.Popen(["bash", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(base, OUTPUT_DIR=str(tmp_path / "two"), NNODES="2", NODE_RANK=str(rank),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)) for rank in (0, 1)]
    for node in nodes:
        _, err = node.communicate(timeout=300)
        assert node.returncode == 0, err[-3000:]
    one = open(tmp_path / "one" / "test_generations.txt").read().splitlines()
    two = open(tmp_path / "two" / "test_generations.txt").read().splitlines()
    assert len(one) == 6 and two == one
    assert _summary(str(tmp_path / "two" / "dllogger.json"))["n_gpus"] == 2
