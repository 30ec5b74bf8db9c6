"""torch.autograd.gradcheck and gradgradcheck of log_partition w.r.t. every potential, float64, ragged
lengths (its gradient is differentiable too: a gradient penalty, create_graph=True)."""

import pytest
import torch
from sm_bruteforce import SMSpec
from sm_strategies import DTYPE, build_dist

from zoo.inference import RDPOptions

LENGTHS = torch.tensor([4, 1, 3])
B, T, N, D, R = 3, 4, 3, 2, 2


def lp(*s, seed):
    return torch.randn(*s, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


def feat(*s, seed):
    return torch.rand(*s, generator=torch.Generator().manual_seed(seed), dtype=DTYPE) + 0.2


def _gradcheck(kind, base, names, backend, options=None):
    def f(*xs):
        args = dict(base)
        args.update(zip(names, xs))
        opts = options() if options else None
        return build_dist(SMSpec(kind, args, LENGTHS), backend, options=opts).log_partition

    inputs = tuple(base[n].detach().clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    assert torch.autograd.gradgradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-4)


def dense_args():
    trans = lp(N, N, seed=2).masked_fill(torch.eye(N, dtype=torch.bool), float("-inf"))
    return dict(unary=lp(B, T, N, seed=1), transition=trans, duration=lp(N, D, seed=3), init=lp(N, seed=4))


@pytest.mark.parametrize("backend", [None, "randomized-full", "randomized-sampled"])
def test_dense(backend):
    options = None
    if backend == "randomized-full":
        backend, options = "randomized", lambda: RDPOptions(N, 0)
    elif backend == "randomized-sampled":  # a uniform proposal: the draw does not move with the inputs
        backend = "randomized"
        options = lambda: RDPOptions(0, 2, proposal="uniform", generator=torch.Generator().manual_seed(0))  # noqa: E731
    base = dense_args()
    base["transition"] = base["transition"].masked_fill(torch.eye(N, dtype=torch.bool), 0.0)
    _gradcheck("dense", base, ["unary", "transition", "duration", "init"], backend, options)


@pytest.mark.parametrize("self_transitions", [True, False])
@pytest.mark.parametrize("backend", [None, "exact"])
def test_low_rank(backend, self_transitions):
    base = dict(
        unary=lp(B, T, N, seed=1), left=feat(N, R, seed=2), right=feat(N, R, seed=3),
        duration=lp(B, N, D, seed=4), init=lp(B, N, seed=5), normalize=True,
        self_transitions=self_transitions,
    )
    _gradcheck("lowrank", base, ["unary", "left", "right", "duration", "init"], backend)


@pytest.mark.parametrize("backend", [None, "exact"])
def test_rank_space(backend):
    base = dict(
        start=feat(N, seed=1), U=feat(N, R, seed=2), V=feat(N, R, seed=3), duration=lp(R, D, seed=4),
        emission=lp(B, T, R, seed=5) - 1,
    )
    _gradcheck("rankspace", base, ["start", "U", "V", "duration", "emission"], backend)


def test_edge():
    base = dict(first=lp(B, D, N, seed=1), edge=lp(B, T - 1, D, N, N, seed=2))
    _gradcheck("edge", base, ["first", "edge"], None)


def test_entropy_and_marginals_are_differentiable():
    base = dense_args()
    unary = base["unary"].clone().requires_grad_()

    def f(u):
        args = dict(base, unary=u)
        d = build_dist(SMSpec("dense", args, LENGTHS))
        return d.entropy.sum() + (d.marginals * torch.linspace(0, 1, N, dtype=DTYPE)).sum()

    assert torch.autograd.gradcheck(f, (unary,), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_the_entropys_second_derivative_ignores_the_padding():
    """A length-1 sequence padded to T = 40 with scores of +-100s, forbidden transitions and a fixed start
    (float64): the gradient of the entropy's gradient was NaN on 112 entries, from the padding's tiny
    products divided twice in the entropy step; it is the zero-padded sequence's, and 0 on the padding."""
    import math

    from zoo.inference import DenseSemiMarkov, SemiMarkovChain

    g = torch.Generator().manual_seed(6)
    noise = torch.randn(3, 40, 4, generator=g, dtype=torch.float64)[2:] * 100
    transition = torch.randn(4, 4, generator=g, dtype=torch.float64).log_softmax(1)
    transition.fill_diagonal_(-math.inf)
    transition[0, 3] = -math.inf
    durations = (torch.randn(4, 5, generator=g, dtype=torch.float64) * 3).log_softmax(1)
    init = torch.tensor([0.0, -math.inf, -math.inf, -math.inf], dtype=torch.float64)
    rows = []
    for unary in (noise, torch.cat([noise[:, :1], torch.zeros_like(noise[:, 1:])], 1)):
        unary = unary.clone().requires_grad_()
        chain = DenseSemiMarkov(unary, transition, durations, init)
        entropy = SemiMarkovChain(chain, torch.tensor([1])).entropy
        (grad,) = torch.autograd.grad(entropy.sum(), unary, create_graph=True)
        (second,) = torch.autograd.grad(grad.sum(), unary)
        rows.append(second)
    assert torch.isfinite(rows[0]).all() and (rows[0][:, 1:] == 0).all()
    torch.testing.assert_close(rows[0], rows[1])
