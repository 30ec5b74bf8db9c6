"""The ``CRF`` layer: brute-force enumeration, pytorch-crf's answers, constraints, dtypes, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.inference import CRF, LinearChain, transition_constraints

torchcrf = pytest.importorskip("torchcrf")


def _brute(crf: CRF, emissions: torch.Tensor, length: int):
    """Every tag sequence of one B-major sequence (T x N emissions) with its score, in float64."""
    start, end, trans = (
        p.detach().double() for p in (crf.start_transitions, crf.end_transitions, crf.transitions)
    )
    start = start.masked_fill(~crf.allowed_start, -math.inf)
    end = end.masked_fill(~crf.allowed_end, -math.inf)
    trans = trans.masked_fill(~crf.allowed_transitions, -math.inf)
    e = emissions.detach().double()
    scores = {}
    for tags in itertools.product(range(crf.num_tags), repeat=length):
        score = start[tags[0]] + end[tags[-1]] + sum(e[t, y] for t, y in enumerate(tags))
        score = score + sum(trans[a, b] for a, b in zip(tags, tags[1:]))
        scores[tags] = float(score)
    return scores


def _log_z(scores: dict) -> float:
    return float(torch.logsumexp(torch.tensor(list(scores.values()), dtype=torch.float64), 0))


@st.composite
def _cases(draw):
    N, T, B = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 3))
    lengths = [draw(st.integers(1, T)) for _ in range(B)]
    return N, T, lengths, draw(st.booleans()), draw(st.integers(0, 2**16))


@settings(max_examples=40, deadline=None)
@given(_cases())
def test_against_enumeration(case):
    """log-likelihood, Viterbi and marginals of ragged batches in both layouts equal enumeration."""
    N, T, lengths, batch_first, seed = case
    g = torch.Generator().manual_seed(seed)
    crf = CRF(N, batch_first=batch_first).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 2)
    B = len(lengths)
    emissions = torch.randn(B, T, N, generator=g, dtype=torch.float64) * 3
    mask = torch.arange(T) < torch.tensor(lengths).unsqueeze(-1)
    tags = torch.randint(N, (B, T), generator=g).masked_fill(~mask, -100)  # the usual ignore index
    layout = (lambda x: x) if batch_first else (lambda x: x.transpose(0, 1))
    llh = crf(layout(emissions), layout(tags), layout(mask), reduction="none")
    best = crf.decode(layout(emissions), layout(mask))
    marginals = layout(crf.marginals(layout(emissions), layout(mask)))
    for b, length in enumerate(lengths):
        scores = _brute(crf, emissions[b], length)
        log_z = _log_z(scores)
        gold = tuple(tags[b, :length].tolist())
        assert llh[b].item() == pytest.approx(scores[gold] - log_z, abs=1e-9)
        assert tuple(best[b]) == max(scores, key=scores.get)
        expected = torch.zeros(T, N, dtype=torch.float64)
        for seq, score in scores.items():
            for t, y in enumerate(seq):
                expected[t, y] += math.exp(score - log_z)
        torch.testing.assert_close(marginals[b], expected, atol=1e-9, rtol=0)


@pytest.mark.filterwarnings("ignore:where received a uint8 condition:UserWarning")  # pytorch-crf's own
def test_reductions_and_gradients_equal_pytorch_crf():
    """Same parameters (pytorch-crf's state dict loads), same answers and gradients, every reduction."""
    torch.manual_seed(0)
    T, B, N = 9, 5, 6
    reference = torchcrf.CRF(N)
    ours = CRF(N)
    ours.load_state_dict(reference.state_dict())
    emissions = torch.randn(T, B, N) * 4
    tags = torch.randint(N, (T, B))
    mask = torch.arange(T).unsqueeze(-1) < torch.tensor([9, 1, 4, 7, 9])
    for reduction in ("none", "sum", "mean", "token_mean"):
        torch.testing.assert_close(
            ours(emissions, tags, mask, reduction), reference(emissions, tags, mask, reduction)
        )
    e1, e2 = emissions.clone().requires_grad_(), emissions.clone().requires_grad_()
    ours(e1, tags, mask).backward()
    reference(e2, tags, mask).backward()
    torch.testing.assert_close(e1.grad, e2.grad, atol=1e-5, rtol=1e-5)
    for name, p in ours.named_parameters():
        torch.testing.assert_close(
            p.grad, dict(reference.named_parameters())[name].grad, atol=1e-5, rtol=1e-5
        )
    assert ours.decode(emissions, mask) == reference.decode(emissions, mask)
    assert ours.decode(emissions) == reference.decode(emissions)
    torch.testing.assert_close(ours(emissions, tags), reference(emissions, tags))


def test_long_sequences_with_far_apart_emissions_in_float32():
    """float32 on a long batch with emissions hundreds of nats apart: the float64 answer, where
    pytorch-crf's float32 log-sum-exp agrees too (both are log-space-accurate)."""
    torch.manual_seed(1)
    T, B, N = 600, 4, 8
    crf = CRF(N, batch_first=True)
    emissions = torch.randn(B, T, N) * 200
    tags = torch.randint(N, (B, T))
    mask = torch.arange(T) < torch.tensor([600, 350, 1, 599]).unsqueeze(-1)
    llh = crf(emissions, tags, mask, reduction="none")
    llh64 = crf.double()(emissions.double(), tags, mask, reduction="none")
    torch.testing.assert_close(llh.double(), llh64, rtol=2e-6, atol=1e-2)
    assert crf.float().decode(emissions, mask) == crf.double().decode(emissions.double(), mask)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_emissions_are_computed_in_float32(dtype):
    """Under autocast emissions come in float16 / bfloat16: the answer is float32's on the same values."""
    torch.manual_seed(2)
    crf = CRF(4, batch_first=True)
    emissions = (torch.randn(3, 50, 4) * 30).to(dtype)
    tags = torch.randint(4, (3, 50))
    llh = crf(emissions, tags, reduction="none")
    assert llh.dtype == torch.float32
    torch.testing.assert_close(llh, crf(emissions.float(), tags, reduction="none"))
    assert crf.decode(emissions) == crf.decode(emissions.float())


def test_constraints_are_never_violated_and_match_enumeration():
    """BIO constraints: -inf where forbidden, so decoding, marginals and samples respect them."""
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    crf = CRF(len(labels), batch_first=True, **transition_constraints(labels, "BIO")).double()
    torch.manual_seed(3)
    with torch.no_grad():
        crf.transitions.copy_(torch.randn(5, 5, dtype=torch.float64) * 3)
    emissions = torch.randn(2, 4, 5, dtype=torch.float64) * 3
    emissions[:, :, 2] += 20  # I-PER everywhere would win without the constraints
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    best = crf.decode(emissions, mask)
    for b, length in enumerate((4, 2)):
        scores = {k: v for k, v in _brute(crf, emissions[b], length).items() if v > -math.inf}
        assert tuple(best[b]) == max(scores, key=scores.get)
        assert best[b][0] != 2  # I-PER cannot start
        gold = torch.tensor([max(scores, key=scores.get) + (0,) * (4 - length)])
        llh = crf(emissions[b : b + 1], gold, mask[b : b + 1], reduction="none")
        assert llh.item() == pytest.approx(scores[tuple(gold[0, :length].tolist())] - _log_z(scores))
    marginals = crf.marginals(emissions, mask)
    assert marginals[:, 0, 2].max() == 0 and marginals[:, 0, 4].max() == 0
    samples = crf.distribution(emissions, mask).sample(200, generator=torch.Generator().manual_seed(0))
    allowed = crf.allowed_transitions
    for seq in samples.reshape(-1, 4).tolist():
        seq = [y for y in seq if y >= 0]
        assert crf.allowed_start[seq[0]]
        assert all(allowed[a, b] for a, b in zip(seq, seq[1:]))


def test_gold_tags_that_break_the_constraints_are_an_error():
    crf = CRF(3, batch_first=True, **transition_constraints(["O", "B-X", "I-X"], "BIO"))
    emissions = torch.randn(2, 3, 3)
    with pytest.raises(ValueError, match="sequence 1 starts with tag 2"):
        crf(emissions, torch.tensor([[0, 1, 2], [2, 2, 0]]))
    with pytest.raises(ValueError, match="sequence 0 moves from tag 0 to tag 2 at position 2"):
        crf(emissions, torch.tensor([[1, 0, 2], [0, 1, 2]]))
    # past the mask anything goes
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.isfinite(crf(emissions, torch.tensor([[1, 0, 2], [0, 1, 2]]), mask))
    ends = CRF(2, batch_first=True, allowed_end=torch.tensor([True, False]))
    with pytest.raises(ValueError, match="sequence 0 ends with tag 1"):
        ends(torch.randn(1, 2, 2), torch.tensor([[0, 1]]))


def test_distribution_is_the_layers_chain():
    """``distribution`` is the LinearChain whose log Z, log_prob and argmax the layer reports."""
    torch.manual_seed(4)
    crf = CRF(5)
    emissions = torch.randn(6, 3, 5)
    mask = torch.arange(6).unsqueeze(-1) < torch.tensor([6, 2, 5])
    chain = crf.distribution(emissions, mask)
    assert isinstance(chain, LinearChain)
    assert chain.lengths.tolist() == [6, 2, 5]
    tags = torch.randint(5, (6, 3))
    torch.testing.assert_close(
        crf(emissions, tags, mask, "none"), chain.log_prob(tags.T.masked_fill(~mask.T, -1))
    )
    assert torch.isfinite(chain.entropy).all()


def test_bad_input_is_a_clear_error():
    crf = CRF(4)
    emissions = torch.randn(5, 2, 4)
    tags = torch.zeros(5, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="num_tags must be a positive int"):
        CRF(0)
    with pytest.raises(ValueError, match=r"T x B x N with N = num_tags = 4, got \(5, 2, 3\)"):
        crf(torch.randn(5, 2, 3), tags)
    with pytest.raises(TypeError, match="emissions must be a floating-point tensor"):
        crf(torch.zeros(5, 2, 4, dtype=torch.long), tags)
    with pytest.raises(ValueError, match=r"tags must have shape T x B = \(5, 2\)"):
        crf(emissions, tags.T)
    with pytest.raises(TypeError, match="tags must be an integer tensor"):
        crf(emissions, tags.float())
    with pytest.raises(ValueError, match="sequence 1, position 3 has 4"):
        crf(emissions, tags.index_put((torch.tensor(3), torch.tensor(1)), torch.tensor(4)))
    with pytest.raises(ValueError, match="reduction must be one of"):
        crf(emissions, tags, reduction="avg")
    with pytest.raises(ValueError, match=r"mask must have shape T x B = \(5, 2\)"):
        crf(emissions, tags, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="first position must be on in every sequence: sequence 1"):
        crf(emissions, tags, torch.tensor([[1, 0]] * 5, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"left-aligned padding .* sequence 0 is \[1, 0, 1, 1, 1\]"):
        crf(emissions, tags, torch.tensor([[1, 1], [0, 1], [1, 1], [1, 1], [1, 1]]))
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        crf(emissions, tags, torch.full((5, 2), 2))
    with pytest.raises(TypeError, match="mask must be a bool or integer tensor"):
        crf.decode(emissions, torch.ones(5, 2))
    with pytest.raises(ValueError, match=r"allowed_transitions must be a bool tensor of shape \(4, 4\)"):
        CRF(4, allowed_transitions=torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="allow no tag sequence of any length"):
        CRF(2, allowed_start=torch.zeros(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="allow no tag sequence of any length"):  # starts in 0, ends in 1
        CRF(2, allowed_start=torch.tensor([True, False]), allowed_end=torch.tensor([False, True]),
            allowed_transitions=torch.tensor([[False, False], [True, False]]))  # fmt: skip
    # the same with 0 -> 1 allowed has a path of length 2
    CRF(2, allowed_start=torch.tensor([True, False]), allowed_end=torch.tensor([False, True]),
        allowed_transitions=torch.tensor([[False, True], [False, False]]))  # fmt: skip


def test_state_dict_keeps_pytorch_crfs_keys_and_repr():
    crf = CRF(3, batch_first=True, **transition_constraints(["O", "B-X", "I-X"]))
    assert set(crf.state_dict()) == {"start_transitions", "end_transitions", "transitions"}
    assert repr(crf) == "CRF(num_tags=3, batch_first=True, constrained)"
    assert torchcrf.CRF(3).load_state_dict(crf.state_dict())


def test_pytorch_crf_inputs_it_accepts_and_empty_batches():
    """An integer of numpy's as num_tags, and an empty batch (sum 0, mean NaN, no paths), as pytorch-crf."""
    np = pytest.importorskip("numpy")
    crf = CRF(np.int64(3), batch_first=True)
    assert crf.num_tags == 3 and isinstance(crf.num_tags, int)
    emissions, tags = torch.randn(0, 4, 3), torch.zeros(0, 4, dtype=torch.long)
    assert crf(emissions, tags).item() == 0 and torch.isnan(crf(emissions, tags, reduction="mean"))
    assert crf.decode(emissions) == [] and crf.marginals(emissions).shape == (0, 4, 3)
    # and its loss has a graph, as pytorch-crf's: a training loop's backward on it works (it raised)
    emissions.requires_grad_(True)
    with torch.no_grad():
        crf.transitions[0, 1] = float("-inf")  # a forbidden transition set by hand stays harmless
    (-crf(emissions, tags)).backward()
    assert emissions.grad.shape == (0, 4, 3) and torch.equal(crf.transitions.grad, torch.zeros(3, 3))


def test_non_finite_emissions_are_named_inside_the_mask_and_ignored_past_it():
    crf = CRF(3, batch_first=True)
    emissions, tags = torch.randn(2, 4, 3), torch.zeros(2, 4, dtype=torch.long)
    emissions[1, 3] = float("nan")
    emissions[1, 2, 0] = float("inf")
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    clean = emissions.clone()
    clean[1, 2:] = 0.0
    torch.testing.assert_close(crf(emissions, tags, mask, "none"), crf(clean, tags, mask, "none"))
    assert crf.decode(emissions, mask) == crf.decode(clean, mask)
    with pytest.raises(ValueError, match=r"NaN or \+inf where the mask is on: sequence 1, position 2"):
        crf(emissions, tags)


def test_a_sequence_the_constraints_leave_no_path_is_named():
    """Start in tag 0, then 0 -> 2 -> 1, end in tag 1: length 3 has one path, length 2 none."""
    crf = CRF(
        3,
        batch_first=True,
        allowed_start=torch.tensor([True, False, False]),
        allowed_end=torch.tensor([False, True, False]),
        allowed_transitions=torch.tensor([[False, False, True], [False, False, False], [False, True, False]]),
    )
    emissions = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    for operation in (crf.decode, crf.marginals):
        with pytest.raises(ValueError, match=r"sequences \[1\] \(lengths \[2\]\) have no tag sequence"):
            operation(emissions, mask)
    assert crf.decode(emissions[:1], mask[:1]) == [[0, 2, 1]]
