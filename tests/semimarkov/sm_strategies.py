"""Hypothesis strategies for semi-Markov models, and the glue from an SMSpec to zoo objects."""

from __future__ import annotations

import math

import torch
from containers import semimarkov_container
from hypothesis import strategies as st
from sm_bruteforce import SMSpec

DTYPE = torch.float64
LOGPOT = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False, width=64)
FEATURE = st.floats(0.05, 2.0, allow_nan=False, allow_infinity=False, width=64)


@st.composite
def tensors(draw, shape, elements=LOGPOT):
    n = math.prod(shape)
    return torch.tensor(draw(st.lists(elements, min_size=n, max_size=n)), dtype=DTYPE).reshape(shape)


@st.composite
def sm_specs(
    draw, kind, max_n=3, max_t=4, max_d=3, min_b=2, max_b=3, min_n=1, forbid_self=None, min_d=1, min_t=1
):
    """An SMSpec of ``kind`` with ragged lengths (B >= 2 by default)."""
    N = draw(st.integers(min_n, max_n))
    T = draw(st.integers(min_t, max_t))
    D = draw(st.integers(min_d, max_d))
    B = draw(st.integers(min_b, max_b))
    lengths = None
    if draw(st.integers(0, 4)) > 0:
        lengths = torch.tensor(draw(st.lists(st.integers(1, T), min_size=B, max_size=B)), dtype=torch.long)
    if kind in ("dense", "lowrank"):
        duration = draw(tensors((N, D) if draw(st.booleans()) else (B, N, D)))
        init = draw(st.sampled_from(["none", "shared", "batched"]))
        init = None if init == "none" else draw(tensors((N,) if init == "shared" else (B, N)))
        args = dict(unary=draw(tensors((B, T, N))), duration=duration, init=init)
        if kind == "dense":
            trans = draw(tensors((N, N)))
            no_self = draw(st.booleans()) if forbid_self is None else forbid_self
            if no_self and N > 1:
                trans = trans.masked_fill(torch.eye(N, dtype=torch.bool), float("-inf"))
            args["transition"] = trans
        else:
            R = draw(st.integers(1, 3))
            self_tr = (not draw(st.booleans())) if forbid_self is None else not forbid_self
            args.update(
                left=draw(tensors((N, R), FEATURE)),
                right=draw(tensors((N, R), FEATURE)),
                normalize=draw(st.booleans()),
                self_transitions=self_tr or N == 1,
            )
    elif kind == "rankspace":
        R = draw(st.integers(1, 3))
        args = dict(
            start=draw(tensors((N,) if draw(st.booleans()) else (B, N), FEATURE)),
            U=draw(tensors((N, R), FEATURE)),
            V=draw(tensors((N, R), FEATURE)),
            duration=draw(tensors((R, D) if draw(st.booleans()) else (B, R, D))),
            emission=draw(tensors((B, T, R), st.floats(-3.0, 1.0, width=64))),
        )
    elif kind == "edge":
        args = dict(first=draw(tensors((B, D, N))), edge=draw(tensors((B, T - 1, D, N, N))))
    else:
        raise ValueError(kind)
    return SMSpec(kind, args, lengths)


def native_backend(kind):
    return {"dense": "exact", "edge": "exact", "lowrank": "low-rank", "rankspace": "rank-space"}[kind]


def backends_for(kind):
    """Backends that must agree with brute force ("randomized" with k1 = N, k2 = 0)."""
    out = [None, "exact"]
    if native_backend(kind) != "exact":
        out.append(native_backend(kind))
    if kind in ("dense", "lowrank"):
        out.append("randomized")
    return out


ALL_COMBOS = [(k, be) for k in ("dense", "lowrank", "rankspace", "edge") for be in backends_for(k)]


def combo_id(combo):
    return f"{combo[0]}-{combo[1] or 'native'}"


def build_factors(spec: SMSpec):
    return semimarkov_container(spec.kind, spec.args)


def build_dist(spec: SMSpec, backend=None, options=None, generator=None):
    from zoo.inference import RDPOptions, SemiMarkovChain

    if backend == "randomized" and options is None:
        options = RDPOptions(spec.N, 0, generator=generator)
    return SemiMarkovChain(build_factors(spec), lengths=spec.lengths, backend=backend, options=options)


def with_grad(spec: SMSpec, names):
    args = dict(spec.args)
    for n in names:
        args[n] = args[n].detach().clone().requires_grad_(True)
    return SMSpec(spec.kind, args, spec.lengths)


def grad_names(kind):
    names = {"dense": ["unary"], "lowrank": ["unary"], "rankspace": ["emission"], "edge": ["first", "edge"]}
    return names[kind]
