"""One run per output folder (bart/runtime/run_lock.py) and a run folder deleted under a running run: a second run into a folder in use is refused in one line naming the first, before it writes
anything there; a lock left by a dead process is reported and taken over; the ranks of a refused torchrun
job all stop; a run whose folder or run files are deleted stops at its next log or checkpoint write in one
line instead of re-creating a folder holding only checkpoints."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from bart.errors import EXIT_PREEMPTED, EXIT_RUN_STOPPED, EXIT_USER_ERROR
from bart.records.dllogger_compat import read_dllogger
from bart.runtime import run_lock
from tests.helpers import ROOT
from tests.helpers.faulty_runs import faulty
from tests.helpers.forked import fork_ranks, popen_python, run_python
from tests.helpers.processes import Watched, logged_step, wait_for

HOLDER = ("import sys, time; sys.path.insert(0, sys.argv[2]); from bart.runtime import run_lock; "
          "run_lock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(600)")


def _env(**extra):
    return dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **extra)


def _errors(stderr: str) -> list[str]:
    """stderr's lines less notes, progress and LDDL's logging."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(("note:", "[train]", "LDDL"))]


def _hold(folder) -> subprocess.Popen:
    """Another process holding ``folder``'s lock (until killed)."""
    proc = popen_python([sys.executable, "-c", HOLDER, str(folder), ROOT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _record(folder) -> dict:
    with open(os.path.join(folder, run_lock.LOCK_NAME)) as f:
        return json.load(f)


@pytest.fixture
def holder(tmp_path):
    procs = []

    def start(folder):
        procs.append(_hold(folder))
        return procs[-1]
    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


# -- the lock itself ------------------------------------------------------------------------------------
def test_a_live_holder_refuses_then_its_stale_lock_is_taken_over(tmp_path, holder):
    folder = tmp_path / "run"
    other = holder(folder)
    before = (folder / run_lock.LOCK_NAME).read_text()
    with pytest.raises(run_lock.RunLockBusy) as refused:
        run_lock.acquire(str(folder), flag="--output_dir", notify=pytest.fail)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{folder} is in use by another run: pid {other.pid} on host "
                                                f"{socket.gethostname()}, running since "), line
    assert f"command: {os.path.basename(sys.executable)} -c {folder} {ROOT} (its lock: " in line, line
    assert line.endswith("Give this run another --output_dir, or wait until that run ends"), line
    assert "remove" not in line  # a live process on this machine: no advice to delete its lock
    assert (folder / run_lock.LOCK_NAME).read_text() == before  # refused without touching it
    other.kill()
    other.wait()  # SIGKILL: its lock stays behind
    notes = []
    lock = run_lock.acquire(str(folder), notify=notes.append)
    assert len(notes) == 1 and f"taking over {folder / run_lock.LOCK_NAME}, a stale lock of pid {other.pid}" in \
        notes[0] and notes[0].endswith("that process is no longer running"), notes
    assert _record(folder)["pid"] == os.getpid()
    assert run_lock.acquire(str(folder), notify=pytest.fail) is lock  # the same process again: its own lock
    lock.release()
    assert not (folder / run_lock.LOCK_NAME).exists() and folder.is_dir()  # the folder was the other's to make


def test_a_reused_pid_and_a_copied_or_unreadable_lock_are_stale(tmp_path, holder):
    folder = tmp_path / "a"
    other = holder(folder)
    record = _record(folder)
    # the pid of a live process started after the lock was taken: the lock's process is dead
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / run_lock.LOCK_NAME).write_text(json.dumps(dict(record, process_start=record["process_start"] - 1,
                                                                     folder_id=None)))
    notes = []
    run_lock.acquire(str(tmp_path / "b"), notify=notes.append).release()
    assert len(notes) == 1 and notes[0].endswith(f"pid {other.pid} now belongs to another, younger process"), notes
    # a folder copied with its lock while its run goes on
    shutil.copytree(folder, tmp_path / "copy")
    notes = []
    run_lock.acquire(str(tmp_path / "copy"), notify=notes.append).release()
    assert len(notes) == 1 and notes[0].endswith(f"it was copied from {folder} along with the folder"), notes
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / run_lock.LOCK_NAME).write_text("garbage")
    notes = []
    run_lock.acquire(str(tmp_path / "c"), notify=notes.append).release()
    assert len(notes) == 1 and notes[0].endswith("its content is not a lock record"), notes
    assert _record(folder)["token"] == record["token"]  # the live holder's own lock was never touched


def test_a_lock_of_another_machine_is_judged_by_its_heartbeat(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / run_lock.LOCK_NAME
    record = {"host": "node-b", "boot_id": "x", "pid_namespace": "pid:[1]", "pid": 4242, "process_start": 1,
              "since": "2026-01-01 10:00:00 UTC", "command": "python3 pretrain.py --output_dir /shared",
              "slurm_job": "77", "folder": "/mnt/shared", "folder_id": [1, 2], "token": "t"}
    path.write_text(json.dumps(record))
    stop = threading.Event()

    def beat():
        while not stop.wait(0.05):
            os.utime(path)
    thread = threading.Thread(target=beat)
    thread.start()
    notes = []
    try:
        with pytest.raises(run_lock.RunLockBusy) as refused:
            run_lock.acquire(str(folder), notify=notes.append, observe_s=1.0)
    finally:
        stop.set()
        thread.join()
    line = str(refused.value)
    assert "pid 4242 on host node-b (SLURM job 77), running since 2026-01-01 10:00:00 UTC" in line, line
    assert (f"(its lock: {path}; taken on another machine or container, whose processes cannot be checked from "
            f"here, but refreshed within the last 1 s). Give this run another --output_dir, or wait until that run "
            f"ends; if you know it has ended, remove {path}") in line, line
    assert len(notes) == 1 and "its process cannot be checked from here" in notes[0], notes
    notes = []  # no heartbeat: stale after the watch
    lock = run_lock.acquire(str(folder), notify=notes.append, observe_s=0.5)
    assert len(notes) == 2 and notes[1].endswith(f"its heartbeat stopped ({run_lock.LOCK_NAME} not refreshed for "
                                                 f"0.5 s)"), notes
    lock.release()


def test_the_holder_refreshes_its_lock_and_notices_its_loss(tmp_path):
    lock = run_lock.acquire(str(tmp_path / "run"), heartbeat_s=0.05)
    path = tmp_path / "run" / run_lock.LOCK_NAME
    os.utime(path, (1, 1))
    deadline = time.time() + 10
    while path.stat().st_mtime == 1 and time.time() < deadline:
        time.sleep(0.01)
    assert path.stat().st_mtime > 1  # the heartbeat another machine watches
    assert lock.lost is None
    path.unlink()
    while lock.lost is None and time.time() < deadline:
        time.sleep(0.01)
    assert lock.lost == f"{run_lock.LOCK_NAME} was removed or replaced by another process"
    assert not path.exists()  # the heartbeat does not bring it back
    assert run_lock.RunFolderWatch(str(tmp_path / "run"), {}, lock)(settle_s=0) == (
        f"the run's {run_lock.LOCK_NAME} went missing from {tmp_path / 'run'} (deleted or moved away)")
    lock.release()


def test_released_at_exit_error_and_sigterm_and_the_empty_folder_it_made_goes(tmp_path):
    script = ("import sys, time; sys.path.insert(0, sys.argv[2]); from bart.runtime import run_lock; "
              "run_lock.acquire(sys.argv[1]); print('held', flush=True); sys.stdin.readline(); {end}")
    for name, end, code in (("normal", "pass", 0), ("error", "raise ValueError('x')", 1),
                            ("sigterm", "pass", -signal.SIGTERM)):  # SIGTERM while it waits at startup
        folder = tmp_path / name / "out"
        folder.parent.mkdir()
        proc = popen_python([sys.executable, "-c", script.format(end=end), str(folder), ROOT],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout.readline().strip() == "held"
        assert (folder / run_lock.LOCK_NAME).is_file()
        if name == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        assert proc.wait(timeout=None) == code, name  # ended as it would have without the lock
        assert not folder.exists() and (tmp_path / name).is_dir(), name  # the folder it made, empty, went


def test_run_folder_watch_names_what_went(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    for name in ("dllogger.json", "run_config.json", "vocab.json", "merges.txt"):
        (folder / name).write_text("{}")
    watch = run_lock.RunFolderWatch(str(folder), {
        "dllogger.json": [str(folder / "dllogger.json")], "run_config.json": [str(folder / "run_config.json")],
        "tokenizer files": [str(folder / "vocab.json"), str(folder / "merges.txt")]})
    assert watch() is None
    (folder / "merges.txt").unlink()
    (folder / "run_config.json").unlink()
    assert watch(settle_s=0) == (f"the run's run_config.json, tokenizer files went missing from {folder} "
                                 f"(deleted or moved away)")
    shutil.rmtree(folder)
    assert watch(settle_s=0) == (f"the folder {folder} was deleted or moved away (with dllogger.json, "
                                 f"run_config.json, tokenizer files)")


# -- through the entry scripts --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pretraining(tmp_path_factory, inputs):
    return {"argv": inputs.pretraining_argv() + ["--no_tensorboard"], "base": tmp_path_factory.mktemp("run_lock")}


def _start(argv, **kwargs) -> subprocess.Popen:
    return popen_python([sys.executable, *argv], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True, **kwargs)


def _run(argv, timeout=300) -> subprocess.CompletedProcess:
    return run_python([sys.executable, *argv], cwd=ROOT, env=_env(), timeout=timeout)


def _wait_for_step(out, proc, step):
    wait_for(lambda: logged_step(out) >= step, proc, f"update {step}")


def _logged_steps(out) -> list[int]:
    return [r["step"] for r in read_dllogger(os.path.join(out, "dllogger.json"))
            if r["type"] == "LOG" and isinstance(r["step"], int) and "loss" in r["data"]]


def test_an_entry_script_run_in_process_frees_its_folder_when_it_ends(pretraining):
    """A caller that goes on after ``run_main`` (a notebook, a test's worker) holds no lock on the folder of a run
    that ended: run.lock and its heartbeat go with the run, not with the interpreter, so a later process into that
    folder is not refused as 'in use by another run'."""
    from tests.helpers.entry import run_entry

    out = pretraining["base"] / "in_process"
    assert run_entry("pretrain.py", pretraining["argv"][1:] + ["--output_dir", str(out), "--max_steps", "2"]) == 0
    assert not (out / run_lock.LOCK_NAME).exists() and str(out) not in run_lock.held_folders()
    assert (out / "_step2.ckpt").is_file()


def _held(argv, step: int) -> Watched:
    """``argv`` started, once it is held after update ``step`` (write_faults' hold_step: it waits for a stop signal
    there, idle, however long the test takes)."""
    run = Watched([sys.executable, *faulty(f"hold_step:{step}", argv)], forked=True)
    run.wait_for(f"write_faults: held after update {step}")
    return run


def test_a_second_run_into_the_same_folder_is_refused_and_changes_nothing(pretraining):
    out = pretraining["base"] / "shared"
    argv = pretraining["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "5"]
    first = _held(argv + ["--max_steps", "100000"], 6)
    try:
        run_config = (out / "run_config.json").read_text()
        second = _run(argv + ["--max_steps", "3", "--seed", "8"])
        assert second.returncode == EXIT_USER_ERROR, second.stderr[-2000:]
        errors = _errors(second.stderr)
        assert len(errors) == 1 and "Traceback" not in second.stderr, second.stderr[-2000:]
        assert errors[0].startswith(f"pretrain.py: error: {out} is in use by another run: pid {first.proc.pid} on "
                                    f"host {socket.gethostname()}, running since "), errors[0]
        assert "--output_dir" in errors[0] and "--max_steps 100000" in errors[0], errors[0]  # its command
        assert (out / "run_config.json").read_text() == run_config  # the second run wrote nothing there
        first.proc.send_signal(signal.SIGTERM)
    finally:
        code, output = first.finish()
    assert code == EXIT_PREEMPTED, output[-2000:]
    assert not (out / run_lock.LOCK_NAME).exists()  # released at exit
    steps = _logged_steps(out)
    assert steps == list(range(1, 7)), steps  # one run's log, whole, to the update it stopped after
    checkpoints = sorted(n for n in os.listdir(out) if n.endswith(".ckpt"))
    assert checkpoints == ["_step5.ckpt", "_step6.ckpt"], checkpoints  # its periodic one, and the stop's


def test_a_killed_run_leaves_a_stale_lock_that_its_restart_reports_and_takes_over(pretraining):
    out = pretraining["base"] / "killed"
    argv = pretraining["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "2", "--max_steps", "100000"]
    run = _held(argv, 3)
    run.proc.kill()
    run.finish()
    assert _record(out)["pid"] == run.proc.pid  # SIGKILL: left behind
    resumed = _run(pretraining["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "2",
                                          "--max_steps", "6", "--resume_from_checkpoint", "True",
                                          "--allow_resume_change", "max_steps"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    notes = [line for line in resumed.stderr.splitlines() if "[run lock]" in line]
    assert len(notes) == 1 and f"a stale lock of pid {run.proc.pid} on host {socket.gethostname()}" in notes[0] and \
        notes[0].endswith("that process is no longer running"), resumed.stderr[-2000:]
    assert _logged_steps(out)[-1] == 6 and not (out / run_lock.LOCK_NAME).exists()


@pytest.mark.slow
def test_every_rank_of_a_refused_torchrun_job_stops(pretraining, holder):
    """Two gloo processes into a folder another run holds: rank 0 is refused, rank 1 waits for its decision
    and stops with it; nothing is written."""
    out = pretraining["base"] / "ranks"
    holder(out)
    code, said = fork_ranks(2, [sys.executable, *pretraining["argv"], "--output_dir", str(out), "--max_steps", "3"],
                            env=_env(), cwd=ROOT)  # the ranks forked, with the variables torchrun gives them
    assert code != 0, said[-3000:]
    assert said.count("pretrain.py: error: ") == 2, said[-3000:]
    assert f"pretrain.py: error: {out} is in use by another run" in said, said[-3000:]
    assert f"pretrain.py: error: rank 0 did not start the run: {out} is in use by another run" in said
    assert sorted(os.listdir(out)) == [run_lock.LOCK_NAME]


def test_run_eval_refuses_a_save_path_in_use(tmp_path, holder, capsys):
    import run_eval
    from bart.cli.exits import run_main

    other = holder(tmp_path / "eval")
    (tmp_path / "model.ckpt").write_bytes(b"not read: refused before")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as stop:
        run_main(lambda: run_eval.main([str(tmp_path / "model.ckpt"), str(tmp_path / "config.json"), str(tmp_path),
                                        str(tmp_path / "eval")]), "run_eval.py")
    err = capsys.readouterr().err
    assert stop.value.code == EXIT_USER_ERROR, err
    assert err.startswith(f"run_eval.py: error: {tmp_path / 'eval'} is in use by another run: pid {other.pid} "), err
    assert err.strip().endswith("Give this run another SAVE_PATH, or wait until that run ends"), err
    assert _record(tmp_path / "eval")["pid"] == other.pid


def test_a_deleted_output_folder_stops_the_run_without_re_creating_it(pretraining):
    out = pretraining["base"] / "deleted"
    proc = _start(pretraining["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "2",
                                         "--max_steps", "1000"])  # bounded: seconds, where nothing stops it
    try:
        _wait_for_step(out, proc, 3)
        while out.exists():  # as `rm -rf` does: a file the run writes meanwhile (a checkpoint's) goes in a next pass
            shutil.rmtree(out, ignore_errors=True)
        _, err = proc.communicate(timeout=None)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_RUN_STOPPED, err[-2000:]
    errors = _errors(err)
    assert len(errors) == 1 and errors[0].startswith(f"pretrain.py: stopped: the folder {out} was deleted or moved "
                                                     f"away (with dllogger.json, run_config.json, tokenizer files, "
                                                     f"{run_lock.LOCK_NAME}) while this run was writing there"), err
    assert errors[0].endswith("No checkpoint is left: start the run again"), errors[0]
    assert not out.exists()  # not re-created with checkpoints only


def test_deleted_run_files_stop_the_run_and_the_resume_writes_them_again(pretraining):
    out = pretraining["base"] / "files"
    argv = pretraining["argv"] + ["--output_dir", str(out), "--save_checkpoint_steps", "2"]
    proc = _start(argv + ["--max_steps", "1000"])
    try:
        _wait_for_step(out, proc, 5)
        (out / "run_config.json").unlink()
        (out / "dllogger.json").unlink()
        _, err = proc.communicate(timeout=None)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_RUN_STOPPED, err[-2000:]
    errors = _errors(err)
    assert len(errors) == 1, err[-2000:]
    assert errors[0].startswith(f"pretrain.py: stopped: the run's dllogger.json, run_config.json went missing from "
                                f"{out} (deleted or moved away) while this run was writing there (noticed at "
                                f"update "), errors[0]
    newest = max((n for n in os.listdir(out) if n.startswith("_step")), key=lambda n: int(n[5:-5]))
    assert errors[0].endswith(f"To continue from {out / newest}, the newest checkpoint left, run the same command with "
                              f"--resume_from_checkpoint True (it writes the run's files again)"), errors[0]
    assert not (out / "dllogger.json").exists()  # nothing written after the deletion
    resumed = _run(argv + ["--max_steps", str(int(newest[5:-5]) + 2), "--resume_from_checkpoint", "True",
                           "--allow_resume_change", "max_steps"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (out / "run_config.json").is_file() and _logged_steps(out)[-1] == int(newest[5:-5]) + 2


def test_an_output_folder_replaced_by_a_file_stops_the_run_in_one_line(pretraining, monkeypatch, capfd):
    """TensorBoard on; the folder is replaced by a file just after the run's check at update 3 found it there
    (the race a user meets: the check, then the writes). Rules out: TensorBoard's writer-thread traceback, then
    exit 2 (NotADirectoryError as a user's mistake) where the documented code is 3."""
    from tests.helpers.entry import run_entry

    argv = [a for a in pretraining["argv"][1:] if a != "--no_tensorboard"]
    out = pretraining["base"] / "replaced"
    check, calls = run_lock.RunFolderWatch.__call__, []

    def check_then_replace(self, settle_s=0.5):
        found = check(self, settle_s)
        calls.append(found)
        if len(calls) == 3 and found is None:
            shutil.rmtree(out)
            out.write_text("a file where the run's folder was\n")
        return found

    monkeypatch.setattr(run_lock.RunFolderWatch, "__call__", check_then_replace)
    code = run_entry("pretrain.py", argv + ["--output_dir", str(out), "--max_steps", "6"])
    # LDDL's logger keeps the stream of the first in-process run of this pytest process: when that stream is
    # closed, logging reports its own error (not the run's); those blocks are left out
    err = re.sub(r"--- Logging error ---\n.*?\nArguments: \(\)\n", "", capfd.readouterr().err, flags=re.S)
    assert code == EXIT_RUN_STOPPED, err[-3000:]
    errors = _errors(err)
    assert "Traceback" not in err and len(errors) == 1, err[-3000:]
    assert errors[0].startswith(f"pretrain.py: stopped: the folder {out} was deleted or moved away"), errors[0]
    assert out.read_text() == "a file where the run's folder was\n"
