"""The fine-tuning scripts as a user runs them: public weights named by hub id (resolved from an
offline Hugging Face cache laid out by huggingface_hub's own layout), run_summarization.sh with a
leading part of its positional values and pass-through flags, the reference's eval script name and
argument order, then export to a Hugging Face folder. Sizes shrink through flags only."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import transformers

from tests.helpers.hub_cache import add_to_hub_cache
from tests.helpers.summaries import write_summarization_data
from utils.dllogger_compat import read_dllogger

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(vocab_size=50265, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)


def _bash(args, env, timeout=600):
    out = subprocess.run(["bash", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    return out


def _summary(path):
    return {k: v for r in read_dllogger(path) if r["type"] == "LOG" and r["step"] == [] for k, v in r["data"].items()}


@pytest.mark.slow
@pytest.mark.parametrize("configuration", ["laptop", "container"])
def test_public_weights_to_finetune_eval_and_export(tmp_path, small_tokenizer_dir, tokenizer_dir, configuration,
                                                    request):
    """On the laptop path and in the container's configuration (its ENV, whose default tokenizer has other
    ids than the public weights' own, and dllogger as the image installs it)."""
    torch.manual_seed(0)
    folder = tmp_path / "bart-tiny"
    transformers.BartForConditionalGeneration(transformers.BartConfig(**TINY)).save_pretrained(folder)
    for name in os.listdir(small_tokenizer_dir):  # the public weights' own vocabulary
        shutil.copy(os.path.join(small_tokenizer_dir, name), folder / name)
    cache = str(tmp_path / "hf_home" / "hub")
    add_to_hub_cache(cache, "tiny-org/bart-tiny", str(folder))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 16), ("val", 4), ("test", 4)))
    settings = dict(HF_HUB_OFFLINE="1", HF_HUB_CACHE=cache, OMP_NUM_THREADS="1", OUTPUT_DIR=str(tmp_path / "ft"),
                    N_VAL="2")
    if configuration == "container":
        env = request.getfixturevalue("container_image").env(settings)
    else:
        env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=ROOT, **settings)
        env.pop("TOKENIZER", None)
    # the 16 positional values (PRELN false: this is a post-LN model), then finetune.py flags passed through
    _bash(["scripts/run_summarization.sh", data, "tiny-org/bart-tiny", str(config), "1", "1e-3", "4", "1", "fp32",
           "2", "1", "32", "16", "2", "4", "4", "false", "--n_train", "8", "--log_freq", "1"], env)
    out = tmp_path / "ft"
    assert (out / "final_step.ckpt").is_file() and (out / "_epoch0_step2.ckpt").is_file()
    raw = torch.load(out / "final_step.ckpt", weights_only=True)
    assert "model.encoder.layers.0.fc1.weight" in raw  # the reference's raw state dict
    train = _summary(str(out / "dllogger.json"))
    assert train["total_loss"] == train["final_loss"] and train["avg_train_time"] > 0 and train["steps"] == 2
    evaluation = _summary(str(out / "eval_dllogger.json"))
    for key in ("inference_latency_mean", "inference_latency_conf_90", "inference_latency_conf_99",
                "inference_throughput_mean", "rouge1"):
        assert key in evaluation, key
    assert len(open(out / "test_generations.txt").read().splitlines()) == 4

    # the reference README's eval example order (no NUM_GPU), under the reference's script name
    env["OUTPUT_DIR"] = str(tmp_path / "eval")
    result = _bash(["scripts/run_summarization_eval.sh", str(out / "final_step.ckpt"), "2", "fp32", "2", "32", "16",
                    data, str(config), "false", "--n_obs", "2"], env)
    assert "without NUM_GPU" in result.stderr
    assert len(open(tmp_path / "eval" / "test_generations.txt").read().splitlines()) == 2

    # export: the tokenizer saved next to the checkpoints is found without --tokenizer
    subprocess.run([sys.executable, "-m", "bart.export", str(out / "final_step.ckpt"), str(tmp_path / "hf"),
                    "--config", str(config)], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf")
    original = transformers.AutoTokenizer.from_pretrained(small_tokenizer_dir)
    assert tok.get_vocab() == original.get_vocab() and model.config.d_model == 16
    assert tok.get_vocab() != transformers.AutoTokenizer.from_pretrained(tokenizer_dir).get_vocab()
    for log in ("dllogger.json", "eval_dllogger.json"):  # the real dllogger's lines, complete
        assert _summary(str(out / log)), log


@pytest.mark.slow
def test_evaluation_runs_on_two_nodes(tmp_path, tokenizer_dir):
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
    _bash(args, dict(base, OUTPUT_DIR=str(tmp_path / "one")))
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
