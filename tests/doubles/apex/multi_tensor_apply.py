"""``apex.multi_tensor_apply`` of the pinned commit (see ``apex/__init__.py``): ``multi_tensor_applier``
calls a kernel of the compiled ``amp_C`` extension as ``op(chunk_size, noop_flag, tensor_lists, *args)``.
Here ``apex._amp_C`` stands for that extension and is always importable; a test that needs apex built
without its CUDA extensions sets ``MultiTensorApply.available = False``."""


class MultiTensorApply:
    available = False
    warned = False

    def __init__(self, chunk_size):
        try:
            from apex import _amp_C  # noqa: F401  (apex: ``import amp_C``)
            MultiTensorApply.available = True
            self.chunk_size = chunk_size
        except ImportError as err:  # pragma: no cover - the double's stand-in always imports
            MultiTensorApply.available = False
            MultiTensorApply.import_err = err

    def check_avail(self):
        if not MultiTensorApply.available:
            raise RuntimeError("Attempted to call MultiTensorApply method, but MultiTensorApply is not available, "
                               "possibly because Apex was installed without --cpp_ext --cuda_ext.")

    def __call__(self, op, noop_flag_buffer, tensor_lists, *args):
        self.check_avail()
        return op(self.chunk_size, noop_flag_buffer, tensor_lists, *args)


multi_tensor_applier = MultiTensorApply(2048 * 32)
