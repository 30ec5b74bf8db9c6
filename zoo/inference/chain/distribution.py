"""``LinearChain``: the distribution-style surface of the chain engine, for every backend."""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.chain import divergence, engine, kbest, low_rank, randomized, rank_space  # noqa: F401  (register the engines)
from zoo.inference.chain.factors import ChainFactors
from zoo.inference.checks import check_label_sequences, check_lengths, check_sample_count
from zoo.inference.distribution import StructuredDistribution
from zoo.inference.inference_mode import autograd_ready
from zoo.inference.rdp import RDPOptions
from zoo.inference.unsupported import refuse_untracked_transforms


class LinearChain(StructuredDistribution):
    """A distribution over state sequences of a linear chain (HMM or linear-chain CRF).

    Args:
        factors: a DenseChain, EmbeddingChain, LowRankChain or RankSpaceChain (B x T x N).
        lengths: (B,) lengths in 1..T; None means every sequence has length T.
        backend: "exact", "low-rank", "rank-space" or "randomized" (a ``Backend`` or its string);
            None picks the factors' own backend. "exact" accepts every container (it materializes
            low-rank and rank-space factors densely).
        options: ``RDPOptions`` for the randomized backend. A randomized LinearChain draws its
            kept states once, so all its estimates share one DP graph.

    Operations: ``log_partition`` (B,), ``marginals`` (B x T x N), ``pairwise_marginals``
    (B x (T-1) x N x N), ``entropy`` (B,), ``log_prob(states)``, ``argmax`` (B x T, -1 past each
    length), ``max_score`` (B,), ``sample(n)`` (n x B x T), ``rsample(temperature)`` (B x T x N),
    ``topk(k)`` ((k x B scores, k x B x T states)), ``cross_entropy(other)`` and ``kl(other)`` (B,).
    """

    structure = "chain"
    factor_type = ChainFactors
    accepted = "a DenseChain, EmbeddingChain, LowRankChain or RankSpaceChain"

    def __init__(
        self,
        factors: ChainFactors,
        lengths: Tensor | None = None,
        backend: str | Backend | None = None,
        options: RDPOptions | None = None,
    ):
        self._choose_engine(factors, backend, options)
        refuse_untracked_transforms(list(vars(factors).values()))
        self.lengths = check_lengths(
            lengths, factors.batch, factors.max_length, factors.unary.device
        )
        self.factors = self.engine.prepare(factors, self.lengths)

    def _potentials(self) -> list:
        return list(vars(self.factors).values())

    @cached_property
    @autograd_ready
    def log_partition(self) -> Tensor:
        """log Z: (B,). For the randomized backend, log of the unbiased estimate Z_hat."""
        return self.engine.log_partition(self.factors, self.lengths)

    @cached_property
    @autograd_ready
    def marginals(self) -> Tensor:
        """p(z_t = i): B x T x N, zero past each length."""
        return self.engine.marginals(self.factors, self.lengths)

    @cached_property
    @autograd_ready
    def pairwise_marginals(self) -> Tensor:
        """p(z_{t-1} = i, z_t = j) at [b, t-2, i, j]: B x (T-1) x N x N, zero past each length."""
        return self.engine.pairwise_marginals(self.factors, self.lengths)

    @cached_property
    @autograd_ready
    def entropy(self) -> Tensor:
        """Entropy of the distribution over state sequences: (B,)."""
        return self.engine.entropy(self.factors, self.lengths)

    @cached_property
    @autograd_ready
    def _viterbi(self) -> tuple[Tensor, Tensor]:
        return self.engine.argmax(self.factors, self.lengths)

    @autograd_ready
    def log_prob(self, states: Tensor) -> Tensor:
        """log p(states): states B x T or S x B x T (entries past a length are ignored)."""
        states = check_label_sequences("states", states, self.factors.batch, self.factors.max_length)
        return self.engine.log_prob(self.factors, self.lengths, states, self._known_log_partition())

    @autograd_ready
    def topk(self, k: int) -> kbest.KBest:
        """The k most probable state sequences, best first (k-best Viterbi on the dense form, O(T N^2
        k)): ``(scores, states)``, scores k x B (summed from the potentials: differentiable, as
        ``max_score``) and states k x B x T long, -1 past each length; where a chain has fewer than k
        sequences of non-zero probability, the ranks beyond them score -inf with states -1."""
        check_sample_count(k, "k")
        return kbest.k_best(self.factors, self.lengths, k)

    @autograd_ready
    def cross_entropy(self, other: LinearChain) -> Tensor:
        """H(p, q) = -E_p[log q(z)], p this chain and q ``other`` (the same B, T, N and lengths; any
        containers and backends): (B,), +inf where p gives mass to a sequence q forbids.
        Differentiable in both; exact, on the dense forms (``chain.divergence``)."""
        return divergence.cross_entropy(self, other)

    @autograd_ready
    def kl(self, other: LinearChain) -> Tensor:
        """KL(p || q) = H(p, q) - H(p), p this chain and q ``other``: (B,) (as ``cross_entropy``)."""
        return divergence.kl(self, other)

    @autograd_ready
    def sample(self, n: int = 1, generator: torch.Generator | None = None) -> Tensor:
        """n exact samples (forward filtering, backward sampling): n x B x T, -1 past each length."""
        check_sample_count(n)
        return self.engine.sample(self.factors, self.lengths, n, generator)

    @autograd_ready
    def rsample(
        self, temperature: float = 1.0, generator: torch.Generator | None = None
    ) -> Tensor:
        """A Gumbel-softmax relaxed sample: B x T x N one-hot-like rows, differentiable."""
        self._check_temperature(temperature)
        return self.engine.rsample(self.factors, self.lengths, temperature, generator)
