"""Fine-tuning runs that stop and resume, beside the uninterrupted run they must reproduce
(tests/training/test_exact_resume.py).

    torchrun --nproc_per_node 2 -m tests.helpers.resume_runs OUT_BASE ddp,fsdp [finetune.py flags]

For each strategy (``one``: one process, run in the caller's process by :func:`run_cases`), in OUT_BASE/STRATEGY:
``straight`` (the uninterrupted run, its periodic checkpoints at updates 3 and 6) and one folder per case of
``CASES``, each ended the way its name says and then resumed by the same command with ``--resume_from_checkpoint
auto``. The flags must make an epoch of 6 updates and 8 updates in all (checkpoints every 3, validation every 4).

- ``mid_epoch`` / ``epoch_boundary``: stopped right after the periodic checkpoint of update 3 / 6 (as a process
  killed then: ``straight``'s folder as it was at that moment, nothing newer);
- ``sigterm``: SIGTERM to rank 0 after update 5 (exit 75, the checkpoint of update 5);
- ``sigterm_in_validation``: SIGTERM to rank 0 after the first generation batch of the validation of update 4
  (abandoned, exit 75; the resumed run validates update 4 first).

The signals are real (``os.kill`` of the process itself, taken by the run's ``StopRequest``); the hooks wrap
``Trainer._one_update``, ``Trainer._evaluate`` and the model's ``generate`` here (the product has no fault
injection point). Under torchrun all runs share one launch: each ``finetune.py`` run builds its process group
again, as a new launch would.
"""
import contextlib
import os
import re
import shutil
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

STEPS, EVERY, VALIDATE_EVERY = 8, 3, 4
CASES = ("mid_epoch", "epoch_boundary", "sigterm", "sigterm_in_validation")
STOPPED_AT = {"mid_epoch": 3, "epoch_boundary": 6, "sigterm": 5, "sigterm_in_validation": 4}
RUN_FLAGS = ["--max_steps", str(STEPS), "--save_checkpoint_steps", str(EVERY), "--val_check_interval",
             str(VALIDATE_EVERY), "--log_freq", "1", "--keep_checkpoints", "0", "--resume_from_checkpoint", "auto"]


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _sigterm(why: str) -> None:
    print(f"resume_runs: rank 0 sends itself SIGTERM {why}", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def _patched(owner, name, make):
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def sigterm_after_update(step: int):
    from bart.training.trainer import Trainer

    def make(update):
        def one_update(self, *args, **kwargs):
            logged = update(self, *args, **kwargs)
            if self.step == step and self.rank == 0:
                _sigterm(f"after update {step}")
            return logged
        return one_update
    with _patched(Trainer, "_one_update", make):
        yield


@contextlib.contextmanager
def sigterm_in_validation(step: int):
    """SIGTERM once the validation of update ``step`` has generated its first batch."""
    from bart.modeling import BartForConditionalGeneration
    from bart.training.trainer import Trainer

    armed = {"on": False}

    def make_evaluate(evaluate):
        def _evaluate(self):
            armed["on"] = self.global_step == step and self.rank == 0
            try:
                return evaluate(self)
            finally:
                armed["on"] = False
        return _evaluate

    def make_generate(generate):
        def generate_then_stop(self, *args, **kwargs):
            out = generate(self, *args, **kwargs)
            if armed["on"]:
                armed["on"] = False
                _sigterm(f"during the validation of update {step}")
            return out
        return generate_then_stop
    with _patched(Trainer, "_evaluate", make_evaluate), \
            _patched(BartForConditionalGeneration, "generate", make_generate):
        yield


def _as_killed_after(straight: str, folder: str, step: int) -> None:
    """``folder``: ``straight``'s folder as a process killed right after its checkpoint of ``step`` left it."""
    shutil.copytree(straight, folder)
    for name in os.listdir(folder):
        found = re.search(r"step(\d+)\.ckpt$", name)
        if name == "final_step.ckpt" or (found and int(found.group(1)) > step) or name == "run.lock":
            os.remove(os.path.join(folder, name))


def run_cases(base: str, argv: list[str], run, barrier=lambda: None) -> dict:
    """Every run of one strategy under ``base``: ``run(argv)`` runs finetune.py and returns its exit code. The
    folders by name (``straight`` and ``CASES``)."""
    folders = {name: os.path.join(base, name) for name in ("straight", *CASES)}

    def finetune(name, expected=0):
        code = run(argv + RUN_FLAGS + ["--output_dir", folders[name]])
        assert code == expected, f"{name}: exit {code}, expected {expected}"

    finetune("straight")
    for name in ("mid_epoch", "epoch_boundary"):
        if _rank() == 0:
            _as_killed_after(folders["straight"], folders[name], STOPPED_AT[name])
        barrier()
        finetune(name)
    for name, stop in (("sigterm", sigterm_after_update), ("sigterm_in_validation", sigterm_in_validation)):
        with stop(STOPPED_AT[name]):
            finetune(name, expected=75)
        finetune(name)
    return folders


def main() -> None:
    from bart.runtime import distributed as dist_utils
    from tests.helpers.entry import run_entry

    base, strategies, argv = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]

    def barrier():
        env = dist_utils.init_distributed()  # a process group of the helper's own, for its copies
        dist_utils.cleanup()
        return env

    for strategy in strategies:
        run_cases(os.path.join(base, strategy), argv + ["--distributed_strategy", strategy],
                  lambda args: run_entry("finetune.py", args), barrier)


if __name__ == "__main__":
    main()
