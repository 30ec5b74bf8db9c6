"""Tests of the tree brute-force reference itself (tests/tree_bruteforce.py): counts, identities
that any distribution over trees satisfies, closed forms for short sentences, and raggedness."""

from __future__ import annotations

import math
import os

import pytest
import reductions
import torch
import tree_bruteforce as tb
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_strategies import n_labelled, tree_specs

# ZOO_TEST_EXAMPLES=200 for a longer hunt
FAST = settings(max_examples=int(os.environ.get("ZOO_TEST_EXAMPLES", 8)), deadline=None)
SMALL = 3000  # labelled trees per sentence in the hypothesis tests here
ATOL = 1e-10


def close(a, b, what, atol=ATOL):
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=torch.float64),
        torch.as_tensor(b, dtype=torch.float64),
        rtol=1e-9,
        atol=atol,
        msg=lambda m: f"{what}: {m}",
    )


def materialize(spec: tb.TreeSpec, b: int) -> torch.Tensor:
    """NT x S x S log psi of batch element b, from the contract's table with einsum."""
    NT = spec.NT
    if spec.kind == "dense":
        return spec.grammar("rules", b)
    if spec.kind == "lowrank":
        dense = spec.grammar("rules", b).clone()
        nn = torch.einsum("ar,bcr->abc", spec.grammar("head", b), spec.grammar("children", b))
        dense[:, :NT, :NT] = nn.log()
        return dense
    U, V, W = spec.grammar("U", b), spec.grammar("V", b), spec.grammar("W", b)
    return torch.einsum("ar,br,cr->abc", U, V, W).log()


def closed_form_log_partition(spec: tb.TreeSpec, b: int) -> float:
    """log Z for lengths 2 and 3 by summing over the one (two) tree shapes with einsum."""
    NT, n = spec.NT, spec.length(b)
    psi = materialize(spec, b).exp()
    root = spec.grammar("root", b).exp()
    t = spec.args["terms"][b, :n].double().exp()
    np_, pn, pp = psi[:, :NT, NT:], psi[:, NT:, :NT], psi[:, NT:, NT:]
    if n == 2:
        inside = torch.einsum("apq,p,q->a", pp, t[0], t[1])
    elif n == 3:
        left = torch.einsum("abr,bpq,p,q,r->a", np_, pp, t[0], t[1], t[2])  # ((0 1) 2)
        right = torch.einsum("apb,bqr,p,q,r->a", pn, pp, t[0], t[1], t[2])  # (0 (1 2))
        inside = left + right
    else:
        raise ValueError(n)
    return float((root * inside).sum().log())


# --------------------------------------------------------------------------- enumeration
@pytest.mark.parametrize("n", range(2, 8))
def test_unlabelled_trees(n):
    trees = tb.enumerate_trees(n)
    assert len(trees) == tb.catalan(n - 1)
    assert len(set(trees)) == len(trees)
    for t in trees:
        assert len(t) == 2 * n - 1
        assert t[0] == (0, n)
        assert t == tb.preorder(t)
        assert {(i, i + 1) for i in range(n)} <= set(t)


def test_small_trees_explicit():
    assert tb.enumerate_trees(2) == (((0, 2), (0, 1), (1, 2)),)
    assert set(tb.enumerate_trees(3)) == {
        ((0, 3), (0, 1), (1, 3), (1, 2), (2, 3)),
        ((0, 3), (0, 2), (0, 1), (1, 2), (2, 3)),
    }
    with pytest.raises(ValueError):
        tb.enumerate_trees(1)


@pytest.mark.parametrize("n,NT,PT", [(2, 1, 1), (2, 2, 3), (3, 2, 2), (4, 3, 1), (4, 2, 2), (5, 1, 2)])
def test_labelled_trees(n, NT, PT):
    trees = list(tb.labelled_trees(n, NT, PT))
    assert len(trees) == n_labelled(n, NT, PT) == tb.catalan(n - 1) * NT ** (n - 1) * PT**n
    assert len(set(trees)) == len(trees)
    assert all(tb.is_valid_tree(t, n, NT, PT) for t in trees)
    spec = tb.random_spec("dense", 1, n, NT, PT, generator=torch.Generator().manual_seed(n))
    assert sorted(t for t, _ in tb.tree_scores(spec, 0)) == sorted(trees)


def test_is_valid_tree_rejects():
    good = ((0, 3, 1), (0, 1, 0), (1, 3, 0), (1, 2, 1), (2, 3, 0))
    assert tb.is_valid_tree(good, 3, 2, 2)
    assert not tb.is_valid_tree(good, 3, 1, 2)  # label 1 is no nonterminal
    assert not tb.is_valid_tree(good[::-1], 3, 2, 2)  # not in pre-order
    assert not tb.is_valid_tree(good[:-1], 3, 2, 2)
    assert not tb.is_valid_tree(((0, 3, 0), (0, 2, 0), (1, 3, 0), (0, 1, 0), (2, 3, 0)), 3, 2, 2)


# --------------------------------------------------------------------------- potentials
@pytest.mark.parametrize("kind", tb.KINDS)
@pytest.mark.parametrize("shared", [False, True])
def test_rule_potentials_match_einsum(kind, shared):
    g = torch.Generator().manual_seed(3)
    spec = tb.random_spec(kind, 2, 3, 2, 2, rank=3, generator=g, shared_grammar=shared, forbid=0.3)
    dense = tb.to_dense(spec)
    for b in range(spec.batch):
        want = materialize(spec, b)
        close(torch.tensor(tb.rule_table(spec, b), dtype=torch.float64), want, f"{kind} rule table")
        close(tb.rule_log_potential(spec, b, 1, 0, 3), want[1, 0, 3], "one entry")
        close(tb.log_partition(dense, b), tb.log_partition(spec, b), "log Z of to_dense")


@pytest.mark.parametrize("kind", tb.KINDS)
def test_closed_form_log_partition(kind):
    g = torch.Generator().manual_seed(11)
    spec = tb.random_spec(kind, 2, 3, 2, 3, rank=2, lengths=[3, 2], generator=g, forbid=0.2)
    for b in range(spec.batch):
        close(tb.log_partition(spec, b), closed_form_log_partition(spec, b), f"log Z b={b}")


# --------------------------------------------------------------------------- identities
@FAST
@given(data=st.data(), kind=st.sampled_from(tb.KINDS))
def test_distribution_identities(data, kind):
    spec = data.draw(tree_specs(kind, forbid=kind != "rankspace", max_trees=SMALL))
    for b in range(spec.batch):
        n, T = spec.length(b), spec.T
        sc = tb.tree_scores(spec, b)
        dist = tb.tree_distribution(spec, b)
        logz = tb.log_partition(spec, b)
        assert math.isfinite(logz)
        close(sum(dist.values()), 1.0, "sum p(tree)")

        # scores: one tree at a time agrees with the enumeration; log_prob; forbidden trees
        for t, s in sc[:: max(1, len(sc) // 50)]:
            if s == tb.NEG_INF:
                assert tb.tree_score(spec, b, t) == tb.NEG_INF and dist[t] == 0.0
            else:
                close(tb.tree_score(spec, b, t), s, "tree_score")
                close(tb.log_prob(spec, b, t), s - logz, "log_prob")

        # entropy = log Z - E[score]
        mean = sum(p * s for (t, s) in sc if (p := dist[t]) > 0)
        close(tb.entropy(spec, b), logz - mean, "entropy", atol=1e-9)

        # best
        m, argmaxes = tb.best(spec, b)
        assert m == max(s for _, s in sc) == tb.max_score(spec, b)
        assert argmaxes and all(abs(dict(sc)[t] - m) < 1e-8 for t in argmaxes)

        # marginals
        span = tb.span_marginals(spec, b)
        lab = tb.marginals(spec, b)
        pre = tb.preterminal_marginals(spec, b)
        assert span.shape == (T, T + 1) and lab.shape == (T, T + 1, spec.NT) and pre.shape == (T, spec.PT)
        for i in range(T):
            for k in range(T + 1):
                if k <= i or k > n:
                    assert span[i, k] == 0 and (lab[i, k] == 0).all()
                elif k - i == 1:
                    close(span[i, k], 1.0, "width-1 span")
                    assert (lab[i, k] == 0).all()
                else:
                    close(lab[i, k].sum(), span[i, k], f"sum_A marginals[{i}, {k}]")
        close(span[0, n], 1.0, "root span")
        wide = sum(float(span[i, k]) for i in range(n) for k in range(i + 2, n + 1))
        close(wide, n - 1, "sum of span marginals over width >= 2")
        close(pre[:n].sum(-1), torch.ones(n), "preterminal marginals per position")
        assert (pre[n:] == 0).all()
        assert ((span >= -1e-12) & (span <= 1 + 1e-12)).all()


@FAST
@given(data=st.data(), kind=st.sampled_from(tb.KINDS), seed=st.integers(0, 2**31 - 1))
def test_padding_never_matters(data, kind, seed):
    """Changing terms past a sentence's length leaves all of its quantities unchanged."""
    spec = data.draw(tree_specs(kind, min_b=2, min_t=3, max_trees=SMALL))
    lengths = spec.lengths if spec.lengths is not None else torch.full((spec.batch,), spec.T)
    lengths = lengths.clone()
    lengths[0] = 2  # at least one ragged element
    spec = tb.TreeSpec(spec.kind, spec.args, lengths)
    terms = spec.args["terms"].clone()
    g = torch.Generator().manual_seed(seed)
    for b in range(spec.batch):
        n = int(lengths[b])
        terms[b, n:] = torch.randn(terms[b, n:].shape, generator=g, dtype=torch.float64) * 10
    other = tb.TreeSpec(spec.kind, {**spec.args, "terms": terms}, lengths)
    scalars = (tb.log_partition, tb.entropy, tb.max_score)
    tables = (tb.span_marginals, tb.marginals, tb.preterminal_marginals)
    for b in range(spec.batch):
        for f in scalars + tables:
            close(f(other, b), f(spec, b), f"{f.__name__} b={b}")
        assert tb.best(other, b)[1] == tb.best(spec, b)[1]


# --------------------------------------------------------------------------- MBR
@pytest.mark.parametrize("n", range(2, 6))
def test_mbr_on_indicator(n):
    for tree in tb.enumerate_trees(n):
        ind = torch.zeros(n + 1, n + 2, dtype=torch.float64)  # padded beyond n is fine
        for i, k in tree:
            ind[i, k] = 1.0
        assert tb.mbr_trees(ind, n) == {tree}
        assert tb.mbr_trees(ind.tolist(), n) == {tree}
    flat = torch.zeros(n, n + 1, dtype=torch.float64)
    assert tb.mbr_trees(flat, n) == set(tb.enumerate_trees(n))  # all tied


def test_mbr_of_span_marginals_beats_every_tree():
    spec = tb.random_spec("dense", 1, 4, 2, 2, generator=torch.Generator().manual_seed(5), scale=2.0)
    span = tb.span_marginals(spec, 0)
    (winner,) = tb.mbr_trees(span, 4)
    gain = {t: sum(float(span[i, k]) for i, k in t) for t in tb.enumerate_trees(4)}
    assert gain[winner] == max(gain.values())


# --------------------------------------------------------------------------- sentences
@pytest.mark.parametrize("shared", [False, True])
def test_normalized_pcfg_sentences(shared):
    g = torch.Generator().manual_seed(7)
    B, NT, PT, V = 2, 2, 2, 2
    grammar, emission = tb.random_pcfg(B, NT, PT, V, generator=g, shared_grammar=shared)
    for b in range(B):
        for n in (2, 3):
            dist = tb.sentence_distribution(grammar, emission, n, b)
            assert len(dist) == V**n * n_labelled(n, NT, PT)
            close(sum(dist.values()), 1.0, "sum p(words, tree | n)")
            # summing the words out = the tree distribution with terms = logsumexp_v emission (= 0)
            scores = tb.sentence_scores(grammar, emission, n, b)
            em = emission[b] if emission.dim() == 3 else emission
            marg = em.logsumexp(-1).expand(n, PT)
            close(marg, torch.zeros(n, PT), "normalized emission")
            mass = tb.log_partition(tb.element_spec(grammar, b, marg), 0)
            close(reductions.log_sum(scores.values()), mass, "sum over words")
            if n == 2:  # P(length 2) = sum_A root[A] sum_{P,Q} rules[A, NT+P, NT+Q]
                root = grammar.grammar("root", b).exp()
                rules = grammar.grammar("rules", b).exp()
                close(mass, float((root * rules[:, NT:, NT:].sum((1, 2))).sum().log()), "P(n=2)")
            # p(words, tree) / p(words) = p(tree | words)
            words = (1,) * n
            pw = sum(p for (w, _), p in dist.items() if w == words)
            cond = tb.tree_distribution(tb.element_spec(grammar, b, em[:, list(words)].T), 0)
            for tree, p in cond.items():
                close(dist[(words, tree)] / pw, p, "p(tree | words)")


# --------------------------------------------------------------------------- formats
def test_tensor_roundtrip():
    T = 4
    trees = [
        tb.best(tb.random_spec("dense", 1, n, 2, 2, generator=torch.Generator()), 0)[1].pop() for n in (4, 2)
    ]
    tens = tb.to_tensor_trees(trees, T)
    assert tens.dtype == torch.long and tens.shape == (2, 2 * T - 1, 3)
    assert (tens[1, 3:] == -1).all() and (tens[0] >= 0).all()
    assert tb.from_tensor_trees(tens) == trees
    assert tb.from_tensor_trees(torch.stack([tens, tens])) == [trees, trees]
    unl = tb.to_tensor_trees([tb.unlabel(t) for t in trees], T)
    assert unl.shape == (2, 2 * T - 1, 2)
    assert tb.from_tensor_trees(unl) == [tb.unlabel(t) for t in trees]


@pytest.mark.parametrize("kind", tb.KINDS)
def test_random_spec_shapes(kind):
    g = torch.Generator().manual_seed(0)
    for shared in (False, True):
        spec = tb.random_spec(kind, 3, 4, 2, 3, rank=2, lengths=[4, 2, 3], generator=g, shared_grammar=shared)
        assert (spec.batch, spec.T, spec.NT, spec.PT, spec.S) == (3, 4, 2, 3, 5)
        assert [spec.length(b) for b in range(3)] == [4, 2, 3]
        assert spec.args["root"].dim() == (1 if shared else 2)
        assert spec.rank == (None if kind == "dense" else 2)
    with pytest.raises(ValueError):
        tb.random_spec(kind, 2, 4, 2, 2, lengths=[4, 1])
    bad = tb.TreeSpec(kind, spec.args, torch.tensor([4, 1, 3]))
    with pytest.raises(ValueError):
        tb.log_partition(bad, 1)
