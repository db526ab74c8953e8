"""How the model is spread over processes: one small object the trainer receives.

A strategy wraps the model for the forward pass, switches gradient synchronisation off for the
micro-batches of an accumulation (all but the last), and turns model and optimizer state into full,
plain state dicts for checkpoints (and back). The trainer knows nothing else about distribution.

- ``single``: one process, the model as it is.
- ``ddp``: torch DistributedDataParallel (the default with more than one process); optional
  half-precision all-reduce of the gradients (``--allreduce_post_accumulation_half_precision``).
- ``fsdp``: torch FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and
  optimizer state sharded over the processes, each encoder/decoder layer its own unit; the same
  flag reduces gradients in half precision.

To add a strategy, subclass :class:`Strategy`, add it to ``STRATEGIES`` and give it a test that its
losses match DDP's (tests/test_trainer.py).
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

STRATEGIES = ("ddp", "fsdp")


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """A DTensor gathered into a plain tensor; a plain tensor as it is."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value


class Strategy:
    name = "single"

    def __init__(self, device: torch.device, half_precision_reduce: Optional[torch.dtype] = None,
                 find_unused_parameters: bool = False) -> None:
        self.device = device
        self.half_precision_reduce = half_precision_reduce
        self.find_unused_parameters = find_unused_parameters

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Changes to the model that must come before the optimizer is built (sharding); idempotent."""
        return model

    def wrap(self, model: torch.nn.Module, module: torch.nn.Module) -> torch.nn.Module:
        """``model`` is the bare model, ``module`` what runs forward (the model, or it compiled)."""
        return module

    def no_sync(self, module: torch.nn.Module):
        return contextlib.nullcontext()

    def model_state_dict(self, model: torch.nn.Module) -> dict:
        return model.state_dict()

    def optimizer_state_dict(self, model: torch.nn.Module, optimizer) -> dict:
        return optimizer.state_dict()

    def load(self, model: torch.nn.Module, optimizer, model_state: dict, optimizer_state: dict) -> None:
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)


class DDPStrategy(Strategy):
    name = "ddp"

    def wrap(self, model, module):
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = DDP(module, device_ids=device_ids, find_unused_parameters=self.find_unused_parameters)
        if self.half_precision_reduce is not None:
            from bart.training.comm_hooks import register_half_precision_allreduce
            register_half_precision_allreduce(wrapped, self.half_precision_reduce)
        return wrapped

    def no_sync(self, module):
        return module.no_sync()


class FSDPStrategy(Strategy):
    name = "fsdp"

    def prepare(self, model):
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
        if isinstance(model, FSDPModule):
            return model
        if self.find_unused_parameters:
            raise SystemExit("--distributed_strategy fsdp does not support LayerDrop (layers skipped at random); "
                             "use ddp or set encoder_layerdrop/decoder_layerdrop to 0")
        policy = MixedPrecisionPolicy(reduce_dtype=self.half_precision_reduce)
        for stack in (model.model.encoder, model.model.decoder):
            for layer in stack.layers:
                fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)  # embeddings, final norms, LM head: the root unit
        return model

    def wrap(self, model, module):
        self.prepare(model)
        return module  # fully_shard changed the model in place; a compiled wrapper runs it as it is

    @contextlib.contextmanager
    def no_sync(self, module):
        target = getattr(module, "_orig_mod", module)
        target.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            target.set_requires_gradient_sync(True)

    @staticmethod
    def _options(**kwargs):
        from torch.distributed.checkpoint.state_dict import StateDictOptions
        return StateDictOptions(full_state_dict=True, cpu_offload=True, **kwargs)

    def model_state_dict(self, model):
        from torch.distributed.checkpoint.state_dict import get_model_state_dict
        return get_model_state_dict(model, options=self._options())

    def optimizer_state_dict(self, model, optimizer):
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
        return get_optimizer_state_dict(model, optimizer, options=self._options())

    def load(self, model, optimizer, model_state, optimizer_state):
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict
        # tied weights (shared embeddings, LM head) appear under several names in a state dict; FSDP
        # loads each parameter once, under its first name
        canonical = {name for name, _ in model.named_parameters()} | {name for name, _ in model.named_buffers()}
        missing = sorted(canonical - set(model_state))
        if missing:
            raise KeyError(f"the checkpoint lacks {len(missing)} model entries, e.g. {missing[:5]}")
        set_model_state_dict(model, {k: v for k, v in model_state.items() if k in canonical},
                             options=self._options(strict=False))
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=self._options())


def build_strategy(name: Optional[str], world_size: int, device: torch.device,
                   half_precision_reduce: Optional[torch.dtype] = None, find_unused_parameters: bool = False) -> Strategy:
    """``name`` None: DDP with several processes, nothing with one."""
    if name not in (None, *STRATEGIES):
        raise ValueError(f"distributed strategy must be one of {STRATEGIES}, got {name!r}")
    if world_size <= 1:
        return Strategy(device)
    cls = FSDPStrategy if name == "fsdp" else DDPStrategy
    return cls(device, half_precision_reduce, find_unused_parameters)
