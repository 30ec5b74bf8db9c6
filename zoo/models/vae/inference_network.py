"""The structured VAE's inference network q(z | y): a linear-chain CRF over N states (Fu et al. 2022, Sec. 4).

Each state i has an embedding e_i (N x D). Given contextual vectors r_t (B x T x D, from the encoder),

    log Phi(z_{t-1} = i, z_t = j) = e_i . e_j,    log phi(z_t = i, y_t) = e_i . r_t      (Eq. 29-31)

and q(z | y) = prod_t Phi(z_{t-1}, z_t) phi(z_t, y_t) / Z. How the chain is computed (``backend``):

* ``exact``: the full forward (an ``EmbeddingChain``), Gumbel-FFBS relaxed samples, exact entropy;
* ``randomized``: RDP (Fu et al. 2022): randomized Gumbel backward sampling (Alg. 4) and the
  randomized entropy (Alg. 3) over the top-K1 plus K2 sampled states of the proposal (Eq. 34 by
  default); ``k2 = 0`` is the top-K baseline;
* ``low-rank``: non-negative feature-map transitions log Phi(i, j) = log phi(e_i) . phi(e_j) with
  phi(x) = exp(W x) (Chiu et al. 2021): every step O(N R), N x N is never built;
* ``rank-space`` does not apply; see ``RANK_SPACE_ERROR``.

The transition is a head chosen once from the backend (``CRF_TRANSITIONS``): ``EmbeddingTransition``
(exact, randomized) or ``FeatureTransition`` (low-rank), which owns the feature map.

``posterior(r, lengths, exact=True)`` gives the chain every backend represents exactly (dense
embeddings or low-rank features): evaluation samples and scores q with it (importance sampling).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.inference import Backend, EmbeddingChain, LinearChain, LowRankChain
from zoo.inference.chain.factors import ChainFactors
from zoo.inference.rdp import PROPOSALS
from zoo.models.arguments import check_int, check_randomized, check_rank
from zoo.models.evaluation import RandomizedEvaluation
from zoo.models.layers import ExpFeatureMap

RANK_SPACE_ERROR = (
    "backend='rank-space' does not apply to the structured VAE's CRF: the rank-space forward (Yang et al. "
    "2022, Sec. 4.3) marginalizes the states of a CPD of the merged transition-emission factor "
    "sum_r U[z_{t-1}, r] V[z_t, r] W[y_t, r], whose emission W is a fixed table per word, so that it can be "
    "folded into the rank components. The CRF's emission phi(z_t, y_t) = e_z . r_t is contextual (r_t is the "
    "GPT-2 state of the whole prefix) and its potentials are unnormalized, so no rank-space factor carries "
    "it: folding it in costs O(T N R) per sequence, which is exactly the low-rank forward. Use "
    "backend='low-rank' (with rank=R) for a CRF whose N x N transition is never built."
)


class EmbeddingTransition(nn.Module):
    """log Phi(i, j) = e_i . e_j, the N x N dot products (exact and randomized); no parameters of its own."""

    def __init__(self, num_states: int, dim: int, rank: int | None):
        super().__init__()

    def factors(self, unary: Tensor, states: Tensor) -> ChainFactors:
        """The CRF's factors. unary: B x T x N (e_i . r_t); states: N x D (e_i)."""
        return EmbeddingChain(unary, states)


class FeatureTransition(nn.Module):
    """log Phi(i, j) = log phi(e_i) . phi(e_j), phi(x) = exp(W x) with R features (low-rank)."""

    def __init__(self, num_states: int, dim: int, rank: int | None):
        super().__init__()
        self.feature_map = ExpFeatureMap(dim, rank)

    def factors(self, unary: Tensor, states: Tensor) -> ChainFactors:
        # one detached global shift: it rescales every potential alike, so q is unchanged
        features = self.feature_map(states, shift="global")
        return LowRankChain(unary, features, features, normalize=False)


CRF_TRANSITIONS = {
    Backend.EXACT: EmbeddingTransition,
    Backend.RANDOMIZED: EmbeddingTransition,
    Backend.LOW_RANK: FeatureTransition,
}


class CRFInferenceNetwork(RandomizedEvaluation, nn.Module):
    """q(z | y) as a linear-chain CRF with state embeddings (see the module docstring).

    Args:
        num_states: N.
        dim: D, the size of the state embeddings and of the encoder's vectors r_t.
        backend: "exact", "randomized" or "low-rank" ("rank-space" raises ``RANK_SPACE_ERROR``).
        k1, k2: randomized only (required): top states summed exactly and states sampled per
            position; k1 + k2 <= N; k2 = 0 is the top-K baseline.
        proposal: randomized only: "local+global" (Eq. 34), "local", "global" or "uniform".
        rank: low-rank only (required): R, the number of features (<= N).
    """

    def __init__(
        self,
        num_states: int,
        dim: int,
        backend: str = "exact",
        k1: int | None = None,
        k2: int | None = None,
        proposal: str = "local+global",
        rank: int | None = None,
    ):
        super().__init__()
        check_int("num_states", num_states)
        check_int("dim", dim)
        parsed = Backend.parse(backend)
        if parsed not in CRF_TRANSITIONS:
            raise ValueError(RANK_SPACE_ERROR)
        check_randomized(
            parsed,
            k1,
            k2,
            proposal,
            proposals=PROPOSALS,
            size_name="num_states",
            limit=num_states,
            unit="per position",
            example="k1 = k2 = num_states // 10 (Fu et al. 2022)",
        )
        check_rank(
            parsed,
            rank,
            "the number of non-negative features",
            backends=(Backend.LOW_RANK,),
            size_name="num_states",
            size=num_states,
            slower="CRF is slower than the exact one",
        )
        self.num_states, self.backend = num_states, parsed.value
        self.k1, self.k2, self.proposal, self.rank = k1, k2, proposal, rank
        self.states = nn.Parameter(torch.randn(num_states, dim) / dim**0.5)  # e_i
        self.transition = CRF_TRANSITIONS[parsed](num_states, dim, rank)

    def unary(self, r: Tensor) -> Tensor:
        """log phi(z_t = i, y_t) = e_i . r_t: B x T x N. r: B x T x D."""
        return r @ self.states.T

    def posterior(
        self,
        r: Tensor,
        lengths: Tensor,
        exact: bool = False,
        generator: torch.Generator | None = None,
    ) -> LinearChain:
        """q(z | y) for the encoder vectors r (B x T x D) as a ``LinearChain``.

        ``exact=True`` (or backend "exact" / "low-rank"): the chain computed exactly (dense or low-rank).
        Otherwise the randomized chain: one draw of kept states (``generator`` seeds it and Alg. 4's
        Gumbel noise) shared by its entropy and relaxed sample.
        """
        factors = self.transition.factors(self.unary(r), self.states)
        return LinearChain(factors, lengths, *self.engine_backend(generator, exact=exact))

    def extra_repr(self) -> str:
        extra = f", k1={self.k1}, k2={self.k2}, proposal={self.proposal!r}" if self.k1 is not None else ""
        extra += f", rank={self.rank}" if self.rank is not None else ""
        return f"num_states={self.num_states}, backend={self.backend!r}{extra}"
