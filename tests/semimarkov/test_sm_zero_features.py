"""A rank-space HSMM's feature entry (U, V) that is exactly 0 has its true, finite gradient in every
operation: the per-segment form (the state-level operations) and the segment scores (``log_prob``) were
formed in log space from the features, where log 0 = -inf carried none. Checked against one-sided
finite differences, as tests/chain/test_zero_features.py does for chains."""

from __future__ import annotations

import pytest
import torch
from one_sided import assert_gradients_match

from zoo.inference import LowRankSemiMarkov, RankSpaceSemiMarkov, SemiMarkovChain

F64 = torch.float64
LENGTHS = torch.tensor([5, 4])
SEGMENTATION = torch.tensor([[1, -1, 0, 2, -1], [2, 0, -1, -1, 9]])  # a state at each segment's start
ZEROS = ((0, (0, 1)), (1, (2, 1)))  # U[0, 1], V[2, 1]: every transition stays allowed


def rank_space_case(emission_scale):
    g = torch.Generator().manual_seed(5)
    start, U, V = (torch.rand(*s, generator=g, dtype=F64) + 0.1 for s in ((3,), (3, 2), (3, 2)))
    U[0, 1] = V[2, 1] = 0.0
    duration = torch.log_softmax(torch.randn(2, 3, generator=g, dtype=F64), -1)  # R x D
    emission = torch.randn(2, 5, 2, generator=g, dtype=F64) * emission_scale
    return start, U.requires_grad_(), V.requires_grad_(), duration, emission


@pytest.mark.parametrize("emission_scale", [1.0, 100.0], ids=["emissions", "emissions far apart"])
@pytest.mark.parametrize("backend", ("rank-space", "exact"))
def test_rank_space_gradients_at_a_zero_feature(backend, emission_scale):
    start, U, V, duration, emission = rank_space_case(emission_scale)
    weight = torch.linspace(-1.0, 1.0, 2 * 5 * 3 * 3, dtype=F64).view(2, 5, 3, 3)  # B x T x D x N

    def f(U, V):
        dist = SemiMarkovChain(RankSpaceSemiMarkov(start, U, V, duration, emission), LENGTHS, backend=backend)
        return dist.log_prob(SEGMENTATION).sum() + (dist.segment_marginals * weight).sum()

    assert_gradients_match(f, [U, V], ZEROS)


@pytest.mark.parametrize("self_transitions", [True, False])
@pytest.mark.parametrize("normalize", [True, False])
def test_low_rank_native_gradients_where_the_features_forbid_a_transition(normalize, self_transitions):
    """left[1] . right[2] = 0 forbids 1 -> 2 outright. Without self-transitions, the columns whose own
    state carried most of their mass were recomputed in log space: d log Z / d left[1, 0] came back 0.915
    where it is 1.281 (audit Z). The native low-rank backend is right there (the dense form cannot be:
    docs/chain-api.md)."""
    g = torch.Generator().manual_seed(6)
    unary = torch.randn(2, 5, 3, generator=g, dtype=F64)
    duration = torch.randn(3, 3, generator=g, dtype=F64)
    left, right = (torch.rand(3, 2, generator=g, dtype=F64) + 0.1 for _ in range(2))
    left[1, 0] = right[2, 1] = 0.0
    left[:, 0] *= 0.01  # state 1's self-transition (left[1, 1] right[1, 1]) carries most of its column's mass
    weight = torch.linspace(-1.0, 1.0, 2 * 5 * 3, dtype=F64).view(2, 5, 3)

    def f(left, right):
        chain = LowRankSemiMarkov(unary, left, right, duration, normalize=normalize,
                                  self_transitions=self_transitions)  # fmt: skip
        dist = SemiMarkovChain(chain, LENGTHS)
        return dist.log_partition.sum() + (dist.marginals * weight).sum()

    assert_gradients_match(f, [left.requires_grad_(), right.requires_grad_()], ((0, (1, 0)), (1, (2, 1))))
