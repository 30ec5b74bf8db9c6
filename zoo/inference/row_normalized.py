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
    autocast too: a bfloat16 mass is 0.4 % off a row)."""
    m = row_maxima(left)
    with full_precision():
        rows = left / m.unsqueeze(-1)
        mass = rows @ right.sum(0)
        return m, rows, mass if self_transitions else mass - (rows * right).sum(-1)
