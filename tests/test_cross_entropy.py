"""The model's cross-entropy equals F.cross_entropy in value and in the logits' gradient."""
import pytest
import torch
import torch.nn.functional as F

from bart.modeling.cross_entropy import cross_entropy


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_matches_torch(reduction, smoothing):
    generator = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(37, 101, generator=generator)).requires_grad_()
    labels = torch.randint(0, 101, (37,), generator=generator)
    labels[[0, 5, 6, 30]] = -100  # padding
    upstream = torch.tensor(2.5)  # a loss scale or an accumulation factor on top of the loss
    expected = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=smoothing, reduction=reduction)
    (expected * upstream).backward()
    expected_grad, logits.grad = logits.grad, None
    got = cross_entropy(logits, labels, ignore_index=-100, label_smoothing=smoothing, reduction=reduction)
    (got * upstream).backward()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logits.grad, expected_grad, rtol=1e-6, atol=1e-7)
    assert not logits.grad[[0, 5, 6, 30]].any()  # ignored tokens get no gradient


def test_logits_left_untouched_and_errors():
    logits = torch.randn(4, 9, requires_grad=True)
    before = logits.detach().clone()
    cross_entropy(logits, torch.tensor([1, 2, -100, 8])).backward()
    assert torch.equal(logits.detach(), before)
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy(logits, torch.tensor([1, 2, 3, 4]), reduction="none")
    with pytest.raises(ValueError, match="tokens"):
        cross_entropy(logits[None], torch.tensor([[1, 2, 3, 4]]))
