"""A fine-tuning run resumes on another number of processes that keeps its global batch (a SLURM requeue onto
other nodes): 2 processes x 4 sequences (DDP, FSDP) resumed on 1 process x 4 x accumulation 2 or 1 x 8, and 1 x 8
resumed on 2 x 4, log the per-update losses of the uninterrupted run and end with its weights, to within the
reduction order's rounding (the same examples in each update; sums over other micro-batches and ranks): every
update's examples, the optimizer state, the schedule and the data position carry over. Dropout is off: a rank's
dropout stream cannot map onto other ranks. A resume that changes the global batch is one line naming
--allow_resume_change global_batch, and with it goes on, saying what the schedule and the data order do.

Pretraining alike: 2 processes x 2 (DDP, FSDP) resumed on 1 x 4 or 1 x 2 x accumulation 2, and 1 x 4 resumed on
2 x 2, read the streams (shards and windows) of the checkpoint's layout, so every update holds the samples it held
there: the per-update losses and final weights of the uninterrupted run of that layout. There, another global
batch is refused in one line even with --allow_resume_change global_batch."""
import os
import shutil
import sys

import pytest
import torch

from tests.helpers.entry import run_entry
from tests.helpers.other_processes_runs import (
    RUN_FLAGS,
    SIGNALLED_AT,
    STEPS,
    STOPPED_AT,
)
from tests.helpers.ports import free_port
from tests.helpers.processes import run_ranks
from tests.helpers.resume_runs import _as_killed_after

# reduction order: a sum over 8 sequences in one micro-batch, or over two of 4 on one process or two
LOSS_TOLERANCE, WEIGHT_TOLERANCE = 1e-5, 1e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory, inputs):
    base = tmp_path_factory.mktemp("other_processes")
    # 24 examples: an epoch of 3 updates of 8 sequences; the resume at update 2 is mid-epoch, and epoch 1 follows
    data = inputs.summaries(24, 4, 4)
    argv = ["--config_path", inputs.config(dropout=0.0), "--data_dir", data, "--tokenizer", inputs.tokenizer,
            "--from_scratch", "--learning_rate", "1e-3", "--max_source_length", "32", "--max_target_length", "16",
            "--n_val", "0", "--num_workers", "0", "--no_tensorboard", "--sortish_sampler"]
    assert run_entry("finetune.py", argv + RUN_FLAGS + ["--train_batch_size", "8", "--output_dir",
                                                        str(base / "one" / "straight")]) == 0
    code, out = run_ranks([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}", "-m", "tests.helpers.other_processes_runs", str(base),
                           "finetune.py", *argv, "--train_batch_size", "4"])
    assert code == 0, out[-6000:]
    return base, argv, out


def _resume_on_one(runs, capsys, written: str, name: str, flags: list[str]) -> tuple[int, str, str]:
    """``written``'s folder as killed after its checkpoint of update STOPPED_AT, resumed on 1 process with ``flags``."""
    base, argv, _ = runs
    folder = base / name
    shutil.rmtree(folder, ignore_errors=True)
    _as_killed_after(str(base / written), str(folder), STOPPED_AT)
    capsys.readouterr()
    code = run_entry("finetune.py", argv + RUN_FLAGS + ["--output_dir", str(folder)] + flags)
    said = capsys.readouterr()
    return code, said.out, said.err


def _losses(folder) -> dict:
    from bart.records.dllogger_compat import read_dllogger

    return {r["step"]: r["data"]["loss"] for r in read_dllogger(os.path.join(folder, "dllogger.json"))
            if r["type"] == "LOG" and isinstance(r["step"], int) and "loss" in r["data"]}


def _weights_apart(a, b) -> float:
    """The largest difference of the runs' final weights (fine-tuning's final_step.ckpt, or pretraining's last
    training checkpoint)."""
    final = "final_step.ckpt" if os.path.exists(os.path.join(a, "final_step.ckpt")) else f"_step{STEPS}.ckpt"
    a, b = (torch.load(os.path.join(folder, final), weights_only=True) for folder in (a, b))
    a, b = (state["model"] if "kind" in state else state for state in (a, b))
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def _same_run(straight, resumed, identical_until: int = STOPPED_AT) -> tuple[float, float]:
    """The resumed run's losses and final weights beside the uninterrupted run's: (loss, weight) differences."""
    want, got = _losses(straight), _losses(resumed)
    assert sorted(want) == list(range(1, STEPS + 1)) and sorted(got) == sorted(want)
    assert all(got[s] == want[s] for s in range(1, identical_until + 1))  # written before the stop: the same lines
    apart = max(abs(got[s] - want[s]) for s in want)
    print(f"losses {straight} vs {resumed}: " + ", ".join(f"{s}: {want[s]:.7f} {got[s]:.7f}" for s in sorted(want)))
    weights = _weights_apart(straight, resumed)
    assert apart <= LOSS_TOLERANCE and weights <= WEIGHT_TOLERANCE, (apart, weights)
    return apart, weights


def test_the_global_order_makes_one_and_two_processes_train_alike(runs):
    """The uninterrupted runs on 1 process x 8 and on 2 x 4 (DDP, FSDP): the same updates."""
    base, _, _ = runs
    for strategy in ("ddp", "fsdp"):
        _same_run(base / "one" / "straight", base / strategy / "straight")


@pytest.mark.parametrize("strategy, shape, flags", [
    ("ddp", "4x2", ["--train_batch_size", "4", "--gradient_accumulation_steps", "2"]),
    ("ddp", "8", ["--train_batch_size", "8"]),
    ("fsdp", "8", ["--train_batch_size", "8", "--distributed_strategy", "fsdp"]),
])
def test_two_processes_resume_on_one(runs, capsys, strategy, shape, flags):
    base, _, _ = runs
    folder = base / f"{strategy}_on_one_{shape}"
    code, out, err = _resume_on_one(runs, capsys, f"{strategy}/straight", folder.name, flags)
    assert code == 0, err[-3000:]
    changed = "train_batch_size 4 -> 8" if shape == "8" else "gradient_accumulation_steps 1 -> 2"
    assert (f"[checkpoint] resuming {folder / f'_step{STOPPED_AT}.ckpt'}, written by 2 processes, on 1: processes "
            f"2 -> 1, {changed}; the data position (epoch 0, 16 examples in) carries over: the same next examples in "
            f"the same order; the global batch, schedule, optimizer state (full tensors) and loss scale too; random "
            f"streams: rank 0 keeps its own, those of rank 1 are dropped") in out, out[-3000:]
    _same_run(base / strategy / "straight", folder)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_one_process_resumes_on_two(runs, strategy):
    """FSDP: the checkpoint's full optimizer state sharded over the two processes."""
    base, _, out = runs
    folder = base / f"from_one_{strategy}"
    assert (f"[checkpoint] resuming {folder / f'_step{STOPPED_AT}.ckpt'}, written by 1 process, on 2: processes "
            f"1 -> 2, train_batch_size 8 -> 4; the data position (epoch 0, 16 examples in) carries over: the same next "
            f"examples in the same order; the global batch, schedule, optimizer state (full tensors"
            f"{', resharded' if strategy == 'fsdp' else ''}) and loss scale too; random streams: rank 0 keeps its own, "
            f"rank 1 starts from seeds of (--seed, update {STOPPED_AT}, rank)") in out, out[-3000:]
    _same_run(base / "one" / "straight", folder)


def test_a_change_of_the_global_batch_is_one_line_and_allowed_by_name(runs, capsys):
    base, _, _ = runs
    code, _, err = _resume_on_one(runs, capsys, "ddp/straight", "smaller", ["--train_batch_size", "4"])
    lines = [line for line in err.splitlines() if line.startswith("finetune.py:")]
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert ("global_batch: 8 sequences in the checkpoint, 4 sequences now (processes x --train_batch_size x "
            "--gradient_accumulation_steps) (--allow_resume_change global_batch resumes with the change)") in lines[0]
    code, out, err = _resume_on_one(runs, capsys, "ddp/straight", "smaller",
                                    ["--train_batch_size", "4", "--allow_resume_change", "global_batch"])
    assert code == 0, err[-3000:]
    assert ("with global_batch 4 sequences instead of the checkpoint's 8 sequences, as --allow_resume_change "
            "global_batch asks: the learning-rate schedule goes on by updates") in err, err[-3000:]
    assert sorted(_losses(base / "smaller")) == list(range(1, STEPS + 1))


# pretraining: 1 process x 4 sequences and 2 x 2 deal the shards to other streams (their straight runs differ); each
# resumes on the other layout and reads its checkpoint's streams. Shards of 8 and 9 rows, a sample each: the runs
# of 6 updates cross an epoch's end, where batches are short (update 5 of 1 x 4 holds 1 sample: on 2 x 2 one
# process has none, a filler row) and the streams of 2 x 2 end apart (their epochs too)
PRETRAINING_ROWS = (8, 9)


@pytest.fixture(scope="module")
def pretraining_runs(tmp_path_factory, inputs):
    base = tmp_path_factory.mktemp("pretraining_other_processes")
    argv = inputs.pretraining_argv(PRETRAINING_ROWS, dropout=0.0)[1:] + ["--no_tensorboard"]
    assert run_entry("pretrain.py", argv + RUN_FLAGS + ["--output_dir", str(base / "one" / "straight")]) == 0
    code, out = run_ranks([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}", "-m", "tests.helpers.other_processes_runs", str(base),
                           "pretrain.py", *argv, "--train_batch_size", "2"])
    assert code == 0, out[-6000:]
    return base, argv, out


def _pretraining_on_one(runs, capsys, name: str, flags: list[str]) -> tuple[int, str, str]:
    """``ddp/straight`` (2 x 2) as killed after its checkpoint of update STOPPED_AT, resumed on 1 process."""
    base, argv, _ = runs
    folder = base / name
    shutil.rmtree(folder, ignore_errors=True)
    _as_killed_after(str(base / "ddp" / "straight"), str(folder), STOPPED_AT)
    capsys.readouterr()
    code = run_entry("pretrain.py", argv + RUN_FLAGS + ["--output_dir", str(folder)] + flags)
    said = capsys.readouterr()
    return code, said.out, said.err


def _loss_table(columns: dict) -> str:
    """Per-update losses, one column per run."""
    losses = {name: _losses(folder) for name, folder in columns.items()}
    lines = ["update | " + " | ".join(columns)]
    for step in range(1, STEPS + 1):
        lines.append(f"{step:6d} | " + " | ".join(f"{losses[name].get(step, float('nan')):.7f}" for name in columns))
    return "\n".join(lines)


def test_pretraining_runs_of_one_and_two_processes_differ_and_ddp_and_fsdp_alike(pretraining_runs):
    """Their streams differ (the shards dealt to 1 or 2 processes): each layout has its own uninterrupted run."""
    base, _, _ = pretraining_runs
    assert _losses(base / "one" / "straight") != _losses(base / "ddp" / "straight")
    _same_run(base / "ddp" / "straight", base / "fsdp" / "straight")


@pytest.mark.parametrize("strategy, shape, flags", [
    ("ddp", "4", ["--train_batch_size", "4"]),
    ("ddp", "2x2", ["--train_batch_size", "2", "--gradient_accumulation_steps", "2"]),
    ("fsdp", "4", ["--train_batch_size", "4", "--distributed_strategy", "fsdp"]),
])
def test_pretraining_resumes_from_two_processes_on_one(pretraining_runs, capsys, strategy, shape, flags):
    """2 x 2 (DDP, FSDP) resumed on 1 x 4 or 1 x 2 x accumulation 2: the one process reads both processes'
    streams, each update the samples it held on two; the losses and weights of the uninterrupted run."""
    base, _, _ = pretraining_runs
    name = f"{strategy}_on_one_{shape}"
    code, out, err = _pretraining_on_one(pretraining_runs, capsys, name, flags)
    assert code == 0, err[-3000:]
    checkpoint = base / name / f"_step{STOPPED_AT}.ckpt"
    changed = "train_batch_size 2 -> 4" if shape == "4" else "gradient_accumulation_steps 1 -> 2"
    assert (f"[checkpoint] resuming {checkpoint}, written by 2 processes, on 1: processes 2 -> 1, {changed}; the data "
            f"position carries over in the streams of the checkpoint's layout (2 processes x 1 loader worker(s) x "
            f"--train_batch_size 2 x --gradient_accumulation_steps 1): every update holds the samples it held there; "
            f"rank 0 reads 2 of its streams in the main process (--num_workers 0); the global batch, schedule, "
            f"optimizer state (full tensors) and loss scale too; random streams: rank 0 keeps its own, those of rank "
            f"1 are dropped") in out, out[-3000:]
    print(_loss_table({"straight 2x2": base / strategy / "straight", f"resumed 1x{shape}": base / name}))
    _same_run(base / strategy / "straight", base / name)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_pretraining_resumes_from_one_process_on_two(pretraining_runs, strategy):
    """1 x 4 resumed on 2 x 2: both processes read the one process's stream, each keeps its half of every batch."""
    base, _, out = pretraining_runs
    folder = base / f"from_one_{strategy}"
    assert (f"[checkpoint] resuming {folder / f'_step{STOPPED_AT}.ckpt'}, written by 1 process, on 2: processes 1 -> "
            f"2, train_batch_size 4 -> 2; the data position carries over in the streams of the checkpoint's layout "
            f"(1 process x 1 loader worker(s) x --train_batch_size 4 x --gradient_accumulation_steps 1): every update "
            f"holds the samples it held there; rank 0 reads 1 of its streams in the main process (--num_workers 0)"
            ) in out, out[-3000:]
    print(_loss_table({"straight 1x4": base / "one" / "straight", f"resumed 2x2 {strategy}": folder}))
    _same_run(base / "one" / "straight", folder)


def test_pretraining_resumes_on_its_own_processes_where_their_epochs_differ(pretraining_runs):
    """2 x 2 stopped after update 5, where one process's stream (8 samples) has run out and it has begun epoch 1
    while the other's (9) gave its last batch of epoch 0: each stream goes on in its own epoch, the losses of the
    uninterrupted run."""
    base, _, out = pretraining_runs
    folder = base / "ddp" / "stopped"
    state = torch.load(folder / f"_step{SIGNALLED_AT}.ckpt", weights_only=True)
    assert sorted(p["epoch"] for p in state["data_position"]) == [0, 1]
    assert (f"[checkpoint] resuming {folder / f'_step{SIGNALLED_AT}.ckpt'}, written by 2 processes, on 2: the same "
            f"processes, batch size and accumulation; the data position carries over in the streams of the "
            f"checkpoint's layout (2 processes x 1 loader worker(s) x --train_batch_size 2 x "
            f"--gradient_accumulation_steps 1)") in out, out[-3000:]
    print(_loss_table({"straight 2x2": base / "ddp" / "straight", "stopped at 5, resumed 2x2": folder}))
    _same_run(base / "ddp" / "straight", folder, identical_until=SIGNALLED_AT)


def test_pretraining_resume_with_another_global_batch_is_one_line(pretraining_runs, capsys):
    """Its streams are dealt in updates of the checkpoint's global batch: another one is refused, with
    --allow_resume_change global_batch too, naming --init_checkpoint."""
    base, _, _ = pretraining_runs
    code, _, err = _pretraining_on_one(pretraining_runs, capsys, "smaller", ["--train_batch_size", "2"])
    lines = [line for line in err.splitlines() if line.startswith("pretrain.py:")]
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert ("global_batch: 4 sequences in the checkpoint, 2 sequences now (processes x --train_batch_size x "
            "--gradient_accumulation_steps) (--allow_resume_change global_batch resumes with the change)") in lines[0]
    code, _, err = _pretraining_on_one(pretraining_runs, capsys, "smaller",
                                       ["--train_batch_size", "2", "--allow_resume_change", "global_batch"])
    lines = [line for line in err.splitlines() if line.startswith("pretrain.py:")]
    checkpoint = base / "smaller" / f"_step{STOPPED_AT}.ckpt"
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0] == (
        f"pretrain.py: error: {checkpoint}: the saved data position does not fit this run's updates (processes 2 → 1): "
        f"pretraining's streams are dealt in updates of 4 sequences (2 processes x --train_batch_size 2 x "
        f"--gradient_accumulation_steps 1), this run's hold 2; resume with updates of 4 (any processes x "
        f"--train_batch_size x --gradient_accumulation_steps), or start a new run from its weights with "
        f"--init_checkpoint {checkpoint}"), lines


def test_a_pretraining_position_without_its_streams_resumes_only_on_its_layout(pretraining_runs, tmp_path, capsys):
    """A checkpoint whose data position does not name its streams' layout (as positions were written before they
    did): on its own layout it resumes as ever (the same losses); on another it is one line naming what works."""
    base, argv, _ = pretraining_runs
    for name in ("same", "other"):
        folder = tmp_path / name
        _as_killed_after(str(base / "one" / "straight"), str(folder), STOPPED_AT)
        path = folder / f"_step{STOPPED_AT}.ckpt"
        state = torch.load(path, weights_only=True)
        for position in state["data_position"]:
            del position["streams"]
        torch.save(state, path)
    assert run_entry("pretrain.py", argv + RUN_FLAGS + ["--output_dir", str(tmp_path / "same")]) == 0
    assert _losses(tmp_path / "same") == _losses(base / "one" / "straight")
    capsys.readouterr()
    code = run_entry("pretrain.py", argv + RUN_FLAGS + ["--output_dir", str(tmp_path / "other"), "--train_batch_size",
                                                        "2", "--gradient_accumulation_steps", "2"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("pretrain.py:")]
    checkpoint = tmp_path / "other" / f"_step{STOPPED_AT}.ckpt"
    assert code == 2 and lines == [
        f"pretrain.py: error: {checkpoint}: its data position does not name the layout of its streams, so it resumes "
        f"only on its own: 1 process x --train_batch_size 4 x 1 loader worker(s); resume so, or start a new run from "
        f"its weights with --init_checkpoint {checkpoint}"], err[-3000:]
