"""``python SCRIPT ARGS`` (or ``python -m MODULE ARGS``, ``python -c CODE``) in a process forked from the test's own,
which has torch, transformers and the package imported already: a real process (its own pid, exit code, stdout and
stderr, environment, working folder, signals, files) without the 3-4 CPU-seconds of an interpreter's start-up.

    result = run_python([sys.executable, "finetune.py", "--data_dir", ...], env=env, cwd=tmp_path, timeout=300)
    result.returncode, result.stdout, result.stderr      # as subprocess.run(..., capture_output=True, text=True)

Use it where the test is about what a script does (its files, its exit code, its lines), not about the start of an
interpreter: what a fresh process imports, prints at import or finds on ``sys.path`` (an installed copy, a clean
environment, variables a library reads when imported) needs :func:`subprocess.run`, and so do launchers (torchrun).
:func:`popen_python` starts such a process as :class:`subprocess.Popen` does, for a test that talks to it or
signals it while it runs.

The child starts as a new interpreter would for what it runs: the given environment (``os.environ`` replaced, torch's
thread count from its OMP_NUM_THREADS), working folder, ``sys.argv`` and ``sys.path[0]``, standard streams on files,
default signal handlers, Python's own warning filters and no logging handlers, no exit handlers of the test's
process (its temporary folders are never removed by the child; the package's once-per-process exit hooks, the run
lock's, are installed again by the child's own run). It ends as the interpreter does: ``sys.exit``'s code, 1 and the
traceback for an exception, killed by SIGINT after Ctrl-C's traceback, its own exit handlers run. Where this process holds a torch.distributed
process group (which a fork cannot share), or fork is not available, the command runs as a subprocess instead.

:func:`fork_ranks` is ``torchrun --nproc_per_node=N ARGS`` without torchrun: N such processes with the variables
torchrun gives its workers, for a test about what the ranks do together (their files, their lines, their exit codes),
not about torchrun's agent (its restarts, its signals, its exit code, its lines).
"""
import atexit
import faulthandler
import logging
import os
import re
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

_PYTHON_WARNING_FILTERS = list(warnings.filters)  # as this module is imported: before any test changes them
_SIGNALS = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM,
                        signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE) if s is not None]


def _forkable(env: dict | None) -> bool:
    """Whether a fork starts the command as a new interpreter would: fork exists; no process group is held (a fork
    cannot share it) and CUDA is not initialized here (a forked child cannot use it); OpenMP has no threads of its
    own to lose (OMP_NUM_THREADS=1 here, as scripts/run_tests.sh sets for its workers; BART_TESTS_FORK=0 turns
    forking off); and the command's PYTHONPATH adds no folder this process lacks (a folder of doubles, whose modules
    a fresh interpreter would import in place of the real ones this process holds)."""
    if not hasattr(os, "fork") or os.environ.get("OMP_NUM_THREADS") != "1" or os.environ.get("BART_TESTS_FORK") == "0":
        return False
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return False
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and cuda.is_initialized():  # a forked child cannot use the CUDA context it inherits
        return False
    ours = {os.path.realpath(p or os.getcwd()) for p in sys.path}
    extra = (env if env is not None else os.environ).get("PYTHONPATH", "")
    return all(os.path.realpath(p) in ours for p in extra.split(os.pathsep) if p)


def _child(argv: list[str], env: dict | None, cwd, stdin_path: str | None, out_path: str | None, err_path: str | None,
           fds: tuple[int, int, int] | None = None) -> None:
    """In the forked child: become ``argv``'s process, run it, and end (never returns). Its standard streams: the
    files at the paths given, or (``fds``) the descriptors for 0, 1 and 2 (-1: the one inherited), each closed once
    in place, as a new interpreter holds only its three."""
    code = 1
    try:
        for fd, source in zip((0, 1, 2), fds or ()):
            if source != -1 and source != fd:
                os.dup2(source, fd)
        for source in {source for source in fds or () if source > 2}:
            os.close(source)
        for fd, path, flags in () if fds else ((0, stdin_path or os.devnull, os.O_RDONLY), (1, out_path, os.O_WRONLY | os.O_APPEND),
                                (2, err_path, os.O_WRONLY | os.O_APPEND)):  # (appended: ranks share one file)
            if path is None:  # stderr into stdout's file, one offset (subprocess's stderr=STDOUT)
                os.dup2(1, fd)
                continue
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = sys.__stdin__ = open(0, closefd=False, encoding="utf-8")
        sys.stdout = sys.__stdout__ = open(1, "w", buffering=1, closefd=False, encoding="utf-8")
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False, encoding="utf-8",
                                           errors="backslashreplace")
        for sig in _SIGNALS:  # as an interpreter starts: a signal ignored here stays ignored (exec keeps SIG_IGN),
            if signal.getsignal(sig) != signal.SIG_IGN:  # others default, SIGINT Python's KeyboardInterrupt
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python ignores it at start (a broken pipe: an exception)
        signal.alarm(0)
        atexit._clear()
        _forget_exit_hooks()
        logging.root.handlers.clear()
        logging.root.setLevel(logging.WARNING)
        for logger in list(logging.Logger.manager.loggerDict.values()):  # a library's handler (transformers')
            for handler in getattr(logger, "handlers", ()):               # writes to this process's stderr
                if type(handler) is logging.StreamHandler:
                    handler.stream = sys.stderr  # (setStream would flush the test process's stream)
        warnings.filters[:] = _PYTHON_WARNING_FILTERS
        warnings._filters_mutated()
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        if faulthandler.is_enabled() or os.environ.get("PYTHONFAULTHANDLER"):
            faulthandler.enable(file=sys.stderr, all_threads=True)  # its stacks on SIGABRT into its own stderr
        threads = os.environ.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads))
        code = _run(argv[1:])
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt as err:  # the interpreter ends killed by SIGINT (a shell's 130)
        _print_traceback(err)
        code = -signal.SIGINT
    except BaseException as err:  # noqa: BLE001 (as the interpreter ends on any exception)
        _print_traceback(err)
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            if code == -signal.SIGINT:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            os._exit(code if code >= 0 else 130)


def _forget_exit_hooks() -> None:
    """The package's modules that install their exit hooks (atexit, SIGTERM/SIGHUP handlers) once per process, and
    hold what the hooks release, start over as in a fresh interpreter: the child has neither the test process's
    hooks (cleared above) nor its locks. Else a script forked after a run in the test's process (which installed
    them there) would end without releasing its run lock."""
    run_lock = sys.modules.get("bart.runtime.run_lock")
    if run_lock is not None:
        run_lock._hooks_installed = False
        run_lock._HELD.clear()


def _print_traceback(err: BaseException) -> None:
    """The traceback as the interpreter prints it: from the command's own first frame (not this module's or runpy's)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
        tb = tb.tb_next
    traceback.print_exception(type(err), err, tb)


def _run(args: list[str]) -> int:
    """``python ARGS`` after the interpreter's own flags (none are taken here)."""
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = os.getcwd()
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.argv = [args[0], *args[1:]]
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")  # (it sets sys.argv[0] to the path as given)
    return 0


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_python(argv: list[str], env: dict | None = None, cwd=None, timeout: float | None = None,
               input: str | None = None, check: bool = False,
               stderr_to_stdout: bool = False) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, env=env, cwd=cwd, timeout=timeout, input=input, capture_output=True, text=True)`` for
    a Python command (``argv[0]`` is an interpreter), forked from this process (see the module's docstring).
    ``stderr_to_stdout``: both streams into one, in the order written (``stderr=subprocess.STDOUT``: a log file);
    the result's ``stderr`` is then empty."""
    if not _forkable(env):
        streams = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT) if stderr_to_stdout else \
            dict(capture_output=True)
        done = subprocess.run(argv, env=env, cwd=cwd, timeout=timeout, input=input, text=True, check=check, **streams)
        done.stderr = done.stderr or ""
        return done
    with tempfile.TemporaryDirectory(prefix="forked-") as folder:
        out_path, err_path = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        for path in (out_path, err_path):
            open(path, "wb").close()
        stdin_path = None
        if input is not None:
            stdin_path = os.path.join(folder, "stdin")
            with open(stdin_path, "w", encoding="utf-8") as f:
                f.write(input)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            _child(list(argv), env, cwd, stdin_path, out_path, None if stderr_to_stdout else err_path)
        status = _wait(pid, timeout, argv)
        with open(out_path, encoding="utf-8", errors="replace") as f:
            stdout = f.read()
        with open(err_path, encoding="utf-8", errors="replace") as f:
            stderr = f.read()
    returncode = os.waitstatus_to_exitcode(status)
    result = subprocess.CompletedProcess(argv, returncode, stdout, stderr)
    if check:
        result.check_returncode()
    return result


def _wait(pid: int, timeout: float | None, argv) -> int:
    if timeout is None:
        return os.waitpid(pid, 0)[1]
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired(argv, timeout)
        time.sleep(0.02)


def fork_ranks(nproc: int, argv: list[str], env: dict | None = None, cwd=None,
               stall_s: float | None = None) -> tuple[int, str]:
    """``torchrun --nproc_per_node=NPROC --master_port=<a free port> ARGV...`` (``argv``: an interpreter, then a
    script or ``-m MODULE`` and their arguments, as torchrun takes them) without torchrun's agent: NPROC processes forked from this one, each with the
    variables torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_*,
    MASTER_ADDR/MASTER_PORT, TORCHELASTIC_RESTART_COUNT 0 and its run id; no agent store: rank 0 serves the
    rendezvous store, as under srun), their stdout and stderr merged into one output as torchrun's are.
    Returns (0 when every rank ended 0, else the first failing rank's exit code; the others are then sent SIGTERM
    and, 30 s later, SIGKILL, as torchrun's agent ends them; the merged output). A hang (no rank prints or uses CPU
    for ``stall_s`` seconds, by default the hang watch's: ``hang_watch.IdleWatch``) fails with every rank's Python
    stacks; no rank outlives the call. Where a fork would not start the ranks as torchrun does (see
    :func:`run_python`), the real torchrun runs them (``tests.helpers.processes.run_ranks``)."""
    from tests.helpers.hang_watch import STALL_S
    from tests.helpers.ports import free_port

    stall_s = STALL_S if stall_s is None else stall_s
    port = free_port()
    base = dict(os.environ if env is None else env, TOKENIZERS_PARALLELISM="false", PYTHONFAULTHANDLER="1",
                PYTHONUNBUFFERED="1")
    if not _forkable(base):
        from tests.helpers.processes import run_ranks

        extra = {k: v for k, v in base.items() if os.environ.get(k) != v and k not in
                 ("TOKENIZERS_PARALLELISM", "PYTHONFAULTHANDLER", "PYTHONUNBUFFERED", "OMP_NUM_THREADS")}  # (run_ranks sets these)
        return run_ranks([argv[0], "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                          f"--master_port={port}", *argv[1:]], stall_s=stall_s, **extra)
    run_id = f"forked-{os.getpid()}-{port}"
    with tempfile.TemporaryDirectory(prefix="forked-ranks-") as folder:
        out_path = os.path.join(folder, "output")
        open(out_path, "wb").close()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pids: list[int] = []
        try:
            for rank in range(nproc):
                rank_env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank),
                                ROLE_NAME="default", LOCAL_WORLD_SIZE=str(nproc), WORLD_SIZE=str(nproc),
                                GROUP_WORLD_SIZE="1", ROLE_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=str(port), TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0",
                                TORCHELASTIC_RUN_ID=run_id, TORCHELASTIC_USE_AGENT_STORE="False")
                pid = os.fork()
                if pid == 0:
                    _child(list(argv), rank_env, cwd, None, out_path, None)
                pids.append(pid)
            code = _wait_ranks(pids, out_path, stall_s, argv)
            return code, _ranks_said(out_path)
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass


def _ranks_said(out_path: str) -> str:
    """The ranks' merged output. A forked rank's faulthandler dump (a hang's, or a crash's) ends with the hundreds of
    extension modules this process loaded: that line is left out, else it pushes the stack out of the end of the
    output a failing test shows."""
    with open(out_path, encoding="utf-8", errors="replace") as f:
        return re.sub(r"^Extension modules: .*$", "(its extension modules)", f.read(), flags=re.M)


def _wait_ranks(pids: list[int], out_path: str, stall_s: float, argv) -> int:
    """Until every rank ended; the exit code (see :func:`fork_ranks`)."""
    from tests.helpers.hang_watch import IdleWatch

    running, code, stopping = list(pids), 0, None
    size, watch, polls = 0, IdleWatch(stall_s), 0
    while running:
        for pid in list(running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                running.remove(pid)
                ended = os.waitstatus_to_exitcode(status)
                if ended != 0 and code == 0:
                    code, stopping = ended, time.monotonic()
                    for other in running:
                        os.kill(other, signal.SIGTERM)
        if stopping is not None and running and time.monotonic() - stopping > 30:
            for other in running:
                os.kill(other, signal.SIGKILL)
        polls += 1
        if os.path.getsize(out_path) != size:
            size = os.path.getsize(out_path)
            watch.printed()
        elif running and polls % 20 == 0 and (idle := watch.idle_for(running)) is not None:  # about a second
            for pid in sorted(running):  # each rank's stacks into the output (faulthandler), one at a time
                os.kill(pid, signal.SIGABRT)
                time.sleep(1.0)
            said = _ranks_said(out_path)[-8000:]
            raise AssertionError(f"hung: no rank of `{' '.join(map(str, argv[:4]))} ...` printed anything for "
                                 f"{idle:.0f} s and they used {watch.used_s():.2f} s of CPU (stall budget "
                                 f"{stall_s:g} s); their last lines and stacks:\n{said}")
        time.sleep(0.05)
    return code


class ForkedPopen(subprocess.Popen):
    """:class:`subprocess.Popen` of a Python command (``argv[0]`` an interpreter) whose process is forked from this one
    and becomes the command as :func:`run_python`'s does: the same pipes, ``wait``, ``poll``, ``send_signal``,
    ``kill``, ``start_new_session`` and ``pid`` (a real process: signals, exit codes and files as a fresh
    interpreter's). Started through :func:`popen_python`."""

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
                       shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids, uid,
                       umask, start_new_session, *rest):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (p2cwrite, c2pread, errread):  # the parent's ends
                    if fd != -1:
                        os.close(fd)
                if start_new_session:
                    os.setsid()
            except BaseException:  # noqa: BLE001 (the child never returns into the test)
                os._exit(1)
            _child(list(args), dict(env) if env is not None else None, cwd, None, None, None,
                   fds=(p2cread, c2pwrite, errwrite))
        self.pid = pid
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)


def popen_python(argv: list[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv, env=env, **kwargs)`` for a Python command (``argv[0]`` an interpreter), forked from this
    process (:class:`ForkedPopen`) where :func:`run_python` forks, else a subprocess."""
    if kwargs.get("shell") or kwargs.get("preexec_fn") or not _forkable(env):
        return subprocess.Popen(argv, env=env, **kwargs)
    return ForkedPopen(argv, env=env, **kwargs)
