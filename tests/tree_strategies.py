"""Hypothesis strategies that draw small TreeSpecs (tests/tree_bruteforce.py)."""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st
from tree_bruteforce import GRAMMAR_ARGS, TreeSpec, catalan, protected_rules

DTYPE = torch.float64

# log-potentials (root, rules, terms)
LOGPOT = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False, width=64)
# non-negative features (lowrank head/children, rankspace U/V/W), kept away from 0
FEATURE = st.floats(0.05, 2.0, allow_nan=False, allow_infinity=False, width=64)


@st.composite
def tensors(draw, shape, elements=LOGPOT):
    n = math.prod(shape)
    vals = draw(st.lists(elements, min_size=n, max_size=n))
    return torch.tensor(vals, dtype=DTYPE).reshape(shape)


def n_labelled(n: int, NT: int, PT: int) -> int:
    """Number of labelled trees of a length-n sentence: Catalan(n-1) NT^(n-1) PT^n."""
    return catalan(n - 1) * NT ** (n - 1) * PT**n


@st.composite
def tree_sizes(draw, max_t=5, max_nt=3, max_pt=3, min_b=1, max_b=3, min_t=2, max_trees=20_000):
    """(B, T, NT, PT) with at most max_trees labelled trees per full-length sentence (PT >= 1)."""
    T = draw(st.integers(min_t, max_t))
    NT = draw(st.integers(1, max_nt))
    fits = [p for p in range(1, max_pt + 1) if n_labelled(T, NT, p) <= max_trees] or [1]
    PT = draw(st.sampled_from(fits))
    B = draw(st.integers(min_b, max_b))
    return B, T, NT, PT


@st.composite
def tree_lengths(draw, B, T, allow_none=True):
    """None (= all T) or a (B,) long tensor of ragged lengths in 2..T."""
    if allow_none and draw(st.integers(0, 3)) == 0:
        return None
    return torch.tensor(draw(st.lists(st.integers(2, T), min_size=B, max_size=B)), dtype=torch.long)


@st.composite
def tree_specs(
    draw,
    kind,
    max_t=5,
    max_nt=3,
    max_pt=3,
    max_rank=3,
    min_b=1,
    max_b=3,
    min_t=2,
    forbid=False,
    batching=None,
    max_trees=20_000,
):
    """A TreeSpec of the given kind, float64.

    batching: None = each grammar tensor independently batched or shared; "shared" / "batched".
    forbid (dense, lowrank): some rule entries are -inf (never ``protected_rules``, so the
    all-label-0 tree stays finite and log Z is finite).
    max_trees: cap on labelled trees per sentence (keeps the enumeration fast).
    """
    B, T, NT, PT = draw(tree_sizes(max_t, max_nt, max_pt, min_b, max_b, min_t, max_trees))
    S = NT + PT
    R = draw(st.integers(1, max_rank))
    base = {
        "root": ((NT,), LOGPOT),
        "rules": ((NT, S, S), LOGPOT),
        "head": ((NT, R), FEATURE),
        "children": ((NT, NT, R), FEATURE),
        "U": ((NT, R), FEATURE),
        "V": ((S, R), FEATURE),
        "W": ((S, R), FEATURE),
    }
    args = {}
    for name in GRAMMAR_ARGS[kind]:
        shape, elements = base[name]
        batched = draw(st.booleans()) if batching is None else batching == "batched"
        args[name] = draw(tensors(((B,) if batched else ()) + shape, elements))
    if forbid and kind in ("dense", "lowrank"):
        rules = args["rules"]
        n = rules.numel()
        mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n))).reshape(rules.shape)
        for A, x, y in protected_rules(NT):
            mask[..., A, x, y] = False
        args["rules"] = rules.masked_fill(mask, float("-inf"))
    args["terms"] = draw(tensors((B, T, PT)))
    return TreeSpec(kind, args, draw(tree_lengths(B, T)))
