"""Runs one after another in one pair of processes, each building its process group and ending it
(``bart.runtime.distributed.cleanup``) as a new launch would (tests/runtime/test_distributed_teardown.py):

    torchrun --nproc_per_node 2 -m tests.helpers.repeated_runs OUT_BASE ROUNDS SHORT [finetune.py flags]

- ROUNDS rounds of one DDP and one FSDP fine-tuning run (in OUT_BASE/ROUND_STRATEGY), each through
  ``bart.cli.exits.run_entry`` as notebooks, the configuration matrix and the tests run them;
- SHORT short DDP runs: the recipe's process group and DDP wrapper (``DDPStrategy``) round a one-layer model, one
  update, an ``all_gather_objects`` (as a checkpoint's), ``cleanup()``, and only then the wrapper freed (as a
  caller holding the trainer frees it): the order in which a group that outlives its destruction in the Reducer deadlocks within a few runs.

After each fine-tuning run a garbage collection, as the interpreter may start one at any moment: the run's trainer
and model wrapper (a reference cycle with the validation) are freed then, milliseconds after the run ended its
group, while gloo's workers may still be releasing the last collective's tensors.

Each rank prints one line per run that ended (``repeated_runs: rank R: run N (KIND) ended, exit 0``), and a last one
after all of them.
"""
import gc
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

STRATEGIES = ("ddp", "fsdp")


def short_ddp_run(run: int) -> int:
    import torch

    from bart.runtime import distributed as dist_utils
    from bart.training.strategy import build_strategy

    env = dist_utils.init_distributed()
    torch.manual_seed(run)
    model = torch.nn.Linear(8, 8)
    wrapper = build_strategy("ddp", env.world_size, torch.device("cpu")).wrap(model, model)
    wrapper(torch.randn(4, 8)).sum().backward()
    dist_utils.all_gather_objects({"rank": env.rank, "run": run})
    dist_utils.cleanup()
    del wrapper  # the Reducer goes after the group's end (not: destroyed it holding the GIL)
    return 0


def main() -> None:
    from bart.cli.exits import run_entry

    base, rounds, short, argv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    rank, runs = os.environ.get("RANK", "0"), 0

    def say(line: str) -> None:  # one write: the ranks share the output (unbuffered, print writes its newline apart)
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), f"{line}\n".encode())

    def ended(kind: str, code: int) -> None:
        nonlocal runs
        runs += 1
        say(f"repeated_runs: rank {rank}: run {runs} ({kind}) ended, exit {code}")
        if code != 0:
            sys.exit(code)

    for round_ in range(rounds):
        for strategy in STRATEGIES:
            folder = os.path.join(base, f"{round_}_{strategy}")
            code = run_entry("finetune.py", [*argv, "--distributed_strategy", strategy, "--output_dir", folder])
            gc.collect()
            ended(strategy, code)
    for run in range(short):
        ended("short ddp", short_ddp_run(run))
    say(f"repeated_runs: rank {rank}: all {runs} runs ended")


if __name__ == "__main__":
    main()
