"""bart.runtime.signals.StopRequest: a stop signal's note reaches stderr whatever the process was writing."""
import io
import os
import signal
import sys

from bart.runtime.signals import StopRequest


class _SignalledWhileWriting(io.RawIOBase):
    """stderr's file: its first write is interrupted by a SIGTERM, as a progress line can be."""

    def __init__(self, fd: int) -> None:
        self.fd, self.signalled = fd, False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data) -> int:
        if not self.signalled:
            self.signalled = True
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside stderr's buffered write
        return os.write(self.fd, bytes(data))


def test_a_signal_during_a_write_to_stderr_gives_its_note_and_the_run_goes_on(tmp_path, monkeypatch):
    path = tmp_path / "stderr.txt"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        stream = io.TextIOWrapper(io.BufferedWriter(_SignalledWhileWriting(fd)), write_through=True)
        monkeypatch.setattr(sys, "stderr", stream)
        with StopRequest() as stop:
            print("[train] 2/4 steps (50%)", file=sys.stderr, flush=True)
            assert stop.requested and stop.received == "SIGTERM"
        stream.flush()
    finally:
        os.close(fd)
    lines = path.read_text().splitlines()
    assert "[train] 2/4 steps (50%)" in lines
    assert [line for line in lines if line.startswith("[signal] SIGTERM received: finishing the current update")], lines
