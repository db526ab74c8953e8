"""Hub ids resolved by huggingface_hub itself, from a cache the test writes in the hub's layout."""
import http.server
import os
import shutil
import subprocess
import sys
import threading

import pytest
import torch
import transformers

from bart.configuration import BartConfig
from bart.hub import HubResolutionError, resolve_model_path, resolve_tokenizer_path
from bart.modeling import BartForConditionalGeneration
from bart.tokenization.tokenization_bart import BartTokenizer
from tests.helpers import ROOT
from tests.helpers.entry import run_entry
from tests.helpers.hub_cache import add_to_hub_cache
from tests.helpers.hub_server import HubStandIn
from tests.helpers.ports import free_port

TINY = dict(vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)
IDS = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 10, 2, 1, 1]])


def _hf_model(seed=0):
    torch.manual_seed(seed)
    return transformers.BartForConditionalGeneration(transformers.BartConfig(**TINY)).eval()


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=(IDS != 1).long(), decoder_input_ids=IDS[:, :4]).logits


@pytest.fixture(scope="module")
def hub(tmp_path_factory, tokenizer_dir):
    """A hub cache holding a model with its tokenizer, a model stored as pytorch_model.bin only, and a
    tokenizer-only repository; returns (cache dir, the transformers model of tiny-org/tiny-bart)."""
    work = tmp_path_factory.mktemp("hub")
    cache = str(work / "hf_home" / "hub")
    model = _hf_model()
    model.save_pretrained(work / "tiny-bart")  # transformers' own layout: safetensors + generation_config.json
    for name in os.listdir(tokenizer_dir):
        shutil.copy(os.path.join(tokenizer_dir, name), work / "tiny-bart" / name)
    add_to_hub_cache(cache, "tiny-org/tiny-bart", str(work / "tiny-bart"))
    # a repository of pytorch_model.bin only (transformers 5.x's save_pretrained always writes safetensors)
    binary = _hf_model(seed=1)
    binary.config.save_pretrained(work / "tiny-bin")
    torch.save(binary.state_dict(), work / "tiny-bin" / "pytorch_model.bin")
    add_to_hub_cache(cache, "tiny-org/tiny-bart-bin", str(work / "tiny-bin"))
    add_to_hub_cache(cache, "tiny-org/tokenizer", tokenizer_dir)
    return cache, model


@pytest.fixture
def offline(hub, monkeypatch):
    cache, _ = hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", cache)
    return cache


def test_hub_id_resolves_from_the_offline_cache_and_loads(hub, offline, tokenizer):
    _, reference = hub
    folder = resolve_model_path("tiny-org/tiny-bart")
    assert folder.startswith(offline) and os.sep + "snapshots" + os.sep in folder
    assert os.path.islink(os.path.join(folder, "model.safetensors"))
    model = BartForConditionalGeneration.from_pretrained(folder)
    torch.testing.assert_close(_logits(model), _logits(reference), atol=1e-6, rtol=1e-6)
    # no --tokenizer: the one stored with the model; an explicit one wins
    assert resolve_tokenizer_path(None, folder, default="facebook/bart-large") == folder
    stored = BartTokenizer.from_pretrained(resolve_tokenizer_path(None, folder))
    assert stored("Hello world").input_ids == tokenizer("Hello world").input_ids and len(stored) == len(tokenizer)
    explicit = resolve_tokenizer_path("tiny-org/tokenizer", folder)
    assert explicit != folder and os.path.isfile(os.path.join(explicit, "tokenizer.json"))


def test_from_pretrained_takes_a_hub_id_as_transformers_does(hub, offline):
    """The custom-inference snippet's call with a hub id: resolved from the offline cache (before: `no
    checkpoint at tiny-org/tiny-bart`); an id neither local nor cached is one line naming it and the fix."""
    _, reference = hub
    model = BartForConditionalGeneration.from_pretrained("tiny-org/tiny-bart")
    torch.testing.assert_close(_logits(model), _logits(reference), atol=1e-6, rtol=1e-6)
    bin_only = BartForConditionalGeneration.from_pretrained("tiny-org/tiny-bart-bin")  # pytorch_model.bin only
    torch.testing.assert_close(_logits(bin_only), _logits(_hf_model(seed=1)), atol=1e-6, rtol=1e-6)
    with pytest.raises(HubResolutionError) as err:
        BartForConditionalGeneration.from_pretrained("facebook/bart-large-cnn")
    assert "\n" not in str(err.value) and "'facebook/bart-large-cnn'" in str(err.value) and "HF_HUB_OFFLINE=0" in str(err.value)


def test_pytorch_model_bin_repository_and_default_tokenizer(hub, offline):
    folder = resolve_model_path("tiny-org/tiny-bart-bin")
    assert os.path.isfile(os.path.join(folder, "pytorch_model.bin"))
    torch.testing.assert_close(_logits(BartForConditionalGeneration.from_pretrained(folder)), _logits(_hf_model(seed=1)),
                               atol=1e-6, rtol=1e-6)
    # no tokenizer files with this model: the default (a hub id) is resolved instead
    assert resolve_tokenizer_path(None, folder, default="tiny-org/tokenizer").endswith(
        os.path.join("snapshots", os.path.basename(resolve_tokenizer_path("tiny-org/tokenizer"))))
    with pytest.raises(HubResolutionError, match="holds no tokenizer files; pass --tokenizer"):
        resolve_tokenizer_path(None, folder)


def test_offline_and_not_cached_is_one_clear_error(offline):
    with pytest.raises(HubResolutionError) as err:
        resolve_model_path("facebook/bart-large")
    message = str(err.value)
    assert "\n" not in message
    for part in ("'facebook/bart-large'", "HF_HUB_OFFLINE=0", "hf download facebook/bart-large",
                 "local folder", offline):
        assert part in message
    with pytest.raises(HubResolutionError, match="tokenizer 'facebook/bart-large' .*HF_HUB_OFFLINE=0"):
        resolve_tokenizer_path("facebook/bart-large")


def test_local_paths_are_returned_as_is_and_missing_ones_are_named(tmp_path, offline):
    (tmp_path / "w.ckpt").write_bytes(b"x")
    assert resolve_model_path(str(tmp_path / "w.ckpt")) == str(tmp_path / "w.ckpt")
    assert resolve_model_path(tmp_path) == str(tmp_path)
    with pytest.raises(HubResolutionError, match=r"model '\./results/none\.ckpt' does not exist"):
        resolve_model_path("./results/none.ckpt")
    with pytest.raises(HubResolutionError, match="build one offline with"):
        resolve_tokenizer_path(str(tmp_path / "no_tokenizer"))
    with pytest.raises(HubResolutionError, match="neither an existing local path nor a valid hub id"):
        resolve_model_path("bad id with spaces")


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=None)


def test_environment_is_read_by_a_fresh_process(hub):
    """HF_HOME and HF_HUB_OFFLINE set before the interpreter starts, as a user's shell sets them."""
    cache, _ = hub
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=os.path.dirname(cache), HF_HUB_OFFLINE="1")
    done = _run("from bart.hub import resolve_model_path; print(resolve_model_path('tiny-org/tiny-bart'))", env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(os.path.join(cache, "models--tiny-org--tiny-bart", "snapshots"))


class _NotFound(http.server.BaseHTTPRequestHandler):
    """The hub's answer for a repository that does not exist."""

    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("X-Error-Message", "Repository not found")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


def test_online_unknown_id_and_unreachable_hub(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(tmp_path), HF_HUB_OFFLINE="0", HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
               HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DOWNLOAD_TIMEOUT="5")
    code = ("from bart.hub import resolve_model_path, HubResolutionError\n"
            "try: resolve_model_path('no-such-org/no-such-model')\n"
            "except HubResolutionError as e: print(e)\n")
    try:
        done = _run(code, env)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    assert "'no-such-org/no-such-model' is neither a local path nor a model on the Hugging Face hub" in done.stdout
    closed = tmp_path / "closed"
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{server.server_port}"  # the server is closed now: connection refused
    env["HF_HOME"] = str(closed)
    done = _run(code, env)
    assert done.returncode == 0, done.stderr
    assert "could not be reached" in done.stdout and "hf download no-such-org/no-such-model" in done.stdout


@pytest.fixture(scope="module")
def hub_50k(tmp_path_factory, tokenizer_dir):
    """A hub cache with a tiny model over the real 50,265-token vocabulary and its tokenizer files."""
    work = tmp_path_factory.mktemp("hub50k")
    cache = str(work / "hf_home" / "hub")
    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(transformers.BartConfig(**dict(TINY, vocab_size=50265))).eval()
    model.save_pretrained(work / "bart")
    for name in os.listdir(tokenizer_dir):
        shutil.copy(os.path.join(tokenizer_dir, name), work / "bart" / name)
    add_to_hub_cache(cache, "tiny-org/bart-50k", str(work / "bart"))
    config = work / "config.json"
    config.write_text(__import__("json").dumps(dict(TINY, vocab_size=50265)))
    from tests.helpers.summaries import write_summarization_data
    return cache, str(config), write_summarization_data(str(work / "data")), work


def _script(args, cache, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT, HF_HUB_OFFLINE="1", HF_HUB_CACHE=cache, OMP_NUM_THREADS="1")
    env.pop("TOKENIZER", None)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_entry_scripts_take_hub_ids(hub_50k, monkeypatch):
    """run_eval.py ORG/NAME resolves through huggingface_hub's offline cache; without --tokenizer the tokenizer
    stored with the model is used (run in this process: its results are the point). finetune.py --init_checkpoint
    with a hub id, offline and without --tokenizer, is tests/e2e/test_journey.py's (run_summarization.sh from
    facebook/bart-large in the container's configuration: the model's own tokenizer, not the image's default)."""
    cache, config, data, work = hub_50k
    for key, value in (("HF_HUB_OFFLINE", "1"), ("HF_HUB_CACHE", cache)):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TOKENIZER", raising=False)
    assert run_entry("run_eval.py", ["tiny-org/bart-50k", config, data, str(work / "eval"), "--n_obs", "3", "--bs", "3",
                                     "--num_beams", "2", "--max_target_length", "6", "--max_source_length", "32"]) == 0
    lines = open(work / "eval" / "test_generations.txt", encoding="utf-8").read().splitlines()
    assert len(lines) == 3
    # the same texts as the model loaded by transformers from the same cache entry and decoded alike
    snapshot = resolve_model_path_in(cache, "tiny-org/bart-50k")
    reference = transformers.BartForConditionalGeneration.from_pretrained(snapshot).eval()
    tok = transformers.AutoTokenizer.from_pretrained(snapshot)
    sources = open(os.path.join(data, "test.source"), encoding="utf-8").read().splitlines()[:3]
    enc = tok(sources, max_length=32, truncation=True, padding=True, return_tensors="pt")
    expected = []
    for i in range(3):  # one source at a time: no padding inside transformers' batch
        ids = reference.generate(enc["input_ids"][i:i + 1, :int(enc["attention_mask"][i].sum())], num_beams=2,
                                 max_length=6, min_length=0, no_repeat_ngram_size=0, early_stopping=True,
                                 forced_bos_token_id=None, forced_eos_token_id=2, length_penalty=1.0)
        expected.append(tok.decode(ids[0], skip_special_tokens=True, clean_up_tokenization_spaces=False).strip())
    assert lines == expected


def resolve_model_path_in(cache, repo_id):
    old = dict(os.environ)
    os.environ.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=cache)
    try:
        return resolve_model_path(repo_id)
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_entry_scripts_refuse_an_uncached_hub_id_in_one_line(hub_50k):
    cache, config, data, work = hub_50k
    for args in (["run_eval.py", "nobody/not-cached", config, data, str(work / "x")],
                 ["finetune.py", "--config_path", config, "--data_dir", data, "--init_checkpoint", "nobody/not-cached",
                  "--max_steps", "1", "--output_dir", str(work / "ft")]):
        out = _script(args, cache)
        assert out.returncode == 2, out.stderr[-2000:]
        assert "Traceback" not in out.stderr and "nobody/not-cached" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_readmes_download_command_runs_as_printed(tmp_path, tokenizer_dir):
    """README, "Starting from public weights": `hf download facebook/bart-large`, typed as printed, here offline
    from a cache that holds it (the command resolves the cached snapshot and prints its folder). Not `huggingface-cli download`,
    which huggingface_hub 1.x and later do not install (only `hf`, which 0.34 and later have: transformers 4.57's
    huggingface_hub 0.36 too)."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    [line] = [line for line in readme.splitlines() if line.startswith("hf download ")]
    command = line.split("#")[0].strip()
    assert command == "hf download facebook/bart-large"
    snapshot = add_to_hub_cache(str(tmp_path / "hf_home" / "hub"), "facebook/bart-large", tokenizer_dir)
    beside = os.path.join(os.path.dirname(sys.executable), "hf")  # this Python's huggingface_hub's command
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1",
               PATH=os.pathsep.join([os.path.dirname(beside)] * os.path.isfile(beside) + [env.get("PATH", "")]))
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert snapshot in done.stdout


def _push(tmp_path, hub_endpoint, *flags, token="hf_writer"):
    """``python -m bart.export`` of a tiny checkpoint with ``flags`` in a fresh process whose hub is the stand-in
    (HF_ENDPOINT), with ``token`` as HF_TOKEN (None: no token at all, nor a stored login)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_")) and k != "TOKENIZER"}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_ENDPOINT=hub_endpoint, HF_HUB_DISABLE_TELEMETRY="1")
    if token is not None:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "bart.export", str(tmp_path / "model.ckpt"), str(tmp_path / "out"),
                           "--no-verify", *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_export_pushes_to_the_hub_through_huggingface_hub(tmp_path, tokenizer_dir):
    """--push_to_hub REPO --private: huggingface_hub's create_repo and upload_folder against a local stand-in of
    the hub's API (tests/helpers/hub_server.py; HF_ENDPOINT): the repository made private, every file of OUT_DIR
    uploaded byte for byte in one commit, the model card's metadata validated. A refused upload (a token
    without write access) and a missing token are one line and exit 2: the first keeps the export, the second
    is refused before anything is written."""
    config = BartConfig(**dict(TINY, vocab_size=50265))
    torch.manual_seed(0)
    torch.save({"model": BartForConditionalGeneration(config).state_dict(), "config": config.to_dict(), "step": 1},
               tmp_path / "model.ckpt")
    with HubStandIn(token="hf_writer") as hub:
        done = _push(tmp_path, hub.endpoint, "--tokenizer", tokenizer_dir, "--push_to_hub", "me/tiny-bart", "--private")
        assert done.returncode == 0, done.stderr
        assert f"pushed {tmp_path / 'out'} to {hub.endpoint}/me/tiny-bart" in done.stdout
        repo = hub.repos["me/tiny-bart"]
        assert repo["private"] is True and len(repo["commits"]) == 1
        written = {name: (tmp_path / "out" / name).read_bytes() for name in os.listdir(tmp_path / "out")}
        assert repo["files"] == written and "model.safetensors" in written
        # the model card validated (huggingface_hub 0.36, CI's transformers-4 step, validates it twice; 2.x once)
        assert hub.cards and set(hub.cards) == {written["README.md"].decode()}, hub.cards
        assert not [request for request in hub.unknown if request[0] != "GET"]  # every upload step was the API's

        shutil.rmtree(tmp_path / "out")
        done = _push(tmp_path, hub.endpoint, "--tokenizer", tokenizer_dir, "--push_to_hub", "someone/else",
                     token="hf_reader")
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("bart.export: error: the hub refused --push_to_hub someone/else (HTTP 403: ")
        assert f"the export is in {tmp_path / 'out'}" in done.stderr and "HF_TOKEN" in done.stderr
        assert (tmp_path / "out" / "model.safetensors").is_file() and "someone/else" not in hub.repos

        shutil.rmtree(tmp_path / "out")
        done = _push(tmp_path, hub.endpoint, "--tokenizer", tokenizer_dir, "--push_to_hub", "me/tiny-bart", token=None)
        assert done.returncode == 2 and done.stderr == (
            "bart.export: error: --push_to_hub me/tiny-bart needs a Hugging Face token with write access: set "
            "HF_TOKEN or run `hf auth login`\n"), done.stderr
        assert not (tmp_path / "out").exists() and len(hub.repos["me/tiny-bart"]["commits"]) == 1


def test_finetuning_pushes_its_best_model_folder_once_at_the_end(tmp_path, small_tokenizer_dir):
    """finetune.py --push_to_hub REPO (--hub_model_id, transformers' name): best_tfmr/, verified in transformers,
    uploaded byte for byte in one commit after training; without a token it is one line before anything runs
    (not: no flag; the user exported and pushed by hand)."""
    import json as json_

    from benchmarks.corpora import write_summarization_data
    from tests.helpers.corpus import micro_config

    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 8), ("val", 2), ("test", 2)))
    (tmp_path / "config.json").write_text(json_.dumps(micro_config(dropout=0.0)))
    argv = ["finetune.py", "--config_path", str(tmp_path / "config.json"), "--data_dir", data, "--tokenizer",
            small_tokenizer_dir, "--from_scratch", "--max_steps", "1", "--train_batch_size", "4", "--max_source_length",
            "32", "--max_target_length", "8", "--n_val", "2", "--eval_max_gen_length", "6", "--no_tensorboard",
            "--num_workers", "0", "--output_dir", str(tmp_path / "run")]
    with HubStandIn(token="hf_writer") as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_")) and k != "TOKENIZER"}
        env.update(HF_HOME=str(tmp_path / "hf_home"), HF_ENDPOINT=hub.endpoint, HF_HUB_DISABLE_TELEMETRY="1",
                   PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
        refused = subprocess.run([sys.executable, *argv, "--push_to_hub", "--hub_model_id", "me/tuned"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)
        assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
            "finetune.py: error: --push_to_hub me/tuned needs a Hugging Face token with write access: set HF_TOKEN or "
            "run `hf auth login`"), refused.stderr
        assert not (tmp_path / "run").exists()  # before anything ran
        done = subprocess.run([sys.executable, *argv, "--push_to_hub", "me/tuned", "--hub_private_repo"], cwd=ROOT,
                              env=dict(env, HF_TOKEN="hf_writer"), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"pushed {tmp_path / 'run' / 'best_tfmr'} to {hub.endpoint}/me/tuned" in done.stdout
        repo = hub.repos["me/tuned"]
        folder = tmp_path / "run" / "best_tfmr"
        assert repo["private"] is True and len(repo["commits"]) == 1
        assert repo["files"] == {name: (folder / name).read_bytes() for name in os.listdir(folder)}


def test_an_unreachable_hub_is_one_line_naming_the_upload_that_finishes_the_push(tmp_path, tokenizer_dir):
    """--push_to_hub with a token and no hub to reach (HF_ENDPOINT on a port nothing listens on): exit 2 and one
    line naming the endpoint, the export kept and the command that uploads it; that command, run once the hub is
    there, finishes the push. Rules out: exit 1 and a 40-70 line traceback of httpx2.ConnectError under
    huggingface_hub 2.x (the handler knew httpx's errors only)."""
    config = BartConfig(**dict(TINY, vocab_size=50265))
    torch.manual_seed(0)
    torch.save({"model": BartForConditionalGeneration(config).state_dict(), "config": config.to_dict(), "step": 1},
               tmp_path / "model.ckpt")
    closed = f"http://127.0.0.1:{free_port()}"
    done = _push(tmp_path, closed, "--tokenizer", tokenizer_dir, "--push_to_hub", "me/tiny-bart", "--private")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    out = str(tmp_path / "out")
    assert done.stderr.startswith(f"bart.export: error: --push_to_hub me/tiny-bart: cannot reach the hub at {closed} ("), \
        done.stderr
    assert done.stderr.endswith(f"the export is in {out}: once connected (or with HF_ENDPOINT corrected), upload it "
                                f"with `hf upload me/tiny-bart {out} --private`\n"), done.stderr
    written = {name: (tmp_path / "out" / name).read_bytes() for name in os.listdir(out)}
    assert "model.safetensors" in written

    # the fix as printed, with huggingface_hub's own command, once the hub (a stand-in) is there
    command = done.stderr.rstrip("\n").rsplit("`", 2)[1]
    beside = os.path.join(os.path.dirname(sys.executable), "hf")  # this Python's huggingface_hub's command
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    with HubStandIn(token="hf_writer") as hub:
        env.update(HF_HOME=str(tmp_path / "hf_home"), HF_ENDPOINT=hub.endpoint, HF_TOKEN="hf_writer",
                   HF_HUB_DISABLE_TELEMETRY="1",
                   PATH=os.pathsep.join([os.path.dirname(beside)] * os.path.isfile(beside) + [env.get("PATH", "")]))
        uploaded = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=None)
        assert uploaded.returncode == 0, uploaded.stdout + uploaded.stderr
        assert hub.repos["me/tiny-bart"]["private"] is True and hub.repos["me/tiny-bart"]["files"] == written
