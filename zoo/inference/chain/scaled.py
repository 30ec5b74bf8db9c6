"""The scaled forward in probability space, shared by the exact (shared transition), low-rank and
rank-space DPs.

A ``ScaledChain`` describes a chain whose forward step is

    a_t = ((a_{t-1} @ left) * w_t) @ right^T * exp(u_t)        (right, w optional)

* exact HMM: left = exp(log Psi) (N x N);
* low-rank: left = diag(c) phi(U) (N x R), right = phi(V) (N x R), w_t the rank weights;
* rank-space: left = V^T U (R x R) over rank nodes, with end weights ``final`` = 1^T V.

Each step's vector is divided by its sum and the log of the sum accumulated, so nothing under- or
overflows and every step stays a plain matrix product (REFERENCE §4.1-4.3). Two implementations:

* ``log_partition``: a hand-written backward (``torch.autograd.Function``). It runs the scaled
  backward recursion and forms the gradients of ``left`` and ``right`` with one (T B) x K by
  (T B) x M product each at the end, instead of T rank-B updates (what autograd would do), which
  is memory-bound. Once differentiable.
* ``forward``: plain autograd (twice differentiable), also returning the log forward variables
  (used by sampling).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class ScaledChain:
    """The operands of a scaled forward; shapes B batch, T positions, K vector size, M inner size.

    Attributes:
        u: B x T x K log-factors multiplied in at each position (emissions, with any per-position
            constants folded in; -inf allowed).
        left: K x M non-negative.
        right: K x M non-negative, or None (then M = K and the step ends after ``left``).
        weights: B x (T-1) x M non-negative, or None.
        final: K non-negative end weights, or None (sum).
    """

    u: Tensor
    left: Tensor
    right: Tensor | None = None
    weights: Tensor | None = None
    final: Tensor | None = None

    def step(self, t: int, a: Tensor) -> tuple[Tensor, Tensor]:
        """(h, a') for the step into position t + 1 (0-based): h = a @ left, a' = (h * w_t) @ right^T."""
        h = a @ self.left
        g = h * self.weights[:, t] if self.weights is not None else h
        return h, (g @ self.right.T if self.right is not None else g)


def _pull_max(u: Tensor) -> tuple[Tensor, Tensor]:
    """exp(u - max) and the detached max over the last dim."""
    m = u.detach().amax(-1, keepdim=True).clamp_min(-1e30)
    return (u - m).exp(), m.squeeze(-1)


def check_mass(s: Tensor, live: Tensor) -> None:
    if (s[live] <= 0).any():
        raise ValueError("the chain has zero probability (no path survives a -inf mask)")


class _ScaledForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, left, right, weights, final, lengths):
        chain = ScaledChain(u, left, right, weights, final)
        e, m = _pull_max(u)
        B, T, K = u.shape
        tiny = torch.finfo(u.dtype).tiny
        alphas = u.new_empty(B, T, K)
        scales = u.new_empty(B, T)
        inner = u.new_empty(B, max(T - 1, 0), left.shape[1])  # h_t, kept for the w / right grads
        a = e[:, 0]
        for t in range(T):
            if t > 0:
                inner[:, t - 1], a = chain.step(t - 1, alphas[:, t - 1])
                a = a * e[:, t]
            s = a.sum(-1)
            check_mass(s, lengths > t)
            scales[:, t] = s.clamp_min(tiny)
            alphas[:, t] = a / scales[:, t].unsqueeze(-1)
        valid = torch.arange(T, device=u.device) < lengths.unsqueeze(-1)
        log_z = ((scales.log() + m) * valid).sum(-1)
        if final is not None:
            last = alphas[torch.arange(B), lengths - 1]
            log_z = log_z + (last @ final).clamp_min(tiny).log()
        ctx.save_for_backward(alphas, scales, e, inner, valid, lengths, left, right, weights, final)
        return log_z

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        alphas, scales, e, inner, valid, lengths, left, right, weights, final = ctx.saved_tensors
        B, T, K = alphas.shape
        rows = torch.arange(B, device=alphas.device)
        end = alphas.new_ones(B, K) if final is None else final.expand(B, K)
        if final is not None:
            norm = alphas[rows, lengths - 1] @ final
            end = end / norm.unsqueeze(-1)
        end = end * grad.unsqueeze(-1)  # everything below is linear in the end vector
        betas = torch.empty_like(alphas)
        betas[:, T - 1] = end
        ys = alphas.new_zeros(B, max(T - 1, 0), K)  # b_t * e_t / s_t (masked), t = 2..T
        zs = alphas.new_zeros(B, max(T - 1, 0), left.shape[1])  # y_t @ right, then * w_t
        for t in range(T - 1, 0, -1):
            y = betas[:, t] * e[:, t] / scales[:, t].unsqueeze(-1) * valid[:, t].unsqueeze(-1)
            z = y @ right if right is not None else y
            ys[:, t - 1] = y
            zs[:, t - 1] = z
            zw = z * weights[:, t - 1] if weights is not None else z
            betas[:, t - 1] = torch.where((lengths - 1 == t - 1).unsqueeze(-1), end, zw @ left.T)
        grad_u = alphas * betas * valid.unsqueeze(-1)
        grad_left = grad_right = grad_w = grad_final = None
        if T > 1:
            zw = zs * weights if weights is not None else zs
            prev = alphas[:, :-1].reshape(-1, K)
            if ctx.needs_input_grad[1]:
                grad_left = prev.T @ zw.reshape(-1, zw.shape[-1])
            if right is not None and ctx.needs_input_grad[2]:
                h = inner * weights if weights is not None else inner
                grad_right = ys.reshape(-1, K).T @ h.reshape(-1, h.shape[-1])
            if weights is not None and ctx.needs_input_grad[3]:
                grad_w = inner * zs
        if final is not None and ctx.needs_input_grad[4]:
            last = alphas[rows, lengths - 1]
            grad_final = (last * (grad / norm).unsqueeze(-1)).sum(0)
        return grad_u, grad_left, grad_right, grad_w, grad_final, None


def log_partition(chain: ScaledChain, lengths: Tensor) -> Tensor:
    """log Z (B,) with the hand-written backward (once differentiable)."""
    return _ScaledForward.apply(
        chain.u, chain.left, chain.right, chain.weights, chain.final, lengths
    )


def forward(chain: ScaledChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """log Z (B,) and log forward variables (B x T x K, junk past each length), plain autograd."""
    e, m = _pull_max(chain.u)
    B, T, _ = e.shape
    tiny = torch.finfo(e.dtype).tiny
    log_z = e.new_zeros(B)
    running = e.new_zeros(B)
    alphas = []
    a = e[:, 0]
    for t in range(T):
        if t > 0:
            a = chain.step(t - 1, a)[1] * e[:, t]
        s = a.sum(-1, keepdim=True)
        live = lengths > t
        check_mass(s.squeeze(-1), live)
        log_s = s.squeeze(-1).clamp_min(tiny).log() + m[:, t]
        a = a / s.clamp_min(tiny)
        running = running + log_s
        alphas.append(torch.where(a > 0, a.clamp_min(tiny).log(), float("-inf")) + running.unsqueeze(-1))
        log_z = log_z + torch.where(live, log_s, 0)
        if chain.final is not None:
            end = (a @ chain.final).clamp_min(tiny).log()
            log_z = log_z + torch.where(lengths - 1 == t, end, 0)
    return log_z, torch.stack(alphas, 1)
