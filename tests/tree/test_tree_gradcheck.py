"""Gradients of the tree engine, float64, ragged lengths.

* torch.autograd.gradcheck of log_partition w.r.t. every grammar tensor and the terms, every
  grammar kind x backend;
* the gradients against the brute force: d log Z / d root, terms and rules are the expected root
  labels, preterminals and rule counts, and the feature gradients of LowRankGrammar and
  RankSpaceGrammar follow from the expected counts by the chain rule through psi;
* marginals and entropy are differentiable where their inputs require grad (gradcheck through the
  double backward), and carry no graph where they do not.
"""

from __future__ import annotations

import pytest
import torch
import tree_bruteforce as tb
from tree_testlib import (
    COMBOS,
    DTYPE,
    build_dist,
    cached_bruteforce,
    close,
    combo_id,
    one_thread,
    random_tree_spec,
)

LENGTHS = [3, 2]  # B = 2, T = 3: ragged
combos = pytest.mark.parametrize("combo", COMBOS, ids=combo_id)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_thread():
        yield


def _spec(kind, shared=True, seed=0, T=3, lengths=LENGTHS):
    spec = random_tree_spec(
        kind, B=2, T=T, NT=2, PT=2, rank=2, lengths=lengths, seed=seed, shared_grammar=shared
    )
    for name in ("head", "children", "U", "V", "W"):
        if name in spec.args:  # features safely > 0 under gradcheck's perturbation
            spec.args[name] = spec.args[name].clamp_min(0.2)
    return spec


def _function(spec, names, combo, quantity):
    """quantity(dist) as a function of spec.args[names], the other arguments held fixed."""
    _, backend, options = combo

    def f(*xs):
        args = dict(spec.args)
        args.update(zip(names, xs))
        return quantity(build_dist(tb.TreeSpec(spec.kind, args, spec.lengths), backend, options))

    return f


def _inputs(spec, names):
    return tuple(spec.args[n].detach().clone().requires_grad_(True) for n in names)


ALL_NAMES = {kind: list(tb.GRAMMAR_ARGS[kind]) + ["terms"] for kind in tb.KINDS}


@combos
def test_gradcheck_log_partition(combo):
    spec = _spec(combo[0])
    names = ALL_NAMES[combo[0]]
    f = _function(spec, names, combo, lambda d: d.log_partition)
    assert torch.autograd.gradcheck(f, _inputs(spec, names), eps=1e-6, atol=1e-7, rtol=1e-5)
    assert torch.autograd.gradgradcheck(f, _inputs(spec, names), eps=1e-6, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("combo", [c for c in COMBOS if c[1] != "randomized"], ids=combo_id)
def test_gradcheck_log_partition_batched_grammar(combo):
    spec = _spec(combo[0], shared=False, seed=1)
    names = ALL_NAMES[combo[0]]
    f = _function(spec, names, combo, lambda d: d.log_partition)
    inputs = _inputs(spec, names)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)


# --------------------------------------------------------------------------- against brute force
def expected_counts(spec: tb.TreeSpec, b: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(E[root label] NT, E[count of A -> b c] NT x S x S, E[leaf t labelled P] T x PT) of element b."""
    NT, S = spec.NT, spec.S
    root = torch.zeros(NT, dtype=DTYPE)
    rules = torch.zeros(NT, S, S, dtype=DTYPE)
    leaves = torch.zeros(spec.T, spec.PT, dtype=DTYPE)
    for tree, p in tb.tree_distribution(spec, b).items():
        label = {(i, k): a for i, k, a in tree}
        root[tree[0][2]] += p
        for i, k, a in tree:
            if k - i == 1:
                leaves[i, a] += p
                continue
            j = next(j for j in range(i + 1, k) if (i, j) in label and (j, k) in label)
            left = label[(i, j)] + (NT if j - i == 1 else 0)
            right = label[(j, k)] + (NT if k - j == 1 else 0)
            rules[a, left, right] += p
    return root, rules, leaves


def _chain_rule(spec: tb.TreeSpec, counts: torch.Tensor, b: int) -> dict:
    """d log Z / d (each feature tensor) of element b from the expected rule counts."""
    NT = spec.NT
    if spec.kind == "lowrank":
        head, children = spec.grammar("head", b), spec.grammar("children", b)
        psi = torch.einsum("ar,bcr->abc", head, children)
        c = counts[:, :NT, :NT] / psi
        return {
            "head": torch.einsum("abc,bcr->ar", c, children),
            "children": torch.einsum("abc,ar->bcr", c, head),
        }
    if spec.kind == "rankspace":
        U, V, W = spec.grammar("U", b), spec.grammar("V", b), spec.grammar("W", b)
        c = counts / torch.einsum("ar,br,cr->abc", U, V, W)
        return {
            "U": torch.einsum("abc,br,cr->ar", c, V, W),
            "V": torch.einsum("abc,ar,cr->br", c, U, W),
            "W": torch.einsum("abc,ar,br->cr", c, U, V),
        }
    return {}


@combos
def test_gradients_are_expected_counts(combo):
    """Batched grammar, T = 4 ragged: every gradient of log Z against the brute force."""
    kind = combo[0]
    spec = random_tree_spec(kind, B=3, T=4, NT=2, PT=2, rank=2, lengths=[4, 2, 3], seed=3, forbid=0.2)
    names = ALL_NAMES[kind]
    leaves = {n: spec.args[n].clone().requires_grad_(True) for n in names}
    dist = build_dist(tb.TreeSpec(kind, leaves, spec.lengths), combo[1], combo[2])
    grads = dict(zip(names, torch.autograd.grad(dist.log_partition.sum(), [leaves[n] for n in names])))
    NT = spec.NT
    with cached_bruteforce():
        for b in range(spec.batch):
            root, rules, terms = expected_counts(spec, b)
            close(grads["root"][b], root, f"d log Z / d root, element {b}")
            close(grads["terms"][b], terms, f"d log Z / d terms, element {b}")
            if kind in ("dense", "lowrank"):
                want = rules.clone()
                if kind == "lowrank":  # the rules' NT x NT block is ignored: zero gradient there
                    want[:, :NT, :NT] = 0
                close(grads["rules"][b], want, f"d log Z / d rules, element {b}")
            for name, want in _chain_rule(spec, rules, b).items():
                close(grads[name][b], want, f"d log Z / d {name}, element {b}")


# --------------------------------------------------------------------------- second order
MARGINALS = ("span_marginals", "marginals", "preterminal_marginals")


def _weighted(op, seed=0):
    """A scalar function of a marginal tensor: its sum with fixed random weights."""

    def quantity(dist):
        value = getattr(dist, op)
        w = torch.rand(value.shape, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
        return (value * w).sum()

    return quantity


@combos
@pytest.mark.parametrize("op", MARGINALS)
def test_marginals_are_differentiable(combo, op):
    spec = _spec(combo[0], seed=4)
    names = ALL_NAMES[combo[0]]
    f = _function(spec, names, combo, _weighted(op))
    # fast mode: a random projection of the Jacobian (one backward of the marginals' backward)
    assert torch.autograd.gradcheck(f, _inputs(spec, names), eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


@combos
def test_entropy_is_differentiable(combo):
    spec = _spec(combo[0], seed=5)
    names = ALL_NAMES[combo[0]]
    f = _function(spec, names, combo, lambda d: d.entropy)
    assert torch.autograd.gradcheck(f, _inputs(spec, names), eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


@combos
def test_no_graph_without_grad(combo):
    spec = _spec(combo[0], seed=6)
    dist = build_dist(spec, combo[1], combo[2])
    for op in ("log_partition", *MARGINALS):
        assert not getattr(dist, op).requires_grad, op
    with torch.no_grad():  # and the marginals (autograd inside) still work under no_grad
        quiet = build_dist(spec, combo[1], combo[2])
        close(quiet.marginals, dist.marginals, "marginals under no_grad")
