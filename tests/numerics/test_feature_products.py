"""The products of non-negative features with log-weights between them, log sum_r a_r b_r e^{w_r}
(``numerics.log_inner``: low-rank path scores, rank-space segment scores) and log((f o e^w) @ M)
(``logmatmul.log_feature_matmul``: low-rank and rank-space transition matrices), against float64
log-sum-exp over log a + log b + w, on features spread over 60 orders of magnitude (and zeros) and
weights hundreds of nats apart."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.inference.logmatmul import Matrix, log_feature_matmul, log_matmul
from zoo.inference.numerics import log_inner, safe_log

F32, F64 = torch.float32, torch.float64


def spread_features(shape, generator, zeros=0.2, decades=30):
    """Features 10^-decades..10^decades with a share of exact zeros."""
    f = torch.pow(10.0, torch.empty(shape, dtype=F64).uniform_(-decades, decades, generator=generator))
    return torch.where(torch.rand(shape, generator=generator, dtype=F64) < zeros, 0.0, f)


def reference(a, b, w):
    return torch.logsumexp(safe_log(a.double()) + safe_log(b.double()) + w.double(), -1)


def tolerance(dtype, *logs):
    """A few roundings of the largest log magnitude involved."""
    largest = max(float(x.double().abs().nan_to_num(posinf=0.0, neginf=0.0).max()) for x in logs)
    return 8 * torch.finfo(dtype).eps * (1.0 + largest)


def test_log_feature_matmul_a_large_feature_under_a_vanishing_weight():
    """A feature of 1e27 under a weight factor of e^-114 (0 in float32): the term, e^-50, was lost and the
    entry was off by tens of nats (audit Z)."""
    features, weights = torch.tensor([[1.0, 1e27]]), torch.tensor([[0.0, -120.0]])
    matrix = torch.tensor([[1e-16], [1e12]])  # within column_scaled's 2^40
    expected = torch.logsumexp(features.double().log() + weights.double() + matrix.double().log().T, -1)
    actual = log_feature_matmul(features, weights, Matrix.from_prob(matrix)).double().squeeze(-1)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)  # float32 rounding of logs near 62


def test_log_inner_a_term_far_below_its_weight():
    """Each term is 1: a, b = e^-50 with a weight e^100 (a x b is subnormal in float32). A cap on the
    weight's factor gave log(1 + e^-20) = 0 in both dtypes, not log 2."""
    for dtype in (F32, F64):
        a = b = torch.tensor([1.0, math.exp(-50)], dtype=dtype)
        w = torch.tensor([0.0, 100.0], dtype=dtype)
        assert log_inner(a, b, w).item() == pytest.approx(math.log(2), rel=1e-6)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("weight_scale", [0.0, 3.0, 300.0])
def test_log_inner_against_log_sum_exp(dtype, weight_scale):
    g = torch.Generator().manual_seed(7)
    a, b = spread_features((64, 5), g), spread_features((64, 5), g)
    w = torch.randn(64, 5, generator=g, dtype=F64) * weight_scale
    a, b, w = a.to(dtype), b.to(dtype), w.to(dtype)
    expected = reference(a, b, w)
    actual = log_inner(a, b, w).double()
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(actual), finite)  # -inf exactly where every term is 0
    assert (actual[~finite] == -math.inf).all()
    logs = safe_log(a.double()) + safe_log(b.double()) + w.double()
    assert (actual[finite] - expected[finite]).abs().max() <= tolerance(dtype, logs[torch.isfinite(logs)])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("weight_scale", [0.0, 3.0, 300.0])
def test_log_feature_matmul_against_log_sum_exp(dtype, weight_scale):
    g = torch.Generator().manual_seed(8)
    f = spread_features((2, 3, 6, 4), g, zeros=0.3)  # ... x K x R rows
    # M x R: a guarded product's matrix keeps its entries within 2^+-40 (``column_scaled``)
    cols = spread_features((5, 4), g, zeros=0.3, decades=12)
    w = (torch.randn(2, 3, 1, 4, generator=g, dtype=F64) * weight_scale)
    f, cols, w = f.to(dtype), cols.to(dtype), w.to(dtype)
    expected = reference(f.unsqueeze(-2), cols, w.unsqueeze(-2))  # ... x K x M
    actual = log_feature_matmul(f, w, Matrix.from_prob(cols.T)).double()
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(actual), finite)
    logs = safe_log(f.double()).unsqueeze(-2) + safe_log(cols.double()) + w.double().unsqueeze(-2)
    assert (actual[finite] - expected[finite]).abs().max() <= tolerance(dtype, logs[torch.isfinite(logs)])


def test_a_guarded_product_with_features_far_above_one():
    """Features up to 2^39 (``column_scaled`` leaves them) multiply what a subnormal term loses: an entry
    just above K tiny / eps came out 4e-4 nats off in float32 (130x its rounding), before the bound
    counted the matrix's largest entry."""
    x = torch.tensor([[0.0, -97.0], [0.0, -60.0]])
    matrix = torch.tensor([[1.0, 0.0], [0.3, 2.0**39]])
    expected = torch.logsumexp(x.double().unsqueeze(-1) + matrix.double().log(), -2)
    actual = log_matmul(x, Matrix.from_prob(matrix)).double()
    assert (actual - expected).abs().max() <= 8 * torch.finfo(torch.float32).eps * 70
    g = torch.Generator().manual_seed(9)
    x = torch.randn(64, 6, generator=g, dtype=F64) * 40
    features = spread_features((6, 5), g, zeros=0.3, decades=12)  # entries up to 1e12 (2^40)
    expected = torch.logsumexp(x.unsqueeze(-1) + safe_log(features), -2)
    actual = log_matmul(x.float(), Matrix.from_prob(features.float())).double()
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(actual), finite)
    assert (actual[finite] - expected[finite]).abs().max() <= tolerance(F32, expected[finite], x)
