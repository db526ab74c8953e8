"""``apex.optimizers.FusedLAMB`` as ``apex/optimizers/fused_lamb.py`` has it at commit
6424da3b4faa6c8f062da4a48c424fff3f02d42d (see ``apex/__init__.py``); the kernels are ``apex._amp_C``'s.
What it keeps from the original, kind or not:

- defaults lr 1e-3, bias_correction True, betas (0.9, 0.999), eps 1e-6, weight_decay 0.01, amsgrad False
  (True is a RuntimeError), adam_w_mode True, grad_averaging True, set_grad_none True, max_grad_norm 1.0,
  use_nvlamb False; ``adam_w_mode``, ``set_grad_none`` and ``use_nvlamb`` are attributes, not group keys;
- ``max_grad_norm`` is read from ``self.defaults`` (never from a group) and handed to the kernel as it is:
  the kernel divides the gradients by ``norm / max_grad_norm`` when ``norm > max_grad_norm``, so 0 turns
  every gradient into 0, and ``None`` fails the kernel's ``float`` argument;
- ``zero_grad()`` takes no argument (``zero_grad(set_to_none=...)`` is a TypeError);
- the step count is ``group["step"]``, an int raised by one for every group at every step (whether or not
  its parameters have gradients); the state holds only ``exp_avg`` and ``exp_avg_sq``;
- after ``step`` each gradient holds that tensor's LAMB update, not the gradient;
- the closure is called as it is (no ``torch.enable_grad``).
"""
import torch

from apex.multi_tensor_apply import multi_tensor_applier

__all__ = ["FusedLAMB"]


class FusedLAMB(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 amsgrad=False, adam_w_mode=True, grad_averaging=True, set_grad_none=True, max_grad_norm=1.0,
                 use_nvlamb=False):
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        grad_averaging=grad_averaging, max_grad_norm=max_grad_norm)
        super().__init__(params, defaults)
        if not multi_tensor_applier.available:
            raise RuntimeError("apex.optimizers.FusedLAMB requires cuda extensions")
        from apex import _amp_C
        self.multi_tensor_l2norm = _amp_C.multi_tensor_l2norm
        self._dummy_overflow_buf = torch.tensor([0], dtype=torch.int, device=self.param_groups[0]["params"][0].device)
        self.multi_tensor_lamb = _amp_C.multi_tensor_lamb
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.use_nvlamb = use_nvlamb

    def zero_grad(self):
        if self.set_grad_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            super().zero_grad(set_to_none=False)

    def _global_grad_norm(self, device):
        fp32, fp16 = [], []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype == torch.float32:
                    fp32.append(p.grad.data)
                elif p.dtype == torch.float16:
                    fp16.append(p.grad.data)
                else:
                    raise RuntimeError("FusedLAMB only support fp16 and fp32.")
        norm_32, norm_16 = torch.zeros(1, device=device), torch.zeros(1, device=device)
        if fp32:
            norm_32 = multi_tensor_applier(self.multi_tensor_l2norm, self._dummy_overflow_buf, [fp32], False)[0]
        if fp16:
            norm_16 = multi_tensor_applier(self.multi_tensor_l2norm, self._dummy_overflow_buf, [fp16], False)[0]
        # the two norms blended by one more l2norm call
        return multi_tensor_applier(self.multi_tensor_l2norm, self._dummy_overflow_buf, [[norm_32, norm_16]],
                                    False)[0]

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        device = self.param_groups[0]["params"][0].device
        global_grad_norm = self._global_grad_norm(device)
        max_grad_norm = self.defaults["max_grad_norm"]

        for group in self.param_groups:
            bias_correction = 1 if group["bias_correction"] else 0
            beta1, beta2 = group["betas"]
            grad_averaging = 1 if group["grad_averaging"] else 0
            group["step"] = group["step"] + 1 if "step" in group else 1

            lists = {torch.float16: ([], [], [], []), torch.float32: ([], [], [], [])}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.data.is_sparse:
                    raise RuntimeError("FusedLAMB does not support sparse gradients, please consider SparseAdam "
                                       "instead")
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p.data)
                    state["exp_avg_sq"] = torch.zeros_like(p.data)
                if p.dtype not in lists:
                    raise RuntimeError("FusedLAMB only support fp16 and fp32.")
                for tensors, tensor in zip(lists[p.dtype], (p.grad.data, p.data, state["exp_avg"],
                                                            state["exp_avg_sq"])):
                    tensors.append(tensor)

            for dtype in (torch.float16, torch.float32):  # apex launches the fp16 lists first
                if lists[dtype][0]:
                    multi_tensor_applier(self.multi_tensor_lamb, self._dummy_overflow_buf, list(lists[dtype]),
                                         group["lr"], beta1, beta2, group["eps"], group["step"], bias_correction,
                                         group["weight_decay"], grad_averaging, self.adam_w_mode,
                                         global_grad_norm, max_grad_norm, self.use_nvlamb)
        return loss
