"""A pretraining run interrupted through the real entry point: SIGTERM (pre-emption; to the process, to its
process group with loader workers, during a checkpoint write), SIGKILL during a checkpoint write, its newest
checkpoint damaged. It stops with one line and its exit code, and the resumed run ends exactly where an
uninterrupted run ends. (A stopped rank: tests/e2e/test_cluster_faults.py; stop signals during validation,
prediction and under torchrun: test_signals.py; a full disk: test_full_disk.py.)"""
import os
import signal
import stat
import sys

import pytest
import torch

from bart.errors import EXIT_PREEMPTED
from bart.records.dllogger_compat import read_dllogger
from tests.helpers import ROOT
from tests.helpers.faulty_runs import faulty
from tests.helpers.forked import run_python
from tests.helpers.processes import Watched as _Watched
from tests.helpers.processes import ours as _ours

STEPS = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory, inputs):
    base = tmp_path_factory.mktemp("faults")
    argv = inputs.pretraining_argv() + ["--max_steps", str(STEPS)]
    straight = base / "straight"
    done = _run(argv + ["--output_dir", str(straight)])
    assert done.returncode == 0, done.stderr[-2000:]
    return {"argv": argv, "straight": _losses(straight), "base": base}


def _env(**extra):
    return dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **extra)


def _run(argv, timeout=300):
    return run_python([sys.executable, *argv], cwd=ROOT, env=_env(), timeout=timeout)


def _losses(out_dir) -> dict:
    records = [r for r in read_dllogger(os.path.join(out_dir, "dllogger.json"))
               if r["type"] == "LOG" and isinstance(r["step"], int) and "loss" in r["data"]]
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps)), f"steps logged twice or out of order: {steps}"
    return {r["step"]: r["data"]["loss"] for r in records}


def _assert_same_run(setup, out_dir):
    got = _losses(out_dir)
    assert sorted(got) == list(range(1, STEPS + 1)), sorted(got)
    for step, loss in setup["straight"].items():
        assert got[step] == pytest.approx(loss, abs=1e-6), (step, got[step], loss)


def _held(argv, mode: str, held: str, **kwargs) -> _Watched:
    """``argv`` started under write_faults' ``mode`` (tests/helpers/write_faults.py), once it said it is held there
    (``held``): it waits for a signal, which lands where the test means it to whatever the machine's speed."""
    run = _Watched([sys.executable, *faulty(mode, argv)], forked=True, **kwargs)
    run.wait_for(f"write_faults: held {held}")
    return run


def test_sigterm_writes_a_checkpoint_and_the_resumed_run_is_exact(setup):
    out = setup["base"] / "sigterm"
    argv = setup["argv"] + ["--output_dir", str(out)]  # default --save_checkpoint_steps 0: no periodic checkpoint
    run = _held(argv, "hold_step:3", "after update 3")
    run.proc.send_signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-2000:]
    assert "Traceback" not in output and "pretrain.py: stopped: SIGTERM received" in output, output[-2000:]
    saved = [name for name in os.listdir(out) if name.startswith("_step")]
    assert saved == ["_step3.ckpt"], saved
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
    run = _held(argv, "hold_step:3", "after update 3", start_new_session=True)
    os.killpg(run.proc.pid, signal.SIGTERM)
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-2000:]
    assert "Traceback" not in output and "DataLoader worker" not in output, output[-2000:]
    assert [n for n in os.listdir(out) if n.startswith("_step")] == ["_step3.ckpt"]
    resumed = _run(argv + ["--resume_from_checkpoint", "True"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert sorted(_losses(out)) == list(range(1, STEPS + 1))


def test_sigkill_mid_checkpoint_write_and_a_damaged_checkpoint_then_resume_is_exact(setup):
    """Killed while a checkpoint is being written: the partial file is removed at the next start, the
    checkpoints under real names are whole, and the resumed run ends where the straight one does."""
    out = setup["base"] / "sigkill"
    argv = setup["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "1", "--keep_checkpoints", "2"]
    run = _held(argv, "hold_write:3", "in the write of .tmp-")  # the checkpoint of update 3
    run.proc.send_signal(signal.SIGKILL)
    code, output = run.finish()
    assert code == -signal.SIGKILL, output[-2000:]
    names = os.listdir(out)
    assert [n for n in names if n.endswith(".partial")] and {"_step1.ckpt", "_step2.ckpt"} <= set(names), names
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_sigterm_during_a_checkpoint_write_keeps_that_checkpoint_and_stops_with_75(setup):
    """The signal sent while a periodic checkpoint is being written (its .partial file there): the write ends
    whole, the run stops after that update naming that very checkpoint (not written twice), exit 75."""
    out = setup["base"] / "during_write"
    run = _held(setup["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "1", "--keep_checkpoints", "2"],
                "hold_write:2", "in the write of .tmp-")  # the checkpoint of update 2
    assert [n for n in os.listdir(out) if n.endswith(".partial")], os.listdir(out)
    run.proc.send_signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-3000:]
    said = _ours(output, "pretrain.py")
    assert "Traceback" not in output and len(said) == 1, output[-3000:]
    assert said[0].startswith(f"pretrain.py: stopped: SIGTERM received: stopped after update 2 and wrote "
                              f"{out / '_step2.ckpt'}"), said
    assert sorted(n for n in os.listdir(out) if n.startswith("_step")) == ["_step1.ckpt", "_step2.ckpt"]
    assert not [n for n in os.listdir(out) if n.endswith(".partial")]
    assert torch.load(out / "_step2.ckpt", weights_only=True)["global_step"] == 2
