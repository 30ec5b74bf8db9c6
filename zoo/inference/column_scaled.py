"""Unnormalized low-rank features far from 1, brought near 1 column by column.

Features at 1e20 (exp of large features) or 1e-20 have products beyond float32's range (1e40
overflows, 1e-40 is subnormal) although the model they define is an ordinary one. Two exact rewrites
bring the products near 1; every scale is a power of two (the products are exact where the results are
representable) and detached (the scaled features are the same function of the given ones, so
gradients are exact):

- ``column_scaled``: a factor sum_r A[i, r] B[j, r] w_r is unchanged when column r of A is divided by
  a_r, column r of B by b_r, and log(a_r b_r) is added to the log-weight w_r of rank component r
  (``LowRankChain(normalize=False)``'s rank weights, a rank-space chain's emission, a rank-space
  HSMM's duration).
- ``balanced_columns``: without rank weights (an HSMM's ``LowRankSemiMarkov(normalize=False)``),
  the columns' scales are shared between A and B so that A B^T = 2^-k (given A B^T), 2^k the largest
  column's product, and k log 2 is added to every transition's log-potential by the caller.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# columns whose largest feature lies within 2^-LIMIT .. 2^LIMIT are left as they are: their products
# (2^-80 .. 2^80, times N R at most) stay in float32's normal range
LIMIT = 40


def out_of_range(*features: Tensor) -> bool:
    """Whether a column of any ``features`` (... x N x R, non-negative) has a largest entry beyond
    2^+-LIMIT (all-zero columns aside)."""
    for f in features:
        m = f.detach().amax(-2)
        if bool(((m > 2.0**LIMIT) | ((m > 0) & (m < 2.0**-LIMIT))).any()):
            return True
    return False


def column_scaled(features: Tensor) -> tuple[Tensor, Tensor]:
    """(features / 2^e_r, e_r log 2): each column divided by the power of two nearest its largest
    entry (e_r = 0 for an all-zero column); the log-scales are ... x R (the leading dims of a batched
    ``features``)."""
    e = _exponents(features)
    return _times_power_of_two(features, -e), (e * math.log(2.0)).to(features.dtype)


def balanced_columns(left: Tensor, right: Tensor) -> tuple[Tensor, Tensor, float]:
    """(left', right', k log 2) with left' right'^T = 2^-k left right^T: N x R each; column r's
    largest products are 2^(e_r - k) <= 1 (e_r: its largest entries' exponents summed), shared evenly
    between its two sides."""
    a, b = _exponents(left), _exponents(right)
    k = float((a + b).max())
    rest = a + b - k  # <= 0
    half = torch.floor(rest / 2)
    return _times_power_of_two(left, half - a), _times_power_of_two(right, rest - half - b), k * math.log(2.0)


def _exponents(features: Tensor) -> Tensor:
    """The exponent of the power of two nearest each column's largest entry: ... x R float64, 0 for an
    all-zero column."""
    m = features.detach().amax(-2).double()
    return torch.where(m > 0, torch.log2(m).round(), torch.zeros_like(m))


def _times_power_of_two(features: Tensor, e: Tensor) -> Tensor:
    """features * 2^e per column, formed in float64 (2^e itself may be beyond float32's range) and
    rounded back: exact wherever the result is representable."""
    return (features.double() * torch.exp2(e).unsqueeze(-2)).to(features.dtype)
