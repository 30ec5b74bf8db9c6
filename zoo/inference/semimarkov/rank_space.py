"""The rank-space HSMM forward (Yang et al. 2022's construction applied to the HSMM; the derivation is
docs/semimarkov-rank-space.md).

The merged factor p(z_k, d_k, x_seg | z_{k-1}) = sum_r U[z_{k-1}, r] V[z_k, r] w_r(s_k, d_k) puts the
duration and the emission on the rank node; marginalizing every state node leaves a semi-Markov chain
over rank nodes: the rank-to-rank transition H = V^T U (R x R, once per batch), the first segment's
rank weights start @ U, the end weights 1^T V. The forward of ``forward.py`` then runs with K = R:
O(N R^2) once + O(T (D R + R^2)), independent of N.
"""

from __future__ import annotations

import torch

from zoo.inference.chain.factors import safe_log
from zoo.inference.semimarkov.engine import FALLBACK, NATIVE, SemiMarkovEngine
from zoo.inference.semimarkov.exact import ExactEngine
from zoo.inference.semimarkov.factors import RankSpaceSemiMarkov
from zoo.inference.semimarkov.forward import MatrixStep, Problem, forward


def rank_transition(f: RankSpaceSemiMarkov) -> torch.Tensor:
    """H = V^T U: R x R, H[r, r'] = sum_j V[j, r] U[j, r'] (state node j marginalized)."""
    return f.V.T @ f.U


def rank_problem(f: RankSpaceSemiMarkov) -> Problem:
    """The semi-Markov chain over rank nodes."""
    step = MatrixStep(prob=rank_transition(f))
    return Problem(
        f.cumulative(), f.duration, safe_log(f.start @ f.U), step, final=safe_log(f.V.sum(0))
    )


class RankSpaceEngine(SemiMarkovEngine):
    """Rank-space HSMM: log Z over rank nodes; state-level operations (which rank nodes do not carry)
    run exactly on the materialized per-segment form (B x (T-1) x D x N x N: small sizes)."""

    name = "rank-space"
    factor_types = (RankSpaceSemiMarkov,)
    capabilities = {
        "log_partition": (NATIVE, "DP over rank nodes: O(N R^2) once + O(T (D R + R^2))"),
        "segment_marginals": (FALLBACK, "autograd on the materialized per-segment form, O(T D N^2 R)"),
        "marginals": (FALLBACK, "from the segment marginals"),
        "entropy": (FALLBACK, "on the materialized per-segment form"),
        "log_prob": (NATIVE, "per-segment scores gathered in O(R); log Z over rank nodes"),
        "argmax": (FALLBACK, "Viterbi on the materialized per-segment form"),
        "sample": (FALLBACK, "FFBS on the materialized per-segment form"),
        "rsample": (FALLBACK, "Gumbel-softmax FFBS on the materialized per-segment form"),
    }

    def log_partition(self, factors, lengths, probe=None):
        if probe is not None:
            return ExactEngine().log_partition(factors.dense(), lengths, probe)
        return forward(rank_problem(factors), lengths)[0]

    def entropy(self, factors, lengths):
        return ExactEngine().entropy(factors.dense(), lengths)

    def argmax(self, factors, lengths):
        return ExactEngine().argmax(factors.dense(), lengths)

    def sample(self, factors, lengths, n, generator=None):
        return ExactEngine().sample(factors.dense(), lengths, n, generator)

    def rsample(self, factors, lengths, temperature, generator=None):
        return ExactEngine().rsample(factors.dense(), lengths, temperature, generator)
