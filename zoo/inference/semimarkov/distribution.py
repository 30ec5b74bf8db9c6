"""``SemiMarkovChain``: the distribution-style surface of the semi-Markov engine, for every backend."""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.checks import check_label_sequences, check_lengths, check_sample_count
from zoo.inference.distribution import StructuredDistribution
from zoo.inference.inference_mode import autograd_ready
from zoo.inference.numerics import needs_grad
from zoo.inference.rdp import RDPOptions
from zoo.inference.semimarkov import divergence, exact, kbest, low_rank, randomized  # noqa: F401  (register the engines)
from zoo.inference.semimarkov.engine import segmentation_score
from zoo.inference.semimarkov.factors import SemiMarkovFactors
from zoo.inference.semimarkov.rank_space import rank_space_argmax


class SemiMarkovChain(StructuredDistribution):
    """A distribution over segmentations of a sequence into labelled segments of length 1..D (HSMM).

    Args:
        factors: DenseSemiMarkov, LowRankSemiMarkov, RankSpaceSemiMarkov or EdgeSemiMarkov.
        lengths: (B,) lengths in 1..T; None means every sequence has length T.
        backend: "exact", "low-rank", "rank-space" or "randomized"; None picks the factors' own.
            "exact" accepts every container (materializing low-rank and rank-space factors).
        options: ``RDPOptions`` for the randomized backend (its kept states are drawn once).

    Segmentations are ... x B x T long tensors: the state of the segment starting at frame t, -1
    elsewhere (docs/semimarkov-api.md). Operations: ``log_partition`` (B,), ``segment_marginals``
    (B x T x D x N), ``marginals`` (B x T x N), ``entropy`` (B,), ``log_prob(segmentation)``,
    ``argmax`` (B x T), ``max_score`` (B,), ``sample(n)`` (n x B x T), ``rsample(temperature)``
    (B x T x D x N).
    """

    structure = "semimarkov"
    factor_type = SemiMarkovFactors
    accepted = "a DenseSemiMarkov, LowRankSemiMarkov, RankSpaceSemiMarkov or EdgeSemiMarkov"

    def __init__(
        self,
        factors: SemiMarkovFactors,
        lengths: Tensor | None = None,
        backend: str | Backend | None = None,
        options: RDPOptions | None = None,
    ):
        self._choose_engine(factors, backend, options)
        self.lengths = check_lengths(lengths, factors.batch, factors.max_length, factors.device)
        self.factors = self.engine.prepare(factors, self.lengths)

    def _potentials(self) -> list:
        return list(vars(self.factors).values())

    @cached_property
    @autograd_ready
    def log_partition(self) -> Tensor:
        """log Z: (B,); for the randomized backend, log of the unbiased estimate Z_hat."""
        log_z = self.engine.log_partition(self.factors, self.lengths)
        return self.engine.checked(log_z, self.factors, self.lengths)

    @cached_property
    @autograd_ready
    def segment_marginals(self) -> Tensor:
        """p(segment covering frames s..s+d-1 with state j) at [b, s, d-1, j]: B x T x D x N."""
        return self.engine.segment_marginals(self.factors, self.lengths)

    @cached_property
    @autograd_ready
    def marginals(self) -> Tensor:
        """p(frame t lies in a segment with state j): B x T x N, zero past each length."""
        return self.engine.marginals(self.factors, self.lengths)

    @cached_property
    @autograd_ready
    def entropy(self) -> Tensor:
        """Entropy of the distribution over (segmentation, states): (B,)."""
        if self.backend is not Backend.RANDOMIZED:
            self.log_partition  # noqa: B018  (raises when no segmentation covers a sequence)
        return self.engine.entropy(self.factors, self.lengths)

    @cached_property
    @autograd_ready
    def _viterbi(self) -> tuple[Tensor, Tensor]:
        score, segmentation = self.engine.argmax(self.factors, self.lengths)
        self.engine.checked(score, self.factors, self.lengths)  # a best score of -inf: log Z = -inf
        if needs_grad(*vars(self.factors).values()):
            # the best segmentation's score summed from the potentials: its gradient is its indicator
            score = segmentation_score(self.factors, segmentation, self.lengths)
        return score, segmentation

    @cached_property
    @autograd_ready
    def _rank_viterbi(self) -> tuple[Tensor, Tensor]:
        if self.backend is not Backend.RANK_SPACE:
            raise TypeError(
                "rank_argmax decodes over the rank nodes of a rank-space model: it needs backend "
                f"'rank-space' (RankSpaceSemiMarkov factors), got backend {self.backend.value!r}; use argmax"
            )
        return rank_space_argmax(self.factors, self.lengths)

    @property
    def rank_argmax(self) -> Tensor:
        """Rank-space only: the best (segmentation, rank components) with the states summed out,
        B x T (the rank component of each segment at its start, -1 elsewhere); O(T (D R + R^2))."""
        return self._rank_viterbi[1]

    @property
    def rank_max_score(self) -> Tensor:
        """Rank-space only: the log weight of ``rank_argmax`` (states summed out): (B,)."""
        return self._rank_viterbi[0]

    @autograd_ready
    def log_prob(self, segmentation: Tensor) -> Tensor:
        """log p(segmentation): B x T or S x B x T -> (B,) or (S, B)."""
        segmentation = check_label_sequences(
            "segmentation", segmentation, self.factors.batch, self.factors.max_length
        )
        segmentation = segmentation.to(self.lengths.device)
        return self.engine.log_prob(self.factors, self.lengths, segmentation, self._known_log_partition())

    @autograd_ready
    def topk(self, k: int) -> kbest.KBest:
        """The k best segmentations, best first (k-best Viterbi in float64: O(T N k (N + D)) for dense
        and low-rank containers, O(T D N^2 k) on the per-segment form for rank-space and edge ones):
        ``(scores, segmentations)``, scores k x B (summed from the potentials: differentiable, as
        ``max_score``) and segmentations k x B x T; ranks beyond a sequence's segmentations of non-zero
        probability score -inf, their segmentations -1. ``topk(1)`` is ``(max_score, argmax)``."""
        check_sample_count(k, "k")
        return kbest.k_best(self.factors, self.lengths, k)

    @autograd_ready
    def cross_entropy(self, other: SemiMarkovChain) -> Tensor:
        """H(p, q) = -E_p[log q(y)], p this chain and q ``other`` (the same B, T, D, N and lengths; any
        containers and backends): (B,), +inf where p gives mass to a segmentation q forbids.
        Differentiable in both; exact (``semimarkov.divergence``: O(T (D N + N^2)) for dense and
        low-rank containers, on the per-segment forms for rank-space and edge ones)."""
        return divergence.cross_entropy(self, other)

    @autograd_ready
    def kl(self, other: SemiMarkovChain) -> Tensor:
        """KL(p || q) = H(p, q) - H(p), p this chain and q ``other``: (B,) (as ``cross_entropy``)."""
        return divergence.kl(self, other)

    @autograd_ready
    def sample(self, n: int = 1, generator: torch.Generator | None = None) -> Tensor:
        """n exact samples: n x B x T segmentations."""
        check_sample_count(n)
        if self.backend is not Backend.RANDOMIZED:
            self.log_partition  # noqa: B018
        return self.engine.sample(self.factors, self.lengths, n, generator)

    @autograd_ready
    def rsample(self, temperature: float = 1.0, generator: torch.Generator | None = None) -> Tensor:
        """Relaxed segment indicators B x T x D x N (Gumbel-softmax backward sampling), differentiable."""
        self._check_temperature(temperature)
        if self.backend is not Backend.RANDOMIZED:
            self.log_partition  # noqa: B018
        return self.engine.rsample(self.factors, self.lengths, temperature, generator)
