"""Semi-Markov marginals that keep their graph (a loss on the marginals, then its gradient: a double
backward) in float32 on an HSMM's inputs: Gaussian frame scores, peaked durations and a transition
50-1e4 nats below its row. The forward's products ran first-order only: an entry between the two
thresholds of ``logmatmul.threshold`` (an e^-50 transition's) went through a log whose second derivative
1 / h^2 overflows float32, and 92 of 120 gradient entries came back NaN where float64 is finite (audit W).
"""

from __future__ import annotations

import pytest
import torch

from zoo.inference import (
    DenseSemiMarkov,
    LowRankSemiMarkov,
    RankSpaceSemiMarkov,
    RDPOptions,
    SemiMarkovChain,
)

F32, F64 = torch.float32, torch.float64
B, T, N, D, R = 2, 40, 4, 8, 3
LENGTHS = torch.tensor([40, 33])


def inputs():
    """Frames in segments of 3-10 of one state each, their 50-dimensional unit Gaussian log-likelihoods."""
    g = torch.Generator().manual_seed(3)
    means = torch.randn(N, 50, generator=g, dtype=F64)
    lengths = torch.randint(3, 11, (B, T), generator=g)
    states = torch.randint(0, N, (B, T), generator=g)
    per_frame = torch.stack([torch.repeat_interleave(s, n)[:T] for s, n in zip(states, lengths)])  # B x T
    frames = means[per_frame] + torch.randn(B, T, 50, generator=g, dtype=F64)
    unary = -0.5 * ((frames.unsqueeze(2) - means) ** 2).sum(-1)  # B x T x N
    duration = (4 * torch.randn(N, D, generator=g, dtype=F64)).log_softmax(-1)
    weight = torch.randn(B, T, N, generator=g, dtype=F64)
    return g, unary - unary.amax(-1, keepdim=True), duration, weight


def dense(far):
    g, unary, duration, weight = inputs()
    transition = torch.randn(N, N, generator=g, dtype=F64).log_softmax(-1)
    transition[0, 2] = transition[1, 3] = -far
    return unary, weight, lambda u, dtype: DenseSemiMarkov(u, transition.to(dtype), duration.to(dtype))


def low_rank(far):
    g, unary, duration, weight = inputs()
    left, right = torch.rand(N, R, generator=g, dtype=F64) + 0.5, torch.rand(N, R, generator=g, dtype=F64)
    right[2] = torch.exp(torch.tensor(-far, dtype=F64))  # every transition into state 2 far down
    return unary, weight, lambda u, dtype: LowRankSemiMarkov(
        u, left.to(dtype), right.to(dtype), duration.to(dtype), normalize=False, self_transitions=False
    )


def rank_space(far):
    g, unary, duration, weight = inputs()
    U, V = torch.rand(N, R, generator=g, dtype=F64) + 0.5, torch.rand(N, R, generator=g, dtype=F64)
    V[2] = torch.exp(torch.tensor(-far, dtype=F64))
    return unary, weight, lambda u, dtype: RankSpaceSemiMarkov(  # the first R frame scores emit by rank
        torch.ones(N, dtype=dtype), U.to(dtype), V.to(dtype), duration[:R].to(dtype), u[..., :R]
    )


CASES = {"dense": (dense, None), "low-rank": (low_rank, None), "rank-space": (rank_space, None),
         "randomized": (dense, RDPOptions(3, 1))}  # fmt: skip


def marginals_gradient(case, options, far, dtype):
    unary, weight, make = case(far)
    u = unary.to(dtype).requires_grad_()
    generator = None if options is None else torch.Generator().manual_seed(0)
    if options is not None:
        options = RDPOptions(options.k1, options.k2, generator=generator)
    dist = SemiMarkovChain(make(u, dtype), LENGTHS, options=options,
                           backend=None if options is None else "randomized")  # fmt: skip
    (grad,) = torch.autograd.grad((dist.marginals * weight.to(dtype)).sum(), u)
    return grad.double()


@pytest.mark.parametrize("far", [50.0, 1e4])
@pytest.mark.parametrize("name", list(CASES))
def test_semimarkov_marginals_double_backward_float32(name, far):
    case, options = CASES[name]
    expected = marginals_gradient(case, options, far, F64)
    actual = marginals_gradient(case, options, far, F32)
    assert torch.isfinite(actual).all(), f"{int((~torch.isfinite(actual)).sum())} entries not finite"
    assert (actual - expected).abs().max() <= 1e-4 * (1 + expected.abs().max())
