"""A fine-tuning run resumes on another number of processes that keeps its global batch (a SLURM requeue onto
other nodes): 2 processes x 4 sequences (DDP, FSDP) resumed on 1 process x 4 x accumulation 2 or 1 x 8, and 1 x 8
resumed on 2 x 4, log the per-update losses of the uninterrupted run and end with its weights, to within the
reduction order's rounding (the same examples in each update; sums over other micro-batches and ranks): every
update's examples, the optimizer state, the schedule and the data position carry over. Dropout is off: a rank's
dropout stream cannot map onto other ranks. A resume that changes the global batch is one line naming
--allow_resume_change global_batch, and with it goes on, saying what the schedule and the data order do."""
import os
import shutil
import sys

import pytest
import torch

from tests.helpers.entry import run_entry
from tests.helpers.other_processes_runs import RUN_FLAGS, STEPS, STOPPED_AT
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
                           *argv])
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
    a = torch.load(os.path.join(a, "final_step.ckpt"), weights_only=True)
    b = torch.load(os.path.join(b, "final_step.ckpt"), weights_only=True)
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def _same_run(straight, resumed) -> tuple[float, float]:
    """The resumed run's losses and final weights beside the uninterrupted run's: (loss, weight) differences."""
    want, got = _losses(straight), _losses(resumed)
    assert sorted(want) == list(range(1, STEPS + 1)) and sorted(got) == sorted(want)
    assert all(got[s] == want[s] for s in range(1, STOPPED_AT + 1))  # written before the stop: the same lines
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


def test_pretraining_resumes_only_on_the_processes_that_wrote_it(tmp_path, inputs):
    """Pretraining's data position is each process's own (LDDL shards dealt to processes and loader workers): a
    checkpoint of 1 process x 4 resumed on 2 x 2 (the same global batch) is one line on each rank naming what works."""
    argv = inputs.pretraining_argv()[1:] + ["--max_steps", "2", "--save_checkpoint_steps", "1",
                                            "--output_dir", str(tmp_path / "out")]
    assert run_entry("pretrain.py", argv) == 0
    code, out = run_ranks([sys.executable, "-m", "utils.launch", "--nproc_per_node=2",
                           f"--master_port={free_port()}", "pretrain.py", *argv, "--max_steps", "3",
                           "--allow_resume_change", "max_steps", "--train_batch_size", "2",
                           "--resume_from_checkpoint", "True"])
    lines = [line for line in out.splitlines() if line.startswith("pretrain.py: error:")]
    checkpoint = tmp_path / "out" / "_step2.ckpt"
    assert code == 2 and lines and "Traceback" not in out, out[-3000:]
    assert lines[0] == (
        f"pretrain.py: error: {checkpoint} was written by 1 process and this run has 2: pretraining's data "
        f"position is each process's own (the LDDL shards and their shuffled windows are dealt to the processes and "
        f"their loader workers), so it resumes only on 1; resume with 1 process, or start a new run from its "
        f"weights with --init_checkpoint {checkpoint} (fine-tuning checkpoints resume on any number of processes "
        f"that keeps the global batch)"), lines
