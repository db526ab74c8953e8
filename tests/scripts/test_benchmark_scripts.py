"""scripts/run_training_benchmark.sh and run_inference_benchmark.sh on CPU: tables from real runs; the inference
benchmark (and run_eval.py under it) takes the model's architecture from the checkpoint; the README's benchmark
commands run as printed."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration
from bart.modeling.weights import ARCHITECTURE_KEYS
from bart.records.dllogger_compat import read_dllogger
from tests.helpers import ROOT
from tests.helpers.corpus import SMALL_VOCAB_SIZE
from tests.helpers.fork_server import fork_server
from tests.helpers.summaries import write_summarization_data

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU sweep (one fp32 process)")


def _tiny_config(path):
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    # the small trained tokenizer's vocabulary: the tables are the point, not GPT-2's 50k softmax
    values.update(max_position_embeddings=128, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                  vocab_size=SMALL_VOCAB_SIZE)
    path.write_text(json.dumps(values))
    return str(path)


def _script(name, args, env, timeout=600):
    """``bash scripts/NAME ARGS``; its $PYTHON's commands forked from this process (tests/helpers/fork_server.py:
    the scripts' work is tested, not an interpreter's start-up) unless ``env`` names PYTHON."""
    with fork_server() as python:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": python, **env}  # tiny models: robust on shared cores
        env = {k: v for k, v in env.items() if v is not None}  # None: unset
        return subprocess.run(["bash", f"scripts/{name}", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)


def _table_rows(text):
    return [line for line in text.splitlines() if re.match(r"^\| 1 CPU \| fp32 \|", line)]


@pytest.mark.parametrize("script,args,message", [
    ("run_training_benchmark.sh", ["8", "48", "16", "d", "x"], "expected at most 4 arguments, got 5"),
    ("run_inference_benchmark.sh", ["2"] * 8, "expected at most 7 arguments, got 8"),
    ("run_training_benchmark.sh", ["8", "48", "16", "/nonexistent/data"], "data dir (4th): /nonexistent/data not found"),
])
def test_benchmark_scripts_refuse_bad_arguments(script, args, message):
    run = _script(script, args, {})
    assert run.returncode == 2 and message in run.stderr


def test_gpu_count_this_machine_lacks_fails_before_work(tmp_path):
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 4),))
    run = _script("run_training_benchmark.sh", ["8", "48", "16", data],
                  {"NUM_GPUS": "8", "CONFIG_PATH": "configs/config_tiny.json", "RESULTS_DIR": str(tmp_path / "r")})
    assert run.returncode == 2 and "no GPU" in run.stderr
    assert not (tmp_path / "r").exists()


# -- the model's architecture comes from the checkpoint (run_eval.py and every script that runs it) ----------------

def _shipped_style_config(path, **changes):
    """configs/config_tiny.json as the recipe ships its configs: post-LN (pre_ln false), other sizes than the
    checkpoints below; its generation settings are what the runs must use."""
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(pre_ln=False, normalize_before=False, d_model=64, encoder_attention_heads=8, decoder_attention_heads=8,
                  encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=SMALL_VOCAB_SIZE, max_position_embeddings=128,
                  num_beams=3, min_length=3, max_length=20, length_penalty=1.5, **changes)
    path.write_text(json.dumps(values))
    return str(path)


def _pre_ln_model(**sizes):
    """A tiny Pre-LN BART (the recipe's pretraining is Pre-LN) of other sizes and heads than the config files."""
    values = dict(json.load(open(os.path.join(ROOT, "configs", "config_tiny.json"))), pre_ln=True, d_model=32,
                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                  vocab_size=SMALL_VOCAB_SIZE, max_position_embeddings=64, encoder_layers=1)
    values.update(sizes)
    torch.manual_seed(0)
    return BartForConditionalGeneration(BartConfig(**values)).eval()


def _logits(model):
    ids = torch.tensor([[0, 5, 6, 7, 2]])
    with torch.no_grad():
        return model(input_ids=ids, decoder_input_ids=ids[:, :3]).logits


def test_the_checkpoint_gives_the_architecture_and_the_config_the_generation_settings(tmp_path):
    from bart.modeling.weights import CheckpointError
    model = _pre_ln_model()
    shipped = BartConfig.from_json_file(_shipped_style_config(tmp_path / "config.json"))
    torch.save({"kind": "bart-weights", "model": model.state_dict(), "config": model.config.to_dict()},
               tmp_path / "weights.ckpt")
    model.save_pretrained(tmp_path / "folder")  # config.json (typed mBART: Pre-LN)
    for path, source in ((tmp_path / "weights.ckpt", "its stored config"), (tmp_path / "folder", "its config.json")):
        loaded = BartForConditionalGeneration.from_pretrained(str(path), config=shipped, explicit={"pre_ln": None})
        got = loaded.config
        assert (got.pre_ln, got.d_model, got.encoder_attention_heads, got.encoder_layers, got.encoder_ffn_dim,
                got.max_position_embeddings) == (True, 32, 2, 1, 64, 64), path
        assert (got.num_beams, got.min_length, got.max_length, got.length_penalty) == (3, 3, 20, 1.5), path
        torch.testing.assert_close(_logits(loaded), _logits(model), rtol=0, atol=0)
        agrees = BartForConditionalGeneration.from_pretrained(str(path), config=shipped, explicit={"pre_ln": True})
        assert agrees.config.pre_ln
        with pytest.raises(CheckpointError, match=rf"pre_ln True \({source}\) vs --no-pre_ln \(command line\).*drop "
                                                  r"--no-pre_ln"):
            BartForConditionalGeneration.from_pretrained(str(path), config=shipped, explicit={"pre_ln": False})
    # a bare state dict (final_step.ckpt): sizes and Pre-LN from its tensors, heads from the config file
    torch.save(model.state_dict(), tmp_path / "final_step.ckpt")
    loaded = BartForConditionalGeneration.from_pretrained(str(tmp_path / "final_step.ckpt"), config=shipped, explicit={})
    got = loaded.config
    assert (got.pre_ln, got.d_model, got.vocab_size, got.encoder_layers, got.decoder_layers, got.decoder_ffn_dim,
            got.max_position_embeddings, got.encoder_attention_heads) == (True, 32, SMALL_VOCAB_SIZE, 1, 2, 64, 64, 8)
    with pytest.raises(CheckpointError, match=r"pre_ln True \(its tensors\) vs --no-pre_ln"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "final_step.ckpt"), config=shipped,
                                                     explicit={"pre_ln": False})
    # without explicit= (fine-tuning's starting weights), the given config must be the checkpoint's, heads included
    same_sizes = BartConfig(**dict(model.config.to_dict(), encoder_attention_heads=4, decoder_attention_heads=4))
    with pytest.raises(CheckpointError, match=r"encoder_attention_heads 2 \(checkpoint\) vs 4 \(given config\)"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "weights.ckpt"), config=same_sizes)


def test_inference_benchmark_on_a_pre_ln_checkpoint_with_a_shipped_style_config(tmp_path, small_tokenizer_dir):
    """A Pre-LN weights checkpoint of other sizes and heads, benchmarked with a config whose pre_ln is false:
    the run uses the checkpoint's architecture and the config's generation settings, so its generations are
    those of run_eval.py given a config that matches the checkpoint (before: "pre_ln True (checkpoint) vs
    False", exit 2)."""
    import run_eval
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("test", 4),))
    model = _pre_ln_model()
    folder = tmp_path / "run"
    folder.mkdir()
    torch.save({"kind": "bart-weights", "model": model.state_dict(), "config": model.config.to_dict()},
               folder / "best_rouge2_step10.ckpt")
    for name in os.listdir(small_tokenizer_dir):  # runs save their tokenizer next to their checkpoints
        shutil.copy(os.path.join(small_tokenizer_dir, name), folder / name)
    config = _shipped_style_config(tmp_path / "config.json")
    env = {"N_OBS": "4", "RESULTS_DIR": str(tmp_path / "results"), "TOKENIZER": None}
    run = _script("run_inference_benchmark.sh", ["2", "2", "48", "12", str(folder / "best_rouge2_step10.ckpt"), data,
                                                  config], env)
    assert run.returncode == 0, run.stderr[-2000:]
    results = tmp_path / "results"
    log = open(results / "1cpu_fp32_bs2" / "joblog.log").read()
    assert "pre_ln True (config file: False)" in log and "encoder_attention_heads 2 (config file: 8)" in log
    # the table's figures are the run's: throughput as its DLLogger summary, avg and p50 <= p99
    [row] = _table_rows(open(results / "inference_benchmark.log").read())
    cells = [v.strip() for v in row.strip("|").split("|")]
    assert cells[2] == "2" and cells[-1] == "1cpu_fp32_bs2", cells  # the batch size and the run's folder
    values = [float(v) for v in cells[3:9]]
    summary = [r["data"] for r in read_dllogger(str(results / "1cpu_fp32_bs2" / "dllogger.json"))][-1]
    assert summary["n_obs"] == 4
    assert values[0] == pytest.approx(summary["throughput_seq_per_s"], abs=0.006)
    assert values[1] <= values[5] + 1e-3 and values[2] <= values[5] + 1e-3
    generations = open(results / "1cpu_fp32_bs2" / "test_generations.txt", encoding="utf-8").read().split("\n")
    matching = dict(json.load(open(config)), **{k: getattr(model.config, k) for k in ARCHITECTURE_KEYS})
    (tmp_path / "matching.json").write_text(json.dumps(matching))
    run_eval.main([str(folder / "best_rouge2_step10.ckpt"), str(tmp_path / "matching.json"), data,
                   str(tmp_path / "direct"), "--bs", "2", "--eval_beams", "2", "--max_source_length", "48",
                   "--max_target_length", "12", "--n_obs", "4", "--tokenizer", small_tokenizer_dir])
    assert generations == open(tmp_path / "direct" / "test_generations.txt", encoding="utf-8").read().split("\n")
    assert len(generations) == 4 + 1

    # a second run into the same folder, batch sizes 1 and 2: its rows are added (bs 2 again as _run2), the first
    # run's folder and figures are kept
    first = (results / "1cpu_fp32_bs2" / "dllogger.json").read_bytes()
    run = _script("run_inference_benchmark.sh", ["1,2", "2", "48", "12", str(folder / "best_rouge2_step10.ckpt"), data,
                                                  config], env)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = _table_rows(open(results / "inference_benchmark.log").read())
    assert [[c.strip() for c in r.strip("|").split("|")][2::7] for r in rows] == \
        [["1", "1cpu_fp32_bs1"], ["2", "1cpu_fp32_bs2"], ["2", "1cpu_fp32_bs2_run2"]], rows
    assert rows[1] == row and (results / "1cpu_fp32_bs2" / "dllogger.json").read_bytes() == first


def test_an_explicit_preln_that_contradicts_the_checkpoint_is_one_line(tmp_path, small_tokenizer_dir):
    """run_eval_summarization.sh (the same rule for run_summarization.sh's evaluation): PRELN false for a Pre-LN
    checkpoint names both, exit 2."""
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("test", 2),))
    model = _pre_ln_model()
    torch.save({"kind": "bart-weights", "model": model.state_dict(), "config": model.config.to_dict()},
               tmp_path / "w.ckpt")
    for name in os.listdir(small_tokenizer_dir):
        shutil.copy(os.path.join(small_tokenizer_dir, name), tmp_path / name)
    config = _shipped_style_config(tmp_path / "config.json")
    run = _script("run_eval_summarization.sh", [str(tmp_path / "w.ckpt"), "2", "1", "fp32", "2", "48", "12", data,
                                                config, "false"], {"OUTPUT_DIR": str(tmp_path / "out"), "TOKENIZER": None},
                  timeout=None)
    output = run.stdout + run.stderr  # the script tees run_eval.py's output (joblog.log)
    assert run.returncode == 2, output[-2000:]
    assert [line for line in output.splitlines() if "pre_ln" in line] == [
        f"run_eval.py: error: {tmp_path / 'w.ckpt'}: pre_ln True (its stored config) vs --no-pre_ln (command line); "
        f"the model's architecture comes from its checkpoint: drop --no-pre_ln, or give a checkpoint with pre_ln False"]
    assert "Traceback" not in output


# -- the README's benchmark commands, run as printed (only environment variables shrink them) ---------------------

EXPECTED_README = [
    "bash scripts/run_training_benchmark.sh 40 1024 142 data/cnn_dm",
    "bash scripts/run_inference_benchmark.sh 128 4 1024 142 results/cnn_dm/final_step.ckpt data/cnn_dm configs/config.json",
]


def _readme_benchmark_commands():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("### Benchmarking")[1].split("\n### ")[0]
    block = re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0]
    return [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _readme_checkout(tmp_path, small_tokenizer_dir):
    """The checkout's files (linked) with the Quick Start's data/cnn_dm and its fine-tuned results/cnn_dm: a bare
    state dict of a tiny Pre-LN model (final_step.ckpt, as fine-tuning writes it) and the run's tokenizer."""
    repo = tmp_path / "bart"
    repo.mkdir()
    for name in os.listdir(ROOT):
        if name not in ("data", "results", ".git"):
            os.symlink(os.path.join(ROOT, name), repo / name)
    write_summarization_data(str(repo / "data" / "cnn_dm"), sizes=(("train", 48), ("val", 2), ("test", 3)))
    (repo / "results" / "cnn_dm").mkdir(parents=True)
    # configs/config.json's 16 heads; bart-large's 1024 positions (the command's lengths); the rest tiny
    model = _pre_ln_model(encoder_attention_heads=16, decoder_attention_heads=16, max_position_embeddings=1024)
    torch.save(model.state_dict(), repo / "results" / "cnn_dm" / "final_step.ckpt")
    for name in os.listdir(small_tokenizer_dir):
        shutil.copy(os.path.join(small_tokenizer_dir, name), repo / "results" / "cnn_dm" / name)
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    for name in ("TOKENIZER", "OUTPUT_DIR", "RESULTS_DIR", "CONFIG_PATH", "NUM_GPUS", "PRECISIONS"):
        env.pop(name, None)
    return repo, env


def test_readme_inference_benchmark_runs_as_printed(tmp_path, small_tokenizer_dir):
    """configs/config.json (post-LN, bart-large's sizes) with the recipe's Pre-LN fine-tuned checkpoint: the
    checkpoint's architecture, the config's generation settings (before: "pre_ln True (checkpoint) vs False")."""
    command = _readme_benchmark_commands()[1]
    assert command == EXPECTED_README[1]  # if the README's command changes, this test changes with it
    repo, env = _readme_checkout(tmp_path, small_tokenizer_dir)
    with fork_server() as python:
        run = subprocess.run(["bash", "-c", command], cwd=repo, env=dict(env, N_OBS="2", PYTHON=python),
                             capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    [results] = glob.glob(str(repo / "results" / "bart_pyt_inference_benchmark_*"))
    assert _table_rows(open(os.path.join(results, "inference_benchmark.log")).read())
    # the command's batch size 128, capped at the N_OBS=2 examples
    with open(os.path.join(results, "1cpu_fp32_bs2", "test_generations.txt"), encoding="utf-8") as f:
        assert len(f.read().split("\n")) == 2 + 1  # a line per source (a random model's text may hold \x1c...)
    assert "pre_ln True (config file: False)" in open(os.path.join(results, "1cpu_fp32_bs2", "joblog.log")).read()


def test_readme_training_benchmark_runs_as_printed(tmp_path, small_tokenizer_dir):
    """The model is CONFIG_PATH's (the script's documented variable; configs/config.json when unset). The table's
    figure is the mean of the logged windows after the first (warm-up); random weights are not kept."""
    command = _readme_benchmark_commands()[0]
    assert command == EXPECTED_README[0]
    repo, env = _readme_checkout(tmp_path, small_tokenizer_dir)
    config = dict(json.load(open(os.path.join(ROOT, "configs", "config_tiny.json"))), d_model=32, encoder_ffn_dim=64,
                  decoder_ffn_dim=64, vocab_size=SMALL_VOCAB_SIZE, max_position_embeddings=1024)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with fork_server() as python:
        run = subprocess.run(["bash", "-c", command], cwd=repo, capture_output=True, text=True, timeout=300,
                             env=dict(env, CONFIG_PATH=str(tmp_path / "config.json"), TOKENIZER=small_tokenizer_dir,
                                      TRAIN_STEPS="6", LOG_FREQ="2", PYTHON=python))
    assert run.returncode == 0, run.stderr[-3000:]
    [results] = glob.glob(str(repo / "results" / "bart_pyt_training_benchmark_*"))
    [row] = _table_rows(open(os.path.join(results, "training_benchmark.log")).read())
    windows = [r["data"]["seq/s"] for r in read_dllogger(os.path.join(results, "1cpu_fp32", "dllogger.json"))
               if isinstance(r.get("step"), int) and "seq/s" in r["data"]]
    assert len(windows) == 3
    assert float(row.split("|")[3]) == pytest.approx(sum(windows[1:]) / 2, abs=0.006) and float(row.split("|")[3]) > 0
    assert not glob.glob(os.path.join(results, "1cpu_fp32", "*.ckpt"))


@pytest.mark.slow
def test_pretraining_throughput_sweep_gives_the_weak_scaling_table(tmp_path, small_tokenizer_dir):
    """scripts/run_pretraining_benchmark.sh in its CPU form (1 and 2 gloo processes, fp32, length 32): the
    seed's pre-training performance table, each figure from the runs' own logs (before: no such sweep)."""
    from tests.helpers.corpus import write_shards
    write_shards(str(tmp_path / "data" / "pretrain_lddl_32"), [40, 40])
    env = {"DATA_DIR": str(tmp_path / "data"), "SEQ_LENGTHS": "32", "CPU_PROCESS_COUNTS": "1 2", "TRAIN_STEPS": "6",
           "LOG_FREQ": "2", "NUM_WORKERS": "0", "TOKENIZER": small_tokenizer_dir, "RESULTS_DIR": str(tmp_path / "r")}
    run = _script("run_pretraining_benchmark.sh", ["8", "8", _tiny_config(tmp_path / "config.json")], env)
    assert run.returncode == 0, run.stderr[-2000:]
    table = open(tmp_path / "r" / "pretraining_benchmark.log").read().splitlines()
    assert table[0] == "| sequence length | nodes | processes per node | sequences/s fp32 | weak scaling fp32 |"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert [r[:3] for r in rows] == [["32", "1", "1 CPU"], ["32", "1", "2 CPU"]]

    def measured(name):  # the mean of the logged windows after the first (warm-up)
        windows = [r["data"]["seq/s"] for r in read_dllogger(str(tmp_path / "r" / name / "dllogger.json"))
                   if isinstance(r.get("step"), int) and "seq/s" in r["data"]]
        assert len(windows) == 3
        return sum(windows[1:]) / 2
    one, two = measured("len32_1node_1cpu_fp32"), measured("len32_1node_2cpu_fp32")
    assert float(rows[0][3]) == pytest.approx(one, abs=0.006) and float(rows[1][3]) == pytest.approx(two, abs=0.006)
    assert rows[0][4] == "1.00" and float(rows[1][4]) == pytest.approx(two / one, abs=0.006)
    assert not glob.glob(str(tmp_path / "r" / "*" / "*.ckpt"))


@pytest.mark.slow
def test_fine_tuning_stability_test_gives_mean_and_std_over_seeds(tmp_path, small_tokenizer_dir):
    """scripts/run_stability_test.sh: run_summarization.sh once per seed, then ROUGE per seed, mean and standard
    deviation (the seed README's stability table; before: nothing ran it)."""
    import statistics

    from tests.helpers.corpus import micro_config
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 16), ("val", 2), ("test", 4)))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(micro_config()))
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig.from_json_file(str(config)))
    model.save_pretrained(str(tmp_path / "weights"))
    for name in os.listdir(small_tokenizer_dir):
        shutil.copy(os.path.join(small_tokenizer_dir, name), tmp_path / "weights" / name)
    values = [data, str(tmp_path / "weights"), str(config), "1", "1e-3", "4", "1", "fp32", "2", "1", "32", "12", "1",
              "4", "4", "true", "--num_workers", "0"]
    env = {"RESULTS_DIR": str(tmp_path / "r"), "N_VAL": "2", "TOKENIZER": None}
    run = _script("run_stability_test.sh", ["2", *values], env)
    assert run.returncode == 0, run.stderr[-3000:]
    scores = [json.load(open(tmp_path / "r" / f"seed_{s}" / "test_rouge.json")) for s in (1, 2)]
    commands = [json.load(open(tmp_path / "r" / f"seed_{s}" / "git_log.json"))["starts"][0]["command"] for s in (1, 2)]
    assert [c[c.index("--seed") + 1] for c in commands] == ["1", "2"]  # each run its own seed
    table = open(tmp_path / "r" / "stability.log").read().splitlines()
    assert table[0] == "| metric | seed 1 | seed 2 | mean | std |"
    row = next([c.strip() for c in line.strip("|").split("|")] for line in table if line.startswith("| rouge1 "))
    r1 = [s["rouge1"] for s in scores]
    assert row[1:] == [f"{r1[0]:.2f}", f"{r1[1]:.2f}", f"{statistics.fmean(r1):.2f}", f"{statistics.stdev(r1):.2f}"]


def test_stability_table_of_the_seeds_rouge1_row(tmp_path):
    """The seed README's five XSum rouge1 values per seed: mean 45.00 as printed, and the sample std it left blank."""
    import statistics

    from utils.benchmark_table import table
    values = [45.08, 44.98, 45.10, 44.91, 44.95]
    for seed, value in enumerate(values, 1):
        (tmp_path / f"seed_{seed}").mkdir()
        (tmp_path / f"seed_{seed}" / "test_rouge.json").write_text(json.dumps({"rouge1": value, "rouge2": 22.0 + seed}))
    (tmp_path / "seed_9").mkdir()  # a seed whose run did not finish: no metrics file, not a column
    lines = table("stability", str(tmp_path)).splitlines()
    assert lines[0] == "| metric | seed 1 | seed 2 | seed 3 | seed 4 | seed 5 | mean | std |"
    assert lines[2] == f"| rouge1 | 45.08 | 44.98 | 45.10 | 44.91 | 44.95 | 45.00 | {statistics.stdev(values):.2f} |"
    assert lines[3] == "| rouge2 | 23.00 | 24.00 | 25.00 | 26.00 | 27.00 | 25.00 | 1.58 |"
    assert len(lines) == 4  # rougeL/rougeLsum absent from every seed: no row
