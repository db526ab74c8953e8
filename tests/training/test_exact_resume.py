"""Fine-tuning with dropout resumes exactly: a run stopped after a periodic checkpoint (mid-epoch, at an epoch
boundary), by SIGTERM between updates or during a validation, and resumed with ``--resume_from_checkpoint auto``
logs the per-update losses and validation metrics of the uninterrupted run and ends with its weights, bit for
bit: one process, DDP and FSDP (2 gloo processes, one launch; tests/helpers/resume_runs.py runs the cases).
Dropout is on (0.1): a random stream a checkpoint loses shows in every later loss (with dropout 0 it would
not). Rules out: every loss after the resume differed (the fine-tuning DataLoader took its iterator's seed from
torch's global generator, the dropout stream, once more in the resumed run than in the uninterrupted one)."""
import os
import sys

import pytest
import torch

from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry
from tests.helpers.ports import free_port
from tests.helpers.processes import run_ranks
from tests.helpers.resume_runs import CASES, STEPS, STOPPED_AT, run_cases

# the config: micro_config(do_sample=True) (validation samples: it draws from torch's generator too)
assert micro_config(do_sample=True)["dropout"] == 0.1, "a lost random stream is invisible without dropout"


@pytest.fixture(scope="module")
def job(tmp_path_factory, inputs):
    """The runs' folder and the flags they share."""
    base = tmp_path_factory.mktemp("exact_resume")
    # 24 examples: an epoch of 6 updates (4 sequences each); validation: 8 examples in 2 batches per process (BLEU:
    # scored in milliseconds, ROUGE's bootstrap takes a second)
    data = inputs.summaries(24, 8, 4)
    argv = ["--config_path", inputs.config(do_sample=True), "--data_dir", data, "--tokenizer", inputs.tokenizer,
            "--from_scratch", "--learning_rate", "1e-3", "--max_source_length", "32", "--max_target_length", "16",
            "--n_val", "8", "--eval_batch_size", "2", "--eval_beams", "1", "--eval_max_gen_length", "8",
            "--task", "translation", "--num_sanity_val_steps", "0", "--num_workers", "0", "--no_tensorboard"]
    return base, argv


@pytest.fixture(scope="module")
def one_process(job):
    base, argv = job
    return run_cases(str(base / "one"), argv + ["--train_batch_size", "4"], lambda args: run_entry("finetune.py", args))


@pytest.fixture(scope="module")
def two_processes(job):
    """DDP and FSDP, two gloo processes each, in one launch."""
    base, argv = job
    # watched: a hang (one between two runs: tests/runtime/test_distributed_teardown.py) fails within a minute with every rank's stacks
    code, out = run_ranks([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}", "-m", "tests.helpers.resume_runs", str(base / "two"),
                           "ddp,fsdp", *argv, "--train_batch_size", "2"])
    assert code == 0, out[-6000:]
    return {strategy: {name: str(base / "two" / strategy / name) for name in ("straight", *CASES)}
            for strategy in ("ddp", "fsdp")}


def _logged(folder: str) -> dict:
    """{step: {name: value}} of the losses and validation metrics a run's dllogger.json holds."""
    from bart.records.dllogger_compat import read_dllogger

    logged = {}
    for record in read_dllogger(os.path.join(folder, "dllogger.json")):
        if record["type"] == "LOG" and isinstance(record["step"], int):
            values = {k: v for k, v in record["data"].items()  # val_gen_time: the machine's seconds, not the run's
                      if k == "loss" or (k.startswith("val_") and k != "val_gen_time")}
            logged.setdefault(record["step"], {}).update(values)
    return {step: values for step, values in logged.items() if values}


def _same_run(straight: str, resumed: str, case: str) -> None:
    want, got = _logged(straight), _logged(resumed)
    assert [s for s in want if "loss" in want[s]] == list(range(1, STEPS + 1))
    assert any("val_bleu" in values for values in want.values())
    after = {s: v for s, v in want.items() if s > STOPPED_AT[case]}
    assert {s: got.get(s) for s in after} == after  # every update after the resume, and each validation
    assert got == want
    a = torch.load(os.path.join(straight, "final_step.ckpt"), weights_only=True)
    b = torch.load(os.path.join(resumed, "final_step.ckpt"), weights_only=True)
    assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []


@pytest.mark.parametrize("case", CASES)
def test_one_process_resumes_to_the_uninterrupted_losses(one_process, case):
    _same_run(one_process["straight"], one_process[case], case)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.parametrize("case", CASES)
def test_two_processes_resume_to_the_uninterrupted_losses(two_processes, strategy, case):
    _same_run(two_processes[strategy]["straight"], two_processes[strategy][case], case)
