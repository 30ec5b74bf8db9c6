"""Statistical tests of the randomized semi-Markov backend, all with fixed seeds.

Independent estimates come from one SemiMarkovChain whose batch repeats the same sequence: every
batch row draws its own kept states."""

import itertools
import math

import pytest
import torch

from zoo.inference import DenseSemiMarkov, LowRankSemiMarkov, RDPOptions, SemiMarkovChain
from zoo.inference.rdp import KeptStates
from zoo.inference.semimarkov.randomized import RandomizedEngine

N, T, D = 10, 8, 3
F64 = torch.float64


def hsmm(repeats, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    trans = torch.randn(N, N, generator=g, dtype=F64) * scale
    trans = trans.masked_fill(torch.eye(N, dtype=torch.bool), -1e9)
    return DenseSemiMarkov(
        (torch.randn(1, T, N, generator=g, dtype=F64) * scale).expand(repeats, T, N).contiguous(),
        trans.log_softmax(-1),
        torch.randn(N, D, generator=g, dtype=F64).log_softmax(-1),
        torch.randn(N, generator=g, dtype=F64).log_softmax(-1),
    )


def estimate(factors, k1, k2, proposal="local+global", seed=0, lengths=None):
    opts = RDPOptions(k1, k2, proposal, torch.Generator().manual_seed(seed))
    return SemiMarkovChain(factors, lengths, backend="randomized", options=opts)


def test_k1_equal_to_n_is_exact():
    f = hsmm(3)
    lengths = torch.tensor([8, 2, 5])
    rdp, ex = estimate(f, N, 0, lengths=lengths), SemiMarkovChain(f, lengths)
    torch.testing.assert_close(rdp.log_partition, ex.log_partition)
    torch.testing.assert_close(rdp.entropy, ex.entropy)
    torch.testing.assert_close(rdp.marginals, ex.marginals)


@pytest.mark.parametrize("proposal", ["uniform", "local", "local+global"])
def test_expectation_over_every_possible_draw_is_exactly_z(proposal):
    """N = 3, T = 3, K1 = 1, K2 = 1: enumerate every draw at the two inner boundaries, weight by its
    probability: the expectation of Z_hat is Z to round-off."""
    g = torch.Generator().manual_seed(5)
    n, t = 3, 3
    f = DenseSemiMarkov(
        torch.randn(1, t, n, generator=g, dtype=F64),
        torch.randn(n, n, generator=g, dtype=F64),
        torch.randn(n, 2, generator=g, dtype=F64),
    )
    eng = RandomizedEngine(RDPOptions(1, 1, proposal))
    from zoo.inference.rdp import proposal_weights

    q = proposal_weights(f.unary, f.init, f.state_prior, proposal)[0].softmax(-1)
    top = q.argmax(-1)
    tail = q.scatter(-1, top.unsqueeze(-1), 0.0)
    tail = tail / tail.sum(-1, keepdim=True)
    expectation = 0.0
    lengths = torch.tensor([t])
    unused = (top[t - 1] + 1) % n  # row t-1 (a segment ending at the last frame) is summed exactly
    for used in itertools.product(range(n), repeat=t - 1):
        if any(used[i] == top[i] for i in range(t - 1)):
            continue
        drawn = torch.tensor([*used, int(unused)])
        p = tail[torch.arange(t), drawn]
        eng._kept = KeptStates(
            torch.stack([top, drawn], -1).unsqueeze(0),
            torch.stack([torch.zeros(t, dtype=F64), -p.log()], -1).unsqueeze(0),
        )
        expectation = expectation + p[: t - 1].prod() * eng.log_partition(f, lengths).exp()
    torch.testing.assert_close(expectation.log(), SemiMarkovChain(f).log_partition, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("proposal", ["uniform", "local", "global", "local+global", "tensor"])
def test_probability_space_estimate_is_unbiased(proposal):
    runs = 3000
    f = hsmm(runs, seed=1, scale=0.5)
    if proposal == "tensor":
        proposal = torch.rand(runs, T, N, generator=torch.Generator().manual_seed(2), dtype=F64) + 0.1
    ratio = (estimate(f, 2, 2, proposal, seed=3).log_partition - SemiMarkovChain(f).log_partition[0]).exp()
    se = ratio.std() / math.sqrt(runs)
    assert abs(ratio.mean() - 1) < 4 * se, (ratio.mean().item(), se.item())


def test_log_space_estimate_is_below_exact_on_average():
    runs = 2000
    f = hsmm(runs, seed=4)
    gap = estimate(f, 2, 2, seed=5).log_partition - SemiMarkovChain(f).log_partition[0]
    assert gap.mean() + 4 * gap.std() / math.sqrt(runs) < 0


def test_error_falls_as_k_grows_and_beats_top_k():
    runs = 400
    f = hsmm(runs, seed=6)
    ex = SemiMarkovChain(f)
    mse_z, mse_h = [], []
    for k in (2, 4, 7, 9):
        rdp = estimate(f, k - 1, 1, seed=k)
        mse_z.append(((rdp.log_partition - ex.log_partition) ** 2).mean().item())
        mse_h.append(((rdp.entropy - ex.entropy) ** 2).mean().item())
    assert mse_z == sorted(mse_z, reverse=True), mse_z
    assert mse_h == sorted(mse_h, reverse=True), mse_h
    top_k = estimate(f, 4, 0).log_partition
    assert (top_k < ex.log_partition).all(), "top-K drops mass: it must be below log Z"
    rdp = estimate(f, 3, 1, seed=11).log_partition
    assert (rdp - ex.log_partition).mean().abs() < (top_k - ex.log_partition).mean().abs()


def test_low_rank_randomized_is_unbiased_and_differentiable():
    runs = 2000
    g = torch.Generator().manual_seed(12)
    left = torch.rand(N, 3, generator=g, dtype=F64).requires_grad_()
    f = LowRankSemiMarkov(
        torch.randn(1, T, N, generator=g, dtype=F64).expand(runs, T, N).contiguous(),
        left,
        torch.rand(N, 3, generator=g, dtype=F64),
        torch.randn(N, D, generator=g, dtype=F64).log_softmax(-1),
        self_transitions=False,
    )
    rdp = estimate(f, 2, 2, seed=13)
    ratio = (rdp.log_partition - SemiMarkovChain(f).log_partition[0]).exp()
    assert abs(ratio.mean() - 1) < 4 * ratio.std() / math.sqrt(runs)
    (rdp.log_partition[:4].sum() + rdp.entropy[:4].sum()).backward()
    assert torch.isfinite(left.grad).all() and left.grad.abs().sum() > 0


def test_marginals_estimate_sums_to_one_and_same_seed_same_estimate():
    f = hsmm(3, seed=14)
    a = estimate(f, 2, 2, seed=15)
    torch.testing.assert_close(a.marginals.sum(-1), torch.ones(3, T, dtype=F64))
    torch.testing.assert_close(a.log_partition, estimate(f, 2, 2, seed=15).log_partition)


def test_an_empty_tail_gives_finite_estimates_and_entropy():
    """3 of 6 states forbidden at every frame, k1 = 3 of the local proposal: the tail has no mass, its
    K2 draws are placeholders of weight 0 (select_states raised before), and the entropy they carry
    stays finite (a -inf log weight made it NaN)."""
    g = torch.Generator().manual_seed(0)
    unary = torch.randn(1, 6, 6, generator=g, dtype=torch.float64)
    unary[..., 3:] = float("-inf")
    factors = DenseSemiMarkov(unary, torch.randn(6, 6, generator=g, dtype=torch.float64),
                              torch.randn(6, 3, generator=g, dtype=torch.float64))
    options = RDPOptions(3, 1, "local", torch.Generator().manual_seed(1))
    dist = SemiMarkovChain(factors, backend="randomized", options=options)
    torch.testing.assert_close(dist.log_partition, SemiMarkovChain(factors).log_partition)
    assert torch.isfinite(dist.entropy).all() and torch.isfinite(dist.marginals).all()


def test_what_is_derived_from_an_estimate_of_zero_is_refused():
    """A proposal that keeps only a state no frame allows (k1 = 1, k2 = 0) gives Z_hat = 0 (log -inf, as
    documented); the marginals, segment marginals and entropy of that estimate came out 0 with no error:
    now one error names the sequences."""
    g = torch.Generator().manual_seed(0)
    B, T, N = 2, 5, 3
    unary = torch.randn(B, T, N, dtype=F64, generator=g)
    unary[:, :, 0] = float("-inf")  # state 0 emits no frame
    proposal = torch.ones(B, T, N, dtype=F64)
    proposal[..., 0] = 100.0
    factors = DenseSemiMarkov(unary, torch.randn(N, N, dtype=F64, generator=g), torch.randn(N, 2, dtype=F64))
    dist = SemiMarkovChain(factors, torch.tensor([5, 3]), "randomized", RDPOptions(1, 0, proposal))
    assert torch.isneginf(dist.log_partition).all()
    assert torch.isfinite(SemiMarkovChain(factors, torch.tensor([5, 3])).log_partition).all()
    for operation in ("marginals", "segment_marginals", "entropy"):
        with pytest.raises(ValueError, match=r"Z_hat is 0 for batch elements \[0, 1\]"):
            getattr(dist, operation)
