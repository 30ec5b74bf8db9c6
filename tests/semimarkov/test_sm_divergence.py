"""Cross-entropy and KL divergence between two semi-Markov chains (``SemiMarkovChain.cross_entropy`` /
``kl``) against enumeration of every segmentation: every container on either side (the factorized path
for dense and low-rank pairs, the per-segment path otherwise), every backend (randomized: the exact
distribution), ragged lengths, forbidden transitions and durations (+inf), and gradients by gradcheck."""

from __future__ import annotations

import itertools
import math
import os

import pytest
import sm_bruteforce as bf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sm_strategies import DTYPE, build_dist, sm_specs

from zoo.inference import DenseSemiMarkov, RankSpaceSemiMarkov, RDPOptions, SemiMarkovChain

KINDS = ("dense", "lowrank", "rankspace", "edge")
FAST = settings(max_examples=int(os.environ.get("ZOO_TEST_EXAMPLES", 8)), deadline=None)


def brute_cross_entropy(p_spec, q_spec, b: int) -> float:
    """-sum_y p(y) log q(y) over every segmentation and labelling of sequence b."""
    log_z = bf.log_partition(q_spec, b)
    total = 0.0
    for segments, prob in bf.distribution(p_spec, b).items():
        if prob > 0:
            score = bf.score_of(q_spec, b, segments)
            if score == -math.inf:
                return math.inf
            total += prob * (log_z - score)
    return total


@st.composite
def spec_pairs(draw, p_kind, q_kind):
    """Two specs of the same B, T, N, D and lengths."""
    sizes = {"n": (1, 3), "t": (1, 4), "d": (1, 3), "b": (2, 3)}
    sizes = {name: draw(st.integers(*bounds)) for name, bounds in sizes.items()}
    fixed = {f"{side}_{name}": size for name, size in sizes.items() for side in ("min", "max")}
    p, q = draw(sm_specs(p_kind, **fixed)), draw(sm_specs(q_kind, **fixed))
    q.lengths = p.lengths
    return p, q


@pytest.mark.parametrize("p_kind, q_kind", list(itertools.product(KINDS, KINDS)))
@FAST
@given(data=st.data())
def test_cross_entropy_and_kl_match_enumeration(p_kind, q_kind, data):
    p_spec, q_spec = data.draw(spec_pairs(p_kind, q_kind))
    p, q = build_dist(p_spec), build_dist(q_spec)
    expected = [brute_cross_entropy(p_spec, q_spec, b) for b in range(p_spec.batch)]
    expected = torch.tensor(expected, dtype=DTYPE)
    torch.testing.assert_close(p.cross_entropy(q), expected, rtol=1e-9, atol=1e-10)
    entropy = torch.tensor([bf.entropy(p_spec, b) for b in range(p_spec.batch)], dtype=DTYPE)
    kl = p.kl(q)
    torch.testing.assert_close(kl, expected - entropy, rtol=1e-9, atol=1e-9)
    assert (kl[torch.isfinite(kl)] > -1e-9).all()


@pytest.mark.parametrize("p_kind", KINDS)
@FAST
@given(data=st.data())
def test_every_backend_gives_the_exact_divergence(p_kind, data):
    """Backends: exact, the container's own, randomized (its exact distribution, whatever it keeps)."""
    p_spec, q_spec = data.draw(spec_pairs(p_kind, "dense"))
    q = build_dist(q_spec)
    expected = build_dist(p_spec, "exact").kl(q)
    backends = {"exact", None} | ({"randomized"} if p_kind in ("dense", "lowrank") else set())
    proposal = torch.rand(p_spec.batch, p_spec.T, p_spec.N, dtype=DTYPE) + 0.1  # top-1 of an informative one
    top_one = RDPOptions(1, 0, proposal, torch.Generator().manual_seed(0))
    for backend in backends:
        options = top_one if backend == "randomized" else None
        p = build_dist(p_spec, backend, options)
        torch.testing.assert_close(p.kl(q), expected, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(p.kl(p), torch.zeros_like(expected), rtol=0, atol=1e-9)


def dense_pair(seed: int):
    g = torch.Generator().manual_seed(seed)
    B, T, N, D = 2, 5, 3, 3

    def draw(*shape):
        return torch.randn(*shape, generator=g, dtype=DTYPE)

    return [(draw(B, T, N), draw(N, N), draw(N, D), draw(N)) for _ in range(2)]


def test_forbidden_transitions_and_durations():
    """q forbidding a transition or a duration that p takes: +inf; one p never takes: finite."""
    p_parts, _ = dense_pair(1)
    lengths = torch.tensor([5, 1])
    p = SemiMarkovChain(DenseSemiMarkov(*p_parts), lengths)
    no_switch = p_parts[1].clone()
    no_switch[0, 1] = -math.inf
    q = SemiMarkovChain(DenseSemiMarkov(p_parts[0], no_switch, p_parts[2], p_parts[3]), lengths)
    assert p.cross_entropy(q).tolist()[0] == math.inf and math.isfinite(p.cross_entropy(q).tolist()[1])
    assert torch.isfinite(q.cross_entropy(p)).all()  # q takes nothing p forbids
    no_long = p_parts[2].clone()
    no_long[:, 2] = -math.inf  # duration 3 forbidden
    q = SemiMarkovChain(DenseSemiMarkov(p_parts[0], p_parts[1], no_long, p_parts[3]), lengths)
    assert p.kl(q).tolist()[0] == math.inf and torch.isfinite(q.kl(p)).all()


def test_gradients_by_gradcheck():
    """Both paths (factorized: dense against dense; per-segment: rank-space against dense), with respect
    to both chains' potentials, ragged lengths."""
    lengths = torch.tensor([5, 3])
    p_parts, q_parts = ([x.requires_grad_() for x in parts] for parts in dense_pair(2))

    def factorized(*parts):
        p, q = (SemiMarkovChain(DenseSemiMarkov(*xs), lengths) for xs in (parts[:4], parts[4:]))
        return p.cross_entropy(q) + 0.5 * p.kl(q)

    assert torch.autograd.gradcheck(factorized, (*p_parts, *q_parts))
    g = torch.Generator().manual_seed(3)
    start, U, V = (torch.rand(*s, generator=g, dtype=DTYPE) + 0.1 for s in ((3,), (3, 2), (3, 2)))
    emission = torch.randn(2, 5, 2, generator=g, dtype=DTYPE)
    duration = torch.randn(2, 3, generator=g, dtype=DTYPE)
    rank_space = [x.requires_grad_() for x in (U, V, emission)]

    def per_segment(U, V, emission, *q_parts):
        p = SemiMarkovChain(RankSpaceSemiMarkov(start, U, V, duration, emission), lengths)
        q = SemiMarkovChain(DenseSemiMarkov(*q_parts), lengths)
        return p.kl(q) + q.cross_entropy(p)

    assert torch.autograd.gradcheck(per_segment, (*rank_space, *q_parts))


def test_chains_over_other_segmentations_are_refused():
    p_parts, q_parts = dense_pair(4)
    p = SemiMarkovChain(DenseSemiMarkov(*p_parts), torch.tensor([5, 3]))
    with pytest.raises(ValueError, match=r"the same lengths, got \[5, 3\] and \[5, 5\]"):
        p.kl(SemiMarkovChain(DenseSemiMarkov(*q_parts)))
    unary, transition, duration, init = q_parts
    shorter = SemiMarkovChain(DenseSemiMarkov(unary, transition, duration[:, :2], init), torch.tensor([5, 3]))
    with pytest.raises(ValueError, match=r"the same B x T x D x N, got \(2, 5, 3, 3\) and \(2, 5, 2, 3\)"):
        p.cross_entropy(shorter)
    with pytest.raises(TypeError, match="expected another SemiMarkovChain"):
        p.kl(p.factors)
    with torch.inference_mode():  # under inference mode too
        q = SemiMarkovChain(DenseSemiMarkov(*q_parts), torch.tensor([5, 3]))
        assert torch.isfinite(p.kl(q)).all()
