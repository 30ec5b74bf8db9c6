"""Linear chains in float32: every container x backend x operation against itself in float64.

The budget of each quantity is twice the error of a plain float32 log-space DP on the same inputs
plus a small floor (numerics/reference.py, numerics/checks.py). Inputs are realistic: Gaussian
log-likelihoods hundreds of nats apart, left-to-right / banded / peaked / partly forbidden
transitions with entries down to -1e4 and -inf, fixed start states (numerics/strategies.py).
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from numerics.checks import CHAIN_OPS, check_chain, numerics_settings
from numerics.strategies import chain_case, chain_cases

# (container, backend): "native" is the container's own backend ("exact" for dense / embedding)
COMBOS = [
    ("dense", "native"),
    ("dense", "randomized-k1=N"),
    ("dense", "randomized-topk"),
    ("embedding", "native"),
    ("embedding", "randomized-topk"),
    ("lowrank", "native"),
    ("lowrank", "exact"),
    ("lowrank", "randomized-topk"),
    ("rankspace", "native"),
    ("rankspace", "exact"),
    ("rankspace", "randomized-topk"),
]


@pytest.mark.parametrize("op", CHAIN_OPS)
@pytest.mark.parametrize("kind,backend", COMBOS, ids=[f"{k}-{b}" for k, b in COMBOS])
@numerics_settings(3)
@given(data=st.data())
def test_chain_float32(kind, backend, op, data):
    """T from 30 to 600, N up to 16, ragged lengths; a dense chain's transition is shared or per position.
    (Tiny chains are in test_regressions.py: the first example hypothesis draws is the smallest.)"""
    case = data.draw(chain_cases(kind, sizes=((30, 600), (2, 16))), label="case")
    check_chain(case, backend, op)


LONG = [
    ("dense", "native", False),
    ("dense", "native", True),
    ("dense", "randomized-topk", False),
    ("embedding", "native", False),
    ("lowrank", "native", False),
    ("rankspace", "native", False),
]


LONG_CASES = [(k, b, p, op) for k, b, p in LONG for op in ("log_partition", "marginals")]
LONG_CASES += [("dense", "native", False, "entropy"), ("dense", "native", True, "entropy")]


@pytest.mark.parametrize(
    "kind,backend,per_position,op",
    LONG_CASES,
    ids=[f"{k}-{b}{'-per-position' if p else ''}-{op}" for k, b, p, op in LONG_CASES],
)
@numerics_settings(2)
@given(data=st.data())
def test_long_chain_float32(kind, backend, per_position, op, data):
    """T = 1,500 to 2,000 with N up to 16."""
    case = data.draw(
        chain_cases(kind, sizes=((1500, 2000), (2, 16)), batch=(1, 2), per_position=per_position),
        label="case",
    )
    check_chain(case, backend, op)


@pytest.mark.parametrize("op", ["log_partition", "marginals", "pairwise_marginals", "entropy", "argmax"])
@numerics_settings(2)
@given(seed=st.integers(0, 2**31 - 1), emission=st.sampled_from(["gaussian", "close"]))
def test_wide_peaked_chain_float32(op, seed, emission):
    """N = 64 with peaked transitions (log-softmax of large logits, some entries -1e4), T = 300."""
    case = chain_case(
        seed, kind="dense", B=2, T=300, N=64, topology="peaked", init="logsoftmax", emission=emission
    )
    check_chain(case, "native", op)


@pytest.mark.slow
def test_very_long_left_to_right_chain_float32():
    """T = 10,000: a left-to-right HMM (N = 4, start in state 0) with Gaussian emissions; log Z and
    marginals (one plain-DP reference for both)."""
    case = chain_case(7, kind="dense", B=1, T=10_000, N=4, topology="left-to-right", ragged=False)
    check_chain(case, "native", "log_partition")
    check_chain(case, "native", "marginals")


def test_bfloat16_inputs_are_computed_in_float32():
    """docs/chain-api.md, "Numerics": bfloat16 potentials are computed in float32 and the results are
    float32 (test_bfloat16.py holds them to the float64 answer)."""
    from zoo.inference import DenseChain, DenseSemiMarkov, LinearChain, SemiMarkovChain

    u = torch.tensor([[[-43.0, 47.0], [-40.0, -278.0]]], dtype=torch.bfloat16)
    tr = torch.tensor([[-0.1, -2.0], [-3.0, -0.2]], dtype=torch.bfloat16)
    for dist in (
        LinearChain(DenseChain(u, tr)),
        SemiMarkovChain(DenseSemiMarkov(u, tr, torch.zeros(2, 2, dtype=torch.bfloat16))),
    ):
        out = dist.log_partition
        assert out.dtype == torch.float32, f"{type(dist).__name__}: log Z dtype {out.dtype}"
        assert torch.isfinite(out).all()
