"""Randomized dynamic programming on chains (Fu, Cunningham, Lapata 2022).

At every position t a proposal q_t over the N states picks the top-K1 states (summed exactly) and
K2 states drawn i.i.d. from q_t restricted to the rest (renormalized) and weighted by
1 / (K2 q_tail(delta)) (Eq. 4-8). The DP then runs over the K = K1 + K2 kept states only:

* the randomized forward (Alg. 1) is the forward of the reduced K-state chain whose unary carries
  the log importance weights; exp(log Z_hat) is unbiased, log Z_hat is a lower bound on average;
* the randomized entropy (Alg. 3) is that chain's entropy with the weights kept out of the score;
* randomized Gumbel backward sampling (Alg. 4) samples backward through the reduced chain.

Index selection runs under ``no_grad`` (outside autograd); the K x K transition blocks are gathered
from the factors, and from state embeddings they are built on the fly, so N x N is never formed.
K2 = 0 gives the top-K baseline (Sun et al. 2019); K1 = N recovers the exact DP.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from zoo.inference.chain import exact
from zoo.inference.chain.engine import (
    ChainEngine,
    ExactEngine,
    gumbel_backward,
)
from zoo.inference.chain.factors import ChainFactors, DenseChain
from zoo.inference.chain.scaled import ZeroProbability
from zoo.inference.engines import register_engine
from zoo.inference.kinds import ESTIMATE, FALLBACK
from zoo.inference.rdp import KeptStates, SequenceLifecycle, check_nonzero_estimate
from zoo.inference.semiring import Entropy


def reduced_chain(factors: ChainFactors, kept: KeptStates) -> DenseChain:
    """The K-state chain over the kept states, importance weights folded into its unary."""
    idx = kept.index
    small = factors.unary.gather(-1, idx) + kept.log_weights  # never a B x T x N temporary
    first = small[:, :1] + factors.init.gather(-1, idx[:, 0]).unsqueeze(1)
    small = torch.cat([first, small[:, 1:]], 1)
    # recomputed in the backward: the gathered embeddings or features (B x T x K x D) are not kept
    blocks = checkpoint(factors.transition_blocks, idx[:, :-1], idx[:, 1:], use_reentrant=False)
    return DenseChain(small, blocks)


def zero_estimates(estimate, small: DenseChain, factors: ChainFactors, lengths: Tensor) -> Tensor:
    """log Z_hat (B,) where the kept states leave some sequence no path: Z_hat = 0 there is a value of
    the unbiased estimator, not an error, so its log is -inf (with a zero gradient: its marginals are
    0) and the other sequences keep theirs, computed together. Where the chain itself has no path (its
    exact forward on the native backend raises ``ZeroProbability``), that error is raised."""
    from zoo.inference.chain.distribution import LinearChain  # the distribution imports this engine

    with torch.no_grad():
        LinearChain(factors, lengths).log_partition  # noqa: B018  (raises where the chain has no path)
        live = has_path(small, lengths).nonzero().flatten()
    unary = small.unary
    out = torch.where(torch.isfinite(unary), unary, 0.0).sum((1, 2)) * 0.0 + float("-inf")  # gradient 0
    if len(live) == 0:
        return out
    return out.index_put((live,), estimate(DenseChain(unary[live], small.transition[live]), lengths[live]))


def has_path(chain: DenseChain, lengths: Tensor) -> Tensor:
    """Whether each sequence of a chain with per-position transitions has a path of finite score: (B,)
    bool, by a forward over which states are reachable (B x K x K products of 0 / 1 entries)."""
    allowed = torch.isfinite(chain.transition).to(chain.unary.dtype)  # B x (T-1) x K x K
    open_ = torch.isfinite(chain.unary)  # B x T x K
    reach = open_[:, 0] & torch.isfinite(chain.init)
    ends = [reach.any(-1)]
    for t in range(1, chain.max_length):
        reach = ((reach.to(allowed.dtype).unsqueeze(-2) @ allowed[:, t - 1]).squeeze(-2) > 0) & open_[:, t]
        ends.append(reach.any(-1))
    return torch.stack(ends, -1).gather(-1, (lengths - 1).unsqueeze(-1)).squeeze(-1)


@register_engine("chain", "randomized")
class RandomizedEngine(SequenceLifecycle, ChainEngine):
    """RDP estimators over the states kept at each position; see the module docstring."""

    name = "randomized"
    factor_types = (ChainFactors,)
    capabilities = {
        "log_partition": (ESTIMATE, "Alg. 1 in log space: O(T K^2); exp is unbiased"),
        "marginals": (ESTIMATE, "autograd of the Alg. 1 estimate (non-zero on kept states)"),
        "pairwise_marginals": (FALLBACK, "exact, on the materialized N x N"),
        "entropy": (ESTIMATE, "Alg. 3: O(T K^2)"),
        "log_prob": (FALLBACK, "exact log Z on the materialized chain"),
        "argmax": (FALLBACK, "exact Viterbi on the materialized chain"),
        "sample": (FALLBACK, "exact FFBS on the materialized chain"),
        "rsample": (ESTIMATE, "Alg. 4: randomized Gumbel backward sampling (argmax = hard sample)"),
    }

    def log_partition(self, factors, lengths, twice_differentiable=False):
        small = reduced_chain(factors, self.kept_states(factors))

        def estimate(chain: DenseChain, lengths):
            if twice_differentiable:
                return exact.log_forward(chain, lengths, second_order=True)[0]
            return exact.fast_log_partition(chain, lengths)

        try:
            return estimate(small, lengths)
        except ZeroProbability:
            return zero_estimates(estimate, small, factors, lengths)

    def differentiated(self, log_z):
        return check_nonzero_estimate(log_z, "marginals are")

    def log_alphas(self, factors, lengths):
        return exact.log_forward(reduced_chain(factors, self.kept_states(factors)), lengths)[1]

    def entropy(self, factors, lengths):
        kept = self.kept_states(factors)
        with self._naming_an_estimate_of_zero(factors, lengths, "entropy is"):
            return exact.forward(reduced_chain(factors, kept), lengths, Entropy, kept.log_weights)[0]

    @contextlib.contextmanager
    def _naming_an_estimate_of_zero(self, factors, lengths, what: str):
        """Where the kept states leave a sequence no path, the ``ZeroProbability`` of the reduced chain
        (which blamed the chain's potentials) becomes the estimate's error; the chain's own stays."""
        try:
            yield
        except ZeroProbability:
            with torch.no_grad():
                check_nonzero_estimate(self.log_partition(factors, lengths), what)
            raise

    def log_prob(self, factors, lengths, states, log_z=None):  # exact: never the estimate's log Z
        return ExactEngine().log_prob(factors.dense(), lengths, states)

    def sample(self, factors, lengths, n, generator=None):
        return ExactEngine().sample(factors.dense(), lengths, n, generator)

    def rsample(self, factors, lengths, temperature, generator=None):
        """Alg. 4 on the kept states, scattered back to B x T x N.

        Alg. 4 as printed leaves the importance weights out of p_hat; we keep them (they are folded
        into the reduced chain), so that the sampled tail states carry the mass they stand for and
        K1 = N gives exact Gumbel-FFBS.
        """
        kept = self.kept_states(factors)
        small = reduced_chain(factors, kept)
        with self._naming_an_estimate_of_zero(factors, lengths, "relaxed samples are"):
            alphas = exact.log_forward(small, lengths)[1]
        generator = generator if generator is not None else self.options.generator
        _, soft = gumbel_backward(
            alphas, small.transition_columns(), lengths, 1, temperature, generator
        )
        out = soft.new_zeros(*soft.shape[:-1], factors.num_states)
        return out.scatter_add(-1, kept.index.unsqueeze(0), soft)[0]
