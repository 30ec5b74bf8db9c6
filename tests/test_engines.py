"""The engine registry and the distributions' shared base: every structure's four backends are
registered where their engines are defined; a structure without a backend is an error in a sentence;
a fifth backend registers itself without touching the structure's distribution."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import Backend, DenseChain, LinearChain
from zoo.inference.chain.engine import ExactEngine
from zoo.inference.distribution import StructuredDistribution
from zoo.inference.engines import _ENGINES, engines_of, make_engine, register_engine


@pytest.mark.parametrize("structure", ["chain", "semimarkov", "tree"])
def test_every_structure_registers_the_four_backends(structure):
    assert list(engines_of(structure)) == list(Backend)


def test_a_missing_backend_is_a_sentence():
    with pytest.raises(ValueError, match="the dependency structure has no 'exact' backend; it has none"):
        make_engine("dependency", Backend.EXACT, None)
    saved = dict(_ENGINES["chain"])
    try:
        del _ENGINES["chain"][Backend.LOW_RANK]
        offered = "no 'low-rank' backend; it has 'exact', 'rank-space', 'randomized'"
        with pytest.raises(ValueError, match=offered):
            LinearChain(DenseChain(torch.randn(1, 3, 2), torch.randn(2, 2)), backend="low-rank")
    finally:
        _ENGINES["chain"].clear()
        _ENGINES["chain"].update(saved)


def test_a_new_engine_registers_itself():
    saved = dict(_ENGINES["chain"])
    try:

        @register_engine("chain", "rank-space")
        class Doubled(ExactEngine):  # stands in for a new backend's engine
            def log_partition(self, factors, lengths, twice_differentiable=False):
                return 2 * super().log_partition(factors, lengths, twice_differentiable)

        factors = DenseChain(torch.randn(2, 3, 4), torch.randn(4, 4))
        exact = LinearChain(factors, backend="exact").log_partition
        torch.testing.assert_close(LinearChain(factors, backend="rank-space").log_partition, 2 * exact)
    finally:
        _ENGINES["chain"].clear()
        _ENGINES["chain"].update(saved)


def test_the_distributions_share_their_base():
    from zoo.inference import SemiMarkovChain, TreeDistribution

    for distribution in (LinearChain, SemiMarkovChain, TreeDistribution):
        assert issubclass(distribution, StructuredDistribution)
    with pytest.raises(TypeError, match="factors must be a DenseChain, EmbeddingChain, LowRankChain or "):
        LinearChain(torch.randn(1, 3, 2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_the_shared_logsumexp_in_every_dtype(dtype):
    """One log-sum-exp for every structure: torch.logsumexp's value, -inf for an all -inf slice with a
    zero gradient there, in every floating dtype (float16 too: the trees run in it)."""
    from zoo.inference.numerics import logsumexp

    x = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3], dtype=dtype, requires_grad=True)
    out = logsumexp(x, -1)
    assert out.dtype == dtype and torch.isneginf(out[1])
    torch.testing.assert_close(out[0], torch.logsumexp(x[0].detach().double(), -1).to(dtype))
    out[0].backward()
    assert torch.isfinite(x.grad).all() and (x.grad[1] == 0).all()
