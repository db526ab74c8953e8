"""torchrun with stop signals that keep their promise: ``python -m utils.launch [torchrun's flags] SCRIPT ARGS``
(what the shell scripts launch; the flags are torchrun's own, ``torch.distributed.run``).

torchrun alone, on SIGTERM or Ctrl-C, passes the signal to its workers, waits for them, then ends with exit
code 1 and a ``SignalException`` traceback whatever the workers did, so a SLURM script cannot tell a
checkpointed stop (75: requeue) from a crash; and a second Ctrl-C raises in the middle of that wait,
abandoning the workers in their checkpoint write without passing it on. Here:

- the first stop signal goes to the workers as torchrun sends it (they finish their update, write a
  checkpoint and exit 75), and they are waited for (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds, then killed);
- every later one is passed on to them as well (a second Ctrl-C stops them at once: 130), and the wait goes on;
- the launcher ends with the workers' exit code and one line: 75 (checkpoint written), 130 (stopped at once),
  or, when a worker failed by itself, the first failure's code (4 for a hung rank, 2, 3, ...), never a
  traceback of torchrun's.

And three cluster faults are named instead of met again or buried:

- a worker that ends with exit code 2 (a user error: a bad flag, file or value) is not restarted whatever
  ``--max_restarts`` says: the same command would meet the same error (torchrun alone spends a restart on it
  and prints it again);
- a rendezvous port already taken (two jobs on one node with the same ``--master_port``, a port another
  program holds) is one line naming the port and the fix, exit code 2, instead of torchrun's TCPStore traceback;
- a worker that is stopped (SIGSTOP; :mod:`bart.runtime.heartbeat` names it) when torchrun closes the job is
  killed at once if a worker failed (torchrun alone waits 30 s for it), or woken (SIGCONT) after a stop signal
  so that it takes the signal and writes its checkpoint.
"""
from __future__ import annotations

import os
import shlex
import signal
import sys
import time

ME = "launch"
EXIT_USER_ERROR = 2  # bart.errors.EXIT_USER_ERROR: the same command meets the same error, never restarted
_MEANING = {75: "{written}: to {go_on}, run {resume}",
            130: "stopped at once (Ctrl-C again), {written}: to {go_on}, run {resume}"}
_RESUME_FLAG, _OVERWRITE_FLAG = "--resume_from_checkpoint", "--overwrite_output_dir"


def _checkpoint_written(argv: list[str], since: float) -> tuple[str, str]:
    """(what the job left to resume from, what the command does): the newest training checkpoint in its folder,
    written by this job (modified since ``since``) or before it, or none."""
    from bart.cli.exits import flag_value
    from bart.training.checkpoint import latest_checkpoint  # the one a resume takes

    newest = latest_checkpoint(flag_value(argv, "--output_dir") or "results")  # the training scripts' default
    if newest is None:
        return "no checkpoint was written (it stopped before the first)", "start the run again"
    if os.path.getmtime(newest) >= since:
        return f"a checkpoint was written ({os.path.basename(newest)})", "resume"
    return (f"no new checkpoint was written (the newest is {os.path.basename(newest)}, from before)",
            "resume from it")


def resume_command(argv: list[str]) -> str:
    """The command that resumes this job: this one with ``--resume_from_checkpoint auto`` (in place of any
    resume flag, and of ``--overwrite_output_dir``, which would start over); the same command alone would be
    refused, as a new run into a folder that holds a run."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == _RESUME_FLAG:
            skip = True
        elif not arg.startswith(_RESUME_FLAG + "=") and arg != _OVERWRITE_FLAG:
            kept.append(arg)
    return shlex.join([os.path.basename(sys.executable) or "python3", "-m", "utils.launch", *kept, _RESUME_FLAG, "auto"])


def _meaning(code: int, argv: list[str], since: float = 0.0) -> str | None:
    if code not in _MEANING:
        return None
    written, go_on = _checkpoint_written(argv, since)
    return _MEANING[code].format(written=written, go_on=go_on, resume=resume_command(argv))


def _job_code(codes: list[int], sig: signal.Signals) -> int:
    """One exit code for the job from its workers' codes after a stop signal: a worker killed (it did not stop
    in time) or stopped at once decides; else the code the workers stopped with."""
    killed = [-c for c in codes if c is not None and c < 0]
    if killed:
        return 128 + killed[0]
    if 130 in codes:
        return 130
    done = [c for c in codes if c]
    if not codes:
        return 128 + int(sig)  # stopped before any worker ran
    return max(set(done), key=done.count) if done else 0


def _said(sig: signal.Signals, codes: list[int], code: int, argv: list[str], since: float = 0.0) -> str:
    shown = ", ".join(str(c) for c in codes) or "none started"
    if code > 128 and any(c is not None and c < 0 for c in codes):
        why = (f"a process did not stop within TORCH_ELASTIC_SHUTDOWN_TIMEOUT "
               f"({os.environ.get('TORCH_ELASTIC_SHUTDOWN_TIMEOUT', '30')} s) and was killed")
    else:
        why = _meaning(code, argv, since) or "see the processes' lines above"
    return f"{ME}: {sig.name} received: the processes stopped (exit codes {shown}): {why}"


def main(argv=None) -> int:
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    contexts, codes, first, spared = [], {}, [], []
    argv = sys.argv[1:] if argv is None else list(argv)
    since = time.time()  # a checkpoint modified since was written by this job

    def handler(signum, frame) -> None:
        sig = signal.Signals(signum)
        if not first:  # torchrun's own path: the signal to every worker, then the wait
            first.append(sig)
            raise api.SignalException(f"Process {os.getpid()} got signal: {sig}", sigval=sig)
        for context in contexts[-1:]:  # a later one: to the workers too, instead of abandoning them
            for pid in context.pids().values():
                try:
                    os.killpg(pid, sig)  # each worker leads its own process group (start_new_session)
                except (ProcessLookupError, PermissionError):
                    pass

    start, close = api.PContext.start, api.PContext.close

    def start_and_keep(self) -> None:
        contexts.append(self)
        start(self)

    def close_and_record(self, death_sig=None, timeout: int = 30) -> None:
        close(self, death_sig, timeout)
        handlers = getattr(self, "subprocess_handlers", None) or {}
        codes.update({rank: h.proc.returncode for rank, h in handlers.items()})

    api._terminate_process_handler = handler  # what PContext.start installs for SIGTERM, SIGINT, ...
    api.PContext.start, api.PContext.close = start_and_keep, close_and_record
    _no_restart_after_a_user_error(spared)
    _wake_stopped_workers_when_closing(first)
    try:
        torchrun.main(argv)
    except api.SignalException:
        found = [codes[rank] for rank in sorted(codes)]
        code = _job_code(found, first[0])
        print(_said(first[0], found, code, argv, since), file=sys.stderr, flush=True)
        return code
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        code = failure.exitcode if failure.exitcode > 0 else 128 - failure.exitcode
        if code == EXIT_USER_ERROR and spared:
            why = (f" (a user error: its line above says what to change), so the job stopped without the "
                   f"{spared[0]} restart(s) --max_restarts left: the same command would meet the same error")
        else:
            why = ", so the job stopped" + (f": {_meaning(code, argv, since)}" if code in _MEANING else
                                            " (its line above says why)")
        print(f"{ME}: rank {rank} ended with exit code {code}{why}", file=sys.stderr, flush=True)
        return code
    except RuntimeError as err:  # torchrun's own rendezvous store could not start
        from bart.runtime.distributed import port_in_use_line

        line = port_in_use_line(err, "--master_port / --rdzv_endpoint")
        if line is None:
            raise
        print(f"{ME}: error: {line}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    return 0


def _no_restart_after_a_user_error(spared: list) -> None:
    """A worker group that failed because a worker ended with exit code 2 is not restarted: no restarts are left
    once torchrun's agent has seen it (its ``_remaining_restarts``; how many there were goes in ``spared`` for
    the launcher's last line)."""
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import (
        LocalElasticAgent,
    )

    monitor = LocalElasticAgent._monitor_workers

    def monitor_and_spare(self, worker_group):
        result = monitor(self, worker_group)
        failures = getattr(result, "failures", None) or {}
        user_error = any(failure.exitcode == EXIT_USER_ERROR for failure in failures.values())
        if result.state == WorkerState.FAILED and user_error and self._remaining_restarts > 0:
            spared.append(self._remaining_restarts)
            self._remaining_restarts = 0
        return result

    LocalElasticAgent._monitor_workers = monitor_and_spare


def _stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP, SIGTSTP: state T in /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def _wake_stopped_workers_when_closing(stop_signals: list) -> None:
    """After each closing signal torchrun sends a worker (its process group), a worker that is stopped: after a
    stop signal (``stop_signals`` not empty) SIGCONT, so that it takes the signal now (and writes its checkpoint);
    when the job ends because a worker failed, SIGKILL: it is the stopped rank the heartbeat named
    (:mod:`bart.runtime.heartbeat`), and torchrun would kill it 30 s later anyway. A running worker is left to its
    closing signal."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler import (
        SubprocessHandler,
    )

    close = SubprocessHandler.close

    def close_and_wake(self, death_sig=None) -> None:
        close(self, death_sig)
        if death_sig != signal.SIGKILL and _stopped(self.proc.pid):
            try:
                os.killpg(self.proc.pid, signal.SIGCONT if stop_signals else signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    SubprocessHandler.close = close_and_wake


if __name__ == "__main__":
    sys.exit(main())
