"""Inductor on CPU for a test in the pytest process itself."""
import contextlib


@contextlib.contextmanager
def scalar_inductor():
    """Inductor's kernels as scalar C++ (no explicit SIMD: about half the compile on a cold cache) inside the
    block, and the process's own choice again after it. ``cpp.vec_isa_ok`` alone leaks: inductor caches the
    usable instruction sets the first time it asks (``valid_vec_isa_list``), so a first compile inside the block
    left every later compile of the process scalar, and a later test's cached vectorized kernel then failed to
    build ('at::vec has not been declared'). The cache is cleared on the way in and on the way out."""
    import torch._inductor.config
    from torch._inductor import cpu_vec_isa

    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    try:
        with torch._inductor.config.patch({"cpp.vec_isa_ok": False}):
            yield
    finally:
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
