"""The tokenizer a model was trained with wins (bart/tokenization/tokenizer_choice.py).

An offline hub cache holds a "facebook/bart-large" whose tokenizer (the small trained one) has other ids
than the offline GPT-2+4 folder that ``$TOKENIZER`` names, as an image may set it. Starting from
(a) the hub id, (b) a folder with its tokenizer, (c) a training checkpoint, (d) NGC reference-format
checkpoints and (e) a fairseq model.pt, fine-tuning, evaluation and export use the model's own tokenizer,
or stop with one line naming both; ``--allow_tokenizer_mismatch`` overrides; pretraining from scratch
uses the default. ``$TOKENIZER`` is never used silently in any of these cases."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from bart.cli import builder
from bart.configuration import BartConfig
from bart.errors import UserError
from bart.hub import resolve_model_path
from bart.modeling import BartForConditionalGeneration
from bart.tokenization.identity import read_record, tokenizer_identity
from bart.tokenization.tokenization_bart import BartTokenizer
from bart.training.checkpoint import (
    BestCheckpoints,
    write_final_weights,
    write_training_checkpoint,
)
from tests.helpers import ROOT
from tests.helpers.fairseq import fairseq_state
from tests.helpers.hub_cache import add_to_hub_cache
from tests.helpers.summaries import write_summarization_data

TINY = dict(vocab_size=50265, d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=64)
TEXT = "Hello world"
ENV_KEYS = ("TOKENIZER", "BART_DEFAULT_TOKENIZER", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _ids(tokenizer_or_folder) -> list[int]:
    tok = tokenizer_or_folder if isinstance(tokenizer_or_folder, BartTokenizer) else \
        BartTokenizer.from_pretrained(tokenizer_or_folder)
    return tok.encode_batch_fast([TEXT])[0]


def _save_tokenizer(source: str, folder) -> str:
    BartTokenizer.from_pretrained(source).save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def world(tmp_path_factory, tokenizer_dir, small_tokenizer_dir):
    """Public weights and this project's checkpoints, each trained with the small tokenizer; GPT-2+4 as the
    environment's tokenizer."""
    base = tmp_path_factory.mktemp("tokenizer_choice")
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**TINY)).eval()
    w = {"gpt": tokenizer_dir, "small": small_tokenizer_dir, "model": model, "base": base}
    # (a) the hub's facebook/bart-large: weights, config and its own tokenizer files
    repo = base / "hub_repo"
    model.save_pretrained(str(repo))
    _save_tokenizer(small_tokenizer_dir, repo)
    w["cache"] = str(base / "hf_home" / "hub")
    add_to_hub_cache(w["cache"], "facebook/bart-large", str(repo))
    # (b) a save_pretrained / export folder with its tokenizer
    w["folder"] = str(base / "exported")
    model.save_pretrained(w["folder"])
    _save_tokenizer(small_tokenizer_dir, w["folder"])
    # (d) NGC reference formats: the reference's _step{N}.ckpt and final_step.ckpt (no config, no tokenizer)
    (base / "ngc").mkdir()
    w["ngc_step"] = str(base / "ngc" / "_step100.ckpt")
    torch.save({"model": model.state_dict(), "optimizer": {"state": {}}, "scaler": {"scale": 1.0}}, w["ngc_step"])
    w["ngc_final"] = str(base / "ngc" / "final_step.ckpt")
    torch.save(model.state_dict(), w["ngc_final"])
    # (e) fairseq's bart.large/model.pt
    (base / "bart.large").mkdir()
    w["fairseq"] = str(base / "bart.large" / "model.pt")
    torch.save({"model": fairseq_state(model), "args": argparse.Namespace(
        arch="bart_large", encoder_attention_heads=2, decoder_attention_heads=2, activation_fn="gelu",
        encoder_normalize_before=False, decoder_normalize_before=False, no_scale_embedding=True)}, w["fairseq"])
    # (c) a run's folder: its tokenizer saved beside its checkpoints, and recorded in them
    run = base / "run"
    _save_tokenizer(small_tokenizer_dir, run)
    from bart.tokenization.identity import remember
    remember(tokenizer_identity(small_tokenizer_dir), os.path.abspath(small_tokenizer_dir))  # as the run chose it
    state = {"kind": "bart-training-checkpoint", "model": model.state_dict(), "config": model.config.to_dict(),
             "step": 3, "global_step": 3, "epoch": 0}
    w["train_ckpt"] = write_training_checkpoint(str(run), state, None, keep=0)
    w["run"] = str(run)
    # the same checkpoint copied away from its run folder
    (base / "copied").mkdir()
    w["bare_ckpt"] = str(base / "copied" / "_step3.ckpt")
    shutil.copy(w["train_ckpt"], w["bare_ckpt"])
    config = base / "config.json"
    config.write_text(json.dumps(TINY))
    w["config"] = str(config)
    w["data"] = write_summarization_data(str(base / "data"), sizes=(("train", 8), ("val", 2), ("test", 2)))
    # each test compares with these ids (read once), and TOKENIZER may name a copy of the small one's files
    w["ids"] = {"gpt": _ids(tokenizer_dir), "small": _ids(small_tokenizer_dir)}
    assert w["ids"]["gpt"] != w["ids"]["small"]  # the point: other ids for the same text
    w["small_copy"] = _save_tokenizer(small_tokenizer_dir, base / "copy of small")
    return w


@pytest.fixture
def env(world, monkeypatch):
    """The offline hub cache; $TOKENIZER naming GPT-2+4, as the image set it."""
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", world["cache"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZER", world["gpt"])
    return monkeypatch


def _args(**values):
    from bart.cli.settings import Settings
    return Settings(**values)


STARTS = {  # kind -> (the weights as the entry scripts hand them over, words the error must name)
    "hub id": (lambda w: resolve_model_path("facebook/bart-large"), ["facebook/bart-large"]),
    "folder": (lambda w: w["folder"], [os.sep + "exported"]),
    "training checkpoint": (lambda w: w["train_ckpt"], ["_step3.ckpt"]),
    "copied training checkpoint": (lambda w: w["bare_ckpt"], ["copied", "_step3.ckpt", "recorded in it"]),
    "NGC _step checkpoint": (lambda w: w["ngc_step"], ["_step100.ckpt", "facebook/bart-large", "NGC reference"]),
    "NGC final_step.ckpt": (lambda w: w["ngc_final"], ["final_step.ckpt", "facebook/bart-large", "NGC reference"]),
    "fairseq model.pt": (lambda w: w["fairseq"], ["model.pt", "facebook/bart-large", "fairseq"]),
}


@pytest.mark.parametrize("kind", list(STARTS))
def test_the_models_own_tokenizer_wins_over_TOKENIZER(world, env, kind):
    start, names = STARTS[kind]
    model_path = start(world)
    small, gpt = world["ids"]["small"], world["ids"]["gpt"]
    # $TOKENIZER with another vocabulary: one line naming both and the fix, not used silently
    with pytest.raises(UserError) as err:
        builder.load_tokenizer(_args(), model_path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"$TOKENIZER ({world['gpt']}) differs from the tokenizer ")
    assert all(name in message for name in names), message
    assert "unset TOKENIZER to use the model's own, or pass --allow_tokenizer_mismatch" in message
    assert "50262 vs 1024 tokens" in message  # what differs
    # --tokenizer likewise, naming the flag
    with pytest.raises(UserError, match=r"^--tokenizer .* differs from .*; drop --tokenizer to use the model's own"):
        builder.load_tokenizer(_args(tokenizer=world["gpt"]), model_path)
    # the override flag uses the explicit one
    assert _ids(builder.load_tokenizer(_args(allow_tokenizer_mismatch=True), model_path)) == gpt
    # the same content under another path is the same tokenizer
    env.setenv("TOKENIZER", world["small_copy"])
    assert _ids(builder.load_tokenizer(_args(), model_path)) == small
    # no explicit choice: the model's own, whatever the image's default for training from scratch
    env.delenv("TOKENIZER")
    env.setenv("BART_DEFAULT_TOKENIZER", world["gpt"])
    assert _ids(builder.load_tokenizer(_args(), model_path)) == small


def test_from_scratch_the_default_is_the_lowest_choice(world, env):
    """--tokenizer, else $TOKENIZER, else $BART_DEFAULT_TOKENIZER (the image's), else facebook/bart-large."""
    small, gpt = world["ids"]["small"], world["ids"]["gpt"]
    env.delenv("TOKENIZER")
    assert _ids(builder.load_tokenizer(_args())) == small  # facebook/bart-large, from the hub cache
    env.setenv("BART_DEFAULT_TOKENIZER", world["gpt"])
    assert _ids(builder.load_tokenizer(_args())) == gpt  # taken, not facebook/bart-large
    env.setenv("TOKENIZER", world["small"])
    assert _ids(builder.load_tokenizer(_args())) == small
    assert _ids(builder.load_tokenizer(_args(tokenizer=world["gpt"]))) == gpt
    # fine-tuning --from_scratch (no starting weights) follows the same rule
    env.delenv("TOKENIZER")
    assert _ids(builder.load_tokenizer(_args(from_scratch=True, resume_from_checkpoint=None))) == gpt


def test_a_resumed_run_keeps_its_tokenizer(world, env):
    """--resume_from_checkpoint (True: the newest in --output_dir, or a path): the tokenizer of the run resumed."""
    with pytest.raises(UserError, match=r"^\$TOKENIZER .* differs from the tokenizer .*_step3\.ckpt was trained with"):
        builder.load_tokenizer(_args(resume_from_checkpoint=True, output_dir=world["run"]))
    env.delenv("TOKENIZER")
    env.setenv("BART_DEFAULT_TOKENIZER", world["gpt"])
    assert _ids(builder.load_tokenizer(_args(resume_from_checkpoint=True, output_dir=world["run"]))) == world["ids"]["small"]
    assert _ids(builder.load_tokenizer(_args(resume_from_checkpoint=world["train_ckpt"], output_dir="x"))) == \
        world["ids"]["small"]


def test_weights_without_a_tokenizer_need_one_named(world, env, tmp_path):
    """A checkpoint of unknown vocabulary with no tokenizer beside it and none recorded: --tokenizer / $TOKENIZER
    names it, else one line says so (facebook/bart-large is not taken unasked)."""
    torch.save({"model": world["model"].state_dict(), "config": world["model"].config.to_dict()}, tmp_path / "w.ckpt")
    assert _ids(builder.load_tokenizer(_args(), str(tmp_path / "w.ckpt"))) == world["ids"]["gpt"]
    env.delenv("TOKENIZER")
    with pytest.raises(UserError, match=r"w\.ckpt carries no tokenizer .*; pass --tokenizer with the tokenizer it was "
                                        r"trained with"):
        builder.load_tokenizer(_args(), str(tmp_path / "w.ckpt"))


def test_checkpoints_record_their_tokenizer(world, env, tmp_path):
    """Training, best-k and final checkpoints carry the run's tokenizer (fingerprint, size, name); the raw
    final_step.ckpt still loads with load_state_dict; the record wins over a tokenizer later saved beside,
    and a copy far from both still knows which tokenizer it needs."""
    from bart.tokenization.identity import remember
    own = _save_tokenizer(world["small"], tmp_path / "own tokenizer")  # where this run took its tokenizer from
    identity = tokenizer_identity(own)
    remember(identity, own)
    run = tmp_path / "run"
    _save_tokenizer(own, run)  # as save_run_files does
    model = world["model"]
    best = BestCheckpoints(str(run), "rouge2", k=1, lower_is_better=False).consider(1.0, 5, model, {"rouge2": 1.0})
    final = write_final_weights(str(run), model.state_dict())
    for path in (best, final):
        record = read_record(torch.load(path, weights_only=True))
        assert record == {"fingerprint": identity.fingerprint, "tokens": 1024, "name": own}, path
    assert read_record(torch.load(world["train_ckpt"], weights_only=True))["fingerprint"] == identity.fingerprint
    fresh = BartForConditionalGeneration(BartConfig(**TINY))
    fresh.load_state_dict(torch.load(final, weights_only=True))  # strict: the reference's raw state dict
    assert torch.equal(fresh.model.shared.weight, model.model.shared.weight)
    # a later run saved another tokenizer into the folder: the checkpoints still name theirs (not the
    # folder's)
    _save_tokenizer(world["gpt"], run)
    env.delenv("TOKENIZER")
    small = world["ids"]["small"]
    for path in (best, final):
        assert _ids(builder.load_tokenizer(_args(), path)) == small
    # copied away, and its tokenizer gone from where it was: one line with the fix; --tokenizer is checked
    (tmp_path / "away").mkdir()
    copied = str(tmp_path / "away" / "final_step.ckpt")
    shutil.copy(final, copied)
    shutil.rmtree(own)
    with pytest.raises(UserError, match=r"final_step\.ckpt was trained with .* is not found here .*pass --tokenizer"):
        builder.load_tokenizer(_args(), copied)
    assert _ids(builder.load_tokenizer(_args(tokenizer=world["small"]), copied)) == small
    with pytest.raises(UserError, match="differs from the tokenizer"):
        builder.load_tokenizer(_args(tokenizer=world["gpt"]), copied)


def _main(module_name: str, argv: list[str], capsys) -> tuple[int, str]:
    from tests.helpers.entry import run_entry
    return run_entry(f"{module_name}.py", argv), capsys.readouterr().err


def test_run_eval_refuses_before_loading_the_model(world, env, tmp_path, capsys, monkeypatch):
    from bart.cli import run_eval

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the tokenizer was checked")

    monkeypatch.setattr(run_eval.BartForConditionalGeneration, "from_pretrained", no_loading)
    code, err = _main("run_eval", [world["fairseq"], world["config"], world["data"], str(tmp_path / "eval")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.match(r"run_eval\.py: error: \$TOKENIZER \(.*\) differs from the tokenizer .*model\.pt was trained with "
                    r"\(facebook/bart-large: it is a fairseq checkpoint\)", err), err


def test_export_uses_the_public_weights_tokenizer(world, env, tmp_path, capsys):
    common = ["--config", world["config"], "--no-verify"]
    from bart import export
    assert export.main([world["ngc_final"], str(tmp_path / "refused"), *common]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bart.export: error: $TOKENIZER (") and len(err.strip().splitlines()) == 1, err
    assert "NGC reference checkpoint" in err and not (tmp_path / "refused").exists()
    assert export.main([world["ngc_final"], str(tmp_path / "forced"), *common, "--allow_tokenizer_mismatch"]) == 0
    assert tokenizer_identity(tmp_path / "forced") == tokenizer_identity(world["gpt"])
    env.delenv("TOKENIZER")
    assert export.main([world["ngc_final"], str(tmp_path / "own"), *common]) == 0
    assert tokenizer_identity(tmp_path / "own") == tokenizer_identity(world["small"])


def test_finetune_from_an_ngc_checkpoint_with_another_TOKENIZER_exits_2_in_one_line(world, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    env.update(HF_HUB_CACHE=world["cache"], HF_HUB_OFFLINE="1", TOKENIZER=world["gpt"], PYTHONPATH=ROOT,
               OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "finetune.py", "--config_path", world["config"], "--data_dir", world["data"],
                          "--init_checkpoint", world["ngc_step"], "--max_steps", "1", "--output_dir",
                          str(tmp_path / "ft")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-2000:]
    assert out.stderr.startswith(f"finetune.py: error: $TOKENIZER ({world['gpt']}) differs from the tokenizer "
                                 f"{world['ngc_step']} was trained with (facebook/bart-large: it is an NGC reference "
                                 f"checkpoint)"), out.stderr
    assert not os.path.exists(tmp_path / "ft" / "run_config.json")  # stopped before the run started


def _dockerfile():
    """(ENV as a dict, RUN texts) of the Dockerfile, continuation lines joined."""
    import shlex
    text = open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8").read().replace("\\\n", " ")
    env = {}
    for line in re.findall(r"(?m)^ENV (.*)$", text):
        env.update(word.split("=", 1) for word in shlex.split(line))
    return env, re.findall(r"(?m)^RUN (.*)$", text)


def test_the_image_bakes_a_default_for_scratch_and_bart_large_for_public_weights(world, env, monkeypatch):
    """The Dockerfile: no TOKENIZER (the user's explicit choice), BART_DEFAULT_TOKENIZER the folder it builds,
    and facebook/bart-large's tokenizer files downloaded into the HF_HOME it sets (the patterns bart.hub
    reads a tokenizer from); with that environment public weights get facebook/bart-large's from the cache
    and a run from scratch the baked folder."""
    import huggingface_hub

    from bart.hub import TOKENIZER_FILES
    image_env, runs = _dockerfile()
    assert "TOKENIZER" not in image_env
    [built] = [m.group(1) for r in runs for m in [re.search(r"python -m bart\.tokenization\.build_tokenizer (\S+)", r)] if m]
    assert image_env["BART_DEFAULT_TOKENIZER"] == built and image_env["HF_HOME"].startswith("/opt/")
    [code] = [re.search(r'python -c "(.*)"', r).group(1) for r in runs if "snapshot_download" in r]
    calls = []
    with monkeypatch.context() as patch:
        patch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: calls.append((a, k)))
        exec(code, {})  # the build step's own code, with the download recorded instead of made
    [(args, kwargs)] = calls
    assert args == ("facebook/bart-large",) and set(TOKENIZER_FILES + ["config.json"]) <= set(kwargs["allow_patterns"])
    # the container's environment: HF_HOME's hub cache (here the test's), the baked default, no TOKENIZER
    env.delenv("TOKENIZER")
    env.delenv("HF_HUB_CACHE")
    env.setenv("HF_HOME", os.path.dirname(world["cache"]))
    env.setenv("BART_DEFAULT_TOKENIZER", world["gpt"])
    assert _ids(builder.load_tokenizer(_args(), world["ngc_step"])) == world["ids"]["small"]
    assert _ids(builder.load_tokenizer(_args())) == world["ids"]["gpt"]


@pytest.mark.parametrize("script,args", [
    ("run_training_benchmark.sh", ["2", "16", "8", "{data}"]),
    ("run_pretraining.sh", ["2", "2", "1e-3", "1e-3", "fp32", "false", "1", "0", "0", "1", "1", "1", "1", "1", "{config}"]),
])
def test_scripts_leave_the_tokenizer_to_the_python_rule(script, args, world, tmp_path):
    """The scripts pass no --tokenizer of their own: $TOKENIZER, when the user sets it, reaches the process, and
    without it pretraining from scratch takes $BART_DEFAULT_TOKENIZER (not facebook/bart-large)."""
    log = tmp_path / "calls.txt"
    stub = tmp_path / "python"
    stub.write_text(f"#!/usr/bin/env bash\n"
                    f"case \"$1\" in -c|-m) exec {sys.executable} \"$@\" ;; esac\n"
                    f"echo \"TOKENIZER=${{TOKENIZER:-}} $*\" >> {log}\n")
    stub.chmod(0o755)
    data = tmp_path / "data"
    (data / "pretrain_lddl_128").mkdir(parents=True)
    (data / "pretrain_lddl_512").mkdir()
    write_summarization_data(str(data), sizes=(("train", 4),))
    values = [a.format(data=data, config=world["config"]) for a in args]
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS + ("NUM_GPUS", "CPU_PROCESSES")}
    for tokenizer in (None, world["small"]):
        env = dict(base, PYTHON=str(stub), DATA_DIR=str(data), CONFIG_PATH=world["config"], PRECISIONS="fp32",
                   PHASES="1", OUTPUT_DIR=str(tmp_path / "out"), RESULTS_DIR=str(tmp_path / "results"))
        if tokenizer:
            env["TOKENIZER"] = tokenizer
        log.write_text("")
        subprocess.run(["bash", f"scripts/{script}", *values], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=None)
        [call] = [line for line in log.read_text().splitlines() if ".py " in line]
        assert "--tokenizer" not in call.split(), call
        assert call.startswith(f"TOKENIZER={tokenizer or ''} "), call
