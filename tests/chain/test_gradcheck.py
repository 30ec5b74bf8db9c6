"""torch.autograd.gradcheck and gradgradcheck of log_partition w.r.t. every potential, float64, ragged
lengths: its gradient is differentiable too (a gradient penalty, create_graph=True), also where a
hand-written backward computes it."""

from __future__ import annotations

import pytest
import torch
from bruteforce import ChainSpec
from strategies import DTYPE, backends_for, build_dist

LENGTHS = torch.tensor([3, 1, 2])  # B = 3, T = 3: ragged, with a length-1 element
B, T, N, R, D = 3, 3, 3, 2, 2


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _logpot(*shape, seed):
    return torch.randn(*shape, generator=_gen(seed), dtype=DTYPE)


def _feature(*shape, seed):
    return torch.rand(*shape, generator=_gen(seed), dtype=DTYPE) + 0.2  # safely > 0 under eps


def _gradcheck(kind, base, names, backend):
    """gradcheck and gradgradcheck log_partition as a function of args[names] (the others held fixed)."""

    def f(*xs):
        args = dict(base)
        args.update(zip(names, xs))
        return build_dist(ChainSpec(kind, args, LENGTHS), backend).log_partition

    inputs = tuple(base[n].detach().clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    assert torch.autograd.gradgradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-4)


def _lr_args(mode):
    return dict(
        unary=_logpot(B, T, N, seed=1),
        left=_feature(N, R, seed=2),
        right=_feature(N, R, seed=3),
        init=_logpot(N, seed=4),
        normalize=(mode == "normalized"),
        log_rank_weights=_logpot(B, T - 1, R, seed=5) if mode == "weighted" else None,
    )


@pytest.mark.parametrize("backend", backends_for("dense"), ids=lambda b: b or "native")
@pytest.mark.parametrize("per_position", [False, True], ids=["shared", "per-position"])
@pytest.mark.parametrize("init", ["none", "shared", "batched"])
def test_dense(backend, per_position, init):
    base = dict(
        unary=_logpot(B, T, N, seed=1),
        transition=_logpot(*((B, T - 1, N, N) if per_position else (N, N)), seed=2),
        init={"none": None, "shared": _logpot(N, seed=3), "batched": _logpot(B, N, seed=3)}[init],
    )
    names = ["unary", "transition"] + ([] if init == "none" else ["init"])
    _gradcheck("dense", base, names, backend)


@pytest.mark.parametrize("backend", backends_for("embedding"), ids=lambda b: b or "native")
def test_embedding(backend):
    base = dict(unary=_logpot(B, T, N, seed=1), states=_logpot(N, D, seed=2), init=_logpot(B, N, seed=3))
    _gradcheck("embedding", base, ["unary", "states", "init"], backend)


@pytest.mark.parametrize("backend", backends_for("lowrank"), ids=lambda b: b or "native")
@pytest.mark.parametrize("mode", ["normalized", "unnormalized", "weighted"])
def test_low_rank(backend, mode):
    base = _lr_args(mode)
    names = ["unary", "left", "right", "init"] + (["log_rank_weights"] if mode == "weighted" else [])
    _gradcheck("lowrank", base, names, backend)


@pytest.mark.parametrize("backend", backends_for("rankspace"), ids=lambda b: b or "native")
@pytest.mark.parametrize("start_shape", ["shared", "batched"])
def test_rank_space(backend, start_shape):
    base = dict(
        start=_feature(*((N,) if start_shape == "shared" else (B, N)), seed=1),
        U=_feature(N, R, seed=2),
        V=_feature(N, R, seed=3),
        emission=_logpot(B, T, R, seed=4) - 1.0,
    )
    _gradcheck("rankspace", base, ["start", "U", "V", "emission"], backend)


@pytest.mark.parametrize("backend", backends_for("dense"), ids=lambda b: b or "native")
def test_dense_gradient_is_marginals(backend):
    """d log Z / d unary = marginals (zero past each length)."""
    unary = _logpot(B, T, N, seed=1).requires_grad_(True)
    spec = ChainSpec("dense", dict(unary=unary, transition=_logpot(N, N, seed=2), init=None), LENGTHS)
    dist = build_dist(spec, backend)
    (g,) = torch.autograd.grad(dist.log_partition.sum(), unary)
    torch.testing.assert_close(g, dist.marginals.detach(), rtol=1e-9, atol=1e-12)
    assert (g[1, 1:] == 0).all() and (g[2, 2:] == 0).all()
