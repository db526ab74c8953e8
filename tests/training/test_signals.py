"""Stop signals wherever they land, with real processes: SIGTERM during finetune.py's validations (before update 1,
periodic: stopped at the next generation batch) and its --do_predict prediction, Ctrl-C and SIGTERM while
run_eval.py generates, and under torchrun (``python -m utils.launch``, what the scripts start): SIGTERM once, to one
rank during a validation, Ctrl-C twice, the second Ctrl-C to one rank only. Each ends with one
line per process and the documented exit code (75: stopped, a checkpoint where there was something to save;
130: stopped at once). A file of its own so that these multi-process tests run beside tests/training/test_interrupted_runs.py."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from bart.errors import EXIT_PREEMPTED
from bart.records.dllogger_compat import read_dllogger
from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry
from tests.helpers.ports import free_port
from tests.helpers.processes import Watched, logged_step, ours, wait_for


@pytest.fixture(scope="module")
def setup(tmp_path_factory, inputs):
    """Pretraining inputs for the torchrun cases: 48 rows, a model a little larger than the micro one, so that an
    update and a checkpoint take long enough (a tenth of a second or more) for a second signal to land in them."""
    argv = inputs.pretraining_argv(d_model=128, encoder_ffn_dim=512, decoder_ffn_dim=512, encoder_layers=2,
                                   decoder_layers=2) + ["--max_steps", "400"]
    return {"argv": argv, "base": tmp_path_factory.mktemp("signals_pt")}


# -- stop signals wherever they land (one line and the documented code: 75 stop, 130 Ctrl-C) -------------------
@pytest.fixture(scope="module")
def summaries(tmp_path_factory, inputs):
    """Fine-tuning and evaluation inputs: the micro model's weights, and splits whose validation and test take
    seconds (long generations, beams), so that a signal sent once they start lands inside them."""
    config, weights = inputs.config(min_length=40, max_length=48), inputs.weights(min_length=40, max_length=48)
    data = inputs.summaries(16, 400, 400)
    common = ["--config_path", config, "--data_dir", data, "--tokenizer", inputs.tokenizer, "--max_source_length", "32",
              "--num_workers", "0"]
    return {"base": tmp_path_factory.mktemp("signals"), "config": config, "weights": weights, "data": data,
            "tok": inputs.tokenizer, "common": common}


EVAL_BATCH = 8  # the generation batch of the validation and prediction cases (the progress counts go by it)


def _progress(lines, desc: str) -> int:
    """The most examples a progress display ``[desc] N/TOTAL`` reported (PROGRESS_INTERVAL_S=0: a line per batch)."""
    counts = [int(line.split("] ", 1)[1].split("/", 1)[0]) for line in lines if line.startswith(f"[{desc}] ")
              and "/" in line]
    return max(counts or [0])


def _pipe_drained(run) -> bool:
    import fcntl
    import termios

    pending = bytearray(4)
    fcntl.ioctl(run.proc.stdout.fileno(), termios.FIONREAD, pending)
    return int.from_bytes(pending, sys.byteorder) == 0


def _signal_between_batches(run, desc: str, workers: list[int], target: int, sig=signal.SIGTERM) -> int:
    """Once ``desc``'s first batch is reported, the ``workers`` are frozen, what they printed is read, ``sig`` goes
    to ``target`` and they go on; the examples reported when the signal was sent. However loaded the machine, a
    stop that waits for the work's end shows the whole count; one at the next batch at most a batch more (the
    tests allow two: the reader thread may not have taken the last line yet)."""
    wait_for(lambda: _progress(run.lines, desc) > 0, run.proc, f"the first batch of [{desc}]")
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: _pipe_drained(run), run.proc, "the output read")
    time.sleep(0.2)  # the reader thread's last lines
    seen = _progress(run.lines, desc)
    os.kill(target, sig)
    for pid in workers:
        os.kill(pid, signal.SIGCONT)
    return seen


@pytest.fixture
def progress_lines(monkeypatch):
    monkeypatch.setenv("PROGRESS", "lines")
    monkeypatch.setenv("PROGRESS_INTERVAL_S", "0")  # a progress line per batch: what the tests count


def _finetune_argv(summaries, out, *flags) -> list[str]:
    return [*summaries["common"], "--init_checkpoint", summaries["weights"], "--train_batch_size", "4",
            "--eval_batch_size", str(EVAL_BATCH), "--eval_beams", "1", "--eval_max_gen_length", "48", "--output_dir",
            str(out), *flags]


def _finetune(summaries, out, *flags, launch=()):
    return Watched([sys.executable, *launch, "finetune.py", *_finetune_argv(summaries, out, *flags)],
                   forked=not launch, start_new_session=bool(launch))  # a launcher: itself


def test_sigterm_during_the_validation_before_update_1_stops_with_75(summaries, progress_lines, capsys):
    """It stops at the next generation batch with 75 (the sbatch script requeues on it): not exit 143 and no message
    (SIGTERM's default action), nor 75 only once the whole validation has ended (400 examples here, minutes on
    CNN/DM, longer than SLURM's grace)."""
    out = summaries["base"] / "sanity"
    run = _finetune(summaries, out, "--max_steps", "4", "--val_check_interval", "2", "--n_val", "400")
    seen = _signal_between_batches(run, "validate", [run.proc.pid], run.proc.pid)
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-3000:]
    assert _progress(run.lines, "validate") <= seen + 2 * EVAL_BATCH < 400, output[-3000:]  # not the whole validation
    assert "Traceback" not in output and len(ours(output, "finetune.py")) == 1, output[-3000:]
    assert ours(output, "finetune.py")[0].startswith("finetune.py: stopped: SIGTERM received before update 1: "
                                                      "stopped without writing a checkpoint"), output[-3000:]
    assert "the validation under way was abandoned" in ours(output, "finetune.py")[0]
    assert not [n for n in os.listdir(out) if n.startswith(("_", "best_"))]  # no checkpoint of nothing trained
    # the command again, its validation cut to 8 rows for time (what a requeue reruns; not refused as "another
    # run's files (dllogger.json)"), in this process: no second start-up
    code = run_entry("finetune.py", _finetune_argv(summaries, out, "--max_steps", "4", "--val_check_interval", "2",
                                                   "--n_val", "8"))
    output = "".join(capsys.readouterr())
    assert code == 0, output[-3000:]
    assert "holds the records of a run that stopped before its first checkpoint" in output, output[-3000:]


def test_sigterm_during_a_periodic_validation_abandons_it_and_checkpoints_the_update(summaries, progress_lines):
    """The validation after update 2 is abandoned at its next batch (no metric, no best-k), the checkpoint of
    update 2 is written, exit 75; the resumed run validates update 2 first. Rules out: the whole validation ran
    (400 examples), its metric and best checkpoint written, before the stop."""
    out = summaries["base"] / "periodic"
    flags = ("--max_steps", "4", "--val_check_interval", "2", "--num_sanity_val_steps", "0", "--log_freq", "1",
             "--resume_from_checkpoint", "auto")
    run = _finetune(summaries, out, *flags, "--n_val", "400")
    seen = _signal_between_batches(run, "validate", [run.proc.pid], run.proc.pid)
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-3000:]
    assert _progress(run.lines, "validate") <= seen + 2 * EVAL_BATCH < 400, output[-3000:]
    said = ours(output, "finetune.py")
    assert "Traceback" not in output and len(said) == 1, output[-3000:]
    assert said[0].startswith(f"finetune.py: stopped: SIGTERM received: stopped after update 2 and wrote "
                              f"{out / '_step2.ckpt'}; "), said
    assert "(the validation at update 2 was abandoned: the resumed run does it first)" in said[0], said
    assert sorted(n for n in os.listdir(out) if n.endswith(".ckpt")) == ["_step2.ckpt"]  # no best-k, no final
    records = [r for r in read_dllogger(str(out / "dllogger.json")) if r["type"] == "LOG"]
    assert not [r for r in records if any(k.startswith("val_") for k in r["data"])]
    # the same command again (in this process: no second start-up; a shorter validation: the check is that update 2
    # is validated, then 3 and 4 trained)
    assert run_entry("finetune.py", _finetune_argv(summaries, out, *flags, "--n_val", "16", "--allow_resume_change",
                                                   "n_val")) == 0
    records = [r for r in read_dllogger(str(out / "dllogger.json")) if r["type"] == "LOG"]
    assert [r["step"] for r in records if "val_loss" in r["data"] or any(k.startswith("val_rouge") for k in r["data"])] \
        == [2, 4], records


def test_sigterm_during_the_test_prediction_stops_with_75_and_the_same_command_predicts(summaries, progress_lines,
                                                                                      capsys):
    """finetune.py --do_predict: a SIGTERM during the prediction after training stops it at the next batch (exit 75,
    the trained weights written, no test_generations.txt nor metrics); the same command again (as the scripts run
    it, --resume_from_checkpoint auto) predicts without training again. Rules out: the signal was ignored, the
    prediction finished and the run ended 0."""
    out = summaries["base"] / "predict"
    flags = ("--max_steps", "2", "--n_val", "0", "--do_predict", "--n_test", "96", "--log_freq", "1",
             "--resume_from_checkpoint", "auto")
    run = _finetune(summaries, out, *flags)
    seen = _signal_between_batches(run, "generate", [run.proc.pid], run.proc.pid)
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-3000:]
    said = ours(output, "finetune.py")
    assert "Traceback" not in output and said == [
        f"finetune.py: stopped: SIGTERM received during the prediction of the test split: stopped before it ended "
        f"(no test_generations.txt, no metrics written); the trained weights are written ({out / 'final_step.ckpt'}): "
        f"run the same command with --resume_from_checkpoint auto to predict without training again"], output[-3000:]
    assert _progress(run.lines, "generate") <= seen + 2 * EVAL_BATCH < 96, output[-3000:]
    assert os.path.isfile(out / "final_step.ckpt")
    assert not [n for n in os.listdir(out) if n.startswith("test_")]
    trained = [r["step"] for r in read_dllogger(str(out / "dllogger.json")) if "loss" in r.get("data", {})]
    assert run_entry("finetune.py", _finetune_argv(summaries, out, *flags)) == 0  # in this process: no start-up
    assert "nothing left to train" in capsys.readouterr().out
    assert [r["step"] for r in read_dllogger(str(out / "dllogger.json")) if "loss" in r.get("data", {})] \
        == trained == [1, 2]
    assert len((out / "test_generations.txt").read_text().splitlines()) == 96
    assert json.loads((out / "test_rouge.json").read_text())["rouge2"] >= 0


def test_pretraining_validation_loss_stops_at_the_next_batch():
    """The held-out loss loop (pretraining's validation, fine-tuning's --val_metric loss) takes a stop signal at its
    next batch: a real SIGUSR1 during the first batch's forward, under the entry scripts' StopRequest, and the loop
    ends before the second (StoppedAtBatch: the trainer then checkpoints the last update). Rules out: every batch ran."""
    from types import SimpleNamespace

    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    from bart.runtime.precision import Precision
    from bart.runtime.signals import StoppedAtBatch, StopRequest
    from bart.training.validation import PretrainingValidation

    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**micro_config()))
    rows = [{"input_ids": torch.randint(4, 100, (12,)), "labels": torch.randint(4, 100, (12,))} for _ in range(8)]
    validation = PretrainingValidation(rows, lambda part: {k: torch.stack([r[k] for r in part]) for k in part[0]}, 2)
    forwards = []

    def first_forward_signals(module, args, kwargs):
        forwards.append(1)
        if len(forwards) == 1:
            signal.raise_signal(signal.SIGUSR1)

    model.register_forward_pre_hook(first_forward_signals, with_kwargs=True)
    trainer = SimpleNamespace(model=model, device=torch.device("cpu"), precision=Precision(), global_step=3)
    with StopRequest(), pytest.raises(StoppedAtBatch) as stopped:
        validation(trainer)
    assert (stopped.value.received, len(forwards), validation.history) == ("SIGUSR1", 1, [])
    assert model.training  # left as training needs it


@pytest.mark.parametrize("sig, code, said", [
    (signal.SIGINT, 130, "run_eval.py: interrupted (Ctrl-C): stopped before the work was done"),
    (signal.SIGTERM, EXIT_PREEMPTED, "run_eval.py: stopped: SIGTERM received: stopped before the work was done"),
])
def test_a_signal_while_run_eval_generates_is_one_line(summaries, sig, code, said):
    """Rules out: Ctrl-C was exit 130 with a full KeyboardInterrupt traceback; SIGTERM exit 143, no message."""
    out = summaries["base"] / f"eval_{sig.name}"
    run = Watched([sys.executable, "run_eval.py", summaries["weights"], summaries["config"],
                    summaries["data"], str(out), "--tokenizer", summaries["tok"], "--max_source_length", "32",
                    "--bs", "4", "--num_beams", "4"], forked=True)
    run.wait_for("[generate]")
    time.sleep(0.3)
    run.proc.send_signal(sig)
    got, output = run.finish()
    assert got == code, output[-3000:]
    assert "Traceback" not in output and ours(output, "run_eval.py") == [ours(output, "run_eval.py")[0]], output
    assert ours(output, "run_eval.py")[0].startswith(said), output[-3000:]
    assert not os.path.exists(out / "test_generations.txt")


def _launch(setup, out, slow_write_ms: int = 0):
    """Two gloo processes under utils.launch (torchrun's flags; what the scripts start), in a session of their
    own as a terminal's job would be. ``slow_write_ms``: each checkpoint write first waits that long (a slow
    filesystem: tests/helpers/write_faults.py), so that a second signal lands inside the write the first one
    asked for however loaded the machine is."""
    argv = setup["argv"][1:] + ["--output_dir", str(out)]
    script = ["-m", "tests.helpers.write_faults", f"slow:{slow_write_ms}", "pretrain.py"] if slow_write_ms else \
        ["pretrain.py"]
    return Watched([sys.executable, "-m", "utils.launch", "--nproc_per_node=2", f"--master_port={free_port()}",
                     *script, *argv], start_new_session=True)


def _workers(run) -> list[int]:
    """The two worker processes, rank 0 first (torchrun starts them in order)."""
    found = subprocess.run(["pgrep", "-P", str(run.proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(found) == 2, found
    return sorted(int(pid) for pid in found)


def _pending(pid: int, sig: signal.Signals) -> bool:
    """Whether ``sig`` waits to be delivered to process ``pid`` (its status's pending masks); a process gone has
    none waiting."""
    if not os.path.exists(f"/proc/{pid}/status"):
        return False
    with open(f"/proc/{pid}/status") as f:
        masks = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask >> (int(sig) - 1) & 1 for mask in masks)


def _second_press(run, workers, press) -> None:
    """A second Ctrl-C that lands while the workers are still stopping, whatever the machine's load: once each
    worker took the first, they are frozen, the second is sent (``press``) and waits in each of them, then they
    go on and meet it (a human's second press comes seconds later, in the checkpoint write)."""
    wait_for(lambda: sum("[signal] SIGINT received" in line for line in run.lines) >= len(workers), run.proc,
              "the first Ctrl-C taken by every worker")
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    assert all(os.path.exists(f"/proc/{pid}/status") for pid in workers), "".join(run.lines)[-3000:]
    press()
    # a stopped process shows it waiting; one the kernel stopped after taking it (it takes SIGINT before SIGSTOP
    # when both wait) does not: at most a second for the launcher to pass it on
    deadline = time.time() + 1.0
    while time.time() < deadline and not all(_pending(pid, signal.SIGINT) for pid in workers):
        time.sleep(0.005)
    for pid in workers:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
def test_stop_signals_under_torchrun_end_the_job_with_the_documented_code(setup, presses):
    """SIGTERM once to the launcher: every rank checkpoints, the job ends 75 (what the sbatch scripts requeue on).
    Ctrl-C twice: the second reaches the workers too and the job ends 130. Rules out (torchrun): exit 1 and
    SignalException tracebacks, the second Ctrl-C abandoning the workers mid-checkpoint."""
    out = setup["base"] / f"launch{presses}"
    run = _launch(setup, out, slow_write_ms=0 if presses == 1 else 3000)
    wait_for(lambda: logged_step(out) >= 3, run.proc, "update 3")
    if presses == 1:
        run.proc.send_signal(signal.SIGTERM)
    else:
        workers = _workers(run)
        run.proc.send_signal(signal.SIGINT)
        _second_press(run, workers, lambda: run.proc.send_signal(signal.SIGINT))
    code, output = run.finish()
    assert "Traceback" not in output and "SignalException" not in output, output[-4000:]
    launch = ours(output, "launch")
    assert len(launch) == 1, output[-4000:]
    if presses == 1:
        assert code == EXIT_PREEMPTED, output[-4000:]
        assert launch[0].startswith("launch: SIGTERM received: the processes stopped (exit codes 75, 75): a "
                                    "checkpoint was written"), launch
        said = ours(output, "pretrain.py")
        # the launcher forwards the SIGTERM to each worker in turn: a rank whose own signal arrives after the
        # ranks agreed to stop (a loaded machine) names the other rank's (bart.runtime.signals.stop_agreed), as in
        # test_sigterm_to_one_rank_during_validation_stops_both_at_the_same_batch; at least one rank received it
        lines = [re.fullmatch(r"pretrain\.py: stopped: (SIGTERM|SIGTERM \(on another rank\)) received: stopped "
                              r"after update (\d+) and (rank 0 )?wrote (\S+); run the same command with "
                              r"--resume_from_checkpoint True to continue", s) for s in said]
        assert len(said) == 2 and all(lines), "\n".join(said)
        assert "SIGTERM" in {m[1] for m in lines} and len({(m[2], m[4]) for m in lines}) == 1, "\n".join(said)
        assert sorted(bool(m[3]) for m in lines) == [False, True], "\n".join(said)  # rank 0 wrote, rank 1 names it
        assert os.path.basename(lines[0][4]) == f"_step{lines[0][2]}.ckpt" and os.path.isfile(lines[0][4])
    else:
        assert code == 130, output[-4000:]
        assert launch[0].startswith("launch: SIGINT received: the processes stopped"), launch
        assert "pretrain.py: interrupted (Ctrl-C again): stopped at once" in output, output[-4000:]


@pytest.mark.slow
def test_sigterm_to_one_rank_during_validation_stops_both_at_the_same_batch(summaries, progress_lines):
    """Two gloo processes under utils.launch, SIGTERM to rank 1 only while they generate the validation after
    update 2: the ranks agree at the next generation batch (a rank abandoning alone would leave the other waiting
    in the gathering of generations), both write and name the checkpoint of update 2, the job ends 75, the rest
    of the validation not run."""
    out = summaries["base"] / "launch_validation"
    run = _finetune(summaries, out, "--max_steps", "4", "--val_check_interval", "2", "--num_sanity_val_steps", "0",
                    "--n_val", "400", launch=("-m", "utils.launch", "--nproc_per_node=2",
                                              f"--master_port={free_port()}"))
    wait_for(lambda: len(subprocess.run(["pgrep", "-P", str(run.proc.pid)], capture_output=True).stdout.split()) == 2,
             run.proc, "two workers")
    workers = _workers(run)
    seen = _signal_between_batches(run, "validate", workers, workers[1])
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-4000:]
    # rank 0 holds every other batch: at most one more of its batches after the signal (the ranks go in step)
    assert _progress(run.lines, "validate") <= seen + 2 * EVAL_BATCH < 200, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    said = ours(output, "finetune.py")  # each rank's line in one write: never another rank's output inside it
    assert sorted(said) == sorted([
        f"finetune.py: stopped: SIGTERM (on another rank) received: stopped after update 2 and wrote "
        f"{out / '_step2.ckpt'}; run the same command with --resume_from_checkpoint True to continue (the validation "
        f"at update 2 was abandoned: the resumed run does it first)",
        f"finetune.py: stopped: SIGTERM received: stopped after update 2 and rank 0 wrote {out / '_step2.ckpt'}; run "
        f"the same command with --resume_from_checkpoint True to continue (the validation at update 2 was abandoned: "
        f"the resumed run does it first)"]), output[-4000:]
    assert ours(output, "launch")[0].startswith("launch: rank "), output[-4000:]
    assert sorted(n for n in os.listdir(out) if n.endswith(".ckpt")) == ["_step2.ckpt"]


@pytest.mark.slow
def test_a_second_ctrl_c_to_one_rank_ends_the_job_in_one_line_per_process(setup):
    """Rules out: a 26-line KeyboardInterrupt traceback from rank 1, which said it "wrote None"."""
    out = setup["base"] / "rank1"
    run = _launch(setup, out, slow_write_ms=3000)
    wait_for(lambda: logged_step(out) >= 3, run.proc, "update 3")
    rank1 = _workers(run)[1]
    os.kill(rank1, signal.SIGINT)
    _second_press(run, [rank1], lambda: os.kill(rank1, signal.SIGINT))
    code, output = run.finish()
    assert code == 130, output[-4000:]
    assert "Traceback" not in output and "wrote None" not in output, output[-4000:]
    assert "pretrain.py: interrupted (Ctrl-C again): stopped at once, without writing a checkpoint" in output
    said = ours(output, "launch")
    assert len(said) == 1 and said[0].startswith("launch: rank 1 ended with exit code 130, so the job stopped: stopped "
                                                 "at once (Ctrl-C again), "), output[-4000:]
    # what the folder holds, as the line says it (not: "without a checkpoint", where rank 0 had written one)
    written = sorted((n for n in os.listdir(out) if n.startswith("_step") and n.endswith(".ckpt")),
                     key=lambda n: int(n[5:-5]))
    assert (f"a checkpoint was written ({written[-1]}): to resume, run " if written else
            "no checkpoint was written (it stopped before the first): to start the run again, run ") in said[0], said


def test_every_line_an_entry_script_prints_leaves_in_one_write(monkeypatch):
    """Under torchrun the ranks share one terminal or log. Unbuffered (``python -u``, PYTHONUNBUFFERED), ``print``
    wrote a line's text and its newline in two writes, so another rank's line landed inside it (a rank's "stopped"
    line inside the other's dllogger line: the SIGTERM case above lost one of its two lines). run_main makes both
    streams line-buffered for the run, and gives the caller's settings back."""
    import io

    from bart.cli.exits import run_main

    class Raw(io.RawIOBase):
        def __init__(self):
            self.writes = []

        def writable(self):
            return True

        def write(self, data):
            self.writes.append(bytes(data))
            return len(data)

    raws = {name: Raw() for name in ("stdout", "stderr")}
    for name, raw in raws.items():  # what python -u gives: text written through to an unbuffered file
        monkeypatch.setattr(sys, name, io.TextIOWrapper(raw, encoding="utf-8", write_through=True))

    def main():
        print("DLL 2026-11-26 - 4 loss : 6.5")
        print("[signal] SIGTERM received", file=sys.stderr)
        raise KeyboardInterrupt

    with pytest.raises(SystemExit):
        run_main(main, "pretrain.py", restore_signals=True)
    for name, raw in raws.items():
        assert raw.writes and all(w.endswith(b"\n") for w in raw.writes), (name, raw.writes)
        assert getattr(sys, name).write_through and not getattr(sys, name).line_buffering  # the caller's, back
