"""A gradient taken with ``create_graph=True`` (gradient penalties, ``loss.backward(create_graph=True)``,
MAML-style inner steps, Hessian-vector products) equals the plain gradient, for every structure and
backend, with respect to every input: on the normalized low-rank paths it was silently wrong (the
normalizer's path counted twice: ``scaled.differentiated_again``)."""

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
    RankSpaceChain,
    RankSpaceSemiMarkov,
    SemiMarkovChain,
    TreeDistribution,
)

B, T, N, R = 3, 5, 3, 2
LENGTHS = torch.tensor([5, 1, 3])
TREE_LENGTHS = torch.tensor([5, 2, 3])  # a tree spans at least 2 words
F64 = torch.float64


def inputs(*shapes, positive=()):
    """Leaves of these shapes (float64), the ones at the indices in ``positive`` in (0.1, 1.1)."""
    g = torch.Generator().manual_seed(len(shapes))
    return [torch.rand(s, generator=g, dtype=F64) + 0.1 if i in positive else
            torch.randn(s, generator=g, dtype=F64) for i, s in enumerate(shapes)]  # fmt: skip


def chain_log_z(factors, backend=None):
    return LinearChain(factors, LENGTHS, backend=backend).log_partition


def semi_markov_log_z(factors):
    return SemiMarkovChain(factors, LENGTHS).log_partition


def tree_log_z(grammar, terms):
    return TreeDistribution(grammar, terms, TREE_LENGTHS).log_partition


def semi_markov(duration_length):
    return (
        lambda u, left, right, dur: semi_markov_log_z(LowRankSemiMarkov(u, left, right, dur)),
        inputs((B, T, N), (N, R), (N, R), (N, duration_length), positive=(1, 2)),
    )


CASES = {
    "dense chain": (
        lambda u, tr, init: chain_log_z(DenseChain(u, tr, init)),
        inputs((B, T, N), (N, N), (N,)),
    ),
    "per-position chain": (
        lambda u, tr: chain_log_z(DenseChain(u, tr)),
        inputs((B, T, N), (B, T - 1, N, N)),
    ),
    **{
        f"low-rank chain ({backend})": (
            lambda u, left, right, backend=backend: chain_log_z(LowRankChain(u, left, right), backend),
            inputs((B, T, N), (N, R), (N, R), positive=(1, 2)),
        )
        for backend in ("low-rank", "exact")
    },
    "low-rank chain, normalize=False": (
        lambda u, left, right: chain_log_z(LowRankChain(u, left, right, normalize=False)),
        inputs((B, T, N), (N, R), (N, R), positive=(1, 2)),
    ),
    **{
        f"rank-space chain ({backend})": (
            lambda s, U, V, em, backend=backend: chain_log_z(RankSpaceChain(s, U, V, em), backend),
            inputs((N,), (N, R), (N, R), (B, T, R), positive=(0, 1, 2)),
        )
        for backend in ("rank-space", "low-rank", "exact")
    },
    "dense semi-Markov": (
        lambda u, tr, dur: semi_markov_log_z(DenseSemiMarkov(u, tr, dur)),
        inputs((B, T, N), (N, N), (N, 2)),
    ),
    "low-rank semi-Markov, D = 1": semi_markov(1),
    "low-rank semi-Markov, D = 3": semi_markov(3),
    "rank-space semi-Markov": (
        lambda s, U, V, dur, em: semi_markov_log_z(RankSpaceSemiMarkov(s, U, V, dur, em)),
        inputs((N,), (N, R), (N, R), (R, 2), (B, T, R), positive=(0, 1, 2)),
    ),
    "dense tree": (
        lambda root, rules, terms: tree_log_z(DenseGrammar(root, rules), terms),
        inputs((2,), (2, 5, 5), (B, T, 3)),
    ),
    "low-rank tree": (
        lambda root, rules, head, kids, terms: tree_log_z(LowRankGrammar(root, rules, head, kids), terms),
        inputs((2,), (2, 5, 5), (2, R), (2, 2, R), (B, T, 3), positive=(2, 3)),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_gradient_with_create_graph_equals_the_plain_gradient(name):
    log_partition, values = CASES[name]
    leaves = [x.clone().requires_grad_() for x in values]
    cotangent = torch.linspace(0.5, 1.5, B, dtype=F64)
    plain = torch.autograd.grad(log_partition(*leaves), leaves, cotangent)
    kept = torch.autograd.grad(log_partition(*leaves), leaves, cotangent, create_graph=True)
    for x, y in zip(kept, plain):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["low-rank chain (low-rank)", "rank-space chain (low-rank)",
                                  "low-rank semi-Markov, D = 1"])  # fmt: skip
def test_hessian_vector_products_match_differences_of_the_gradient(name):
    """Where the first derivative was wrong, so was the second: H v against central differences of the
    (plain, right) gradient along v."""
    log_partition, values = CASES[name]
    leaves = [x.clone().requires_grad_() for x in values]
    directions = inputs(*[x.shape for x in values])
    grads = torch.autograd.grad(log_partition(*leaves).sum(), leaves, create_graph=True)
    hvp = torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, directions)), leaves)

    def gradient_at(step):
        moved = [(x + step * v).requires_grad_() for x, v in zip(values, directions)]
        return torch.autograd.grad(log_partition(*moved).sum(), moved)

    eps = 1e-5
    for got, up, down in zip(hvp, gradient_at(eps), gradient_at(-eps)):
        torch.testing.assert_close(got, (up - down) / (2 * eps), rtol=1e-5, atol=1e-6)
