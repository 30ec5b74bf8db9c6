"""PosteriorUsage: the collapse diagnostics of a state posterior, by hand and merged across parts."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.metrics import PosteriorUsage


def kl_to_mean(rows: torch.Tensor, mean: torch.Tensor) -> list[float]:
    return [sum(p * math.log(p / m) for p, m in zip(r.tolist(), mean.tolist()) if p > 0) for r in rows]


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
    kl = kl_to_mean(tokens, tokens.mean(0))
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
    assert float(out["sentence_state_information"]) == pytest.approx(0.0, abs=1e-12)
    assert float(out["distinct_map_states"]) == 1.0 and float(out["states_used"]) == 4


def test_sentence_information_by_hand_is_the_kl_to_the_mean_at_the_tokens_position():
    """I(z_t; y | t): each token's KL to the mean marginal of its own position (ragged lengths: the third
    position has one sentence, whose token contributes 0), averaged over tokens; positions from
    max_positions - 1 on share one mean, so max_positions=1 is the position-blind token information."""
    g = torch.Generator().manual_seed(0)
    marginals = torch.rand(3, 4, 5, generator=g).softmax(-1)
    lengths = torch.tensor([4, 2, 3])
    best = marginals.argmax(-1)
    usage, blind = PosteriorUsage(5), PosteriorUsage(5, max_positions=1)
    for metric in (usage, blind):
        metric.update(marginals, best, lengths)
    kls = []
    for t in range(4):
        rows = marginals[lengths > t, t].double()
        kls += kl_to_mean(rows, rows.mean(0))
    out = usage.compute()
    assert float(out["sentence_state_information"]) == pytest.approx(sum(kls) / len(kls))
    assert float(out["sentence_state_information"]) < float(out["token_state_information"])
    assert float(blind.compute()["sentence_state_information"]) == pytest.approx(
        float(out["token_state_information"])
    )
    part, other = PosteriorUsage(5), PosteriorUsage(5)  # positions merge across processes
    part.update(marginals[:1], best[:1], lengths[:1])
    other.update(marginals[1:], best[1:], lengths[1:])
    part.merge_state(other)
    assert float(part.compute()["sentence_state_information"]) == pytest.approx(sum(kls) / len(kls))


def test_a_posterior_that_reads_only_the_position_holds_no_sentence_information():
    """Every sentence's t-th token in state t: the token information is that of the position (log 4 for
    four equally common positions), and nothing of it is about the sentence."""
    marginals = torch.eye(4).expand(6, 4, 4)
    usage = PosteriorUsage(4)
    usage.update(marginals, torch.arange(4).expand(6, 4), torch.full((6,), 4))
    out = usage.compute()
    assert float(out["token_state_information"]) == pytest.approx(math.log(4))
    assert float(out["sentence_state_information"]) == pytest.approx(0.0, abs=1e-12)
    assert float(out["distinct_map_states"]) == 4


def test_a_state_per_sentence_is_all_sentence_information():
    """Sentence b in state b at every position: log 3 nats about the sentence, none about the position."""
    marginals = torch.eye(3).unsqueeze(1).expand(3, 5, 3)
    usage = PosteriorUsage(3)
    usage.update(marginals, torch.arange(3).unsqueeze(1).expand(3, 5), torch.full((3,), 5))
    out = usage.compute()
    assert float(out["sentence_state_information"]) == pytest.approx(math.log(3))
    assert float(out["token_state_information"]) == pytest.approx(math.log(3))


def test_errors():
    with pytest.raises(ValueError, match="num_states must be an int >= 1"):
        PosteriorUsage(0)
    with pytest.raises(ValueError, match="max_positions must be an int >= 1, got 0"):
        PosteriorUsage(3, max_positions=0)
    with pytest.raises(ValueError, match="expected marginals B x T x 3"):
        PosteriorUsage(3).update(torch.zeros(1, 2, 4), torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"expected marginals B x T x 3.*got \(2, 3\)"):  # one sentence, no B
        PosteriorUsage(3).update(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), torch.tensor([2]))
    assert all(math.isnan(float(v)) for v in PosteriorUsage(2).compute().values())
