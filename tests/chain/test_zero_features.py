"""A low-rank or rank-space chain's feature entry that is exactly 0 has its true, finite gradient in
every operation: where transition matrices or path scores were formed in log space from the features,
log 0 = -inf carried none. Checked against one-sided finite differences (features must stay >= 0) and,
where it has one, against the native backend (which sums the features' products in probability space).
"""

from __future__ import annotations

import pytest
import torch
from one_sided import assert_gradients_match

from zoo.inference import LinearChain, LowRankChain, RankSpaceChain

F64 = torch.float64
STATES = torch.tensor([[0, 0, 2, 1], [2, 0, 0, 2]])
LENGTHS = torch.tensor([4, 3])


OPTIONS = {"unnormalized": {"normalize": False}, "normalized": {"normalize": True},
           "rank weights": {"normalize": False, "weights": 3.0},
           "rank weights hundreds of nats apart": {"normalize": False, "weights": 100.0}}  # fmt: skip


def low_rank_case(options, seed=0):
    """unary 2 x 4 x 3, left and right 3 x 2 with one zero each (left[0, 1], right[2, 1]; every transition
    stays allowed), log_rank_weights 2 x 3 x 2 or None."""
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(2, 4, 3, generator=g, dtype=F64)
    left, right = (torch.rand(3, 2, generator=g, dtype=F64) + 0.1 for _ in range(2))
    left[0, 1] = right[2, 1] = 0.0
    weights = options.get("weights")
    log_weights = None if weights is None else torch.randn(2, 3, 2, generator=g, dtype=F64) * weights
    return unary, left.requires_grad_(), right.requires_grad_(), log_weights


def low_rank_chain(unary, left, right, log_weights, options):
    return LowRankChain(unary, left, right, normalize=options["normalize"], log_rank_weights=log_weights)


ZEROS = ((0, (0, 1)), (1, (2, 1)))  # left[0, 1], right[2, 1]
BACKENDS = ("low-rank", "exact")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_log_prob_gradient_at_a_zero_feature(options, backend):
    unary, left, right, log_weights = low_rank_case(options)

    def f(left, right):
        chain = low_rank_chain(unary, left, right, log_weights, options)
        return LinearChain(chain, LENGTHS, backend=backend).log_prob(STATES).sum()

    assert_gradients_match(f, [left, right], ZEROS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_log_partition_and_marginals_gradient_at_a_zero_feature(options, backend):
    unary, left, right, log_weights = low_rank_case(options)
    weight = torch.linspace(-1.0, 1.0, 2 * 4 * 3, dtype=F64).view(2, 4, 3)  # a non-uniform read-out

    def f(left, right):
        dist = LinearChain(low_rank_chain(unary, left, right, log_weights, options), LENGTHS, backend=backend)
        return dist.log_partition.sum() + (dist.marginals * weight).sum()

    assert_gradients_match(f, [left, right], ZEROS)


# rank weights hundreds of nats apart saturate the relaxed sample within e^-100 of a zero feature: no
# finite difference resolves its derivative there
@pytest.mark.parametrize("options", list(OPTIONS.values())[:3], ids=list(OPTIONS)[:3])
def test_relaxed_sample_gradient_at_a_zero_feature(options):
    unary, left, right, log_weights = low_rank_case(options, seed=1)
    weight = torch.linspace(-1.0, 1.0, 2 * 4 * 3, dtype=F64).view(2, 4, 3)

    def f(left, right):
        dist = LinearChain(low_rank_chain(unary, left, right, log_weights, options), LENGTHS)
        sample = dist.rsample(temperature=0.7, generator=torch.Generator().manual_seed(3))
        return (sample * weight).sum()

    assert_gradients_match(f, [left, right], ZEROS)


@pytest.mark.parametrize("options", list(OPTIONS.values())[2:], ids=list(OPTIONS)[2:])
def test_divergences_gradient_at_a_zero_feature(options):
    unary, left, right, log_weights = low_rank_case(options, seed=2)
    g = torch.Generator().manual_seed(4)
    p = LinearChain(LowRankChain(torch.randn(2, 4, 3, generator=g, dtype=F64), torch.rand(3, 2, generator=g,
                    dtype=F64) + 0.1, torch.rand(3, 2, generator=g, dtype=F64) + 0.1), LENGTHS)  # fmt: skip

    def f(left, right):
        q = LinearChain(low_rank_chain(unary, left, right, log_weights, options), LENGTHS)
        return p.cross_entropy(q).sum() + q.kl(p).sum()

    assert_gradients_match(f, [left, right], ZEROS)


def rank_space_case(emission_scale=1.0):
    g = torch.Generator().manual_seed(1)
    start, U, V = (torch.rand(*s, generator=g, dtype=F64) + 0.1 for s in ((3,), (3, 2), (3, 2)))
    U[0, 1] = V[2, 1] = 0.0  # every transition stays allowed
    emission = torch.randn(2, 4, 2, generator=g, dtype=F64) * emission_scale
    return start, U.requires_grad_(), V.requires_grad_(), emission


RANK_SPACE_ZEROS = ((0, (0, 1)), (1, (2, 1)))  # U[0, 1], V[2, 1]


@pytest.mark.parametrize("emission_scale", [1.0, 100.0], ids=["emissions", "emissions far apart"])
@pytest.mark.parametrize("backend", ("rank-space", "low-rank", "exact"))
def test_rank_space_gradients_at_a_zero_feature(backend, emission_scale):
    start, U, V, emission = rank_space_case(emission_scale)
    weight = torch.linspace(-1.0, 1.0, 2 * 4 * 3, dtype=F64).view(2, 4, 3)
    states = torch.tensor([[0, 0, 2, 1], [1, 0, 0, 2]])

    def f(U, V):
        dist = LinearChain(RankSpaceChain(start, U, V, emission), LENGTHS, backend=backend)
        return dist.log_prob(states).sum() + (dist.marginals * weight).sum()

    assert_gradients_match(f, [U, V], RANK_SPACE_ZEROS)


def test_rank_space_relaxed_sample_gradient_at_a_zero_feature():
    start, U, V, emission = rank_space_case()
    weight = torch.linspace(-1.0, 1.0, 2 * 4 * 3, dtype=F64).view(2, 4, 3)

    def f(U, V):
        dist = LinearChain(RankSpaceChain(start, U, V, emission), LENGTHS)
        return (dist.rsample(temperature=0.7, generator=torch.Generator().manual_seed(3)) * weight).sum()

    assert_gradients_match(f, [U, V], RANK_SPACE_ZEROS)
