import pytest
import torch
from transformers import optimization as hf

from bart.optim import build_scheduler


def _opt(lr=1e-3):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


HF = {
    "linear": lambda o: hf.get_linear_schedule_with_warmup(o, 10, 100),
    "cosine": lambda o: hf.get_cosine_schedule_with_warmup(o, 10, 100),
    "cosine_w_restarts": lambda o: hf.get_cosine_with_hard_restarts_schedule_with_warmup(o, 10, 100, num_cycles=2),
    "polynomial": lambda o: hf.get_polynomial_decay_schedule_with_warmup(o, 10, 100, lr_end=1e-7, power=1.0),
}


@pytest.mark.parametrize("name", sorted(HF))
def test_values_equal_transformers(name):
    ours_opt, hf_opt = _opt(), _opt()
    ours = build_scheduler(ours_opt, name, 10, 100, num_cycles=2 if name == "cosine_w_restarts" else None)
    reference = HF[name](hf_opt)
    for step in range(120):
        assert ours_opt.param_groups[0]["lr"] == pytest.approx(hf_opt.param_groups[0]["lr"], rel=1e-9, abs=1e-15), step
        ours_opt.step(), hf_opt.step(), ours.step(), reference.step()


def test_chosen_values_and_state_round_trip():
    opt = _opt(1e-3)
    sched = build_scheduler(opt, "polynomial", 4, 20)
    lrs = []
    for _ in range(21):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step(), sched.step()
    assert lrs[0] == 0 and lrs[2] == pytest.approx(0.5e-3) and lrs[4] == pytest.approx(1e-3)
    assert lrs[20] == pytest.approx(1e-7)
    opt2 = _opt(1e-3)
    sched2 = build_scheduler(opt2, "polynomial", 4, 20)
    sched2.load_state_dict(sched.state_dict())
    assert sched2.get_last_lr() == sched.get_last_lr()




def test_unknown_schedule_fails():
    with pytest.raises(ValueError, match="unknown lr scheduler"):
        build_scheduler(_opt(), "exponential", 1, 10)
