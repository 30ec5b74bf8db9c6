"""Each operation of a distribution builds its own autograd graph from the potentials: after a backward
of log Z, the entropy, the marginals and the best score can be differentiated too (the tree's masked
terms and the low-rank containers' normalizers were formed once, and their graphs freed by the first
backward: "Trying to backward through the graph a second time")."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import (
    DenseChain,
    DenseGrammar,
    DenseSemiMarkov,
    LinearChain,
    LowRankChain,
    LowRankGrammar,
    LowRankSemiMarkov,
    SemiMarkovChain,
    TreeDistribution,
)

B, T, N, R, D = 2, 5, 3, 2, 2
LENGTHS = torch.tensor([5, 3])


def leaf(*shape, positive=False):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.rand(*shape, generator=g) if positive else torch.randn(*shape, generator=g)
    return x.requires_grad_()


DISTRIBUTIONS = {
    "chain": lambda: LinearChain(DenseChain(leaf(B, T, N), leaf(N, N)), LENGTHS),
    "low-rank chain": lambda: LinearChain(
        LowRankChain(leaf(B, T, N), leaf(N, R, positive=True), leaf(N, R, positive=True)), LENGTHS
    ),
    "semi-Markov": lambda: SemiMarkovChain(DenseSemiMarkov(leaf(B, T, N), leaf(N, N), leaf(N, D)), LENGTHS),
    "low-rank semi-Markov": lambda: SemiMarkovChain(
        LowRankSemiMarkov(leaf(B, T, N), leaf(N, R, positive=True), leaf(N, R, positive=True), leaf(N, D)),
        LENGTHS,
    ),
    "tree": lambda: TreeDistribution(DenseGrammar(leaf(2), leaf(2, 5, 5)), leaf(B, T, 3), LENGTHS),
    "low-rank tree": lambda: TreeDistribution(
        LowRankGrammar(leaf(2), leaf(2, 5, 5), leaf(2, R, positive=True), leaf(2, 2, R, positive=True)),
        leaf(B, T, 3),
        LENGTHS,
    ),
}


@pytest.mark.parametrize("operation", ["entropy", "marginals", "max_score"])
@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_an_operation_after_a_backward_of_log_z(name, operation):
    dist = DISTRIBUTIONS[name]()
    dist.log_partition.sum().backward()
    value = getattr(dist, operation)
    value.sum().backward()
    fresh = getattr(DISTRIBUTIONS[name](), operation)
    torch.testing.assert_close(value, fresh)
