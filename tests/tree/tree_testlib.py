"""Glue shared by the tree engine's tests: TreeSpec (tests/tree_bruteforce.py) -> zoo objects,
the backends each grammar kind runs under, float64 comparisons and the brute-force expectations.

Imported as a top-level module (pytest puts tests/tree on sys.path; there is no __init__.py).
"""

from __future__ import annotations

import contextlib
import math

import torch
import tree_bruteforce as tb

from zoo.inference.rdp import RDPOptions
from zoo.inference.tree import DenseGrammar, LowRankGrammar, RankSpaceGrammar, TreeDistribution

DTYPE = torch.float64
RTOL = 1e-8
ATOL = 1e-10

# (kind, backend, options) -- options "K1=NT" is RDPOptions(k1=NT, k2=0), made per spec
COMBOS = [
    ("dense", None, None),
    ("dense", "exact", None),
    ("dense", "randomized", "K1=NT"),
    ("lowrank", None, None),
    ("lowrank", "exact", None),
    ("lowrank", "randomized", "K1=NT"),
    ("rankspace", None, None),
    ("rankspace", "exact", None),
    ("rankspace", "rank-space", "state-space"),
    ("rankspace", "randomized", "K1=NT"),
]


def combo_id(combo) -> str:
    kind, backend, options = combo
    out = f"{kind}-{backend or 'native'}"
    return out + (f"-{options}" if options else "")


def grammar_of(spec: tb.TreeSpec):
    """The zoo grammar container of a spec (its tensors as given: batched or shared)."""
    a = spec.args
    if spec.kind == "dense":
        return DenseGrammar(a["root"], a["rules"])
    if spec.kind == "lowrank":
        return LowRankGrammar(a["root"], a["rules"], a["head"], a["children"])
    if spec.kind == "rankspace":
        return RankSpaceGrammar(a["root"], a["U"], a["V"], a["W"])
    raise ValueError(spec.kind)


def resolve_options(options, NT: int, seed: int = 0):
    if options == "K1=NT":
        return RDPOptions(NT, 0, generator=torch.Generator().manual_seed(seed))
    return options


def build_dist(spec: tb.TreeSpec, backend=None, options=None, seed: int = 0) -> TreeDistribution:
    return TreeDistribution(
        grammar_of(spec), spec.args["terms"], spec.lengths, backend, resolve_options(options, spec.NT, seed)
    )


def supports_argmax(combo) -> bool:
    kind, backend, _ = combo
    return not (kind == "rankspace" and backend in (None, "rank-space"))


def close(actual, expected, what, rtol=RTOL, atol=ATOL):
    """Float64 comparison with the dtype and shape checked first."""
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual)}"
    assert actual.dtype == DTYPE, f"{what}: dtype {actual.dtype}, expected {DTYPE}"
    expected = torch.as_tensor(expected, dtype=DTYPE)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    torch.testing.assert_close(actual.detach(), expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def per_element(spec: tb.TreeSpec, reference) -> torch.Tensor:
    """Stack ``reference(spec, b)`` over the batch as a float64 tensor."""
    return torch.stack([torch.as_tensor(reference(spec, b), dtype=DTYPE) for b in range(spec.batch)])


def random_tree_spec(kind, B=3, T=4, NT=2, PT=2, rank=2, lengths=None, seed=0, **kw) -> tb.TreeSpec:
    return tb.random_spec(
        kind, B, T, NT, PT, rank=rank, lengths=lengths, generator=torch.Generator().manual_seed(seed), **kw
    )


# --------------------------------------------------------------------------- statistics
def tv_distance(counts: dict, probs: dict, n: int) -> float:
    keys = set(counts) | set(probs)
    return 0.5 * sum(abs(counts.get(k, 0) / n - probs.get(k, 0.0)) for k in keys)


def tv_bound(n_cells: int, n: int, delta: float = 1e-6) -> float:
    """A bound that the total-variation distance between an n-sample empirical distribution over
    n_cells outcomes and the truth exceeds with probability at most delta:
    E[TV] <= 0.5 sqrt(n_cells / n) (Cauchy-Schwarz on the multinomial variances), and TV moves by at
    most 1/n per sample, so McDiarmid gives P(TV > E[TV] + t) <= exp(-2 n t^2)."""
    return 0.5 * math.sqrt(n_cells / n) + math.sqrt(math.log(1 / delta) / (2 * n))


def counts_of(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


# --------------------------------------------------------------------------- cached reference
@contextlib.contextmanager
def cached_bruteforce():
    """Within the block, ``tree_bruteforce.tree_scores(spec, b)`` enumerates each (spec, b) once.

    Every exact quantity of the reference derives from ``tree_scores``; checking nine operations
    against it would otherwise enumerate the same trees nine times.
    """
    original = tb.tree_scores
    cache: dict = {}
    keep: list = []  # the specs stay alive, so their ids stay unique within the block

    def cached(spec, b):
        key = (id(spec), b)
        if key not in cache:
            keep.append(spec)
            cache[key] = original(spec, b)
        return cache[key]

    tb.tree_scores = cached
    try:
        yield
    finally:
        tb.tree_scores = original


@contextlib.contextmanager
def one_thread():
    """torch on one intra-op thread within the block (restored after).

    The tensors here are tiny: on a busy 2-core machine the thread pool's hand-offs cost more
    than the arithmetic (a max-reduction of a few entries then takes milliseconds).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def score_table(spec: tb.TreeSpec, b: int) -> dict:
    """{labelled tree: score} of element b, from ``tb.tree_scores`` (cached under cached_bruteforce)."""
    return dict(tb.tree_scores(spec, b))


def chi_square(counts: dict, probs: dict, n: int, delta: float = 1e-6, min_expected: float = 5.0):
    """(Pearson statistic, bound) of n draws tallied in ``counts`` against ``probs``.

    Outcomes expected fewer than ``min_expected`` times are pooled into one cell (so the statistic
    is close to chi-square); the bound is the chi-square(df) tail bound of Laurent and Massart
    (2000), P(X >= df + 2 sqrt(df x) + 2x) <= exp(-x), at x = log(1 / delta). An outcome of
    probability 0 that was drawn fails at once (the statistic is then inf).
    """
    if any(probs.get(k, 0.0) <= 0 for k in counts):
        return math.inf, 0.0
    big = [k for k, p in probs.items() if n * p >= min_expected]
    cells = [(counts.get(k, 0), n * probs[k]) for k in big]
    rest_obs = n - sum(o for o, _ in cells)
    rest_exp = n - sum(e for _, e in cells)
    if rest_exp > 1e-9 * n:
        cells.append((rest_obs, rest_exp))
    stat = sum((o - e) ** 2 / e for o, e in cells)
    df = max(len(cells) - 1, 1)
    x = math.log(1 / delta)
    return stat, df + 2 * math.sqrt(df * x) + 2 * x


def assert_distribution(draws: list, probs: dict, what: str) -> None:
    """The empirical distribution of ``draws`` is the one of ``probs``: chi-square and total
    variation, both at a false-alarm probability of 1e-6 (bounds from the number of draws)."""
    n = len(draws)
    counts = counts_of(draws)
    stat, bound = chi_square(counts, probs, n)
    assert stat < bound, f"{what}: chi-square {stat:.1f} >= {bound:.1f} ({len(probs)} outcomes, {n} draws)"
    support = sum(1 for p in probs.values() if p > 0)
    tv, tv_max = tv_distance(counts, probs, n), tv_bound(support, n)
    assert tv < tv_max, f"{what}: total variation {tv:.3f} >= {tv_max:.3f} ({support} outcomes, {n} draws)"
