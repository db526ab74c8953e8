"""Optimizers (multi-tensor LAMB, AdamW, Adafactor) with weight-decay groups, and LR schedules.

apex's FusedLAMB is used when it imports with its CUDA extensions and the parameters are whole CUDA tensors (not
under FSDP). It runs behind ``_AsProjectLamb``, so every option, ``zero_grad``, ``last_grad_norm`` and the
checkpoint layout are :class:`~bart.optim.lamb.Lamb`'s. ``lamb_optimizer(groups, FusedLAMB)`` is the seam the
tests use with ``tests/doubles/apex``.
"""
from __future__ import annotations

import math

import torch

from bart.optim.lamb import Lamb
from bart.optim.schedulers import SCHEDULES, build_scheduler, lr_factor

__all__ = ["Lamb", "OPTIMIZERS", "TRAINING_BYTES", "build_optimizer", "describe_optimizer", "build_scheduler", "lr_factor", "SCHEDULES", "decay_groups", "lamb_optimizer"]


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay for matrices and embeddings only: parameters with fewer than 2 dimensions
    (biases, LayerNorm weights) are not decayed. Grouped by dimension, not by name."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _apex_lamb():
    """apex's FusedLAMB class when it can run: importable, and apex built with its CUDA extensions (a
    Python-only apex imports, then refuses to construct the optimizer)."""
    try:
        from apex.multi_tensor_apply import multi_tensor_applier
        from apex.optimizers import FusedLAMB
    except Exception:  # apex is optional
        return None
    return FusedLAMB if multi_tensor_applier.available else None


def _on_cuda(params: list) -> bool:
    return bool(params) and all(p.is_cuda for p in params)


def _sharded(params: list) -> bool:
    """FSDP2's parameters are DTensor shards: apex's kernels need whole, plain tensors (their storage,
    and one trust ratio per whole tensor); the project's Lamb handles DTensors."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return False
    return any(isinstance(p, DTensor) for p in params)


def _lamb_clips(max_grad_norm) -> bool:
    """``bart.optim.Lamb``'s rule: clipping by the global norm only for a positive bound (0, None or a
    negative value: no clipping)."""
    return bool(max_grad_norm) and max_grad_norm > 0


class _AsProjectLamb:
    """Mixed in front of apex's FusedLAMB (``_apex_class``): every option and the interface mean what they
    mean in ``bart.optim.Lamb``. apex's kernels do the arithmetic; this class only translates.

    - ``max_grad_norm`` 0/None/negative: no clipping (apex's kernel divides the gradients by
      ``norm / max_grad_norm``, so 0 would zero them; it is given ``inf``, which its ``norm > bound`` test
      never passes);
    - ``zero_grad(set_to_none=True)`` as torch's (apex's takes no argument);
    - ``last_grad_norm``: the global gradient norm before clipping, a device tensor, as Lamb keeps it
      (after apex's step the gradients hold the updates, so it cannot be read from them afterwards);
    - ``state_dict`` in Lamb's layout (a ``step`` tensor in each parameter's state, ``use_nvlamb`` and the
      given ``max_grad_norm`` in each group) and ``load_state_dict`` from either layout: a checkpoint
      resumes on either implementation.
    """

    def __init__(self, params, lr: float, betas, eps: float, weight_decay: float, max_grad_norm, use_nvlamb: bool,
                 bias_correction: bool = True, grad_averaging: bool = True) -> None:
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"Lamb: invalid lr {lr}, eps {eps} or betas {betas}")
        self._max_grad_norm_given = max_grad_norm
        bound = float(max_grad_norm) if _lamb_clips(max_grad_norm) else math.inf
        super().__init__(params, lr=lr, bias_correction=bias_correction, betas=tuple(betas), eps=eps,
                         weight_decay=weight_decay, amsgrad=False, adam_w_mode=True, grad_averaging=grad_averaging,
                         set_grad_none=True, max_grad_norm=bound, use_nvlamb=bool(use_nvlamb))
        self.last_grad_norm: torch.Tensor | None = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        torch.optim.Optimizer.zero_grad(self, set_to_none=set_to_none)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
            if grads:
                norms = [n.float() for n in torch._foreach_norm(grads)]
                self.last_grad_norm = torch.linalg.vector_norm(torch.stack(norms))
        super().step()
        return loss

    def state_dict(self) -> dict:
        saved = super().state_dict()  # its groups are fresh dicts; its state entries are self.state's own
        state = dict(saved["state"])
        for group in saved["param_groups"]:
            step = group.pop("step", None)
            group["use_nvlamb"] = self.use_nvlamb
            group["max_grad_norm"] = self._max_grad_norm_given
            for index in group["params"]:
                if step is not None and index in state:
                    device = state[index]["exp_avg"].device
                    state[index] = {"step": torch.tensor(float(step), dtype=torch.float32, device=device),
                                    **state[index]}
        return {**saved, "state": state}

    def load_state_dict(self, state_dict: dict) -> None:
        state = {index: dict(entry) for index, entry in state_dict["state"].items()}
        groups = [dict(group) for group in state_dict["param_groups"]]
        for group in groups:
            steps = [state[i].pop("step") for i in group["params"] if "step" in state.get(i, {})]
            if "step" not in group and steps:  # Lamb's per-parameter counts: apex keeps one per group
                group["step"] = int(max(float(s) for s in steps))
            group["max_grad_norm"] = self.defaults["max_grad_norm"]
        nvlamb = {group.pop("use_nvlamb") for group in groups if "use_nvlamb" in group}
        if len(nvlamb) > 1:
            raise ValueError("the optimizer state has groups with and without use_nvlamb; apex's FusedLAMB "
                             "applies one setting to all groups")
        super().load_state_dict({**state_dict, "state": state, "param_groups": groups})
        if nvlamb:  # as in Lamb, where the loaded groups carry it
            self.use_nvlamb = nvlamb.pop()


_APEX_CLASSES: dict = {}


def _apex_class(fused_lamb: type) -> type:
    """apex's FusedLAMB class (or a stand-in with its interface) behind ``_AsProjectLamb``. Named FusedLAMB:
    the run banner reports it by that name."""
    if fused_lamb not in _APEX_CLASSES:
        _APEX_CLASSES[fused_lamb] = type("FusedLAMB", (_AsProjectLamb, fused_lamb),
                                         {"__module__": __name__, "__qualname__": "FusedLAMB",
                                          "__doc__": f"{fused_lamb.__module__}.FusedLAMB with bart.optim.Lamb's "
                                                     f"options and interface (see _AsProjectLamb)."})
    return _APEX_CLASSES[fused_lamb]


def lamb_optimizer(groups: list[dict], fused_lamb: type | None = None, *, lr: float, weight_decay: float,
                   betas=(0.9, 0.999), eps: float = 1e-6, max_grad_norm: float | None = 1.0,
                   use_nvlamb: bool = False):
    """The LAMB that ``build_optimizer`` builds: over apex's FusedLAMB class ``fused_lamb`` when given, else
    ``bart.optim.Lamb``. Either way the same options mean the same thing (decoupled weight decay per group,
    bias correction, gradient averaging, trust ratio for decayed groups or every group with ``use_nvlamb``,
    clipping by the global norm only for ``max_grad_norm`` > 0)."""
    if fused_lamb is not None:
        return _apex_class(fused_lamb)(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                       max_grad_norm=max_grad_norm, use_nvlamb=use_nvlamb)
    return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                use_nvlamb=use_nvlamb)


def describe_optimizer(optimizer: torch.optim.Optimizer) -> str:
    """What ran, for the run banner: apex's FusedLAMB (and its module), the project's Lamb and why apex was
    not used, or torch's optimizer and its kernel."""
    if isinstance(optimizer, _AsProjectLamb):
        apex_class = next(c for c in type(optimizer).__mro__[1:] if c.__name__ == "FusedLAMB")
        return f"LAMB: apex {apex_class.__module__}.FusedLAMB (with bart.optim.Lamb's options)"
    if isinstance(optimizer, Lamb):
        params = [p for g in optimizer.param_groups for p in g["params"]]
        why = ("not on CUDA" if not _on_cuda(params) else "FSDP shards: apex's kernels take whole tensors"
               if _sharded(params) else "apex FusedLAMB not importable with its CUDA extensions"
               if _apex_lamb() is None else "apex not asked for")
        return f"LAMB: the project's multi-tensor bart.optim.Lamb ({why})"
    defaults = optimizer.defaults
    kernel = "fused" if defaults.get("fused") else "foreach" if defaults.get("foreach") else "for-loop"
    return f"{type(optimizer).__name__} (torch, {kernel})"


OPTIMIZERS = ("adamw", "lamb", "adafactor")  # --optim's choices; AdamW the default
# bytes each trainable fp32 parameter adds once the model is built: its gradient (4) and the optimizer's state
# (AdamW's and LAMB's two moments: 8; Adafactor's factored rows and columns: about nothing per parameter)
TRAINING_BYTES = {"adamw": 12, "lamb": 12, "adafactor": 4}


def build_optimizer(model: torch.nn.Module, name: str, lr: float, weight_decay: float,
                    betas=(0.9, 0.999), eps: float = 1e-6, max_grad_norm: float = 1.0,
                    use_nvlamb: bool = False, prefer_apex: bool = True):
    """Returns ``(optimizer, clips_internally)``. LAMB clips by the global norm itself; for AdamW and Adafactor
    the training loop calls ``clip_grad_norm_``. Adafactor (torch's) keeps a row and a column of second-moment
    statistics per matrix and no first moment: far less state than AdamW's two full moments. apex's FusedLAMB is used when it is importable with its CUDA
    extensions and the parameters are whole tensors on CUDA (not FSDP shards)."""
    groups = decay_groups(model, weight_decay)
    params = [p for p in model.parameters() if p.requires_grad]
    on_cuda = _on_cuda(params)
    if name == "lamb":
        fused_lamb = _apex_lamb() if (prefer_apex and on_cuda and not _sharded(params)) else None
        return lamb_optimizer(groups, fused_lamb, lr=lr, weight_decay=weight_decay, betas=betas, eps=eps,
                              max_grad_norm=max_grad_norm, use_nvlamb=use_nvlamb), True
    if name == "adamw":
        kind = {"fused": True} if on_cuda else {"foreach": True}
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **kind), False
    if name == "adafactor":  # torch's: factored second moments (a row and a column per matrix), no first moment
        return torch.optim.Adafactor(groups, lr=lr, foreach=True), False
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
