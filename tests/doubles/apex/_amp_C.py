"""Stand-in for the two ``amp_C`` kernels FusedLAMB calls, following ``csrc/multi_tensor_l2norm_kernel.cu``
(``multi_tensor_l2norm_cuda``) and ``csrc/multi_tensor_lamb.cu`` (``multi_tensor_lamb_cuda``: stage 1 and
stage 2) at apex commit 6424da3b4faa6c8f062da4a48c424fff3f02d42d. Per tensor, in torch, the math in fp32
(the kernels' ``MATH_T``) in their order of operations; loads and stores in the tensors' own dtype.

The arguments that the C++ signature declares ``float``/``int`` are checked as pybind11 checks them: a
number is accepted (and a ``float`` rounded to fp32), anything else (``None`` included) is a TypeError.
"""
from __future__ import annotations

import math
import numbers

import torch


def _f32(value: float) -> float:
    """``value`` rounded to fp32, as a Python float (exact)."""
    return float(torch.tensor(value, dtype=torch.float32))


def _number(fn: str, name: str, value, kind=float):
    ok = isinstance(value, numbers.Real) if kind is float else isinstance(value, numbers.Integral)
    if not ok:
        raise TypeError(f"{fn}(): incompatible function arguments: {name} must be {kind.__name__}, "
                        f"got {value!r}")
    return _f32(value) if kind is float else int(value)


def _sums_of_squares(tensors):
    return [t.detach().float().square().sum() for t in tensors]


def multi_tensor_l2norm(chunk_size, noop_flag, tensor_lists, per_tensor=None):
    """Returns ``(norm of all tensors, shape [1]; per-tensor norms, shape [n], or empty)``, fp32 on the
    tensors' device. A non-finite partial sum sets ``noop_flag`` to 1, as the kernel does."""
    tensors = tensor_lists[0]
    device = tensors[0].device
    with torch.no_grad():
        sums = _sums_of_squares(tensors)
        stacked = torch.stack(sums)
        if not bool(torch.isfinite(stacked).all()):
            noop_flag.fill_(1)
        total = stacked.sum().sqrt().reshape(1)
        each = stacked.sqrt() if per_tensor else torch.empty(0, dtype=torch.float32, device=device)
    return total, each


def multi_tensor_lamb(chunk_size, noop_flag, tensor_lists, lr, beta1, beta2, epsilon, step, bias_correction,
                      weight_decay, grad_averaging, mode, global_grad_norm, max_grad_norm, use_nvlamb=None):
    """``tensor_lists`` = [grads, params, exp_avgs, exp_avg_sqs], all of one dtype (fp16 or fp32).
    The grads are overwritten by the update (stage 1), then the params take the step (stage 2)."""
    fn = "multi_tensor_lamb"
    lr, beta1, beta2 = (_number(fn, n, v) for n, v in (("lr", lr), ("beta1", beta1), ("beta2", beta2)))
    epsilon, decay = _number(fn, "epsilon", epsilon), _number(fn, "weight_decay", weight_decay)
    max_grad_norm = _number(fn, "max_grad_norm", max_grad_norm)
    step, bias_correction = _number(fn, "step", step, int), _number(fn, "bias_correction", bias_correction, int)
    grad_averaging, mode = _number(fn, "grad_averaging", grad_averaging, int), _number(fn, "mode", mode, int)
    if not isinstance(global_grad_norm, torch.Tensor):
        raise TypeError(f"{fn}(): incompatible function arguments: global_grad_norm must be a Tensor")
    use_nvlamb = bool(use_nvlamb) if use_nvlamb is not None else False
    grads, params, exp_avgs, exp_avg_sqs = tensor_lists

    # host side: bias corrections as float(1 - std::pow(beta1, step)) (a double pow), beta3 in float
    bias_correction1 = bias_correction2 = 1.0
    if bias_correction == 1:
        bias_correction1 = _f32(1 - math.pow(beta1, step))
        bias_correction2 = _f32(1 - math.pow(beta2, step))
    beta3 = _f32(1 - beta1) if grad_averaging == 1 else 1.0
    one_minus_beta2 = _f32(1 - beta2)

    with torch.no_grad():
        # per-tensor parameter norms, taken before stage 1
        _, param_norms = multi_tensor_l2norm(chunk_size, noop_flag, [params], True)

        # stage 1: every block computes the same clipping divisor from the global norm
        norm = global_grad_norm.reshape(-1)[0].float()
        bound = torch.tensor(max_grad_norm, dtype=torch.float32, device=norm.device)
        clipped_global_grad_norm = torch.where(norm > bound, norm / bound, torch.ones_like(norm))
        for g, p, m, v in zip(grads, params, exp_avgs, exp_avg_sqs):
            r_g, r_m, r_v = g.float(), m.float(), v.float()
            r_p = p.float() if decay != 0 else torch.zeros_like(r_g)  # the kernel skips loading p
            scaled_grad = r_g / clipped_global_grad_norm.to(r_g.device)
            if mode == 0:  # MOMENT_MODE_0: L2 regularisation on the scaled gradient
                scaled_grad = scaled_grad + decay * r_p
            r_m = r_m * beta1 + beta3 * scaled_grad
            r_v = r_v * beta2 + (one_minus_beta2 * scaled_grad) * scaled_grad
            next_m_unbiased = r_m / bias_correction1
            next_v_unbiased = r_v / bias_correction2
            denom = next_v_unbiased.sqrt() + epsilon
            if mode == 0:
                update = next_m_unbiased / denom
            else:  # MOMENT_MODE_1: decoupled weight decay
                update = (next_m_unbiased / denom) + (decay * r_p)
            g.copy_(update)
            m.copy_(r_m)
            v.copy_(r_v)

        # per-tensor norms of the updates, read back from the gradients' storage
        _, update_norms = multi_tensor_l2norm(chunk_size, noop_flag, [grads], True)

        # stage 2: the trust ratio per tensor
        for i, (update, p) in enumerate(zip(grads, params)):
            ratio = torch.tensor(lr, dtype=torch.float32, device=p.device)
            if use_nvlamb or decay != 0.0:
                param_norm, update_norm = param_norms[i], update_norms[i]
                ratio = torch.where((update_norm != 0) & (param_norm != 0), lr * (param_norm / update_norm), ratio)
            p.copy_(p.float() - ratio * update.float())
