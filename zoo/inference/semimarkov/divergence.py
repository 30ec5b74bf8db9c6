"""Cross-entropy and KL divergence between two semi-Markov chains over the same sequences (the
chains' ``cross_entropy`` / ``kl``: distilling one HSMM into another, a posterior against a prior).

H(p, q) = -E_p[log q(y)] = log Z_q - E_p[score_q(y)], the expectation an inner product of p's expected
counts (the gradient of p's exact log Z with respect to zero probes shaped as q's potentials) with q's
log-potentials:
- where both have a factorized form (``DenseSemiMarkov``: dense and low-rank containers), over the
  frames' states, the durations, the transitions and the first segment's state, O(T (D N + N^2));
- else (a rank-space or edge container on either side) over the per-segment forms, B x (T-1) x D x N x N
  (small sizes only, as their ``dense()``).
A randomized chain enters as its exact distribution. KL(p || q) = H(p, q) - H(p).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.divergence import divergences, expected_total
from zoo.inference.numerics import needs_grad
from zoo.inference.semimarkov.engine import check_covered
from zoo.inference.semimarkov.exact import edge_log_partition
from zoo.inference.semimarkov.factors import DenseSemiMarkov, EdgeSemiMarkov, cumulative
from zoo.inference.semimarkov.forward import Problem, forward
from zoo.inference.semiring import MatrixStep


def expected_score(p, q) -> Tensor:
    """E_p[score_q(y)]: (B,); -inf where p gives mass to a potential of -inf."""
    ours, theirs = p.factors.dense(), q.factors.dense()
    differentiable = needs_grad(*p._potentials())
    if isinstance(ours, DenseSemiMarkov) and isinstance(theirs, DenseSemiMarkov):
        B, N = theirs.batch, theirs.num_states
        potentials = (theirs.unary, theirs.duration, theirs.transition.expand(B, N, N), theirs.init)
        counts = _factorized_counts(ours, p.lengths, differentiable)
    else:
        ours, theirs = _per_segment(ours), _per_segment(theirs)
        potentials = (theirs.first, theirs.edge)
        counts = _segment_counts(ours, p.lengths, differentiable)
    return expected_total(counts, potentials)


def _factorized_counts(f: DenseSemiMarkov, lengths: Tensor, differentiable: bool) -> tuple[Tensor, ...]:
    """p's expected counts: B x T x N frames in each state, B x N x D segments of each state and
    duration, B x N x N transitions, B x N first states (one forward, the transition per sequence)."""
    B, N = f.batch, f.num_states
    with torch.enable_grad():
        probes = [torch.zeros(shape, dtype=f.unary.dtype, device=f.device, requires_grad=True)
                  for shape in (f.unary.shape, f.duration.shape, (B, N, N), f.init.shape)]  # fmt: skip
        step = MatrixStep(f.transition + probes[2], second_order=differentiable)
        problem = Problem(cumulative(f.unary + probes[0]), f.duration + probes[1], f.init + probes[3], step)
        log_z = forward(problem, lengths)[0]
        return _counts(check_covered(log_z, lengths, f.max_duration), probes, differentiable)


def _segment_counts(f: EdgeSemiMarkov, lengths: Tensor, differentiable: bool) -> tuple[Tensor, ...]:
    """p's expected counts of each first segment (B x D x N) and each later segment with its previous
    state (B x (T-1) x D x N x N)."""
    with torch.enable_grad():
        probes = [torch.zeros_like(x, requires_grad=True) for x in (f.first, f.edge)]
        log_z = edge_log_partition(EdgeSemiMarkov(f.first + probes[0], f.edge + probes[1]), lengths)
        return _counts(check_covered(log_z, lengths, f.max_duration), probes, differentiable)


def _counts(log_z: Tensor, probes: list[Tensor], differentiable: bool) -> tuple[Tensor, ...]:
    """The gradients of log Z with respect to the probes: 0 for one that T = 1 leaves unused (no
    transition, no later segment)."""
    counts = torch.autograd.grad(log_z.sum(), probes, create_graph=differentiable, allow_unused=True)
    return tuple(torch.zeros_like(x) if c is None else c for c, x in zip(counts, probes))


def _per_segment(f) -> EdgeSemiMarkov:
    return f.edge_form() if isinstance(f, DenseSemiMarkov) else f


def _shape(chain) -> tuple[int, ...]:
    f = chain.factors
    return f.batch, f.max_length, f.max_duration, f.num_states


# H(p, q) and KL(p || q) of two SemiMarkovChains of the same B x T x D x N and lengths: (B,) each
cross_entropy, kl = divergences(expected_score, _shape, "B x T x D x N")
