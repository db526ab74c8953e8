"""No secret leaves the machine: a clone whose origin carries a token (every GitLab CI checkout:
``https://gitlab-ci-token:TOKEN@host/...``) builds a wheel whose bart/_build.json, and records runs whose
git_log.json, hold the remote without it; a command line's secret flags are masked and its interpreter is a name,
not a home folder's path; the model card made from those records (and from a record written before they were
cleaned) shows none of it."""
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

from bart.configuration import BartConfig
from bart.export import model_card
from bart.modeling import BartForConditionalGeneration
from bart.records import provenance
from bart.records.redact import clean_url, is_secret_name, mask_command, mask_env
from tests.helpers import ROOT
from tests.helpers.entry import run_entry
from tests.scripts.test_package import needs_wheels

SECRET = "SECRET123"
REMOTE = f"https://gitlab-ci-token:{SECRET}@host/team/bart.git"
CLEAN = "https://host/team/bart.git"
TINY = dict(vocab_size=50265, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)


def _git(*args, cwd):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout


def _ci_clone(tmp_path):
    """A clone of a bare repository holding this working tree's package (its tracked and new files), its origin
    then set to a URL with a CI job's token, as a GitLab CI checkout has it."""
    _git("init", "-q", "--bare", str(tmp_path / "remote.git"), cwd=tmp_path)
    _git("clone", "-q", str(tmp_path / "remote.git"), "clone", cwd=tmp_path)
    clone = tmp_path / "clone"
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "bart", "setup.py",
                  "pyproject.toml", "README.md", cwd=ROOT).split("\0")
    for name in filter(None, listed):
        path, copy = os.path.join(ROOT, name), clone / name
        if os.path.islink(path) or os.path.isfile(path):
            os.makedirs(copy.parent, exist_ok=True)
            os.symlink(os.readlink(path), copy) if os.path.islink(path) else shutil.copy2(path, copy)
    _git("add", "-A", cwd=clone)
    _git("commit", "-q", "-m", "the package", cwd=clone)
    _git("push", "-q", "origin", "HEAD", cwd=clone)
    _git("remote", "set-url", "origin", REMOTE, cwd=clone)
    return clone


def _files_holding(secret, *folders):
    """Every file under ``folders`` (a wheel's members read out of it) whose bytes hold ``secret``."""
    found = []
    for folder in folders:
        for parent, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(parent, name)
                data = open(path, "rb").read()
                if path.endswith(".whl"):
                    with zipfile.ZipFile(io.BytesIO(data)) as whl:
                        found += [f"{path}!{member}" for member in whl.namelist() if secret.encode() in whl.read(member)]
                elif secret.encode() in data:
                    found.append(path)
    return found


@needs_wheels
def test_a_ci_token_in_the_remote_reaches_no_wheel_record_or_model_card(tmp_path, tokenizer_dir, monkeypatch):
    """Rules out: the wheel's bart/_build.json and every run's git_log.json held the remote with the token
    (``https://gitlab-ci-token:TOKEN@host/...``), the command line the interpreter's path and ``--hub_token TOKEN``,
    and the model card (pushed with --push_to_hub) that command line."""
    clone = _ci_clone(tmp_path)
    # (1) the wheel built in the clone, as CI builds it (setup.py's build hook writes bart/_build.json)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "--quiet", "-w", str(tmp_path / "dist"), str(clone)], cwd=clone, capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("bart_recipe-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(tmp_path / "site")
    build = json.loads((tmp_path / "site" / "bart" / "_build.json").read_text())
    assert build["git"]["remote"] == CLEAN  # still names the repository
    assert build["git"]["commit"] == _git("rev-parse", "HEAD", cwd=clone).strip()

    # (2) a run's provenance: one start from the checkout, one from the built copy (its _build.json)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    run = tmp_path / "run"
    argv = ["pretrain.py", "--hub_token", SECRET, f"--wandb_api_key={SECRET}", "--tokenizer", "tok", "--max_steps", "1"]
    provenance.append_start(str(run), provenance.collect(str(clone), argv=argv))
    origin = provenance.package_origin("bart-recipe", str(tmp_path / "site" / "bart"))
    provenance.append_start(str(run), provenance.collect(str(clone), argv=argv, package=origin))
    starts = json.loads((run / provenance.FILE_NAME).read_text())["starts"]
    assert [s["git"]["remote"] for s in starts] == [CLEAN, CLEAN] and starts[1]["git"]["from"] == "built package"
    python = os.path.basename(sys.executable)
    assert starts[0]["command"] == [python, "pretrain.py", "--hub_token", "***", "--wandb_api_key=***", "--tokenizer",
                                    "tok", "--max_steps", "1"]
    assert starts[0]["command_line"] == f"{python} pretrain.py --hub_token '***' '--wandb_api_key=***' --tokenizer tok " \
                                        f"--max_steps 1"

    # (3) the model card: python -m bart.export of a checkpoint in the run's folder
    config = BartConfig(**TINY)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(config)
    torch.save({"model": model.state_dict(), "config": config.to_dict(), "step": 1}, run / "model.ckpt")
    assert run_entry("bart.export", [str(run / "model.ckpt"), str(tmp_path / "out"), "--tokenizer", tokenizer_dir,
                                     "--no-verify"]) == 0
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"- command: `{python} pretrain.py --hub_token '***' '--wandb_api_key=***' --tokenizer tok" in card

    # a record written before records were cleaned: the card shows its command without the interpreter's path and
    # the secret flag's value
    old = tmp_path / "old_run"
    old.mkdir()
    (old / provenance.FILE_NAME).write_text(json.dumps({"starts": [{
        "command": ["/home/alice/.venv/bin/python3", "finetune.py", "--hub_token", SECRET],
        "command_line": f"/home/alice/.venv/bin/python3 finetune.py --hub_token {SECRET}",
        "git": {"commit": "abc", "remote": REMOTE}}]}))
    (old / "README.md").write_text(model_card(model, str(old)))
    assert "- command: `python3 finetune.py --hub_token '***'`" in (old / "README.md").read_text()
    assert "/home/alice" not in (old / "README.md").read_text()

    assert _files_holding(SECRET, tmp_path / "dist", tmp_path / "site", clone / "build", run, tmp_path / "out",
                          old / "README.md") == []
    assert _files_holding(SECRET, clone / ".git") == [str(clone / ".git" / "config")]  # the search finds it there


@pytest.mark.parametrize("url, cleaned", [
    (REMOTE, CLEAN),
    ("https://ghp_abcdef0123456789@github.com/team/bart.git", "https://github.com/team/bart.git"),
    (f"https://host:8443/team/bart.git?private_token={SECRET}#frag", "https://host:8443/team/bart.git"),
    (f"http://oauth2:{SECRET}@[::1]:8080/bart.git", "http://[::1]:8080/bart.git"),
    (f"ssh://git:{SECRET}@host/team/bart.git", "ssh://host/team/bart.git"),
    ("ssh://git@host:2222/team/bart.git", "ssh://git@host:2222/team/bart.git"),  # a login name kept
    ("git@github.com:team/bart.git", "git@github.com:team/bart.git"),
    ("gitlab-ci-token@host:team/bart.git", "host:team/bart.git"),
    (f"glpat-{SECRET}abcdefghij@host:team/bart.git", "host:team/bart.git"),  # a token as the user: dropped
    (f"deploy:{SECRET}@host:team/bart.git", "host:team/bart.git"),
    ("/srv/git/a@b/bart.git", "/srv/git/a@b/bart.git"),  # a local path as it is
    ("file:///srv/git/bart.git", "file:///srv/git/bart.git"),
    (None, None),
])
def test_clean_url(url, cleaned):
    assert clean_url(url) == cleaned


def test_mask_command_and_env():
    """Secret-looking flags (a word token, secret, password, key, auth... or run together: --hubtoken) lose their
    value, in either form; --tokenizer and --max_tokens_per_batch do not; a URL argument is cleaned."""
    argv = ["python3", "run_eval.py", "--hub_token", SECRET, f"--wandb_api_key={SECRET}", "--token", SECRET,
            "--hubToken", SECRET, "--password", SECRET, "--client-secret", SECRET, "--tokenizer", "tok",
            "--max_tokens_per_batch", "512", "--init_checkpoint", REMOTE, f"--data={REMOTE}", "--secret", "--num_beams",
            "4"]
    assert mask_command(argv) == [
        "python3", "run_eval.py", "--hub_token", "***", "--wandb_api_key=***", "--token", "***", "--hubToken", "***",
        "--password", "***", "--client-secret", "***", "--tokenizer", "tok", "--max_tokens_per_batch", "512",
        "--init_checkpoint", CLEAN, f"--data={CLEAN}", "--secret", "--num_beams", "4"]
    assert mask_env({"HF_TOKEN": SECRET, "WANDB_API_KEY": SECRET, "CUDA_VISIBLE_DEVICES": "0,1", "AWS_SECRET": None}) \
        == {"HF_TOKEN": "***", "WANDB_API_KEY": "***", "CUDA_VISIBLE_DEVICES": "0,1", "AWS_SECRET": None}
    assert not any(is_secret_name(name) for name in provenance.CONTAINER_ENV + provenance.LAUNCH_ENV)
