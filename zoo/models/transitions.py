"""The state-to-state step of the neural HMMs and HSMMs, one head a backend (``TRANSITION_HEADS``).

A family picks its head once, in its constructor, from its backend; the head owns the parameters that
only this backend has and builds the engine's factor container, for a chain (``chain``: the HMMs) or a
semi-Markov chain (``semimarkov``: the HSMMs). Every head takes the same inputs: ``prev`` (N x D, the
previous state's role e_i, after the family's MLPs where it has them), ``nxt`` (N x D, the next state's
role f_j), and ``components`` (C x D, the emitting components: the states, or the rank components of
rank-space, from ``components``).

* ``SoftmaxTransition`` (exact, randomized): p(j | i) = softmax_j(h_T(e_i) . f_j), over j != i without
  self-transitions; N x N is built.
* ``LowRankTransition`` (low-rank): p(j | i) proportional to phi(h_T(e_i)) . phi(f_j), phi(x) = exp(W x)
  (Chiu et al. 2021, Eq. 5-6); N x N is never built.
* ``RankSpaceTransition`` (rank-space): the CPD U[i, r] V[j, r] of the merged factor (Yang et al. 2022,
  Sec. 4.3): U = softmax_r(e_i . g_r), V = softmax_j(f_j . g_r); the rank components g_r emit, and the
  start distribution is over a virtual z_0 (its probabilities, not log-probabilities, enter the factors).

A fifth backend is one more head here (and its engines in ``zoo.inference``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from zoo.inference import (
    Backend,
    DenseChain,
    DenseSemiMarkov,
    LowRankChain,
    LowRankSemiMarkov,
    RankSpaceChain,
    RankSpaceSemiMarkov,
)
from zoo.inference.chain.factors import ChainFactors
from zoo.inference.semimarkov.factors import SemiMarkovFactors
from zoo.models.layers import ExpFeatureMap, ResidualMLP, embedding_table


class TransitionHead(nn.Module):
    """The transition parameterization of one backend (module docstring).

    Args:
        dim: D, the size of the state embeddings.
        mlp: builds the family's residual MLP (h_T) for the heads that have one.
        rank: R (low-rank features, rank components); None for the softmax head.
        dropout: the family's dropout (rank-space drops rank embeddings with it).
        self_transitions: whether p(i | i) may be positive (the HSMMs' choice; the HMMs allow them).
    """

    emits_by_rank = False  # whether the rank components, not the states, emit

    def __init__(
        self,
        dim: int,
        mlp: Callable[[], ResidualMLP],
        rank: int | None,
        dropout: float,
        self_transitions: bool,
    ):
        super().__init__()
        self.self_transitions = self_transitions

    def components(self, states: Tensor, features: Tensor | None = None) -> Tensor:
        """The emitting components' vectors C x D: the states (N x D) unless the ranks emit."""
        return states

    def distributions(self, prev: Tensor, nxt: Tensor) -> dict[str, Tensor]:
        """The normalized transition, for inspection: ``transition`` N x N (p(j | i) at [i, j]), or
        ``U`` and ``V`` (N x R) for rank-space."""
        raise NotImplementedError

    def two_stage(self, prev: Tensor, nxt: Tensor) -> tuple[Tensor, Tensor | None]:
        """The transition as two draws, for sampling without an N x N table where there is none:
        p(j | i) = sum_r first[i, r] second[r, j] with ``first`` N x R (p(r | i)) and ``second`` R x N
        (p(j | r)), rows summing to 1; ``second`` None where r is j itself (R = N). For rank-space, r is
        the rank component that emits."""
        raise NotImplementedError

    def chain(
        self,
        unary: Tensor,
        start: Tensor,
        prev: Tensor,
        nxt: Tensor,
        components: Tensor,
        features: Tensor | None,
    ) -> ChainFactors:
        """The chain's factors: unary B x T x C (log p(x_t | component)), start N (log p(z_1)),
        ``features`` the kept features of feature dropout (None: all)."""
        raise NotImplementedError

    def semimarkov(
        self, unary: Tensor, start: Tensor, prev: Tensor, nxt: Tensor, components: Tensor, duration: Tensor
    ) -> SemiMarkovFactors:
        """The semi-Markov chain's factors: unary B x T x C, start N (log p(z_1)), duration C x D."""
        raise NotImplementedError


class SoftmaxTransition(TransitionHead):
    """p(j | i) = softmax_j(h_T(e_i) . f_j): the softmax HMM / HSMM (exact and randomized)."""

    def __init__(self, dim, mlp, rank, dropout, self_transitions):
        super().__init__(dim, mlp, rank, dropout, self_transitions)
        self.mlp = mlp()  # h_T

    def log_probs(self, prev: Tensor, nxt: Tensor) -> Tensor:
        """log p(z_t = j | z_{t-1} = i) at [i, j]: N x N (-inf on the diagonal without self-transitions)."""
        logits = self.mlp(prev) @ nxt.T
        if not self.self_transitions:
            eye = torch.eye(logits.shape[0], dtype=torch.bool, device=logits.device)
            logits = logits.masked_fill(eye, float("-inf"))
        return torch.log_softmax(logits, -1)

    def distributions(self, prev, nxt):
        return {"transition": self.log_probs(prev, nxt).exp()}

    def two_stage(self, prev, nxt):
        return self.log_probs(prev, nxt).exp(), None

    def chain(self, unary, start, prev, nxt, components, features):
        return DenseChain(unary, self.log_probs(prev, nxt), init=start)

    def semimarkov(self, unary, start, prev, nxt, components, duration):
        return DenseSemiMarkov(unary, self.log_probs(prev, nxt), duration, start)


class LowRankTransition(TransitionHead):
    """p(j | i) proportional to phi(h_T(e_i)) . phi(f_j): the LHMM / LHSMM (low-rank)."""

    def __init__(self, dim, mlp, rank, dropout, self_transitions):
        super().__init__(dim, mlp, rank, dropout, self_transitions)
        self.mlp = mlp()  # h_T
        self.feature_map = ExpFeatureMap(dim, rank)

    def features(self, prev: Tensor, nxt: Tensor, kept: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """phi(h_T(e_i)) and phi(f_j): N x R each (R reduced to the ``kept`` features)."""
        left = self.feature_map(self.mlp(prev), shift="row")
        right = self.feature_map(nxt, shift="global")
        if kept is not None:
            left, right = left[:, kept], right[:, kept]
        return left, right

    def distributions(self, prev, nxt):
        left, right = self.features(prev, nxt)
        scores = left @ right.T
        if not self.self_transitions:
            scores = scores.fill_diagonal_(0.0)
        return {"transition": scores / scores.sum(-1, keepdim=True)}

    def two_stage(self, prev, nxt):
        if not self.self_transitions:  # p(i | i) = 0 is not a sum over features
            raise NotImplementedError("two_stage needs self-transitions (the LHMM's, not the LHSMM's)")
        left, right = self.features(prev, nxt)
        mass = right.sum(0)  # R: sum_j phi(f_j)_r
        first = left * mass
        return first / first.sum(-1, keepdim=True), (right / mass).T

    def chain(self, unary, start, prev, nxt, components, features):
        left, right = self.features(prev, nxt, features)
        return LowRankChain(unary, left, right, init=start)

    def semimarkov(self, unary, start, prev, nxt, components, duration):
        left, right = self.features(prev, nxt)
        return LowRankSemiMarkov(unary, left, right, duration, start, self_transitions=self.self_transitions)


class RankSpaceTransition(TransitionHead):
    """The CPD U[i, r] V[j, r] whose rank components g_r emit: the rank-space HMM / HSMM."""

    emits_by_rank = True

    def __init__(self, dim, mlp, rank, dropout, self_transitions):
        super().__init__(dim, mlp, rank, dropout, self_transitions)
        self.rank_emb = embedding_table(rank, dim)  # g_r
        self.rank_dropout = nn.Dropout(dropout)

    def components(self, states, features=None):
        """The rank embeddings g_r (R x D, dropped out in training; only the kept ``features``)."""
        ranks = self.rank_dropout(self.rank_emb)
        return ranks if features is None else ranks[features]

    def factors(self, prev: Tensor, nxt: Tensor, ranks: Tensor) -> tuple[Tensor, Tensor]:
        """U = p(r | z_{t-1}) (rows sum to 1) and V = p(z_t | r) (columns sum to 1): N x R each."""
        return torch.softmax(prev @ ranks.T, -1), torch.softmax(nxt @ ranks.T, 0)

    def distributions(self, prev, nxt):
        U, V = self.factors(prev, nxt, self.components(prev))
        return {"U": U, "V": V}

    def two_stage(self, prev, nxt):
        U, V = self.factors(prev, nxt, self.components(prev))
        return U, V.T

    def chain(self, unary, start, prev, nxt, components, features):
        U, V = self.factors(prev, nxt, components)
        return RankSpaceChain(start.exp(), U, V, unary)

    def semimarkov(self, unary, start, prev, nxt, components, duration):
        U, V = self.factors(prev, nxt, components)
        return RankSpaceSemiMarkov(start.exp(), U, V, duration, unary)


TRANSITION_HEADS: dict[Backend, type[TransitionHead]] = {
    Backend.EXACT: SoftmaxTransition,
    Backend.RANDOMIZED: SoftmaxTransition,
    Backend.LOW_RANK: LowRankTransition,
    Backend.RANK_SPACE: RankSpaceTransition,
}
# the parameters the heads took over in checkpoint format 3, by their names before (a family's
# ``legacy_keys``, relative to the family's module holding the head as ``transition``)
TRANSITION_LEGACY_KEYS = {
    "trans_mlp": "transition.mlp",
    "feature_map": "transition.feature_map",
    "rank_emb": "transition.rank_emb",
}
