"""``LinearChain.topk(k)``: the k best state sequences against enumeration of every sequence (scores
in order, the paths of distinct scores, ragged lengths, forbidden transitions and fixed start states,
fewer sequences than k), their scores' gradient (the paths' indicators), k = 1 as Viterbi."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from zoo.inference import DenseChain, LinearChain, LowRankChain

F64 = torch.float64


def ranked(chain, lengths, b: int) -> list[tuple[float, tuple]]:
    """Every sequence of chain b with a finite score, best first, by enumeration of the dense form."""
    dense = chain.dense()
    unary, transition, init = dense.unary[b], dense.per_position()[b], dense.init[b]
    length = int(lengths[b])
    out = []
    for z in itertools.product(range(unary.shape[-1]), repeat=length):
        score = float(init[z[0]] + sum(unary[t, z[t]] for t in range(length))
                      + sum(transition[t - 1, z[t - 1], z[t]] for t in range(1, length)))  # fmt: skip
        if score > -math.inf:
            out.append((score, z))
    return sorted(out, key=lambda x: -x[0])


def check_against_enumeration(chain, lengths, k):
    scores, states = LinearChain(chain, lengths).topk(k)
    B, T = chain.unary.shape[:2]
    assert scores.shape == (k, B) and states.shape == (k, B, T)
    for b in range(B):
        best = ranked(chain, lengths, b)
        length = int(lengths[b])
        for r in range(k):
            if r >= len(best):  # fewer sequences than k
                assert scores[r, b] == -math.inf and (states[r, b] == -1).all()
                continue
            assert math.isclose(float(scores[r, b]), best[r][0], rel_tol=1e-9, abs_tol=1e-9), (b, r)
            path = tuple(states[r, b, :length].tolist())
            assert (states[r, b, length:] == -1).all()
            tied = [z for s, z in best if math.isclose(s, best[r][0], rel_tol=1e-9, abs_tol=1e-9)]
            assert path in tied, (b, r, path)  # the path scores what it is said to
        found = [tuple(states[r, b, :length].tolist()) for r in range(min(k, len(best)))]
        assert len(set(found)) == len(found), "a path listed twice"


@pytest.mark.parametrize("seed", range(6))
def test_k_best_paths_match_enumeration(seed):
    g = torch.Generator().manual_seed(seed)
    B, T, N = 3, 4, 3
    unary = torch.randn(B, T, N, generator=g, dtype=F64)
    lengths = torch.tensor([4, 1, 3])
    shared = torch.randn(N, N, generator=g, dtype=F64)
    shared[0, 1] = shared[2, 2] = -math.inf  # forbidden transitions
    init = torch.tensor([0.0, -math.inf, 0.5], dtype=F64)  # state 1 never starts
    chains = [
        DenseChain(unary, shared, init),
        DenseChain(unary, torch.randn(B, T - 1, N, N, generator=g, dtype=F64)),
        LowRankChain(unary, *torch.rand(2, N, 2, generator=g, dtype=F64)),
    ]
    for chain, k in itertools.product(chains, (1, 5, 40)):
        check_against_enumeration(chain, lengths, k)


def test_fewer_sequences_than_k():
    """Two states, two positions, one transition forbidden: three sequences; ranks 4 and 5 are empty."""
    transition = torch.tensor([[0.0, -math.inf], [0.0, 0.0]], dtype=F64)
    chain = DenseChain(torch.randn(1, 2, 2, dtype=F64), transition)
    check_against_enumeration(chain, torch.tensor([2]), 5)


def test_one_best_is_viterbi_and_the_scores_gradient_is_the_paths_indicator():
    g = torch.Generator().manual_seed(9)
    unary = torch.randn(2, 5, 4, generator=g, dtype=F64, requires_grad=True)
    transition = torch.randn(4, 4, generator=g, dtype=F64, requires_grad=True)
    lengths = torch.tensor([5, 3])
    dist = LinearChain(DenseChain(unary, transition), lengths)
    scores, states = dist.topk(3)
    assert torch.equal(states[0], dist.argmax)
    torch.testing.assert_close(scores[0], dist.max_score)
    (grad,) = torch.autograd.grad(scores[2].sum(), unary)
    indicator = torch.zeros_like(unary)
    for b in range(2):
        for t in range(int(lengths[b])):
            indicator[b, t, states[2, b, t]] = 1.0
    torch.testing.assert_close(grad, indicator)
    with torch.inference_mode():
        torch.testing.assert_close(LinearChain(DenseChain(unary, transition), lengths).topk(3).scores, scores)


@pytest.mark.parametrize("k", [0, -1, True, 2.0])
def test_k_must_be_a_positive_int(k):
    dist = LinearChain(DenseChain(torch.zeros(1, 2, 2), torch.zeros(2, 2)))
    with pytest.raises(ValueError, match="k must be a positive int"):
        dist.topk(k)
