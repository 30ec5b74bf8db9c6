"""The randomized backend's proposals in float32 when the states that matter lie hundreds of nats below
a position's best (audit): q was a probability, 0 for every state 104 nats below the best, so those
states were never drawn (Z_hat half of Z every time, or -inf where float64 was finite) and the top K1
among such zeros was arbitrary. q is now kept in log space (``zoo.inference.rdp``)."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.inference import (
    DenseChain,
    DenseGrammar,
    DenseSemiMarkov,
    LinearChain,
    RDPOptions,
    SemiMarkovChain,
    TreeDistribution,
)

NEG = -math.inf
DTYPES = [torch.float64, torch.float32]


def far_below_chain(dtype):
    """T = 4, N = 3: state 0 at 0 nats but only at the start (nothing enters it), state 2 at -200, state 1
    at -300 and unreachable: the one path is 0, 2, 2, 2 (log Z = -600)."""
    unary = torch.zeros(1, 4, 3, dtype=dtype)
    unary[..., 1], unary[..., 2] = -300.0, -200.0
    transition = torch.full((3, 3), NEG, dtype=dtype)
    transition[0, 2] = transition[2, 2] = transition[1, 1] = 0.0
    return DenseChain(unary, transition, torch.tensor([0.0, NEG, NEG], dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k1, k2", [(1, 1), (2, 0)])
def test_a_chain_keeps_the_states_far_below_the_best(k1, k2, dtype):
    """k1 = 1, k2 = 1: the tail {1, 2} draws state 2 (all but e^-100 of it); k1 = 2, k2 = 0: the top two
    are {0, 2}. Either way every estimate is log Z; float32 gave a false "zero probability" error."""
    for seed in range(20):
        options = RDPOptions(k1, k2, "local", torch.Generator().manual_seed(seed))
        got = LinearChain(far_below_chain(dtype), backend="randomized", options=options).log_partition
        torch.testing.assert_close(got.double(), torch.tensor([-600.0], dtype=torch.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k1, k2", [(1, 1), (2, 0)])
def test_a_semi_markov_chain_keeps_the_states_far_below_the_best(k1, k2, dtype):
    """The audit's case (T = 4, D = 2): float32 gave log Z_hat = -400.0 for -399.307 at every draw (a
    bias of one half)."""
    unary = torch.zeros(1, 4, 3, dtype=dtype)
    unary[..., 1], unary[..., 2] = -300.0, -200.0
    transition = torch.full((3, 3), NEG, dtype=dtype)
    transition[0, 2] = transition[2, 2] = transition[1, 1] = 0.0
    init = torch.tensor([0.0, NEG, NEG], dtype=dtype)
    factors = DenseSemiMarkov(unary, transition, torch.zeros(3, 2, dtype=dtype), init)
    expected = SemiMarkovChain(factors).log_partition.double()
    for seed in range(20):
        options = RDPOptions(k1, k2, "local", torch.Generator().manual_seed(seed))
        got = SemiMarkovChain(factors, backend="randomized", options=options).log_partition
        torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_tree_keeps_the_leaves_far_below_the_best(dtype):
    """PT = 6 preterminals, the leaves keep 2 + 2: preterminals 0 and 1 emit every word best (0 nats)
    but no rule makes them; the others emit it 200 to 300 nats below. float32 kept only 0 and 1 (the
    tail's probabilities were 0) and estimated Z = 0; now every estimate is finite and their mean is Z."""
    g = torch.Generator().manual_seed(0)
    NT, PT, T = 4, 6, 3
    rules = torch.randn(NT, NT + PT, NT + PT, generator=g, dtype=torch.float64)
    rules[:, NT:NT + 2, :] = NEG
    rules[:, :, NT:NT + 2] = NEG
    grammar = DenseGrammar(torch.randn(NT, generator=g, dtype=torch.float64).to(dtype), rules.to(dtype))
    terms = torch.zeros(1, T, PT, dtype=dtype)
    terms[..., 2:] = -200.0 - 100.0 * torch.rand(1, T, PT - 2, generator=g).to(dtype)
    expected = TreeDistribution(grammar, terms).log_partition.double()
    options = [RDPOptions(1, 1, generator=torch.Generator().manual_seed(s)) for s in range(300)]
    runs = torch.cat([TreeDistribution(grammar, terms, backend="randomized", options=o).log_partition
                      for o in options])  # fmt: skip
    ratio = (runs.double() - expected).exp()
    assert torch.isfinite(runs).all()
    assert abs(ratio.mean() - 1) < 4 * ratio.std() / math.sqrt(len(runs)) + 1e-6, (ratio.mean(), ratio.std())
