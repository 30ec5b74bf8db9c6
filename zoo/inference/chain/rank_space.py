"""The rank-space forward (Yang et al. 2022, Sec. 4.3): the DP runs over rank nodes only.

With the state nodes marginalized, the rank-to-rank transition is H = V^T U (R x R, computed once
per batch in O(N R^2)); then beta_1 = (s U) * W[x_1], beta_t = (beta_{t-1} H) * W[x_t] and
Z = beta_T . (1^T V). Each step costs O(R^2), independent of the number of states N.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain import scaled
from zoo.inference.chain.engine import ChainEngine
from zoo.inference.chain.factors import RankSpaceChain
from zoo.inference.chain.low_rank import LowRankEngine
from zoo.inference.engines import register_engine
from zoo.inference.kinds import FALLBACK, NATIVE
from zoo.inference.numerics import safe_log


def rank_transition(chain: RankSpaceChain) -> Tensor:
    """H = V^T U, R x R: the once-per-batch precomputation of the rank-space forward."""
    return chain.V.T @ chain.U


def rank_space_scaled(chain: RankSpaceChain, transition: Tensor | None = None) -> scaled.ScaledChain:
    """The rank-node chain as a scaled forward: u = log W[x_t] (+ log s U at position 1),
    left = V^T U (or ``transition``, to reuse a precomputed one), end weights 1^T V."""
    H = rank_transition(chain) if transition is None else transition
    first = chain.emission[:, :1] + safe_log(chain.start @ chain.U).unsqueeze(1)
    u = torch.cat([first, chain.emission[:, 1:]], 1)
    return scaled.ScaledChain(u, H, final=chain.V.sum(0))


def rank_space_log_partition(
    chain: RankSpaceChain, lengths: Tensor, transition: Tensor | None = None
) -> Tensor:
    """log Z (B,) in O(N R^2 + T R^2) with the hand-written backward."""
    return scaled.log_partition(rank_space_scaled(chain, transition), lengths)


@register_engine("chain", "rank-space")
class RankSpaceEngine(LowRankEngine):
    """Rank-space HMM inference: log Z over rank nodes in O(T R^2); operations on states (which
    rank nodes do not carry) run exactly on the equivalent state chain U diag(W[x_t]) V^T."""

    name = "rank-space"
    factor_types = (RankSpaceChain,)
    capabilities = {
        **LowRankEngine.capabilities,
        "log_partition": (NATIVE, "DP over rank nodes: O(N R^2) once + O(T R^2)"),
        "marginals": (FALLBACK, "autograd through the state chain, O(T N R)"),
        "log_prob": (FALLBACK, "scores gathered on the state chain, O(T R)"),
        "sample": (FALLBACK, "FFBS on the state chain, O(T N R)"),
        "rsample": (FALLBACK, "Gumbel-softmax FFBS on the state chain, O(T N R)"),
    }

    def prepare(self, factors):
        return ChainEngine.prepare(self, factors)

    def log_partition(self, factors, lengths, twice_differentiable=False):
        if not isinstance(factors, RankSpaceChain):  # a state chain (a unary probe was added)
            return super().log_partition(factors, lengths, twice_differentiable)
        if twice_differentiable:
            return scaled.forward(rank_space_scaled(factors), lengths)[0]
        return rank_space_log_partition(factors, lengths)

    def log_alphas(self, factors, lengths):
        return super().log_alphas(factors.low_rank_view(), lengths)
