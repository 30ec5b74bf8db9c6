"""Factors far from 1 in float32 (audit of the chain's fast backends): a rank-space chain whose softmax
factors have subnormal entries (below 1.2e-38) or whose products underflow, and row-normalized low-rank
features at 1e20 or 1e-25. Each is valid input whose float64 answer, and a plain float32 log-space
DP's, are finite; the engine in float32 must agree with float64."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import (
    LinearChain,
    LowRankChain,
    LowRankSemiMarkov,
    RankSpaceChain,
    RankSpaceSemiMarkov,
    RDPOptions,
    SemiMarkovChain,
)
from zoo.inference.numerics import safe_log

F32, F64 = torch.float32, torch.float64


def test_safe_log_of_subnormal_numbers():
    """Their log was log(1.2e-38) = -87.3, however far below: a rank-space chain's log Z 6.6 nats high."""
    x = torch.tensor([0.0, 1e-42, 1e-39, 1e-30, 1.0], requires_grad=True)
    y = safe_log(x)
    expected = torch.tensor([1e-42, 1e-39, 1e-30, 1.0], dtype=F64).log()
    torch.testing.assert_close(y[1:].double(), expected, rtol=1e-3, atol=0)  # 1e-42 keeps 3 digits
    assert y[0] == -float("inf")
    (grad,) = torch.autograd.grad(y.sum(), x)
    tiny = torch.finfo(F32).tiny
    assert grad[0] == 0 and torch.isfinite(grad).all() and grad[1] == grad[2] == 1 / tiny


def block_chain(gap: float, dtype):
    """A rank-space HMM (N = 8, R = 4) of softmax factors whose two blocks meet through entries e^-gap
    (subnormal in float32 for gaps of 88-103), emissions favouring the far block, a fixed start."""
    g = torch.Generator().manual_seed(0)
    lu = torch.randn(8, 4, generator=g, dtype=F64)
    lu[:4, 2:] -= gap
    lu[4:, :2] -= gap
    lv = torch.randn(8, 4, generator=g, dtype=F64)
    lv[4:, :2] -= gap
    lv[:4, 2:] -= gap
    start = torch.zeros(8, dtype=F64)
    start[0] = 1.0
    emission = torch.randn(2, 6, 4, generator=g, dtype=F64)
    emission[..., 2:] += 50.0
    factors = start, lu.softmax(1), lv.softmax(0), emission
    return RankSpaceChain(*(x.to(dtype) for x in factors))


@pytest.mark.parametrize("backend", [None, "low-rank", "exact"])
@pytest.mark.parametrize("gap", [80.0, 95.0])
def test_rank_space_factors_with_subnormal_entries(gap, backend):
    """At gap 95 (32 subnormal factor entries) every float32 backend gave 216.90 for 210.31."""
    expected = LinearChain(block_chain(gap, F64)).log_partition
    chain = block_chain(gap, F32)
    assert int(((chain.U > 0) & (chain.U < torch.finfo(F32).tiny)).sum()) == (16 if gap == 95.0 else 0)
    emission = chain.emission.clone().requires_grad_()
    got = LinearChain(RankSpaceChain(chain.start, chain.U, chain.V, emission), backend=backend)
    torch.testing.assert_close(got.log_partition.double(), expected, rtol=1e-6, atol=1e-4)
    expected_marginals = LinearChain(block_chain(gap, F64)).marginals
    torch.testing.assert_close(got.marginals.double(), expected_marginals, atol=1e-4, rtol=0)


@pytest.mark.parametrize("scale", [1e-19, 1e-20])
def test_rank_space_factors_whose_products_underflow(scale):
    """U, V entries near 1e-20: their products (1e-40) are subnormal, and the rank-space forward drifted
    by 5 nats a step (T = 6: -520.4 for -544.7)."""
    g = torch.Generator().manual_seed(1)
    U, V = torch.rand(6, 3, generator=g, dtype=F64) * scale, torch.rand(6, 3, generator=g, dtype=F64) * scale
    start, emission = torch.rand(6, generator=g, dtype=F64), torch.randn(2, 6, 3, generator=g, dtype=F64)
    expected = LinearChain(RankSpaceChain(start, U, V, emission)).log_partition
    for backend in (None, "low-rank"):
        chain = RankSpaceChain(*(x.float() for x in (start, U, V, emission)))
        got = LinearChain(chain, backend=backend).log_partition
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=0)


def features(scale: float, dtype):
    g = torch.Generator().manual_seed(2)
    left, right = (torch.rand(5, 3, generator=g, dtype=F64) * scale for _ in range(2))
    return left.to(dtype), right.to(dtype), torch.randn(2, 7, 5, generator=g, dtype=F64).to(dtype)


@pytest.mark.parametrize("scale", [1e20, 1e-20, 1e-25])
def test_row_normalized_low_rank_features_far_from_one(scale):
    """The normalized transitions do not depend on the features' scale, but float32 gave a false "zero
    probability" error (1e20; construction refused 1e-25), NaN (1e-20), and "transition contains NaN"
    from entropy, argmax and pairwise marginals (1e20)."""
    left, right, unary = features(scale, F64)
    reference = LinearChain(LowRankChain(unary, left, right))
    chain = LinearChain(LowRankChain(*(x.float() for x in (unary, left, right))))
    for name in ("log_partition", "marginals", "entropy", "pairwise_marginals", "max_score"):
        got, expected = getattr(chain, name).double(), getattr(reference, name)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5, msg=name)
    assert torch.equal(chain.argmax, reference.argmax)


@pytest.mark.parametrize("self_transitions", [True, False])
@pytest.mark.parametrize("scale", [1e20, 1e-25])
def test_row_normalized_semi_markov_features_far_from_one(scale, self_transitions):
    left, right, unary = features(scale, F64)
    duration = torch.randn(5, 3, dtype=F64).log_softmax(-1)
    factors = unary, left, right, duration
    reference = SemiMarkovChain(LowRankSemiMarkov(*factors, self_transitions=self_transitions))
    floats = (x.float() for x in factors)
    chain = SemiMarkovChain(LowRankSemiMarkov(*floats, self_transitions=self_transitions))
    for name in ("log_partition", "marginals", "entropy"):
        got, expected = getattr(chain, name).double(), getattr(reference, name)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5, msg=name)


OPERATIONS = ("log_partition", "marginals", "entropy", "pairwise_marginals", "max_score")


def assert_same_chain(chain, reference, states):
    """Every operation of ``chain`` (float32) as ``reference``'s (float64), to float32's accuracy of
    log Z (which grows with the scale: 1e20 features make each transition 92 nats)."""
    for name in OPERATIONS:
        got, expected = getattr(chain, name).double(), getattr(reference, name)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5, msg=name)
    assert torch.equal(chain.argmax, reference.argmax)
    torch.testing.assert_close(chain.log_prob(states).double(), reference.log_prob(states), atol=1e-4, rtol=0)


@pytest.mark.parametrize("backend", [None, "exact", "randomized"])
@pytest.mark.parametrize("scale", [1e20, 1e-20])
def test_unnormalized_low_rank_features_far_from_one(scale, backend):
    """normalize=False: the features' products (1e40, 1e-40) are the chain's transitions, beyond
    float32's range though the chain is an ordinary one. float32 gave NaN (low-rank) and "transition
    contains +inf" (exact) at 1e20, and a false "zero probability" error (exact) at 1e-25. Their columns
    are now scaled near 1, the scales carried as rank weights (``zoo.inference.column_scaled``). The
    randomized backend keeps every state (k1 = N): its estimate is then exact."""
    left, right, unary = features(scale, F64)
    reference = LinearChain(LowRankChain(unary, left, right, normalize=False))
    options = RDPOptions(k1=5, k2=0) if backend == "randomized" else None
    factors = LowRankChain(*(x.float() for x in (unary, left, right)), normalize=False)
    chain = LinearChain(factors, backend=backend, options=options)
    assert_same_chain(chain, reference, reference.sample(3, generator=torch.Generator().manual_seed(0)))
    expected_prior = LowRankChain(unary, left, right, normalize=False).state_prior()
    torch.testing.assert_close(factors.state_prior().double(), expected_prior, rtol=1e-5, atol=0)


@pytest.mark.parametrize("backend", [None, "low-rank", "exact"])
@pytest.mark.parametrize("scale", [1e20, 1e-20])
def test_rank_space_factors_far_from_one(scale, backend):
    """U, V at 1e20: log Z and marginals were NaN on the rank-space and low-rank backends."""
    g = torch.Generator().manual_seed(3)
    U, V = (torch.rand(5, 3, generator=g, dtype=F64) * scale for _ in range(2))
    start, emission = torch.rand(5, generator=g, dtype=F64), torch.randn(2, 7, 3, generator=g, dtype=F64)
    reference = LinearChain(RankSpaceChain(start, U, V, emission))
    factors = RankSpaceChain(*(x.float() for x in (start, U, V, emission)))
    chain = LinearChain(factors, backend=backend)
    assert_same_chain(chain, reference, reference.sample(3, generator=torch.Generator().manual_seed(0)))
    expected_prior = RankSpaceChain(start, U, V, emission).state_prior()
    torch.testing.assert_close(factors.state_prior().double(), expected_prior, rtol=1e-5, atol=0)


def test_copies_of_scaled_chains_keep_the_column_scale():
    """with_unary and the rank-space chain's state-space view reuse the scaled features: they pass on
    the column scale (log_column_scale), which the state prior adds back, and nothing scales twice."""
    left, right, unary = features(1e20, F64)
    factors = LowRankChain(*(x.float() for x in (unary, left, right)), normalize=False)
    copy = factors.with_unary(factors.unary + 1.0)
    assert copy.log_column_scale is factors.log_column_scale and torch.equal(copy.left, factors.left)
    torch.testing.assert_close(copy.state_prior(), factors.state_prior(), rtol=0, atol=0)
    g = torch.Generator().manual_seed(3)
    U, V = (torch.rand(5, 3, generator=g, dtype=F32) * 1e20 for _ in range(2))
    rank_space = RankSpaceChain(torch.rand(5, generator=g), U, V, torch.randn(2, 7, 3, generator=g))
    view = rank_space.low_rank_view()
    assert view.log_column_scale is rank_space.log_column_scale
    torch.testing.assert_close(view.state_prior(), rank_space.state_prior(), rtol=1e-6, atol=0)
    weights = factors.log_rank_weights
    with pytest.raises(ValueError, match=r"log_column_scale must have shape R"):
        LowRankChain(factors.unary, factors.left, factors.right, None, False, weights, torch.zeros(2))
    with pytest.raises(ValueError, match="log_column_scale needs normalize=False and the log_rank_weights"):
        LowRankChain(factors.unary, factors.left, factors.right, None, False, None, factors.log_column_scale)


def test_scaled_features_give_exact_gradients():
    """The columns' scales are detached powers of two: the gradients of log Z with respect to the
    given features are float64's to float32's accuracy."""
    left, right, unary = features(1e20, F64)
    grads = []
    for dtype in (F64, F32):
        params = [x.detach().to(dtype).requires_grad_() for x in (left, right)]
        LinearChain(LowRankChain(unary.to(dtype), *params, normalize=False)).log_partition.sum().backward()
        grads.append([p.grad.double() for p in params])
    for got, expected in zip(*grads[::-1]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=0)


@pytest.mark.parametrize("backend", [None, "exact"])
@pytest.mark.parametrize("eps", [1e-5, 1e-7, 3e-8])
def test_sticky_features_without_self_transitions(eps, backend):
    """left, right = I + eps * noise: each state's own feature dominates, and without self-transitions
    its row's mass is the small rest. Formed as a difference it lost every digit in float32: log Z 2.09
    nats off at eps = 1e-7, a false "no outgoing mass" error at 3e-8 (audit)."""
    g = torch.Generator().manual_seed(1)
    N, T = 8, 100
    unary = torch.randn(1, T, N, generator=g, dtype=F64)
    duration = torch.randn(N, 4, generator=g, dtype=F64).log_softmax(-1)
    left, right = (torch.eye(N, dtype=F64) + eps * torch.rand(N, N, generator=g, dtype=F64) for _ in range(2))
    factors = unary, left, right, duration
    reference = SemiMarkovChain(LowRankSemiMarkov(*factors, self_transitions=False))
    floats = (x.float() for x in factors)
    chain = SemiMarkovChain(LowRankSemiMarkov(*floats, self_transitions=False), backend=backend)
    for name in ("log_partition", "marginals"):
        got, expected = getattr(chain, name).double(), getattr(reference, name)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5, msg=name)


SEMI_MARKOV_OPERATIONS = ("log_partition", "marginals", "entropy", "max_score")


def assert_same_semi_markov(chain, reference):
    for name in SEMI_MARKOV_OPERATIONS:
        got, expected = getattr(chain, name).double(), getattr(reference, name)
        torch.testing.assert_close(got, expected, atol=5e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("backend", [None, "exact", "randomized"])
@pytest.mark.parametrize("self_transitions", [True, False])
@pytest.mark.parametrize("scale", [1e20, 1e-20])
def test_unnormalized_semi_markov_features_far_from_one(scale, self_transitions, backend):
    """normalize=False, features at 1e20: "transition contains +inf" (exact), NaN log Z and gradients
    without an error (randomized); at 1e-20, NaN gradients (exact). The columns are balanced and the
    transitions' common factor goes on the durations (``column_scaled.balanced_columns``)."""
    left, right, unary = features(scale, F64)
    duration = torch.randn(5, 3, generator=torch.Generator().manual_seed(4), dtype=F64).log_softmax(-1)
    lengths = torch.tensor([7, 4])
    options = dict(normalize=False, self_transitions=self_transitions)
    reference = SemiMarkovChain(LowRankSemiMarkov(unary, left, right, duration, **options), lengths)
    params = [x.float().requires_grad_() for x in (left, right)]
    factors = LowRankSemiMarkov(unary.float(), *params, duration.float(), **options)
    rdp = RDPOptions(k1=5, k2=0) if backend == "randomized" else None
    chain = SemiMarkovChain(factors, lengths, backend=backend, options=rdp)
    assert_same_semi_markov(chain, reference)
    chain.log_partition.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in params)


@pytest.mark.parametrize("backend", [None, "exact"])
@pytest.mark.parametrize("scale", [1e20, 1e-20])
def test_rank_space_semi_markov_factors_far_from_one(scale, backend):
    g = torch.Generator().manual_seed(5)
    U, V = (torch.rand(5, 3, generator=g, dtype=F64) * scale for _ in range(2))
    start, emission = torch.rand(5, generator=g, dtype=F64), torch.randn(2, 7, 3, generator=g, dtype=F64)
    duration = torch.randn(3, 4, generator=g, dtype=F64).log_softmax(-1)
    factors = start, U, V, duration, emission
    reference = SemiMarkovChain(RankSpaceSemiMarkov(*factors))
    chain = SemiMarkovChain(RankSpaceSemiMarkov(*(x.float() for x in factors)), backend=backend)
    assert_same_semi_markov(chain, reference)
