"""Glue of the float32 / bfloat16 tests: run one operation of one backend in float64 and in the low
precision on the same inputs, and hold the difference to twice the error of the plain log-space DP
(numerics/reference.py) on those inputs.

Every ``check_*`` function:
  1. calls the float64 engine first; if it raises ValueError/TypeError the low precision must too;
  2. checks the float64 engine against the float64 plain DP (a sanity check of the yardstick: if it
     fails, the float64 answer itself is wrong -- NaN, or a different quantity -- and the message
     says so);
  3. checks the low-precision answer: finite wherever float64 is finite, and
     |q_low - q64| <= 2 |ref_low - ref64| + floor (``assert_float32_close``).
"""

from __future__ import annotations

import os
from collections import OrderedDict

import torch
from hypothesis import HealthCheck, Phase, seed, settings

from numerics import reference as ref
from numerics.reference import fail
from numerics.strategies import Case, chain_factors, fixed_proposal, sm_factors, tree_grammar

F64 = torch.float64
NEG_INF = float("-inf")


SEED = 20_240_611


def numerics_settings(max_examples: int):
    """Few deterministic examples (a fixed @seed: every parametrization of a test draws the same
    cases, so the plain-DP references are computed once per case); no shrinking (a failing example
    is reported as drawn: shrinking would re-run slow DPs many times). ``$ZOO_NUMERICS_MAX_EXAMPLES``
    caps the examples (the GPU runs of scripts/gpu_tests.sh, where each small DP step is a launch)."""
    max_examples = min(max_examples, int(os.environ.get("ZOO_NUMERICS_MAX_EXAMPLES", max_examples)))
    s = settings(
        max_examples=max_examples,
        database=None,
        phases=(Phase.explicit, Phase.generate),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )

    def deco(fn):
        return seed(SEED)(s(fn))

    return deco


def prob_floor(dtype):
    """Absolute slack of a probability (a marginal)."""
    return 1e-5 if dtype == torch.float32 else 4 * ref.EPS[dtype]


def log_floor(q64, dtype):
    return ref.logz_floor(q64, dtype)


def entropy_floor(h64, lengths, logz64, dtype):
    """eps (8 (1 + |H|) + L + |log Z|): an entropy is a sum of L per-position terms of order 1, and
    any formula for it touches log Z (exact backends: log Z - E[score]), rounded at eps |log Z|."""
    lz = torch.nan_to_num(logz64.detach().double().abs(), posinf=0.0)
    return ref.EPS[dtype] * (8 * (1 + h64.detach().double().abs()) + lengths.double() + lz)


# marginals: the plain DP's error is taken as its worst over each sequence (all axes but the batch):
# its error at one entry varies with the rounding of that entry's alpha and beta, and a lucky entry
# sets no bound
PER_SEQUENCE = {3: (1, 2), 4: (1, 2, 3), 5: (1, 2, 3, 4)}


def label(dtype):
    return str(dtype).replace("torch.", "")


# --------------------------------------------------------------------------- reference cache
_CACHE: OrderedDict = OrderedDict()


def cached(key, build):
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    val = build()
    _CACHE[key] = val
    while len(_CACHE) > 48:
        _CACHE.popitem(last=False)
    return val


def sanity(name, q64, r64, atol):
    """The float64 engine agrees with the float64 plain DP (else the comparison means nothing)."""
    q = q64.detach().double()
    r = r64.detach().double()
    bad_nan = torch.isnan(q) & ~torch.isnan(r)
    if bad_nan.any():
        idx = tuple(int(i) for i in bad_nan.nonzero()[0])
        fail(f"{name}: the float64 engine itself gives NaN at {idx} (plain float64 DP: {r[idx].item():.10g})")
    fin = torch.isfinite(r)
    mism = (~fin & (q != r)) | (fin & ~torch.isfinite(q))
    err = torch.where(fin & torch.isfinite(q), (q - r).abs(), torch.zeros_like(q))
    tol = torch.as_tensor(atol, dtype=F64).expand_as(q)
    over = mism | (err > tol)
    if over.any():
        d = torch.where(mism, torch.full_like(err, float("inf")), err / tol)
        idx = tuple(int(i) for i in torch.unravel_index(torch.argmax(d), q.shape))
        fail(
            f"{name}: the float64 engine disagrees with the float64 plain DP at {idx}: "
            f"engine {q[idx].item():.10g}, "
            f"plain DP {r[idx].item():.10g} (tolerance {tol[idx].item():.2g}; {int(over.sum())} entries)"
        )


def operations(structure: str) -> tuple[str, ...]:
    """The operations the capability table lists for ``structure``: every one is checked here."""
    from zoo.inference.capabilities import STRUCTURES

    return next(s.operations for s in STRUCTURES if s.name == structure)


# =========================================================================== chains
CHAIN_OPS = operations("linear chain")
# operations that the randomized backend estimates (the others are exact fallbacks on the dense chain)
CHAIN_ESTIMATES = ("log_partition", "marginals", "entropy", "rsample")


def chain_dense64(case: Case):
    """(unary, transition, init) of the chain's dense form in float64 (docs: ``factors.dense()``)."""
    if case.kind == "dense":
        a = case.args
        N = a["unary"].shape[-1]
        init = a["init"] if a["init"] is not None else torch.zeros(N, dtype=F64)
        return a["unary"], a["transition"], init
    dn = chain_factors(case, F64).dense()
    return dn.unary.detach(), dn.transition.detach(), dn.init.detach()


def chain_keep(case: Case, backend: dict):
    if backend.get("topk"):
        prop = fixed_proposal(case)
        k1 = backend["k1"](case.meta["N"])
        return torch.zeros_like(prop, dtype=torch.bool).scatter_(-1, prop.topk(k1, -1).indices, True)
    return None


def chain_refs(case: Case, low, keep=None, pairwise=False):
    """(ref64, ref_low) of the plain DP on the chain's dense form (restricted to ``keep``)."""

    def build(dtype):
        u, tr, it = chain_dense64(case)
        if keep is not None:
            u = u.masked_fill(~keep, NEG_INF)
        return ref.ChainRef(u.to(dtype), tr.to(dtype), it.to(dtype), case.lengths, pairwise=pairwise)

    kk = None if keep is None else keep.sum().item()
    r64 = cached((repr(case), kk, pairwise, "f64"), lambda: build(F64))
    rlo = cached((repr(case), kk, pairwise, label(low)), lambda: build(low))
    return r64, rlo


# backends: name -> dict(backend=..., options builder)
CHAIN_BACKENDS = {
    "native": dict(backend=None),
    "exact": dict(backend="exact"),
    "low-rank": dict(backend="low-rank"),
    "rank-space": dict(backend="rank-space"),
    "randomized-k1=N": dict(backend="randomized", k1=lambda N: N),
    "randomized-topk": dict(backend="randomized", k1=lambda N: max(1, N // 2), topk=True),
}


def chain_dist(case: Case, be: dict, dtype, grad=False):
    from zoo.inference import LinearChain, RDPOptions

    leaf, replaced = None, {}
    if grad:
        name = "emission" if case.kind == "rankspace" else "unary"
        leaf = replaced[name] = case.cast(dtype)[name].clone().requires_grad_(True)
    factors = chain_factors(case, dtype, **replaced)
    options = None
    if be["backend"] == "randomized":
        N = case.meta["N"]
        prop = fixed_proposal(case).to(dtype)
        options = RDPOptions(be["k1"](N), 0, proposal=prop, generator=torch.Generator().manual_seed(0))
    dist = LinearChain(factors, lengths=case.lengths, backend=be["backend"], options=options)
    return (dist, leaf) if grad else dist


def _states_mask(lengths, B, T):
    L = torch.full((B,), T) if lengths is None else lengths
    return torch.arange(T).unsqueeze(0) < L.unsqueeze(1)


def check_chain(case: Case, backend_name: str, op: str, low=torch.float32):
    be = CHAIN_BACKENDS[backend_name]
    what = label(low)
    name = f"chain {case.kind} [{backend_name}] {op} ({what})"
    keep = chain_keep(case, be) if op in CHAIN_ESTIMATES else None
    B, T, N = case.meta["B"], case.meta["T"], case.meta["N"]
    valid = _states_mask(case.lengths, B, T)

    if op == "rsample":
        return _check_rsample(
            name,
            case,
            be,
            low,
            valid,
            lambda dt: chain_dist(case, be, dt, grad=True),
            lambda r: r.sum(-1),
            what,
        )

    d64 = chain_dist(case, be, F64)
    dlo = chain_dist(case, be, low)
    r64, rlo = chain_refs(case, low, keep, pairwise=(op == "pairwise_marginals"))

    if op in ("log_partition", "entropy"):
        _check_total(name, op, d64, dlo, r64, rlo, low, what, r64.lengths)
        if op == "log_partition":  # the path with a backward, besides the no-grad one above
            dlo_grad, _ = chain_dist(case, be, low, grad=True)
            _check_total(f"{name} (with grad)", op, d64, dlo_grad, r64, rlo, low, what, r64.lengths)
    elif op in ("marginals", "pairwise_marginals"):
        _check_marginals(name, op, d64, dlo, r64, rlo, low, what)
    elif op == "log_prob":
        g = torch.Generator().manual_seed(int(case.meta["seed"]) % 1000)
        try:
            states = torch.cat([d64.sample(3, generator=g), d64.argmax.unsqueeze(0)], 0)
        except (ValueError, TypeError):
            return _expect_raise(name, lambda: dlo.log_partition, what)
        _check_log_prob(name, d64, dlo, r64, rlo, states, low, what)
    elif op == "argmax":
        _check_argmax(name, d64, dlo, r64, rlo, low, what, lambda a: _check_path_format(name, a, valid, N))
    elif op == "sample":
        _check_samples(name, d64, dlo, r64, 16, what, lambda x: _check_path_format(name, x, valid, N))
    else:
        raise ValueError(op)


def _expect_raise(name, fn, what):
    try:
        fn()
    except (ValueError, TypeError):
        return
    fail(f"{name}: float64 raised but {what} did not")


def _check_total(name, op, d64, dlo, r64, rlo, low, what, entropy_terms, check64=None):
    """log_partition or entropy (B,): float64 against the plain DP (``check64``, default ``sanity``),
    the low precision against float64; ``entropy_terms`` (B,) sizes the entropy's floor."""
    out = ref.run_pair(name, lambda: getattr(d64, op), lambda: getattr(dlo, op), what)
    if out is None:
        return
    q64, qlo = out
    r_64, r_lo = getattr(r64, op), getattr(rlo, op)
    (check64 or sanity)(name, q64, r_64, 1e-7 * (1 + r_64.abs()))
    if op == "log_partition":
        fl = log_floor(q64, low)
    else:
        fl = entropy_floor(q64, entropy_terms, r64.log_partition, low)
    ref.assert_float32_close(name, qlo, q64, ref.ref_error(r_lo, r_64), fl, what=what)


def _check_marginals(name, op, d64, dlo, r64, rlo, low, what, check64=None):
    """A marginal tensor: float64 against the plain DP, the low precision against float64 with the
    plain DP's error taken per sequence."""
    out = ref.run_pair(name, lambda: getattr(d64, op), lambda: getattr(dlo, op), what)
    if out is None:
        return
    q64, qlo = out
    r_64, r_lo = getattr(r64, op), getattr(rlo, op)
    (check64 or sanity)(name, q64, r_64, 1e-6)
    per_sequence = PER_SEQUENCE[q64.dim()]
    ref.assert_float32_close(
        name, qlo, q64, ref.ref_error(r_lo, r_64), prob_floor(low), reduce_dims=per_sequence, what=what
    )


def _check_log_prob(name, d64, dlo, r64, rlo, structures, low, what):
    """log_prob of given structures (paths, segmentations, trees): float64 against the plain DP, the
    low precision against float64 within twice the plain DP's error."""
    out = ref.run_pair(name, lambda: d64.log_prob(structures), lambda: dlo.log_prob(structures), what)
    if out is None:
        return
    q64, qlo = out
    lp64 = r64.score(structures) - r64.log_partition
    lplo = rlo.score(structures) - rlo.log_partition
    sanity(name, q64, lp64, 1e-7 * (1 + r64.log_partition.abs()))
    ref.assert_float32_close(
        name, qlo, q64, ref.ref_error(lplo, lp64), log_floor(r64.log_partition, low).unsqueeze(0), what=what
    )


def _check_argmax(name, d64, dlo, r64, rlo, low, what, check_format):
    """max_score against float64, and the low-precision argmax scored in float64 within the budget of
    the best structure's score."""
    out = ref.run_pair(name, lambda: (d64.argmax, d64.max_score), lambda: (dlo.argmax, dlo.max_score), what)
    if out is None:
        return
    (_, m64), (alo, mlo) = out
    sanity(name + " max_score", m64, r64.max_score, 1e-7 * (1 + r64.max_score.abs()))
    err = ref.ref_error(rlo.max_score, r64.max_score)
    fl = log_floor(m64, low)
    ref.assert_float32_close(name + " max_score", mlo, m64, err, fl, what=what)
    check_format(alo)
    s = r64.score(alo)  # the low-precision argmax scored in float64
    gap = r64.max_score - s
    budget = 2 * err + fl
    if not (torch.isfinite(s) | ~torch.isfinite(r64.max_score)).all() or (gap > budget).any():
        b = int(torch.argmax(torch.nan_to_num(gap - budget, nan=float("inf"))))
        fail(
            f"{name}: the {what} argmax scores {s[b].item():.10g} in float64, the best "
            f"{r64.max_score[b].item():.10g}: {gap[b].item():.3g} short > budget {budget[b].item():.3g} "
            f"(batch {b})"
        )


def _check_samples(name, d64, dlo, r64, n, what, check_format):
    """n low-precision samples (same seed as float64's): well formed, and each of non-zero probability."""
    out = ref.run_pair(
        name,
        lambda: d64.sample(n, generator=torch.Generator().manual_seed(1)),
        lambda: dlo.sample(n, generator=torch.Generator().manual_seed(1)),
        what,
    )
    if out is None:
        return
    _, slo = out
    check_format(slo)
    s = r64.score(slo)
    bad = torch.isfinite(r64.log_partition).unsqueeze(0).expand_as(s) & ~torch.isfinite(s)
    if bad.any():
        i, b = (int(x) for x in bad.nonzero()[0])
        fail(
            f"{name}: {what} sample {i} of batch {b} has probability 0 in float64 "
            f"({int(bad.sum())} of {s.numel()} samples impossible)"
        )


def _check_path_format(name, paths, valid, N):
    p = paths if paths.dim() == 3 else paths.unsqueeze(0)
    v = valid.unsqueeze(0).expand_as(p)
    ok = torch.where(v, (p >= 0) & (p < N), p == -1)
    if not ok.all():
        idx = tuple(int(i) for i in (~ok).nonzero()[0])
        fail(
            f"{name}: malformed path entry {p[idx].item()} at {idx} "
            f"(valid states 0..{N - 1}, -1 past the length)"
        )


def _check_rsample(name, case, be, low, valid, make, per_position_sum, what):
    """rsample: float64 first; the low-precision relaxed sample is finite, in [0, 1], zero past each
    length, sums to 1 per position (chains), and its gradient (of a fixed weighting) is finite."""
    d64, leaf64 = make(F64)
    dlo, leaflo = make(low)
    tol = 1e-3 if low == torch.float32 else 5e-2
    out = ref.run_pair(
        name,
        lambda: d64.rsample(temperature=1.0, generator=torch.Generator().manual_seed(2)),
        lambda: dlo.rsample(temperature=1.0, generator=torch.Generator().manual_seed(2)),
        what,
    )
    if out is None:
        return
    r64, rlo = out
    assert rlo.shape == r64.shape, f"{name}: shape {tuple(rlo.shape)} != {tuple(r64.shape)}"
    x = rlo.detach().double()
    if not torch.isfinite(x).all():
        idx = tuple(int(i) for i in (~torch.isfinite(x)).nonzero()[0])
        fail(f"{name}: {what} relaxed sample is {x[idx].item()} at {idx}")
    if ((x < -tol) | (x > 1 + tol)).any():
        fail(f"{name}: {what} relaxed sample outside [0, 1]: min {x.min().item()}, max {x.max().item()}")
    if per_position_sum is not None:
        s = per_position_sum(x)
        bad = valid & ((s - 1).abs() > tol)
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            fail(f"{name}: {what} relaxed one-hot sums to {s[idx].item():.6g} at {idx}")
        past = (~valid).unsqueeze(-1).expand_as(x) & (x != 0)
        if past.any():
            fail(f"{name}: {what} relaxed sample non-zero past the length")
    w = torch.linspace(-1, 1, rlo.numel(), dtype=rlo.dtype).view_as(rlo)
    try:
        (g,) = torch.autograd.grad((rlo * w).sum(), [leaflo])
    except Exception as e:  # noqa: BLE001
        fail(f"{name}: backward of the {what} relaxed sample raised {type(e).__name__}: {e}")
    if not torch.isfinite(g).all():
        idx = tuple(int(i) for i in (~torch.isfinite(g)).nonzero()[0])
        fail(
            f"{name}: gradient of the {what} relaxed sample is {g[idx].item()} at {idx} "
            f"({int((~torch.isfinite(g)).sum())} of {g.numel()} entries)"
        )


# =========================================================================== semi-Markov chains
SM_OPS = operations("semi-Markov chain")
SM_ESTIMATES = ("log_partition", "segment_marginals", "marginals", "entropy")

SM_BACKENDS = CHAIN_BACKENDS  # the same backend names and options


def sm_form64(case: Case) -> ref.SMForm:
    if case.kind == "dense":
        a = case.args
        return ref.dense_sm_form(a["unary"], a["transition"], a["duration"], a["init"])
    dn = sm_factors(case, F64).dense()
    if type(dn).__name__ == "DenseSemiMarkov":
        return ref.dense_sm_form(
            dn.unary.detach(), dn.transition.detach(), dn.duration.detach(), dn.init.detach()
        )
    return ref.SMForm("edge", first=dn.first.detach(), edge=dn.edge.detach())


def sm_refs(case: Case, low, keep=None):
    def build(dtype):
        return ref.SMRef(sm_form64(case).to(dtype), case.lengths, keep=keep)

    kk = None if keep is None else keep.sum().item()
    r64 = cached((repr(case), kk, "f64"), lambda: build(F64))
    rlo = cached((repr(case), kk, label(low)), lambda: build(low))
    return r64, rlo


def sm_dist(case: Case, be: dict, dtype, grad=False):
    from zoo.inference import RDPOptions, SemiMarkovChain

    leaf, replaced = None, {}
    if grad:
        name = {"rankspace": "emission", "edge": "edge"}.get(case.kind, "unary")
        leaf = replaced[name] = case.cast(dtype)[name].clone().requires_grad_(True)
    factors = sm_factors(case, dtype, **replaced)
    options = None
    if be["backend"] == "randomized":
        prop = fixed_proposal(case).to(dtype)
        options = RDPOptions(
            be["k1"](case.meta["N"]), 0, proposal=prop, generator=torch.Generator().manual_seed(0)
        )
    dist = SemiMarkovChain(factors, lengths=case.lengths, backend=be["backend"], options=options)
    return (dist, leaf) if grad else dist


def _check_segmentation_format(name, segs, lengths, N):
    p = segs if segs.dim() == 3 else segs.unsqueeze(0)
    S, B, T = p.shape
    valid = _states_mask(lengths, B, T).unsqueeze(0).expand_as(p)
    ok = torch.where(valid, (p >= -1) & (p < N), p == -1) & (p[..., 0] >= 0).unsqueeze(-1)
    if not ok.all():
        idx = tuple(int(i) for i in (~ok).nonzero()[0])
        fail(f"{name}: malformed segmentation entry {p[idx].item()} at {idx}")


def check_sm(case: Case, backend_name: str, op: str, low=torch.float32):
    be = SM_BACKENDS[backend_name]
    what = label(low)
    name = f"semi-Markov {case.kind} [{backend_name}] {op} ({what})"
    keep = chain_keep(case, be) if op in SM_ESTIMATES else None
    N = case.meta["N"]

    def segmentation_format(segs):
        _check_segmentation_format(name, segs, case.lengths, N)

    if op == "rsample":
        B, T = case.meta["B"], case.meta["T"]
        return _check_rsample(
            name,
            case,
            be,
            low,
            _states_mask(case.lengths, B, T),
            lambda dt: sm_dist(case, be, dt, grad=True),
            None,
            what,
        )

    d64 = sm_dist(case, be, F64)
    dlo = sm_dist(case, be, low)
    r64, rlo = sm_refs(case, low, keep)
    if op in ("log_partition", "entropy"):
        _check_total(name, op, d64, dlo, r64, rlo, low, what, r64.lengths)
    elif op in ("segment_marginals", "marginals"):
        _check_marginals(name, op, d64, dlo, r64, rlo, low, what)
    elif op == "log_prob":
        try:
            segs = torch.cat(
                [d64.sample(2, generator=torch.Generator().manual_seed(3)), d64.argmax.unsqueeze(0)], 0
            )
        except (ValueError, TypeError):
            return _expect_raise(name, lambda: dlo.log_partition, what)
        _check_log_prob(name, d64, dlo, r64, rlo, segs, low, what)
    elif op == "argmax":
        _check_argmax(name, d64, dlo, r64, rlo, low, what, segmentation_format)
    elif op == "sample":
        _check_samples(name, d64, dlo, r64, 8, what, segmentation_format)
    else:
        raise ValueError(op)


# =========================================================================== trees
TREE_OPS = (*operations("tree (CNF grammar)"), "preterminal_marginals")

TREE_BACKENDS = {
    "native": dict(backend=None),
    "exact": dict(backend="exact"),
    "low-rank": dict(backend="low-rank"),
    "rank-space": dict(backend="rank-space"),
    "state-space": dict(backend="rank-space", options="state-space"),
    "randomized-k1=NT": dict(backend="randomized", k1=lambda NT: NT),
    "randomized-topk": dict(backend="randomized", k1=lambda NT: max(1, NT // 2), topk=True),
}
TREE_ESTIMATES = ("log_partition", "span_marginals", "marginals", "preterminal_marginals", "mbr")


def tree_proposal(case: Case) -> torch.Tensor:
    """B x T x (T+1) x NT distinct span weights (a permutation of 1..NT per span, scaled)."""
    g = torch.Generator().manual_seed(4321)
    B, T, NT = case.meta["B"], case.meta["T"], case.meta["NT"]
    return (torch.argsort(torch.rand(B, T, T + 1, NT, generator=g), -1).to(F64) + 1.0) / 8.0


def tree_dense64(case: Case):
    B, NT = case.meta["B"], case.meta["NT"]
    if case.kind == "dense":
        root, rules = case.args["root"], case.args["rules"]
    else:
        dn = tree_grammar(case, F64).dense()
        root, rules = dn.root.detach(), dn.rules.detach()
    return (
        root.expand(B, NT).contiguous(),
        rules.expand(B, *rules.shape[-3:]).contiguous(),
        case.args["terms"],
    )


def tree_refs(case: Case, low):
    def build(dtype):
        root, rules, terms = tree_dense64(case)
        return ref.TreeRef(root.to(dtype), rules.to(dtype), terms.to(dtype), case.lengths)

    return cached((repr(case), "f64"), lambda: build(F64)), cached(
        (repr(case), label(low)), lambda: build(low)
    )


def tree_dist(case: Case, be: dict, dtype):
    from zoo.inference import RDPOptions, TreeDistribution

    options = be.get("options")
    if be["backend"] == "randomized":
        prop = tree_proposal(case).to(dtype) if be.get("topk") else None
        options = RDPOptions(
            be["k1"](case.meta["NT"]), 0, proposal=prop, generator=torch.Generator().manual_seed(0)
        )
    return TreeDistribution(
        tree_grammar(case, dtype), case.args["terms"].to(dtype), case.lengths, be["backend"], options
    )


def _check_tree_format(name, trees, lengths, T):
    p = trees if trees.dim() == 4 else trees.unsqueeze(0)
    for a in range(p.shape[0]):
        for b in range(p.shape[1]):
            n = T if lengths is None else int(lengths[b])
            rows = p[a, b]
            if not ((rows[: 2 * n - 1, 0] >= 0).all() and (rows[2 * n - 1 :] == -1).all()):
                fail(f"{name}: malformed tree (sample {a}, batch {b}): {rows.tolist()}")


def check_tree(case: Case, backend_name: str, op: str, low=torch.float32):
    be = TREE_BACKENDS[backend_name]
    what = label(low)
    name = f"tree {case.kind} [{backend_name}] {op} ({what})"
    # randomized top-K estimates: the selection rule is not pinned down by docs/tree-api.md, so the
    # plain DP of the full grammar is only the error yardstick there (no float64 sanity check)
    estimate = be.get("topk") and op in TREE_ESTIMATES
    T = case.meta["T"]

    def tree_format(trees):
        _check_tree_format(name, trees, case.lengths, T)
    d64 = tree_dist(case, be, F64)
    dlo = tree_dist(case, be, low)
    r64, rlo = tree_refs(case, low)
    check64 = (lambda *a, **k: None) if estimate else sanity

    if op in ("log_partition", "entropy"):
        _check_total(name, op, d64, dlo, r64, rlo, low, what, 2 * r64.lengths - 1, check64)
    elif op in ("span_marginals", "marginals", "preterminal_marginals"):
        _check_marginals(name, op, d64, dlo, r64, rlo, low, what, check64)
    elif op == "log_prob":
        from zoo.inference import TreeDistribution

        exact64 = TreeDistribution(tree_grammar(case, F64), case.args["terms"], case.lengths, "exact")
        trees = exact64.sample(3, generator=torch.Generator().manual_seed(5))
        _check_log_prob(name, d64, dlo, r64, rlo, trees, low, what)
    elif op == "argmax":
        _check_argmax(name, d64, dlo, r64, rlo, low, what, tree_format)
    elif op == "sample":
        _check_samples(name, d64, dlo, r64, 4, what, tree_format)
    elif op == "mbr":
        out = ref.run_pair(name, lambda: d64.mbr(), lambda: dlo.mbr(), what)
        if out is None:
            return
        m64, mlo = out
        # the span-marginal mass of each MBR tree, under the float64 span marginals
        sm = d64.span_marginals.detach().double()

        def mass(trees):
            tot = torch.zeros(trees.shape[0], dtype=F64)
            for b in range(trees.shape[0]):
                rows = [r for r in trees[b].tolist() if r[0] >= 0]
                tot[b] = sum(sm[b, i, k].item() for i, k in rows)
            return tot

        g64, glo = mass(m64), mass(mlo)
        err = (rlo.span_marginals.double() - r64.span_marginals).abs().amax((1, 2)) * (2 * T)
        budget = 2 * err + 2 * T * prob_floor(low)
        short = g64 - glo
        if (short > budget).any():
            b = int(torch.argmax(short - budget))
            fail(
                f"{name}: the {what} MBR tree has span-marginal mass {glo[b].item():.6g}, the float64 one "
                f"{g64[b].item():.6g} (budget {budget[b].item():.3g}, batch {b})"
            )
    else:
        raise ValueError(op)
