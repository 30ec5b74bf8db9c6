"""Hypothesis strategies for linear chains, and the glue that turns a ChainSpec into zoo objects."""

from __future__ import annotations

import math

import torch
from bruteforce import ChainSpec
from containers import chain_container
from hypothesis import strategies as st

DTYPE = torch.float64

# log-potentials (unary, dense transitions, init, embeddings, emissions)
LOGPOT = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False, width=64)
# non-negative features (low-rank left/right, rank-space start/U/V), kept away from 0
FEATURE = st.floats(0.05, 2.0, allow_nan=False, allow_infinity=False, width=64)


@st.composite
def tensors(draw, shape, elements=LOGPOT):
    n = math.prod(shape)
    vals = draw(st.lists(elements, min_size=n, max_size=n))
    return torch.tensor(vals, dtype=DTYPE).reshape(shape)


@st.composite
def sizes(draw, max_n=3, max_t=4, min_b=2, max_b=3, min_n=1, min_t=1):
    N = draw(st.integers(min_n, max_n))
    T = draw(st.integers(min_t, max_t))
    B = draw(st.integers(min_b, max_b))
    return B, T, N


@st.composite
def lengths_for(draw, B, T, allow_none=True):
    if allow_none and draw(st.integers(0, 4)) == 0:
        return None
    return torch.tensor(draw(st.lists(st.integers(1, T), min_size=B, max_size=B)), dtype=torch.long)


@st.composite
def init_for(draw, B, N):
    which = draw(st.sampled_from(["none", "shared", "batched"]))
    if which == "none":
        return None
    return draw(tensors((N,) if which == "shared" else (B, N)))


@st.composite
def chain_specs(
    draw, kind, max_n=3, max_t=4, min_b=2, max_b=3, forbid=False, lowrank_mode=None, min_n=1, min_t=1
):
    """A ChainSpec of the given kind.

    forbid (dense only): some transitions are -inf (never the diagonal, so every sequence that
    stays in one state is valid and log Z is finite).
    lowrank_mode: None = drawn, else one of "normalized", "unnormalized", "weighted".
    """
    B, T, N = draw(sizes(max_n, max_t, min_b, max_b, min_n, min_t))
    lengths = draw(lengths_for(B, T))
    if kind == "dense":
        per_pos = draw(st.booleans())
        shape = (B, T - 1, N, N) if per_pos else (N, N)
        transition = draw(tensors(shape))
        if forbid:
            mask = torch.tensor(
                draw(st.lists(st.booleans(), min_size=math.prod(shape), max_size=math.prod(shape))),
                dtype=torch.bool,
            ).reshape(shape)
            eye = torch.eye(N, dtype=torch.bool).expand(shape)
            mask = mask & ~eye
            if N > 1 and not mask.any():
                mask[..., 0, 1] = True  # at least one forbidden transition
            transition = transition.masked_fill(mask, float("-inf"))
        args = dict(unary=draw(tensors((B, T, N))), transition=transition, init=draw(init_for(B, N)))
    elif kind == "embedding":
        D = draw(st.integers(1, 3))
        emb = st.floats(-1.5, 1.5, allow_nan=False, allow_infinity=False, width=64)
        args = dict(
            unary=draw(tensors((B, T, N))),
            states=draw(tensors((N, D), emb)),
            init=draw(init_for(B, N)),
        )
    elif kind == "lowrank":
        R = draw(st.integers(1, 3))
        mode = lowrank_mode or draw(st.sampled_from(["normalized", "unnormalized", "weighted"]))
        args = dict(
            unary=draw(tensors((B, T, N))),
            left=draw(tensors((N, R), FEATURE)),
            right=draw(tensors((N, R), FEATURE)),
            init=draw(init_for(B, N)),
            normalize=(mode == "normalized"),
            log_rank_weights=draw(tensors((B, T - 1, R))) if mode == "weighted" else None,
        )
    elif kind == "rankspace":
        R = draw(st.integers(1, 3))
        start_shape = (N,) if draw(st.booleans()) else (B, N)
        args = dict(
            start=draw(tensors(start_shape, FEATURE)),
            U=draw(tensors((N, R), FEATURE)),
            V=draw(tensors((N, R), FEATURE)),
            emission=draw(tensors((B, T, R), st.floats(-3.0, 1.0, width=64))),
        )
    else:
        raise ValueError(kind)
    return ChainSpec(kind, args, lengths)


# --------------------------------------------------------------------------- zoo glue
def native_backend(kind):
    return {"dense": "exact", "embedding": "exact", "lowrank": "low-rank", "rankspace": "rank-space"}[kind]


def backends_for(kind):
    """(backend argument, label) pairs that must agree with brute force for this kind.

    None = the container's own backend; "randomized" is run with k1 = N, k2 = 0.
    """
    out = [None, "exact"]
    if native_backend(kind) != "exact":
        out.append(native_backend(kind))
    out.append("randomized")
    return out


ALL_COMBOS = [(k, be) for k in ("dense", "embedding", "lowrank", "rankspace") for be in backends_for(k)]


def combo_id(combo):
    k, be = combo
    return f"{k}-{be or 'native'}"


def build_factors(spec: ChainSpec):
    return chain_container(spec.kind, spec.args)


def build_dist(spec: ChainSpec, backend=None, options=None, generator=None):
    """LinearChain for spec. backend "randomized" without options gets RDPOptions(k1=N, k2=0)."""
    from zoo.inference import LinearChain, RDPOptions

    if backend == "randomized" and options is None:
        options = RDPOptions(spec.N, 0, generator=generator)
    return LinearChain(build_factors(spec), lengths=spec.lengths, backend=backend, options=options)


def with_grad(spec: ChainSpec, names):
    """Copy of spec whose named args are fresh leaf tensors with requires_grad=True."""
    args = dict(spec.args)
    for n in names:
        args[n] = args[n].detach().clone().requires_grad_(True)
    return ChainSpec(spec.kind, args, spec.lengths, dict(spec.meta))
