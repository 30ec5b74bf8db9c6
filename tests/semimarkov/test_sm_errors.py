"""Bad input raises ValueError/TypeError whose message says what was expected and what was given."""

import pytest
import torch
from mixed_inputs import assert_bfloat16_mixes, assert_other_device_refused, assert_other_dtype_refused

from zoo.inference import (
    DenseSemiMarkov,
    EdgeSemiMarkov,
    LowRankSemiMarkov,
    RankSpaceSemiMarkov,
    RDPOptions,
    SemiMarkovChain,
)

B, T, N, D, R = 2, 5, 3, 3, 2
ERR = (ValueError, TypeError)
F64 = torch.float64


def lp(*s):
    return torch.randn(*s, generator=torch.Generator().manual_seed(sum(s)), dtype=F64)


def feat(*s):
    return torch.rand(*s, generator=torch.Generator().manual_seed(sum(s) + 1), dtype=F64) + 0.1


def dense(unary=None, transition=None, duration=None, init=None):
    return DenseSemiMarkov(
        lp(B, T, N) if unary is None else unary,
        lp(N, N) if transition is None else transition,
        lp(N, D) if duration is None else duration,
        init,
    )


def test_valid_inputs_do_not_raise():
    assert torch.isfinite(SemiMarkovChain(dense(), torch.tensor([5, 1])).log_partition).all()
    lr = LowRankSemiMarkov(lp(B, T, N), feat(N, R), feat(N, R), lp(N, D), self_transitions=False)
    assert torch.isfinite(SemiMarkovChain(lr).log_partition).all()
    rs = RankSpaceSemiMarkov(feat(N), feat(N, R), feat(N, R), lp(R, D), lp(B, T, R))
    assert torch.isfinite(SemiMarkovChain(rs).log_partition).all()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(duration=lp(N, 0)), "D >= 1"),
        (dict(duration=lp(N + 1, D)), "duration"),
        (dict(duration=lp(D)), "duration"),
        (dict(unary=lp(T, N)), "unary"),
        (dict(unary=lp(B, 0, N)), "unary"),
        (dict(transition=lp(N, N + 1)), "transition"),
        (dict(init=lp(N + 1)), "init"),
    ],
    ids=["D=0", "duration-N", "duration-1d", "unary-2d", "unary-T=0", "transition", "init"],
)
def test_shapes(kwargs, match):
    with pytest.raises(ERR, match=match):
        SemiMarkovChain(dense(**kwargs)).log_partition  # noqa: B018


@pytest.mark.parametrize("name", ["unary", "transition", "duration", "init"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_and_inf(name, bad):
    shapes = dict(unary=(B, T, N), transition=(N, N), duration=(N, D), init=(N,))
    x = lp(*shapes[name])
    x.view(-1)[1] = bad
    with pytest.raises(ValueError, match=f"{name}.*(NaN|inf)"):
        SemiMarkovChain(dense(**{name: x})).log_partition  # noqa: B018


@pytest.mark.parametrize(
    "lengths", [[0, 5], [5, 6], [3], [2.5, 3]], ids=["zero", "beyond-T", "B", "fraction"]
)
def test_lengths(lengths):
    with pytest.raises(ValueError, match="lengths"):
        SemiMarkovChain(dense(), torch.tensor(lengths))


def test_no_segmentation_covers_the_sequence():
    """Only duration 2 allowed: an odd length cannot be covered."""
    duration = torch.full((N, D), float("-inf"), dtype=F64)
    duration[:, 1] = 0.0
    dist = SemiMarkovChain(dense(duration=duration), torch.tensor([4, 3]))
    with pytest.raises(ValueError, match=r"no segmentation covers batch elements \[1\]"):
        dist.log_partition  # noqa: B018
    for op in ("marginals", "argmax", "entropy"):  # entropy was 0
        with pytest.raises(ValueError, match="no segmentation covers"):
            getattr(SemiMarkovChain(dense(duration=duration), torch.tensor([4, 3])), op)
    with pytest.raises(ValueError, match="no segmentation covers"):
        SemiMarkovChain(dense(duration=duration), torch.tensor([4, 3])).sample(2)
    assert torch.isfinite(SemiMarkovChain(dense(duration=duration), torch.tensor([4, 2])).log_partition).all()


def test_low_rank_and_rank_space_values():
    with pytest.raises(ValueError, match="left.*non-negative"):
        LowRankSemiMarkov(lp(B, T, N), -feat(N, R), feat(N, R), lp(N, D))
    with pytest.raises(ValueError, match="right.*N x R"):
        LowRankSemiMarkov(lp(B, T, N), feat(N, R), feat(N, R + 1), lp(N, D))
    with pytest.raises(ValueError, match="U.*non-negative"):
        RankSpaceSemiMarkov(feat(N), -feat(N, R), feat(N, R), lp(R, D), lp(B, T, R))
    with pytest.raises(ValueError, match="duration"):
        RankSpaceSemiMarkov(feat(N), feat(N, R), feat(N, R), lp(N + 3, D), lp(B, T, R))
    with pytest.raises(ValueError, match="outgoing mass"):
        LowRankSemiMarkov(lp(B, T, 1), feat(1, R), feat(1, R), lp(1, D), self_transitions=False)
    with pytest.raises(ValueError, match="edge"):
        EdgeSemiMarkov(lp(B, D, N), lp(B, T - 1, D, N, N + 1))


def test_backend_and_options():
    with pytest.raises(ValueError, match="RDPOptions"):
        SemiMarkovChain(dense(), backend="randomized")
    with pytest.raises(ValueError, match="only used by the 'randomized'"):
        SemiMarkovChain(dense(), options=RDPOptions(1, 1))
    with pytest.raises(ValueError, match="unknown backend"):
        SemiMarkovChain(dense(), backend="fast")
    with pytest.raises(TypeError, match="low-rank.*LowRankSemiMarkov"):
        SemiMarkovChain(dense(), backend="low-rank")
    rs = RankSpaceSemiMarkov(feat(N), feat(N, R), feat(N, R), lp(R, D), lp(B, T, R))
    with pytest.raises(TypeError, match="randomized.*DenseSemiMarkov"):
        SemiMarkovChain(rs, backend="randomized", options=RDPOptions(1, 1))
    with pytest.raises(ValueError, match="k1 \\+ k2 must be at most N"):
        SemiMarkovChain(dense(), backend="randomized", options=RDPOptions(2, 2))
    with pytest.raises(TypeError, match="factors must be"):
        SemiMarkovChain(lp(B, T, N))


def test_segmentation_and_sampling_arguments():
    dist = SemiMarkovChain(dense())
    good = torch.tensor([[0, -1, 1, -1, -1], [2, 2, 2, 2, 2]])
    assert torch.isfinite(dist.log_prob(good)).all()
    with pytest.raises(ValueError, match="frame 0 must start a segment"):
        dist.log_prob(torch.tensor([[-1, 0, -1, -1, -1], [0, 0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="0..N-1"):
        dist.log_prob(torch.tensor([[0, 3, -1, -1, -1], [0, 0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="shape B x T"):
        dist.log_prob(torch.zeros(B, T + 1, dtype=torch.long))
    with pytest.raises(TypeError, match="integer"):
        dist.log_prob(torch.zeros(B, T))
    too_long = torch.tensor([[0, -1, -1, -1, -1], [0, 0, 0, 0, 0]])  # a segment of 5 > D
    assert dist.log_prob(too_long)[0] == float("-inf")
    with pytest.raises(ValueError, match="positive int"):
        dist.sample(0)
    with pytest.raises(ValueError, match="temperature"):
        dist.rsample(0.0)


# --------------------------------------------------------------------------- one dtype, one device
def _sm_containers():
    """name -> (class, float32 potentials), every argument of each container given."""
    g = torch.Generator().manual_seed(3)

    def f32(*s, positive=False):
        return torch.rand(*s, generator=g) + 0.1 if positive else torch.randn(*s, generator=g)

    return {
        "DenseSemiMarkov": (
            DenseSemiMarkov, dict(unary=f32(B, T, N), transition=f32(N, N), duration=f32(N, D), init=f32(N))
        ),
        "LowRankSemiMarkov": (
            LowRankSemiMarkov,
            dict(unary=f32(B, T, N), left=f32(N, R, positive=True), right=f32(N, R, positive=True),
                 duration=f32(N, D), init=f32(N)),
        ),
        "RankSpaceSemiMarkov": (
            RankSpaceSemiMarkov,
            dict(start=f32(N, positive=True), U=f32(N, R, positive=True), V=f32(N, R, positive=True),
                 duration=f32(R, D), emission=f32(B, T, R)),
        ),
        "EdgeSemiMarkov": (EdgeSemiMarkov, dict(first=f32(B, D, N), edge=f32(B, T - 1, D, N, N))),
    }


SM_ARGS = [(name, arg) for name, (_, args) in _sm_containers().items() for arg in args]
_ARG_IDS = [f"{name}-{arg}" for name, arg in SM_ARGS]


@pytest.mark.parametrize("name, arg", SM_ARGS, ids=_ARG_IDS)
def test_one_float64_potential_among_float32_is_refused(name, arg):
    """A float64 argument among float32 ones: a TypeError at construction naming both dtypes (it once
    failed inside a matrix product, or silently returned a float32 log Z from a float64 unary)."""
    assert_other_dtype_refused(*_sm_containers()[name], name, arg)


@pytest.mark.parametrize("name, arg", SM_ARGS, ids=_ARG_IDS)
def test_one_bfloat16_potential_among_float32_is_accepted(name, arg):
    assert_bfloat16_mixes(*_sm_containers()[name], arg, lambda c: SemiMarkovChain(c).log_partition)


@pytest.mark.parametrize("name, arg", SM_ARGS, ids=_ARG_IDS)
def test_one_potential_on_another_device_is_refused(name, arg):
    assert_other_device_refused(*_sm_containers()[name], name, arg)


def test_to_frame_states_takes_lengths_as_a_list():
    """Lengths as a list (as the distributions take them) failed with an AttributeError (audit)."""
    from zoo.inference.semimarkov import to_frame_states

    assert to_frame_states(torch.tensor([[0, -1, 1, -1]]), [3]).tolist() == [[0, 0, 1, -1]]


def test_a_bad_entry_past_a_length_is_named_by_its_index():
    """NaN padding past a sequence's length: the error said "unary contains NaN" without saying where
    (audit: a user who pads with NaN could not tell it was the padding)."""
    x = lp(B, T, N)
    x[1, T - 1, 2] = float("nan")
    with pytest.raises(ValueError, match=rf"unary contains NaN \(first at index \(1, {T - 1}, 2\) of a"):
        SemiMarkovChain(dense(unary=x), torch.tensor([T, 2])).log_partition  # noqa: B018
    with pytest.raises(ValueError, match=r"left must be non-negative .*-1 \(first at index \(0, 1\)"):
        left = torch.tensor([[1.0, -1.0]], dtype=torch.float64).expand(N, 2)
        LowRankSemiMarkov(lp(B, T, N), left, torch.ones(N, 2, dtype=torch.float64), lp(N, D))
