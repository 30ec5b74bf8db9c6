"""Factors far from 1 in float32 (audit of the chain's fast backends): a rank-space chain whose softmax
factors have subnormal entries (below 1.2e-38) or whose products underflow, and row-normalized low-rank
features at 1e20 or 1e-25. Each is valid input whose float64 answer, and a plain float32 log-space
DP's, are finite; the engine in float32 must agree with float64."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import LinearChain, LowRankChain, LowRankSemiMarkov, RankSpaceChain, SemiMarkovChain
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
