"""Test double of NVIDIA apex at commit 6424da3b4faa6c8f062da4a48c424fff3f02d42d (github.com/NVIDIA/apex),
the commit the Dockerfile builds (``APEX_COMMIT``; the files followed below are those of the 25.09 tag,
4bdecd06, but for formatting and ``DATA_PTR`` spelled ``data_ptr``). Only what the project uses: ``apex.optimizers.FusedLAMB``
and ``apex.multi_tensor_apply.multi_tensor_applier``. Written for the tests, not copied. It follows, at that
commit:

- ``apex/optimizers/fused_lamb.py``: the constructor's signature and defaults, ``amsgrad`` refused, the
  fp16/fp32-only and sparse-gradient checks, one ``step`` per group kept in ``group["step"]`` (an int),
  state ``exp_avg``/``exp_avg_sq``, ``zero_grad()`` without arguments (``set_grad_none``), the global
  gradient norm as the blend of the fp32 and fp16 norms, ``max_grad_norm`` read from ``self.defaults``;
- ``apex/multi_tensor_apply/``: ``MultiTensorApply(2048*32)``, ``available`` only with the extensions;
- ``csrc/multi_tensor_lamb.cu`` (stage 1 and 2) and ``csrc/multi_tensor_l2norm_kernel.cu``, in
  ``apex/_amp_C.py``: the arithmetic in fp32 in the kernels' order, the gradient overwritten by the update.

Unlike apex, it runs on any device (CPU included): torch operations per tensor stand for the CUDA kernels,
so summation order, and with it the last bits of a norm, can differ from the GPU's.
"""
from . import optimizers  # noqa: F401  (apex/__init__.py imports its optimizers eagerly)

__all__ = ["optimizers"]
