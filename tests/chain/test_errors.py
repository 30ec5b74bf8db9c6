"""Bad input raises ValueError/TypeError whose message names the problem (docs/chain-api.md).

The error may come from the container, from LinearChain(...) or from the first operation, so each
check builds the whole thing and asks for log_partition inside pytest.raises.
"""

from __future__ import annotations

import pytest
import torch
from mixed_inputs import assert_bfloat16_mixes, assert_other_device_refused, assert_other_dtype_refused
from strategies import DTYPE

B, T, N, R, D = 2, 3, 3, 2, 2
ERR = (ValueError, TypeError)


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def lp(*s):
    return torch.randn(*s, generator=_g(sum(s)), dtype=DTYPE)


def feat(*s):
    return torch.rand(*s, generator=_g(sum(s) + 1), dtype=DTYPE) + 0.1


def run_dense(unary=None, transition=None, init=None, lengths=None, backend=None, options=None):
    from zoo.inference import DenseChain, LinearChain

    unary = lp(B, T, N) if unary is None else unary
    transition = lp(N, N) if transition is None else transition
    dist = LinearChain(
        DenseChain(unary, transition, init=init), lengths=lengths, backend=backend, options=options
    )
    return dist.log_partition


def run_lowrank(left=None, right=None, unary=None, log_rank_weights=None, normalize=True, backend=None):
    from zoo.inference import LinearChain, LowRankChain

    unary = lp(B, T, N) if unary is None else unary
    left = feat(N, R) if left is None else left
    right = feat(N, R) if right is None else right
    f = LowRankChain(unary, left, right, normalize=normalize, log_rank_weights=log_rank_weights)
    return LinearChain(f, backend=backend).log_partition


def run_rankspace(start=None, U=None, V=None, emission=None, lengths=None, backend=None):
    from zoo.inference import LinearChain, RankSpaceChain

    start = feat(N) if start is None else start
    U = feat(N, R) if U is None else U
    V = feat(N, R) if V is None else V
    emission = lp(B, T, R) if emission is None else emission
    return LinearChain(RankSpaceChain(start, U, V, emission), lengths=lengths, backend=backend).log_partition


def test_sanity_valid_inputs_do_not_raise():
    """The builders above are valid as given (so each error below is due to the one bad argument)."""
    assert torch.isfinite(run_dense()).all()
    assert torch.isfinite(run_dense(lengths=torch.tensor([1, T]))).all()
    assert torch.isfinite(run_lowrank()).all()
    assert torch.isfinite(run_lowrank(normalize=False, log_rank_weights=lp(B, T - 1, R))).all()
    assert torch.isfinite(run_rankspace()).all()


# --------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("unary", [lp(T, N), lp(B, T, N, 1), lp(N)], ids=["2d", "4d", "1d"])
def test_unary_not_3d(unary):
    with pytest.raises(ERR, match="(?i)shape|dim|unary"):
        run_dense(unary=unary, transition=lp(N, N))


@pytest.mark.parametrize(
    "transition",
    [lp(N, N + 1), lp(N + 1, N + 1), lp(B, T, N, N), lp(B, T - 1, N, N + 1), lp(B + 1, T - 1, N, N), lp(N)],
    ids=["NxN+1", "N+1xN+1", "per-pos-T", "per-pos-N+1", "per-pos-B+1", "1d"],
)
def test_transition_wrong_size(transition):
    with pytest.raises(ERR, match="(?i)shape|transition"):
        run_dense(transition=transition)


@pytest.mark.parametrize("init", [lp(N + 1), lp(B + 1, N), lp(B, N, 1)], ids=["N+1", "B+1xN", "3d"])
def test_init_wrong_size(init):
    with pytest.raises(ERR, match="(?i)shape|init"):
        run_dense(init=init)


def test_embedding_states_wrong_size():
    from zoo.inference import EmbeddingChain, LinearChain

    with pytest.raises(ERR, match="(?i)shape|states"):
        _ = LinearChain(EmbeddingChain(lp(B, T, N), lp(N + 1, D))).log_partition


def test_left_right_rank_mismatch():
    with pytest.raises(ERR, match="(?i)shape|rank|left|right"):
        run_lowrank(left=feat(N, R), right=feat(N, R + 1))


def test_left_wrong_states():
    with pytest.raises(ERR, match="(?i)shape|left|states"):
        run_lowrank(left=feat(N + 1, R), right=feat(N, R))


def test_log_rank_weights_wrong_shape():
    with pytest.raises(ERR, match="(?i)shape|log_rank_weights|rank"):
        run_lowrank(normalize=False, log_rank_weights=lp(B, T - 1, R + 1))


def test_rankspace_U_V_mismatch():
    with pytest.raises(ERR, match="(?i)shape|rank|U|V"):
        run_rankspace(U=feat(N, R), V=feat(N, R + 1))


def test_rankspace_emission_wrong_rank():
    with pytest.raises(ERR, match="(?i)shape|rank|emission"):
        run_rankspace(emission=lp(B, T, R + 1))


@pytest.mark.parametrize(
    "lengths",
    [torch.tensor([[3, 3]]), torch.tensor([3, 3, 3]), torch.tensor([3])],
    ids=["2d", "B+1", "1"],
)
def test_lengths_wrong_shape(lengths):
    with pytest.raises(ERR, match="(?i)lengths|shape"):
        run_dense(lengths=lengths)


def test_lengths_float_dtype():
    with pytest.raises(ERR, match="(?i)lengths|int|dtype"):
        run_dense(lengths=torch.tensor([1.5, 3.0]))


# --------------------------------------------------------------------------- lengths values
@pytest.mark.parametrize("lengths", [[0, 3], [3, T + 1], [-1, 2]], ids=["zero", "gt-T", "negative"])
def test_lengths_out_of_range(lengths):
    with pytest.raises(ValueError, match="(?i)lengths"):
        run_dense(lengths=torch.tensor(lengths))


def test_lengths_out_of_range_rankspace():
    with pytest.raises(ValueError, match="(?i)lengths"):
        run_rankspace(lengths=torch.tensor([0, 2]))


# --------------------------------------------------------------------------- NaN / +inf
def _poke(x, value, idx=(0,)):
    x = x.clone()
    x.view(-1)[idx[0]] = value
    return x


@pytest.mark.parametrize("where", ["unary", "transition", "init", "per-position"])
def test_nan_potentials(where):
    kw = dict(unary=lp(B, T, N), transition=lp(N, N), init=lp(N))
    if where == "per-position":
        kw["transition"] = _poke(lp(B, T - 1, N, N), float("nan"), (5,))
    else:
        kw[where] = _poke(kw[where], float("nan"))
    with pytest.raises(ValueError, match="(?i)nan"):
        run_dense(**kw)


@pytest.mark.parametrize("where", ["unary", "transition", "init"])
def test_posinf_potentials(where):
    kw = dict(unary=lp(B, T, N), transition=lp(N, N), init=lp(N))
    kw[where] = _poke(kw[where], float("inf"))
    with pytest.raises(ValueError, match="(?i)inf"):
        run_dense(**kw)


def test_nan_in_features_and_emission():
    with pytest.raises(ValueError, match="(?i)nan"):
        run_lowrank(left=_poke(feat(N, R), float("nan")))
    with pytest.raises(ValueError, match="(?i)nan"):
        run_rankspace(emission=_poke(lp(B, T, R), float("nan")))
    with pytest.raises(ValueError, match="(?i)nan"):
        run_lowrank(normalize=False, log_rank_weights=_poke(lp(B, T - 1, R), float("nan")))


# --------------------------------------------------------------------------- negative features
@pytest.mark.parametrize("which", ["left", "right"])
def test_negative_low_rank_features(which):
    with pytest.raises(ValueError, match="(?i)non-?negative|negative"):
        run_lowrank(**{which: _poke(feat(N, R), -0.5, (1,))})


@pytest.mark.parametrize("which", ["U", "V", "start"])
def test_negative_rank_space_features(which):
    shape = (N,) if which == "start" else (N, R)
    with pytest.raises(ValueError, match="(?i)non-?negative|negative"):
        run_rankspace(**{which: _poke(feat(*shape), -0.5, (1,))})


# --------------------------------------------------------------------------- backends / options
@pytest.mark.parametrize("k1,k2", [(N, 1), (2, 2), (N + 1, 0)])
def test_k1_plus_k2_greater_than_N(k1, k2):
    from zoo.inference import RDPOptions

    with pytest.raises(ValueError, match="(?i)k1|k2"):
        run_dense(backend="randomized", options=RDPOptions(k1, k2))


def test_randomized_without_options():
    with pytest.raises(ERR, match="(?i)option|RDPOptions|k1"):
        run_dense(backend="randomized")


def test_unknown_proposal():
    from zoo.inference import RDPOptions

    with pytest.raises(ERR, match="(?i)proposal"):
        run_dense(backend="randomized", options=RDPOptions(1, 1, proposal="nearest"))


def test_a_generator_that_is_not_one():
    """A seed as the generator failed inside torch.multinomial, for every structure (audit U)."""
    from zoo.inference import RDPOptions

    with pytest.raises(TypeError, match=r"must be a torch.Generator or None, got int 123 .*manual_seed"):
        RDPOptions(2, 2, "local", 123)


def test_negative_proposal_tensor():
    from zoo.inference import RDPOptions

    prop = _poke(feat(B, T, N), -1.0)
    with pytest.raises(ValueError, match="(?i)proposal|non-?negative|negative"):
        run_dense(backend="randomized", options=RDPOptions(1, 1, proposal=prop))


def test_a_proposal_weight_of_zero_is_refused():
    """A state of weight 0 is never drawn beyond the top K1: Z_hat would miss its mass (the tree audit
    measured E[Z_hat] / Z = 0.24). Refused, naming where."""
    from zoo.inference import RDPOptions

    prop = feat(B, T, N)
    prop[1, 2, 0] = 0.0
    refused = r"proposal weights must be positive, got 0 \(first at index \(1, 2, 0\)"
    with pytest.raises(ValueError, match=refused):
        run_dense(backend="randomized", options=RDPOptions(1, 1, proposal=prop))


@pytest.mark.parametrize("dtype", [torch.float64, torch.long])
def test_proposal_tensor_of_another_dtype_is_converted(dtype):
    """A proposal is a sampling distribution, not a potential: float64 or integer counts among float32
    potentials run as the same weights in float32 (once an opaque dtype error in the DP)."""
    from zoo.inference import RDPOptions

    counts, unary, transition = torch.randint(1, 5, (B, T, N), generator=_g()), lp(B, T, N), lp(N, N)
    got, want = (
        run_dense(unary.float(), transition.float(), backend="randomized",
                  options=RDPOptions(2, 1, proposal=weights, generator=_g()))
        for weights in (counts.to(dtype), counts.float())
    )
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["fast", "lowrank-ish", ""])
def test_unknown_backend(name):
    with pytest.raises(ValueError, match="(?i)backend|fast|exact"):
        run_dense(backend=name)


def test_unknown_backend_message_lists_choices():
    with pytest.raises(ValueError) as ei:
        run_dense(backend="fast")
    msg = str(ei.value)
    assert "fast" in msg
    for choice in ("exact", "low-rank", "rank-space", "randomized"):
        assert choice in msg, f"{choice!r} not in {msg!r}"


def test_low_rank_backend_on_dense_factors():
    with pytest.raises(ERR, match="(?i)low.?rank|backend|DenseChain"):
        run_dense(backend="low-rank")


def test_rank_space_backend_on_dense_factors():
    with pytest.raises(ERR, match="(?i)rank.?space|backend|DenseChain"):
        run_dense(backend="rank-space")


def test_factors_not_a_container():
    from zoo.inference import LinearChain

    with pytest.raises(TypeError, match="(?i)factor|chain|container"):
        _ = LinearChain(lp(B, T, N)).log_partition


# --------------------------------------------------------------------------- one dtype, one device
def _chain_containers():
    """name -> (build(**potentials), float32 potentials), every argument of each container given."""
    from zoo.inference import DenseChain, EmbeddingChain, LowRankChain, RankSpaceChain

    g = _g(3)

    def f32(*s, positive=False):
        x = torch.rand(*s, generator=g) + 0.1 if positive else torch.randn(*s, generator=g)
        return x.float()

    return {
        "DenseChain": (DenseChain, dict(unary=f32(B, T, N), transition=f32(N, N), init=f32(N))),
        "EmbeddingChain": (EmbeddingChain, dict(unary=f32(B, T, N), states=f32(N, R), init=f32(N))),
        "LowRankChain": (
            lambda **a: LowRankChain(**a, normalize=False),
            dict(unary=f32(B, T, N), left=f32(N, R, positive=True), right=f32(N, R, positive=True),
                 init=f32(N), log_rank_weights=f32(B, T - 1, R)),
        ),
        "RankSpaceChain": (
            RankSpaceChain,
            dict(start=f32(N, positive=True), U=f32(N, R, positive=True), V=f32(N, R, positive=True),
                 emission=f32(B, T, R)),
        ),
    }


CHAIN_ARGS = [(name, arg) for name, (_, args) in _chain_containers().items() for arg in args]
_ARG_IDS = [f"{name}-{arg}" for name, arg in CHAIN_ARGS]


@pytest.mark.parametrize("name, arg", CHAIN_ARGS, ids=_ARG_IDS)
def test_one_float64_potential_among_float32_is_refused(name, arg):
    """A float64 argument among float32 ones: a TypeError at construction naming both dtypes (it once
    failed inside the first matrix product: "expected m1 and m2 to have the same dtype")."""
    assert_other_dtype_refused(*_chain_containers()[name], name, arg)


@pytest.mark.parametrize("name, arg", CHAIN_ARGS, ids=_ARG_IDS)
def test_one_bfloat16_potential_among_float32_is_accepted(name, arg):
    from zoo.inference import LinearChain

    assert_bfloat16_mixes(*_chain_containers()[name], arg, lambda c: LinearChain(c).log_partition)


@pytest.mark.parametrize("name, arg", CHAIN_ARGS, ids=_ARG_IDS)
def test_one_potential_on_another_device_is_refused(name, arg):
    assert_other_device_refused(*_chain_containers()[name], name, arg)


def test_bool_lengths_are_refused():
    """A bool tensor was read as lengths of 1 (True) with no error (audit)."""
    from zoo.inference import DenseChain, LinearChain

    with pytest.raises(TypeError, match="lengths must be integers, got a bool tensor"):
        LinearChain(DenseChain(torch.randn(3, 4, 2), torch.randn(2, 2)), torch.tensor([True] * 3))


def test_a_rank_space_shape_error_names_where_its_rank_comes_from():
    """An emission of the wrong rank blamed U alone (audit): the message says R comes from emission."""
    from zoo.inference import RankSpaceChain

    with pytest.raises(ValueError, match=r"U must have shape N x R \(R: emission's last dimension"):
        RankSpaceChain(torch.rand(4), torch.rand(4, 2), torch.rand(4, 2), torch.randn(3, 5, 3))


def test_a_top_k_baseline_needs_an_informative_proposal():
    """k2 = 0 under the uniform proposal kept an arbitrary fixed set of K1 states, silently (audit)."""
    from zoo.inference import DenseChain, LinearChain, RDPOptions

    factors = DenseChain(lp(B, T, N), lp(N, N))
    with pytest.raises(ValueError, match="the 'uniform' proposal ranks none above another"):
        LinearChain(factors, backend="randomized", options=RDPOptions(1, 0, "uniform")).log_partition  # noqa: B018
    for k1, k2, proposal in ((0, 1, "uniform"), (1, 0, "local"), (N, 0, "uniform")):  # draws, a ranking, all
        LinearChain(factors, backend="randomized", options=RDPOptions(k1, k2, proposal)).log_partition  # noqa: B018
