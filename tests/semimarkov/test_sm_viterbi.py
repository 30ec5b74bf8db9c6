"""The semi-Markov Viterbi (``zoo.inference.semimarkov.viterbi``: back-pointers for the duration from the
max-product forward, the previous node from one column) against the general walk back over (duration,
previous node) pairs, at sizes past brute force: ragged lengths, durations longer than the sequences,
forbidden transitions with a fixed start in float32, and an uncovered sequence."""

import pytest
import torch

from zoo.inference import DenseSemiMarkov, RankSpaceSemiMarkov, SemiMarkovChain
from zoo.inference.semimarkov.engine import segmentation_score
from zoo.inference.semimarkov.exact import ExactEngine, dense_problem
from zoo.inference.semimarkov.forward import backtrack, factorized_choice, forward
from zoo.inference.semiring import Max

NEG_INF = float("-inf")


def general_walk_back(f: DenseSemiMarkov, lengths):
    """The best score and segmentation by the walk back over (duration, previous node) pairs (the one
    sampling uses), from the same max-product forward."""
    problem = dense_problem(f)
    score, ends, _, offsets = forward(problem, lengths, semiring=Max)
    choice = factorized_choice(problem, ends, f.transition_columns, offsets)
    seg, _ = backtrack(ends, None, choice, lengths, f.max_duration, 1, noise=False)
    return score, seg[0]


def random_hsmm(B, T, N, D, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return DenseSemiMarkov(
        torch.randn(B, T, N, generator=g, dtype=dtype),
        torch.randn(N, N, generator=g, dtype=dtype),
        torch.randn(N, D, generator=g, dtype=dtype),
        torch.randn(N, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize(
    ("B", "T", "N", "D", "lengths"),
    [(4, 60, 5, 7, [60, 1, 33, 59]), (3, 9, 4, 20, [9, 2, 5]), (2, 40, 1, 3, [40, 17])],
)
def test_best_segmentations_score_the_general_walk_backs_best(B, T, N, D, lengths):
    f = random_hsmm(B, T, N, D, seed=T)
    lengths = torch.tensor(lengths)
    dist = SemiMarkovChain(f, lengths)
    seg = dist.argmax
    score, reference = general_walk_back(f, lengths)
    torch.testing.assert_close(dist.max_score, score, atol=1e-10, rtol=0)
    torch.testing.assert_close(segmentation_score(f, seg, lengths), score, atol=1e-10, rtol=0)
    torch.testing.assert_close(segmentation_score(f, reference, lengths), score, atol=1e-10, rtol=0)
    starts = torch.arange(T) < lengths[:, None]
    assert (seg[~starts] == -1).all() and (seg[:, 0] >= 0).all()


def test_left_to_right_with_a_fixed_start_in_float32():
    """States 0 -> 1 -> ... (each used once, in order), starting in 0, with frame scores hundreds of nats
    apart: the float32 decoding keeps the topology and scores the float64 best."""
    B, T, N, D = 3, 120, 6, 40
    g = torch.Generator().manual_seed(1)
    unary = -500 + 200 * torch.randn(B, T, N, generator=g, dtype=torch.float64)
    transition = torch.full((N, N), NEG_INF, dtype=torch.float64)
    transition[torch.arange(N - 1), torch.arange(1, N)] = 0.0
    init = torch.full((N,), NEG_INF, dtype=torch.float64)
    init[0] = 0.0
    duration = torch.randn(N, D, generator=g, dtype=torch.float64).log_softmax(-1)
    lengths = torch.tensor([120, 90, 60])
    f64 = DenseSemiMarkov(unary, transition, duration, init)
    best = SemiMarkovChain(f64, lengths).max_score
    f32 = DenseSemiMarkov(unary.float(), transition.float(), duration.float(), init.float())
    seg = SemiMarkovChain(f32, lengths).argmax
    for b, L in enumerate(lengths.tolist()):
        states = seg[b, :L][seg[b, :L] >= 0]
        assert states.tolist() == list(range(len(states))), states
    scored = segmentation_score(f64, seg, lengths)
    torch.testing.assert_close(scored, best, atol=2e-6 * best.abs().max(), rtol=0)


def test_an_uncovered_sequence_raises_from_the_max_product_forward(monkeypatch):
    """Only even durations and an odd length: argmax says so without running the sum-product forward."""
    f = random_hsmm(2, 5, 3, 4)
    duration = f.duration.clone()
    duration[..., 0::2] = NEG_INF
    f = DenseSemiMarkov(f.unary, f.transition, duration, f.init)
    monkeypatch.setattr(ExactEngine, "log_partition", lambda *a, **k: pytest.fail("log Z was computed"))
    with pytest.raises(ValueError, match=r"no segmentation covers batch elements \[1\]"):
        SemiMarkovChain(f, torch.tensor([4, 5])).argmax  # noqa: B018



@pytest.mark.parametrize("kind", ["dense", "rank-space"])
def test_the_best_score_is_differentiable_its_gradient_the_segmentations_indicator(kind):
    """max_score is the best segmentation's score summed from the potentials (a structured hinge loss
    needs its gradient); it was the max-product forward's value, without a graph. Piecewise linear:
    gradcheck at a point without ties."""
    g = torch.Generator().manual_seed(4)
    lengths = torch.tensor([7, 3])
    if kind == "dense":
        shapes = ((2, 7, 3), (3, 3), (3, 4), (3,))  # unary, transition, duration, init
        args = [torch.randn(*shape, generator=g, dtype=torch.float64) for shape in shapes]

        def best(*x):
            return SemiMarkovChain(DenseSemiMarkov(*x), lengths).max_score
    else:
        shapes = ((3,), (3, 2), (3, 2), (2, 4), (2, 7, 2))
        args = [torch.rand(*s, generator=g, dtype=torch.float64) + 0.1 for s in shapes[:3]]
        args += [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes[3:]]

        def best(*x):
            return SemiMarkovChain(RankSpaceSemiMarkov(*x), lengths, backend="rank-space").max_score
    args = [x.requires_grad_() for x in args]
    assert torch.autograd.gradcheck(best, args)


def test_a_long_hsmm_decodes_its_best_segmentation_in_float32():
    """T = 2,000 frames of a 3-state HSMM (D = 4) whose frame scores are about a thousand nats down (a
    Gaussian of many dimensions): the float32 segmentation scores float64's best within 1e-8 relative.
    The max-product forward's values are shifted as it goes; unshifted, they reached 2e6 and float32
    rounded away the differences the segmentations are chosen by (0.9 nats below the best)."""
    T, N, D = 2000, 3, 4
    g = torch.Generator().manual_seed(0)
    frames, means = torch.randn(T, 2, generator=g), torch.randn(N, 2, generator=g)
    unary = (-0.5 * ((frames[:, None] - means) ** 2).sum(-1) - 1000.0)[None]
    transition = torch.randn(N, N, generator=g).log_softmax(-1)
    duration = torch.randn(N, D, generator=g).log_softmax(-1)
    segmentation = SemiMarkovChain(DenseSemiMarkov(unary, transition, duration)).argmax
    exact = SemiMarkovChain(DenseSemiMarkov(unary.double(), transition.double(), duration.double()))
    best, found = exact.max_score, exact.log_prob(segmentation) + exact.log_partition
    assert best - found <= 1e-8 * best.abs(), f"float32 segmentation: {found.item()}, best {best.item()}"
