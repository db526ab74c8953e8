"""Faults a long run meets, injected into the real entry point: SIGTERM (pre-emption), SIGKILL during a
checkpoint write, a damaged newest checkpoint, a hung rank; and the fp16 loss-scale floor. After each,
the run either stops with one line and its exit code, or resumes and ends exactly where an
uninterrupted run ends."""
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import torch

from bart.errors import EXIT_DIST_TIMEOUT, EXIT_PREEMPTED
from bart.records.dllogger_compat import read_dllogger
from tests.helpers import ROOT
from tests.helpers.corpus import pretraining_argv
from tests.helpers.ports import free_port
from tests.helpers.processes import Watched as _Watched
from tests.helpers.processes import logged_step, wait_for
from tests.helpers.processes import ours as _ours

STEPS = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory, small_tokenizer_dir):
    base = tmp_path_factory.mktemp("faults")
    argv = pretraining_argv(str(base), small_tokenizer_dir) + ["--max_steps", str(STEPS)]
    straight = base / "straight"
    done = _run(argv + ["--output_dir", str(straight)])
    assert done.returncode == 0, done.stderr[-2000:]
    return {"argv": argv, "straight": _losses(straight), "base": base}


def _env(**extra):
    return dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **extra)


def _run(argv, timeout=300):
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _losses(out_dir) -> dict:
    records = [r for r in read_dllogger(os.path.join(out_dir, "dllogger.json"))
               if r["type"] == "LOG" and isinstance(r["step"], int) and "loss" in r["data"]]
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps)), f"steps logged twice or out of order: {steps}"
    return {r["step"]: r["data"]["loss"] for r in records}


def _exited(pid: int) -> bool:
    """The process has ended (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _assert_same_run(setup, out_dir):
    got = _losses(out_dir)
    assert sorted(got) == list(range(1, STEPS + 1)), sorted(got)
    for step, loss in setup["straight"].items():
        assert got[step] == pytest.approx(loss, abs=1e-6), (step, got[step], loss)


def test_sigterm_writes_a_checkpoint_and_the_resumed_run_is_exact(setup):
    out = setup["base"] / "sigterm"
    argv = setup["argv"] + ["--output_dir", str(out)]  # default --save_checkpoint_steps 0: no periodic checkpoint
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for(lambda: logged_step(out) >= 3, proc, "update 3")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    assert "Traceback" not in err and "pretrain.py: stopped: SIGTERM received" in err, err[-2000:]
    saved = [name for name in os.listdir(out) if name.startswith("_step")]
    assert len(saved) == 1 and saved[0] != f"_step{STEPS}.ckpt", saved
    mode = stat.S_IMODE(os.stat(out / saved[0]).st_mode)
    assert mode == 0o666 & ~_umask(), oct(mode)  # readable by the team where the umask allows, not 0600
    resumed = _run(argv + ["--resume_from_checkpoint", "True"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    _assert_same_run(setup, out)


def test_sigterm_to_the_process_group_with_loader_workers(setup):
    """SLURM and a terminal's Ctrl-C signal the whole process group, data loader workers included:
    the workers ignore it, the main process finishes its update, saves and exits 75; the resumed run
    (its workers seeking to their rows) logs each step once."""
    out = setup["base"] / "group"
    argv = [a if a != "0" or setup["argv"][i - 1] != "--num_workers" else "2" for i, a in enumerate(setup["argv"])]
    argv += ["--output_dir", str(out)]
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for(lambda: logged_step(out) >= 3, proc, "update 3")
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    assert "Traceback" not in err and "DataLoader worker" not in err, err[-2000:]
    assert [n for n in os.listdir(out) if n.startswith("_step")]
    resumed = _run(argv + ["--resume_from_checkpoint", "True"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert sorted(_losses(out)) == list(range(1, STEPS + 1))


def test_sigkill_mid_checkpoint_write_and_a_damaged_checkpoint_then_resume_is_exact(setup):
    """Killed while a checkpoint is being written: the partial file is removed at the next start, the
    checkpoints under real names are whole, and the resumed run ends where the straight one does."""
    out = setup["base"] / "sigkill"
    argv = setup["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "1", "--keep_checkpoints", "2"]
    caught = False
    for attempt in range(3):  # the write window is short: try to land the kill inside it
        proc = subprocess.Popen([sys.executable, *argv, *(["--resume_from_checkpoint", "True"] if attempt else [])],
                                cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        partial = lambda out=out: any(n.endswith(".partial") for n in os.listdir(out)) if out.exists() else False  # noqa: E731
        try:
            wait_for(lambda partial=partial: partial() and logged_step(out) >= 2, proc, "a checkpoint write", timeout=120)
            proc.send_signal(signal.SIGKILL)
        except AssertionError:
            proc.kill()
        proc.wait()
        if partial() and any(n.startswith("_step") for n in os.listdir(out)):
            caught = True
            break
    if not caught:  # the kill never landed inside a write on this machine: leave what a killed write leaves
        (out / ".tmp-killed.partial").write_bytes(os.urandom(4096))
    resumed = _run(argv + ["--resume_from_checkpoint", "True"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "left by a write that was killed midway" in resumed.stderr
    assert not [n for n in os.listdir(out) if n.endswith(".partial")]
    _assert_same_run(setup, out)
    # then the newest checkpoint is damaged (a copy cut short): resuming skips it, loudly, and takes the
    # one before; the run still ends as the straight one
    newest = out / f"_step{STEPS}.ckpt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    again = _run(argv + ["--resume_from_checkpoint", "True"])
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"skipping {newest}" in again.stderr and f"_step{STEPS - 1}.ckpt" in again.stderr, again.stderr[-2000:]
    _assert_same_run(setup, out)


def _with_steps(argv, steps):
    argv = list(argv)
    argv[argv.index("--max_steps") + 1] = str(steps)
    return argv


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.slow
def test_a_hung_rank_ends_the_job_within_dist_timeout(setup):
    """Two gloo processes; one is frozen (SIGSTOP) mid-run. The other stops after --dist_timeout with one
    line naming itself and the cause, exit code 4, instead of waiting for torch's 30 minutes."""
    out = setup["base"] / "hung"
    argv = _with_steps(setup["argv"], 400)[1:] + ["--output_dir", str(out), "--dist_timeout", "0.1"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
           "pretrain.py", *argv]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: logged_step(out) >= 2, proc, "update 2")
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) == 2, workers
        os.kill(int(workers[1]), signal.SIGSTOP)
        stopped = time.time()
        # rank 0 gives up after --dist_timeout and exits; torchrun then sends the frozen rank SIGTERM and,
        # on a failed worker group, waits a fixed 30 s before SIGKILL (torch 2.13 passes no shutdown
        # timeout on that path): the test sends that SIGKILL itself once rank 0 is gone
        wait_for(lambda: _exited(int(workers[0])), proc, "rank 0 to exit", timeout=120)
        waited = time.time() - stopped
        os.kill(int(workers[1]), signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        proc.kill()
    assert f"exitcode  : {EXIT_DIST_TIMEOUT}" in err or f"exit code {EXIT_DIST_TIMEOUT}" in err or \
        "pretrain.py: stopped: rank" in err, err[-3000:]
    assert "pretrain.py: stopped: rank" in err and "--dist_timeout" in err, err[-3000:]
    assert waited < 90, waited


def test_fp16_loss_scale_floor_stops_the_run(tmp_path):
    from bart.modeling import BartForConditionalGeneration
    from bart.optim import build_optimizer, build_scheduler
    from bart.training.trainer import NonFiniteLossError, Trainer
    from tests.helpers.synthetic import (
        SyntheticBatches,
        one_process,
        run_settings,
        tiny_config,
    )

    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0))
    optimizer, clips = build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.0)
    settings = run_settings("fp16", output_dir=str(tmp_path), max_steps=50,
                            min_loss_scale=2.0 ** 12)  # 65536 halves to 4096 after 4 skipped updates
    trainer = Trainer(model, optimizer, build_scheduler(optimizer, "linear", 0, 50), SyntheticBatches(4, 4), settings,
                      strategy=one_process(model), clips_internally=clips, progress_bar=False)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match="--min_loss_scale"):
        trainer.fit()
    assert trainer.step == 0  # no skipped update was counted as applied
    assert not list(tmp_path.glob("*.ckpt"))  # and no checkpoint of a broken run


def test_best_checkpoints_survive_a_resume(tmp_path):
    from bart.modeling import BartForConditionalGeneration
    from bart.training.checkpoint import BestCheckpoints
    from tests.helpers.synthetic import tiny_config

    model = BartForConditionalGeneration(tiny_config())
    best = BestCheckpoints(str(tmp_path), "rouge2", 1, lower_is_better=False)
    best.consider(10.0, 2, model, {"rouge2": 10.0})
    best.consider(12.0, 4, model, {"rouge2": 12.0})
    (tmp_path / "best_rouge2_step6.ckpt").write_bytes(b"killed before it was ranked")
    again = BestCheckpoints(str(tmp_path), "rouge2", 1, lower_is_better=False)  # the resumed run
    assert [v for v, _ in again.restore()] == [12.0]
    assert again.consider(11.0, 6, model, {"rouge2": 11.0}) is None  # worse than the kept best: not written
    assert sorted(p.name for p in tmp_path.glob("best_*.ckpt")) == ["best_rouge2_step4.ckpt"]
    again.consider(13.0, 8, model, {"rouge2": 13.0})
    assert sorted(p.name for p in tmp_path.glob("best_*.ckpt")) == ["best_rouge2_step8.ckpt"]


@pytest.mark.parametrize("lower_is_better", [False, True])
def test_a_tie_keeps_the_later_trained_weights_not_the_step_0_ones(tmp_path, lower_is_better):
    """Was: every ROUGE-2 0 on a small run kept best_rouge2_step0.ckpt (the untrained weights of the step-0
    validation) as the best, and EVAL_CHECKPOINT=best evaluated the untrained model."""
    from bart.modeling import BartForConditionalGeneration
    from bart.training.checkpoint import BestCheckpoints, best_checkpoint
    from tests.helpers.synthetic import tiny_config

    model = BartForConditionalGeneration(tiny_config())
    best = BestCheckpoints(str(tmp_path), "rouge2", 1, lower_is_better=lower_is_better)
    for step in (0, 2, 4):
        best.consider(0.0, step, model, {"rouge2": 0.0})
    assert sorted(p.name for p in tmp_path.glob("best_*.ckpt")) == ["best_rouge2_step4.ckpt"]
    assert best_checkpoint(str(tmp_path)).endswith("best_rouge2_step4.ckpt")
    again = BestCheckpoints(str(tmp_path), "rouge2", 2, lower_is_better=lower_is_better)  # resumed with k 2
    again.restore()
    again.consider(0.0, 6, model, {"rouge2": 0.0})
    assert [os.path.basename(p) for _, p in again.best] == ["best_rouge2_step6.ckpt", "best_rouge2_step4.ckpt"]


def test_sigterm_during_a_checkpoint_write_keeps_that_checkpoint_and_stops_with_75(setup):
    """The signal sent while a periodic checkpoint is being written (its .partial file there): the write ends
    whole, the run stops after that update naming that very checkpoint (not written twice), exit 75."""
    out = setup["base"] / "during_write"
    run = _Watched([sys.executable, *_with_steps(setup["argv"], 400), "--output_dir", str(out),
                    "--save_checkpoint_steps", "1", "--keep_checkpoints", "2"])
    writing = lambda: out.exists() and any(n.endswith(".partial") for n in os.listdir(out))  # noqa: E731
    wait_for(lambda: logged_step(out) >= 2 and writing(), run.proc, "a checkpoint write")
    run.proc.send_signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-3000:]
    said = _ours(output, "pretrain.py")
    assert "Traceback" not in output and len(said) == 1, output[-3000:]
    newest = max((n for n in os.listdir(out) if n.startswith("_step")), key=lambda n: int(n[5:-5]))
    assert said[0].startswith(f"pretrain.py: stopped: SIGTERM received: stopped after update {newest[5:-5]} and "
                              f"wrote {out / newest}"), said
    assert not [n for n in os.listdir(out) if n.endswith(".partial")]
    assert torch.load(out / newest, weights_only=True)["global_step"] == int(newest[5:-5])
