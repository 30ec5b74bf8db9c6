"""The low-rank forward (Chiu et al. 2021, Eq. 3): each step is two skinny products, O(N R).

alpha_t = ((alpha_{t-1} @ diag(c) L) * w_t) @ R^T * exp(unary_t): N x N is never built.
"""

from __future__ import annotations

from zoo.inference.chain import scaled
from zoo.inference.chain.engine import ChainEngine
from zoo.inference.chain.factors import LowRankChain, RankSpaceChain
from zoo.inference.engines import register_engine
from zoo.inference.kinds import FALLBACK, NATIVE


def low_rank_scaled(chain: LowRankChain) -> scaled.ScaledChain:
    """The low-rank chain as a scaled forward: left = diag(c) L, right = R, the rank log-weights between."""
    return scaled.ScaledChain(
        chain.unary, chain.scaled_left(), chain.right, chain.log_rank_weights, init=chain.init
    )


@register_engine("chain", "low-rank")
class LowRankEngine(ChainEngine):
    """LHMM inference: every operation over states in O(T N R), except those that need N x N."""

    name = "low-rank"
    factor_types = (LowRankChain, RankSpaceChain)
    capabilities = {
        "log_partition": (NATIVE, "two skinny products a step, O(T N R)"),
        "marginals": (NATIVE, "autograd of log Z, O(T N R)"),
        "pairwise_marginals": (FALLBACK, "materializes Psi_t, O(T N^2)"),
        "entropy": (FALLBACK, "materializes N x N (per position with rank weights)"),
        "log_prob": (NATIVE, "scores gathered in O(T R)"),
        "argmax": (FALLBACK, "Viterbi on N x N; with rank weights formed a step at a time, O(T N^2 R)"),
        "sample": (NATIVE, "FFBS; each backward step is an N x R product"),
        "rsample": (NATIVE, "Gumbel-softmax FFBS, N x R products"),
    }

    def prepare(self, factors, lengths=None):
        factors = super().prepare(factors, lengths)
        return factors.low_rank_view() if isinstance(factors, RankSpaceChain) else factors

    def log_partition(self, factors, lengths, twice_differentiable=False):
        problem = low_rank_scaled(factors)
        if twice_differentiable:
            return scaled.forward(problem, lengths, second_order=True)[0]
        return scaled.log_partition(problem, lengths)

    def log_alphas(self, factors, lengths):
        return scaled.forward(low_rank_scaled(factors), lengths)[1]
