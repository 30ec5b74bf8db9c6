"""Exact linear-chain dynamic programs on dense log-potentials.

* ``shared_log_partition``: the HMM case, one N x N transition, in scaled probability space (each
  step one BLAS product with exp(log Psi); see ``scaled``), with the hand-written backward.
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

from zoo.inference.chain import scaled
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


def shared_scaled(chain: DenseChain) -> scaled.ScaledChain:
    """The shared-transition chain as a scaled forward: left = exp(log Psi - c), c folded into u."""
    P, c = _column_scaled(chain.transition)
    u = chain.folded_unary()
    return scaled.ScaledChain(torch.cat([u[:, :1], u[:, 1:] + c], 1), P)


def shared_log_partition(chain: DenseChain, lengths: Tensor) -> Tensor:
    """log Z (B,) for a shared-transition chain, scaled probability space, fast backward."""
    return scaled.log_partition(shared_scaled(chain), lengths)


def log_forward(chain: DenseChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Log-space forward with log-einsum-exp steps.

    Returns:
        log Z (B,) and the log forward variables alpha (B x T x N), alpha_t(j) = log of the total
        score of prefixes ending in state j at position t (positions past a length are junk).
    """
    u = chain.folded_unary()
    B, T, N = u.shape
    # unbind, not u[:, t]: one backward that stacks the steps' gradients, instead of a full-size
    # zero gradient per step (B x (T-1) x N x N for per-position transitions)
    unary = u.unbind(1)
    alphas = [unary[0]]
    if chain.shared:
        P, c = _column_scaled(chain.transition)
    else:
        transitions = chain.transition.unbind(1)
    for t in range(1, T):
        prev = alphas[-1]
        mx = prev.detach().amax(-1, keepdim=True).clamp_min(-1e30)
        if chain.shared:
            step = (prev - mx).exp() @ P
            cc = c
        else:
            Pt, cc = _column_scaled(transitions[t - 1])
            step = ((prev - mx).exp().unsqueeze(-2) @ Pt).squeeze(-2)
        alphas.append(step.log() + mx + cc + unary[t])
    alphas = torch.stack(alphas, 1)
    return _last(alphas, lengths).logsumexp(-1), alphas


def viterbi(chain: DenseChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Max-product decoding.

    Returns:
        the best score (B,) and the best states (B x T, long, -1 past each length).
    """
    u = chain.folded_unary()
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
