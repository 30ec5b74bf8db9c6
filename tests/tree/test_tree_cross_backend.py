"""Cross-backend identities in float64, past brute-force reach (T = 10, NT up to 10).

* LowRankGrammar and RankSpaceGrammar materialized (``grammar.dense()``) give the same log Z,
  marginals and gradients under "exact" as under their own backend;
* the rank-space inside (Yang et al. 2022) equals the state-space CPD inside (Yang et al. 2021b),
  through ``TreeDistribution(options="state-space")`` and through the module functions, gradients
  included.
"""

from __future__ import annotations

import pytest
import torch
import tree_bruteforce as tb
from tree_testlib import DTYPE, close, grammar_of, one_thread, random_tree_spec

from zoo.inference.tree import DenseGrammar, LowRankGrammar, TreeDistribution
from zoo.inference.tree.rank_space import rank_space_log_partition, state_space_log_partition

RTOL = 1e-8
ATOL = 1e-10
B, T = 4, 10
LENGTHS = [10, 2, 7, 5]

CASES = {
    "low-rank": dict(kind="lowrank", NT=8, PT=6, rank=4),
    "low-rank, R > NT, shared": dict(kind="lowrank", NT=4, PT=3, rank=12, shared_grammar=True),
    "low-rank, forbidden rules": dict(kind="lowrank", NT=5, PT=4, rank=3, forbid=0.3),
    "low-rank, large scores": dict(kind="lowrank", NT=5, PT=4, rank=3, scale=3.0),
    "rank-space": dict(kind="rankspace", NT=10, PT=8, rank=5),
    "rank-space, r > NT, shared": dict(kind="rankspace", NT=4, PT=3, rank=16, shared_grammar=True),
    "rank-space, large scores": dict(kind="rankspace", NT=6, PT=5, rank=4, scale=3.0),
}
RANK_SPACE = [name for name, case in CASES.items() if case["kind"] == "rankspace"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_thread():
        yield


def make_spec(case: str, seed: int = 0) -> tb.TreeSpec:
    return random_tree_spec(B=B, T=T, lengths=LENGTHS, seed=seed, **CASES[case])


def lengths() -> torch.Tensor:
    return torch.tensor(LENGTHS)


def with_leaves(spec: tb.TreeSpec):
    """(names, leaf tensors requiring grad, grammar built from them, terms)."""
    names = list(tb.GRAMMAR_ARGS[spec.kind]) + ["terms"]
    leaves = {n: spec.args[n].clone().requires_grad_(True) for n in names}
    grammar = grammar_of(tb.TreeSpec(spec.kind, leaves, spec.lengths))
    return names, leaves, grammar, leaves["terms"]


@pytest.mark.parametrize("case", list(CASES))
def test_native_backend_matches_exact_on_materialized_grammar(case):
    spec = make_spec(case)
    grammar, terms = grammar_of(spec), spec.args["terms"]
    native = TreeDistribution(grammar, terms, lengths())
    materialized = TreeDistribution(grammar.dense(), terms, lengths())
    exact = TreeDistribution(grammar, terms, lengths(), backend="exact")
    assert torch.isfinite(native.log_partition).all()
    for other, what in ((materialized, "dense()"), (exact, "backend='exact'")):
        close(native.log_partition, other.log_partition, f"log Z vs {what}", rtol=RTOL, atol=ATOL)
        for op in ("span_marginals", "marginals", "preterminal_marginals"):
            close(getattr(native, op), getattr(other, op), f"{op} vs {what}", rtol=RTOL, atol=1e-9)
        close(native.entropy, other.entropy, f"entropy vs {what}", rtol=RTOL, atol=1e-8)
        assert torch.equal(native.mbr(), other.mbr()), what


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_match_exact_on_materialized_grammar(case):
    """d log Z / d every grammar tensor and the terms: native backend vs exact on grammar.dense()
    (the materialization is differentiable, so both reach the same leaves)."""
    spec = make_spec(case, seed=1)
    names, leaves, grammar, terms = with_leaves(spec)
    native = TreeDistribution(grammar, terms, lengths()).log_partition.sum()
    g_native = torch.autograd.grad(native, [leaves[n] for n in names])
    dense = TreeDistribution(grammar.dense(), terms, lengths()).log_partition.sum()
    g_dense = torch.autograd.grad(dense, [leaves[n] for n in names])
    for n, a, b in zip(names, g_native, g_dense):
        close(a, b, f"d log Z / d {n}", rtol=RTOL, atol=1e-9)


@pytest.mark.parametrize("case", RANK_SPACE)
def test_rank_space_equals_state_space(case):
    spec = make_spec(case, seed=2)
    names, leaves, grammar, terms = with_leaves(spec)
    rank = TreeDistribution(grammar, terms, lengths())
    state = TreeDistribution(grammar, terms, lengths(), backend="rank-space", options="state-space")
    close(rank.log_partition, state.log_partition, "log Z", rtol=RTOL, atol=ATOL)
    g_rank = torch.autograd.grad(rank.log_partition.sum(), [leaves[n] for n in names], retain_graph=True)
    g_state = torch.autograd.grad(state.log_partition.sum(), [leaves[n] for n in names], retain_graph=True)
    for n, a, b in zip(names, g_rank, g_state):
        close(a, b, f"d log Z / d {n}", rtol=RTOL, atol=1e-9)
    for op in ("span_marginals", "marginals", "preterminal_marginals"):
        close(getattr(rank, op), getattr(state, op), op, rtol=RTOL, atol=1e-9)


@pytest.mark.parametrize("case", RANK_SPACE)
def test_rank_space_module_functions(case):
    """rank_space_log_partition and state_space_log_partition on the container (unmasked terms),
    against each other and the exact inside, gradients included."""
    spec = make_spec(case, seed=3)
    names, leaves, grammar, terms = with_leaves(spec)
    a = rank_space_log_partition(grammar, terms, lengths())
    b = state_space_log_partition(grammar, terms, lengths())
    exact = TreeDistribution(grammar, terms, lengths(), backend="exact").log_partition
    close(a, b, "rank space vs state space", rtol=RTOL, atol=ATOL)
    close(a, exact, "rank space vs exact", rtol=RTOL, atol=ATOL)
    g_a = torch.autograd.grad(a.sum(), [leaves[n] for n in names])
    g_b = torch.autograd.grad(b.sum(), [leaves[n] for n in names])
    for n, x, y in zip(names, g_a, g_b):
        close(x, y, f"d log Z / d {n}", rtol=RTOL, atol=1e-9)


@pytest.mark.parametrize("case", RANK_SPACE)
def test_state_space_span_scores_are_span_marginals(case):
    """The span probe of the module functions: d log Z / d span_scores = the span marginals
    (width >= 2), for both algorithms."""
    spec = make_spec(case, seed=4)
    grammar, terms = grammar_of(spec), spec.args["terms"]
    want = TreeDistribution(grammar, terms, lengths(), backend="exact").span_marginals
    width = torch.arange(T + 1) - torch.arange(T).unsqueeze(-1)  # [i, k] -> k - i
    for fn in (rank_space_log_partition, state_space_log_partition):
        probe = torch.zeros(B, T, T + 1, dtype=DTYPE, requires_grad=True)
        (grad,) = torch.autograd.grad(fn(grammar, terms, lengths(), probe).sum(), probe)
        close(grad * (width >= 2), want * (width >= 2), fn.__name__, rtol=RTOL, atol=1e-9)


def test_equivalent_containers_agree():
    """One grammar three ways: a RankSpaceGrammar, the LowRankGrammar with head = U and
    children[b, c] = V[b] * W[c] (and the same CPD rules for the other blocks), and the DenseGrammar
    of its materialized rules: one log Z and one set of marginals."""
    NT, PT, r = 5, 4, 3
    spec = random_tree_spec("rankspace", B=B, T=T, NT=NT, PT=PT, rank=r, lengths=LENGTHS, seed=5)
    cpd = grammar_of(spec)
    a = spec.args
    children = torch.einsum("gbr,gcr->gbcr", a["V"][:, :NT], a["W"][:, :NT])
    lowrank = LowRankGrammar(a["root"], cpd.dense_rules(), a["U"], children)
    dense = DenseGrammar(a["root"], cpd.dense_rules())
    dists = [TreeDistribution(g, a["terms"], lengths()) for g in (cpd, lowrank, dense)]
    for d in dists[1:]:
        close(d.log_partition, dists[0].log_partition, "log Z", rtol=RTOL, atol=ATOL)
        close(d.marginals, dists[0].marginals, "marginals", rtol=RTOL, atol=1e-9)
