"""The low-rank HSMM forward (LHSMM, Chiu et al. 2021, Eq. 6): each transition is two skinny products.

alpha_t = ((beta_t @ diag(c) L) @ R^T [- beta_t * c * diag(L R^T) without self-transitions]), in log
space with guarded products, so a frame costs O(D N + N R) and N x N is never built.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.engines import register_engine
from zoo.inference.kinds import FALLBACK, NATIVE
from zoo.inference.logmatmul import Matrix, log_matmul
from zoo.inference.numerics import log_inner, safe_log
from zoo.inference.semimarkov.engine import SemiMarkovEngine, one_frame_log_partition
from zoo.inference.semimarkov.exact import ExactEngine, factorized_sample
from zoo.inference.semimarkov.factors import LowRankSemiMarkov, cumulative
from zoo.inference.semimarkov.forward import Problem, forward

CANCELLATION = 0.75  # the self-transition share of a column above which it is redone (gradients gain <= 4x)


class LowRankStep:
    """log( exp(beta) diag(c) L R^T ), minus the diagonal when self-transitions are excluded: two
    guarded products (``zoo.inference.logmatmul``); where the excluded self-transition carried almost
    all of a column's mass (the subtraction would cancel), that column is recomputed over i != j."""

    def __init__(self, f: LowRankSemiMarkov, second_order: bool = False):
        self.scaled_left, self.features = f.scaled_left(), f.right
        self.left, self.right = Matrix.from_prob(self.scaled_left), Matrix.from_prob(f.right.T)
        self.log_diag = None if f.self_transitions else safe_log(f.scaled_diagonal())
        self.second_order = second_order  # twice differentiable without overflow (a double backward)

    def __call__(self, t: int, beta: Tensor, live: Tensor | None = None) -> Tensor:
        inner = log_matmul(beta, self.left, live, self.second_order)
        full = log_matmul(inner, self.right, live, self.second_order)
        if self.log_diag is None:
            return full
        # the self-transition's share of each column (0 for a dead column: no NaN from -inf - -inf)
        ratio = (beta + self.log_diag - torch.where(torch.isneginf(full), 0.0, full)).exp().clamp_max(1)
        cancels = ratio > CANCELLATION
        out = full + torch.log1p(-torch.where(cancels, 0.0, ratio))
        bad = cancels if live is None else cancels & live.unsqueeze(-1)  # junk rows are left as they are
        if not bool(bad.any()):
            return out
        b, j = bad.nonzero(as_tuple=True)
        cols = (self.scaled_left @ self.features[j].T).T  # n x N: trans(:, j), then without i = j
        cols = cols.scatter(-1, j.unsqueeze(-1), 0.0)
        # in probability space: a transition the features forbid (trans(i, j) = 0) keeps its gradient
        return out.index_put((b, j), log_inner(cols, cols.new_ones(()), beta[b]))


def low_rank_problem(f: LowRankSemiMarkov, second_order: bool = False) -> Problem:
    return Problem(cumulative(f.unary), f.duration, f.init, LowRankStep(f, second_order))


@register_engine("semimarkov", "low-rank")
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

    def log_partition(self, factors, lengths, probe=None, second_order=False):
        log_z = one_frame_log_partition(factors, lengths, probe)  # D = 1: the LHMM it equals
        return forward(low_rank_problem(factors, second_order), lengths, probe)[0] if log_z is None else log_z

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
