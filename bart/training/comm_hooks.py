"""Half-precision gradient all-reduce for DDP (``--allreduce_post_accumulation_half_precision``).

Parameters and gradients stay fp32; only what travels is bf16/fp16: each gradient bucket is
divided by the world size, cast, all-reduced and written back as fp32. With ``no_sync()`` during
accumulation this happens once per optimizer step. (torch's own compress hooks refuse backends
other than NCCL; this one also runs on gloo, so CPU tests exercise the same code.)
"""

import torch
import torch.distributed as dist


def _half_allreduce_hook(dtype: torch.dtype):
    def hook(process_group, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:  # DDP checks these annotations
        group = process_group if process_group is not None else dist.group.WORLD
        buffer = bucket.buffer()
        wire = buffer.div(dist.get_world_size(group)).to(dtype)
        future = dist.all_reduce(wire, group=group, async_op=True).get_future()

        def back_to_fp32(fut: torch.futures.Future) -> torch.Tensor:
            buffer.copy_(fut.value()[0])
            return buffer

        return future.then(back_to_fp32)

    return hook


def register_half_precision_allreduce(ddp_model, dtype: torch.dtype) -> None:
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"half-precision all-reduce needs bfloat16 or float16, got {dtype}")
    ddp_model.register_comm_hook(state=None, hook=_half_allreduce_hook(dtype))
