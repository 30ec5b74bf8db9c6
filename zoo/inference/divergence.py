"""What the cross-entropies of every structure share (``chain``, ``semimarkov`` and ``tree.divergence``):
H(p, q) = log Z_q - E_p[score_q], E_p[score_q] the inner product of p's expected counts with q's
log-potentials; the pair's checks; a randomized distribution's exact counterpart. Structure-neutral.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from zoo.inference.backend import Backend


def divergences(
    expected_score: Callable[[Any, Any], Tensor],
    shape_of: Callable[[Any], tuple[int, ...]],
    names: str,
    exact: Callable[[Any], Any] | None = None,
) -> tuple[Callable[[Any, Any], Tensor], Callable[[Any, Any], Tensor]]:
    """A structure's ``(cross_entropy, kl)`` from its ``expected_score(p, q)`` (E_p[score_q], (B,)):
    H(p, q) = log Z_q - E_p[score_q] after ``check_pair`` (``shape_of``, spelled ``names``), and
    KL(p || q) = H(p, q) - H(p), on exact distributions (``exact``, by default ``exactly``)."""
    exact = exact or exactly

    def cross_entropy(p, q) -> Tensor:
        check_pair(p, q, shape_of, names)
        return exact(q).log_partition - expected_score(p, q)

    def kl(p, q) -> Tensor:
        return cross_entropy(p, q) - exact(p).entropy

    return cross_entropy, kl


def expected_total(counts: Sequence[Tensor], potentials: Sequence[Tensor]) -> Tensor:
    """sum of counts x potentials over every axis but the batch's: (B,), each pair of B x ... tensors of
    one shape; -inf where a count > 0 meets a potential of -inf (p gives mass to what q forbids), with
    no NaN from 0 x -inf where the count is 0."""
    total, forbidden = 0, None
    for count, potential in zip(counts, potentials):
        reached = count > 0
        finite = torch.where(torch.isfinite(potential), potential, 0.0)  # no -inf in a product: no NaN
        total = total + torch.where(reached, count * finite, 0.0).flatten(1).sum(-1)
        hit = (reached & torch.isneginf(potential)).flatten(1).any(-1)
        forbidden = hit if forbidden is None else forbidden | hit
    return torch.where(forbidden, -math.inf, total)


def exactly(dist):
    """``dist`` itself, or for the randomized backend the exact distribution of its dense form (its
    estimates are not the distribution's log Z and entropy)."""
    if dist.backend is not Backend.RANDOMIZED:
        return dist
    return type(dist)(dist.factors.dense(), dist.lengths, backend="exact")


def check_pair(p, q, shape_of: Callable[[Any], tuple[int, ...]], names: str) -> None:
    """TypeError unless q is p's kind of distribution; ValueError unless both have the same shape
    (``shape_of(dist)``, spelled ``names``: e.g. "B x T x N"), lengths, dtype and device."""
    if not isinstance(q, type(p)):
        raise TypeError(f"expected another {type(p).__name__}, got {type(q).__name__}")
    kind, shape, other = type(p).__name__, shape_of(p), shape_of(q)
    if shape != other:
        raise ValueError(f"the two {kind}s must have the same {names}, got {shape} and {other}")
    if not torch.equal(p.lengths, q.lengths.to(p.lengths.device)):
        raise ValueError(f"the two {kind}s must have the same lengths, got {p.lengths.tolist()} and "
                         f"{q.lengths.tolist()}")  # fmt: skip
    ours, theirs = _floating(p), _floating(q)
    if ours.dtype != theirs.dtype or ours.device != theirs.device:
        raise ValueError(
            f"the two {kind}s must have the same dtype and device, got {ours.dtype} on {ours.device} and "
            f"{theirs.dtype} on {theirs.device}"
        )


def _floating(dist) -> Tensor:
    """The first floating tensor of a distribution's potentials (its dtype and device)."""
    return next(v for v in dist._potentials() if isinstance(v, Tensor) and v.is_floating_point())
