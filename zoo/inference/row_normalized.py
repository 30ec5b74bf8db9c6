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
    """sum_j (L_i / m_i) . R_j over the next states j (all of them, or all but i): (N,), in full
    precision (under the caller's autocast too: a bfloat16 mass is 0.4 % off a row)."""
    with full_precision():
        rows = left / row_maxima(left).unsqueeze(-1)
        mass = rows @ right.sum(0)
        return mass if self_transitions else mass - (rows * right).sum(-1)


def log_normalizer(left: Tensor, right: Tensor, self_transitions: bool = True) -> Tensor:
    """log c_i = -log sum_j L_i . R_j: (N,)."""
    return -(row_maxima(left).log() + scaled_mass(left, right, self_transitions).log())


def normalized_left(left: Tensor, right: Tensor, self_transitions: bool = True) -> Tensor:
    """diag(c) L = (L_i / m_i) / mass'_i: N x R, so that diag(c) L R^T has rows summing to 1."""
    mass = scaled_mass(left, right, self_transitions).to(left.dtype)
    return left / row_maxima(left).unsqueeze(-1) / mass.unsqueeze(-1)
