"""An entry script (pretrain.py, finetune.py) run as ``__main__`` with one injected fault: a rank killed
mid-run on torchrun's first attempt only, so that ``torchrun --max_restarts 1`` restarts the job.

    torchrun --nproc_per_node 2 --max_restarts 1 -m tests.helpers.restart_driver finetune.py [its flags]

Environment: ``BART_TEST_KILL_AFTER_STEP`` N (unset: no fault, the script as it is): after update N (its checkpoint, if one is due,
already written) rank ``BART_TEST_KILL_RANK`` (default 1) sends itself SIGKILL, as a killed process dies:
no cleanup, no exit handler. Only while ``TORCHELASTIC_RESTART_COUNT`` is 0: the restarted attempt runs
through. The product has no fault-injection point; the hook wraps ``Trainer._one_update`` here.

``BART_TEST_BUSY_AFTER_STEP`` N with ``BART_TEST_BUSY_S`` S: after update N, rank ``BART_TEST_KILL_RANK`` (default 1)
computes in pure Python for S seconds (a long compile or checkpoint write: the main thread holds the interpreter
but is not hung), every attempt.
"""
import os
import runpy
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def install_kill_hook(after_step: int, rank: int) -> None:
    from bart.training.trainer import Trainer

    update = Trainer._one_update

    def one_update_then_die(self, *args, **kwargs):
        logged = update(self, *args, **kwargs)
        if self.step == after_step and self.rank == rank:
            print(f"restart_driver: rank {rank} killed after update {after_step} (attempt 0)", flush=True)
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return logged

    Trainer._one_update = one_update_then_die


def install_busy_hook(after_step: int, rank: int, seconds: float) -> None:
    import time

    from bart.training.trainer import Trainer

    update = Trainer._one_update

    def one_update_then_busy(self, *args, **kwargs):
        logged = update(self, *args, **kwargs)
        if self.step == after_step and self.rank == rank:
            print(f"restart_driver: rank {rank} busy for {seconds:g} s after update {after_step}", flush=True)
            end, spins = time.monotonic() + seconds, 0
            while time.monotonic() < end:
                spins += sum(i * i for i in range(1000))
        return logged

    Trainer._one_update = one_update_then_busy


def main() -> None:
    script, argv = sys.argv[1], sys.argv[2:]
    if os.environ.get("BART_TEST_KILL_AFTER_STEP") and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        install_kill_hook(int(os.environ["BART_TEST_KILL_AFTER_STEP"]), int(os.environ.get("BART_TEST_KILL_RANK", "1")))
    if os.environ.get("BART_TEST_BUSY_AFTER_STEP"):
        install_busy_hook(int(os.environ["BART_TEST_BUSY_AFTER_STEP"]), int(os.environ.get("BART_TEST_KILL_RANK", "1")),
                          float(os.environ["BART_TEST_BUSY_S"]))
    path = os.path.join(ROOT, script)
    sys.argv = [path, *argv]
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()
