"""Fixtures of the generation tests."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny matmuls gain nothing from threads, and on shared cores they slow the test down a lot."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

