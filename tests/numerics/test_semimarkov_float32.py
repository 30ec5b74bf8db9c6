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
