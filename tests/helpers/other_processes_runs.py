"""Training runs that resume on another number of processes (tests/training/test_resume_other_processes.py).

    torchrun --nproc_per_node 2 -m tests.helpers.other_processes_runs BASE SCRIPT [SCRIPT's flags]

SCRIPT: finetune.py or pretrain.py. In BASE, each a run of ``STEPS`` updates with a checkpoint every ``EVERY``, on 2
processes with the flags given (their --train_batch_size): ``ddp/straight`` and ``fsdp/straight`` (uninterrupted),
and ``from_one_ddp`` / ``from_one_fsdp``: ``one/straight`` (1 process with the same global batch, written by the test
before this launch) as a process killed right after its checkpoint of update ``STOPPED_AT`` left it, resumed here
with ``--resume_from_checkpoint auto`` under that strategy. pretrain.py also: ``ddp/stopped``, stopped by SIGTERM
to rank 0 after update ``SIGNALLED_AT`` (exit 75) and resumed on the same processes. Under torchrun all runs share
one launch: each run builds its process group again, as a new launch would.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

STEPS, EVERY, STOPPED_AT, SIGNALLED_AT = 6, 2, 2, 5
RUN_FLAGS = ["--max_steps", str(STEPS), "--save_checkpoint_steps", str(EVERY), "--log_freq", "1",
             "--keep_checkpoints", "0", "--resume_from_checkpoint", "auto"]


def main() -> None:
    from bart.runtime import distributed as dist_utils
    from tests.helpers.entry import run_entry
    from tests.helpers.resume_runs import _as_killed_after, sigterm_after_update

    base, script, argv = sys.argv[1], sys.argv[2], sys.argv[3:] + RUN_FLAGS
    for strategy in ("ddp", "fsdp"):
        code = run_entry(script, argv + ["--distributed_strategy", strategy, "--output_dir",
                                                os.path.join(base, strategy, "straight")])
        assert code == 0, f"{strategy}: exit {code}"
    for strategy in ("ddp", "fsdp"):
        folder = os.path.join(base, f"from_one_{strategy}")
        if int(os.environ.get("RANK", "0")) == 0:
            _as_killed_after(os.path.join(base, "one", "straight"), folder, STOPPED_AT)
        dist_utils.init_distributed()  # a process group of the helper's own: the copy is there before a rank reads it
        dist_utils.cleanup()
        code = run_entry(script, argv + ["--distributed_strategy", strategy, "--output_dir", folder])
        assert code == 0, f"from_one_{strategy}: exit {code}"
    if script == "pretrain.py":
        stopped = argv + ["--output_dir", os.path.join(base, "ddp", "stopped")]
        with sigterm_after_update(SIGNALLED_AT):
            assert run_entry(script, stopped) == 75
        assert run_entry(script, stopped) == 0


if __name__ == "__main__":
    main()
