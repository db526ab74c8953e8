"""How the entry scripts end. A user's mistake (a bad flag or config value, a missing file, an
unreadable checkpoint, a hub id that cannot be resolved) is one line on stderr and exit code 2; a run
that stopped itself (non-finite losses, the fp16 loss scale at its floor, a collective that timed
out, a stop signal after its checkpoint) is one line and its own exit code (``bart.errors``); a full
disk, quota or read-only file system, whatever layer raises it (``bart.files.checkpoint_io.storage_errno``), is
one line naming the folder and its free space, exit code 2; a package missing from this Python one line naming it and
its install command (``bart.cli.console.missing_package``), exit code 2; memory that runs out (CPU or GPU) one line with
the size asked for, the memory there is and what to lower (``bart.runtime.memory``), exit code 2; Ctrl-C during a checkpoint write one line
naming the newest complete checkpoint, exit code 130, and anywhere else one line, exit code 130 (run_eval.py:
at the first Ctrl-C); a programming error keeps its traceback. Stop signals are taken for the whole run
(``STOP_SIGNALS_AT_ONCE``), not only inside the training loop."""
from __future__ import annotations

import io
import os
import sys
import threading

from bart.cli.args import EVAL, FINETUNE, PRETRAIN, TRAINING
from bart.data import DataError
from bart.errors import (
    EXIT_DIST_TIMEOUT,
    EXIT_USER_ERROR,
    RunStopped,
    UserError,
    one_line,
)
from bart.hub import HubPushError, HubResolutionError
from bart.records.metric_writers import MetricWriterError

USER_ERRORS = (UserError, HubResolutionError, HubPushError, DataError, MetricWriterError, FileNotFoundError, IsADirectoryError,
               NotADirectoryError, PermissionError)
# What to lower when a script runs out of memory (the model's size is the config's in every script)
_TRAINING_LOWER = ("lower --train_batch_size (--gradient_accumulation_steps keeps the global batch) or "
                   "--max_source_length, add --gradient_checkpointing or --bf16, or use a smaller model (the config's "
                   "d_model, layers, ffn dims, vocab_size)")
LOWER_WHEN_OUT_OF_MEMORY = {
    PRETRAIN: _TRAINING_LOWER,
    FINETUNE: _TRAINING_LOWER.replace("--max_source_length", "--max_source_length / --max_target_length"),
    EVAL: "lower --bs, --max_source_length or --num_beams, or use --decode_precision bf16 / int8",
}


def _resume_hint(script: str, err: BaseException | None = None) -> str:
    """After a failed checkpoint write of a training script: how to go on."""
    from bart.files.checkpoint_io import (  # imports torch: only when needed
        StorageError,
        WriteInterrupted,
    )

    if err is not None and not isinstance(err, (StorageError, WriteInterrupted)):
        return ""
    return ("; then run the same command with --resume_from_checkpoint auto (it resumes from the newest complete "
            "checkpoint, or starts anew where there is none)" if script in TRAINING else "")


def _permission_hint(err: BaseException) -> str:
    """After a permission error (a folder of another user, a read-only mode, ``chattr +i``): what to look at."""
    if not isinstance(err, PermissionError) or not err.filename:
        return ""
    path = os.fsdecode(err.filename)
    return (f"; this process may not use {path}: check the owner, mode and attributes of it and its folder "
            f"(ls -ld, lsattr -d), or choose another path")


def _written_folder(err: BaseException):
    """The folder a failed write was writing into: the file an OSError names, else the run's --output_dir."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.filename:
            name = os.path.abspath(os.fsdecode(err.filename))
            return name if os.path.isdir(name) else os.path.dirname(name)
        err = err.__cause__ or err.__context__
    folder = flag_value(sys.argv, "--output_dir")
    return None if folder is None else os.path.abspath(folder)


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value a command line gives ``flag`` (``--flag V`` or ``--flag=V``; the last one, as argparse takes it),
    None where it gives none."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def is_collective_timeout(err: RuntimeError) -> bool:
    """A torch.distributed collective (gloo or NCCL; DistBackendError is a RuntimeError) that gave up
    waiting for another rank."""
    import torch.distributed as dist

    text = str(err).lower()
    timeout_words = ("timed out", "timeout", "connection closed by peer", "connection reset by peer",
                     "broken pipe", "watchdog")
    return dist.is_available() and dist.is_initialized() and any(w in text for w in timeout_words)


# the run under run_main: its script, going on, ended with its own line (_end), the writer threads' faults held
_RUN: dict = {"script": "", "running": False, "ended": False, "faults": []}


def _storage_errors_in_threads_as_one_line() -> None:
    """A background writer thread (TensorBoard's event writer) that dies of a full disk leaves one line, not its
    traceback. Its owner raises the error again in the main thread, which ends the run in one line naming the
    folder and the fix: while the run goes on the thread's line is held (``_RUN["faults"]``) and said only if the
    run ends without a line of its own; after that line (``_RUN["ended"]``) a writer meeting the same full disk
    says nothing (the thread and the main thread meet a full disk in either order). Installed once per process
    (a caller running scripts one after another keeps one hook); its lines name the run's script."""
    if getattr(threading.excepthook, "storage_errors_as_one_line", False):
        return
    previous = threading.excepthook

    def hook(args) -> None:
        import errno

        from bart.files.checkpoint_io import storage_errno

        writer = args.thread is not None and ".writer" in type(args.thread).__module__  # TensorBoard's event writer
        if writer and isinstance(args.exc_value, OSError) and args.exc_value.errno in (errno.ENOENT, errno.ENOTDIR):
            return  # its folder went (deleted, or a file put in its place): its owner's next write stops the run
        if args.exc_value is not None and storage_errno(args.exc_value) is not None:
            name = args.thread.name if args.thread is not None else "a thread"
            line = f"{_RUN['script']}: {name} (a background writer) stopped: {one_line(args.exc_value)}"
            if _RUN["running"]:
                _RUN["faults"].append(line)
            elif not _RUN["ended"]:
                _say(line)
            return
        previous(args)

    hook.storage_errors_as_one_line = True
    threading.excepthook = hook


# How each entry script takes a stop signal for the whole of its run (bart.runtime.signals.StopRequest): training
# scripts as a request honoured after an update or at a validation's or prediction's next batch (75, a checkpoint
# where there is something new to save); run_eval.py at once (Ctrl-C: 130, SIGTERM/SIGUSR1: 75), having nothing to
# save
STOP_SIGNALS_AT_ONCE = {PRETRAIN: False, FINETUNE: False, EVAL: True}


def _interrupted(script: str) -> str:
    """The line after a Ctrl-C that stopped a script at once (exit 130)."""
    if script not in TRAINING:
        return f"{script}: interrupted (Ctrl-C): stopped before the work was done; run the same command again"
    from bart.training.checkpoint import latest_checkpoint

    folder = _written_folder(BaseException())
    newest = latest_checkpoint(folder) if folder else None
    return (f"{script}: interrupted (Ctrl-C again): stopped at once, without writing a checkpoint; " +
            (f"the newest checkpoint is {newest}: run the same command with --resume_from_checkpoint auto to "
             f"continue from it" if newest else "no checkpoint was written: run the same command again"))


def _whole_lines() -> list:
    """Every line the run prints leaves in one write, on stdout as on stderr: unbuffered streams (``python -u``,
    PYTHONUNBUFFERED, what clusters set) write ``print``'s text and its newline apart, and under torchrun the ranks
    share one terminal or log, so another rank's line landed inside one (a dllogger line, a rank's last line).
    Line-buffered, each line is one write (atomic on a pipe below 4 KiB). Returns what to restore."""
    previous = []
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and not stream.closed:
            previous.append((stream, stream.line_buffering, stream.write_through))
            stream.reconfigure(line_buffering=True, write_through=False)
    return previous


def run_main(main, script: str, restore_signals: bool | None = None) -> None:
    """Run ``main`` and end as described above. The stop signals are taken from the first line to the last
    (``STOP_SIGNALS_AT_ONCE``); once the outcome is known, a late one changes nothing: a process on its way out
    (``python SCRIPT``) ignores them, a caller that goes on (``restore_signals``; by default any caller that
    is not ``python SCRIPT`` itself) gets its previous handlers back."""
    from bart.records import dllogger_compat
    from bart.runtime import run_lock
    from bart.runtime.signals import StopRequest

    if restore_signals is None:
        restore_signals = os.path.basename(sys.argv[0] if sys.argv else "") != script

    _RUN.update(script=script, running=True, ended=False, faults=[])  # a caller running scripts one after another
    _storage_errors_in_threads_as_one_line()
    streams = _whole_lines()
    stop = StopRequest(at_once=STOP_SIGNALS_AT_ONCE[script]) if script in STOP_SIGNALS_AT_ONCE else None
    if stop is not None:
        stop.__enter__()
    locked_before, logging_before = run_lock.held_folders(), dllogger_compat.open_loggers()
    try:
        try:
            main()
        except BaseException as err:  # noqa: BLE001 - each kind ends as the module's docstring says
            if stop is not None:
                stop.settle()
            _end(err, script)
    finally:
        _RUN["running"] = False
        for line in [] if _RUN["ended"] else _RUN["faults"]:  # a writer's fault the run's own ending did not say
            _say(line)
        run_lock.release_all(keep=locked_before)  # the run's folder is free once it ended (a caller may go on)
        dllogger_compat.close_all(keep=logging_before)  # its log, TensorBoard's writer thread, the W&B run
        if stop is not None:
            stop.settle()
            stop.__exit__() if restore_signals else stop.ignore_from_now_on()
        for stream, line_buffering, write_through in streams if restore_signals else ():
            if not stream.closed:
                stream.reconfigure(line_buffering=line_buffering, write_through=write_through)


def _say(line: str) -> None:
    """The line an entry script ends with, in one write: under torchrun the ranks share the terminal or log, and a
    line written in two pieces (``print``'s text, then its newline) can have another rank's output in between."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()



def _end(err: BaseException, script: str) -> None:
    """One line and the exit code for ``err``, or ``err`` raised again (SystemExit, a programming error)."""
    from bart.files.checkpoint_io import EXIT_INTERRUPTED
    from bart.generation import GenerationOptionError

    _RUN["ended"] = True
    if isinstance(err, KeyboardInterrupt):
        _say(_interrupted(script))
        sys.exit(EXIT_INTERRUPTED)
    if isinstance(err, (*USER_ERRORS, GenerationOptionError)):
        _say(f"{script}: error: {one_line(err)}{_permission_hint(err)}{_resume_hint(script, err)}")
        sys.exit(EXIT_USER_ERROR)
    if isinstance(err, RunStopped):
        _say(f"{script}: stopped: {one_line(err)}{_resume_hint(script, err)}")
        sys.exit(err.exit_code)
    if not isinstance(err, Exception):
        raise err
    from bart.cli.console import missing_package

    missing = missing_package(err)  # a package the run imported late (lddl for pretraining's data, say)
    if missing is not None:
        _say(f"{script}: error: {missing}")
        sys.exit(EXIT_USER_ERROR)
    from bart.files.checkpoint_io import storage_errno, storage_message
    from bart.runtime.memory import out_of_memory

    short = out_of_memory(err)
    if short is not None:
        lower = LOWER_WHEN_OUT_OF_MEMORY.get(script, "use a smaller model or batch")
        _say(f"{script}: error: {short}: {lower}")
        sys.exit(EXIT_USER_ERROR)
    code = storage_errno(err)
    if code is not None:
        detail = f"{one_line(err)[:200]}; checkpoints are written whole or not at all"
        _say(f"{script}: error: {storage_message(code, _written_folder(err), detail=detail)}"
             f"{_resume_hint(script)}")
        sys.exit(EXIT_USER_ERROR)
    if not isinstance(err, RuntimeError) or not is_collective_timeout(err):
        raise err
    from bart.runtime import distributed as dist_utils
    _say(f"{script}: stopped: rank {dist_utils.rank()} of {dist_utils.world_size()}: a collective operation "
         f"failed waiting for the other ranks ({one_line(err)[:300]}); another rank hung or died: see its "
         f"log; raise --dist_timeout if a step legitimately takes longer")
    sys.exit(EXIT_DIST_TIMEOUT)


def run_entry(script: str, argv: list[str]) -> int:
    """``python SCRIPT ARGV`` (``pretrain.py``, ``finetune.py``, ``run_eval.py``) or ``python -m bart.export ARGV``
    in this process, ending as the script ends (:func:`run_main`: one line for a stop or a mistake): its exit code
    (0 when main returns). Notebooks, the configuration matrix and the tests run scripts through it."""
    import importlib

    name = "bart.export" if script == "bart.export" else f"bart.cli.{script[:-3] if script.endswith('.py') else script}"
    module = importlib.import_module(name)
    if script == "bart.export":  # ends through its own main, as `python -m bart.export` does
        return module.main(argv)
    try:
        run_main(lambda: module.main(argv), script)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    return 0
