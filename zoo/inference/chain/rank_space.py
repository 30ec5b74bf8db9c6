"""The rank-space forward (Yang et al. 2022, Sec. 4.3): the DP runs over rank nodes only.

With the state nodes marginalized, the rank-to-rank transition is H = V^T U (R x R, computed once
per batch in O(N R^2)); then beta_1 = (s U) * W[x_1], beta_t = (beta_{t-1} H) * W[x_t] and
Z = beta_T . (1^T V). Each step costs O(R^2), independent of the number of states N.

H pays off when the batch has many tokens: its N R^2 multiply-adds are shared by all of them. With few
tokens and a large rank (the paper's PTB HMM: N = 2^14, R = 4096, batches of 256 tokens), streaming
U and V through two skinny products a step, beta_t = ((beta_{t-1} V^T) U) * W[x_t], costs less:
2 N R multiply-adds a row and step, the same beta, the same guarded products. ``streams`` chooses by
the cost of each (measured constants below).
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
from zoo.inference.numerics import needs_grad, safe_log

# The cost of a product of B rows by a K x M matrix, in multiply-adds at the pace of a large product
# (H's): K M max(floor, SKINNY_ROW_COST B). A product of a few rows is bound by reading the matrix, which
# more threads do not speed up as they do a large product: on a CPU the floor is SKINNY_ROWS a thread
# (measured on one and two threads, scripts/bench_chain.py table 7). On a GPU it is SKINNY_ROWS_CUDA, an
# estimate from an H200's float32 rate (67 TFLOP/s) over its memory bandwidth (4.8 TB/s), not measured.
SKINNY_ROWS = 64
SKINNY_ROWS_CUDA = 28
SKINNY_ROW_COST = 3.6


def rank_transition(chain: RankSpaceChain) -> Tensor:
    """H = V^T U, R x R: the once-per-batch precomputation of the rank-space forward."""
    return chain.V.T @ chain.U


def streams(
    B: int, T: int, N: int, R: int, grad: bool, gpu: bool = False, threads: int | None = None
) -> bool:
    """Whether streaming U and V costs less than forming H for B x T positions, N states and rank R,
    priced in multiply-adds of a large product: H costs N R^2 (3 N R^2 with its backward) plus a skinny
    R x R product a step; streaming costs two skinny N x R products a step; with gradients each also
    costs one (T B)-row product per matrix. ``threads``: the CPU threads to price (default: torch's);
    ``gpu``: priced by the GPU's floor instead."""
    threads = torch.get_num_threads() if threads is None else threads
    rows = max(SKINNY_ROWS_CUDA if gpu else SKINNY_ROWS * threads, SKINNY_ROW_COST * B)
    formed = (3 if grad else 1) * N * R * R + T * R * R * rows + (2 * T * B * R * R if grad else 0)
    streamed = 2 * T * N * R * rows + (2 * T * B * N * R if grad else 0)
    return streamed < formed


def chain_streams(chain: RankSpaceChain, grad: bool) -> bool:
    """``streams`` for this chain's shapes and device."""
    B, T, R = chain.emission.shape
    return streams(B, T, chain.num_states, R, grad, gpu=chain.emission.is_cuda)


def rank_space_scaled(chain: RankSpaceChain, streamed: bool = False) -> scaled.ScaledChain:
    """The rank-node chain as a scaled forward: u = log W[x_t] (+ log s U at position 1), end weights
    1^T V, and the step's products: H = V^T U, or (``streamed``) V^T then U."""
    u, init = chain.emission, safe_log(chain.start @ chain.U)
    if streamed:
        return scaled.ScaledChain(u, chain.V.T, chain.U.T, final=chain.V.sum(0), init=init)
    return scaled.ScaledChain(u, rank_transition(chain), final=chain.V.sum(0), init=init)


def rank_space_log_partition(chain: RankSpaceChain, lengths: Tensor) -> Tensor:
    """log Z (B,) in O(N R^2 + T B R^2), or O(T B N R) where that costs less (``streams``), with the
    hand-written backward."""
    grad = needs_grad(chain.start, chain.U, chain.V, chain.emission)
    return scaled.log_partition(rank_space_scaled(chain, chain_streams(chain, grad)), lengths)


@register_engine("chain", "rank-space")
class RankSpaceEngine(LowRankEngine):
    """Rank-space HMM inference: log Z over rank nodes in O(T R^2); operations on states (which
    rank nodes do not carry) run exactly on the equivalent state chain U diag(W[x_t]) V^T."""

    name = "rank-space"
    factor_types = (RankSpaceChain,)
    capabilities = {
        **LowRankEngine.capabilities,
        "log_partition": (
            NATIVE,
            "DP over rank nodes: O(N R^2) once + O(T R^2), or streamed in O(T N R) where that costs less",
        ),
        "marginals": (FALLBACK, "autograd through the state chain, O(T N R)"),
        "log_prob": (FALLBACK, "scores gathered on the state chain, O(T R)"),
        "sample": (FALLBACK, "FFBS on the state chain, O(T N R)"),
        "rsample": (FALLBACK, "Gumbel-softmax FFBS on the state chain, O(T N R)"),
    }

    def prepare(self, factors, lengths=None):
        return ChainEngine.prepare(self, factors, lengths)

    def log_partition(self, factors, lengths, twice_differentiable=False):
        if not isinstance(factors, RankSpaceChain):  # a state chain (a unary probe was added)
            return super().log_partition(factors, lengths, twice_differentiable)
        if twice_differentiable:
            chain = rank_space_scaled(factors, chain_streams(factors, grad=True))
            return scaled.forward(chain, lengths, second_order=True)[0]
        return rank_space_log_partition(factors, lengths)

    def log_alphas(self, factors, lengths):
        return super().log_alphas(factors.low_rank_view(), lengths)
