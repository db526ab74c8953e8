"""The multi-tensor LAMB against a plain per-tensor loop of the published math."""
import math

import pytest
import torch

from bart.optim import Lamb, decay_groups


def reference_lamb(params, grads_per_step, lr, wd_per_param, betas=(0.9, 0.999), eps=1e-6, max_norm=1.0,
                   use_nvlamb=False, skip=()):
    """One tensor at a time, straight from the formulas. ``skip``: steps whose update is skipped."""
    params = [p.clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    step = 0
    for i, grads in enumerate(grads_per_step):
        if i in skip:
            continue
        step += 1
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        factor = max_norm / norm if (max_norm > 0 and norm > max_norm) else 1.0
        bc1, bc2 = 1 - betas[0] ** step, 1 - betas[1] ** step
        for j, p in enumerate(params):
            g = grads[j] * factor
            m[j] = betas[0] * m[j] + (1 - betas[0]) * g
            v[j] = betas[1] * v[j] + (1 - betas[1]) * g * g
            u = (m[j] / bc1) / ((v[j] / bc2).sqrt() + eps) + wd_per_param[j] * p
            ratio = lr
            if wd_per_param[j] != 0 or use_nvlamb:
                pn, un = float(p.norm()), float(u.norm())
                if pn > 0 and un > 0:
                    ratio = lr * pn / un
            params[j] = p - ratio * u
    return params


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("grad_scale", [0.01, 10.0])  # clipping inactive / active (max norm 1)
@pytest.mark.parametrize("use_nvlamb", [False, True])
def test_matches_reference(weight_decay, grad_scale, use_nvlamb):
    model = _model()
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]
    groups = decay_groups(model, weight_decay)
    wd = [weight_decay if p.dim() >= 2 else 0.0 for p in params]
    opt = Lamb(groups, lr=0.01, max_grad_norm=1.0, use_nvlamb=use_nvlamb)
    g = torch.Generator().manual_seed(1)
    grads_per_step = [[torch.randn(p.shape, generator=g) * grad_scale for p in params] for _ in range(4)]
    norms = []
    for grads in grads_per_step:
        for p, grad in zip(params, grads):
            p.grad = grad.clone()
        opt.step()
        norms.append(float(opt.last_grad_norm))
    expected = reference_lamb(start, grads_per_step, 0.01, wd, use_nvlamb=use_nvlamb)
    for got, want in zip(params, expected):
        torch.testing.assert_close(got.detach(), want, atol=1e-6, rtol=1e-5)
    assert norms[0] == pytest.approx(math.sqrt(sum(float((x ** 2).sum()) for x in grads_per_step[0])), rel=1e-5)


def test_grad_scaler_skips_inf_step_and_keeps_counter():
    model = _model()
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]
    opt = Lamb(decay_groups(model, 0.1), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    g = torch.Generator().manual_seed(2)
    grads_per_step = [[torch.randn(p.shape, generator=g) for p in params] for _ in range(3)]
    grads_per_step[1][0][0, 0] = float("inf")
    for grads in grads_per_step:
        scale = float(scaler.scale(torch.ones(())))  # as a scaled loss would be
        for p, grad in zip(params, grads):
            p.grad = grad.clone() * scale  # gradients as a scaled loss produces them
        scaler.step(opt)
        scaler.update()
    assert float(opt.state[params[0]]["step"]) == 2.0
    expected = reference_lamb(start, grads_per_step, 0.01, [0.1 if p.dim() >= 2 else 0 for p in params], skip={1})
    for got, want in zip(params, expected):
        torch.testing.assert_close(got.detach(), want, atol=1e-6, rtol=1e-5)


def test_half_parameters_are_refused():
    with pytest.raises(TypeError, match="fp32"):
        Lamb([torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.bfloat16))])


def test_decay_groups_by_dimension():
    model = _model()
    decay, no_decay = decay_groups(model, 0.1)
    assert all(p.dim() >= 2 for p in decay["params"]) and len(decay["params"]) == 2
    assert all(p.dim() == 1 for p in no_decay["params"]) and len(no_decay["params"]) == 4
    assert no_decay["weight_decay"] == 0.0
