"""Cross-backend identities: a factor materialized densely gives the same answers under ``exact``.

Sizes here are past brute-force reach (N up to 48, T up to 12) but small enough for float64.
"""

import pytest
import torch

from zoo.inference import DenseChain, LinearChain, LowRankChain, RankSpaceChain

B, T = 4, 12
LENGTHS = torch.tensor([12, 1, 7, 9])


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def low_rank(n, r, seed=0, weights=False):
    g = _gen(seed)
    kw = {}
    if weights:
        kw = dict(
            normalize=False, log_rank_weights=torch.randn(B, T - 1, r, generator=g, dtype=torch.float64)
        )
    return LowRankChain(
        torch.randn(B, T, n, generator=g, dtype=torch.float64),
        torch.randn(n, r, generator=g, dtype=torch.float64).exp(),
        torch.randn(n, r, generator=g, dtype=torch.float64).exp(),
        init=torch.randn(n, generator=g, dtype=torch.float64).log_softmax(-1),
        **kw,
    )


def rank_space(n, r, seed=0):
    g = _gen(seed)
    return RankSpaceChain(
        torch.randn(n, generator=g, dtype=torch.float64).softmax(-1),
        torch.randn(n, r, generator=g, dtype=torch.float64).softmax(-1),
        torch.randn(n, r, generator=g, dtype=torch.float64).softmax(0),
        torch.randn(B, T, r, generator=g, dtype=torch.float64).log_softmax(-1),
    )


CASES = {
    "low-rank": lambda: low_rank(48, 8),
    "low-rank, R > N": lambda: low_rank(6, 16, seed=1),
    "low-rank, per-position rank weights": lambda: low_rank(24, 5, seed=2, weights=True),
    "rank-space": lambda: rank_space(40, 6),
    "rank-space, R > N": lambda: rank_space(5, 12, seed=3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_native_backend_matches_exact_on_materialized_factor(case):
    factors = CASES[case]()
    native = LinearChain(factors, LENGTHS)
    dense = LinearChain(factors.dense(), LENGTHS)
    torch.testing.assert_close(native.log_partition, dense.log_partition, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(native.marginals, dense.marginals, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(native.entropy, dense.entropy, rtol=1e-8, atol=1e-10)
    states = dense.sample(3, torch.Generator().manual_seed(0))
    torch.testing.assert_close(native.log_prob(states), dense.log_prob(states), rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(native.max_score, dense.max_score, rtol=1e-10, atol=1e-10)


def test_rank_space_equals_its_low_rank_state_chain():
    factors = rank_space(32, 7, seed=5)
    rank = LinearChain(factors, LENGTHS).log_partition
    state = LinearChain(factors, LENGTHS, backend="low-rank").log_partition
    torch.testing.assert_close(rank, state, rtol=1e-10, atol=1e-10)


def test_normalized_low_rank_is_a_transition_matrix():
    factors = low_rank(20, 4)
    torch.testing.assert_close(factors.dense().transition.logsumexp(-1), torch.zeros(20, dtype=torch.float64))


def test_hmm_log_partition_is_a_log_likelihood_below_zero():
    """A normalized HMM (softmax transitions, emissions, init) never gives log p(x) > 0."""
    g = _gen(7)
    n, v = 30, 5
    emit = torch.randn(n, v, generator=g).log_softmax(-1)
    words = torch.randint(v, (B, T), generator=g)
    chain = DenseChain(
        emit.T[words],
        torch.randn(n, n, generator=g).log_softmax(-1),
        torch.randn(n, generator=g).log_softmax(-1),
    )
    assert (LinearChain(chain, LENGTHS).log_partition <= 0).all()


def test_exact_shared_fast_path_matches_log_space_and_its_gradients():
    g = _gen(11)
    n = 16
    unary = torch.randn(B, T, n, generator=g, dtype=torch.float64, requires_grad=True)
    trans = torch.randn(n, n, generator=g, dtype=torch.float64, requires_grad=True)
    shared = LinearChain(DenseChain(unary, trans), LENGTHS).log_partition
    per_pos = LinearChain(DenseChain(unary, trans.expand(B, T - 1, n, n)), LENGTHS).log_partition
    torch.testing.assert_close(shared, per_pos)
    ga = torch.autograd.grad(shared.sum(), (unary, trans))
    gb = torch.autograd.grad(per_pos.sum(), (unary, trans))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b)


def test_float32_matches_float64_at_moderate_size():
    factors = low_rank(64, 8, seed=4)
    as32 = LowRankChain(
        factors.unary.float(), factors.left.float(), factors.right.float(), init=factors.init.float()
    )
    torch.testing.assert_close(
        LinearChain(as32, LENGTHS).log_partition.double(),
        LinearChain(factors, LENGTHS).log_partition,
        rtol=1e-5,
        atol=1e-4,
    )
