"""Watching runs: progress lines in a log file, TensorBoard events (read back with tensorboard's own
reader), pretraining's held-out loss, the run banner, early stopping, dllogger flushed per line, plots."""
import json
import os
import sys
import threading
import time

import pytest

from bart.records.dllogger_compat import Logger, read_dllogger
from tests.helpers import ROOT
from tests.helpers.corpus import SMALL_VOCAB_SIZE, write_shards
from tests.helpers.doubles import use_doubles
from tests.helpers.entry import run_entry
from tests.helpers.forked import run_python
from tests.helpers.summaries import write_summarization_data


def _run(script, *args, log_path, env=None):
    """The script with stdout and stderr going to a file, as under SLURM (not a terminal)."""
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", PROGRESS_INTERVAL_S="3600", **(env or {}))
    env.pop("PROGRESS", None)
    # forked from this process: what the run writes is the point, not an interpreter's start-up
    done = run_python([sys.executable, script, *args], cwd=ROOT, env=env, timeout=300, stderr_to_stdout=True)
    with open(log_path, "w") as log:
        log.write(done.stdout)
    return done.returncode, done.stdout


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128,
                  vocab_size=SMALL_VOCAB_SIZE, dropout=0.0)
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps(values))
    return str(path)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, tiny_config, small_tokenizer_dir):
    base = tmp_path_factory.mktemp("pretrain")
    data = os.path.dirname(write_shards(str(base / "shards"), [30, 30])[0])
    code, log = _run("pretrain.py", "--config_path", tiny_config, "--data_dir", data, "--tokenizer", small_tokenizer_dir,
                     "--max_steps", "20", "--train_batch_size", "8", "--max_source_length", "64", "--lamb",
                     "--learning_rate", "2e-2", "--warmup_steps", "2", "--log_freq", "5", "--num_workers", "0",
                     "--n_val", "6", "--val_check_interval", "10", "--output_dir", str(base / "out"),
                     log_path=str(base / "log.txt"))
    assert code == 0, log[-3000:]
    return base / "out", log


def test_progress_lines_in_a_log_file(pretrained):
    _, log = pretrained
    assert "\r" not in log and "\x1b" not in log
    lines = [line for line in log.splitlines() if line.startswith("[train] ")]
    assert [line.split(" ")[1] for line in lines] == [f"{n}/20" for n in range(0, 21, 2)]
    assert all("steps/s" in line and "elapsed" in line and "ETA" in line for line in lines[1:])
    assert any(line.startswith("[validate] 1/1 batch") for line in log.splitlines())


def test_pretraining_held_out_loss_and_banner(pretrained):
    out, log = pretrained
    records = [r for r in read_dllogger(str(out / "dllogger.json")) if r["type"] == "LOG"]
    val = [(r["step"], r["data"]["val_loss"]) for r in records if "val_loss" in r["data"]]
    assert [s for s, _ in val] == [10, 20] and all(0 < v < 20 for _, v in val)
    banner = json.load(open(out / "run_config.json"))["run_banner"]
    assert banner["data_rows"] == {"train": 54, "held_out": 6}
    assert banner["optimizer"].startswith("LAMB: the project's multi-tensor bart.optim.Lamb")
    assert banner["world_size"] == 1 and banner["global_batch"].startswith("8 sequences per update")
    assert "== run ==" in log and "  optimizer: LAMB" in log


def test_tensorboard_events_read_back(pretrained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(pretrained[0] / "tensorboard"))
    events.Reload()
    counts = {tag: len(events.Scalars(tag)) for tag in events.Tags()["scalars"]}
    print(counts)
    for tag in ("train/loss", "train/learning_rate", "train/grad_norm", "train/loss_scale", "train/seq_per_s",
                "train/tokens_per_s", "train/host_mem_peak_gib"):
        assert counts[tag] == 4, (tag, counts)
    assert counts["val/loss"] == 2 and [e.step for e in events.Scalars("val/loss")] == [10, 20]
    dll = [r["data"]["loss"] for r in read_dllogger(str(pretrained[0] / "dllogger.json"))
           if r["type"] == "LOG" and "loss" in r["data"]]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx(dll, rel=1e-6)
    assert "run_config/text_summary" in events.Tags()["tensors"]


def test_tensorboard_keeps_the_resume_steps_scalars_once(tmp_path, inputs, capsys):
    """A fine-tuning run to step 4, then resumed in its folder from its step-2 checkpoint (as after a crash at step
    4): TensorBoard, read back with its own reader, holds every step's scalars once, step 2's (the checkpoint's:
    training loss and validation) from the first run and steps 3-4 from the resumed one, not both runs' 3-4.
    Rules out: purge_step was the resume step, so step 2's train/* and val/* were dropped."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    world = dict(inputs.finetuning(16), base=tmp_path)
    argv = [a for a in world["argv"] if a != "--no_tensorboard"]
    argv[argv.index("--n_val") + 1] = "4"
    out = tmp_path / "out"
    argv += ["--val_check_interval", "2", "--num_sanity_val_steps", "0", "--save_checkpoint_steps", "2",
             "--max_steps", "4", "--output_dir", str(out)]
    assert run_entry("finetune.py", argv) == 0, capsys.readouterr()

    def scalars():
        events = EventAccumulator(str(out / "tensorboard"))
        events.Reload()
        return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}

    first = scalars()
    assert [step for step, _ in first["train/loss"]] == [1, 2, 3, 4]
    assert run_entry("finetune.py", argv + ["--resume_from_checkpoint", str(out / "_step2.ckpt")]) == 0, \
        capsys.readouterr()
    resumed = scalars()
    assert [step for step, _ in resumed["train/loss"]] == [1, 2, 3, 4], resumed["train/loss"]
    val_tags = [tag for tag in resumed if tag.startswith("val/")]
    assert val_tags and all([step for step, _ in resumed[tag]] == [2, 4] for tag in val_tags), resumed
    for tag in ["train/loss", *val_tags]:  # steps up to the checkpoint's are the first run's own
        assert [v for s, v in resumed[tag] if s <= 2] == [v for s, v in first[tag] if s <= 2], tag


def test_a_resumed_runs_events_are_read_after_the_earlier_ones_of_the_same_second(tmp_path):
    """TensorBoard reads a folder's event files in name order: the second the file was made, then the host, the pid
    and a per-process counter, which are not in order (a process's 10th writer's file sorts before its 9th's). A
    resumed run's writer made in the same second as the earlier run's file (here: that file named for this second and
    a host that sorts last) still has its events read after it, so the resume's purge drops the earlier run's steps
    3-4. Rules out: the run and its resume made in one second of one process read back as steps [3, 4, 1, 2, 3, 4]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from bart.records.metric_writers import TensorBoardWriter

    first = TensorBoardWriter(str(tmp_path))
    for step in (1, 2, 3, 4):
        first.scalars(step, {"loss": float(step)})
    first.close()
    (made,) = os.listdir(tmp_path)
    os.rename(tmp_path / made, tmp_path / f"events.out.tfevents.{int(time.time()):010d}.zzzz.1.1")
    resumed = TensorBoardWriter(str(tmp_path), purge_step=3)
    for step in (3, 4):
        resumed.scalars(step, {"loss": 10.0 * step})
    resumed.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]


def test_a_run_from_python_closes_what_it_logged_to(tmp_path, inputs, monkeypatch, capsys):
    """finetune.py run in this process (``run_entry``, as a notebook runs it) with TensorBoard and W&B (the double),
    once to its end and once stopped by a full disk at its first checkpoint: after each, no TensorBoard writer thread
    runs, no file of the run's folder is open and the W&B run is finished. Rules out: the training's log was closed
    only by the process's exit, so each run from Python left a writer thread and its event file open."""
    from tests.helpers.write_faults import install

    use_doubles(monkeypatch)
    import wandb

    before = set(threading.enumerate())  # (another test's in this worker may still run)

    def left_open(folder):
        threads = [t for t in threading.enumerate() if type(t).__module__.startswith("tensorboard") and t not in before]
        files = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                 if os.path.exists(f"/proc/self/fd/{fd}")]
        return threads, [f for f in files if f.startswith(str(folder))]

    argv = [a for a in inputs.finetuning(16)["argv"] if a != "--no_tensorboard"]
    argv += ["--wandb_project", "p", "--max_steps", "2", "--save_checkpoint_steps", "1"]
    assert run_entry("finetune.py", [*argv, "--output_dir", str(tmp_path / "ended")]) == 0, capsys.readouterr()
    assert os.listdir(tmp_path / "ended" / "tensorboard")  # it logged there
    assert left_open(tmp_path) == ([], [])
    assert wandb.run is None  # finished (finish() clears it)

    monkeypatch.setattr(os, "fdopen", os.fdopen)  # install() replaces it: put back after the test
    install("enospc:0:1")  # the first checkpoint's write fails as on a full disk
    capsys.readouterr()
    code = run_entry("finetune.py", [*argv, "--output_dir", str(tmp_path / "full")])
    said = capsys.readouterr()
    assert code == 2 and "could not write _step1.ckpt: no space left on device" in said.err, said.err[-800:]
    assert left_open(tmp_path) == ([], [])
    assert wandb.run is None  # finished (finish() clears it)


def test_n_val_mistakes_are_one_line(tiny_config, small_tokenizer_dir, tmp_path, capsys):
    """pretrain.py in this process (tests.helpers.entry: its exit code and what it printed; the refusal comes
    before LDDL's dataset, so no LDDL logger keeps this test's stderr)."""
    data = os.path.dirname(write_shards(str(tmp_path / "shards"), [4, 4])[0])
    common = ["--config_path", tiny_config, "--data_dir", data, "--tokenizer", small_tokenizer_dir, "--max_steps", "1",
              "--num_workers", "0", "--output_dir", str(tmp_path / "out")]
    capsys.readouterr()
    code = run_entry("pretrain.py", [*common, "--n_val", "8"])
    said = capsys.readouterr()
    assert code == 2 and said.err.strip().splitlines()[-1] == \
        "pretrain.py: error: --n_val 8: the data holds only 8 rows; hold out fewer"
    assert "Traceback" not in said.out + said.err


def test_flag_mistakes(capsys, monkeypatch, tmp_path):
    import pretrain
    from bart.cli.exits import USER_ERRORS
    from bart.records.metric_writers import build_writers

    with pytest.raises(SystemExit):
        pretrain.parse_args(["--config_path", "c", "--data_dir", "d", "--max_steps", "1", "--val_check_interval", "5"])
    assert "--val_check_interval needs held-out rows: add --n_val N" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    with pytest.raises(USER_ERRORS) as err:
        build_writers(None, "my-project", str(tmp_path))
    assert str(err.value).startswith("--wandb_project my-project: the wandb package is not installed")


def test_wandb_resume_continues_the_same_run(tmp_path, small_tokenizer_dir, monkeypatch, capsys):
    """A preempted fine-tuning run resumed (--resume_from_checkpoint auto) logs to the W&B run it started (the id
    kept in OUTPUT_DIR/wandb_run_id), not a new one; wandb is the double (tests/doubles/wandb: its server in
    this process). A run started anew in another folder gets its own run."""
    use_doubles(monkeypatch)
    import wandb

    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 16), ("val", 4), ("test", 4)))
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(max_position_embeddings=64, vocab_size=SMALL_VOCAB_SIZE)
    (tmp_path / "config.json").write_text(json.dumps(values))
    out = tmp_path / "out"
    args = ["--config_path", str(tmp_path / "config.json"), "--data_dir", data, "--tokenizer", small_tokenizer_dir,
            "--from_scratch", "--train_batch_size", "8", "--max_source_length", "32", "--max_target_length", "16",
            "--n_val", "0", "--log_freq", "1", "--num_workers", "0", "--no_tensorboard", "--wandb_project", "p",
            "--resume_from_checkpoint", "auto", "--allow_resume_change", "max_steps"]  # the resume trains longer
    for steps, folder in ((2, out), (4, out), (1, tmp_path / "other")):
        assert run_entry("finetune.py", args + ["--max_steps", str(steps), "--output_dir", str(folder)]) == 0, \
            capsys.readouterr()
    first, resumed, other = wandb.INITS
    assert first["id"] is not None and resumed["id"] == first["id"], (first, resumed)  # before: no id, 2 runs
    assert first["resume"] == resumed["resume"] == "allow"
    run_id = (out / "wandb_run_id").read_text().strip()
    assert run_id == first["id"]
    assert other["id"] != run_id
    runs = wandb.SERVER["p"]
    assert set(runs) == {run_id, other["id"]}
    # the one run holds both starts' training steps
    assert [step for step, logged in sorted(runs[run_id]["history"].items()) if "train/loss" in logged] == [1, 2, 3, 4]


def test_early_stopping_stops_after_patience(tmp_path, small_tokenizer_dir, capsys):
    """finetune.py in this process (tests.helpers.entry: about what the run does and logs, not the process)."""
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 32), ("val", 4), ("test", 4)))
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(max_position_embeddings=64, vocab_size=SMALL_VOCAB_SIZE)
    (tmp_path / "config.json").write_text(json.dumps(values))
    # learning rate 0: the validation loss never improves, so patience 2 stops at the second check after step 0
    args = ["--config_path", str(tmp_path / "config.json"), "--data_dir", data, "--tokenizer", small_tokenizer_dir,
            "--from_scratch", "--max_steps", "50", "--learning_rate", "0", "--train_batch_size", "8",
            "--max_source_length", "32", "--max_target_length", "16", "--val_metric", "loss", "--val_check_interval",
            "2", "--early_stopping_patience", "2", "--save_checkpoint_steps", "2", "--log_freq", "2", "--num_workers",
            "0", "--no_tensorboard"]

    def finetune(*more):
        capsys.readouterr()
        code = run_entry("finetune.py", args + list(more))
        said = capsys.readouterr()
        return code, said.out + said.err

    code, log = finetune("--output_dir", str(tmp_path / "out"))
    assert code == 0, log[-3000:]
    assert "stopping early at step 4: val_loss has not improved for 2 validations (--early_stopping_patience 2" in log
    records = [r for r in read_dllogger(str(tmp_path / "out" / "dllogger.json")) if r["type"] == "LOG"]
    assert [r["step"] for r in records if "val_loss" in r["data"]] == [0, 2, 4]
    assert [r["data"]["steps"] for r in records if "stopped_early" in r["data"]] == [4]
    assert any(n.endswith("_step4.ckpt") for n in os.listdir(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out" / "tensorboard")  # --no_tensorboard
    # a run resumed from the step-2 checkpoint (as after a crash there) has already counted one validation
    # without improvement: it stops at step 4 too, not two validations after the resume
    code, log = finetune("--output_dir", str(tmp_path / "resumed"), "--resume_from_checkpoint",
                         str(tmp_path / "out" / "_step2.ckpt"))
    assert code == 0, log[-3000:]
    assert "stopping early at step 4: val_loss has not improved for 2 validations" in log, log[-3000:]
    records = [r for r in read_dllogger(str(tmp_path / "resumed" / "dllogger.json")) if r["type"] == "LOG"]
    assert [r["step"] for r in records if "val_loss" in r["data"]] == [4]


@pytest.mark.parametrize("use_dllogger", [True, False])
def test_dllogger_lines_reach_the_file_as_logged(tmp_path, monkeypatch, use_dllogger):
    from tests.helpers.doubles import use_doubles

    use_doubles(monkeypatch)  # dllogger v1.0.0 as the container installs it: its JSON backend buffers
    path = str(tmp_path / "dllogger.json")
    logger = Logger(path, stdout=False, use_dllogger=use_dllogger)
    logger.log(step=1, data={"loss": 2.5})
    logger.log(step=2, data={"loss": 2.0})
    # read while the logger is still open, as a reader would after a SIGKILL
    assert [r["data"]["loss"] for r in read_dllogger(path)] == [2.5, 2.0]


def test_plot_has_a_row_per_phase(tmp_path, pretrained):
    from utils.plot_logs import _panels, plot_logs, read_log

    finetuning = tmp_path / "ft.json"
    logger = Logger(str(finetuning), stdout=False, use_dllogger=False)
    for step in range(10, 101, 10):
        logger.log(step=step, data={"loss": 5.0 / step ** 0.3, "learning_rate": 1e-3, "seq/s": 100.0})
    for step in (0, 50, 100):
        logger.log(step=step, data={"val_rouge1": step / 3, "val_rouge2": step / 10, "val_rougeL": step / 4})
    logger.close()
    kinds = [p[0] for p in _panels(read_log(str(finetuning)))]
    assert kinds == ["loss", "learning rate", "throughput", "metrics"]
    pre = _panels(read_log(str(pretrained[0] / "dllogger.json")))
    assert [name for _, _, name, _ in pre[0][3]] == ["training (raw)", "training (smoothed)", "validation"]
    written = plot_logs([str(pretrained[0] / "dllogger.json"), str(finetuning)], str(tmp_path / "plots"),
                        ["pretraining", "fine-tuning"])
    assert written == [str(tmp_path / "plots" / "training_curves.png")] and os.path.getsize(written[0]) > 10000


def test_the_plotted_curve_of_a_run_started_again_is_its_last_attempt(tmp_path):
    """A log holding an attempt that stopped before its first checkpoint, then the run started again: the curve is
    the second attempt's (not: both attempts' updates 1-3 drawn as one zigzag)."""
    import json

    from utils.plot_logs import TRAIN_LOSS, read_log, series

    lines = [{"type": "LOG", "step": s, "data": {"loss": 9.0 - s}} for s in (1, 2, 3)]
    lines += [{"type": "LOG", "step": 0, "data": {"attempt": 2}}]
    lines += [{"type": "LOG", "step": s, "data": {"loss": 5.0 - s}} for s in (1, 2, 3, 4)]
    (tmp_path / "dllogger.json").write_text("".join("DLLL " + json.dumps(r) + "\n" for r in lines))
    assert series(read_log(str(tmp_path / "dllogger.json")), TRAIN_LOSS) == ([1, 2, 3, 4], [4.0, 3.0, 2.0, 1.0])
