"""Restarts that resume by themselves: ``--resume_from_checkpoint auto`` (resume when the output folder holds a
training checkpoint, else start), and ``torchrun --max_restarts`` after a rank was killed: the restarted
processes set up their process group again (a fresh key prefix in torchrun's store, which outlives the
attempt) within ``--rendezvous_timeout``, resume from the newest checkpoint and end where an uninterrupted
run ends."""
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from tests.helpers import ROOT
from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry as _main
from tests.helpers.forked import fork_ranks
from tests.helpers.ports import free_port

# the micro config's dropout 0.1: a random stream a resume loses shows in the losses (with 0 it would not)
assert micro_config()["dropout"] == 0.1


@pytest.fixture(scope="module")
def world(tmp_path_factory, inputs):
    return dict(inputs.finetuning(48), base=tmp_path_factory.mktemp("restarts"))


def _records(out_dir) -> list[dict]:
    from bart.records.dllogger_compat import read_dllogger
    return [r for r in read_dllogger(os.path.join(str(out_dir), "dllogger.json")) if r["type"] == "LOG"]


def _steps(out_dir) -> list[int]:
    return [r["step"] for r in _records(out_dir) if isinstance(r["step"], int) and "loss" in r["data"]]


# -- --resume_from_checkpoint auto -----------------------------------------------------------------
def test_auto_starts_a_new_run_then_resumes_from_its_newest_checkpoint(world, capsys):
    out = world["base"] / "auto"
    argv = world["argv"] + ["--output_dir", str(out), "--resume_from_checkpoint", "auto", "--save_checkpoint_steps", "2"]
    assert _main("finetune.py", argv + ["--max_steps", "3"]) == 0
    said = capsys.readouterr().out
    assert f"--resume_from_checkpoint auto: no training checkpoint in {out}: starting a new run" in said
    assert _steps(out) == [1, 2, 3]
    # the log gives the real sequences of each update (48 rows, 4 per update)
    assert [r["data"]["sequences_per_update"] for r in _records(out) if "loss" in r["data"]] == [4.0] * 3
    assert not [r for r in _records(out) if "resumed_from" in r["data"]]
    # the same command again, for more updates (a longer schedule: said with --allow_resume_change max_steps): it
    # resumes from fine-tuning's final checkpoint (step 3), the newest, not the periodic _step2.ckpt
    assert sorted(n for n in os.listdir(out) if n.endswith(".ckpt")) == ["_epoch0_step3.ckpt", "_step2.ckpt",
                                                                        "final_step.ckpt"]
    assert _main("finetune.py", argv + ["--max_steps", "5", "--allow_resume_change", "max_steps"]) == 0
    said = capsys.readouterr().out
    assert f"resuming from the newest checkpoint in {out} (_epoch0_step3.ckpt, step 3)" in said
    assert [r["data"]["resumed_from"] for r in _records(out) if "resumed_from" in r["data"]] == \
        [str(out / "_epoch0_step3.ckpt")]
    assert _steps(out) == [1, 2, 3, 4, 5]


def test_resume_true_with_no_checkpoint_starts_a_new_run_with_a_note(world, capsys):
    """The reference's phase-1 line as printed (--resume_from_checkpoint=True on a first start) starts the run, as
    the reference does, saying so in one line (not: refused, "use auto"); its restart then resumes."""
    out = world["base"] / "true_none"
    argv = world["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "1", "--resume_from_checkpoint=True"]
    assert _main("finetune.py", argv + ["--max_steps", "1"]) == 0
    said = capsys.readouterr().out
    assert f"[checkpoint] --resume_from_checkpoint True: no training checkpoint in {out}: starting a new run" in said
    assert _main("finetune.py", argv + ["--max_steps", "2", "--allow_resume_change", "max_steps"]) == 0
    assert _steps(out) == [1, 2] and "starting a new run" not in capsys.readouterr().out


def test_auto_rules(tmp_path, capsys):
    from bart.cli.args import _bool_or_path
    from bart.training.checkpoint import resolve_resume, resumable_checkpoints

    assert [_bool_or_path(v) for v in ("auto", "AUTO", "True", "latest", "runs/x.ckpt")] == \
        ["auto", "auto", True, True, "runs/x.ckpt"]
    assert resolve_resume("auto", str(tmp_path / "missing")) is None
    assert resolve_resume("auto", str(tmp_path)) is None  # empty
    for name in ("_step2.ckpt", "_step10.ckpt", "_epoch1_step10.ckpt", "best_rouge2_step12.ckpt",
                 "_step12.ckpt.partial", "final_step.ckpt", "_step4.ckpt"):
        (tmp_path / name).write_bytes(b"x")
    assert resumable_checkpoints(str(tmp_path)) == [(2, str(tmp_path / "_step2.ckpt")), (4, str(tmp_path / "_step4.ckpt")),
                                                    (10, str(tmp_path / "_step10.ckpt")),
                                                    (10, str(tmp_path / "_epoch1_step10.ckpt"))]
    capsys.readouterr()
    assert resolve_resume("auto", str(tmp_path)) is True
    assert "(_epoch1_step10.ckpt, step 10)" in capsys.readouterr().out
    assert resolve_resume(True, str(tmp_path)) is True and resolve_resume("a.ckpt", str(tmp_path)) == "a.ckpt"
    assert resolve_resume(None, str(tmp_path)) is None


def test_auto_with_load_model_weights_only_is_refused(world, capsys):
    code = _main("finetune.py", world["argv"] + ["--output_dir", str(world["base"] / "lmwo"), "--max_steps", "1",
                                                 "--resume_from_checkpoint", "auto", "--load_model_weights_only"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--load_model_weights_only" in err[0] and "PATH" in err[0], err


# -- the process group of a restarted attempt ----------------------------------------------------------
def _store(timeout_s: float = 10):
    import datetime

    from torch.distributed import TCPStore
    return TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=timeout_s),
                    wait_for_workers=False)


def _join(store, rank, world_size, timeout_s, results, delay=0.0):
    from bart.runtime.distributed import attempt_store

    def run():
        time.sleep(delay)
        try:
            results[rank] = attempt_store(rank, world_size, timeout_s, store=store)
        except Exception as err:  # noqa: BLE001 - the test reads it
            results[rank] = err
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_restarted_attempt_gets_a_prefix_no_dead_attempt_wrote_to(capfd):
    """The store outlives the first attempt (as torchrun's does): its keys stay. A later attempt whose rank 1
    starts before rank 0 reads the dead attempt's token first; both ranks still end on one fresh prefix."""
    store = _store()
    first = {}
    for thread in [_join(store, r, 2, 10, first) for r in (0, 1)]:
        thread.join()
    first[0].set("gloo/rank_0", "dead address")
    second = {}
    threads = [_join(store, 1, 2, 10, second), _join(store, 0, 2, 10, second, delay=0.5)]
    for thread in threads:
        thread.join()
    assert not isinstance(second[0], Exception) and not isinstance(second[1], Exception), second
    second[0].set("gloo/rank_0", "live address")
    assert second[1].get("gloo/rank_0") == b"live address"  # the two ranks share the new prefix
    assert first[1].get("gloo/rank_0") == b"dead address"   # which is not the dead attempt's
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("present", [0, 1])
def test_a_process_that_never_joins_is_named_after_rendezvous_timeout(present):
    from bart.errors import EXIT_DIST_TIMEOUT
    from bart.runtime.distributed import RendezvousTimeout

    results = {}
    start = time.monotonic()
    _join(_store(600), present, 3 if present == 0 else 2, 0.5, results).join()
    waited = time.monotonic() - start
    err = results[present]
    assert isinstance(err, RendezvousTimeout) and err.exit_code == EXIT_DIST_TIMEOUT, err
    # after the 0.5 s asked for, not the store's own 600 s (the bound leaves a loaded machine room)
    assert "--rendezvous_timeout 0.5 s" in str(err) and 0.4 < waited < 60, (str(err), waited)
    if present == 0:
        assert str(err).startswith("rank 0 of 3: 2 process(es) did not join") and "(rank 1, 2)" in str(err)
    else:
        assert str(err).startswith("rank 1 of 2: rank 0 did not start the process group"), str(err)


# -- torchrun --max_restarts 1, one rank killed mid-run ------------------------------------------------
def _torchrun(argv, env_extra=None, restarts=0, timeout=None):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **(env_extra or {}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--max_restarts={restarts}",
           f"--master_port={free_port()}", "-m", "tests.helpers.restart_driver", "finetune.py", *argv]
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return out, time.monotonic() - start


@pytest.mark.slow
def test_torchrun_restart_after_a_killed_rank_resumes_and_ends_as_an_uninterrupted_run(world):
    """Rank 1 is SIGKILLed after update 3 (checkpoint at update 2) on the first attempt. torchrun restarts both
    processes; they join again, resume from _step2.ckpt and finish with exit 0; the log holds updates 1-6 once
    each and the final weights are bit-equal to those of the same command run without the kill."""
    argv = world["argv"] + ["--max_steps", "6", "--save_checkpoint_steps", "2", "--resume_from_checkpoint", "auto",
                            "--dist_timeout", "1", "--rendezvous_timeout", "60"]
    restarted = world["base"] / "restarted"
    out, _ = _torchrun(argv + ["--output_dir", str(restarted)], {"BART_TEST_KILL_AFTER_STEP": "3"}, restarts=1)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "restart_driver: rank 1 killed after update 3" in out.stdout, out.stdout[-3000:]
    assert "[distributed] torchrun restart 1 of 1: all 2 processes joined again" in out.stdout
    assert f"resuming from the newest checkpoint in {restarted} (_step2.ckpt, step 2)" in out.stdout
    assert "Traceback" not in out.stderr, out.stderr[-4000:]  # one line from the surviving rank, none after
    assert [r["data"]["resumed_from"] for r in _records(restarted) if "resumed_from" in r["data"]] == \
        [str(restarted / "_step2.ckpt")]
    assert _steps(restarted) == [1, 2, 3, 4, 5, 6]  # update 3 of the dead attempt dropped, run again once

    _ends_as_the_uninterrupted_run(world, restarted)


def _ends_as_the_uninterrupted_run(world, restarted) -> None:
    """The final weights bit-equal, and the last attempt's losses equal, to the same job run without a kill (run
    once, with checkpoints at update 2: they change nothing of the run)."""
    plain = world["base"] / "uninterrupted"
    if not (plain / "final_step.ckpt").is_file():
        # the ranks forked with torchrun's variables: no agent needed where nothing restarts
        code, ref = fork_ranks(2, [sys.executable, "-m", "tests.helpers.restart_driver", "finetune.py", *world["argv"],
                                   "--max_steps", "6", "--save_checkpoint_steps", "2", "--resume_from_checkpoint", "auto",
                                   "--dist_timeout", "1", "--rendezvous_timeout", "60", "--output_dir", str(plain)],
                               env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=ROOT)
        assert code == 0, ref[-4000:]
    got = torch.load(restarted / "final_step.ckpt", weights_only=True)
    want = torch.load(plain / "final_step.ckpt", weights_only=True)
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want), [k for k in want if not torch.equal(got[k], want[k])]
    records = _records(restarted)
    last = max([i for i, r in enumerate(records) if "attempt" in r["data"]], default=0)
    losses = {r["step"]: r["data"]["loss"] for r in records[last:] if "loss" in r["data"]}
    assert losses == {r["step"]: r["data"]["loss"] for r in _records(plain) if "loss" in r["data"]}


@pytest.mark.slow
def test_torchrun_restart_before_the_first_checkpoint_starts_again_and_ends_as_an_uninterrupted_run(world):
    """Rules out: the restarted processes join, then exit 2: "--output_dir holds another run's files (dllogger.json) ...
    no training checkpoint to go on from: add --overwrite_output_dir". Rank 1
    is SIGKILLed after update 3 with no checkpoint written (saved at the end only); the restart starts the run
    again from update 1, its log kept, and ends bit-equal to the uninterrupted run."""
    argv = world["argv"] + ["--max_steps", "6", "--resume_from_checkpoint", "auto", "--dist_timeout", "1",
                            "--rendezvous_timeout", "60"]
    restarted = world["base"] / "restarted_before_ckpt"
    out, _ = _torchrun(argv + ["--output_dir", str(restarted)], {"BART_TEST_KILL_AFTER_STEP": "3"}, restarts=1)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "restart_driver: rank 1 killed after update 3" in out.stdout, out.stdout[-3000:]
    assert f"[checkpoint] {restarted} holds the records of a run that stopped before its first checkpoint" \
        in out.stdout, out.stdout[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-4000:]
    steps = _steps(restarted)
    assert steps[-6:] == [1, 2, 3, 4, 5, 6] and steps[:-6] == [1, 2, 3][:len(steps) - 6], steps  # both attempts
    assert [r["data"]["attempt"] for r in _records(restarted) if "attempt" in r["data"]] == [2]
    _ends_as_the_uninterrupted_run(world, restarted)


# -- what a resume checks (bart.training.checkpoint.check_resume: one table) -------------------------------------
def _one_line_error(capsys, script="finetune.py"):
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith(("note:", "["))]
    assert len(err) == 1 and err[0].startswith(f"{script}: error: "), err
    return err[0]


@pytest.mark.parametrize("written, resumed, said", [
    (["--lamb"], [], "optimizer: LAMB in the checkpoint, AdamW now (--optim / --lamb)"),            # not: exit 0, LAMB state in AdamW
    ([], ["--lamb"], "optimizer: AdamW in the checkpoint, LAMB now (--optim / --lamb)"),            # not: KeyError 'bias_correction'
    (["--bf16"], [], "precision: bf16 in the checkpoint, tf32 now (--fp16/--bf16/--fp8/--no-tf32)"),
    ([], ["--weight_decay", "0.1"], "weight_decay: 0.0 in the checkpoint, 0.1 now (--weight_decay)"),
    ([], ["--lr_scheduler", "constant"], "lr_scheduler: linear in the checkpoint, constant now (--lr_scheduler)"),
    # not: exit 0 and no word, the losses diverging from the next update
    ([], ["--seed", "3"], "seed: 42 in the checkpoint, 3 now (--seed) (--allow_resume_change seed resumes with"),
    ([], ["--label_smoothing", "0.1"], "label_smoothing: 0.0 in the checkpoint, 0.1 now (--label_smoothing)"),
    ([], ["--n_val", "2"], "n_val: 0 in the checkpoint, 2 now (--n_val)"),
])
def test_a_resume_that_differs_from_the_checkpoints_run_is_refused_in_one_line(world, capsys, written, resumed, said):
    out = world["base"] / ("differs" + "".join(written).replace("-", "_"))
    argv = world["argv"] + ["--output_dir", str(out)]
    if not out.exists():
        assert _main("finetune.py", argv + ["--max_steps", "1"] + written) == 0
    capsys.readouterr()
    assert _main("finetune.py", argv + ["--max_steps", "2", "--resume_from_checkpoint", "True"] + resumed) == 2
    line = _one_line_error(capsys)
    assert said in line and f"--init_checkpoint {out / '_epoch0_step1.ckpt'}" in line, line


def test_an_allowed_change_resumes_and_says_so(world, capsys):
    out = world["base"] / "differs__bf16"
    argv = world["argv"] + ["--output_dir", str(out)]
    if not out.exists():
        assert _main("finetune.py", argv + ["--max_steps", "1", "--bf16"]) == 0
    capsys.readouterr()
    assert _main("finetune.py", argv + ["--max_steps", "2", "--resume_from_checkpoint", "True",
                                        "--allow_resume_change", "precision", "max_steps"]) == 0
    err = capsys.readouterr().err
    assert "with precision tf32 instead of the checkpoint's bf16, as --allow_resume_change precision asks" in err, err
    assert _steps(out) == [1, 2]


def test_a_resume_on_another_training_split_of_the_same_size_is_refused_and_writes_nothing(world, capsys):
    """Rules out: exit 0 and no word (the checks covered the schedule and batch, not the data's identity); and a refused
    resume rewrote run_config.json with the refused settings, so --config_file of it started the refused run."""
    from benchmarks.corpora import write_summarization_data

    out = world["base"] / "other_split"
    argv = world["argv"] + ["--output_dir", str(out)]
    assert _main("finetune.py", argv + ["--max_steps", "1"]) == 0
    files = {name: (out / name).read_bytes() for name in os.listdir(out)}
    other = write_summarization_data(str(world["base"] / "other_data"), sizes=(("train", 48), ("val", 4), ("test", 4)),
                                     seed=1)
    moved = [other if a == world["data"] else a for a in argv]
    capsys.readouterr()
    for changed, said in ((moved, "training_data: 48 examples, "), (argv + ["--train_batch_size", "8"],
                                                                     "global_batch: 4 sequences in the checkpoint, 8 "
                                                                     "sequences now")):
        assert _main("finetune.py", changed + ["--max_steps", "2", "--resume_from_checkpoint", "True",
                                               "--allow_resume_change", "max_steps"]) == 2
        line = _one_line_error(capsys)
        assert said in line, line
        assert {name: (out / name).read_bytes() for name in os.listdir(out)} == files  # nothing written
    assert _main("finetune.py", moved + ["--max_steps", "2", "--resume_from_checkpoint", "True",
                                         "--allow_resume_change", "max_steps", "training_data"]) == 0
    assert "resuming" in capsys.readouterr().err


def test_a_pretraining_checkpoint_resumed_by_finetuning_is_named_and_its_advice_works(world, inputs, tmp_path, capsys):
    """Rules out: a KeyError 'batches' traceback (the data position of another loader) where the schedule matched."""
    pre = tmp_path / "pre"
    argv = inputs.pretraining_argv()[1:] + ["--max_steps", "2", "--save_checkpoint_steps", "2",
                                            "--output_dir", str(pre)]
    assert _main("pretrain.py", argv) == 0
    ckpt = str(pre / "_step2.ckpt")
    capsys.readouterr()
    out = str(tmp_path / "ft")
    assert _main("finetune.py", world["argv"] + ["--output_dir", out, "--max_steps", "2", "--resume_from_checkpoint",
                                                 ckpt]) == 2
    assert _one_line_error(capsys) == (
        f"finetune.py: error: {ckpt} is a pretraining checkpoint (pretrain.py's), not a finetune.py run's to resume: "
        f"start finetune.py from its weights with --init_checkpoint {ckpt} (without --resume_from_checkpoint)")
    advised = [ckpt if a == world["argv"][world["argv"].index("--init_checkpoint") + 1] else a for a in world["argv"]]
    assert _main("finetune.py", advised + ["--output_dir", out, "--max_steps", "2"]) == 0


def test_a_resume_onto_more_processes_is_one_refusal_that_offers_nothing_it_cannot_do():
    """Other processes that keep the global batch resume (the banner says the change); ones that change it are one
    refusal naming the global batch, never the strategy that follows from the process count."""
    from bart.training.checkpoint import CheckpointError, check_resume, resume_changes

    args = {"distributed_strategy": None, "train_batch_size": 4, "gradient_accumulation_steps": 1}
    saved = {"args": args, "config": {}, "world_size": 1}
    current = {"args": dict(args, train_batch_size=2), "config": {}, "world_size": 2}
    assert check_resume(saved, current, "c.ckpt", sections=()) == []  # checks that are not one field
    assert resume_changes(saved, current, sections=()) == {"processes": "1 -> 2", "train_batch_size": "4 -> 2",
                                                           "distributed_strategy": "single process -> ddp"}
    current = {"args": args, "config": {}, "world_size": 2}
    with pytest.raises(CheckpointError) as refused:
        check_resume(saved, current, "c.ckpt", allowed=("distributed_strategy",), sections=())
    said = str(refused.value)
    assert "global_batch: 4 sequences in the checkpoint, 8 sequences now (processes x --train_batch_size x " \
           "--gradient_accumulation_steps) (--allow_resume_change global_batch resumes with the change)" in said, said
    assert "distributed_strategy" not in said, said


def test_a_warmup_ratio_is_recorded_as_updates_and_resumes_as_them(world, capsys):
    """--warmup_ratio (transformers' spelling): the run's record and checkpoint hold updates, so its resume with the
    same flag compares equal and one with --warmup_steps of those updates too."""
    import json

    out = world["base"] / "warmup_ratio"
    argv = world["argv"] + ["--output_dir", str(out), "--max_steps", "4", "--save_checkpoint_steps", "2"]
    assert _main("finetune.py", argv + ["--warmup_ratio", "0.3"]) == 0
    assert json.loads((out / "run_config.json").read_text())["warmup_steps"] == 2  # ceil(0.3 x 4)
    os.remove(out / "_epoch0_step4.ckpt")
    assert _main("finetune.py", argv + ["--warmup_steps", "2", "--resume_from_checkpoint", "True"]) == 0
    assert "warmup_steps" not in capsys.readouterr().err


def test_adafactor_trains_keeps_far_less_state_and_resumes_exactly(world, capsys):
    """--optim adafactor (transformers' name; torch's optimizer): the run learns, its checkpoint's optimizer state is
    a fraction of AdamW's, and a resume ends where the uninterrupted run ends. Rules out: "not implemented"."""
    from bart.files.checkpoint_io import safe_load

    def state_bytes(path):
        state = safe_load(str(path))["optimizer"]["state"]
        return sum(v.numel() * v.element_size() for s in state.values() for v in s.values() if torch.is_tensor(v))

    runs = {}
    for optim in ("adamw", "adafactor"):
        out = world["base"] / f"optim_{optim}"
        assert _main("finetune.py", world["argv"] + ["--output_dir", str(out), "--max_steps", "12", "--optim", optim,
                                                     "--save_checkpoint_steps", "2", "--learning_rate",
                                                     "1e-3" if optim == "adamw" else "0.1"]) == 0  # torch: relative
        runs[optim] = out
    losses = [r["data"]["loss"] for r in _records(runs["adafactor"]) if "loss" in r["data"]]
    assert sum(losses[-3:]) < sum(losses[:3]) - 0.3, losses  # one epoch of 12 updates: it learns
    assert state_bytes(runs["adafactor"] / "_step2.ckpt") < 0.6 * state_bytes(runs["adamw"] / "_step2.ckpt")
    resumed = world["base"] / "optim_adafactor_resumed"
    argv = world["argv"] + ["--output_dir", str(resumed), "--optim", "adafactor", "--save_checkpoint_steps", "2",
                            "--learning_rate", "0.1", "--lr_scheduler", "constant"]
    plain = world["base"] / "optim_adafactor_plain"
    assert _main("finetune.py", [a if a != str(resumed) else str(plain) for a in argv] + ["--max_steps", "6"]) == 0
    assert _main("finetune.py", argv + ["--max_steps", "2"]) == 0
    assert _main("finetune.py", argv + ["--max_steps", "6", "--resume_from_checkpoint", "True",
                                        "--allow_resume_change", "max_steps"]) == 0
    losses = [r["data"]["loss"] for r in _records(plain) if "loss" in r["data"]]
    assert [r["data"]["loss"] for r in _records(resumed) if "loss" in r["data"]] == losses
