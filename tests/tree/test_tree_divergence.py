"""Cross-entropy and KL divergence between two tree distributions (``TreeDistribution.cross_entropy`` /
``kl``) against enumeration of every labelled tree: every grammar on either side, shared and batched
grammars, ragged lengths, node scores on either side, the randomized backend (exact distributions),
forbidden rules (+inf), and gradients by gradcheck."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import tree_bruteforce as tb
from tree_testlib import build_dist, grammar_of

from zoo.inference import DenseGrammar, RDPOptions, TreeDistribution

KINDS = ("dense", "lowrank", "rankspace")
F64 = torch.float64
B, T, NT, PT = 2, 4, 2, 2
LENGTHS = [4, 3]


def scored(spec, nodes, b):
    """{tree: score (plus its nodes' scores)} of every labelled tree of sentence b."""
    out = {}
    for tree, score in tb.tree_scores(spec, b):
        extra = 0.0 if nodes is None else sum(float(nodes[b, i, k, a]) for i, k, a in tree if k - i >= 2)
        out[tree] = score + extra
    return out


def brute_cross_entropy(p_spec, q_spec, p_nodes=None, q_nodes=None) -> torch.Tensor:
    out = []
    for b in range(B):
        p, q = scored(p_spec, p_nodes, b), scored(q_spec, q_nodes, b)
        p_log_z, q_log_z = (math.log(sum(math.exp(s) for s in x.values() if s > -math.inf)) for x in (p, q))
        total = 0.0
        for tree, score in p.items():
            prob = math.exp(score - p_log_z) if score > -math.inf else 0.0
            if prob > 0:
                total = math.inf if q[tree] == -math.inf else total + prob * (q_log_z - q[tree])
        out.append(total)
    return torch.tensor(out, dtype=F64)


def spec(kind, seed, shared=False):
    g = torch.Generator().manual_seed(seed)
    return tb.random_spec(kind, B, T, NT, PT, lengths=LENGTHS, generator=g, shared_grammar=shared)


@pytest.mark.parametrize("p_kind, q_kind", list(itertools.product(KINDS, KINDS)))
def test_cross_entropy_and_kl_match_enumeration(p_kind, q_kind):
    p_spec, q_spec = spec(p_kind, 1), spec(q_kind, 2, shared=True)
    p, q = build_dist(p_spec), build_dist(q_spec)
    expected = brute_cross_entropy(p_spec, q_spec)
    torch.testing.assert_close(p.cross_entropy(q), expected, rtol=1e-9, atol=1e-10)
    entropy = torch.tensor([tb.entropy(p_spec, b) for b in range(B)], dtype=F64)
    torch.testing.assert_close(p.kl(q), expected - entropy, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(p.kl(p), torch.zeros(B, dtype=F64), rtol=0, atol=1e-9)


def test_node_scores_on_either_side():
    p_spec, q_spec = spec("dense", 3), spec("lowrank", 4)
    g = torch.Generator().manual_seed(5)
    p_nodes, q_nodes = (torch.randn(B, T, T + 1, NT, generator=g, dtype=F64) for _ in range(2))
    for ours, theirs in ((p_nodes, None), (None, q_nodes), (p_nodes, q_nodes)):
        p = TreeDistribution(grammar_of(p_spec), p_spec.args["terms"], p_spec.lengths, node_scores=ours)
        q = TreeDistribution(grammar_of(q_spec), q_spec.args["terms"], q_spec.lengths, node_scores=theirs)
        torch.testing.assert_close(p.cross_entropy(q), brute_cross_entropy(p_spec, q_spec, ours, theirs),
                                   rtol=1e-9, atol=1e-10)  # fmt: skip


def test_the_randomized_backend_gives_the_exact_divergence():
    p_spec, q_spec = spec("dense", 6), spec("rankspace", 7)
    q = build_dist(q_spec)
    expected = build_dist(p_spec).kl(q)
    for k1, k2 in ((1, 1), (NT, 0)):
        proposal = "uniform" if k2 else None
        options = RDPOptions(k1, k2, proposal, generator=torch.Generator().manual_seed(0))
        randomized = build_dist(p_spec, "randomized", options)
        torch.testing.assert_close(randomized.kl(q), expected, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(q.kl(randomized), q.kl(build_dist(p_spec)), rtol=1e-10, atol=1e-10)


def test_forbidden_rules():
    """q forbidding rules that p uses: +inf (q's support smaller); the other way round, finite."""
    p_spec = spec("dense", 8)
    q_spec = tb.TreeSpec("dense", dict(p_spec.args), p_spec.lengths)
    rules = p_spec.args["rules"].clone()
    rules[:, 1] = -math.inf  # nonterminal 1 rewrites to nothing: only label 0 inside a tree
    q_spec.args["rules"] = rules
    p, q = build_dist(p_spec), build_dist(q_spec)
    assert (p.cross_entropy(q) == math.inf).all()
    torch.testing.assert_close(q.cross_entropy(p), brute_cross_entropy(q_spec, p_spec), rtol=1e-9, atol=1e-10)


def test_gradients_by_gradcheck():
    g = torch.Generator().manual_seed(9)
    S = NT + PT

    def leaf(*shape):
        return torch.randn(*shape, generator=g, dtype=F64).requires_grad_()

    p_parts = (leaf(NT), leaf(NT, S, S), leaf(B, T, PT))
    q_parts = (leaf(B, NT), leaf(B, NT, S, S), leaf(B, T, PT))
    lengths = torch.tensor(LENGTHS)

    def divergences(*parts):
        p, q = (TreeDistribution(DenseGrammar(root, rules), terms, lengths)
                for root, rules, terms in (parts[:3], parts[3:]))  # fmt: skip
        return p.cross_entropy(q) + 0.5 * q.kl(p)

    assert torch.autograd.gradcheck(divergences, (*p_parts, *q_parts))


def test_distributions_over_other_sentences_are_refused():
    p = build_dist(spec("dense", 10))
    other = spec("dense", 11)
    with pytest.raises(ValueError, match=r"the same lengths, got \[4, 3\] and \[4, 4\]"):
        p.kl(TreeDistribution(grammar_of(other), other.args["terms"]))
    with pytest.raises(ValueError, match=r"the same B x T x NT x PT, got \(2, 4, 2, 2\) and \(2, 3, 2, 2\)"):
        p.kl(TreeDistribution(grammar_of(other), other.args["terms"][:, :3], torch.tensor([3, 3])))
    with pytest.raises(TypeError, match="expected another TreeDistribution"):
        p.cross_entropy(p.grammar)
