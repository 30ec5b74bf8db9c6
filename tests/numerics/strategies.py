"""Realistic inputs for the float32 / bfloat16 tests: Gaussian-scale emissions, hard topologies.

Hypothesis draws only a small configuration (sizes, topology, seed); the tensors are built from the
seed with a torch.Generator, in float64, then rounded through the low precision under test
(``Case.rounded``) so that the float64 and the low-precision run see the very same numbers.

Imported as ``numerics.strategies`` (tests/ is on sys.path; the name ``strategies`` is taken by
tests/strategies.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch
from containers import chain_container, semimarkov_container
from hypothesis import strategies as st

F64 = torch.float64
NEG_INF = float("-inf")

TOPOLOGIES = ("full", "peaked", "left-to-right", "banded", "forbidden")


# =========================================================================== tensors from a seed
def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def uniform(g, *shape, lo=0.0, hi=1.0):
    return lo + (hi - lo) * torch.rand(*shape, generator=g, dtype=F64)


def allowed_mask(N: int, topology: str, g, band: int = 1) -> torch.Tensor:
    """N x N bool: which transitions i -> j exist. The diagonal always does (log Z stays finite)."""
    i = torch.arange(N).unsqueeze(1)
    j = torch.arange(N).unsqueeze(0)
    if topology == "left-to-right":
        return (j == i) | (j == i + 1)
    if topology == "banded":
        return (j - i).abs() <= band
    if topology == "forbidden":
        m = torch.rand(N, N, generator=g) > 0.4
        return m | (i == j)
    return torch.ones(N, N, dtype=torch.bool)


def transition_matrix(g, N: int, topology: str, T: int = 100, very_negative: bool = True) -> torch.Tensor:
    """N x N log-transition rows (log-probabilities) of the given topology.

    full: log-softmax of N(0, 2) logits; peaked: log-softmax of N(0, 40) logits (entries down to a few
    hundred below 0); left-to-right: i -> i (prob 1 - N/T-ish) or i + 1, start fixed elsewhere;
    banded: |i - j| <= 1 or 2; forbidden: random -inf entries. very_negative: some allowed entries
    are set to about -1e4 (almost-forbidden transitions).
    """
    mask = allowed_mask(N, topology, g, band=1 + int(torch.randint(2, (1,), generator=g)))
    if topology == "left-to-right":
        stay = min(0.999, max(0.5, 1.0 - 2.0 * N / max(T, 1)))
        logits = torch.full((N, N), NEG_INF, dtype=F64)
        logits.fill_diagonal_(math.log(stay))
        idx = torch.arange(N - 1)
        logits[idx, idx + 1] = math.log(1 - stay)
        logits[N - 1, N - 1] = 0.0
        return logits
    scale = 40.0 if topology == "peaked" else 2.0
    logits = torch.randn(N, N, generator=g, dtype=F64) * scale
    if topology == "peaked":
        logits = logits + 30.0 * torch.eye(N, dtype=F64)
    logits = logits.masked_fill(~mask, NEG_INF)
    out = logits.log_softmax(-1)
    if very_negative and N > 2:
        off = ~torch.eye(N, dtype=torch.bool) & mask & (torch.rand(N, N, generator=g) < 0.15)
        out = torch.where(off, -1e4 * uniform(g, N, N, lo=0.5, hi=1.0), out)
    return out


def state_path(g, B: int, T: int, N: int, topology: str) -> torch.Tensor:
    """B x T states of a sticky walk that respects the topology's shape (used to make emissions)."""
    z = torch.zeros(B, T, dtype=torch.long)
    if topology != "left-to-right":
        z[:, 0] = torch.randint(N, (B,), generator=g)
    p_move = min(0.5, 2.0 * N / max(T, 1)) if topology == "left-to-right" else 0.08
    for t in range(1, T):
        move = torch.rand(B, generator=g) < p_move
        if topology == "left-to-right":
            nxt = (z[:, t - 1] + 1).clamp(max=N - 1)
        elif topology in ("banded",):
            nxt = (z[:, t - 1] + torch.randint(-1, 2, (B,), generator=g)).clamp(0, N - 1)
        else:
            nxt = torch.randint(N, (B,), generator=g)
        z[:, t] = torch.where(move, nxt, z[:, t - 1])
    return z


def gaussian_loglik(g, z: torch.Tensor, N: int, dim: int, scale: float) -> torch.Tensor:
    """B x T x N diagonal-Gaussian log-densities of frames drawn around the means of states z.

    Means N(0, scale^2) in ``dim`` dimensions, per-state variances in [0.5, 2]: a frame's
    log-likelihood is about -dim (1 + log 2 pi) / 2 under its own state and hundreds of nats lower
    under the others (values like -500 +- 200 at dim = 200).
    """
    B, T = z.shape
    means = torch.randn(N, dim, generator=g, dtype=F64) * scale
    var = uniform(g, N, dim, lo=0.5, hi=2.0)
    x = means[z] + torch.randn(B, T, dim, generator=g, dtype=F64) * var[z].sqrt()
    inv = 1.0 / var  # N x dim
    quad = (x * x) @ inv.T - 2.0 * x @ (means * inv).T + (means * means * inv).sum(-1)
    return -0.5 * (quad + torch.log(2 * math.pi * var).sum(-1))


def emissions(g, B, T, N, topology, kind="gaussian", dim=None):
    """B x T x N emission log-scores.

    "gaussian": diagonal-Gaussian log-likelihoods, states hundreds of nats apart (-500 +- 200 a frame);
    "close": the same magnitudes with state means close together (a few nats apart: an uncertain
    posterior on large numbers, the hard case for float32);
    "unaligned": as "gaussian", but the frames come from a walk over all states, not one that
    follows the topology (an HMM early in training: the reachable state is often not the likeliest);
    "mild": N(0, 3).
    """
    if kind == "mild":
        return torch.randn(B, T, N, generator=g, dtype=F64) * 3.0
    dim = dim or int(torch.randint(50, 201, (1,), generator=g))
    scale = (
        float(uniform(g, 1, lo=0.05, hi=0.15)) if kind == "close" else float(uniform(g, 1, lo=0.7, hi=1.5))
    )
    walk = "full" if kind == "unaligned" else topology
    return gaussian_loglik(g, state_path(g, B, T, N, walk), N, dim, scale)


def init_vector(g, N: int, kind: str) -> torch.Tensor | None:
    """None, a fixed start state ([0, -inf, ...]), a log-softmax, or one with random -inf entries."""
    if kind == "none":
        return None
    if kind == "fixed":
        out = torch.full((N,), NEG_INF, dtype=F64)
        out[0] = 0.0
        return out
    out = (torch.randn(N, generator=g, dtype=F64) * 3).log_softmax(-1)
    if kind == "masked" and N > 1:
        drop = torch.rand(N, generator=g) < 0.5
        drop[int(torch.randint(N, (1,), generator=g))] = False
        out = out.masked_fill(drop, NEG_INF)
    return out


def ragged_lengths(g, B: int, T: int) -> torch.Tensor:
    """(B,) lengths: the first is T, the others in [max(1, T // 2), T]."""
    L = torch.randint(max(1, T // 2), T + 1, (B,), generator=g)
    L[0] = T
    return L


# =========================================================================== cases
@dataclass
class Case:
    """Container kind, its raw float64 arguments (already rounded through ``precision``), lengths.

    Cases are cached (the builders are lru_cached): never modify their tensors in place.
    """

    structure: str  # "chain" | "semimarkov" | "tree"
    kind: str
    args: dict
    lengths: torch.Tensor | None
    meta: dict = field(default_factory=dict)  # sizes and the values drawn from the seed (R, mode, ...)
    call: dict = field(default_factory=dict)  # the builder's arguments, exactly as given

    def __repr__(self) -> str:
        """The call that rebuilds the case (a value drawn from the seed differs from the same value
        passed in: the generator is consumed differently), then what was drawn."""
        builder = {"chain": "chain_case", "semimarkov": "sm_case", "tree": "tree_case"}[self.structure]
        args = ", ".join(f"{k}={v!r}" for k, v in self.call.items())
        lengths = None if self.lengths is None else self.lengths.tolist()
        return f"{builder}({args})  # lengths={lengths}, {self.meta}"

    def _repr_pretty_(self, p, cycle):  # hypothesis prints falsifying examples with this
        p.text(repr(self))

    def cast(self, dtype) -> dict:
        return {
            k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in self.args.items()
        }


def rounded(args: dict, precision) -> dict:
    """Round every float tensor through ``precision`` and back to float64."""
    return {
        k: (v.to(precision).to(F64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in args.items()
    }


# --------------------------------------------------------------------------- chains
@functools.lru_cache(maxsize=64)
def chain_case(
    seed,
    kind="dense",
    B=2,
    T=50,
    N=4,
    topology="full",
    emission="gaussian",
    init="logsoftmax",
    per_position=False,
    ragged=True,
    precision=torch.float32,
    R=None,
    dim=None,
) -> Case:
    call = dict(locals())  # the exact call: a case's repr rebuilds it (and keys the reference cache)
    g = gen(seed)
    meta = dict(
        seed=seed,
        B=B,
        T=T,
        N=N,
        topology=topology,
        emission=emission,
        init=init,
        per_position=per_position,
        precision=str(precision).replace("torch.", ""),
    )
    if topology == "left-to-right":
        init = "fixed"
        meta["init"] = init
    lengths = ragged_lengths(g, B, T) if ragged else None
    if kind == "rankspace":
        R = R or int(torch.randint(2, 9, (1,), generator=g))
        meta["R"] = R
        U = torch.softmax(torch.randn(N, R, generator=g, dtype=F64) * 3, -1)  # p(r | z_prev)
        V = torch.softmax(torch.randn(N, R, generator=g, dtype=F64) * 3, 0)  # p(z | r)
        start = torch.softmax(torch.randn(N, generator=g, dtype=F64) * 2, -1)
        # emission[b, t, r] = log W[x_t, r]: log-probabilities of a word, down to about -1e3
        big = uniform(g, 1, lo=20.0, hi=400.0)
        emis = -(torch.randn(B, T, R, generator=g, dtype=F64).abs() * big)
        emis = torch.where(
            torch.rand(B, T, R, generator=g) < 0.05, -1e3 * uniform(g, B, T, R, lo=0.8, hi=1.0), emis
        )
        emis = torch.maximum(emis, torch.full_like(emis, -1e3))
        args = dict(start=start, U=U, V=V, emission=emis)
        return Case("chain", kind, rounded(args, precision), lengths, meta, call)
    unary = emissions(g, B, T, N, topology, emission, dim)
    it = init_vector(g, N, init)
    if kind == "dense":
        trans = transition_matrix(g, N, topology, T)
        if per_position:
            noise = torch.randn(B, T - 1, N, N, generator=g, dtype=F64) * 5.0
            trans = trans + noise  # -inf stays -inf
        args = dict(unary=unary, transition=trans, init=it)
    elif kind == "embedding":
        D = int(torch.randint(2, 17, (1,), generator=g))
        states = torch.randn(N, D, generator=g, dtype=F64) * (5.0 / math.sqrt(D))
        args = dict(unary=unary, states=states, init=it)
    elif kind == "lowrank":
        R = R or int(torch.randint(2, 9, (1,), generator=g))
        meta["R"] = R
        mode = ["normalized", "unnormalized", "weighted"][int(torch.randint(3, (1,), generator=g))]
        meta["mode"] = mode
        left = torch.exp(torch.randn(N, R, generator=g, dtype=F64) * 2)
        right = torch.exp(torch.randn(N, R, generator=g, dtype=F64) * 2)
        lrw = None
        if mode == "weighted":
            lrw = torch.randn(B, T - 1, R, generator=g, dtype=F64) * 10.0
        args = dict(
            unary=unary,
            left=left,
            right=right,
            init=it,
            normalize=(mode == "normalized"),
            log_rank_weights=lrw,
        )
    else:
        raise ValueError(kind)
    return Case("chain", kind, rounded(args, precision), lengths, meta, call)


def chain_factors(case: Case, dtype, **replaced):
    """The case's chain container in ``dtype``, with ``replaced`` arguments (e.g. a leaf)."""
    return chain_container(case.kind, {**case.cast(dtype), **replaced})


@st.composite
def chain_cases(
    draw,
    kind,
    sizes=((2, 200), (2, 8)),
    topologies=TOPOLOGIES,
    per_position=None,
    batch=(1, 3),
    emission=("gaussian", "close", "unaligned"),
    inits=("none", "fixed", "logsoftmax", "masked"),
    precision=torch.float32,
):
    """A chain Case: T and N from the ranges in ``sizes`` ((T lo, hi), (N lo, hi))."""
    (t_lo, t_hi), (n_lo, n_hi) = sizes
    T = draw(st.integers(t_lo, t_hi))
    N = draw(st.integers(n_lo, n_hi))
    B = draw(st.integers(*batch))
    topology = (
        draw(st.sampled_from(topologies))
        if kind == "dense"
        else draw(st.sampled_from(("full", "banded", "peaked")))
    )
    pp = draw(st.booleans()) if per_position is None else per_position
    return chain_case(
        draw(st.integers(0, 2**31 - 1)),
        kind=kind,
        B=B,
        T=T,
        N=N,
        topology=topology,
        emission=draw(st.sampled_from(emission)),
        init=draw(st.sampled_from(inits)),
        per_position=pp and kind == "dense",
        precision=precision,
    )


def fixed_proposal(case: Case, seed: int = 12345) -> torch.Tensor:
    """B x T x N float64 proposal weights with distinct values in every row (exact in float32 and
    bfloat16: a random permutation of 1..N, scaled): the top-K selection is the same in every dtype."""
    g = gen(seed)
    B, T, N = case.meta["B"], case.meta["T"], case.meta["N"]
    perm = torch.argsort(torch.rand(B, T, N, generator=g), -1)
    return (perm.to(F64) + 1.0) / 8.0


# --------------------------------------------------------------------------- semi-Markov chains
def duration_table(g, N: int, D: int, forbid=True) -> torch.Tensor:
    """N x D log-probabilities of durations 1..D: a peaked bump per state, some durations -inf."""
    centre = uniform(g, N, 1, lo=1.0, hi=float(D))
    width = uniform(g, N, 1, lo=1.0, hi=max(2.0, D / 3))
    d = torch.arange(1, D + 1, dtype=F64)
    out = (-0.5 * ((d - centre) / width) ** 2).log_softmax(-1)
    if forbid and D > 2:
        drop = torch.rand(N, D, generator=g) < 0.1
        drop[:, 0] = False  # duration 1 always allowed: every length has a segmentation
        out = out.masked_fill(drop, NEG_INF)
    return out


@functools.lru_cache(maxsize=32)
def sm_case(
    seed,
    kind="dense",
    B=2,
    T=100,
    N=4,
    D=8,
    topology="full",
    emission="gaussian",
    init="logsoftmax",
    ragged=True,
    precision=torch.float32,
    R=None,
    no_self=None,
) -> Case:
    call = dict(locals())  # the exact call: a case's repr rebuilds it (and keys the reference cache)
    g = gen(seed)
    meta = dict(
        seed=seed,
        B=B,
        T=T,
        N=N,
        D=D,
        topology=topology,
        emission=emission,
        init=init,
        precision=str(precision).replace("torch.", ""),
    )
    lengths = ragged_lengths(g, B, T) if ragged else None
    if kind == "rankspace":
        R = R or int(torch.randint(2, 9, (1,), generator=g))
        meta["R"] = R
        U = torch.softmax(torch.randn(N, R, generator=g, dtype=F64) * 3, -1)
        V = torch.softmax(torch.randn(N, R, generator=g, dtype=F64) * 3, 0)
        start = torch.softmax(torch.randn(N, generator=g, dtype=F64) * 2, -1)
        duration = duration_table(g, R, D)
        emis = gaussian_loglik(
            g,
            state_path(g, B, T, R, "full"),
            R,
            int(torch.randint(50, 201, (1,), generator=g)),
            float(uniform(g, 1, lo=0.7, hi=1.5)),
        )
        args = dict(start=start, U=U, V=V, duration=duration, emission=emis)
        return Case("semimarkov", kind, rounded(args, precision), lengths, meta, call)
    if topology == "left-to-right":
        init = "fixed"
        meta["init"] = init
    unary = emissions(g, B, T, N, topology, emission)
    it = init_vector(g, N, init)
    duration = duration_table(g, N, D)
    if kind == "dense":
        if topology == "left-to-right":
            # the classical left-to-right HSMM: i -> i + 1 only (the durations decide when to move);
            # the last state may repeat so that every length has a segmentation
            trans = torch.full((N, N), NEG_INF, dtype=F64)
            idx = torch.arange(N - 1)
            trans[idx, idx + 1] = 0.0
            trans[N - 1, N - 1] = 0.0
        else:
            trans = transition_matrix(g, N, topology, T)
            ns = bool(torch.rand(1, generator=g) < 0.5) if no_self is None else no_self
            meta["no_self"] = ns
            if ns and N > 1:
                trans = trans.masked_fill(torch.eye(N, dtype=torch.bool), NEG_INF)
        args = dict(unary=unary, transition=trans, duration=duration, init=it)
    elif kind == "lowrank":
        R = R or int(torch.randint(2, 9, (1,), generator=g))
        meta["R"] = R
        ns = bool(torch.rand(1, generator=g) < 0.5) if no_self is None else no_self
        meta["no_self"] = ns
        # features exp(N(0, 1)): without self-transitions the native backend subtracts diag(L R^T) from
        # the row sums, which cancels catastrophically (even in float64) with features spanning e^+-9
        args = dict(
            unary=unary,
            left=torch.exp(torch.randn(N, R, generator=g, dtype=F64)),
            right=torch.exp(torch.randn(N, R, generator=g, dtype=F64)),
            duration=duration,
            init=it,
            normalize=bool(torch.rand(1, generator=g) < 0.5),
            self_transitions=not ns or N == 1,
        )
    elif kind == "edge":
        # the dense HSMM's scores in edge form plus per-segment noise
        trans = transition_matrix(g, N, topology, T)
        cs = torch.cat([unary.new_zeros(B, 1, N), unary.cumsum(1)], 1)
        s = torch.arange(T).view(T, 1)
        d = torch.arange(1, D + 1).view(1, D)
        e = (s + d).clamp(max=T)
        seg = cs[:, e] - cs[:, s.expand(T, D)]  # B x T x D x N (segment emission)
        seg = seg + duration.T.unsqueeze(0).unsqueeze(0)
        first = seg[:, 0] + (it if it is not None else 0.0)
        edge = seg[:, 1:].unsqueeze(-2) + trans + torch.randn(B, T - 1, D, N, N, generator=g, dtype=F64)
        args = dict(first=first, edge=edge)
    else:
        raise ValueError(kind)
    return Case("semimarkov", kind, rounded(args, precision), lengths, meta, call)


def sm_factors(case: Case, dtype, **replaced):
    """The case's semi-Markov container in ``dtype``, with ``replaced`` arguments (e.g. a leaf)."""
    return semimarkov_container(case.kind, {**case.cast(dtype), **replaced})


@st.composite
def sm_cases(
    draw,
    kind,
    T=(100, 500),
    N=(2, 6),
    D=(8, 32),
    batch=(1, 2),
    topologies=("full", "peaked", "banded", "forbidden", "left-to-right"),
    precision=torch.float32,
):
    topology = draw(st.sampled_from(topologies if kind == "dense" else ("full", "banded", "peaked")))
    return sm_case(
        draw(st.integers(0, 2**31 - 1)),
        kind=kind,
        B=draw(st.integers(*batch)),
        T=draw(st.integers(*T)),
        N=draw(st.integers(*N)),
        D=draw(st.integers(*D)),
        topology=topology,
        init=draw(st.sampled_from(("none", "fixed", "logsoftmax", "masked"))),
        emission=draw(st.sampled_from(("gaussian", "close", "unaligned"))),
        precision=precision,
    )


# --------------------------------------------------------------------------- trees
@functools.lru_cache(maxsize=32)
def tree_case(
    seed, kind="dense", B=2, T=40, NT=3, PT=5, V=500, R=None, ragged=True, precision=torch.float32,
    buried=0.0,
) -> Case:
    """A PCFG over a batch of sentences: peaked rules with forbidden entries, words from a
    vocabulary of V with log-probabilities down to a few hundred below 0 (terms).

    ``buried`` > 0: every word is emitted by preterminal 0 alone (the others' terms 300 nats lower),
    and each child that is preterminal 0 lowers a rule by ``buried`` nats against its parent's other
    rules (rank-space: its V and W rows reach half the ranks, times exp(-buried), which the parents
    favour by 3 x buried nats over the others): every tree then uses rules that far below their
    parent's best, as a trained model's tail can be."""  # fmt: skip
    call = dict(locals())  # the exact call: a case's repr rebuilds it (and keys the reference cache)
    g = gen(seed)
    S = NT + PT
    meta = dict(seed=seed, B=B, T=T, NT=NT, PT=PT, precision=str(precision).replace("torch.", ""))
    L = torch.randint(max(2, T // 2), T + 1, (B,), generator=g)
    L[0] = T
    lengths = L if ragged else None
    root = (torch.randn(NT, generator=g, dtype=F64) * 3).log_softmax(-1)
    logits = torch.randn(NT, S * S, generator=g, dtype=F64) * 6.0
    drop = torch.rand(NT, S * S, generator=g) < 0.2
    # A -> N0 N0, A -> P0 N0 and A -> P0 P0 stay: every length parses (right-branching trees)
    drop[:, 0] = False
    drop[:, NT * S] = False
    drop[:, NT * S + NT] = False
    child_p0 = (torch.arange(S) == NT).to(F64)
    logits = logits - buried * (child_p0[:, None] + child_p0[None, :]).flatten()
    rules = logits.masked_fill(drop, NEG_INF).log_softmax(-1).view(NT, S, S)
    emission = (torch.randn(PT, V, generator=g, dtype=F64) * 8.0).log_softmax(-1)
    words = torch.randint(V, (B, T), generator=g)
    terms = emission[:, words].permute(1, 2, 0)  # B x T x PT
    if buried:
        terms = torch.cat([terms[..., :1], terms[..., 1:] - 300.0], -1)
    if kind == "dense":
        args = dict(root=root, rules=rules)
    elif kind == "lowrank":
        R = R or int(torch.randint(2, 6, (1,), generator=g))
        meta["R"] = R
        args = dict(
            root=root,
            rules=rules,
            head=torch.exp(torch.randn(NT, R, generator=g, dtype=F64) * 2),
            children=torch.exp(torch.randn(NT, NT, R, generator=g, dtype=F64) * 2) / NT,
        )
    elif kind == "rankspace":
        R = R or int(torch.randint(2, 6, (1,), generator=g))
        meta["R"] = R
        args = dict(
            root=root,
            U=torch.softmax(torch.randn(NT, R, generator=g, dtype=F64) * 3, -1),
            V=torch.softmax(torch.randn(S, R, generator=g, dtype=F64) * 3, 0),
            W=torch.softmax(torch.randn(S, R, generator=g, dtype=F64) * 3, 0),
        )
        if buried:  # preterminal 0 through the first half of the ranks only, buried nats down; the
            # parents use the other half 3 x buried nats less: the buried half decides every value
            half = R // 2
            for name in ("V", "W"):
                args[name][NT, :half] *= math.exp(-buried)
            args["U"][:, half:] *= math.exp(-3 * buried)
    else:
        raise ValueError(kind)
    args["terms"] = terms
    return Case("tree", kind, rounded(args, precision), lengths, meta, call)


def tree_grammar(case: Case, dtype):
    from zoo.inference import DenseGrammar, LowRankGrammar, RankSpaceGrammar

    a = case.cast(dtype)
    if case.kind == "dense":
        return DenseGrammar(a["root"], a["rules"])
    if case.kind == "lowrank":
        return LowRankGrammar(a["root"], a["rules"], a["head"], a["children"])
    if case.kind == "rankspace":
        return RankSpaceGrammar(a["root"], a["U"], a["V"], a["W"])
    raise ValueError(case.kind)


@st.composite
def tree_cases(draw, kind, T=(20, 40), NT=(2, 4), PT=(3, 6), batch=(1, 2), precision=torch.float32):
    return tree_case(
        draw(st.integers(0, 2**31 - 1)),
        kind=kind,
        B=draw(st.integers(*batch)),
        T=draw(st.integers(*T)),
        NT=draw(st.integers(*NT)),
        PT=draw(st.integers(*PT)),
        precision=precision,
    )
