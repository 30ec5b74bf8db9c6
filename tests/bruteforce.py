"""Brute-force reference for the linear-chain engine (see docs/chain-api.md).

Independent of ``zoo``: every quantity is computed by enumerating all N^L state sequences of
one batch element (itertools.product), with the potentials evaluated term by term from the
raw container arguments, in Python float64 arithmetic.

A chain is described by a :class:`ChainSpec` (the raw arguments a container is built from);
``tests/strategies.py`` turns a spec into the ``zoo`` objects.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import reductions
import torch
from reductions import log_value

NEG_INF = float("-inf")

KINDS = ("dense", "embedding", "lowrank", "rankspace")


@dataclass
class ChainSpec:
    """Raw arguments of one chain.

    kind: "dense" | "embedding" | "lowrank" | "rankspace"
    args: the container arguments by their contract names:
        dense:     unary, transition, init (may be None)
        embedding: unary, states, init (may be None)
        lowrank:   unary, left, right, init (may be None), normalize (bool),
                   log_rank_weights (may be None)
        rankspace: start, U, V, emission
    lengths: (B,) long tensor or None (= all T)
    """

    kind: str
    args: dict
    lengths: torch.Tensor | None = None
    meta: dict = field(default_factory=dict)

    @property
    def batch(self) -> int:
        key = "emission" if self.kind == "rankspace" else "unary"
        return self.args[key].shape[0]

    @property
    def T(self) -> int:
        key = "emission" if self.kind == "rankspace" else "unary"
        return self.args[key].shape[1]

    @property
    def N(self) -> int:
        if self.kind == "rankspace":
            return self.args["U"].shape[0]
        return self.args["unary"].shape[2]

    def length(self, b: int) -> int:
        if self.lengths is None:
            return self.T
        return int(self.lengths[b])

    def __repr__(self) -> str:  # readable hypothesis falsifying examples
        parts = [f"kind={self.kind!r}", f"B={self.batch}", f"T={self.T}", f"N={self.N}"]
        parts.append(f"lengths={None if self.lengths is None else self.lengths.tolist()}")
        for k, v in self.args.items():
            parts.append(f"{k}={v.tolist() if isinstance(v, torch.Tensor) else v!r}")
        return "ChainSpec(" + ", ".join(parts) + ")"


def _f(x) -> float:
    return float(x)


# --------------------------------------------------------------------------- potentials
def potentials(spec: ChainSpec, b: int):
    """(init[N], unary[L][N], psi[L-1][N][N]) as Python floats for batch element b.

    psi[p-1][i][j] is logPsi into 0-based position p (p = 1..L-1).
    """
    a = spec.args
    N, L = spec.N, spec.length(b)
    k = spec.kind
    if k in ("dense", "embedding", "lowrank"):
        U = a["unary"].detach().double()
        unary = [[_f(U[b, p, j]) for j in range(N)] for p in range(L)]
        init_t = a.get("init")
        if init_t is None:
            init = [0.0] * N
        else:
            init_t = init_t.detach().double()
            init = [_f(init_t[b, j] if init_t.dim() == 2 else init_t[j]) for j in range(N)]
    if k == "dense":
        tr = a["transition"].detach().double()
        psi = []
        for p in range(1, L):
            m = tr if tr.dim() == 2 else tr[b, p - 1]
            psi.append([[_f(m[i, j]) for j in range(N)] for i in range(N)])
    elif k == "embedding":
        S = a["states"].detach().double()
        D = S.shape[1]
        m = [[sum(_f(S[i, d]) * _f(S[j, d]) for d in range(D)) for j in range(N)] for i in range(N)]
        psi = [m for _ in range(1, L)]
    elif k == "lowrank":
        left = a["left"].detach().double()
        right = a["right"].detach().double()
        R = left.shape[1]
        lrw = a.get("log_rank_weights")
        psi = []
        for p in range(1, L):
            m = [[0.0] * N for _ in range(N)]
            for i in range(N):
                for j in range(N):
                    if a.get("normalize", True):
                        if lrw is not None:
                            raise NotImplementedError("normalize=True with log_rank_weights")
                        num = sum(_f(left[i, r]) * _f(right[j, r]) for r in range(R))
                        den = sum(_f(left[i, r]) * sum(_f(right[kk, r]) for kk in range(N)) for r in range(R))
                        m[i][j] = log_value(num) - math.log(den)
                    else:
                        tot = 0.0
                        for r in range(R):
                            w = 0.0 if lrw is None else _f(lrw[b, p - 1, r])
                            tot += _f(left[i, r]) * math.exp(w) * _f(right[j, r])
                        m[i][j] = log_value(tot)
            psi.append(m)
    elif k == "rankspace":
        start = a["start"].detach().double()
        Uf = a["U"].detach().double()
        Vf = a["V"].detach().double()
        em = a["emission"].detach().double()
        R = Uf.shape[1]

        def st(z0):
            return _f(start[b, z0] if start.dim() == 2 else start[z0])

        unary = [[0.0] * N for _ in range(L)]
        init = []
        for z1 in range(N):
            tot = 0.0
            for z0 in range(N):
                for r in range(R):
                    tot += st(z0) * _f(Uf[z0, r]) * math.exp(_f(em[b, 0, r])) * _f(Vf[z1, r])
            init.append(log_value(tot))
        psi = []
        for p in range(1, L):
            m = [[0.0] * N for _ in range(N)]
            for i in range(N):
                for j in range(N):
                    tot = 0.0
                    for r in range(R):
                        tot += _f(Uf[i, r]) * math.exp(_f(em[b, p, r])) * _f(Vf[j, r])
                    m[i][j] = log_value(tot)
            psi.append(m)
    else:
        raise ValueError(k)
    return init, unary, psi


def seq_score(spec: ChainSpec, b: int, seq, pots=None) -> float:
    """score(z) for the first L entries of seq (entries past the length are ignored)."""
    init, unary, psi = pots if pots is not None else potentials(spec, b)
    L = spec.length(b)
    z = [int(s) for s in list(seq)[:L]]
    s = init[z[0]]
    for p in range(L):
        s += unary[p][z[p]]
    for p in range(1, L):
        s += psi[p - 1][z[p - 1]][z[p]]
    return s


def scores(spec: ChainSpec, b: int) -> dict:
    """{sequence tuple (length L): score} over all N^L sequences."""
    pots = potentials(spec, b)
    L, N = spec.length(b), spec.N
    return {z: seq_score(spec, b, z, pots) for z in itertools.product(range(N), repeat=L)}


# --------------------------------------------------------------------------- quantities
def log_partition(spec: ChainSpec, b: int) -> float:
    return reductions.log_sum(scores(spec, b).values())


def distribution(spec: ChainSpec, b: int) -> dict:
    """{sequence tuple (length L): probability}."""
    return reductions.distribution(scores(spec, b))


def marginals(spec: ChainSpec, b: int) -> torch.Tensor:
    """T x N, p(z_t = i); zero past the length."""
    out = torch.zeros(spec.T, spec.N, dtype=torch.float64)
    for z, p in distribution(spec, b).items():
        for t, s in enumerate(z):
            out[t, s] += p
    return out


def pairwise_marginals(spec: ChainSpec, b: int) -> torch.Tensor:
    """(T-1) x N x N, [t-2, i, j] = p(z_{t-1}=i, z_t=j) (1-based t); zero past the length."""
    out = torch.zeros(max(spec.T - 1, 0), spec.N, spec.N, dtype=torch.float64)
    for z, p in distribution(spec, b).items():
        for t in range(1, len(z)):
            out[t - 1, z[t - 1], z[t]] += p
    return out


def entropy(spec: ChainSpec, b: int) -> float:
    return reductions.entropy(scores(spec, b))


def best(spec: ChainSpec, b: int):
    """(one best sequence, its score)."""
    return reductions.best(scores(spec, b))


def max_score(spec: ChainSpec, b: int) -> float:
    return best(spec, b)[1]
