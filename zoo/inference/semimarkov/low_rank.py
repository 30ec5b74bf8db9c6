"""The low-rank HSMM forward (LHSMM, Chiu et al. 2021, Eq. 6): each transition is two skinny products.

alpha_t = ((beta_t @ diag(c) L) @ R^T [- beta_t * c * diag(L R^T) without self-transitions]), so a
frame costs O(D N + N R) and N x N is never built.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain.factors import safe_log
from zoo.inference.semimarkov.engine import FALLBACK, NATIVE, SemiMarkovEngine
from zoo.inference.semimarkov.exact import ExactEngine, factorized_sample
from zoo.inference.semimarkov.factors import LowRankSemiMarkov, cumulative
from zoo.inference.semimarkov.forward import NEG, Problem, forward


class LowRankStep:
    """log( exp(beta) diag(c) L R^T ), minus the diagonal when self-transitions are excluded."""

    def __init__(self, f: LowRankSemiMarkov):
        self.left, self.right = f.scaled_left(), f.right
        self.diag = None if f.self_transitions else f.log_scale.exp() * f.diagonal()

    def __call__(self, t: int, beta: Tensor) -> Tensor:
        m = beta.detach().amax(-1, keepdim=True).clamp_min(NEG)
        v = (beta - m).exp()
        out = (v @ self.left) @ self.right.T
        if self.diag is not None:
            out = (out - v * self.diag).clamp_min(0)
        return safe_log(out) + m


def low_rank_problem(f: LowRankSemiMarkov) -> Problem:
    return Problem(cumulative(f.unary), f.duration, f.init, LowRankStep(f))


class LowRankEngine(SemiMarkovEngine):
    """LHSMM inference in O(T (D N + N R)); operations that need N x N run on the materialized form."""

    name = "low-rank"
    factor_types = (LowRankSemiMarkov,)
    capabilities = {
        "log_partition": (NATIVE, "two skinny products a frame, O(T (D N + N R))"),
        "segment_marginals": (NATIVE, "autograd of log Z, O(T (D N + N R))"),
        "marginals": (NATIVE, "from the segment marginals"),
        "entropy": (FALLBACK, "materializes N x N"),
        "log_prob": (NATIVE, "scores gathered in O(R) a segment"),
        "argmax": (FALLBACK, "Viterbi on the materialized N x N"),
        "sample": (NATIVE, "FFBS; each backward step is an N x R product"),
        "rsample": (NATIVE, "Gumbel-softmax FFBS, N x R products"),
    }

    def log_partition(self, factors, lengths, probe=None):
        return forward(low_rank_problem(factors), lengths, probe)[0]

    def entropy(self, factors, lengths):
        return ExactEngine().entropy(factors.dense(), lengths)

    def argmax(self, factors, lengths):
        return ExactEngine().argmax(factors.dense(), lengths)

    def sample(self, factors, lengths, n, generator=None):
        with torch.no_grad():
            return factorized_sample(
                low_rank_problem(factors), factors.transition_columns, lengths, n, None, generator,
                factors.max_duration,
            )[0]

    def rsample(self, factors, lengths, temperature, generator=None):
        return factorized_sample(
            low_rank_problem(factors), factors.transition_columns, lengths, 1, temperature, generator,
            factors.max_duration,
        )[1][0]
