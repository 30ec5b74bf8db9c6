"""Brute-force reference for the semi-Markov engine, written from docs/semimarkov-api.md alone.

Independent of ``zoo``: every quantity enumerates all segmentations (compositions of L into parts
1..D) and all state labelings of one batch element, scoring each term by term from the raw container
arguments in Python float arithmetic.

A model is an ``SMSpec``: the container kind and its raw arguments by their contract names.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import reductions
import torch
from reductions import log_value

NEG_INF = float("-inf")
KINDS = ("dense", "lowrank", "rankspace", "edge")


@dataclass
class SMSpec:
    """kind: "dense" | "lowrank" | "rankspace" | "edge"; args: the container's arguments:
    dense: unary, transition, duration, init; lowrank: unary, left, right, duration, init, normalize,
    self_transitions; rankspace: start, U, V, duration, emission; edge: first, edge.
    lengths: (B,) long or None (= all T)."""

    kind: str
    args: dict
    lengths: torch.Tensor | None = None

    @property
    def batch(self) -> int:
        key = {"rankspace": "emission", "edge": "first"}.get(self.kind, "unary")
        return self.args[key].shape[0]

    @property
    def T(self) -> int:
        if self.kind == "edge":
            return self.args["edge"].shape[1] + 1
        key = "emission" if self.kind == "rankspace" else "unary"
        return self.args[key].shape[1]

    @property
    def N(self) -> int:
        if self.kind == "rankspace":
            return self.args["U"].shape[0]
        if self.kind == "edge":
            return self.args["first"].shape[2]
        return self.args["unary"].shape[2]

    @property
    def D(self) -> int:
        if self.kind == "edge":
            return self.args["first"].shape[1]
        return self.args["duration"].shape[-1]

    def length(self, b: int) -> int:
        return self.T if self.lengths is None else int(self.lengths[b])

    def __repr__(self) -> str:
        parts = [f"kind={self.kind!r}", f"B={self.batch}", f"T={self.T}", f"N={self.N}", f"D={self.D}"]
        parts.append(f"lengths={None if self.lengths is None else self.lengths.tolist()}")
        for k, v in self.args.items():
            parts.append(f"{k}={v.tolist() if isinstance(v, torch.Tensor) else v!r}")
        return "SMSpec(" + ", ".join(parts) + ")"


def compositions(L: int, D: int):
    """All tuples of durations in 1..D summing to L."""
    if L == 0:
        yield ()
        return
    for d in range(1, min(D, L) + 1):
        for rest in compositions(L - d, D):
            yield (d,) + rest


def _at(x: torch.Tensor, b: int, batched_dim: int, *idx) -> float:
    """x[b, *idx] if x has ``batched_dim`` dims, else x[*idx]."""
    if x.dim() == batched_dim:
        return float(x[(b, *idx)])
    return float(x[idx])


def seg_score(spec: SMSpec, b: int, s: int, d: int, i: int | None, j: int) -> float:
    """seg(s, d, i, j) of the contract; i is None for the first segment."""
    a = spec.args
    if spec.kind in ("dense", "lowrank"):
        unary = a["unary"].detach().double()
        emit = sum(float(unary[b, t, j]) for t in range(s, s + d))
        dur = _at(a["duration"].detach().double(), b, 3, j, d - 1)
        if i is None:
            init = a.get("init")
            tr = 0.0 if init is None else _at(init.detach().double(), b, 2, j)
        elif spec.kind == "dense":
            tr = float(a["transition"].detach()[i, j])
        else:
            left, right = a["left"].detach().double(), a["right"].detach().double()
            N, R = left.shape

            def inner(p, q):
                return sum(float(left[p, r]) * float(right[q, r]) for r in range(R))

            allowed = [q for q in range(N) if a["self_transitions"] or q != i]
            if j not in allowed:
                tr = NEG_INF
            else:
                c = 1.0 / sum(inner(i, q) for q in allowed) if a["normalize"] else 1.0
                tr = log_value(c * inner(i, j))
        return tr + dur + emit
    if spec.kind == "rankspace":
        start = a["start"].detach().double()
        U, V = a["U"].detach().double(), a["V"].detach().double()
        dur, em = a["duration"].detach().double(), a["emission"].detach().double()
        N, R = U.shape
        w = [
            math.exp(_at(dur, b, 3, r, d - 1) + sum(float(em[b, t, r]) for t in range(s, s + d)))
            for r in range(R)
        ]
        if i is None:
            tot = sum(
                _at(start, b, 2, z0) * float(U[z0, r]) * float(V[j, r]) * w[r]
                for z0 in range(N)
                for r in range(R)
            )
        else:
            tot = sum(float(U[i, r]) * float(V[j, r]) * w[r] for r in range(R))
        return log_value(tot)
    if spec.kind == "edge":
        if i is None:
            return float(a["first"][b, d - 1, j])
        return float(a["edge"][b, s - 1, d - 1, i, j])
    raise ValueError(spec.kind)


def all_structures(spec: SMSpec, b: int):
    """{((s, d, z), ...): score} over every segmentation and labeling of element b."""
    L, N, D = spec.length(b), spec.N, spec.D
    cache = {}

    def sc(s, d, i, j):
        key = (s, d, i, j)
        if key not in cache:
            cache[key] = seg_score(spec, b, s, d, i, j)
        return cache[key]

    out = {}
    for durs in compositions(L, D):
        starts = [sum(durs[:k]) for k in range(len(durs))]
        for labels in itertools.product(range(N), repeat=len(durs)):
            total, prev = 0.0, None
            for s, d, z in zip(starts, durs, labels):
                total += sc(s, d, prev, z)
                prev = z
            out[tuple(zip(starts, durs, labels))] = total
    return out


def log_partition(spec: SMSpec, b: int) -> float:
    return reductions.log_sum(all_structures(spec, b).values())


def distribution(spec: SMSpec, b: int) -> dict:
    return reductions.distribution(all_structures(spec, b))


def segment_marginals(spec: SMSpec, b: int) -> torch.Tensor:
    """T x D x N."""
    out = torch.zeros(spec.T, spec.D, spec.N, dtype=torch.float64)
    for segs, p in distribution(spec, b).items():
        for s, d, z in segs:
            out[s, d - 1, z] += p
    return out


def marginals(spec: SMSpec, b: int) -> torch.Tensor:
    """T x N: p(frame t in a segment with state j)."""
    out = torch.zeros(spec.T, spec.N, dtype=torch.float64)
    for segs, p in distribution(spec, b).items():
        for s, d, z in segs:
            out[s : s + d, z] += p
    return out


def entropy(spec: SMSpec, b: int) -> float:
    return reductions.entropy(all_structures(spec, b))


def best(spec: SMSpec, b: int):
    return reductions.best(all_structures(spec, b))


def to_tensor_format(segs, T: int) -> list[int]:
    """Segments ((s, d, z), ...) -> the contract's format: state at each start, -1 elsewhere."""
    row = [-1] * T
    for s, _, z in segs:
        row[s] = z
    return row


def from_tensor_format(row, L: int):
    """The contract's format (one row) -> ((s, d, z), ...) within length L."""
    starts = [t for t in range(L) if int(row[t]) >= 0]
    out = []
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else L
        out.append((s, e - s, int(row[s])))
    return tuple(out)


def score_of(spec: SMSpec, b: int, segs) -> float:
    """Score of a segmentation; -inf if a segment is longer than D."""
    total, prev = 0.0, None
    for s, d, z in segs:
        if d > spec.D:
            return NEG_INF
        total += seg_score(spec, b, s, d, prev, z)
        prev = z
    return total
