"""The low-rank forward (Chiu et al. 2021, Eq. 3): each step is two skinny products, O(N R).

alpha_t = ((alpha_{t-1} @ diag(c) L) * w_t) @ R^T * exp(unary_t): N x N is never built.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain.engine import FALLBACK, NATIVE, ChainEngine
from zoo.inference.chain.factors import LowRankChain, RankSpaceChain
from zoo.inference.chain.scaled import pull_max, scaled_forward


def low_rank_forward(chain: LowRankChain, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """log Z (B,) and log alphas (B x T x N) of a low-rank chain: O(T N R) time, O(T B (N + R)) memory."""
    u = torch.cat([chain.unary[:, :1] + chain.init.unsqueeze(1), chain.unary[:, 1:]], 1)
    e, m = pull_max(u)  # B x T x N, B x T
    left = chain.scaled_left()
    right_t = chain.right.T
    if chain.log_rank_weights is None:
        w, wm = None, torch.zeros_like(m)
    else:
        w, wmax = pull_max(chain.log_rank_weights)  # B x (T-1) x R
        wm = torch.cat([torch.zeros_like(m[:, :1]), wmax], 1)

    def step(t: int, a: Tensor) -> Tensor:
        h = a @ left
        if w is not None:
            h = h * w[:, t]
        return (h @ right_t) * e[:, t + 1]

    return scaled_forward(e[:, 0], step, m + wm, lengths)


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
        "argmax": (FALLBACK, "Viterbi on the materialized N x N"),
        "sample": (NATIVE, "FFBS; each backward step is an N x R product"),
        "rsample": (NATIVE, "Gumbel-softmax FFBS, N x R products"),
    }

    def prepare(self, factors):
        factors = super().prepare(factors)
        return factors.low_rank_view() if isinstance(factors, RankSpaceChain) else factors

    def log_partition(self, factors, lengths, twice_differentiable=False):
        return low_rank_forward(factors, lengths)[0]

    def log_alphas(self, factors, lengths):
        return low_rank_forward(factors, lengths)[1]
