"""Exact linear-chain dynamic programs on dense log-potentials.

* ``fast_log_partition``: the scaled forward (each step one guarded BLAS product; see ``scaled``)
  with the hand-written backward, for a shared N x N transition (HMM) or per-position ones (CRF).
* ``log_forward``: the same forward with plain autograd; handles per-position B x (T-1) x N x N
  potentials without allocating more than one position's block at a time, and is twice
  differentiable.
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


def log_space(chain: DenseChain) -> scaled.ScaledChain:
    """The dense chain as a scaled forward: left = log Psi (N x N, or B x (T-1) x N x N)."""
    return scaled.ScaledChain(chain.folded_unary(), chain.transition, left_is_log=True)


def fast_log_partition(chain: DenseChain, lengths: Tensor) -> Tensor:
    """log Z (B,) with the hand-written backward (once differentiable; shared or per position)."""
    return scaled.log_partition(log_space(chain), lengths)


def log_forward(chain: DenseChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The forward with plain autograd (twice differentiable; per-position transitions too).

    Returns:
        log Z (B,) and the log forward variables alpha (B x T x N), alpha_t(j) = log of the total
        score of prefixes ending in state j at position t, up to a constant per position (each
        position is shifted so its best state is 0; junk past each length).
    """
    return scaled.forward(log_space(chain), lengths)


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
