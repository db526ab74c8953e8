"""The README's Quick Start, run as printed (steps 2-6 and 8), on CPU with tiny sizes, in the laptop's and the
container's configurations; with the fine-tuning scripts' other forms (the 16 positional values and flags passed
through, the reference's eval script name and argument order) and "Your own tokenizer"'s command on the shards.

The commands are read from the README; only environment variables shrink them (the scripts
document each: NPROC, NUM_SHARDS, CPU_PROCESSES, NUM_WORKERS, EXTRA_ARGS, EVAL_EXTRA_ARGS,
CONFIG_PATH, N_VAL) or point the downloads at local copies laid out as the originals
(CNN_DM_MIRROR, XSUM_URL, WIKIPEDIA_DUMP: a MediaWiki dump extracted by LDDL's download_wikipedia
with the installed wikiextractor). "facebook/bart-large" is resolved by huggingface_hub from an
offline hub cache that the test writes in the hub's own layout (a tiny model and its tokenizer).
If a Quick Start command changes, EXPECTED below must change with it, or this test fails.
The model is config_tiny.json with the small trained tokenizer's vocabulary (the hub cache's
"facebook/bart-large" tokenizer): the journey is about the commands, not GPT-2's 50k vocabulary,
whose softmax made each training and generation step dearer (phase 2's 512 tokens in bf16 on CPU
above all). Most of what the test still costs is the start-up of its Python processes: the data steps (2-3) run
once, in the container's configuration (the image's ENV: its Punkt data), and the laptop's journey starts from
their data/.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from types import SimpleNamespace

import pytest
import torch
import transformers

from bart.records.dllogger_compat import read_dllogger
from tests.helpers import ROOT
from tests.helpers.container import DOUBLES, build_image
from tests.helpers.corpus import SMALL_VOCAB_SIZE, write_wikipedia_dump
from tests.helpers.hub_cache import add_to_hub_cache

EXPECTED = {
    2: ["bash scripts/get_data.sh data", "bash scripts/get_pretraining_data.sh data"],
    3: ["bash scripts/preprocess_pretrain_data.sh data/wikipedia data/common_crawl data/openwebtext data"],
    4: ["bash scripts/run_pretraining.sh 200 32 5e-3 4e-3 bf16 true 8 2166 200 95040 7560 100 40 120 "
        "configs/config.json"],
    5: ["export CKPT_PATH=results/bart_pyt_pretraining/phase_2 OUTPUT_DIR=results/cnn_dm",
        "bash scripts/run_summarization.sh $(source scripts/params/cnn_dm_params.sh && dgxa100_8gpu_bf16)"],
    6: ["OUTPUT_DIR=results/cnn_dm_eval bash scripts/run_eval_summarization.sh results/cnn_dm/final_step.ckpt "
        "$(source scripts/params/cnn_dm_params.sh && dgxa100_8gpu_bf16_eval)"],
    8: ["python -m bart.export results/cnn_dm results/cnn_dm_hf"],  # its Python block: test_readme's hand-off test
}
WORDS = "river mountain city council budget school teacher storm harbor museum train bridge market".split()


def quick_start_steps() -> dict:
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("## Quick start guide")[1].split("\n## ")[0]
    steps = {}
    for number, body in re.findall(r"\n(\d+)\. (.*?)(?=\n\d+\. |\Z)", section, flags=re.S):
        blocks = re.findall(r"```bash\n(.*?)```", body, flags=re.S)
        if blocks:
            steps[int(number)] = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    return steps


def test_the_readme_quick_start_is_what_this_test_runs():
    steps = quick_start_steps()
    assert {k: v for k, v in steps.items() if k != 1} == EXPECTED


def _sentences(rng, n):
    return " ".join(" ".join(rng.choices(WORDS, k=rng.randint(5, 9))).capitalize() + "." for _ in range(n))


def _mirror(folder, story_name):
    """CNN/DM story archives + split lists and an XSum tarball, laid out as their download sites."""
    import random
    rng = random.Random(0)
    (folder / "url_lists").mkdir(parents=True)
    trees = {"cnn": folder / "tree" / "cnn" / "stories", "dailymail": folder / "tree" / "dailymail" / "stories"}
    for tree in trees.values():
        tree.mkdir(parents=True)
    for split, n in (("train", 12), ("val", 3), ("test", 3)):
        urls = [f"http://www.{'cnn' if i % 2 else 'dailymail'}.com/{split}/{i}" for i in range(n)]
        (folder / "url_lists" / f"all_{split}.txt").write_text("\n".join(urls) + "\n")
        for i, url in enumerate(urls):
            body = _sentences(rng, 4) + "\n\n@highlight\n\n" + _sentences(rng, 1) + "\n"
            (trees["cnn" if i % 2 else "dailymail"] / story_name(url)).write_text(body)
    for name, tree in trees.items():
        with tarfile.open(folder / f"{name}_stories.tgz", "w:gz") as tar:
            tar.add(tree.parent, arcname=name)
    xsum = folder / "xsum_src" / "xsum"
    xsum.mkdir(parents=True)
    for split in ("train", "val", "test"):
        (xsum / f"{split}.source").write_text(_sentences(rng, 3) + "\n")
        (xsum / f"{split}.target").write_text(_sentences(rng, 1) + "\n")
    with tarfile.open(folder / "xsum.tar.gz", "w:gz") as tar:
        tar.add(xsum, arcname="xsum")


def _ids(folder) -> list:
    """A tokenizer folder's ids for a probe text: equal ids, the same vocabulary as far as a run can tell."""
    from bart.tokenization.tokenization_bart import BartTokenizer
    return BartTokenizer.from_pretrained(str(folder))("Hello world, the river council")["input_ids"]


def _run(block: list[str], cwd, env, timeout=900):
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(block)], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (block, out.stdout[-3000:], out.stderr[-3000:])
    return out


def _summary(path):
    """The summary line of a dllogger file (step []), read whole: the real dllogger's lines complete."""
    return {k: v for r in read_dllogger(str(path)) if r["type"] == "LOG" and r["step"] == [] for k, v in r["data"].items()}


def _configuration(tmp_path, configuration, small_tokenizer_dir, punkt_dir):
    """A copy of the checkout (data/ and results/ are written inside it), config_tiny.json, the public weights
    under facebook/bart-large in a hub cache, and the environment of a command typed in this configuration."""
    container = configuration == "container"
    repo = tmp_path / "bart"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        path = os.path.join(ROOT, name)
        if os.path.islink(path) or os.path.isfile(path):  # configs/: a link to bart/configs, copied as a link
            os.makedirs(repo / os.path.dirname(name), exist_ok=True)
            os.symlink(os.readlink(path), repo / name) if os.path.islink(path) else shutil.copy2(path, repo / name)
    # the model config of every command: config_tiny.json
    tiny = json.load(open(repo / "configs" / "config_tiny.json"))
    if not container:  # the laptop path runs on the small tokenizer's vocabulary throughout
        tiny["vocab_size"] = SMALL_VOCAB_SIZE
    config_path = str(tmp_path / "config_tiny_journey.json")
    with open(config_path, "w") as f:
        json.dump(tiny, f)
    # public weights: a tiny post-LN BART saved by transformers, under facebook/bart-large in a hub cache
    torch.manual_seed(0)
    hf_config = transformers.BartConfig(**{k: v for k, v in tiny.items() if k not in ("pre_ln", "dtype")})
    transformers.BartForConditionalGeneration(hf_config).save_pretrained(tmp_path / "hub_model")
    for name in os.listdir(small_tokenizer_dir):
        shutil.copy(os.path.join(small_tokenizer_dir, name), tmp_path / "hub_model" / name)

    shrink = dict(OMP_NUM_THREADS="1", NPROC="1", NUM_SHARDS="2", CPU_PROCESSES="1", NUM_WORKERS="1",
                  CONFIG_PATH=config_path, N_VAL="2", HF_HUB_OFFLINE="1",
                  CNN_DM_MIRROR=f"file://{tmp_path / 'mirror'}", XSUM_URL=f"file://{tmp_path / 'mirror' / 'xsum.tar.gz'}",
                  CORPORA="wikipedia", WIKIPEDIA_DUMP=str(tmp_path / "enwiki.xml.bz2"))
    if container:  # the image built on this machine; the hub's files where the image keeps its hub cache
        image = build_image(str(tmp_path / "image"), str(repo))
        env = image.env(dict(shrink, PYTHONPATH=DOUBLES))
        for name in ("OUTPUT_DIR", "CKPT_PATH", "EXTRA_ARGS", "EVAL_EXTRA_ARGS", "PRELN"):
            env.pop(name, None)
        cache = env["HF_HUB_CACHE"] = (env.get("HF_HUB_CACHE") or os.path.join(env.get("HF_HOME") or
                                                                               str(tmp_path / "hf_home"), "hub"))
    else:
        cache = str(tmp_path / "hf_home" / "hub")
        env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(repo), HF_HUB_CACHE=cache, NLTK_DATA=str(punkt_dir),
                   **shrink)
        for name in ("TOKENIZER", "BART_DEFAULT_TOKENIZER", "OUTPUT_DIR", "CKPT_PATH", "EXTRA_ARGS", "EVAL_EXTRA_ARGS",
                     "PRELN"):
            env.pop(name, None)
        bin_dir = tmp_path / "bin"  # `python` in the README's commands is this interpreter
        bin_dir.mkdir()
        os.symlink(sys.executable, bin_dir / "python")
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    add_to_hub_cache(cache, "facebook/bart-large", str(tmp_path / "hub_model"))
    return SimpleNamespace(repo=repo, env=env, config_path=config_path, tmp=tmp_path)


@pytest.fixture(scope="module")
def container_journey(tmp_path_factory, small_tokenizer_dir, punkt_dir):
    """The container's configuration through Quick Start steps 2 and 3 (the data: the image's Punkt data, LDDL's
    download_wikipedia and preprocessing); both journeys go on from its data/."""
    from bart.data.cnn_dm_stories import story_name
    tmp_path = tmp_path_factory.mktemp("journey_container")
    _mirror(tmp_path / "mirror", story_name)
    write_wikipedia_dump(str(tmp_path / "enwiki.xml.bz2"), pages=24)
    state = _configuration(tmp_path, "container", small_tokenizer_dir, punkt_dir)
    repo, steps = state.repo, quick_start_steps()
    _run(steps[2], repo, state.env)
    for corpus in ("cnn_dm", "xsum"):
        assert all((repo / "data" / corpus / f"{s}.source").is_file() for s in ("train", "val", "test"))
    # LDDL's download_wikipedia extracted the dump with the installed wikiextractor: one article a line
    [extracted] = (repo / "data" / "wikipedia" / "source" / "en").glob("*.txt")
    articles = extracted.read_text(encoding="utf-8").splitlines()
    assert len(articles) == 24 and all(a.startswith("wiki-") for a in articles)
    _run(steps[3], repo, state.env)  # the preprocessing takes download_wikipedia's --outdir as the README says
    for length in (128, 512):
        counts = json.load(open(repo / "data" / f"pretrain_lddl_{length}" / ".num_samples.json"))
        assert len(counts) == 2 and sum(counts.values()) >= 24
    return state


def _fine_tuning_checks(out, steps, generations):
    """A fine-tuning run of run_summarization.sh: the reference's raw final state dict, the training and evaluation
    summaries of dllogger complete, the test split's generations."""
    assert (out / "final_step.ckpt").is_file() and (out / f"_epoch0_step{steps}.ckpt").is_file()
    raw = torch.load(out / "final_step.ckpt", weights_only=True)
    assert "model.encoder.layers.0.fc1.weight" in raw  # the reference's raw state dict
    train = _summary(out / "dllogger.json")
    assert train["total_loss"] == train["final_loss"] and train["avg_train_time"] > 0 and train["steps"] == steps
    evaluation = _summary(out / "eval_dllogger.json")
    for key in ("inference_latency_mean", "inference_latency_conf_90", "inference_latency_conf_99",
                "inference_throughput_mean", "rouge1"):
        assert key in evaluation, key
    assert len(open(out / "test_generations.txt").read().splitlines()) == generations


@pytest.mark.slow
@pytest.mark.parametrize("configuration", ["laptop", "container"])
def test_quick_start_journey(tmp_path, small_tokenizer_dir, tokenizer_dir, punkt_dir, container_journey, configuration,
                             monkeypatch):
    """The Quick Start as printed on the laptop path and, in the container's configuration (the Dockerfile's ENV and
    build steps, dllogger and apex as the image installs them: tests/helpers/container.py), the steps whose
    behaviour the image changes; the rest runs the same code in either configuration, once:
    - container: the data, steps 2-3 (the image's Punkt data; the container_journey fixture, whose data/ the
      laptop's journey takes); pretraining from scratch, step 4 (PHASES=1), with the image's default tokenizer
      (GPT-2's vocabulary, so the config keeps the 50,265 rows) and LAMB as apex's; public weights by hub id
      (facebook/bart-large from the image's hub cache) through run_summarization.sh's 16 positional values and
      finetune.py flags passed through: they bring their own tokenizer, and so does the export of that run (the
      tokenizer beside its checkpoint, not the image's default); dllogger's lines complete (the image's dllogger);
    - laptop: "Your own tokenizer"'s command on step 3's shards; steps 4 (both phases), 5 from phase 2, 6 and 8;
      then the reference's eval script name and argument order (without NUM_GPU) evaluate the run step 8
      exports, and transformers' generate on the exported folder gives its summaries."""
    container = configuration == "container"
    steps = quick_start_steps()
    if container:
        state = container_journey
    else:
        state = _configuration(tmp_path, "laptop", small_tokenizer_dir, punkt_dir)
        shutil.copytree(container_journey.repo / "data", state.repo / "data")  # steps 2 and 3: done once
        # "Your own tokenizer" (step 3's note), as printed, on the shards step 3 wrote
        [command] = [c for c in re.findall(r"```bash\n(.*?)```", open(os.path.join(ROOT, "README.md")).read(), re.S)
                     if "train_tokenizer" in c]
        _run([command.replace("\\\n", " ").splitlines()[0]], state.repo, state.env)
        trained = json.load(open(state.repo / "data" / "config_32k.json"))["vocab_size"]
        assert 261 <= trained < 32000 and _ids(state.repo / "data" / "my_tokenizer")  # a small corpus: fewer tokens
    repo, env, config_path = state.repo, state.env, state.config_path
    pretrain = dict(env, EXTRA_ARGS=f"--config_path {config_path} --train_batch_size 2 "
                                    "--gradient_accumulation_steps 1 --max_steps 1 --warmup_steps 1 --log_freq 1")
    if container:
        _run(steps[4], repo, dict(pretrain, PHASES="1"))  # phase 2 starts from phase 1's run: the laptop's
        phase_1 = repo / "results" / "bart_pyt_pretraining" / "phase_1"
        assert (phase_1 / "_step1.ckpt").is_file()
        # from scratch: the image's default tokenizer, saved with the checkpoints
        default = env.get("BART_DEFAULT_TOKENIZER") or env["TOKENIZER"]
        assert _ids(phase_1) == _ids(default)
        # public weights named by hub id: run_summarization.sh's 16 values (PRELN false: a post-LN model), then
        # finetune.py flags
        public = repo / "results" / "cnn_dm_public"
        _run([f"bash scripts/run_summarization.sh data/cnn_dm facebook/bart-large {config_path} 1 1e-3 2 1 fp32 2 1 "
              "64 16 2 2 3 false --n_train 8 --log_freq 1"], repo, dict(env, OUTPUT_DIR="results/cnn_dm_public"))
        _fine_tuning_checks(public, 2, 3)
        # fine-tuned with their own tokenizer, not the image's default
        assert _ids(public) == _ids(small_tokenizer_dir) != _ids(tokenizer_dir) == _ids(default)
        # that run's final_step.ckpt exported without --tokenizer: the tokenizer beside it, not the image's default
        # (bart.export in this process, in the image's environment)
        from bart import export
        for key in ("TOKENIZER", "BART_DEFAULT_TOKENIZER", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
            monkeypatch.delenv(key, raising=False)
            if key in env:
                monkeypatch.setenv(key, env[key])
        assert export.main([str(public / "final_step.ckpt"), str(tmp_path / "public_hf"), "--config", config_path,
                            "--no-pre_ln", "--no-verify"]) == 0
        assert _ids(tmp_path / "public_hf") == _ids(small_tokenizer_dir)
        return

    _run(steps[4], repo, pretrain)
    assert (repo / "results" / "bart_pyt_pretraining" / "phase_2" / "_step2.ckpt").is_file()
    finetune = dict(env, EXTRA_ARGS="--max_steps 2 --warmup_steps 1 --train_batch_size 2 --max_source_length 64 "
                                    "--max_target_length 16 --val_max_target_length 16 --eval_batch_size 2 --log_freq 1",
                    EVAL_EXTRA_ARGS="--max_source_length 64 --max_target_length 12 --bs 3")
    _run(steps[5], repo, finetune)  # from the phase-2 checkpoints
    out = repo / "results" / "cnn_dm"
    _fine_tuning_checks(out, 2, 3)
    assert (out / "test_rouge.json").is_file()

    _run(steps[6], repo, dict(env, EXTRA_ARGS="--max_source_length 64 --max_target_length 12"))  # its OUTPUT_DIR=
    generations = open(repo / "results" / "cnn_dm_eval" / "test_generations.txt").read().splitlines()
    assert len(generations) == 3
    _run(steps[8], repo, env)
    # the reference's eval script name and its README's order (INIT_CKPT PRED_BS PRECISION EVAL_BEAMS ..., no
    # NUM_GPU) on the run step 8 exported; the exported folder in transformers (AutoModelForSeq2SeqLM + generate:
    # 4.57 and 5.x) gives its summaries (same settings)
    reference = _run([f"bash scripts/run_summarization_eval.sh results/cnn_dm 1 fp32 4 64 12 data/cnn_dm {config_path} "
                      "auto"], repo, dict(env, OUTPUT_DIR="results/cnn_dm_eval_run"))
    assert "reading the arguments without NUM_GPU" in reference.stdout + reference.stderr
    exported = str(repo / "results" / "cnn_dm_hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
    sources = open(repo / "data" / "cnn_dm" / "test.source").read().splitlines()
    texts = []
    for source in sources:
        batch = tokenizer([source], max_length=64, truncation=True, return_tensors="pt")
        with torch.no_grad():
            ids = hf_model.generate(**batch, num_beams=4, max_length=12)
        texts.append(tokenizer.batch_decode(ids, skip_special_tokens=True)[0].strip())
    assert open(repo / "results" / "cnn_dm_eval_run" / "test_generations.txt").read().splitlines() == texts
