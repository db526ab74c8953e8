"""Cross-entropy over a large vocabulary with one logits-sized buffer instead of three.

``F.cross_entropy`` keeps the log-probabilities for backward, then builds a zero-filled gradient of
the same (tokens x vocab) size for the NLL step and a third one in log_softmax's backward. Here the
backward turns the saved log-probabilities into the gradient in place: softmax minus the (smoothed)
one-hot target, times each token's weight. Same values as ``F.cross_entropy`` (ignore_index,
label_smoothing, mean/sum reduction) to float tolerance; the logits' gradient is all it returns.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, ignore_index: int, smoothing: float,
                reduction: str) -> torch.Tensor:
        log_probs = torch.log_softmax(logits, dim=-1)
        valid = labels != ignore_index
        target = labels.masked_fill(~valid, 0)[:, None]
        per_token = -log_probs.gather(1, target).squeeze(1)
        if smoothing > 0:
            per_token = (1 - smoothing) * per_token - smoothing * log_probs.mean(dim=-1)
        per_token = per_token.masked_fill(~valid, 0.0)
        count = valid.sum()
        loss = per_token.sum()
        if reduction == "mean":
            loss = loss / count  # nan without any target, as F.cross_entropy
        ctx.save_for_backward(log_probs, target, valid, count)
        ctx.smoothing, ctx.reduction = smoothing, reduction
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        log_probs, target, valid, count = ctx.saved_tensors
        weight = grad_loss / count if ctx.reduction == "mean" else grad_loss
        row_weight = (valid.to(log_probs.dtype) * weight)[:, None]
        grad = log_probs.exp_()  # the saved buffer becomes the gradient: no other logits-sized tensor
        if ctx.smoothing > 0:
            grad.sub_(ctx.smoothing / grad.shape[-1])
        grad.scatter_add_(1, target, torch.full_like(target, -(1 - ctx.smoothing), dtype=grad.dtype))
        grad.mul_(row_weight)
        return grad, None, None, None, None


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean") -> torch.Tensor:
    """``F.cross_entropy(logits, labels, ignore_index, label_smoothing, reduction)`` for 2-D logits
    (tokens x vocab) and 1-D labels, with ``reduction`` "mean" or "sum"."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"expected (tokens, vocab) logits and (tokens,) labels, got {tuple(logits.shape)} "
                         f"and {tuple(labels.shape)}")
    return _CrossEntropy.apply(logits, labels, ignore_index, float(label_smoothing), reduction)
