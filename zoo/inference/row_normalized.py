"""Row-normalized low-rank transitions, c_i L_i . R_j with c_i = 1 / sum_j L_i . R_j, formed on the rows
of L scaled to a maximum of 1: features far from 1 (exponentiated features at 1e20 or 1e-25) then
neither overflow nor underflow float32 wherever the normalized transition itself is in range. Each
row's maximum m_i is detached: c_i L_i is the same function of L_i for any m_i, so gradients are exact.
Shared by ``LowRankChain`` and ``LowRankSemiMarkov``."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.precision import full_precision


def row_maxima(left: Tensor) -> Tensor:
    """Each row's largest feature, detached: (N,), 1 for a row of zeros."""
    m = left.detach().amax(-1)
    return torch.where(m > 0, m, torch.ones_like(m))


def scaled_mass(left: Tensor, right: Tensor, self_transitions: bool = True) -> Tensor:
    """sum_j (L_i / m_i) . R_j over the next states j (all of them, or all but i): (N,)."""
    return _scaled_rows(left, right, self_transitions)[2]


def log_normalizer(left: Tensor, right: Tensor, self_transitions: bool = True) -> Tensor:
    """log c_i = -log sum_j L_i . R_j: (N,)."""
    m, _, mass = _scaled_rows(left, right, self_transitions)
    return -(m.log() + mass.log())


def normalized_left(left: Tensor, right: Tensor, self_transitions: bool = True) -> Tensor:
    """diag(c) L = (L_i / m_i) / mass'_i: N x R, so that diag(c) L R^T has rows summing to 1."""
    _, rows, mass = _scaled_rows(left, right, self_transitions)
    return (rows / mass.unsqueeze(-1)).to(left.dtype)


def _scaled_rows(left: Tensor, right: Tensor, self_transitions: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(m (N,), L / m (N x R), the scaled rows' masses (N,)), in full precision (under the caller's
    autocast too: a bfloat16 mass is 0.4 % off a row). Without self-transitions, row i's mass is
    L_i . sum_{j != i} R_j with that sum formed from sums before and after i, never as a difference:
    sum_j R_j - R_i lost every digit where the diagonal dominates (sticky states: float32 log Z 2 nats
    off, then a false "no outgoing mass" error; audit)."""
    m = row_maxima(left)
    with full_precision():
        rows = left / m.unsqueeze(-1)
        if self_transitions:
            return m, rows, rows @ right.sum(0)
        zero = right.new_zeros(1, right.shape[-1])
        before = torch.cat([zero, right[:-1].cumsum(0)])  # sum_{j < i} R_j
        after = torch.cat([right[1:].flip(0).cumsum(0).flip(0), zero])  # sum_{j > i} R_j
        return m, rows, (rows * (before + after)).sum(-1)
