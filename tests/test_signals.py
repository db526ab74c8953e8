"""Stop signals wherever they land, with real processes: SIGTERM during the validation before update 1
(finetune.py), Ctrl-C and SIGTERM while run_eval.py generates, and under torchrun (``python -m utils.launch``,
what the scripts start): SIGTERM once, Ctrl-C twice, the second Ctrl-C to one rank only. Each ends with one
line per process and the documented exit code (75: stopped, a checkpoint where there was something to save;
130: stopped at once). A file of its own so that these multi-process tests run beside tests/test_faults.py."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers.corpus import micro_config, write_shards
from utils.dllogger_compat import read_dllogger
from tests.helpers.ports import free_port
from tests.helpers.processes import Watched, ours, wait_for
from utils.errors import EXIT_PREEMPTED

def _logged_step(out_dir) -> int:
    try:
        return max([r["step"] for r in read_dllogger(os.path.join(out_dir, "dllogger.json"))
                    if r["type"] == "LOG" and isinstance(r["step"], int)] or [0])
    except (FileNotFoundError, ValueError):
        return 0


@pytest.fixture(scope="module")
def setup(tmp_path_factory, small_tokenizer_dir):
    """Pretraining inputs for the torchrun cases: 48 rows, a model a little larger than the micro one, so that an
    update and a checkpoint take long enough (a tenth of a second or more) for a second signal to land in them."""
    base = tmp_path_factory.mktemp("signals_pt")
    (base / "config.json").write_text(json.dumps(micro_config(d_model=128, encoder_ffn_dim=512, decoder_ffn_dim=512,
                                                              encoder_layers=2, decoder_layers=2)))
    shards = os.path.dirname(write_shards(str(base / "shards"), [24, 24])[0])
    argv = ["pretrain.py", "--config_path", str(base / "config.json"), "--data_dir", shards, "--tokenizer",
            small_tokenizer_dir, "--max_steps", "400", "--train_batch_size", "4", "--max_source_length", "48",
            "--num_workers", "0", "--log_freq", "1", "--learning_rate", "1e-3", "--seed", "7"]
    return {"argv": argv, "base": base}


# -- stop signals wherever they land (one line and the documented code: 75 stop, 130 Ctrl-C) -------------------
@pytest.fixture(scope="module")
def summaries(tmp_path_factory, small_tokenizer_dir):
    """Fine-tuning and evaluation inputs: the micro model's weights, and splits whose validation and test take
    seconds (long generations, beams), so that a signal sent once they start lands inside them."""
    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    from tests.helpers.summaries import write_summarization_data

    base = tmp_path_factory.mktemp("signals")
    (base / "config.json").write_text(json.dumps(micro_config(min_length=40, max_length=48)))
    torch.manual_seed(0)
    weights = str(base / "weights.ckpt")
    torch.save(BartForConditionalGeneration(BartConfig.from_json_file(str(base / "config.json"))).state_dict(), weights)
    data = write_summarization_data(str(base / "data"), sizes=(("train", 16), ("val", 400), ("test", 400)))
    common = ["--config_path", str(base / "config.json"), "--data_dir", data, "--tokenizer", small_tokenizer_dir,
              "--max_source_length", "32", "--num_workers", "0"]
    return {"base": base, "weights": weights, "data": data, "tok": small_tokenizer_dir, "common": common}


def test_sigterm_during_the_validation_before_update_1_stops_with_75(summaries):
    """Old code: exit 143 and no message (SIGTERM's default action): the sbatch script's requeue on 75 did not
    happen."""
    out = summaries["base"] / "sanity"
    run = Watched([sys.executable, "finetune.py", *summaries["common"], "--init_checkpoint", summaries["weights"],
                    "--max_steps", "4", "--train_batch_size", "4", "--val_check_interval", "2", "--n_val", "64",
                    "--eval_beams", "4", "--eval_max_gen_length", "48", "--output_dir", str(out)])
    run.wait_for("== run ==")  # the validation before update 1 starts (64 examples, 4 beams: seconds)
    time.sleep(0.3)
    run.proc.send_signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == EXIT_PREEMPTED, output[-3000:]
    assert "Traceback" not in output and len(ours(output, "finetune.py")) == 1, output[-3000:]
    assert ours(output, "finetune.py")[0].startswith("finetune.py: stopped: SIGTERM received before update 1: "
                                                      "stopped without writing a checkpoint"), output[-3000:]
    assert not [n for n in os.listdir(out) if n.startswith("_")]  # no training checkpoint of nothing trained


@pytest.mark.parametrize("sig, code, said", [
    (signal.SIGINT, 130, "run_eval.py: interrupted (Ctrl-C): stopped before the work was done"),
    (signal.SIGTERM, EXIT_PREEMPTED, "run_eval.py: stopped: SIGTERM received: stopped before the work was done"),
])
def test_a_signal_while_run_eval_generates_is_one_line(summaries, sig, code, said):
    """Old code: Ctrl-C was exit 130 with a full KeyboardInterrupt traceback; SIGTERM exit 143, no message."""
    out = summaries["base"] / f"eval_{sig.name}"
    run = Watched([sys.executable, "run_eval.py", summaries["weights"], str(summaries["base"] / "config.json"),
                    summaries["data"], str(out), "--tokenizer", summaries["tok"], "--max_source_length", "32",
                    "--bs", "4", "--num_beams", "4"])
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
    Ctrl-C twice: the second reaches the workers too and the job ends 130. Old code (torchrun): exit 1 and
    SignalException tracebacks, the second Ctrl-C abandoning the workers mid-checkpoint."""
    out = setup["base"] / f"launch{presses}"
    run = _launch(setup, out, slow_write_ms=0 if presses == 1 else 3000)
    wait_for(lambda: _logged_step(out) >= 3, run.proc, "update 3")
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
        assert len(said) == 2 and all(s.startswith("pretrain.py: stopped: SIGTERM received: stopped after update")
                                      for s in said), said
        assert "None" not in " ".join(said) and [n for n in os.listdir(out) if n.startswith("_step")]
    else:
        assert code == 130, output[-4000:]
        assert launch[0].startswith("launch: SIGINT received: the processes stopped"), launch
        assert "pretrain.py: interrupted (Ctrl-C again): stopped at once" in output, output[-4000:]


@pytest.mark.slow
def test_a_second_ctrl_c_to_one_rank_ends_the_job_in_one_line_per_process(setup):
    """Old code: a 26-line KeyboardInterrupt traceback from rank 1, which said it "wrote None"."""
    out = setup["base"] / "rank1"
    run = _launch(setup, out, slow_write_ms=3000)
    wait_for(lambda: _logged_step(out) >= 3, run.proc, "update 3")
    rank1 = _workers(run)[1]
    os.kill(rank1, signal.SIGINT)
    _second_press(run, [rank1], lambda: os.kill(rank1, signal.SIGINT))
    code, output = run.finish()
    assert code == 130, output[-4000:]
    assert "Traceback" not in output and "wrote None" not in output, output[-4000:]
    assert "pretrain.py: interrupted (Ctrl-C again): stopped at once, without writing a checkpoint" in output
    assert ours(output, "launch") == ["launch: rank 1 ended with exit code 130, so the job stopped: stopped at once "
                                       "(Ctrl-C again), without a checkpoint"], output[-4000:]
