"""A low-rank chain's path scores (``log_prob``) have the right gradient with respect to a feature that
is exactly 0: log-sum-exp over log a + log b gave it none (log 0 = -inf carries no gradient), where the
true derivative is finite. Checked against one-sided finite differences (features must stay >= 0)."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import LinearChain, LowRankChain, RankSpaceChain

F64 = torch.float64
STATES = torch.tensor([[0, 0, 2, 1], [2, 0, 0, 2]])  # avoids 0 -> 1, which the zeros below forbid


def one_sided_difference(f, inputs, which, index, eps=1e-7):
    moved = [x.detach().clone() for x in inputs]
    moved[which][index] += eps
    return float((f(*moved) - f(*[x.detach() for x in inputs])) / eps)


OPTIONS = {"unnormalized": {"normalize": False}, "normalized": {"normalize": True},
           "rank weights": {"normalize": False, "weights": 3.0}}  # fmt: skip


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_log_prob_gradient_at_a_zero_feature(options):
    g = torch.Generator().manual_seed(0)
    unary = torch.randn(2, 4, 3, generator=g, dtype=F64)
    left, right = (torch.rand(3, 2, generator=g, dtype=F64) + 0.1 for _ in range(2))
    left[0, 1] = right[1, 0] = 0.0
    weights = options.get("weights")
    log_weights = None if weights is None else torch.randn(2, 3, 2, generator=g, dtype=F64) * weights

    def f(left, right):
        chain = LowRankChain(unary, left, right, normalize=options["normalize"], log_rank_weights=log_weights)
        return LinearChain(chain).log_prob(STATES).sum()

    inputs = [left.requires_grad_(), right.requires_grad_()]
    grads = torch.autograd.grad(f(*inputs), inputs)
    for which, index in ((0, (0, 1)), (1, (1, 0))):
        expected = one_sided_difference(f, inputs, which, index)
        assert grads[which][index].item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_rank_space_log_prob_gradient_at_a_zero_feature():
    g = torch.Generator().manual_seed(1)
    start, U, V = (torch.rand(*s, generator=g, dtype=F64) + 0.1 for s in ((3,), (3, 2), (3, 2)))
    U[0, 1] = 0.0
    emission = torch.randn(2, 4, 2, generator=g, dtype=F64)

    def f(U):
        return LinearChain(RankSpaceChain(start, U, V, emission)).log_prob(STATES).sum()

    (grad,) = torch.autograd.grad(f(U.requires_grad_()), U)
    assert grad[0, 1].item() == pytest.approx(one_sided_difference(f, [U], 0, (0, 1)), rel=1e-5, abs=1e-6)
