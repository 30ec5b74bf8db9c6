"""bfloat16 inputs (offered by chains and semi-Markov chains): against float64 on the same inputs,
within twice the error of a plain bfloat16 log-space DP plus a bfloat16-sized floor."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from numerics.checks import check_chain, check_sm, numerics_settings
from numerics.strategies import chain_cases, sm_cases

BF16 = torch.bfloat16

CHAIN = [
    ("dense", "native"),
    ("embedding", "native"),
    ("lowrank", "native"),
    ("rankspace", "native"),
    ("dense", "randomized-topk"),
]


@pytest.mark.parametrize("op", ["log_partition", "marginals", "entropy"])
@pytest.mark.parametrize("kind,backend", CHAIN, ids=[f"{k}-{b}" for k, b in CHAIN])
@numerics_settings(2)
@given(data=st.data())
def test_chain_bfloat16(kind, backend, op, data):
    case = data.draw(chain_cases(kind, sizes=((30, 400), (2, 12)), precision=BF16), label="case")
    check_chain(case, backend, op, low=BF16)


SM = [("dense", "native"), ("lowrank", "native"), ("rankspace", "native"), ("dense", "randomized-topk")]


@pytest.mark.parametrize("op", ["log_partition", "marginals", "entropy"])
@pytest.mark.parametrize("kind,backend", SM, ids=[f"{k}-{b}" for k, b in SM])
@numerics_settings(2)
@given(data=st.data())
def test_semimarkov_bfloat16(kind, backend, op, data):
    case = data.draw(sm_cases(kind, T=(40, 300), N=(2, 5), D=(8, 32), precision=BF16), label="case")
    check_sm(case, backend, op, low=BF16)
