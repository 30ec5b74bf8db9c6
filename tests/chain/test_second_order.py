"""Gradients of gradients in float32 where a step's product underflows (gaps of 87-110 nats): the
double backward of log Z, the gradient of the marginals and the gradient of the entropy are finite and
agree with float64 (they were NaN / -inf: the repaired entries' tiny products reached a log or a
division on the discarded branch, and 1 / h^2 overflowed)."""

from __future__ import annotations

import torch

from zoo.inference import CRF, DenseChain, LinearChain, transition_constraints


def peaked_chain(dtype):
    """B = 1, T = 2, N = 3: emissions 110 nats apart and one transition 72 nats above the others."""
    unary = torch.tensor([[[-31.0, 79.0, 29.0], [0.0, 0.0, 0.0]]], dtype=dtype, requires_grad=True)
    transition = torch.zeros(3, 3, dtype=dtype)
    transition[2, 0] = 72.0
    return unary, transition


def test_double_backward_of_log_z_is_finite_and_right():
    results = []
    for dtype in (torch.float32, torch.float64):
        unary, transition = peaked_chain(dtype)
        log_z = LinearChain(DenseChain(unary, transition)).log_partition
        (grad,) = torch.autograd.grad(log_z.sum(), unary, create_graph=True)
        (hessian_row,) = torch.autograd.grad(grad[0, 0, 1], unary, retain_graph=True)
        (hvp,) = torch.autograd.grad((grad * grad).sum(), unary)
        results.append((hessian_row, hvp))
    for got, expected in zip(*results):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), expected, atol=1e-6, rtol=0)


def test_gradient_of_the_marginals_is_finite_and_right():
    results = []
    for dtype in (torch.float32, torch.float64):
        unary, transition = peaked_chain(dtype)
        marginals = LinearChain(DenseChain(unary, transition)).marginals
        (grad,) = torch.autograd.grad(marginals[:, 0, 2].sum(), unary)
        results.append(grad)
    assert torch.isfinite(results[0]).all()
    torch.testing.assert_close(results[0].double(), results[1], atol=1e-6, rtol=0)


def test_gradient_of_the_entropy_under_bioes_constraints_is_finite():
    labels = ["O", "B-X", "I-X", "E-X", "S-X"]
    crf = CRF(5, batch_first=True, **transition_constraints(labels, "BIOES"))
    emissions = torch.tensor([[[60.0, -36.0, 0.0, 0.0, 0.0], [0.0] * 5]], requires_grad=True)
    (grad,) = torch.autograd.grad(crf.distribution(emissions).entropy.sum(), emissions)
    wide = emissions.detach().double().requires_grad_()
    (expected,) = torch.autograd.grad(crf.double().distribution(wide).entropy.sum(), wide)
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad.double(), expected, atol=1e-5, rtol=0)


def test_hessian_vector_products_of_a_crf_loss_are_finite():
    """Scores with standard deviation 30 (float32): every Hessian-vector product of the log-likelihood is
    finite (27 of 200 were not at 20, 92 at 30; pytorch-crf's are)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        crf = CRF(5, batch_first=True)
        with torch.no_grad():
            for p in crf.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 30)
        emissions = (torch.randn(2, 4, 5, generator=g) * 30).requires_grad_()
        tags = torch.randint(5, (2, 4), generator=g)
        (grad,) = torch.autograd.grad(crf(emissions, tags), emissions, create_graph=True)
        (hvp,) = torch.autograd.grad((grad * torch.randn(grad.shape, generator=g)).sum(), emissions)
        assert torch.isfinite(hvp).all()
