"""``SemiMarkovChain.rank_argmax``: the max-product DP over rank nodes against brute-force enumeration of
every segmentation and rank labelling (states summed out), with ragged lengths at batch size > 1."""

from __future__ import annotations

import itertools
import math
import os

import pytest
import sm_bruteforce as bf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sm_strategies import build_dist, sm_specs

from zoo.inference import DenseSemiMarkov, SemiMarkovChain

FAST = settings(max_examples=int(os.environ.get("ZOO_TEST_EXAMPLES", 8)), deadline=None)


def rank_labelling_scores(spec, b: int) -> dict:
    """{((s, d, r), ...): log pi[r_1] W_{r_1} prod H[r_{k-1}, r_k] W_{r_k} f[r_m]} from the raw
    arguments, in Python floats: pi = start U, H = V^T U, f = 1^T V (docs/semimarkov-rank-space.md)."""
    a = spec.args
    U, V = a["U"].double().tolist(), a["V"].double().tolist()
    start = a["start"].double()
    start = (start[b] if start.dim() == 2 else start).tolist()
    dur = a["duration"].double()
    dur = (dur[b] if dur.dim() == 3 else dur).tolist()
    em = a["emission"][b].double().tolist()
    N, R = len(U), len(U[0])
    pi = [sum(start[z] * U[z][r] for z in range(N)) for r in range(R)]
    H = [[sum(V[z][r] * U[z][q] for z in range(N)) for q in range(R)] for r in range(R)]
    f = [sum(V[z][r] for z in range(N)) for r in range(R)]

    def log(x):
        return math.log(x) if x > 0 else float("-inf")

    out = {}
    for durs in bf.compositions(spec.length(b), spec.D):
        starts = [sum(durs[:k]) for k in range(len(durs))]
        for ranks in itertools.product(range(R), repeat=len(durs)):
            total = log(pi[ranks[0]]) + log(f[ranks[-1]])
            for k, (s, d, r) in enumerate(zip(starts, durs, ranks)):
                total += dur[r][d - 1] + sum(em[t][r] for t in range(s, s + d))
                if k:
                    total += log(H[ranks[k - 1]][r])
            out[tuple(zip(starts, durs, ranks))] = total
    return out


@FAST
@given(data=st.data())
def test_rank_argmax_is_the_best_rank_labelling(data):
    spec = data.draw(sm_specs("rankspace", max_t=5))
    dist = build_dist(spec, "rank-space")
    seg, score = dist.rank_argmax, dist.rank_max_score
    assert seg.shape == (spec.batch, spec.T) and score.shape == (spec.batch,)
    for b in range(spec.batch):
        scores = rank_labelling_scores(spec, b)
        best = max(scores.values())
        assert float(score[b]) == pytest.approx(best, rel=1e-9, abs=1e-9)
        L = spec.length(b)
        found = bf.from_tensor_format(seg[b].tolist(), L)
        assert scores[found] == pytest.approx(best, rel=1e-9, abs=1e-9)
        assert (seg[b, L:] == -1).all()


def test_rank_argmax_needs_the_rank_space_backend():
    f = DenseSemiMarkov(torch.zeros(1, 3, 2), torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(TypeError, match="needs backend 'rank-space'"):
        SemiMarkovChain(f).rank_argmax  # noqa: B018
