"""Guarded log-space matrix products: log(exp(x) @ M) as fast as a plain product, as exact as a
log-sum-exp. Structure-neutral: the chain and semi-Markov forwards run every transition through it.

A product in probability space, exp(x - max x) @ P (P = exp(log M - column max) for log-potentials,
M itself for non-negative features), is one BLAS call, but float32 flushes every term below 2^-126
(about 87 nats under the row's best state times the column's best entry) to zero. A term flushed
at one step can be the only surviving path later (a forbidden transition, a left-to-right topology,
an emission hundreds of nats lower), so the plain product is silently wrong exactly where real
models live. Here each output entry of the product is
checked: the flushed terms add at most K x tiny x (M's largest entry, 1 for log-potentials) to it, so
an entry h >= ``threshold(K, dtype)`` = K x tiny x max(1, largest) / eps is right to float precision
(features up to 2^40 multiply a flushed term's loss: 4e-4 nats off at an entry near K x tiny / eps,
before the bound counted them), and only the entries below it are recomputed exactly
by a log-sum-exp over their K inputs (their row of x and their column of log M). On inputs where
nothing underflows the repair never runs; where it does, it costs K per repaired entry.

Shapes: x ... x K; the matrix K x M (shared), ... x K x M with x's leading dims (one per row), or
... x K x M with the leading dims of x minus its last (a batched matmul); the result ... x M.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from zoo.inference.numerics import (
    detached_max,
    finite_or_zero,
    log_inner,
    logsumexp,
    safe_log,
    weighted_features,
)

SECOND_ORDER_MARGIN = 2.0**10  # room for the gradient that 1 / h^2 multiplies


def threshold(k: int, dtype: torch.dtype, second_order: bool = False, largest: float = 1.0) -> float:
    """The smallest product entry that flushed terms cannot have moved by more than eps: K tiny x
    max(1, ``largest``) / eps, ``largest`` the matrix's largest entry (``Matrix.largest``).
    ``second_order``: also the smallest whose 1 / h^2 (the second derivative of log h, the first of a
    division by h) stays far from overflow, 2^10 / sqrt(max) (5.6e-17 in float32): below it the
    derivatives go through the exact log-sum-exp's softmax weights instead."""
    info = torch.finfo(dtype)
    bound = k * info.tiny * max(1.0, largest) / info.eps
    return max(bound, SECOND_ORDER_MARGIN / math.sqrt(info.max)) if second_order else bound


@dataclass
class Matrix:
    """A non-negative matrix prepared for guarded products: K x M, or ... x K x M per row.

    Attributes:
        scaled: exp(log M - c): from log-potentials each column's max is 1 (c its detached log max,
            0 for an all -inf column); from a non-negative M, M itself (c = 0).
        shift: ... x M, c.
        log: log M (-inf for zeros), used by the repair (computed on first use when built from M).
    """

    scaled: Tensor
    shift: Tensor
    given_log: Tensor | None = None
    given_prob: Tensor | None = None

    @classmethod
    def from_log(cls, log_m: Tensor) -> Matrix:
        """From log-potentials (entries -inf allowed); gradients flow through ``scaled`` and ``log``."""
        c = finite_or_zero(log_m.detach().amax(-2, keepdim=True))
        return cls((log_m - c).exp(), c.squeeze(-2), given_log=log_m)

    @classmethod
    def from_prob(cls, m: Tensor) -> Matrix:
        """From a non-negative matrix (features, probabilities), used as it is (shift 0): the guard's
        bound is absolute, so it needs no column scaling, and the product reads the caller's memory."""
        return cls(m, m.new_zeros(()).expand(m.shape[:-2] + m.shape[-1:]), given_prob=m)

    @cached_property
    def log(self) -> Tensor:
        return self.given_log if self.given_log is not None else safe_log(self.given_prob)

    @cached_property
    def p_log_p(self) -> Tensor:
        """scaled o log(scaled), 0 where scaled = 0 (the entropy step's cross term)."""
        return self.scaled * finite_or_zero(self.log - self.shift.unsqueeze(-2))

    @property
    def rows(self) -> int:
        return self.scaled.shape[-2]

    @cached_property
    def largest(self) -> float:
        """The largest entry of ``scaled``: 1 from log-potentials (each column's max is 1), a
        non-negative matrix's own (features up to 2^40: ``column_scaled``), one reduction."""
        if self.given_prob is None or self.scaled.numel() == 0:
            return 1.0
        return float(self.scaled.detach().amax())


def repair_index(
    h: Tensor, matrix: Matrix, live: Tensor | None = None, second_order: bool = False
) -> tuple[Tensor, ...] | None:
    """The indices of ``h``'s entries (a product with ``matrix``) below the threshold (None when there
    are none); ``live`` (``h``'s leading shape, bool) limits them to the rows that matter (e.g. inside a
    length)."""
    bound = threshold(matrix.rows, h.dtype, second_order, matrix.largest)
    if h.numel() == 0 or float(h.amin()) >= bound:  # one reduction in the common case
        return None
    bad = h < bound
    if live is not None:
        bad = bad & live.unsqueeze(-1)
        if not bool(bad.any()):
            return None
    return bad.nonzero(as_tuple=True)


def columns(log_m: Tensor, index: tuple[Tensor, ...], x_dim: int) -> Tensor:
    """log M[..., :, j] for each entry ``index`` of a product with an x of ``x_dim`` dims: n x K.

    ``log_m`` is K x M, or batched as in the module docstring.
    """
    lead, col = index[:-1], index[-1]
    if log_m.dim() == 2:
        return log_m[:, col].T
    batch = lead if log_m.dim() == x_dim + 1 else lead[:-1]  # per row, or a batched matmul
    return log_m[(*batch, slice(None), col)]


def exact_entries(x: Tensor, log_m: Tensor, index: tuple[Tensor, ...]) -> Tensor:
    """log sum_i exp(x[..., i] + log M[..., i, j]) at the entries ``index`` of the ... x M result: (n,)."""
    return logsumexp(x[index[:-1]] + columns(log_m, index, x.dim()))


def times(v: Tensor, P: Tensor) -> Tensor:
    """v @ P in any of the module's matrix layouts (one matrix per row: a batched vector product)."""
    return (v.unsqueeze(-2) @ P).squeeze(-2) if P.dim() == v.dim() + 1 else v @ P


def log_matmul(
    x: Tensor, matrix: Matrix, live: Tensor | None = None, second_order: bool = False
) -> Tensor:
    """log(exp(x) @ M): ... x K -> ... x M, fast product with exact repair (differentiable);
    ``live`` (x's leading shape, bool): repair only those rows (the others are junk, e.g. padding);
    ``second_order``: twice differentiable without overflow (``threshold``), for a double backward."""
    m = detached_max(x)
    return _guarded((x - m).exp(), m, matrix, lambda index: exact_entries(x, matrix.log, index), live,
                    second_order)  # fmt: skip


def log_feature_matmul(
    features: Tensor, log_weights: Tensor, matrix: Matrix, live: Tensor | None = None
) -> Tensor:
    """log((f o exp(w)) @ M) for non-negative features f ... x K, log-weights w (broadcast to f) and a
    non-negative M (``Matrix.from_prob``): ``log_matmul(log f + w, M)``, but an entry 0 of f or M keeps
    its finite gradient (log 0 = -inf has none). The rows are formed in probability space where that
    is exact (``weighted_features``); the repaired entries sum their terms the same way (``log_inner``).
    Twice differentiable without overflow (``second_order``): it forms the dense transitions and
    sampling columns of low-rank and rank-space containers, whose marginals may keep their graph."""
    features, log_weights = torch.broadcast_tensors(features, log_weights)
    x = safe_log(features) + log_weights
    m = detached_max(x)
    rows = weighted_features(features, features == 0, log_weights, x, m)

    def exact(index: tuple[Tensor, ...]) -> Tensor:
        lead = index[:-1]
        return log_inner(features[lead], columns(matrix.given_prob, index, x.dim()), log_weights[lead])

    return _guarded(rows, m, matrix, exact, live, second_order=True)


def _guarded(
    v: Tensor,
    m: Tensor,
    matrix: Matrix,
    exact: Callable[[tuple[Tensor, ...]], Tensor],
    live: Tensor | None = None,
    second_order: bool = False,
) -> Tensor:
    """log(v @ M) + m for rows v = exp(x - m) (... x K, at most 1), the entries below the threshold
    replaced by ``exact(their index)``."""
    P = matrix.scaled
    h = times(v, P)
    shift = matrix.shift.unsqueeze(-2) if 2 < P.dim() == v.dim() else matrix.shift
    index = repair_index(h.detach(), matrix, live, second_order)
    if index is not None:  # the repaired entries' h leaves the graph (see ``outside``)
        h = torch.where(outside(h, index), h, 1.0)
    out = h.clamp_min(torch.finfo(h.dtype).tiny).log() + (m + shift)  # h below tiny is always repaired
    if index is None:
        return out
    return out.index_put(index, exact(index))


def outside(h: Tensor, index: tuple[Tensor, ...]) -> Tensor:
    """True except at ``index``: the entries whose exact value replaces the product's. Their tiny h must
    not reach a log or a division even on the discarded branch: a double backward multiplies 1 / h^2,
    which overflows, by the zero gradient that ``index_put`` leaves there (NaN)."""
    return torch.ones_like(h, dtype=torch.bool).index_put(index, torch.tensor(False, device=h.device))


def entropy_step(x: Tensor, H: Tensor, matrix: Matrix, live: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """A guarded product that also carries conditional entropies (Fu et al. 2022, Alg. 3).

    y = log(exp(x) @ M) and, with w_ij = exp(x_i + log M_ij - y_j) = p(i | j),
    H'_j = sum_i w_ij (H_i - log w_ij). With v = exp(x - max x), P = M / c and h = v @ P:

        H' = ((v o (H - x + max x)) @ P - v @ (P o log P)) / h + log h

    (one ... x 2 x K by K x M product and one ... x K by K x M); the entries below the threshold are
    recomputed exactly from the softmax weights. x, H: ... x K; returns y and H', ... x M each.
    """
    m = detached_max(x)
    z = x - m
    v = z.exp()
    carried = v * (H - finite_or_zero(z))
    P = matrix.scaled
    pair = torch.stack([v, carried], -2) @ P  # ... x 2 x M
    cross = (v.unsqueeze(-2) @ matrix.p_log_p).squeeze(-2)
    h = pair[..., 0, :]
    index = repair_index(h.detach(), matrix, live, second_order=True)  # its gradient divides by h
    # every entry below the bound leaves the graph: the repaired ones, and those of rows that are not
    # live (junk, but a double backward multiplied their 1 / h^2 by zero: NaN)
    usable = h.detach() >= threshold(matrix.rows, h.dtype, second_order=True, largest=matrix.largest)
    safe = torch.where(usable, h, torch.ones_like(h))
    H_next = (pair[..., 1, :] - cross) / safe + safe.log()
    log_h = torch.where(h > 0, safe.log(), float("-inf")) + matrix.shift + m
    if index is None:
        return log_h, H_next
    lead = index[:-1]
    scores = x[lead] + columns(matrix.log, index, x.dim())  # n x K
    exact = logsumexp(scores)
    log_w = scores - finite_or_zero(exact).unsqueeze(-1)  # all -inf in a dead column: w = 0
    value = (log_w.exp() * (H[lead] - finite_or_zero(log_w))).sum(-1)
    return log_h.index_put(index, exact), H_next.index_put(index, value)
