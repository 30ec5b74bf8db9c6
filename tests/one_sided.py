"""Gradients at a parameter's lower bound (a non-negative feature at 0) against one-sided finite
differences: the entry cannot move down, so a central difference is out."""

from __future__ import annotations

import pytest
import torch


def one_sided_difference(f, inputs, which, index, eps):
    """The second-order one-sided difference (-3 f(x) + 4 f(x + eps) - f(x + 2 eps)) / (2 eps) in one
    entry: a feature at 0 cannot move down."""

    def moved(by):
        xs = [x.detach().clone() for x in inputs]
        xs[which][index] += by
        return float(f(*xs))

    return (-3 * moved(0.0) + 4 * moved(eps) - moved(2 * eps)) / (2 * eps)


def assert_gradients_match(f, inputs, zeros):
    """f's gradient at each zero entry (which input, index) against a one-sided difference, its step
    small against the gradient (a zero feature's derivative may be e^100 where rank weights are
    hundreds of nats apart)."""
    grads = torch.autograd.grad(f(*inputs), inputs)
    for which, index in zeros:
        eps = 1e-7 / max(1.0, abs(grads[which][index].item()))
        expected = one_sided_difference(f, inputs, which, index, eps)
        assert expected != 0.0  # the entry matters: a gradient of 0 would be wrong
        assert grads[which][index].item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
