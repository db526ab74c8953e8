"""What the reference recipe's runs leave behind, from real (tiny, CPU) runs of the entry points: the
provenance record git_log.json (appended by a resume and by run_eval.py, never replaced), the reference's
latency keys in {type_path}_rouge.json, pseudolabel_results.json for --num_return_sequences > 1, the best
validation checkpoint, and the model card bart.export writes from what the run knows."""
import json
import os
import runpy
import subprocess
import sys
import warnings

import pytest
import torch

from tests.helpers import ROOT
from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry
from tests.helpers.forked import run_python
from tests.helpers.summaries import write_summarization_data

pytestmark = pytest.mark.slow  # the module's runs: about 50 s on a 2-core CPU
REFERENCE_LATENCY_KEYS = ("inference_latency_mean", "inference_latency_conf_50", "inference_latency_conf_90",
                          "inference_latency_conf_95", "inference_latency_conf_99", "inference_latency_conf_100",
                          "inference_throughput_mean", "n_gpus")


def _run(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    out = run_python([sys.executable, *args], cwd=ROOT, env=env, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory, small_tokenizer_dir):
    """finetune.py for 2 updates (validation at the end: a best-k checkpoint), resumed to 3; run_eval.py into the
    run's folder (ROUGE) and into another with two candidates per source. The three starts that git_log.json
    records are processes (their command lines are recorded); the second run_eval.py runs in this process."""
    base = tmp_path_factory.mktemp("reference_outputs")
    data = write_summarization_data(str(base / "data"), sizes=(("train", 16), ("val", 4), ("test", 4)))
    config = base / "config.json"
    config.write_text(json.dumps(micro_config()))
    out = str(base / "out")
    common = ["finetune.py", "--config_path", str(config), "--data_dir", data, "--tokenizer", small_tokenizer_dir,
              "--from_scratch", "--train_batch_size", "4", "--max_source_length", "32", "--max_target_length", "12",
              "--n_val", "4", "--eval_beams", "1", "--eval_max_gen_length", "12", "--num_workers", "0",
              "--log_freq", "1", "--output_dir", out, "--resume_from_checkpoint", "auto"]
    _run(*common, "--max_steps", "2")
    _run(*common, "--max_steps", "3", "--allow_resume_change", "max_steps")  # a longer schedule, said
    evaluation = [str(config), data, "--tokenizer", small_tokenizer_dir, "--bs", "2", "--eval_beams", "2",
                  "--max_target_length", "12", "--max_source_length", "32"]
    _run("run_eval.py", os.path.join(out, "final_step.ckpt"), evaluation[0], evaluation[1], out, *evaluation[2:])
    assert run_entry("run_eval.py", [os.path.join(out, "final_step.ckpt"), evaluation[0], evaluation[1],
                                     str(base / "pl"), *evaluation[2:], "--num_return_sequences", "2"]) == 0
    return base, out, data, str(config)


def test_provenance_is_recorded_and_a_resume_appends(run):
    """Rules out: no record of where a run came from (the reference wrote git_log.json)."""
    _, out, _, _ = run
    log = json.load(open(os.path.join(out, "git_log.json")))
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    # the reference's keys, from the first start
    assert log["repo_sha"] == commit and log["hostname"] and "repo_branch" in log and "repo_id" in log
    starts = log["starts"]
    assert len(starts) == 3  # the first start, the resume, run_eval.py into the same folder: appended in order
    assert [s["command"][1] for s in starts] == ["finetune.py", "finetune.py", "run_eval.py"]
    assert starts[0]["command"][0] == os.path.basename(sys.executable) and starts[0]["command"][-2:] == ["--max_steps", "2"]
    assert starts[1]["command"][-4:] == ["--max_steps", "3", "--allow_resume_change", "max_steps"] and "--max_steps 3" in starts[1]["command_line"]
    first = starts[0]
    assert first["git"]["commit"] == commit and isinstance(first["git"]["dirty"], bool)
    assert first["torch_build"]["torch"] == torch.__version__ and first["torch_build"]["cuda"] == torch.version.cuda
    assert {"cudnn", "nccl"} <= set(first["torch_build"])
    assert first["libraries"]["transformers"] and first["libraries"]["numpy"]
    assert first["gpus"]["count"] == torch.cuda.device_count() and first["world_size"] == 1
    assert set(first["container"]) >= {"NVIDIA_PYTORCH_VERSION", "PYTORCH_VERSION"}


def test_rouge_json_carries_the_reference_latency_keys(run):
    """Rules out: inference_latency_* / inference_throughput_mean / n_gpus only in the dllogger log."""
    _, out, _, _ = run
    metrics = json.load(open(os.path.join(out, "test_rouge.json")))
    missing = [k for k in REFERENCE_LATENCY_KEYS if k not in metrics]
    assert not missing
    assert metrics["n_gpus"] == 1 and metrics["n_obs"] == 4 and metrics["inference_throughput_mean"] > 0
    assert metrics["inference_latency_conf_50"] <= metrics["inference_latency_conf_100"]


def test_several_return_sequences_write_pseudolabel_results(run):
    """Rules out: tab-joined candidates in test_generations.txt, scored as one summary."""
    base, out, _, _ = run
    labels = json.load(open(base / "pl" / "pseudolabel_results.json"))
    assert len(labels) == 4 and all(isinstance(c, list) and len(c) == 2 and all(isinstance(t, str) for t in c)
                                    for c in labels)
    # beam search's best candidate first: the one-sequence run's summary, in input order
    single = open(os.path.join(out, "test_generations.txt"), encoding="utf-8").read().splitlines()
    assert [c[0] for c in labels] == single
    assert not (base / "pl" / "test_generations.txt").exists() and not (base / "pl" / "test_rouge.json").exists()


def test_best_checkpoint_is_the_top_of_the_ranking(run, tmp_path, capsys, monkeypatch):
    _, out, _, _ = run
    ranking = json.load(open(os.path.join(out, "best_rouge2.json")))
    # `python -m bart.training.checkpoint best OUT` in this process (its __main__ block); the refusal's exit
    # code below from a process (forked from this one: its exit code and line are the point)
    monkeypatch.setattr(sys, "argv", ["checkpoint.py", "best", out])
    capsys.readouterr()
    with warnings.catch_warnings():  # the module is already imported (by run_eval): runpy runs a fresh copy
        warnings.simplefilter("ignore", RuntimeWarning)
        runpy.run_module("bart.training.checkpoint", run_name="__main__")
    found = capsys.readouterr().out.strip()
    assert found == os.path.join(out, ranking["best"][0][1]) and os.path.isfile(found)
    missing = run_python([sys.executable, "-m", "bart.training.checkpoint", "best", str(tmp_path)], cwd=ROOT,
                         timeout=300)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "needs validation during training" in missing.stderr


def test_export_writes_a_model_card_from_the_run(run, tmp_path):
    """Rules out: the exported folder had no README.md. (``python -m bart.export`` in this process.)"""
    _, out, data, config = run
    assert run_entry("bart.export", [os.path.join(out, "final_step.ckpt"), str(tmp_path / "hf"), "--config", config]) == 0
    card = (tmp_path / "hf" / "README.md").read_text()
    assert card.startswith("---\n") and "\nlibrary_name: transformers\n" in card.split("\n---\n")[0]
    rouge = json.load(open(os.path.join(out, "test_rouge.json")))
    log = json.load(open(os.path.join(out, "git_log.json")))
    for text in (f"| data | `{data}` |", "| updates (--max_steps) | `3` |",  # the last start's settings
                 f"| test_rouge: rouge1 | {rouge['rouge1']} |", "best validation rouge2",
                 f"commit `{log['starts'][1]['git']['commit']}`", f"torch {torch.__version__}",
                 "3 start(s) of the run", "finetune.py"):
        assert text in card, text
    # the command that wrote these weights (the resume's, not the first start's with --max_steps 2) and the whole
    # run's time (not: the last start's only)
    command = next(line for line in card.splitlines() if line.startswith("- command: "))
    assert "--max_steps 3" in command and "--allow_resume_change max_steps" in command, command
    from bart.records.dllogger_compat import read_dllogger
    times = [r["data"]["total_time_s"] for r in read_dllogger(os.path.join(out, "dllogger.json"))
             if r.get("step") == [] and "total_time_s" in r.get("data", {})]
    assert len(times) == 2 and f"| total_time_s | {round(sum(times), 3)} |" in card, times


def test_the_model_cards_metadata_and_usage_example(run, tmp_path):
    """The card of the run's best checkpoint (a copy of the run whose run_config.json names a hub model as its start):
    huggingface_hub reads its license, base_model, datasets and model-index: the validation ROUGE at that checkpoint's
    step (dllogger.json), and the test split's (test_rouge.json) only where the weights are the run's final ones;
    its Python example runs as printed, from another folder, offline. Rules out: no license, no model-index, no
    usage example."""
    import re
    import shutil

    from huggingface_hub import ModelCard

    from bart.records.dllogger_compat import read_dllogger

    _, out, _, config = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    settings = json.load(open(copy / "run_config.json"))
    (copy / "run_config.json").write_text(json.dumps(dict(settings, init_checkpoint="facebook/bart-large")))
    ranking = json.load(open(copy / "best_rouge2.json"))
    best = ranking["best"][0][1]
    step = int(re.search(r"step(\d+)\.ckpt$", best).group(1))
    final = [r["data"]["steps"] for r in read_dllogger(str(copy / "dllogger.json"))
             if r["type"] == "LOG" and "steps" in r["data"]][-1]
    validation = {}
    for record in read_dllogger(str(copy / "dllogger.json")):
        if record["type"] == "LOG" and record["step"] == step:
            validation.update({k[4:]: v for k, v in record["data"].items() if k.startswith("val_rouge")})
    assert validation
    test = json.load(open(copy / "test_rouge.json"))
    for checkpoint, folder in ((best, tmp_path / "best_hf"), ("final_step.ckpt", tmp_path / "final_hf")):
        assert run_entry("bart.export", [str(copy / checkpoint), str(folder), "--config", config, "--dataset",
                                         "cnn_dailymail", "--license", "mit"]) == 0
        card = ModelCard.load(str(folder / "README.md"))
        assert card.data.license == "mit" and card.data.base_model == "facebook/bart-large"
        assert card.data.datasets == ["cnn_dailymail"] and card.data.model_name == folder.name
        results = {(r.dataset_split, r.metric_name): r.metric_value for r in card.data.eval_results}
        assert {name: value for (split, name), value in results.items() if split == "validation"} == \
            {f"ROUGE-{k[5:]}": v for k, v in validation.items()}
        weights_step = final if checkpoint == "final_step.ckpt" else step
        assert {name: value for (split, name), value in results.items() if split == "test"} == \
            ({f"ROUGE-{k[5:]}": test[k] for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
             if weights_step == final else {})
        assert {r.dataset_type for r in card.data.eval_results} == {"cnn_dailymail"}
    (snippet,) = re.findall(r"```python\n(.*?)```", card.content, re.S)
    assert f"from_pretrained({str(folder)!r})" in snippet
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, HF_HUB_OFFLINE="1")
    said = subprocess.run([sys.executable, "-c", snippet], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=300)
    assert said.returncode == 0 and said.stdout.count("\n") == 1, said.stderr[-3000:]


def test_the_best_checkpoint_is_handed_off_as_a_hugging_face_folder(run):
    """finetune.py ends by writing its best validation checkpoint (the top of best_rouge2.json) as OUTPUT_DIR/best_tfmr,
    as the NVIDIA reference does: the same weights, transformers' Auto classes load it with the run's tokenizer, and
    its model card names the checkpoint. The resumed start wrote it again over the first start's. Rules out: no folder
    (bart.export by hand)."""
    import transformers

    from bart.modeling import BartForConditionalGeneration
    from bart.modeling.weights import load_pretrained

    _, out, _, _ = run
    folder = os.path.join(out, "best_tfmr")
    best = json.load(open(os.path.join(out, "best_rouge2.json")))["best"][0][1]
    ours = load_pretrained(BartForConditionalGeneration, os.path.join(out, best)).state_dict()
    exported = load_pretrained(BartForConditionalGeneration, folder).state_dict()
    assert ours.keys() == exported.keys() and all(torch.equal(ours[k], exported[k]) for k in ours)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(model).__name__ == "MBartForConditionalGeneration"  # micro_config: Pre-LN, transformers' mBART
    assert tokenizer.get_vocab() == transformers.AutoTokenizer.from_pretrained(out).get_vocab()
    assert f"exported from `{best}`" in open(os.path.join(folder, "README.md")).read()
    assert not [n for n in os.listdir(out) if n.startswith(".best_tfmr")]  # no staging folder left
