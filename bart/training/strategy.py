"""How the model is spread over processes: one small object the trainer receives.

A strategy wraps the model for the forward pass, switches gradient synchronisation off for the
micro-batches of an accumulation (all but the last), turns model and optimizer state into full,
plain state dicts for checkpoints (and back), and lends the whole model for work whose forwards differ
between ranks (:meth:`Strategy.whole_model`: generation, where each rank decodes its own sources for its
own number of steps, and the weights best-k keeps). Training, validation, prediction and the final
weights know nothing else about distribution: a checkpoint is the same file whatever the strategy.

- ``single``: one process, the model as it is.
- ``ddp``: torch DistributedDataParallel (the default with more than one process); optional
  half-precision all-reduce of the gradients (``--allreduce_post_accumulation_half_precision``).
- ``fsdp``: torch FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and
  optimizer state sharded over the processes, each encoder/decoder layer its own unit; the same
  flag reduces gradients in half precision.

To add a strategy, subclass :class:`Strategy` and give it its row in ``STRATEGIES`` (the
``--distributed_strategy`` choices follow), with a test that its losses match DDP's
(tests/training/test_trainer.py) and that fine-tuning under it writes DDP's files (tests/cli/test_finetune.py).
"""
from __future__ import annotations

import contextlib

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from bart.runtime.distributed import outlive_reducer


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """A DTensor gathered into a plain tensor; a plain tensor as it is."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value


class Strategy:
    name = "single"
    summary = ""  # what --distributed_strategy's help says of it (a subclass in STRATEGIES: one phrase)

    def __init__(self, device: torch.device, half_precision_reduce: torch.dtype | None = None,
                 find_unused_parameters: bool = False) -> None:
        self.device = device
        self.half_precision_reduce = half_precision_reduce
        self.find_unused_parameters = find_unused_parameters

    prepared: torch.nn.Module | None = None  # the model prepare() was given: the one a Trainer may train

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Changes to the model that must come before the optimizer is built (sharding): once per run, by whoever
        builds it (:func:`prepared_strategy`; the builder), never again by the Trainer or :meth:`wrap`."""
        self._prepare(model)
        self.prepared = model
        return model

    def _prepare(self, model: torch.nn.Module) -> None:
        """What this strategy changes in the model before the optimizer exists (nothing: it runs as it is)."""

    def wrap(self, model: torch.nn.Module, module: torch.nn.Module) -> torch.nn.Module:
        """``model`` is the bare model, ``module`` what runs forward (the model, or it compiled)."""
        return module

    def no_sync(self, module: torch.nn.Module):
        return contextlib.nullcontext()

    def model_state_dict(self, model: torch.nn.Module) -> dict:
        """The full model state dict, every name ``model.state_dict()`` of the unwrapped model has (collective)."""
        return model.state_dict()

    @contextlib.contextmanager
    def whole_model(self, model: torch.nn.Module):
        """The model with all its weights on this rank, as a plain module whose forwards run no collective
        (collective to enter): for generation and for the weights of a best-k checkpoint. One process and
        DDP: the model itself."""
        yield model

    def optimizer_state_dict(self, model: torch.nn.Module, optimizer) -> dict:
        return optimizer.state_dict()

    def load(self, model: torch.nn.Module, optimizer, model_state: dict, optimizer_state: dict) -> None:
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)


class DDPStrategy(Strategy):
    name = "ddp"
    summary = "replicas"  # --distributed_strategy's help

    def wrap(self, model, module):
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = DDP(module, device_ids=device_ids, find_unused_parameters=self.find_unused_parameters)
        outlive_reducer(wrapped)  # freed whenever, its Reducer never ends the process group (GIL held: a deadlock)
        if self.half_precision_reduce is not None:
            from bart.training.comm_hooks import register_half_precision_allreduce
            register_half_precision_allreduce(wrapped, self.half_precision_reduce)
        return wrapped

    def no_sync(self, module):
        return module.no_sync()


class FSDPStrategy(Strategy):
    name = "fsdp"
    summary = "FSDP2, sharded"

    def _prepare(self, model):
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
        if isinstance(model, FSDPModule):
            return
        if self.find_unused_parameters:
            raise SystemExit("--distributed_strategy fsdp does not support LayerDrop (layers skipped at random); "
                             "use ddp or set encoder_layerdrop/decoder_layerdrop to 0")
        policy = MixedPrecisionPolicy(reduce_dtype=self.half_precision_reduce)
        for layer in model.layers():
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)  # embeddings, final norms, LM head: the root unit
        # the root returns its logits as a slice of the padded vocabulary's (a view: no copy of B x T x V); FSDP2
        # warns, on every rank and step, that an in-place op on such a view would skip its hook: nothing here
        # changes a model output in place, so that one warning, of this model only, says nothing
        import warnings
        warnings.filterwarnings("ignore", category=UserWarning, message=rf"FSDP2-wrapped module \({type(model).__name__}\) "
                                rf"returned a view tensor")

    def wrap(self, model, module):
        return module  # prepare's fully_shard changed the model in place; a compiled wrapper runs it as it is

    @contextlib.contextmanager
    def no_sync(self, module):
        target = getattr(module, "_orig_mod", module)
        target.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            target.set_requires_gradient_sync(True)

    @staticmethod
    def _options(cpu_offload: bool = True, **kwargs):
        from torch.distributed.checkpoint.state_dict import StateDictOptions
        return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload, **kwargs)

    def model_state_dict(self, model, cpu_offload: bool = True):
        from torch.distributed.checkpoint.state_dict import get_model_state_dict
        state = get_model_state_dict(model, options=self._options(cpu_offload=cpu_offload))
        # tied weights (shared embeddings, LM head): every name the unwrapped model's state dict has, all of
        # them one tensor (gathered once per name, they would be stored once per name), so the files are DDP's
        for alias, canonical in _aliases(model).items():
            if canonical in state:  # cpu_offload: rank 0 alone holds the state
                state[alias] = state[canonical]
        return state

    @contextlib.contextmanager
    def whole_model(self, model):
        """A plain copy of the model holding the gathered full weights on this rank's device (no FSDP
        hooks: each rank may run its own forwards, as generation over a rank's own sources does),
        dropped on leaving."""
        from torch.distributed.fsdp import FSDPModule
        state = self.model_state_dict(model, cpu_offload=False)  # collective: every rank takes part
        plain = next(cls for cls in type(model).__mro__ if not issubclass(cls, FSDPModule))
        with torch.device("meta"):
            whole = plain(model.config)
        whole.load_state_dict(state, assign=True)
        whole.train(model.training)
        try:
            yield whole
        finally:
            del whole, state

    def optimizer_state_dict(self, model, optimizer):
        """``optimizer.state_dict()``'s layout (parameters numbered in the optimizer's order, as DDP's), with
        full tensors; torch's full state dict names parameters instead."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
        state = get_optimizer_state_dict(model, optimizer, options=self._options())
        if not state:  # cpu_offload: rank 0 alone holds the state
            return state
        number = _parameter_numbers(model, optimizer)
        return {"state": {number[name]: value for name, value in state["state"].items()},
                "param_groups": [dict(group, params=[number[name] for name in group["params"]])
                                 for group in state["param_groups"]]}

    def load(self, model, optimizer, model_state, optimizer_state):
        from torch.distributed.checkpoint.state_dict import (
            set_model_state_dict,
            set_optimizer_state_dict,
        )
        # tied weights (shared embeddings, LM head) appear under several names in a state dict; FSDP
        # loads each parameter once, under its first name
        canonical = {name for name, _ in model.named_parameters()} | {name for name, _ in model.named_buffers()}
        missing = sorted(canonical - set(model_state))
        if missing:
            raise KeyError(f"the checkpoint lacks {len(missing)} model entries, e.g. {missing[:5]}")
        set_model_state_dict(model, {k: v for k, v in model_state.items() if k in canonical},
                             options=self._options(strict=False))
        if all(isinstance(number, int) for group in optimizer_state["param_groups"] for number in group["params"]):
            name = {number: name for name, number in _parameter_numbers(model, optimizer).items()}
            optimizer_state = {"state": {name[number]: value for number, value in optimizer_state["state"].items()},
                               "param_groups": [dict(group, params=[name[number] for number in group["params"]])
                                                for group in optimizer_state["param_groups"]]}
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=self._options())


def _parameter_numbers(model: torch.nn.Module, optimizer) -> dict:
    """{parameter name: its number in ``optimizer.state_dict()``} (the optimizer's groups in order)."""
    names = {id(p): name for name, p in model.named_parameters()}
    ordered = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    return {name: number for number, name in enumerate(ordered)}


def _aliases(model: torch.nn.Module) -> dict:
    """{name: first name} of the parameters and buffers registered under several names (tied weights)."""
    first, aliases = {}, {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        canonical = first.setdefault(id(tensor), name)
        if canonical != name:
            aliases[name] = canonical
    return aliases


# name -> class: --distributed_strategy's choices; one process runs the base Strategy whatever the name
STRATEGIES = {"ddp": DDPStrategy, "fsdp": FSDPStrategy}
DEFAULT_STRATEGY = "ddp"  # several processes and no name given


def build_strategy(name: str | None, world_size: int, device: torch.device,
                   half_precision_reduce: torch.dtype | None = None, find_unused_parameters: bool = False) -> Strategy:
    """``name`` None: DDP with several processes; one process: the model as it is. An unknown name is refused."""
    if name is not None and name not in STRATEGIES:
        raise ValueError(f"distributed strategy must be one of {', '.join(STRATEGIES)}, got {name!r}")
    if world_size <= 1:
        return Strategy(device)
    return STRATEGIES[name or DEFAULT_STRATEGY](device, half_precision_reduce, find_unused_parameters)


def prepared_strategy(name: str | None, world_size: int, device: torch.device, model: torch.nn.Module,
                      half_precision_reduce: torch.dtype | None = None,
                      find_unused_parameters: bool = False) -> Strategy:
    """The strategy (:func:`build_strategy`) built and prepared for ``model``: once, before the optimizer is built
    (FSDP replaces the parameters by shards); what a :class:`~bart.training.trainer.Trainer` takes."""
    strategy = build_strategy(name, world_size, device, half_precision_reduce, find_unused_parameters)
    strategy.prepare(model)
    return strategy
