"""Posterior marginals of long chains with few states in chunks (``zoo.inference.chain.chunked_marginals``):
the no-grad route of the exact ``LinearChain.marginals`` where ``chunked.pays``.

With the chunk length patched down to 1-3 positions, tiny chains go through every part of it (first
chunks of 1..L positions, several full chunks, sequences with none, the scans' rounds) and are checked
against brute-force enumeration; at real sizes, float32 on realistic inputs against float64.
"""

from unittest import mock

import bruteforce as bf
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from numerics.checks import check_chain
from numerics.strategies import TOPOLOGIES, chain_case
from strategies import chain_specs

import zoo.inference.chain.chunked as chunked
import zoo.inference.chain.chunked_marginals as chunked_marginals
from zoo.inference import DenseChain, LinearChain
from zoo.inference.chain.scaled import ZeroProbability


@pytest.fixture
def calls(monkeypatch):
    """Counts the chunked marginals that gave an answer (so that a test knows the route it checks was
    taken)."""
    seen = {"chunked": 0}
    original = chunked_marginals.marginals

    def counting(chain, lengths, plain):
        found = original(chain, lengths, plain)
        seen["chunked"] += found is not None
        return found

    monkeypatch.setattr(chunked_marginals, "marginals", counting)
    return seen


def plain_marginals(chain: DenseChain, lengths: torch.Tensor) -> torch.Tensor:
    """The gradient of log Z, the chunks switched off."""
    with mock.patch.object(chunked, "MIN_LENGTH", 10**9):
        return LinearChain(chain, lengths=lengths).marginals


@settings(max_examples=150, deadline=None, derandomize=True)
@given(spec=chain_specs("dense", max_n=3, max_t=9, min_b=2, max_b=4, forbid=True), L=st.integers(1, 3))
def test_matches_brute_force_with_short_chunks(spec, L):
    """Ragged lengths at B > 1, forbidden transitions, chunks of 1 to 3 positions: every marginal to
    1e-9 (or the plain route's answer where a chunk has no path from some state)."""
    assume(spec.args["transition"].dim() == 2)  # the chunks take a shared transition only
    chain = DenseChain(**spec.args)
    lengths = spec.lengths if spec.lengths is not None else torch.full((spec.batch,), spec.T)
    with mock.patch.multiple(chunked, CHUNK=L, MIN_LENGTH=1, MAX_WORK=10**6):
        got = LinearChain(chain, lengths=lengths).marginals
    expected = torch.stack([bf.marginals(spec, b) for b in range(spec.batch)]).to(got.dtype)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_the_chunks_are_taken_in_most_brute_force_cases(calls):
    """The property above is not all fallbacks: on chains without forbidden entries the chunks answer."""
    g = torch.Generator().manual_seed(0)
    unary, transition = torch.randn(3, 9, 2, generator=g, dtype=torch.float64), torch.randn(2, 2).double()
    lengths = torch.tensor([9, 4, 1])
    with mock.patch.multiple(chunked, CHUNK=2, MIN_LENGTH=1, MAX_WORK=10**6):
        got = LinearChain(DenseChain(unary, transition), lengths=lengths).marginals
    assert calls["chunked"] == 1
    plain = plain_marginals(DenseChain(unary, transition), lengths)
    torch.testing.assert_close(got, plain, rtol=1e-12, atol=1e-12)


def test_the_route_is_taken_where_it_pays_and_not_with_gradients(calls):
    """B = 1, T = 1,000, N = 4 without a gradient: the chunks; with one (the marginals then carry a
    graph), or at T = 100: the gradient of log Z."""
    g = torch.Generator().manual_seed(0)
    unary, transition = torch.randn(1, 1000, 4, generator=g), torch.randn(4, 4, generator=g).log_softmax(-1)
    got = LinearChain(DenseChain(unary, transition)).marginals
    assert calls["chunked"] == 1 and not got.requires_grad
    torch.testing.assert_close(got, plain_marginals(DenseChain(unary, transition), None), rtol=0, atol=1e-5)
    assert LinearChain(DenseChain(unary[:, :100], transition)).marginals.shape == (1, 100, 4)
    leaf = unary.clone().requires_grad_(True)
    differentiable = LinearChain(DenseChain(leaf, transition)).marginals
    assert calls["chunked"] == 1 and differentiable.requires_grad


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("emission", ["gaussian", "close", "unaligned"])
def test_float32_on_realistic_chains(topology, emission, calls):
    """Gaussian log-likelihoods hundreds of nats apart (or close together, or not following the
    topology), left-to-right / banded / peaked / partly forbidden transitions with entries down to
    -1e4 and -inf, fixed or masked start states, ragged lengths: float32 marginals against float64
    within the budget of the other float32 tests. Where a topology leaves some state without a path
    through a chunk, the gradient of log Z answers (and is checked the same way)."""
    for seed, (B, T, N) in enumerate([(2, 1500, 4), (1, 3000, 8), (2, 700, 2), (8, 600, 3)]):
        init = "fixed" if seed % 2 else "masked"
        case = chain_case(seed, B=B, T=T, N=N, topology=topology, emission=emission, init=init)
        check_chain(case, "native", "marginals")


def test_float32_long_gaussian_hmm_takes_the_chunks(calls):
    """hmmlearn's ground: one sequence of 20,000 frames, 3 states, Gaussian emissions far apart; float32
    against float64 to 1e-5, by the chunks."""
    g = torch.Generator().manual_seed(3)
    means = torch.tensor([-4.0, 0.0, 5.0], dtype=torch.float64)
    x = torch.randn(1, 20000, 1, generator=g, dtype=torch.float64)
    x[:, ::97] += 60  # outliers: emissions hundreds of nats apart
    unary = -0.5 * (x - means) ** 2
    transition = torch.tensor([[0.98, 0.02, 0.0], [0.0, 0.97, 0.03], [0.05, 0.0, 0.95]]).double().log()
    init = torch.tensor([1.0, 0.0, 0.0]).double().log()
    expected = plain_marginals(DenseChain(unary, transition, init), None)
    got = LinearChain(DenseChain(unary.float(), transition.float(), init.float())).marginals
    assert calls["chunked"] == 1
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)


def test_float32_rows_thousands_of_nats_apart():
    """Unnormalized transition scores (randn x 20): a chunk's rows lie thousands of nats apart, where
    float32 keeps 1e-3 nats of a row's scale (the chunks' matrices and messages are float64); float32
    marginals within 5e-6 of float64 (3.4e-5 with float32 matrices), as the gradient of log Z's."""
    g = torch.Generator().manual_seed(1)
    unary = (3 * torch.randn(1, 544, 10, generator=g, dtype=torch.float64)).float()
    transition = (20 * torch.randn(10, 10, generator=g, dtype=torch.float64)).float()
    expected = plain_marginals(DenseChain(unary.double(), transition.double()), None)
    got = LinearChain(DenseChain(unary, transition)).marginals
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=5e-6)


def test_a_sequence_without_a_path_raises_naming_it():
    """The plain route's error, naming the batch element."""
    T, N = 1000, 3
    unary = torch.zeros(3, T, N)
    unary[1, 600] = float("-inf")  # no state at position 600 of sequence 1
    assert chunked.pays(3, T, N)
    with pytest.raises(ZeroProbability, match=r"batch element\(s\) \[1\]"):
        _ = LinearChain(DenseChain(unary, torch.zeros(N, N))).marginals
