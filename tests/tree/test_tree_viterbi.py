"""The tree Viterbi (``zoo.inference.tree.viterbi``: values-only max-plus CKY, each decomposition on the
best tree recomputed from the chart) past brute-force sizes: the tree scores the best score, chunked rule
applications give the same trees, and per-sentence grammars with node scores and forbidden rules decode."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import DenseGrammar, TreeDistribution
from zoo.inference.tree import chart


def random_grammar(B, T, NT, PT, seed=0, batched=False, forbidden=0.0):
    g = torch.Generator().manual_seed(seed)
    lead = (B,) if batched else ()
    root = torch.randn(*lead, NT, generator=g, dtype=torch.float64)
    rules = torch.randn(*lead, NT, NT + PT, NT + PT, generator=g, dtype=torch.float64)
    forbid = torch.rand(rules.shape, generator=g, dtype=torch.float64) < forbidden
    rules = rules.masked_fill(forbid, float("-inf"))
    terms = torch.randn(B, T, PT, generator=g, dtype=torch.float64)
    return DenseGrammar(root, rules), terms


@pytest.mark.parametrize("batched", [False, True])
def test_the_tree_scores_the_best_score(batched):
    grammar, terms = random_grammar(3, 25, 5, 7, batched=batched, forbidden=0.3)
    lengths = torch.tensor([25, 2, 17])
    g = torch.Generator().manual_seed(1)
    nodes = torch.randn(3, 25, 26, 5, generator=g, dtype=torch.float64)
    dist = TreeDistribution(grammar, terms, lengths, node_scores=nodes)
    tree = dist.argmax
    for b, n in enumerate(lengths.tolist()):
        assert (tree[b, : 2 * n - 1] >= 0).all() and (tree[b, 2 * n - 1 :] == -1).all()
    scored = dist.log_prob(tree) + dist.log_partition
    torch.testing.assert_close(scored, dist.max_score, atol=1e-9, rtol=0)
    sampled = dist.log_prob(dist.sample(5, generator=g)).max(0).values + dist.log_partition
    assert (dist.max_score >= sampled).all()


def test_chunked_rule_applications_give_the_same_trees(monkeypatch):
    grammar, terms = random_grammar(3, 9, 4, 5, seed=2, batched=True)
    lengths = torch.tensor([9, 5, 8])
    whole = TreeDistribution(grammar, terms, lengths)
    monkeypatch.setattr(chart, "RULES_CHUNK", 1)  # one sentence a chunk
    chunked = TreeDistribution(grammar, terms, lengths)
    assert torch.equal(chunked.argmax, whole.argmax)
    torch.testing.assert_close(chunked.max_score, whole.max_score, atol=0, rtol=0)


def test_the_best_score_is_differentiable_its_gradient_the_trees_indicator():
    """max_score is the best tree's score summed from the potentials (root, rules, terms, node scores),
    as a structured hinge loss needs; it was CKY's value, without a graph. gradcheck, no ties."""
    grammar, terms = random_grammar(2, 5, 3, 4, seed=3, batched=True)
    g = torch.Generator().manual_seed(5)
    nodes = torch.randn(2, 5, 6, 3, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5, 3])

    def best(root, rules, terms, nodes):
        return TreeDistribution(DenseGrammar(root, rules), terms, lengths, node_scores=nodes).max_score

    args = [x.clone().requires_grad_() for x in (grammar.root, grammar.rules, terms, nodes)]
    assert torch.autograd.gradcheck(best, args)
