"""Cross-backend identities past brute-force reach (float64): each structured factor, materialized,
gives the same answers under ``exact``; the dense HSMM agrees with its per-segment (edge) form."""

import pytest
import torch

from zoo.inference import (
    DenseSemiMarkov,
    LowRankSemiMarkov,
    RankSpaceSemiMarkov,
    SemiMarkovChain,
)

B, T, D = 4, 12, 4
LENGTHS = torch.tensor([12, 1, 7, 10])
F64 = torch.float64


def _g(seed):
    return torch.Generator().manual_seed(seed)


def dense(n, seed=0, no_self=True, t=T, d=D, batch=B):
    g = _g(seed)
    trans = torch.randn(n, n, generator=g, dtype=F64)
    if no_self:
        trans = trans.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf"))
    return DenseSemiMarkov(
        torch.randn(batch, t, n, generator=g, dtype=F64),
        trans.log_softmax(-1),
        torch.randn(n, d, generator=g, dtype=F64).log_softmax(-1),
        torch.randn(n, generator=g, dtype=F64).log_softmax(-1),
    )


def low_rank(n, r, seed=0, self_transitions=False, normalize=True):
    g = _g(seed)
    return LowRankSemiMarkov(
        torch.randn(B, T, n, generator=g, dtype=F64),
        torch.randn(n, r, generator=g, dtype=F64).exp(),
        torch.randn(n, r, generator=g, dtype=F64).exp(),
        torch.randn(B, n, D, generator=g, dtype=F64).log_softmax(-1),
        torch.randn(n, generator=g, dtype=F64).log_softmax(-1),
        normalize=normalize,
        self_transitions=self_transitions,
    )


def rank_space(n, r, seed=0, t=8, d=3):
    g = _g(seed)
    return RankSpaceSemiMarkov(
        torch.randn(n, generator=g, dtype=F64).softmax(-1),
        torch.randn(n, r, generator=g, dtype=F64).softmax(-1),
        torch.randn(n, r, generator=g, dtype=F64).softmax(0),
        torch.randn(r, d, generator=g, dtype=F64).log_softmax(-1),
        torch.randn(B, t, r, generator=g, dtype=F64) - 1.0,
    )


LOW_RANK_CASES = {
    "low-rank, no self-transitions": lambda: low_rank(24, 5),
    "low-rank, self-transitions": lambda: low_rank(24, 5, seed=1, self_transitions=True),
    "low-rank, R > N, unnormalized": lambda: low_rank(6, 10, seed=2, normalize=False),
}


@pytest.mark.parametrize("case", list(LOW_RANK_CASES))
def test_low_rank_matches_exact_on_materialized_factor(case):
    factors = LOW_RANK_CASES[case]()
    native, ex = SemiMarkovChain(factors, LENGTHS), SemiMarkovChain(factors.dense(), LENGTHS)
    torch.testing.assert_close(native.log_partition, ex.log_partition, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(native.segment_marginals, ex.segment_marginals, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(native.entropy, ex.entropy, rtol=1e-8, atol=1e-10)
    seg = ex.sample(3, torch.Generator().manual_seed(0))
    torch.testing.assert_close(native.log_prob(seg), ex.log_prob(seg), rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(native.max_score, ex.max_score)
    # the low-rank sampler's draws score like the dense ones (finite, same support)
    assert torch.isfinite(ex.log_prob(native.sample(5, torch.Generator().manual_seed(1)))).all()


@pytest.mark.parametrize("n,r", [(7, 3), (3, 6)])
def test_rank_space_matches_exact_on_materialized_model(n, r):
    """The rank-node DP equals the state-space semi-Markov forward on the materialized per-segment
    potentials seg(s, d, i, j) = log sum_r U[i, r] V[j, r] w_r(s, d) (docs/semimarkov-rank-space.md)."""
    factors = rank_space(n, r, seed=n)
    lengths = torch.tensor([8, 1, 5, 7])
    native = SemiMarkovChain(factors, lengths)
    ex = SemiMarkovChain(factors.dense(), lengths)
    torch.testing.assert_close(native.log_partition, ex.log_partition, rtol=1e-10, atol=1e-10)
    seg = ex.sample(4, torch.Generator().manual_seed(0))
    torch.testing.assert_close(native.log_prob(seg), ex.log_prob(seg), rtol=1e-8, atol=1e-10)


def test_rank_space_gradients_match_the_materialized_model():
    base = rank_space(5, 3, seed=3)
    lengths = torch.tensor([8, 2, 6, 8])
    grads = []
    for materialize in (False, True):
        leaves = [x.detach().clone().requires_grad_() for x in (base.U, base.V, base.emission)]
        f = RankSpaceSemiMarkov(base.start, leaves[0], leaves[1], base.duration, leaves[2])
        dist = SemiMarkovChain(f.dense() if materialize else f, lengths)
        grads.append(torch.autograd.grad(dist.log_partition.sum(), leaves))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_dense_equals_its_edge_form():
    factors = dense(5, seed=4)
    fast, edge = SemiMarkovChain(factors, LENGTHS), SemiMarkovChain(factors.edge_form(), LENGTHS)
    torch.testing.assert_close(fast.log_partition, edge.log_partition, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(fast.segment_marginals, edge.segment_marginals, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(fast.entropy, edge.entropy, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(fast.max_score, edge.max_score)
    torch.testing.assert_close(fast.log_prob(fast.argmax), edge.log_prob(edge.argmax))


def test_gradient_of_log_z_is_frame_marginals_and_marginals_sum_to_one():
    factors = dense(6, seed=5)
    unary = factors.unary.clone().requires_grad_()
    probed = DenseSemiMarkov(unary, factors.transition, factors.duration, factors.init)
    dist = SemiMarkovChain(probed, LENGTHS)
    (g,) = torch.autograd.grad(dist.log_partition.sum(), unary)
    torch.testing.assert_close(g, dist.marginals, rtol=1e-9, atol=1e-12)
    valid = torch.arange(T) < LENGTHS.view(-1, 1)
    torch.testing.assert_close(dist.marginals.sum(-1), valid.to(F64))


def test_normalized_hsmm_log_likelihood_is_below_zero():
    """Softmax transitions and durations, categorical emissions: log Z = log p(x, segments end at L) <= 0."""
    g = _g(7)
    n, v = 10, 6
    emit = torch.randn(n, v, generator=g, dtype=F64).log_softmax(-1)
    words = torch.randint(v, (B, T), generator=g)
    factors = dense(n, seed=8)
    hsmm = DenseSemiMarkov(emit.T[words], factors.transition, factors.duration, factors.init)
    assert (SemiMarkovChain(hsmm, LENGTHS).log_partition <= 0).all()
    seg = SemiMarkovChain(hsmm, LENGTHS).sample(20, torch.Generator().manual_seed(0))
    assert (SemiMarkovChain(hsmm, LENGTHS).log_prob(seg) <= 0).all()


def test_float32_matches_float64_at_moderate_size():
    f = low_rank(64, 8, seed=9)
    as32 = LowRankSemiMarkov(
        f.unary.float(), f.left.float(), f.right.float(), f.duration.float(), f.init.float(),
        self_transitions=False,
    )
    torch.testing.assert_close(
        SemiMarkovChain(as32, LENGTHS).log_partition.double(),
        SemiMarkovChain(f, LENGTHS).log_partition,
        rtol=1e-5,
        atol=1e-4,
    )


def test_long_segments_with_large_emissions_do_not_overflow():
    """Gaussian-like frame log-likelihoods (around -300 a frame) over T = 200, D = 32: finite, stable."""
    g = _g(10)
    n, t, d = 8, 200, 32
    f = dense(n, seed=11, t=t, d=d, batch=2)
    unary = torch.randn(2, t, n, generator=g, dtype=F64) * 30 - 300
    f = DenseSemiMarkov(unary, f.transition, f.duration, f.init)
    dist = SemiMarkovChain(f, torch.tensor([200, 137]))
    assert torch.isfinite(dist.log_partition).all()
    torch.testing.assert_close(dist.marginals.sum(-1)[0], torch.ones(t, dtype=F64))
    f32 = DenseSemiMarkov(unary.float(), f.transition.float(), f.duration.float(), f.init.float())
    lz32 = SemiMarkovChain(f32, torch.tensor([200, 137])).log_partition.double()
    torch.testing.assert_close(lz32, dist.log_partition, rtol=1e-5, atol=0.0)


def test_rank_space_native_sampler_matches_materialized_segment_marginals():
    """Samples drawn over rank nodes (then states given ranks) have the segment frequencies of the
    materialized model's exact segment marginals."""
    factors = rank_space(5, 3, seed=12, t=6)
    lengths = torch.tensor([6, 4, 5, 6])
    dist = SemiMarkovChain(factors, lengths)
    n = 4000
    seg = dist.sample(n, torch.Generator().manual_seed(3))
    assert (seg[:, :, 0] >= 0).all()
    freq = torch.zeros(B, 6, 3, 5, dtype=F64)
    from zoo.inference.semimarkov.engine import parse_segmentation

    b, s, d, _, z, start, too_long = parse_segmentation(seg, lengths, 5, 3)
    assert not too_long.any()
    freq.index_put_((b[start], s[start], d[start] - 1, z[start]), torch.ones((), dtype=F64), accumulate=True)
    assert (freq / n - dist.segment_marginals).abs().max() < 0.03
