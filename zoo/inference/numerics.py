"""The numerics every structure shares: one finite stand-in for -inf, one log-sum-exp, a safe log, the
finite and gradient checks, Gumbel noise. Structure-neutral: chains, semi-Markov chains and trees
import these, nothing structure-specific lives here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

NEG = -1e30  # a finite stand-in for -inf where a max must stay finite


def detached_max(x: Tensor, dim: int = -1) -> Tensor:
    """The detached max over ``dim`` (kept), finite (an all -inf slice gives NEG, not -inf; float16,
    whose range ends at -65504, its lowest finite value)."""
    return x.detach().amax(dim, keepdim=True).clamp_min(max(NEG, torch.finfo(x.dtype).min))


def logsumexp(x: Tensor, dim: int = -1) -> Tensor:
    """log-sum-exp over ``dim`` about the detached max; where every entry is -inf, -inf with a zero (not
    NaN) gradient. Written out rather than torch.logsumexp, whose gradient exp(x - result) reuses its
    rounded result: in bfloat16 (autocast), 0.125 apart at 30 nats, the softmax weights are off by up
    to 12 % (a semi-Markov entropy 3.7 nats off in tests/numerics/test_autocast.py)."""
    m = detached_max(x, dim)
    total = (x - m).exp().sum(dim)  # 0 (every entry -inf) or at least 1: no subnormal to take care of
    tiny = torch.finfo(total.dtype).tiny
    return torch.where(total > 0, total.clamp_min(tiny).log(), float("-inf")) + m.squeeze(dim)


def safe_log(x: Tensor) -> Tensor:
    """log of a non-negative tensor, with log 0 = -inf and no NaN gradient at 0. A subnormal entry (a
    softmax's tail in float32: below 1.2e-38, e^-87.3) keeps its exact log; its gradient 1 / x, which
    overflows there, is taken at the smallest normal number (finite, and too small by x / 1.2e-38:
    where that matters, give the factors' logs or float64)."""
    if x.requires_grad and torch.is_grad_enabled():
        return _SafeLog.apply(x)
    return _SafeLog.forward(x)  # no graph to build: the Function's call costs more than the log


class _SafeLog(torch.autograd.Function):
    generate_vmap_rule = True  # torch.func transforms

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        positive = x > 0
        return torch.where(positive, x, 1.0).log().masked_fill_(~positive, float("-inf"))

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors  # differentiable ops: a second derivative too
        return torch.where(x > 0, grad / x.clamp_min(torch.finfo(x.dtype).tiny), 0.0)


class _UnderflowSafeExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        out = x.exp()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (out,) = ctx.saved_tensors
        return torch.where(out > 0, out * grad, torch.zeros_like(grad))


def underflow_safe_exp(x: Tensor) -> Tensor:
    """exp(x) whose backward is 0, not NaN, where exp(x) underflowed to 0: there the gradient with
    respect to exp(x) can overflow float32 to inf, and exp's backward multiplies it by that 0."""
    return _UnderflowSafeExp.apply(x)


def finite_or_zero(x: Tensor) -> Tensor:
    """x with non-finite entries replaced by 0 (a forbidden entry adds nothing to an expectation; an
    all -inf column keeps a shift of 0)."""
    return torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)  # one kernel (isfinite is four)


def added_at_first(u: Tensor, first: Tensor) -> Tensor:
    """u (B x T x K) with ``first`` (B x K, or K) added at position 0, a new tensor; differentiable in
    both. By torch.cat: a copy with an in-place add on its first position (CopySlices in autograd) made
    the backward of an exact chain at N = 4096 1.3x slower."""
    return torch.cat([u[:, :1] + first.unsqueeze(-2), u[:, 1:]], 1)


def needs_grad(*values) -> bool:
    """Whether autograd is on and one of the tensors among ``values`` requires grad (others ignored)."""
    return torch.is_grad_enabled() and any(isinstance(v, Tensor) and v.requires_grad for v in values)


def gumbel_noise(shape: tuple, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """Standard Gumbel noise of ``shape`` with ``like``'s dtype and device."""
    u = torch.rand(shape, generator=generator, dtype=like.dtype, device=like.device)
    tiny = torch.finfo(like.dtype).tiny
    return -(-(u.clamp_min(tiny)).log()).clamp_min(tiny).log()


def at_positions(steps: Sequence[Tensor], positions: Tensor) -> Tensor:
    """Each sequence's step at its own position: ``steps[positions[b]]`` in row b, for steps of shape
    ... x B x K or B (a forward's values a frame) and positions (B,). A where at each distinct position,
    ops of one step's size: indexing the stack of the steps writes, in its backward differentiated
    again (marginals that keep their graph), a zero gradient of the whole stack a step, O(T^2) in all.
    The last step is always taken (where no row ends there, with no effect), so every operand stays in
    the graph."""
    out = None
    for t in sorted({*positions.tolist(), len(steps) - 1}):
        here = positions == t
        out = steps[t] if out is None else torch.where(here.unsqueeze(-1) if steps[t].dim() > 1 else here,
                                                        steps[t], out)  # fmt: skip
    return out


def log_inner(a: Tensor, b: Tensor, log_weights: Tensor | None = None) -> Tensor:
    """log sum_r a_r b_r exp(w_r) over the last dim of non-negative a, b (... x R, broadcast) and
    optional log-weights w (... x R): each term divided by the largest (detached; the sum is at least 1,
    never underflows), in probability space where that is exact (``weighted_features``): a feature
    entry of 0 keeps its finite gradient, where log-sum-exp of log a + log b + w gave it none
    (log 0 = -inf). -inf where every term is 0 (gradient 0 there)."""
    weights = a.new_zeros(()) if log_weights is None else log_weights
    logs = safe_log(a) + safe_log(b) + weights
    top = detached_max(logs)
    terms = weighted_features(a * b, (a == 0) | (b == 0), weights, logs, top)
    return safe_log(terms.sum(-1)) + top.squeeze(-1)


def weighted_features(
    features: Tensor, zero: Tensor, log_weights: Tensor, logs: Tensor, top: Tensor
) -> Tensor:
    """exp(logs - top) for logs = log features + log_weights (non-negative features; broadcast shapes),
    formed as features x exp(log_weights - top) where that is exact: where a feature is 0 (``zero``;
    the value 0 with its gradient exp(log_weights - top), which exp(log 0) lacks) and where it is a
    normal, finite number whose factor neither overflows nor underflows (a feature of 1e27 under a
    factor of e^-114, 0 in float32, was a lost term of e^-50); elsewhere as exp(logs - top) (a subnormal
    product of features keeps its value). The factor is capped below the dtype's largest (exp rounds),
    so 0 x factor is never NaN (a zero feature's gradient is then too small, where its true value is
    e^86 or more times its row's largest term's: float32's and bfloat16's range ends at e^88.7)."""
    info = torch.finfo(logs.dtype)
    cap, floor = math.log(info.max) - 2.0, math.log(info.tiny)
    shift = log_weights - top
    normal = (features.detach() >= info.tiny) & (features.detach() <= info.max)  # a x b may overflow
    exact = zero | (normal & (shift.detach() <= cap) & (shift.detach() >= floor))
    return torch.where(exact, features * shift.clamp_max(cap).exp(), (logs - top).exp())
