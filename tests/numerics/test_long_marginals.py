"""Marginals of long sequences in float32: each position's probability mass stays 1.

Adding c to one position's log-potentials adds c to log Z, so the gradient of log Z with respect to a
position's unary (its marginals) sums to 1 over the states, and so does the gradient with respect to
the forward's values there. A backward that never restores that sum lets float32 rounding move it a
little at each step back: at T = 20,000 marginals were 5e-6 to 3.5e-5 off near the start (a low-rank
chain's first marginal was 1.00017), and a float32 running sum of segment marginals drifted by 1.5e-5
over 5,000 frames. Each backward now restores the sum every 32 positions (``scaled.MASS_EVERY``,
``forward.WindowShift``), and frame marginals are summed in float64: the error no longer grows with T.

Inputs: a 6-state Gaussian HMM / HSMM over 40-dimensional frames whose states overlap (a diffuse
posterior), two sequences of ragged lengths; float32 inputs compared with the same values in float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from zoo.inference import (
    DenseChain,
    DenseSemiMarkov,
    LinearChain,
    LowRankChain,
    LowRankSemiMarkov,
    RankSpaceChain,
    RankSpaceSemiMarkov,
    SemiMarkovChain,
)

N, R, F, D = 6, 4, 40, 8
MASS_TOLERANCE = 3e-6  # 25 eps: a sum of N entries each rounded at each step; the drift was 4.5e-6 and up
F64 = torch.float64


def gaussian_model(T: int) -> dict[str, torch.Tensor]:
    """Frame log-likelihoods of overlapping Gaussians (B = 2, lengths T and 2T/3) and the model's other
    tensors, all float64 holding float32 values."""
    g = torch.Generator().manual_seed(0)
    means = 0.3 * torch.randn(N, F, generator=g, dtype=F64)
    states = torch.randint(0, N, (2, T), generator=g)
    frames = means[states] + torch.randn(2, T, F, generator=g, dtype=F64)
    unary = -0.5 * ((frames[:, :, None] - means) ** 2).sum(-1) - 0.5 * F * math.log(2 * math.pi)
    U = torch.rand(N, R, generator=g, dtype=F64)
    V = torch.rand(N, R, generator=g, dtype=F64)
    sticky = torch.randn(N, N, generator=g, dtype=F64) + 2 * torch.eye(N, dtype=F64)
    tensors = {
        "unary": unary,
        "transition": sticky.log_softmax(-1),
        "init": torch.full((N,), -math.log(N), dtype=F64),
        "left": torch.rand(N, R, generator=g, dtype=F64) + 0.1,
        "right": torch.rand(N, R, generator=g, dtype=F64) + 0.1,
        "U": U / U.sum(1, keepdim=True),
        "V": V / V.sum(0, keepdim=True),
        "rank_emission": -0.5 * ((frames[:, :, None] - means[:R]) ** 2).sum(-1),
        "duration": torch.randn(N, D, generator=g, dtype=F64).log_softmax(-1),
        "lengths": torch.tensor([T, T - T // 3]),
    }
    return {k: v.float().double() if v.is_floating_point() else v for k, v in tensors.items()}


def chain(kind: str, m: dict, dtype) -> LinearChain:
    t = {k: v.to(dtype) if v.is_floating_point() else v for k, v in m.items()}
    B, T = t["unary"].shape[:2]
    if kind == "dense":  # the probability-space backward (block_scaled)
        factors = DenseChain(t["unary"], t["transition"], t["init"])
    elif kind == "per-position":  # the guarded forward's backward, one matrix a step
        factors = DenseChain(t["unary"], t["transition"].expand(B, T - 1, N, N).contiguous(), t["init"])
    elif kind == "low-rank":  # the guarded forward's backward, two products a step
        factors = LowRankChain(t["unary"], t["left"], t["right"], t["init"])
    else:  # rank-space: marginals on its state chain
        factors = RankSpaceChain(t["init"].exp(), t["U"], t["V"], t["rank_emission"])
    return LinearChain(factors, t["lengths"])


def live(m: dict, T: int) -> torch.Tensor:
    return torch.arange(T) < m["lengths"].unsqueeze(-1)


def assert_mass_one(name: str, sums: torch.Tensor, inside: torch.Tensor) -> None:
    worst = (sums.double() - 1).abs()[inside].max().item()
    assert worst <= MASS_TOLERANCE, f"{name}: a position's mass is {worst:.3g} away from 1"


def assert_marginals(name: str, m32: torch.Tensor, m64: torch.Tensor, inside: torch.Tensor, tolerance: float):
    """float32 marginals (B x T x N): each position's mass 1, and within ``tolerance`` of float64."""
    assert_mass_one(name, m32.sum(-1), inside)
    err = (m32.double() - m64).abs().max().item()
    assert err <= tolerance, f"{name}: float32 marginals {err:.3g} from float64"


@pytest.mark.parametrize("kind", ["dense", "per-position", "low-rank", "rank-space"])
def test_chain_marginals_of_a_long_sequence_keep_their_mass_in_float32(kind):
    T = 30_000
    m = gaussian_model(T)
    m32, m64 = chain(kind, m, torch.float32).marginals, chain(kind, m, F64).marginals
    assert_marginals(kind, m32, m64, live(m, T), 2 * MASS_TOLERANCE)


def test_differentiable_and_pairwise_chain_marginals_keep_their_mass_in_float32():
    """The plain-autograd forward: marginals with a graph (create_graph), and pairwise marginals."""
    T = 20_000
    m = gaussian_model(T)
    d = chain("dense", m, torch.float32)
    d.factors.unary.requires_grad_(True)
    marginals = d.marginals
    assert marginals.requires_grad
    assert_mass_one("differentiable marginals", marginals.detach().sum(-1), live(m, T))
    pairwise = chain("dense", m, torch.float32).pairwise_marginals
    assert_mass_one("pairwise marginals", pairwise.sum((-1, -2)), live(m, T)[:, 1:])


def hsmm(kind: str, m: dict, dtype, unary_grad: bool = False) -> SemiMarkovChain:
    t = {k: v.to(dtype) if v.is_floating_point() else v for k, v in m.items()}
    unary = t["unary"].requires_grad_(unary_grad)
    if kind == "dense":
        factors = DenseSemiMarkov(unary, t["transition"], t["duration"], t["init"])
    elif kind == "low-rank":
        factors = LowRankSemiMarkov(unary, t["left"], t["right"], t["duration"], t["init"])
    else:  # rank-space: state-level marginals on the materialized per-segment form
        emission = t["rank_emission"].requires_grad_(unary_grad)
        factors = RankSpaceSemiMarkov(t["init"].exp(), t["U"], t["V"], t["duration"][:R], emission)
    return SemiMarkovChain(factors, t["lengths"])


@pytest.mark.parametrize("kind", ["dense", "low-rank"])
def test_hsmm_gradient_mass_of_a_long_sequence_stays_one_in_float32(kind):
    """Every segmentation covers each frame once: d log Z / d unary sums to 1 over the states at each
    frame (the drift, without the window shifts' gradient: 9e-6 near the start, dense)."""
    T = 20_000
    m = gaussian_model(T)
    d = hsmm(kind, m, torch.float32, unary_grad=True)
    (grad,) = torch.autograd.grad(d.log_partition.sum(), d.factors.unary)
    assert_mass_one(kind, grad.sum(-1), live(m, T))


@pytest.mark.parametrize("kind", ["dense", "low-rank", "rank-space"])
def test_hsmm_frame_marginals_of_a_long_sequence_keep_their_mass_in_float32(kind):
    """Frame marginals are sums of segment marginals (a float64 difference array and running sum).
    Rank-space: on the materialized per-segment form (O(T D N^2)), each frame's best rank emission taken
    out (``rank_space.frame_shifted_dense``); unshifted, its segment scores of hundreds of nats put the
    marginals 1.4e-5 from float64 at any T, so a short sequence tests it."""
    T = 500 if kind == "rank-space" else 5_000
    m = gaussian_model(T)
    m32, m64 = hsmm(kind, m, torch.float32).marginals, hsmm(kind, m, F64).marginals
    assert_marginals(kind, m32, m64, live(m, T), 3 * MASS_TOLERANCE)
