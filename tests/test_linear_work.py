"""Operations whose work grows linearly with the sequence length, as documented, measured by the
elements every aten operation writes (a ``TorchDispatchMode``: deterministic, unlike a timing): four
times the length must cost under five times the elements. Each case was quadratic: a step that indexed
or sliced a whole B x T x ... tensor wrote, in its backward, a zero gradient of all of it (or a select of
a stacked tensor did, differentiated again), or a step rebuilt a view that checks every input."""

from __future__ import annotations

import pytest
import torch
from op_outputs import OutputSizes

from zoo.inference import (
    DenseChain,
    DenseSemiMarkov,
    EdgeSemiMarkov,
    LinearChain,
    LowRankChain,
    RankSpaceChain,
    RankSpaceSemiMarkov,
    SemiMarkovChain,
)

B, N, R = 2, 4, 3


def work(run, length: int) -> int:
    """Elements written by ``run(length)``'s returned callable (built outside the count)."""
    call = run(length)
    with OutputSizes() as sizes:
        call()
    return sizes.written


def assert_linear(run, short=64, long=256):
    ratio = work(run, long) / work(run, short)
    assert ratio < 5 * long / (4 * short), ratio


def leaves(*shapes, positive=()):
    g = torch.Generator().manual_seed(0)
    made = [torch.rand(s, generator=g) + 0.1 if i in positive else torch.randn(s, generator=g)
            for i, s in enumerate(shapes)]  # fmt: skip
    return [x.requires_grad_() for x in made]


def backward_of_relaxed_sample(distribution):
    """A call that backpropagates a weighted sum of ``distribution``'s relaxed sample (drawn here)."""
    soft = distribution.rsample(temperature=0.5, generator=torch.Generator().manual_seed(0))
    weights = torch.randn(soft.shape, generator=torch.Generator().manual_seed(1))
    return lambda: (soft * weights).sum().backward()


CHAINS = {
    "shared": lambda T: DenseChain(*leaves((B, T, N), (N, N))),
    "per-position": lambda T: DenseChain(*leaves((B, T, N), (B, T - 1, N, N))),
    "low-rank, rank weights": lambda T: LowRankChain(
        *leaves((B, T, N), (N, R), (N, R), positive=(1, 2)), normalize=False,
        log_rank_weights=leaves((B, T - 1, R))[0],
    ),  # fmt: skip
    "rank-space": lambda T: RankSpaceChain(*leaves((N,), (N, R), (N, R), (B, T, R), positive=(0, 1, 2))),
}


def test_differentiating_the_marginals():
    """Each step's shift and forward vector were stacked (``scaled.step_ends``): 16x at 4x the length."""

    def run(T):
        marginals = LinearChain(CHAINS["shared"](T)).marginals
        weights = torch.randn(marginals.shape, generator=torch.Generator().manual_seed(1))
        return lambda: (marginals * weights).sum().backward()

    assert_linear(run)


@pytest.mark.parametrize("name", list(CHAINS))
def test_the_backward_of_a_relaxed_sample(name):
    """``gumbel_backward`` read log_alphas[:, t], wrote soft[:, :, t] and indexed the whole transition
    (or the rank weights) a step: the structured VAE's ELBO took 7x its log Z + backward at T = 1024."""

    assert_linear(lambda T: backward_of_relaxed_sample(LinearChain(CHAINS[name](T))))


def test_sampling_a_rank_space_chain():
    """Each backward-sampling step rebuilt the low-rank view, which checks the whole unary and emission."""

    def run(T):
        chain = LinearChain(CHAINS["rank-space"](T))
        return lambda: chain.sample(2, generator=torch.Generator().manual_seed(0))

    assert_linear(run)


D = 3
SEMI_MARKOV = {
    "dense": lambda T: DenseSemiMarkov(*leaves((B, T, N), (N, N), (N, D))),
    "per-segment (edge)": lambda T: EdgeSemiMarkov(*leaves((B, D, N), (B, T - 1, D, N, N))),
}


@pytest.mark.parametrize("name", list(SEMI_MARKOV))
def test_the_backward_of_a_semi_markov_log_z(name):
    """The per-segment forward indexed the whole B x (T-1) x D x N x N edge a frame: its backward wrote
    a zero gradient of all of it each time (every rank-space HSMM state-level operation runs there)."""

    def run(T):
        log_z = SemiMarkovChain(SEMI_MARKOV[name](T)).log_partition
        return lambda: log_z.sum().backward()

    assert_linear(run)


@pytest.mark.parametrize("name", list(SEMI_MARKOV))
def test_differentiating_the_segment_marginals(name):
    """The forward's ends were stacked and indexed at each length (``numerics.at_positions``)."""

    def run(T):
        marginals = SemiMarkovChain(SEMI_MARKOV[name](T)).segment_marginals
        weights = torch.randn(marginals.shape, generator=torch.Generator().manual_seed(1))
        return lambda: (marginals * weights).sum().backward()

    assert_linear(run)


def test_segment_marginals_of_a_rank_space_semi_markov_chain():
    def run(T):
        chain = SemiMarkovChain(RankSpaceSemiMarkov(
            *leaves((N,), (N, R), (N, R), (R, D), (B, T, R), positive=(0, 1, 2))
        ))  # fmt: skip
        return lambda: chain.segment_marginals

    assert_linear(run)


@pytest.mark.parametrize("name", list(SEMI_MARKOV))
def test_the_backward_of_a_relaxed_semi_markov_sample(name):
    """The walk back read each segment's logits from the whole ends, cumulative emissions and edge (a
    zero gradient of each a segment) and scattered into a copy of the whole relaxed tensor a segment:
    now the walk runs without a graph, and its segments' logits are read by one gather."""

    assert_linear(lambda T: backward_of_relaxed_sample(SemiMarkovChain(SEMI_MARKOV[name](T))))
