"""log Z of long chains with few states in chunks (``zoo.inference.chain.chunked``): the no-grad route of
``LinearChain.log_partition`` where ``chunked.pays``.

With the chunk length patched down to 1-3 positions, tiny chains go through every part of it (first
chunks of 1..L positions, several full chunks, sequences with none, the tree's odd levels) and are
checked against brute-force enumeration; at real sizes, float32 on realistic inputs against float64.
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

import zoo.inference.chain.block_scaled as block_scaled
import zoo.inference.chain.chunked as chunked
import zoo.inference.chain.chunked_marginals as chunked_marginals
from zoo.inference import DenseChain, LinearChain
from zoo.inference.chain.scaled import ZeroProbability


@pytest.fixture
def calls(monkeypatch):
    """Counts the chunked forwards (so that a test knows the route it checks was taken)."""
    seen = {"chunked": 0}
    original = chunked.log_partition

    def counting(chain, lengths):
        seen["chunked"] += 1
        return original(chain, lengths)

    monkeypatch.setattr(chunked, "log_partition", counting)
    return seen


@settings(max_examples=150, deadline=None, derandomize=True)
@given(spec=chain_specs("dense", max_n=3, max_t=8, min_b=2, max_b=4, forbid=True), L=st.integers(1, 3))
def test_matches_brute_force_with_short_chunks(spec, L):
    """Ragged lengths at B > 1, forbidden transitions, chunks of 1 to 3 positions: log Z to 1e-9."""
    assume(spec.args["transition"].dim() == 2)  # the chunks take a shared transition only
    chain = DenseChain(**spec.args)
    lengths = spec.lengths if spec.lengths is not None else torch.full((spec.batch,), spec.T)
    with mock.patch.multiple(chunked, CHUNK=L, MIN_LENGTH=1, MAX_WORK=10**6):
        got = LinearChain(chain, lengths=lengths).log_partition
    expected = torch.tensor([bf.log_partition(spec, b) for b in range(spec.batch)], dtype=got.dtype)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_the_route_is_taken_where_it_pays_and_not_with_gradients(calls):
    """B = 1, T = 1,000, N = 4 without a gradient: the chunks; with one, or at T = 100: the plain forward."""
    g = torch.Generator().manual_seed(0)
    unary, transition = torch.randn(1, 1000, 4, generator=g), torch.randn(4, 4, generator=g).log_softmax(-1)
    assert chunked.pays(1, 1000, 4) and not chunked.pays(1, 100, 4) and not chunked.pays(8, 1000, 8)
    with mock.patch.object(chunked, "MIN_LENGTH", 10**9):
        plain = LinearChain(DenseChain(unary.double(), transition.double())).log_partition
    assert calls["chunked"] == 0
    got = LinearChain(DenseChain(unary, transition)).log_partition
    assert calls["chunked"] == 1
    torch.testing.assert_close(got.double(), plain, rtol=1e-6, atol=0)
    assert torch.isfinite(LinearChain(DenseChain(unary[:, :100], transition)).log_partition).all()
    leaf = unary.clone().requires_grad_(True)
    LinearChain(DenseChain(leaf, transition)).log_partition.sum().backward()
    assert calls["chunked"] == 1 and torch.isfinite(leaf.grad).all()


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("emission", ["gaussian", "close", "unaligned"])
def test_float32_on_realistic_chains(topology, emission, calls):
    """Gaussian log-likelihoods hundreds of nats apart (or close together, or not following the
    topology), left-to-right / banded / peaked / partly forbidden transitions with entries down to
    -1e4 and -inf, fixed or masked start states, ragged lengths: float32 against float64 within the
    budget of the other float32 tests (twice a plain float32 DP's error plus a floor)."""
    for seed, (B, T, N) in enumerate([(2, 1500, 4), (1, 3000, 8), (2, 700, 2), (8, 600, 3)]):
        init = "fixed" if seed % 2 else "masked"
        case = chain_case(seed, B=B, T=T, N=N, topology=topology, emission=emission, init=init)
        before = calls["chunked"]
        check_chain(case, "native", "log_partition")
        assert calls["chunked"] > before, f"{case}: the chunks were not used"


def test_a_chunk_without_a_path_from_some_state_takes_the_plain_forward():
    """State 2 is never entered and cannot be left, and its unary is -inf somewhere in every chunk:
    the chunks' rows from state 2 have no path, the chain has one. log Z is the plain forward's, and
    the marginals (``chunked_marginals``, which gives up too) are the gradient of its log Z."""
    T, N = 1000, 3
    g = torch.Generator().manual_seed(1)
    unary = torch.randn(2, T, N, generator=g, dtype=torch.float64)
    unary[:, 5::16, 2] = float("-inf")
    transition = torch.tensor([[-0.5, -1.0, float("-inf")], [-1.0, -0.5, float("-inf")],
                               [float("-inf"), float("-inf"), 0.0]], dtype=torch.float64)
    init = torch.tensor([0.0, -1.0, float("-inf")], dtype=torch.float64)
    lengths = torch.tensor([T, 777])
    assert chunked.pays(2, T, N)
    with mock.patch.object(block_scaled, "log_partition", wraps=block_scaled.log_partition) as plain_forward:
        got = LinearChain(DenseChain(unary, transition, init), lengths=lengths).log_partition
    assert plain_forward.call_count == 1
    with mock.patch.object(chunked, "MIN_LENGTH", 10**9):
        plain = LinearChain(DenseChain(unary, transition, init), lengths=lengths)
        plain_log_z, plain_marginals = plain.log_partition, plain.marginals
    torch.testing.assert_close(got, plain_log_z, rtol=1e-12, atol=1e-9)
    answers, original = [], chunked_marginals.marginals

    def recorded(*args):
        answers.append(original(*args))
        return answers[-1]

    with mock.patch.object(chunked_marginals, "marginals", recorded):
        marginals = LinearChain(DenseChain(unary, transition, init), lengths=lengths).marginals
    assert answers == [None]
    torch.testing.assert_close(marginals, plain_marginals, rtol=0, atol=1e-12)


def test_a_sequence_without_a_path_raises_naming_it():
    """The plain forward's error, naming the batch element."""
    T, N = 1000, 3
    unary = torch.zeros(3, T, N)
    unary[1, 600] = float("-inf")  # no state at position 600 of sequence 1
    chain = DenseChain(unary, torch.zeros(N, N))
    assert chunked.pays(3, T, N)
    with pytest.raises(ZeroProbability, match=r"batch element\(s\) \[1\]"):
        _ = LinearChain(chain).log_partition
