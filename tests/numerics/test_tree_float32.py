"""Trees (CNF grammars) in float32: every grammar x backend x operation against itself in float64,
within twice the error of a plain float32 inside pass (one logsumexp over (split, B, C) a span).

Inputs: peaked rules with forbidden entries, terms = log-probabilities of words from a vocabulary of
500 (numerics/strategies.py); sentences up to T = 40 with few symbols (the inside pass is O(T^3)).
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numerics.checks import TREE_OPS, check_tree, numerics_settings
from numerics.strategies import tree_case, tree_cases

COMBOS = [
    ("dense", "native"),
    ("dense", "randomized-k1=NT"),
    ("dense", "randomized-topk"),
    ("lowrank", "native"),
    ("lowrank", "exact"),
    ("rankspace", "native"),
    ("rankspace", "state-space"),
    ("rankspace", "exact"),
    ("rankspace", "randomized-topk"),
]


@pytest.mark.parametrize("op", TREE_OPS)
@pytest.mark.parametrize("kind,backend", COMBOS, ids=[f"{k}-{b}" for k, b in COMBOS])
@numerics_settings(2)
@given(data=st.data())
def test_tree_float32(kind, backend, op, data):
    """Sentences of 10 to 30 words, 2 to 4 nonterminals, 3 to 6 preterminals."""
    case = data.draw(tree_cases(kind, T=(10, 30), NT=(2, 4), PT=(3, 6)), label="case")
    check_tree(case, backend, op)


T40 = [
    ("dense", "native"),
    ("lowrank", "native"),
    ("rankspace", "native"),
    ("rankspace", "state-space"),
    ("dense", "randomized-topk"),
]


@pytest.mark.parametrize("op", ["log_partition", "span_marginals", "marginals", "entropy", "argmax"])
@pytest.mark.parametrize("kind,backend", T40, ids=[f"{k}-{b}" for k, b in T40])
@numerics_settings(1)
@given(seed=st.integers(0, 2**31 - 1))
def test_tree_t40_float32(kind, backend, op, seed):
    """T = 40 (two sentences, one shorter), 3 nonterminals, 4 preterminals."""
    check_tree(tree_case(seed, kind=kind, B=2, T=40, NT=3, PT=4), backend, op)


BURIED = [
    ("dense", "native"),
    ("lowrank", "native"),
    ("rankspace", "native"),
    ("rankspace", "state-space"),
    ("dense", "randomized-k1=NT"),
]


@pytest.mark.parametrize("op", ["log_partition", "span_marginals", "marginals", "sample"])
@pytest.mark.parametrize("kind,backend", BURIED, ids=[f"{k}-{b}" for k, b in BURIED])
@numerics_settings(2)
@given(seed=st.integers(0, 2**31 - 1), T=st.integers(3, 14))
def test_tree_rules_buried_below_float32_range(kind, backend, op, seed, T):
    """Every tree needs rules 60 to 120 nats below their parent's best (``tree_case(buried=60)``):
    float32 keeps a scaled vector's entries only down to 2^-126 of its maximum, and the guard computes
    the sentences whose value came from below it again in float64 (docs/tree-api.md, Numerics)."""
    check_tree(tree_case(seed, kind=kind, B=3, T=T, NT=3, PT=4, R=4, buried=60.0), backend, op)
