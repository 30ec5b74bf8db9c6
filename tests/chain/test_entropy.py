"""The dense entropy (the forward in the entropy semiring): its value and gradient against a
differentiable brute-force enumeration (float64).

Shared and per-position transitions, ragged lengths at B > 1, -inf transitions, states and initial
entries, and the randomized form (importance weights in the chain, kept out of the score). The
reference enumerates all N^L sequences of each element with torch, so autograd gives its gradient.
"""

from __future__ import annotations

import itertools
import os

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import DTYPE, chain_specs, tensors

from zoo.inference import DenseChain, LinearChain
from zoo.inference.chain.exact import forward
from zoo.inference.semiring import Entropy

EXAMPLES = settings(max_examples=int(os.environ.get("ZOO_TEST_EXAMPLES", 25)), deadline=None)


def enumerated_entropy(unary, transition, init, lengths, log_weights=None):
    """(B,) log Z_w - E_w[score] by enumeration; p_w includes ``log_weights``, the score does not."""
    B, T, N = unary.shape
    out = []
    for b in range(B):
        L = int(lengths[b])
        z = torch.tensor(list(itertools.product(range(N), repeat=L)))  # S x L
        pos = torch.arange(L)
        score = init[b, z[:, 0]] + unary[b, pos, z].sum(-1)
        if L > 1:
            prev, nxt = z[:, :-1], z[:, 1:]
            shared = transition.dim() == 2
            trans = transition[prev, nxt] if shared else transition[b, pos[:-1], prev, nxt]
            score = score + trans.sum(-1)
        weighted = score if log_weights is None else score + log_weights[b, pos, z].sum(-1)
        keep = torch.isfinite(weighted)
        log_z = weighted[keep].logsumexp(0)
        p = (weighted[keep] - log_z).exp()
        out.append(log_z - (p * score[keep]).sum())
    return torch.stack(out)


def masks(shape):
    return tensors(shape, st.booleans()).map(lambda x: x.bool())


@st.composite
def dense_chains(draw):
    """(unary, transition, init (B x N), lengths) as leaves requiring grad; -inf entries drawn.

    State 0 is never forbidden (and transitions never on the diagonal), so 0, 0, ..., 0 keeps
    every chain's mass positive.
    """
    spec = draw(chain_specs("dense", forbid=draw(st.booleans())))
    B, T, N = spec.batch, spec.T, spec.N
    unary, transition = spec.args["unary"], spec.args["transition"]
    init = spec.args["init"]
    init = torch.zeros(B, N, dtype=DTYPE) if init is None else init.expand(B, N).clone()
    if draw(st.booleans()):
        state = torch.arange(N) > 0
        unary = unary.masked_fill(draw(masks((B, T, N))) & state, float("-inf"))
        init = init.masked_fill(draw(masks((B, N))) & state, float("-inf"))
    lengths = spec.lengths if spec.lengths is not None else torch.full((B,), T)
    leaves = [x.detach().clone().requires_grad_(True) for x in (unary, transition, init)]
    return (*leaves, lengths)


def assert_value_and_gradient(actual, expected, leaves, seed):
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-10)
    coefficients = torch.randn(actual.shape, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    got, want = (
        torch.autograd.grad((h * coefficients).sum(), leaves, allow_unused=True, materialize_grads=True)
        for h in (actual, expected)
    )
    for name, g, w in zip(("unary", "transition", "init", "log_weights"), got, want):
        assert torch.isfinite(g).all(), f"d H / d {name} is not finite: {g}"
        torch.testing.assert_close(g, w, rtol=1e-8, atol=1e-10, msg=f"d H / d {name} differs")


@EXAMPLES
@given(chain=dense_chains(), backend=st.sampled_from([None, "exact"]), seed=st.integers(0, 100))
def test_entropy_and_its_gradient(chain, backend, seed):
    unary, transition, init, lengths = chain
    entropy = LinearChain(DenseChain(unary, transition, init), lengths=lengths, backend=backend).entropy
    expected = enumerated_entropy(unary, transition, init, lengths)
    assert_value_and_gradient(entropy, expected, [unary, transition, init], seed)


@EXAMPLES
@given(chain=dense_chains(), data=st.data(), seed=st.integers(0, 100))
def test_randomized_entropy_and_its_gradient(chain, data, seed):
    """With log_weights folded into the unary: log Z of the weighted chain minus its expected score."""
    unary, transition, init, lengths = chain
    log_weights = data.draw(tensors(tuple(unary.shape))).requires_grad_(True)
    entropy = forward(DenseChain(unary + log_weights, transition, init), lengths, Entropy, log_weights)[0]
    expected = enumerated_entropy(unary, transition, init, lengths, log_weights)
    assert_value_and_gradient(entropy, expected, [unary, transition, init, log_weights], seed)


def test_no_graph_without_grad():
    chain = DenseChain(torch.randn(2, 3, 4), torch.randn(4, 4))
    assert not forward(chain, torch.tensor([3, 1]), Entropy)[0].requires_grad
