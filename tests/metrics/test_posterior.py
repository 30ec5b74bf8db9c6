"""PosteriorUsage: the collapse diagnostics of a state posterior, by hand and merged across parts."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.metrics import PosteriorUsage


def test_by_hand_and_merging():
    marginals = torch.tensor(
        [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], [[0.0, 0.0, 1.0], [0.2, 0.3, 0.5], [9, 9, 9]]]
    )  # the second sequence has 2 tokens: its third row is padding
    best = torch.tensor([[0, 1, 0], [2, 2, -1]])
    lengths = torch.tensor([3, 2])
    usage = PosteriorUsage(3)
    usage.update(marginals, best, lengths)
    out = usage.compute()
    tokens = torch.cat([marginals[0], marginals[1, :2]]).double()
    mean = tokens.mean(0)
    kl = [sum(p * math.log(p / m) for p, m in zip(row.tolist(), mean.tolist()) if p > 0) for row in tokens]
    assert float(out["token_state_information"]) == pytest.approx(sum(kl) / len(kl))
    assert float(out["distinct_map_states"]) == pytest.approx((2 + 1) / 2)
    assert float(out["states_used"]) == 3
    part, other = PosteriorUsage(3), PosteriorUsage(3)
    part.update(marginals[:1], best[:1], lengths[:1])
    other.update(marginals[1:], best[1:], lengths[1:])
    part.merge_state(other)
    for name, value in part.compute().items():
        assert float(value) == pytest.approx(float(out[name]))


def test_a_posterior_that_ignores_the_sentence_holds_no_information():
    usage = PosteriorUsage(4)
    usage.update(torch.full((2, 5, 4), 0.25), torch.zeros(2, 5, dtype=torch.long), torch.tensor([5, 3]))
    out = usage.compute()
    assert float(out["token_state_information"]) == pytest.approx(0.0, abs=1e-12)
    assert float(out["distinct_map_states"]) == 1.0 and float(out["states_used"]) == 4


def test_errors():
    with pytest.raises(ValueError, match="num_states must be an int >= 1"):
        PosteriorUsage(0)
    with pytest.raises(ValueError, match="expected marginals B x T x 3"):
        PosteriorUsage(3).update(torch.zeros(1, 2, 4), torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]))
    assert math.isnan(float(PosteriorUsage(2).compute()["distinct_map_states"]))
