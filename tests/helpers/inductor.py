"""Inductor on CPU for a test in the pytest process itself: the configuration matrix's CPU settings
(``benchmarks.config_matrix.CPU_INDUCTOR``)."""
import contextlib

from benchmarks.config_matrix import CPU_INDUCTOR


@contextlib.contextmanager
def scalar_inductor(cpp_wrapper: bool = False):
    """Inductor's kernels as scalar C++ (no explicit SIMD: about half the compile on a cold cache) inside the
    block, each g++ run in this process (no pool of compile workers, each importing torch, to start), and the
    process's own choices again after it. ``cpp_wrapper``: the kernels and the code that calls them in one C++
    file, one g++ run for a graph instead of one per kernel (a training step's forward and backward: about half the
    compile; a decode step's small graphs compile faster without it). ``cpp.vec_isa_ok`` alone leaks: inductor caches
    the usable instruction sets the first time it asks (``valid_vec_isa_list``), so a first compile inside the block
    left every later compile of the process scalar, and a later test's cached vectorized kernel then failed to
    build ('at::vec has not been declared'). The cache is cleared on the way in and on the way out."""
    import torch._inductor.config
    from torch._inductor import cpu_vec_isa

    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    try:
        with torch._inductor.config.patch({**CPU_INDUCTOR, "cpp_wrapper": cpp_wrapper}):
            yield
    finally:
        cpu_vec_isa.valid_vec_isa_list.cache_clear()


def untraceable_autocast_query(monkeypatch) -> None:
    """``torch.amp.is_autocast_available`` as torch 2.11's dynamo sees it: a call it cannot trace, so asking it inside a
    compiled region breaks the graph there (the newer dynamo of the tests' torch traces it). A compiled model's code
    must not ask it while compiling."""
    import torch

    available = torch.amp.is_autocast_available

    def breaks_the_graph(device_type):
        torch._dynamo.graph_break()
        return available(device_type)

    monkeypatch.setattr(torch.amp, "is_autocast_available", breaks_the_graph)
