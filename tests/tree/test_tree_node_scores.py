"""Node scores (a tree CRF's span scores, Alg. 2's node potentials) against brute-force enumeration.

The reference adds sum over a tree's nodes of node_scores[b, i, k, A] to each enumerated tree's
score (tests/tree_bruteforce.py), then computes every quantity from the resulting distribution.
"""

from __future__ import annotations

import math

import pytest
import torch
import tree_bruteforce as tb

from zoo.inference import DenseGrammar, LowRankGrammar, RankSpaceGrammar, RDPOptions, TreeDistribution

KINDS = ("dense", "lowrank", "rankspace")
BACKENDS = ("exact", "own", "randomized")


def grammar_of(spec: tb.TreeSpec):
    a = spec.args
    if spec.kind == "dense":
        return DenseGrammar(a["root"], a["rules"])
    if spec.kind == "lowrank":
        return LowRankGrammar(a["root"], a["rules"], a["head"], a["children"])
    return RankSpaceGrammar(a["root"], a["U"], a["V"], a["W"])


def scored_trees(spec, nodes, b):
    """(tree, score + node scores) of every tree of batch element b."""
    out = []
    for tree, score in tb.tree_scores(spec, b):
        extra = sum(float(nodes[b, i, k, a]) for i, k, a in tree if k - i >= 2)
        out.append((tree, score + extra))
    return out


def reference(spec, nodes, b):
    scored = scored_trees(spec, nodes, b)
    log_z = math.log(sum(math.exp(s) for _, s in scored))
    probs = [(t, math.exp(s - log_z)) for t, s in scored]
    T, NT = spec.T, spec.NT
    span = torch.zeros(T, T + 1, dtype=torch.float64)
    labelled = torch.zeros(T, T + 1, NT, dtype=torch.float64)
    for tree, p in probs:
        for i, k, a in tree:
            span[i, k] += p
            if k - i >= 2:
                labelled[i, k, a] += p
    entropy = -sum(p * math.log(p) for _, p in probs if p > 0)
    best = max(scored, key=lambda x: x[1])
    return log_z, span, labelled, entropy, best, scored


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_node_scores_match_enumeration(kind, backend):
    g = torch.Generator().manual_seed(7)
    lengths = torch.tensor([4, 2, 3])
    spec = tb.random_spec(kind, 3, 4, 2, 2, rank=2, lengths=lengths, generator=g)
    nodes = torch.randn(3, 4, 5, 2, generator=g, dtype=torch.float64)
    options = RDPOptions(2, 0) if backend == "randomized" else None
    chosen = None if backend == "own" else backend
    dist = TreeDistribution(grammar_of(spec), spec.args["terms"], lengths, chosen, options, node_scores=nodes)
    for b in range(3):
        log_z, span, labelled, entropy, best, scored = reference(spec, nodes, b)
        assert dist.log_partition[b].item() == pytest.approx(log_z, rel=1e-10)
        torch.testing.assert_close(dist.span_marginals[b], span, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(dist.marginals[b], labelled, rtol=1e-9, atol=1e-10)
        assert dist.entropy[b].item() == pytest.approx(entropy, rel=1e-9, abs=1e-10)
        tree, score = scored[5]
        rows = [tree if i == b else scored_trees(spec, nodes, i)[0][0] for i in range(3)]
        trees = tb.to_tensor_trees(rows, 4)
        assert dist.log_prob(trees)[b].item() == pytest.approx(score - log_z, rel=1e-9, abs=1e-10)
        if kind != "rankspace" or backend == "exact":
            assert dist.max_score[b].item() == pytest.approx(best[1], rel=1e-10)


def test_node_scores_steer_sampling():
    """Samples follow the node-scored distribution (total variation within its sampling bound)."""
    g = torch.Generator().manual_seed(3)
    spec = tb.random_spec("dense", 1, 4, 2, 2, generator=g)
    nodes = 2 * torch.randn(1, 4, 5, 2, generator=g, dtype=torch.float64)
    dist = TreeDistribution(grammar_of(spec), spec.args["terms"], node_scores=nodes)
    n = 4000
    samples = dist.sample(n, generator=torch.Generator().manual_seed(0))
    log_z, *_, scored = reference(spec, nodes, 0)
    counts: dict = {}
    for s in range(n):
        key = tb.from_tensor_tree(samples[s, 0])
        counts[key] = counts.get(key, 0) + 1
    tv = 0.5 * sum(abs(counts.get(t, 0) / n - math.exp(sc - log_z)) for t, sc in scored)
    # E[TV] <= 0.5 sum sqrt(p (1-p) / n); allow three times that
    bound = 3 * 0.5 * sum(math.sqrt(math.exp(sc - log_z) / n) for _, sc in scored)
    assert tv < bound


def test_node_scores_shape_is_checked():
    spec = tb.random_spec("dense", 2, 4, 2, 2, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"node_scores must have shape B x T x \(T\+1\) x NT"):
        terms = spec.args["terms"]
        TreeDistribution(grammar_of(spec), terms, node_scores=terms.new_zeros(2, 4, 4, 2))
