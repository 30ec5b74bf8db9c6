"""Operations reuse what a distribution computed already: log_prob divides by the cached log Z, and a
tree's mbr() decodes the cached span marginals (each recomputed them on every call: a semi-Markov
log_prob cost as much as log Z; audit). Reuse never changes a value or drops a gradient."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import (
    DenseChain,
    DenseGrammar,
    DenseSemiMarkov,
    LinearChain,
    SemiMarkovChain,
    TreeDistribution,
)

B, T, N, D = 2, 5, 3, 2


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _chain(grad=False):
    tr = torch.randn(N, N, generator=_g(2), dtype=torch.float64).requires_grad_(grad)
    dist = LinearChain(DenseChain(torch.randn(B, T, N, generator=_g(1), dtype=torch.float64), tr), [5, 3])
    return dist, tr, torch.randint(0, N, (4, B, T), generator=_g(3))


def _semimarkov(grad=False):
    tr = torch.randn(N, N, generator=_g(2), dtype=torch.float64).requires_grad_(grad)
    factors = DenseSemiMarkov(
        torch.randn(B, T, N, generator=_g(1), dtype=torch.float64), tr,
        torch.randn(N, D, generator=_g(4), dtype=torch.float64),
    )
    segmentation = torch.tensor([[0, -1, 1, 2, -1], [1, 0, -1, -1, -1]])
    return SemiMarkovChain(factors, [5, 3]), tr, segmentation


def _tree(grad=False):
    rules = torch.randn(2, 5, 5, generator=_g(2), dtype=torch.float64).requires_grad_(grad)
    terms = torch.randn(B, T, 3, generator=_g(3), dtype=torch.float64)
    dist = TreeDistribution(DenseGrammar(torch.randn(2, generator=_g(1), dtype=torch.float64), rules), terms,
                            torch.tensor([5, 3]))
    return dist, rules, dist.argmax


STRUCTURES = {"chain": _chain, "semimarkov": _semimarkov, "tree": _tree}


def _counting(monkeypatch, engine, name):
    """Count the calls of ``engine``'s method ``name``, also those it makes itself (on the engine inside
    its full-precision wrapper)."""
    engine = getattr(engine, "engine", engine)
    calls = []
    original = getattr(engine, name)
    monkeypatch.setattr(engine, name, lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


@pytest.mark.parametrize("structure", STRUCTURES)
def test_log_prob_divides_by_the_cached_log_partition(structure, monkeypatch):
    dist, _, x = STRUCTURES[structure]()
    expected = STRUCTURES[structure]()[0].log_prob(x)
    dist.log_partition  # noqa: B018
    calls = _counting(monkeypatch, dist.engine, "log_partition")
    assert torch.equal(dist.log_prob(x), expected) and torch.equal(dist.log_prob(x), expected)
    assert not calls, f"log Z recomputed {len(calls)} times"


@pytest.mark.parametrize("structure", STRUCTURES)
def test_a_log_partition_cached_without_a_graph_is_not_reused_for_a_gradient(structure):
    dist, leaf, x = STRUCTURES[structure](grad=True)
    with torch.no_grad():
        dist.log_partition  # noqa: B018
    (grad,) = torch.autograd.grad(dist.log_prob(x).sum(), leaf)
    fresh, fresh_leaf, _ = STRUCTURES[structure](grad=True)
    (expected,) = torch.autograd.grad(fresh.log_prob(x).sum(), fresh_leaf)
    torch.testing.assert_close(grad, expected)


def test_mbr_decodes_the_cached_span_marginals(monkeypatch):
    dist = _tree()[0]
    expected = _tree()[0].mbr()
    dist.span_marginals  # noqa: B018
    calls = _counting(monkeypatch, dist.engine, "span_marginals")
    assert torch.equal(dist.mbr(), expected)
    assert not calls, "span marginals recomputed"
