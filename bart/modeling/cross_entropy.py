"""Cross-entropy over a large vocabulary with one logits-sized buffer instead of three.

``F.cross_entropy`` keeps the log-probabilities for backward, then builds a zero-filled gradient of
the same (tokens x vocab) size for the NLL step and a third one in log_softmax's backward. Here the
backward turns the saved log-probabilities into the gradient in place: softmax minus the (smoothed)
one-hot target, times each token's weight. Same values as ``F.cross_entropy`` (ignore_index,
label_smoothing, mean/sum reduction) to float tolerance; the logits' gradient is all it returns.
"""
from __future__ import annotations

import contextlib

import torch
from torch.autograd.function import once_differentiable

from bart.runtime.precision import autocast_in_effect


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, ignore_index: int, smoothing: float,
                reduction: str, classes: int) -> torch.Tensor:
        log_probs = torch.log_softmax(logits, dim=-1)
        valid = labels != ignore_index
        target = labels.masked_fill(~valid, 0)[:, None]
        per_token = -log_probs.gather(1, target).squeeze(1)
        if smoothing > 0:
            per_token = (1 - smoothing) * per_token - smoothing * log_probs[:, :classes].mean(dim=-1)
        per_token = per_token.masked_fill(~valid, 0.0)
        count = valid.sum()
        loss = per_token.sum()
        if reduction == "mean":
            loss = loss / count  # nan without any target, as F.cross_entropy
        ctx.save_for_backward(log_probs, target, valid, count)
        ctx.smoothing, ctx.reduction, ctx.classes = smoothing, reduction, classes
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        log_probs, target, valid, count = ctx.saved_tensors
        weight = grad_loss / count if ctx.reduction == "mean" else grad_loss
        row_weight = (valid.to(log_probs.dtype) * weight)[:, None]
        grad = log_probs.exp_()  # the saved buffer becomes the gradient: no other logits-sized tensor
        if ctx.smoothing > 0:
            grad[:, :ctx.classes].sub_(ctx.smoothing / ctx.classes)
        grad.scatter_add_(1, target, torch.full_like(target, -(1 - ctx.smoothing), dtype=grad.dtype))
        grad.mul_(row_weight)
        return grad, None, None, None, None, None


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean", classes: int | None = None) -> torch.Tensor:
    """``F.cross_entropy(logits, labels, ignore_index, label_smoothing, reduction)`` for 2-D logits
    (tokens x vocab) and 1-D labels, with ``reduction`` "mean" or "sum". ``classes``: the real classes, the
    first columns (default all); the columns beyond (a padded vocabulary's) must be -inf: they get no
    probability, no smoothing mass and a zero gradient."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"expected (tokens, vocab) logits and (tokens,) labels, got {tuple(logits.shape)} "
                         f"and {tuple(labels.shape)}")
    return _CrossEntropy.apply(logits, labels, ignore_index, float(label_smoothing), reduction,
                               logits.shape[1] if classes is None else int(classes))


class _LinearCrossEntropy(torch.autograd.Function):
    """``cross_entropy(hidden @ weight.T + bias, labels)`` without the (tokens x vocab) logits.

    The tokens are taken a chunk at a time; for each chunk the forward pass computes the logits,
    the loss and, right away, the gradients of hidden and weight (softmax minus the smoothed
    one-hot, times each token's weight), then drops the logits. Backward only scales the stored
    gradients by the incoming one. Peak extra memory is one chunk's logits instead of the whole
    batch's (bf16 logits plus fp32 log-probabilities: ~7.7 GB for 200 x 128 tokens over 50k words).
    Under autocast the matrix products run in the autocast dtype, the softmax in fp32.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, ignore_index, smoothing, reduction, chunk_tokens, classes):
        device_type = hidden.device.type
        autocast = autocast_in_effect(device_type)
        dtype = hidden.dtype if autocast is None else autocast
        with torch.autocast(device_type, enabled=False) if autocast is not None else contextlib.nullcontext():
            h, w = hidden.to(dtype), weight.to(dtype)
            acc = torch.promote_types(dtype, torch.float32)  # softmax and sums: fp32 at least
            b = None if bias is None else bias.to(dtype)
            valid = labels != ignore_index
            count = valid.sum()
            denominator = count.to(acc) if reduction == "mean" else torch.ones((), dtype=acc, device=h.device)
            grad_hidden = torch.empty_like(h)
            grad_weight = torch.zeros(w.shape, dtype=acc, device=w.device)
            loss = torch.zeros((), dtype=acc, device=h.device)
            vocab = classes
            # the loop counts chunks, not tokens: a compiled model (dynamic sizes) guards on the number of chunks,
            # where range(0, tokens, chunk_tokens) made it guard on the token count itself (tokens == 22): a recompile
            # for every batch of another size, until dynamo's recompile limit turned the model eager
            for chunk in range((h.shape[0] + chunk_tokens - 1) // chunk_tokens):
                rows = slice(chunk * chunk_tokens, (chunk + 1) * chunk_tokens)
                logits = torch.nn.functional.linear(h[rows], w, b).to(acc)
                log_probs = torch.log_softmax(logits, dim=-1)
                del logits
                keep = valid[rows]
                target = labels[rows].masked_fill(~keep, 0)[:, None]
                per_token = -log_probs.gather(1, target).squeeze(1)
                if smoothing > 0:
                    per_token = (1 - smoothing) * per_token - smoothing * log_probs[:, :vocab].mean(dim=-1)
                loss += per_token.masked_fill(~keep, 0.0).sum()
                grad = log_probs.exp_()
                if smoothing > 0:
                    grad[:, :vocab].sub_(smoothing / vocab)
                grad.scatter_add_(1, target, torch.full_like(target, -(1 - smoothing), dtype=grad.dtype))
                grad.mul_((keep.to(grad.dtype) / denominator)[:, None])
                grad = grad.to(dtype)
                grad_hidden[rows] = grad @ w
                grad_weight += (grad.t() @ h[rows]).to(acc)
            loss = loss / denominator  # nan without any target under "mean", as F.cross_entropy
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.dtypes = (hidden.dtype, weight.dtype)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        return ((grad_hidden * grad_loss).to(hidden_dtype), (grad_weight * grad_loss).to(weight_dtype),
                None, None, None, None, None, None, None)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                         bias: torch.Tensor | None = None, ignore_index: int = -100, label_smoothing: float = 0.0,
                         reduction: str = "mean", chunk_tokens: int | None = None,
                         classes: int | None = None) -> torch.Tensor:
    """``cross_entropy(F.linear(hidden, weight, bias), labels, ...)`` for 2-D hidden (tokens x d) and
    1-D labels, computed in chunks of tokens so the whole logits tensor never exists. Gradients
    flow to ``hidden`` and ``weight``; ``bias`` is treated as a constant (BART's final_logits_bias
    is a buffer). ``classes``: as :func:`cross_entropy`'s (the weight's rows beyond it: padding, -inf in
    ``bias``)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if hidden.dim() != 2 or labels.shape != hidden.shape[:1]:
        raise ValueError(f"expected (tokens, d) hidden states and (tokens,) labels, got {tuple(hidden.shape)} "
                         f"and {tuple(labels.shape)}")
    if chunk_tokens is None:  # about 256 MB of fp32 log-probabilities per chunk
        chunk_tokens = max(256, (1 << 26) // weight.shape[0])
    bias = None if bias is None else bias.detach()
    return _LinearCrossEntropy.apply(hidden, weight, bias, labels, ignore_index, float(label_smoothing),
                                     reduction, int(chunk_tokens), weight.shape[0] if classes is None else int(classes))
