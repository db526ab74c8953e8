"""A free TCP port on this machine for a test's torchrun rendezvous (``--master_port``)."""
import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
