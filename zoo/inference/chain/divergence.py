"""Cross-entropy and KL divergence between two chains over the same sequences (torch-struct's and
supar's ``cross_entropy`` / ``kl``: knowledge distillation of a CRF, a posterior against a prior).

H(p, q) = -E_p[log q(z)] = log Z_q - E_p[score_q(z)], and the expectation is an inner product: the
expected counts of p's states and transitions (the gradient of p's log Z with respect to zero probes
shaped as q's unary, transition and init) with q's log-potentials. Both run on the dense forms with the
exact engine, whatever the chains' containers and backends (a randomized chain's exact distribution:
its ``log_prob`` divides by the exact log Z too). KL(p || q) = H(p, q) - H(p).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.chain.factors import DenseChain
from zoo.inference.numerics import needs_grad


def cross_entropy(p, q) -> Tensor:
    """H(p, q): (B,) for two ``LinearChain``s of the same shape and lengths; +inf where p gives mass
    to a sequence that q forbids (a -inf potential). Differentiable in both."""
    _check_pair(p, q)
    return _exactly(q).log_partition - expected_score(p, q.factors.dense())


def kl(p, q) -> Tensor:
    """KL(p || q) = H(p, q) - H(p): (B,), >= 0 (to rounding), +inf where q forbids what p allows."""
    return cross_entropy(p, q) - _exactly(p).entropy


def expected_score(p, q: DenseChain) -> Tensor:
    """E_p[score_q(z)]: (B,), score_q the sum of q's log-potentials along z; -inf where p gives mass to
    a potential of -inf. p's expected counts are per sequence, so its transition probe is B x (T-1) x N
    x N even where q's transition is shared (the memory of ``pairwise_marginals``)."""
    ours = p.factors.dense()
    potentials = (q.unary, q.per_position(), q.init)  # B x T x N, B x (T-1) x N x N, B x N
    with torch.enable_grad():
        probes = [torch.zeros(x.shape, dtype=x.dtype, device=x.device).requires_grad_() for x in potentials]
        probed = DenseChain(ours.unary + probes[0], ours.per_position() + probes[1], ours.init + probes[2])
        log_z = _exact(p, probed).log_partition
        counts = torch.autograd.grad(log_z.sum(), probes, create_graph=needs_grad(*p._potentials()))
    total, forbidden = 0, torch.zeros(p.factors.batch, dtype=torch.bool, device=log_z.device)
    for count, potential in zip(counts, potentials):
        reached = count > 0
        finite = torch.where(torch.isfinite(potential), potential, 0.0)  # no -inf in a product: no NaN
        total = total + torch.where(reached, count * finite, 0.0).flatten(1).sum(-1)
        forbidden = forbidden | (reached & torch.isneginf(potential)).flatten(1).any(-1)
    return torch.where(forbidden, -math.inf, total)


def _exactly(chain):
    """``chain`` itself, or for the randomized backend the exact chain of its distribution (its estimates
    are not the distribution's log Z and entropy)."""
    return _exact(chain, chain.factors.dense()) if chain.backend is Backend.RANDOMIZED else chain


def _exact(like, factors: DenseChain):
    """The exact chain of ``factors`` over ``like``'s lengths."""
    return type(like)(factors, like.lengths, backend="exact")


def _check_pair(p, q) -> None:
    """ValueError unless p and q are chains over the same sequences (batch, length, states, lengths)."""
    if not isinstance(q, type(p)):
        raise TypeError(f"expected another {type(p).__name__}, got {type(q).__name__}")
    ours, theirs = p.factors, q.factors
    shape = (ours.batch, ours.max_length, ours.num_states)
    other = (theirs.batch, theirs.max_length, theirs.num_states)
    if shape != other:
        raise ValueError(f"the two chains must have the same B x T x N, got {shape} and {other}")
    if not torch.equal(p.lengths, q.lengths.to(p.lengths.device)):
        raise ValueError(f"the two chains must have the same lengths, got {p.lengths.tolist()} and "
                         f"{q.lengths.tolist()}")  # fmt: skip
    if ours.unary.dtype != theirs.unary.dtype or ours.unary.device != theirs.unary.device:
        raise ValueError(
            f"the two chains must have the same dtype and device, got {ours.unary.dtype} on "
            f"{ours.unary.device} and {theirs.unary.dtype} on {theirs.unary.device}"
        )
