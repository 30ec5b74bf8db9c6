"""The k best segmentations (``SemiMarkovChain.topk``) against enumeration of every segmentation: every
container (the factorized search for dense and low-rank, the per-segment one for rank-space and edge),
ragged lengths, forbidden transitions and durations, fewer segmentations than k, k = 1 as the Viterbi,
differentiable scores, and a long float32 HSMM (the search runs in float64)."""

from __future__ import annotations

import math
import os

import pytest
import sm_bruteforce as bf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sm_strategies import build_dist, sm_specs

from zoo.inference import DenseSemiMarkov, SemiMarkovChain

KINDS = ("dense", "lowrank", "rankspace", "edge")
FAST = settings(max_examples=int(os.environ.get("ZOO_TEST_EXAMPLES", 8)), deadline=None)


@pytest.mark.parametrize("kind", KINDS)
@FAST
@given(data=st.data(), k=st.integers(1, 6))
def test_the_k_best_segmentations_match_enumeration(kind, data, k):
    spec = data.draw(sm_specs(kind, max_t=5))
    scores, segmentations = build_dist(spec).topk(k)
    assert scores.shape == (k, spec.batch) and segmentations.shape == (k, spec.batch, spec.T)
    for b in range(spec.batch):
        ranked = sorted((s for s in bf.all_structures(spec, b).values() if s > -math.inf), reverse=True)[:k]
        expected = ranked + [-math.inf] * (k - len(ranked))
        expected = torch.tensor(expected, dtype=scores.dtype)
        torch.testing.assert_close(scores[:, b], expected, rtol=1e-9, atol=1e-9)
        seen = set()
        for r in range(k):
            row = segmentations[r, b]
            if r >= len(ranked):  # fewer segmentations of non-zero probability than k
                assert (row == -1).all()
                continue
            segments = bf.from_tensor_format(row, spec.length(b))
            assert bf.score_of(spec, b, segments) == pytest.approx(ranked[r], rel=1e-9, abs=1e-9)
            assert (row[spec.length(b):] == -1).all() and segments not in seen
            seen.add(segments)


def test_k_one_is_the_viterbi_and_the_scores_are_differentiable():
    g = torch.Generator().manual_seed(0)
    unary = torch.randn(2, 7, 3, generator=g, dtype=torch.float64).requires_grad_()
    transition = torch.randn(3, 3, generator=g, dtype=torch.float64).fill_diagonal_(-math.inf)
    duration = torch.randn(3, 4, generator=g, dtype=torch.float64)
    dist = SemiMarkovChain(DenseSemiMarkov(unary, transition, duration), torch.tensor([7, 5]))
    scores, segmentations = dist.topk(3)
    assert torch.equal(segmentations[0], dist.argmax)
    torch.testing.assert_close(scores[0], dist.max_score)
    (grad,) = torch.autograd.grad(scores[1].sum(), unary)  # the runner-up's indicator of frames and states
    covered = torch.zeros_like(unary)
    for b in range(2):
        segments = bf.from_tensor_format(segmentations[1, b], int(dist.lengths[b]))
        for s, d, z in segments:
            covered[b, s : s + d, z] = 1.0
    torch.testing.assert_close(grad, covered)


def test_a_long_float32_hsmm_ranks_as_float64_does():
    """T = 1,500 frames of 50-dimensional Gaussian scores (|score| ~ 1e5): the search runs in float64, so
    float32 potentials give the float64 ranking (float32 sums round 0.01 nats away there)."""
    g = torch.Generator().manual_seed(1)
    N, D, T = 4, 16, 1500
    means = torch.randn(N, 50, generator=g, dtype=torch.float64)
    states = torch.randint(0, N, (1, T), generator=g)
    frames = means[states] + 2 * torch.randn(1, T, 50, generator=g, dtype=torch.float64)
    unary = -0.5 * ((frames.unsqueeze(2) - means) ** 2).sum(-1)
    transition = torch.randn(N, N, generator=g, dtype=torch.float64).log_softmax(-1).fill_diagonal_(-math.inf)
    duration = torch.randn(N, D, generator=g, dtype=torch.float64).log_softmax(-1)
    best = {}
    for dtype in (torch.float32, torch.float64):
        chain = DenseSemiMarkov(unary.to(dtype), transition.to(dtype), duration.to(dtype))
        best[dtype] = SemiMarkovChain(chain).topk(5)
    assert torch.equal(best[torch.float32].segmentations, best[torch.float64].segmentations)


def test_bad_k():
    dist = SemiMarkovChain(DenseSemiMarkov(torch.zeros(1, 3, 2), torch.zeros(2, 2), torch.zeros(2, 2)))
    for k in (0, -1, 1.5, True):
        with pytest.raises((ValueError, TypeError), match="k must be"):
            dist.topk(k)
