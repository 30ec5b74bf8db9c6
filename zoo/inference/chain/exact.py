"""Exact linear-chain dynamic programs on dense log-potentials.

* ``shared_log_partition``: the HMM case, one N x N transition. Scaled probability space: each step
  is one BLAS matrix product of the normalized forward vector with exp(log Psi), and the log
  normalizers are accumulated. A hand-written backward runs the scaled backward recursion and forms
  the transition gradient with a single (T B) x N by (T B) x N matrix product at the end.
* ``log_forward``: log space with log-einsum-exp (subtract a detached max, exponentiate, matmul,
  log, add the max back); handles per-position B x (T-1) x N x N potentials without allocating
  more than one position's block at a time, and is twice differentiable (entropy uses that).
* ``viterbi``: max-product with back-pointers, chunked so a step never holds more than
  ``VITERBI_CHUNK`` elements.

Shapes: B batch, T positions, N states. Every function takes ``lengths`` (B,), 1 <= length <= T.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain.factors import DenseChain

VITERBI_CHUNK = 2**25


def _last(values: Tensor, lengths: Tensor) -> Tensor:
    """values B x T x ... -> B x ... at position lengths - 1."""
    idx = (lengths - 1).view(-1, *([1] * (values.dim() - 1))).expand(-1, 1, *values.shape[2:])
    return values.gather(1, idx).squeeze(1)


def _column_scaled(transition: Tensor) -> tuple[Tensor, Tensor]:
    """exp(log Psi - c_j) with c_j the detached column max (so no column underflows); returns (P, c)."""
    c = transition.detach().amax(-2, keepdim=True).clamp_min(-1e30)
    c = torch.where(torch.isfinite(c), c, torch.zeros_like(c))
    return (transition - c).exp(), c.squeeze(-2)


class _SharedForward(torch.autograd.Function):
    """log Z of a chain with one shared transition, in scaled probability space.

    Inputs: u (B x T x N, unary with init and column offsets folded in), P (N x N, >= 0), lengths.
    The gradient w.r.t. u is the unary marginal; w.r.t. P it is sum_t a_{t-1}^T (b_t * e_t) / s_t.
    """

    @staticmethod
    def forward(ctx, u: Tensor, P: Tensor, lengths: Tensor) -> Tensor:
        B, T, N = u.shape
        m = u.amax(-1, keepdim=True).clamp_min(-1e30)  # B x T x 1
        e = (u - m).exp()
        alphas = u.new_empty(B, T, N)
        scales = u.new_empty(B, T)
        a = e[:, 0]
        for t in range(T):
            if t > 0:
                a = (alphas[:, t - 1] @ P) * e[:, t]
            s = a.sum(-1)
            if (s[lengths > t] <= 0).any():
                raise ValueError("the chain has zero probability (no path survives a -inf mask)")
            s = s.clamp_min(torch.finfo(u.dtype).tiny)
            alphas[:, t] = a / s.unsqueeze(-1)
            scales[:, t] = s
        valid = torch.arange(T, device=u.device) < lengths.unsqueeze(-1)  # B x T
        log_z = ((scales.log() + m.squeeze(-1)) * valid).sum(-1)
        ctx.save_for_backward(alphas, scales, e, P, valid)
        return log_z

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        alphas, scales, e, P, valid = ctx.saved_tensors
        B, T, N = alphas.shape
        betas = torch.ones_like(alphas)
        weighted = torch.zeros_like(alphas)  # (b_t * e_t) / s_t for t >= 1, masked
        for t in range(T - 1, 0, -1):
            w = betas[:, t] * e[:, t] / scales[:, t].unsqueeze(-1) * valid[:, t].unsqueeze(-1)
            weighted[:, t] = w
            prev = w @ P.T
            # positions at or after the end keep beta = 1
            betas[:, t - 1] = torch.where(valid[:, t].unsqueeze(-1), prev, betas[:, t - 1])
        g = grad.view(B, 1, 1)
        grad_u = alphas * betas * valid.unsqueeze(-1) * g
        grad_P = None
        if ctx.needs_input_grad[1] and T > 1:
            a_prev = (alphas[:, :-1] * g).reshape(-1, N)
            grad_P = a_prev.T @ weighted[:, 1:].reshape(-1, N)
        return grad_u, grad_P, None


def _folded_unary(chain: DenseChain) -> Tensor:
    """unary with init added at position 1."""
    return torch.cat([chain.unary[:, :1] + chain.init.unsqueeze(1), chain.unary[:, 1:]], 1)


def shared_log_partition(chain: DenseChain, lengths: Tensor) -> Tensor:
    """log Z (B,) for a shared-transition chain, scaled probability space, fast backward."""
    P, c = _column_scaled(chain.transition)
    u = _folded_unary(chain)
    u = torch.cat([u[:, :1], u[:, 1:] + c], 1)
    return _SharedForward.apply(u, P, lengths)


def log_forward(chain: DenseChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Log-space forward with log-einsum-exp steps.

    Returns:
        log Z (B,) and the log forward variables alpha (B x T x N), alpha_t(j) = log of the total
        score of prefixes ending in state j at position t (positions past a length are junk).
    """
    u = _folded_unary(chain)
    B, T, N = u.shape
    alphas = [u[:, 0]]
    if chain.shared:
        P, c = _column_scaled(chain.transition)
    for t in range(1, T):
        prev = alphas[-1]
        mx = prev.detach().amax(-1, keepdim=True).clamp_min(-1e30)
        if chain.shared:
            step = (prev - mx).exp() @ P
            cc = c
        else:
            Pt, cc = _column_scaled(chain.transition[:, t - 1])
            step = ((prev - mx).exp().unsqueeze(-2) @ Pt).squeeze(-2)
        alphas.append(step.log() + mx + cc + u[:, t])
    alphas = torch.stack(alphas, 1)
    return _last(alphas, lengths).logsumexp(-1), alphas


def viterbi(chain: DenseChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Max-product decoding.

    Returns:
        the best score (B,) and the best states (B x T, long, -1 past each length).
    """
    u = _folded_unary(chain)
    B, T, N = u.shape
    delta = u[:, 0]
    deltas, pointers = [delta], []
    chunk = max(1, VITERBI_CHUNK // max(1, B * N))
    for t in range(1, T):
        trans = chain.transition if chain.shared else chain.transition[:, t - 1]
        best = u.new_empty(B, N)
        arg = torch.empty(B, N, dtype=torch.long, device=u.device)
        for j in range(0, N, chunk):
            block = trans[..., j : j + chunk]  # (B x) N x C
            scores = delta.unsqueeze(-1) + block  # B x N x C
            best[:, j : j + chunk], arg[:, j : j + chunk] = scores.max(-2)
        delta = best + u[:, t]
        deltas.append(delta)
        pointers.append(arg)
    deltas = torch.stack(deltas, 1)
    score, cur = _last(deltas, lengths).max(-1)
    states = torch.full((B, T), -1, dtype=torch.long, device=u.device)
    for t in range(T - 1, -1, -1):
        at_end = lengths - 1 == t
        inside = lengths - 1 >= t
        if t < T - 1:
            back = pointers[t].gather(1, cur.clamp_min(0).unsqueeze(-1)).squeeze(-1)
            cur = torch.where(lengths - 1 > t, back, cur)
        cur = torch.where(at_end, _last(deltas, lengths).argmax(-1), cur)
        states[:, t] = torch.where(inside, cur, states[:, t])
    return score, states
