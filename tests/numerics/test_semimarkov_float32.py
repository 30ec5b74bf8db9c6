"""Semi-Markov chains (HSMMs) in float32: every container x backend x operation against itself in
float64, within twice the error of a plain float32 log-space DP over (duration, previous state).

Inputs: Gaussian frame log-likelihoods (hundreds of nats apart, or close together on the same
scale), peaked / banded / partly forbidden / left-to-right transitions, durations 1..D with some
forbidden, T up to 500 and D up to 32 (numerics/strategies.py).
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numerics.checks import SM_OPS, check_sm, numerics_settings
from numerics.strategies import sm_cases

COMBOS = [
    ("dense", "native"),
    ("dense", "randomized-k1=N"),
    ("dense", "randomized-topk"),
    ("lowrank", "native"),
    ("lowrank", "exact"),
    ("lowrank", "randomized-topk"),
    ("rankspace", "native"),
    ("rankspace", "exact"),
    ("edge", "native"),
]
SIZES = {  # T = 500 with D = 32 (and the cases this matrix found): test_regressions.py
    "dense": dict(T=(60, 500), N=(2, 8), D=(8, 32)),
    "lowrank": dict(T=(60, 500), N=(2, 8), D=(8, 32)),
    "rankspace": dict(T=(60, 500), N=(2, 5), D=(8, 32)),
    "edge": dict(T=(40, 300), N=(2, 4), D=(4, 16)),
}


@pytest.mark.parametrize("op", SM_OPS)
@pytest.mark.parametrize("kind,backend", COMBOS, ids=[f"{k}-{b}" for k, b in COMBOS])
@numerics_settings(3)
@given(data=st.data())
def test_semimarkov_float32(kind, backend, op, data):
    case = data.draw(sm_cases(kind, **SIZES[kind]), label="case")
    check_sm(case, backend, op)


# T = 500 / D = 32 and the left-to-right HSMM: test_regressions.py (section 6)


def _long_hsmm(kind: str, dtype):
    """A 3-state HSMM over 2,000 frames (D = 4) whose frame scores are about a thousand nats down (a
    Gaussian of many dimensions): the forward's log values reach 2e6."""
    import torch

    from zoo.inference import DenseSemiMarkov, LowRankSemiMarkov, RankSpaceSemiMarkov, SemiMarkovChain

    T, N, D = 2000, 3, 4
    g = torch.Generator().manual_seed(0)
    frames = torch.randn(T, 2, generator=g, dtype=torch.float64)
    means = torch.randn(N, 2, generator=g, dtype=torch.float64)
    unary = (-0.5 * ((frames[:, None] - means) ** 2).sum(-1) - 1000.0)[None]
    duration = torch.randn(N, D, generator=g, dtype=torch.float64).log_softmax(-1)
    left = torch.rand(N, 2, generator=g, dtype=torch.float64)
    right = torch.rand(N, 2, generator=g, dtype=torch.float64)
    if kind == "dense":
        factors = DenseSemiMarkov(unary.to(dtype), (left @ right.T).log().to(dtype), duration.to(dtype))
    elif kind == "lowrank":
        factors = LowRankSemiMarkov(unary.to(dtype), left.to(dtype), right.to(dtype), duration.to(dtype))
    else:  # rank-space: R = 2 ranks emitting the frames
        start = torch.full((N,), 1.0 / N, dtype=dtype)
        U, V = left.softmax(-1).to(dtype), right.softmax(0).to(dtype)
        factors = RankSpaceSemiMarkov(start, U, V, duration[:2].to(dtype), unary[..., :2].to(dtype))
    return SemiMarkovChain(factors)


@pytest.mark.parametrize("kind", ["dense", "lowrank", "rankspace"])
def test_a_long_hsmm_far_down_in_float32(kind):
    """Log Z within 8 eps (1 + |log Z|) (1.9 nats) and marginals within 5e-3 of float64 at 2,000 frames
    a thousand nats down. The forward keeps its log values shifted as it goes; unshifted, float32
    rounded the differences between them away: log Z 9.1, 5.3 and 2.7 nats off (dense, low-rank,
    rank-space), marginals 4.0, 4.3 and 1.7 % off; now 0.02-0.04 nats and 0.0025-0.06 %."""
    import torch

    low, exact = _long_hsmm(kind, torch.float32), _long_hsmm(kind, torch.float64)
    z = exact.log_partition
    assert (low.log_partition.double() - z).abs() <= 8 * 2**-23 * (1 + z.abs()), (low.log_partition, z)
    torch.testing.assert_close(low.marginals.double(), exact.marginals, rtol=0, atol=5e-3)
