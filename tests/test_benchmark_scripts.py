"""scripts/run_training_benchmark.sh and run_inference_benchmark.sh on CPU: tables from real runs."""
import glob
import json
import os
import re
import subprocess

import pytest
import torch

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration
from tests.helpers.corpus import SMALL_VOCAB_SIZE
from tests.helpers.summaries import write_summarization_data
from utils.dllogger_compat import read_dllogger

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU sweep (one fp32 process)")


def _tiny_config(path):
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    # the small trained tokenizer's vocabulary: the tables are the point, not GPT-2's 50k softmax
    values.update(max_position_embeddings=128, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                  vocab_size=SMALL_VOCAB_SIZE)
    path.write_text(json.dumps(values))
    return str(path)


def _script(name, args, env, timeout=600):
    env = dict(os.environ, OMP_NUM_THREADS="1", **env)  # tiny models: robust when other work shares the cores
    return subprocess.run(["bash", f"scripts/{name}", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _table_rows(text):
    return [line for line in text.splitlines() if re.match(r"^\| 1 CPU \| fp32 \|", line)]


def test_training_benchmark_table(tmp_path, small_tokenizer_dir):
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 64),))
    env = {"CONFIG_PATH": _tiny_config(tmp_path / "config.json"), "TOKENIZER": small_tokenizer_dir,
           "TRAIN_STEPS": "6", "LOG_FREQ": "2", "RESULTS_DIR": str(tmp_path / "results")}
    run = _script("run_training_benchmark.sh", ["8", "48", "16", data], env)
    assert run.returncode == 0, run.stderr[-2000:]
    [results] = glob.glob(str(tmp_path / "results" / "bart_pyt_training_benchmark_*"))
    table = open(os.path.join(results, "training_benchmark.log")).read()
    [row] = _table_rows(table)
    # the figure is the mean of the logged windows after the first (warm-up)
    windows = [r["data"]["seq/s"] for r in read_dllogger(os.path.join(results, "1cpu_fp32", "dllogger.json"))
               if isinstance(r.get("step"), int) and "seq/s" in r["data"]]
    assert len(windows) == 3
    assert float(row.split("|")[3]) == pytest.approx(sum(windows[1:]) / 2, abs=0.006)
    assert not glob.glob(os.path.join(results, "1cpu_fp32", "*.ckpt"))  # random weights are not kept


def test_inference_benchmark_table(tmp_path, small_tokenizer_dir):
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("test", 6),))
    config = _tiny_config(tmp_path / "config.json")
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig.from_json_file(config))
    torch.save({"model": model.state_dict()}, tmp_path / "model.ckpt")
    env = {"TOKENIZER": small_tokenizer_dir, "N_OBS": "5", "RESULTS_DIR": str(tmp_path / "results")}
    run = _script("run_inference_benchmark.sh", ["2", "2", "48", "12", str(tmp_path / "model.ckpt"), data, config], env)
    assert run.returncode == 0, run.stderr[-2000:]
    [results] = glob.glob(str(tmp_path / "results" / "bart_pyt_inference_benchmark_*"))
    [row] = _table_rows(open(os.path.join(results, "inference_benchmark.log")).read())
    values = [float(v) for v in row.strip("|").split("|")[2:]]
    summary = [r["data"] for r in read_dllogger(os.path.join(results, "1cpu_fp32", "dllogger.json"))][-1]
    assert summary["n_obs"] == 5
    assert values[0] == pytest.approx(summary["throughput_seq_per_s"], abs=0.006)
    assert values[1] <= values[5] + 1e-3 and values[2] <= values[5] + 1e-3  # avg, p50 <= p99
    with open(os.path.join(results, "1cpu_fp32", "test_generations.txt")) as f:
        assert len(f.read().splitlines()) == 5


@pytest.mark.parametrize("script,args,message", [
    ("run_training_benchmark.sh", ["8", "48"], "expected 4 arguments, got 2"),
    ("run_inference_benchmark.sh", ["2", "2", "48"], "expected 7 arguments, got 3"),
    ("run_training_benchmark.sh", ["8", "48", "16", "/nonexistent/data"], "data folder /nonexistent/data not found"),
])
def test_benchmark_scripts_refuse_bad_arguments(script, args, message):
    run = _script(script, args, {})
    assert run.returncode == 2 and message in run.stderr


def test_gpu_count_this_machine_lacks_fails_before_work(tmp_path):
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 4),))
    run = _script("run_training_benchmark.sh", ["8", "48", "16", data],
                  {"NUM_GPUS": "8", "CONFIG_PATH": "configs/config_tiny.json", "RESULTS_DIR": str(tmp_path / "r")})
    assert run.returncode == 2 and "no GPU" in run.stderr
    assert not glob.glob(str(tmp_path / "r" / "*" / "*"))
