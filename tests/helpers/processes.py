"""A real process (an entry script, a launcher) whose merged stdout/stderr lines are read as they come, so that a
test can send a signal once a given line appeared, and the lines an entry script ends with."""
import os
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(**extra):
    return dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **extra)


def wait_for(predicate, proc, what, timeout=180):
    """Until ``predicate()``; fails once ``proc`` ended first (with its stderr's end where that is a pipe of its own,
    not read by a thread) or after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while not predicate():
        if proc.poll() is not None:
            time.sleep(0.5)  # what it printed last may still be on its way to a reader thread
            if predicate():
                return
            said = proc.communicate()[1] if proc.stderr is not None and not proc.stderr.closed else ""
            raise AssertionError(f"the run ended before {what}" + (f": {said[-2000:]}" if said else ""))
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def logged_step(out_dir) -> int:
    """The newest update a run in ``out_dir`` logged to its dllogger.json (0: none yet)."""
    from bart.utils.dllogger_compat import read_dllogger

    try:
        return max([r["step"] for r in read_dllogger(os.path.join(out_dir, "dllogger.json"))
                    if r["type"] == "LOG" and isinstance(r["step"], int)] or [0])
    except (FileNotFoundError, ValueError):
        return 0


class Watched:
    """A real process whose merged stdout/stderr lines are read as they come."""

    def __init__(self, cmd, **kwargs):
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(TOKENIZERS_PARALLELISM="false"), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, **kwargs)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")))
        self._reader.start()

    def wait_for(self, text, timeout=180):
        wait_for(lambda: any(text in line for line in self.lines), self.proc, repr(text), timeout)

    def finish(self, timeout=120) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self.proc.kill()
            self._reader.join(timeout=10)
        return code, "".join(self.lines)


def ours(output: str, script: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"{script}: ")]
