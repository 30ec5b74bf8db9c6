"""What lies past a semi-Markov chain's length never matters: every operation gives the same answer,
for every container and backend, when the frames or segments there are -inf or thousands of nats."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from padding import assert_unchanged, padded_args, ragged_lengths
from sm_bruteforce import SMSpec
from sm_strategies import ALL_COMBOS, build_dist, combo_id, sm_specs

# per kind: (argument, the axis-1 offset of its first entry past a length L: L + offset)
PADDED = {
    "dense": [("unary", 0)],
    "lowrank": [("unary", 0)],
    "rankspace": [("emission", 0)],
    "edge": [("edge", -1)],  # edge[b, s-1]: the segments that start at frame s >= L
}


def answers(spec: SMSpec, backend) -> dict[str, torch.Tensor]:
    dist = build_dist(spec, backend)
    best = dist.argmax
    return {
        "log_partition": dist.log_partition,
        "segment_marginals": dist.segment_marginals,
        "marginals": dist.marginals,
        "entropy": dist.entropy,
        "argmax": best,
        "max_score": dist.max_score,
        "log_prob": dist.log_prob(best),
        "sample": dist.sample(3, generator=torch.Generator().manual_seed(0)),
        "rsample": dist.rsample(0.5, generator=torch.Generator().manual_seed(0)),
    }


@pytest.mark.parametrize("combo", ALL_COMBOS, ids=combo_id)
@pytest.mark.parametrize("fill", ["-inf", "noise"])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_padding_never_matters(combo, fill, data):
    kind, backend = combo
    spec = data.draw(sm_specs(kind, min_t=2))
    lengths = ragged_lengths(spec)
    spec = SMSpec(spec.kind, spec.args, lengths)
    args = padded_args(spec.args, lengths, PADDED[kind], fill, data.draw(st.integers(0, 2**31 - 1)))
    with torch.no_grad():
        assert_unchanged(answers(SMSpec(kind, args, lengths), backend), answers(spec, backend))


def test_segmentation_entries_past_the_length_are_ignored():
    """log_prob reads a segmentation up to each length (documented): a padded batch may hold any state
    past it, as in chains."""
    from zoo.inference import DenseSemiMarkov, SemiMarkovChain

    g = torch.Generator().manual_seed(0)
    dist = SemiMarkovChain(
        DenseSemiMarkov(torch.randn(2, 6, 3, generator=g), torch.randn(3, 3, generator=g),
                        torch.randn(3, 4, generator=g)),
        torch.tensor([6, 3]),
    )  # fmt: skip
    best = dist.argmax
    noisy = best.clone()
    noisy[1, 3:] = torch.tensor([2, 0, 1])
    assert torch.equal(dist.log_prob(noisy), dist.log_prob(best))


@pytest.mark.parametrize("combo", ALL_COMBOS, ids=combo_id)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_frame_marginals_are_exactly_zero_past_each_length(combo, data):
    """Found by an audit: the frame marginals' difference array and cumsum left about 1e-16, of either
    sign, past each length (documented: zero), so ``marginals.log()`` gave NaN there."""
    kind, backend = combo
    spec = data.draw(sm_specs(kind, min_t=2))
    spec = SMSpec(spec.kind, spec.args, ragged_lengths(spec))
    with torch.no_grad():
        marginals = build_dist(spec, backend).marginals
    assert bool((marginals >= 0).all()), float(marginals.min())
    past = torch.arange(marginals.shape[1]) >= spec.lengths.view(-1, 1)
    assert bool((marginals[past] == 0).all()), float(marginals[past].abs().max())


def test_frame_marginals_are_exactly_zero_where_a_unary_forbids_the_state():
    """The audit's case (float64): state 2 forbidden at frame 4 of sequence 0 got -2.8e-17."""
    from zoo.inference import DenseSemiMarkov, SemiMarkovChain

    g = torch.Generator().manual_seed(0)
    unary = torch.randn(3, 7, 4, generator=g, dtype=torch.float64)
    unary[0, 4, 2] = -float("inf")
    transition, duration = (torch.randn(4, k, generator=g, dtype=torch.float64) for k in (4, 3))
    potentials = DenseSemiMarkov(unary, transition, duration)
    marginals = SemiMarkovChain(potentials, torch.tensor([7, 3, 1])).marginals
    assert float(marginals[0, 4, 2]) == 0.0
    assert bool((marginals >= 0).all())
    assert torch.allclose(marginals.sum(-1)[0], torch.ones(7, dtype=torch.float64))
