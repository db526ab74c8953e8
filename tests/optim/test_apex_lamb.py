"""apex's FusedLAMB (the Dockerfile's pinned commit) through its test double (tests/doubles/apex), on CPU:
the double against the CUDA kernels' math, and the apex branch of ``bart.optim.build_optimizer`` against
the project's own ``Lamb``: every option means the same on both, in a training loop and across a resume."""
import math
import os
import tempfile

import pytest
import torch

import bart.optim as optim
from bart.optim import Lamb, build_optimizer, build_scheduler, decay_groups
from tests.helpers.doubles import use_doubles

STEPS = 4


@pytest.fixture
def apex(monkeypatch):
    """The double importable as ``apex`` (a fresh import, dropped after the test)."""
    use_doubles(monkeypatch)
    import apex.optimizers
    return apex


@pytest.fixture
def on_cuda(monkeypatch):
    """build_optimizer's device rule answering "on CUDA", so that its apex branch runs on CPU."""
    monkeypatch.setattr(optim, "_on_cuda", lambda params: True)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8), torch.nn.LayerNorm(8),
                               torch.nn.Linear(8, 5))


def _loss(model, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 10, (6,), generator=gen)
    target = torch.randn(6, 5, generator=gen)
    return ((model(ids) - target) ** 2).mean()


def _train(model, optimizer, steps=STEPS, first_seed=0):
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        _loss(model, first_seed + step).backward()
        optimizer.step()


def _grad_norm(model, seed):
    model.zero_grad(set_to_none=True)
    _loss(model, seed).backward()
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    model.zero_grad(set_to_none=True)
    return norm


def reference_lamb(params, grads_per_step, weight_decays, lr, betas=(0.9, 0.999), eps=1e-6, max_grad_norm=1.0,
                   use_nvlamb=False, bias_correction=True, grad_averaging=True):
    """multi_tensor_lamb.cu in fp64, one tensor at a time: clipping divisor ``norm / max`` when
    ``norm > max`` (else 1), moments, bias correction, ``eps`` outside the square root, decoupled decay,
    trust ratio ``lr * ||p|| / ||u||`` (both non-zero) for decayed tensors or all with use_nvlamb.
    The hyperparameters are the kernel's ``float`` arguments: rounded to fp32 (1 - fp32(0.999) is 1.3e-5
    away from 0.001). Returns the parameters and the first step's updates."""
    lr, eps, betas = _f32(lr), _f32(eps), tuple(_f32(b) for b in betas)
    weight_decays = [_f32(wd) for wd in weight_decays]
    p = [x.detach().double().clone() for x in params]
    m = [torch.zeros_like(x) for x in p]
    v = [torch.zeros_like(x) for x in p]
    beta1, beta2 = betas
    first_updates = None
    for t, grads in enumerate(grads_per_step, 1):
        g = [x.double() for x in grads]
        norm = torch.sqrt(sum((x ** 2).sum() for x in g))
        bound = torch.tensor(_f32(max_grad_norm), dtype=torch.float64)
        divisor = norm / bound if norm > bound else torch.tensor(1.0, dtype=torch.float64)
        bc1, bc2 = (1 - beta1 ** t, 1 - beta2 ** t) if bias_correction else (1.0, 1.0)
        beta3 = 1 - beta1 if grad_averaging else 1.0
        updates = []
        for i, wd in enumerate(weight_decays):
            gi = g[i] / divisor
            m[i] = beta1 * m[i] + beta3 * gi
            v[i] = beta2 * v[i] + (1 - beta2) * gi * gi
            u = (m[i] / bc1) / (torch.sqrt(v[i] / bc2) + eps) + wd * p[i]
            ratio = lr
            if wd != 0 or use_nvlamb:
                pn, un = p[i].norm(), u.norm()
                ratio = lr * pn / un if pn > 0 and un > 0 else lr
            p[i] = p[i] - ratio * u
            updates.append(u)
        first_updates = first_updates or updates
    return p, first_updates


def _f32(value):
    return float(torch.tensor(value, dtype=torch.float32))


# -- the double against the kernel math ------------------------------------------------------------
CASES = {
    "clip_active": dict(max_grad_norm=0.5),
    "clip_inactive": dict(max_grad_norm=100.0),
    "nvlamb": dict(max_grad_norm=1.0, use_nvlamb=True),
    "no_bias_correction_no_averaging": dict(max_grad_norm=1.0, bias_correction=False, grad_averaging=False),
    "max_grad_norm_0_as_apex_has_it": dict(max_grad_norm=0.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_double_computes_the_kernels_math(apex, case):
    options = CASES[case]
    torch.manual_seed(1)
    shapes = [(6, 4), (4,), (3, 3), (5,)]
    decays = [0.01, 0.0, 0.01, 0.0]
    start = [torch.randn(s) for s in shapes]
    grads = [[torch.randn(s) * (3.0 if step % 2 else 0.2) for s in shapes] for step in range(STEPS)]
    params = [torch.nn.Parameter(x.clone()) for x in start]
    groups = [{"params": [p], "weight_decay": wd} for p, wd in zip(params, decays)]
    optimizer = apex.optimizers.FusedLAMB(groups, lr=0.05, **options)
    for step, step_grads in enumerate(grads):
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        optimizer.step()
        if step == 0:
            first_updates = [p.grad.clone() for p in params]  # apex leaves the update in .grad
    expected, expected_updates = reference_lamb(start, grads, decays, lr=0.05, **options)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.detach().double(), e, atol=1e-6, rtol=1e-6)
    for u, e in zip(first_updates, expected_updates):
        torch.testing.assert_close(u.double(), e, atol=1e-6, rtol=1e-6)
    # apex's layout: one int step per group, two state tensors per parameter
    assert [g["step"] for g in optimizer.param_groups] == [STEPS] * 4
    assert all(set(optimizer.state[p]) == {"exp_avg", "exp_avg_sq"} for p in params)
    if case == "max_grad_norm_0_as_apex_has_it":  # apex's own reading of 0: gradients scaled to nothing
        assert torch.equal(params[1].detach(), start[1]) and torch.equal(params[3].detach(), start[3])
        torch.testing.assert_close(params[0].detach(), start[0] * (1 - 0.05) ** STEPS)


def test_the_double_keeps_apexs_checks(apex, monkeypatch):
    params = [torch.nn.Parameter(torch.randn(3, 2))]
    with pytest.raises(RuntimeError, match="AMSGrad"):
        apex.optimizers.FusedLAMB(params, amsgrad=True)
    optimizer = apex.optimizers.FusedLAMB(params)
    assert optimizer.defaults == dict(lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                                      grad_averaging=True, max_grad_norm=1.0)
    assert (optimizer.adam_w_mode, optimizer.set_grad_none, optimizer.use_nvlamb) == (1, True, False)
    params[0].grad = torch.ones(3, 2)
    with pytest.raises(TypeError):  # apex's zero_grad takes no argument
        optimizer.zero_grad(set_to_none=True)
    optimizer.zero_grad()
    assert params[0].grad is None
    bf16 = [torch.nn.Parameter(torch.randn(3, dtype=torch.bfloat16))]
    bf16[0].grad = torch.ones(3, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="only support fp16 and fp32"):
        apex.optimizers.FusedLAMB(bf16).step()
    unbounded = apex.optimizers.FusedLAMB(params, max_grad_norm=None)
    params[0].grad = torch.ones(3, 2)
    with pytest.raises(TypeError, match="max_grad_norm"):  # the kernel's float argument
        unbounded.step()
    monkeypatch.setattr(apex.multi_tensor_apply.MultiTensorApply, "available", False)
    with pytest.raises(RuntimeError, match="requires cuda extensions"):
        apex.optimizers.FusedLAMB(params)


# -- build_optimizer's apex branch against the project's Lamb --------------------------------------
OPTIONS = {
    "clip_active": dict(max_grad_norm=0.05),
    "clip_inactive": dict(max_grad_norm=1e3),
    "max_grad_norm_0": dict(max_grad_norm=0.0),
    "max_grad_norm_none": dict(max_grad_norm=None),
    "max_grad_norm_negative": dict(max_grad_norm=-1.0),
    "nvlamb": dict(max_grad_norm=0.05, use_nvlamb=True),
    "no_weight_decay": dict(max_grad_norm=0.05, weight_decay=0.0),
    "betas_eps": dict(max_grad_norm=0.05, betas=(0.8, 0.99), eps=1e-3),
}


@pytest.mark.parametrize("case", sorted(OPTIONS))
def test_the_apex_branch_trains_as_lamb(apex, on_cuda, case):
    options = dict(lr=0.02, weight_decay=0.01)
    options.update(OPTIONS[case])
    project, fused = _model(), _model()
    start = [p.detach().clone() for p in fused.parameters()]
    lamb, clips = build_optimizer(project, "lamb", prefer_apex=False, **options)
    apex_lamb, apex_clips = build_optimizer(fused, "lamb", **options)
    assert type(lamb) is Lamb and isinstance(apex_lamb, apex.optimizers.FusedLAMB) and clips and apex_clips
    assert type(apex_lamb).__name__ == "FusedLAMB"  # the run banner's test for apex
    if case == "clip_active":
        assert _grad_norm(fused, 0) > 10 * options["max_grad_norm"]
    if case == "clip_inactive":
        assert _grad_norm(fused, 0) < options["max_grad_norm"]
    _train(project, lamb)
    _train(fused, apex_lamb)
    for (name, p), q in zip(project.named_parameters(), fused.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-6, msg=name)
    torch.testing.assert_close(apex_lamb.last_grad_norm, lamb.last_grad_norm, atol=1e-6, rtol=1e-6)
    named = dict(fused.named_parameters())
    if options["max_grad_norm"] is None or options["max_grad_norm"] <= 0:
        # no clipping: the updates are LAMB's, not weight decay alone (apex given 0 scales gradients to 0)
        for name in ("1.bias", "2.weight", "2.bias", "3.bias"):  # undecayed: they move
            assert not torch.allclose(named[name], start[list(named).index(name)]), name
        weight = list(named).index("1.weight")
        assert not torch.allclose(named["1.weight"], start[weight] * (1 - options["lr"]) ** STEPS)
        unclipped = _model()
        _train(unclipped, Lamb(decay_groups(unclipped, 0.01), lr=0.02, max_grad_norm=math.inf))
        for p, q in zip(unclipped.parameters(), fused.parameters()):
            torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-6)


def test_weight_decay_groups_on_the_apex_branch(apex, on_cuda):
    """Biases, LayerNorm weights: weight decay 0 and (without use_nvlamb) no trust ratio, as in Lamb."""
    model = _model()
    optimizer, _ = build_optimizer(model, "lamb", lr=0.02, weight_decay=0.3)
    decays = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    assert {name: decays[id(p)] for name, p in model.named_parameters()} == {
        "0.weight": 0.3, "1.weight": 0.3, "1.bias": 0.0, "2.weight": 0.0, "2.bias": 0.0, "3.weight": 0.3,
        "3.bias": 0.0}
    assert optimizer.defaults["max_grad_norm"] == 1.0
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer.zero_grad()
    _loss(model, 0).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    clip = min(1.0, 1.0 / float(optimizer_norm(grads)))
    optimizer.step()
    for name, p in model.named_parameters():  # first step: m/bc1 / (sqrt(v/bc2) + eps) = g / (|g| + eps)
        g = grads[name] * clip
        adam = g / (g.abs() + 1e-6)
        if decays[id(p)] == 0:
            expected = start[name] - 0.02 * adam
        else:
            u = adam + 0.3 * start[name]
            expected = start[name] - 0.02 * start[name].norm() / u.norm() * u
        torch.testing.assert_close(p.detach(), expected, atol=1e-6, rtol=1e-5, msg=name)


def optimizer_norm(grads):
    return torch.linalg.vector_norm(torch.stack([g.norm() for g in grads.values()]))


def test_apex_only_where_it_can_run(apex, monkeypatch):
    """Which LAMB runs, and the run banner's line saying so (optim.describe_optimizer)."""
    model = _model()
    built = build_optimizer(model, "lamb", lr=0.1, weight_decay=0.0)[0]
    assert type(built) is Lamb and optim.describe_optimizer(built).endswith("Lamb (not on CUDA)")  # on CPU
    monkeypatch.setattr(optim, "_on_cuda", lambda params: True)
    built = build_optimizer(model, "lamb", lr=0.1, weight_decay=0.0)[0]
    assert type(built).__name__ == "FusedLAMB"
    assert optim.describe_optimizer(built) == "LAMB: apex apex.optimizers.FusedLAMB (with bart.optim.Lamb's options)"
    built = build_optimizer(model, "lamb", lr=0.1, weight_decay=0.0, prefer_apex=False)[0]
    assert type(built) is Lamb and optim.describe_optimizer(built).endswith("(apex not asked for)")
    # apex installed without its CUDA extensions imports, then refuses to build FusedLAMB
    monkeypatch.setattr(apex.multi_tensor_apply.MultiTensorApply, "available", False)
    built = build_optimizer(model, "lamb", lr=0.1, weight_decay=0.0)[0]
    assert type(built) is Lamb and "not importable with its CUDA extensions" in optim.describe_optimizer(built)


def test_fsdp_shards_take_the_projects_lamb(apex, on_cuda):
    """FSDP2's parameters are DTensors: apex's kernels cannot take them, the project's Lamb can."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    model = _model()
    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group("gloo", store=dist.FileStore(os.path.join(folder, "store"), 1), rank=0,
                                world_size=1)
        try:
            mesh = init_device_mesh("cpu", (1,))
            layer = model[1]
            layer.weight = torch.nn.Parameter(distribute_tensor(layer.weight.detach(), mesh, [Shard(0)]))
            assert type(build_optimizer(model, "lamb", lr=0.1, weight_decay=0.0)[0]) is Lamb
        finally:
            dist.destroy_process_group()
    assert type(build_optimizer(_model(), "lamb", lr=0.1, weight_decay=0.0)[0]).__name__ == "FusedLAMB"


def test_closure_and_zero_grad_as_torchs(apex, on_cuda):
    model = _model()
    optimizer, _ = build_optimizer(model, "lamb", lr=0.02, weight_decay=0.01)
    reference = _model()
    lamb = Lamb(decay_groups(reference, 0.01), lr=0.02)
    for opt, net in ((optimizer, model), (lamb, reference)):
        def closure(opt=opt, net=net):
            opt.zero_grad()
            loss = _loss(net, 3)
            loss.backward()
            return loss
        with torch.no_grad():  # the closure gets gradients all the same, as in torch's optimizers
            loss = opt.step(closure)
        assert loss.item() == pytest.approx(_loss(_model(), 3).item())
    for p, q in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-6)
    optimizer.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    optimizer.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in model.parameters())


# -- resume: one checkpoint layout for both --------------------------------------------------------
def _layout(state_dict):
    state = state_dict["state"]
    return ([sorted(g) for g in state_dict["param_groups"]],
            {i: {k: (v.dtype, tuple(v.shape)) for k, v in s.items()} for i, s in state.items()})


@pytest.mark.parametrize("first,second", [("apex", "lamb"), ("lamb", "apex"), ("apex", "apex")])
def test_a_checkpoint_resumes_on_either_implementation(apex, on_cuda, tmp_path, first, second):
    """Saved by one, resumed by the other: the same parameters as a run that never stopped (apex's own
    layout, an int step per group and no step in the state, would not load into Lamb)."""
    def build(kind, model):
        opt, _ = build_optimizer(model, "lamb", lr=0.02, weight_decay=0.01, max_grad_norm=0.0,
                                 prefer_apex=kind == "apex")
        return opt, build_scheduler(opt, "linear", 1, 2 * STEPS)

    def train(model, opt, sched, steps):
        for step in steps:
            _train(model, opt, steps=1, first_seed=step)
            sched.step()

    straight = _model()
    opt, sched = build("lamb", straight)
    train(straight, opt, sched, range(2 * STEPS))
    lamb_state = opt.state_dict()

    before = _model()
    opt, sched = build(first, before)
    train(before, opt, sched, range(STEPS))
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert _layout(saved["optimizer"]) == _layout(lamb_state)  # one layout, whichever implementation saved
    for group, lamb_group in zip(saved["optimizer"]["param_groups"], lamb_state["param_groups"]):
        assert {k: v for k, v in group.items() if k != "lr"} == {k: v for k, v in lamb_group.items() if k != "lr"}
    assert [float(s["step"]) for s in saved["optimizer"]["state"].values()] == [STEPS] * 7

    after = _model()
    after.load_state_dict(before.state_dict())
    opt, sched = build(second, after)
    opt.load_state_dict(saved["optimizer"])
    sched.load_state_dict(saved["scheduler"])
    train(after, opt, sched, range(STEPS, 2 * STEPS))
    for (name, p), q in zip(straight.named_parameters(), after.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-6, msg=name)
    if second == "apex":
        assert [g["step"] for g in opt.param_groups] == [2 * STEPS] * 2
        assert opt.defaults["max_grad_norm"] == math.inf


# -- in the training loop ----------------------------------------------------------------------------
def _fit(tmp_path, prefer_apex, precision="fp32", steps=3):
    from bart.modeling import BartForConditionalGeneration
    from bart.training.trainer import Trainer
    from tests.helpers.synthetic import (
        SyntheticBatches,
        one_process,
        run_settings,
        tiny_config,
    )

    torch.manual_seed(0)
    model = BartForConditionalGeneration(tiny_config(dropout=0.0))
    opt, clips = build_optimizer(model, "lamb", lr=1e-2, weight_decay=0.01, max_grad_norm=0.0,
                                 prefer_apex=prefer_apex)
    settings = run_settings(precision, output_dir=str(tmp_path), max_steps=steps, log_freq=1)
    trainer = Trainer(model, opt, build_scheduler(opt, "linear", 1, steps), SyntheticBatches(2, 4), settings,
                      strategy=one_process(model), clips_internally=clips, progress_bar=False)
    trainer.fit()
    return trainer


def test_the_trainer_runs_the_apex_branch_as_lamb(apex, on_cuda, tmp_path):
    """The Trainer's zero_grad(set_to_none=True) (a TypeError on apex's own FusedLAMB) and its logged
    grad_norm (read from the gradients after apex's step, they would be the updates' norm)."""
    fused, lamb = _fit(tmp_path / "apex", True), _fit(tmp_path / "lamb", False)
    assert type(fused.optimizer).__name__ == "FusedLAMB" and type(lamb.optimizer) is Lamb
    assert [h["loss"] for h in fused.history] == pytest.approx([h["loss"] for h in lamb.history], rel=1e-6)
    assert [h["grad_norm"] for h in fused.history] == pytest.approx([h["grad_norm"] for h in lamb.history],
                                                                    rel=1e-6)
    for (name, p), q in zip(lamb.model.named_parameters(), fused.model.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-6, msg=name)


def test_a_skipped_fp16_update_is_skipped_alike(apex, on_cuda):
    """GradScaler: inf/nan gradients skip the whole update (the step count included) on both."""
    results = []
    for prefer_apex in (True, False):
        model = _model()
        opt, _ = build_optimizer(model, "lamb", lr=0.02, weight_decay=0.01, prefer_apex=prefer_apex)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
        for seed, poison in ((0, False), (1, True), (2, False)):
            opt.zero_grad()
            scaler.scale(_loss(model, seed)).backward()
            if poison:
                model[1].weight.grad[0, 0] = float("inf")
                before = [p.detach().clone() for p in model.parameters()]
            scaler.step(opt)
            scaler.update()
            if poison:
                assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
        assert scaler.get_scale() == 2.0 ** 7
        steps = {float(s["step"]) for s in opt.state_dict()["state"].values()}
        assert steps == {2.0}
        results.append([p.detach().clone() for p in model.parameters()])
    for p, q in zip(*results):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-6)
