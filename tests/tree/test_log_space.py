"""Sentences whose trees all run through entries hundreds of nats below their span's best: the scaled
inside loses them even in float64, so the guard sends them to the log-space inside (``tree.log_space``),
and log Z, marginals and gradients stay exact; a plain float64 log-sum-exp inside is the reference."""

import pytest
import torch

from zoo.inference import DenseGrammar, LowRankGrammar, RankSpaceGrammar, RDPOptions, TreeDistribution
from zoo.inference.tree import log_space, randomized

NEG_INF = float("-inf")


def lse(x, dim):
    """log-sum-exp over ``dim``, -inf with a zero gradient where every entry is -inf."""
    m = x.detach().amax(dim, keepdim=True)
    m = torch.where(torch.isinf(m), 0.0, m)
    total = (x - m).exp().sum(dim)
    alive = total > 0
    return torch.where(alive, torch.where(alive, total, 1.0).log(), NEG_INF) + m.squeeze(dim)


def plain_inside(root, rules, terms, lengths, nodes=None):
    """log Z (B,) by the textbook recursion over spans, one log-sum-exp per span and label (float64)."""
    NT, S = rules.shape[0], rules.shape[-1]
    out = []
    for b, n in enumerate(lengths.tolist()):
        chart = {}
        for i in range(n):
            leaf = torch.full((S,), NEG_INF, dtype=torch.float64)
            leaf[NT:] = terms[b, i]
            chart[i, i + 1] = leaf
        for w in range(2, n + 1):
            for i in range(n - w + 1):
                k = i + w
                children = torch.stack([chart[i, j][:, None] + chart[j, k][None, :] for j in range(i + 1, k)])
                value = torch.full((S,), NEG_INF, dtype=torch.float64)
                value[:NT] = lse((rules + lse(children, 0)).flatten(1), -1)
                if nodes is not None:
                    value[:NT] = value[:NT] + nodes[b, i, k]
                chart[i, k] = value
        out.append(lse(chart[0, n][:NT] + root, -1))
    return torch.stack(out)


def gap_grammar(gap, dtype):
    """One nonterminal whose only rule takes two P1 leaves; each word scores P0 at 0, P1 at -gap:
    the one tree of two words scores -2 gap."""
    rules = torch.full((1, 3, 3), NEG_INF, dtype=dtype)
    rules[0, 2, 2] = 0.0
    terms = torch.tensor([[[0.0, -gap], [0.0, -gap]]], dtype=dtype)
    return DenseGrammar(torch.zeros(1, dtype=dtype), rules), terms


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gap", [300.0, 360.0, 400.0, 2000.0])
def test_leaves_far_below_their_best_preterminal(gap, dtype):
    """At gap 360 the scaled float64 inside returned -708.4 (the log of its smallest normal number),
    from 380 on a false "no tree" error."""
    grammar, terms = gap_grammar(gap, dtype)
    terms.requires_grad_()
    dist = TreeDistribution(grammar, terms)
    torch.testing.assert_close(dist.log_partition, torch.tensor([-2 * gap], dtype=dtype))
    (grad,) = torch.autograd.grad(dist.log_partition.sum(), terms)
    torch.testing.assert_close(grad, torch.tensor([[[0.0, 1.0], [0.0, 1.0]]], dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("low", [-760.0, -1e4])
def test_the_only_usable_rule_far_below_the_best(low, dtype):
    """The parent's best rule needs a preterminal no word can be: the tree's rule at -760 or -1e4 was
    flushed to zero in float64 (a false "no tree" error)."""
    rules = torch.full((1, 3, 3), NEG_INF, dtype=dtype)
    rules[0, 2, 2], rules[0, 1, 1] = 0.0, low
    terms = torch.tensor([[[0.0, NEG_INF], [0.0, NEG_INF]]], dtype=dtype)
    dist = TreeDistribution(DenseGrammar(torch.zeros(1, dtype=dtype), rules), terms)
    torch.testing.assert_close(dist.log_partition, torch.tensor([low], dtype=dtype))


def constrained_crf(T, B, seed=0):
    """A tree CRF (node scores) with label constraints: A0 scores +400 on every span but may only sit
    over two leaves, A1 never has an A0 child; random scores for A1."""
    g = torch.Generator().manual_seed(seed)
    rules = torch.zeros(2, 3, 3, dtype=torch.float64)
    rules[0] = NEG_INF
    rules[0, 2, 2] = 0.0
    rules[1, 0, :] = rules[1, :, 0] = NEG_INF
    nodes = torch.zeros(B, T, T + 1, 2, dtype=torch.float64)
    nodes[..., 0] = 400.0
    nodes[..., 1] = torch.randn(B, T, T + 1, generator=g, dtype=torch.float64)
    terms = torch.zeros(B, T, 1, dtype=torch.float64)
    return DenseGrammar(torch.zeros(2, dtype=torch.float64), rules), terms, nodes


def test_a_constrained_tree_crf_with_a_dominant_label():
    """T = 4 with A1's scores zero: five bracketings, log Z = log 5 (was a false "no tree" error); at
    T = 24 the plain inside's values (were 6 nats off, silently)."""
    grammar, terms, nodes = constrained_crf(4, 1)
    nodes[..., 1] = 0.0
    log_z = TreeDistribution(grammar, terms, node_scores=nodes).log_partition
    torch.testing.assert_close(log_z, torch.tensor([5.0], dtype=torch.float64).log())
    grammar, terms, nodes = constrained_crf(24, 2, seed=1)
    lengths = torch.tensor([24, 11])
    dist = TreeDistribution(grammar, terms, lengths, node_scores=nodes)
    expected = plain_inside(grammar.root[0], grammar.rules[0], terms, lengths, nodes)
    torch.testing.assert_close(dist.log_partition, expected)
    marginals = dist.marginals
    assert torch.isfinite(marginals).all() and (marginals[..., 0] == 0).all()  # A0 never fits: A1 only


@pytest.mark.parametrize("backend", ["exact", "low-rank"])
def test_only_the_marked_sentences_go_to_log_space(backend, monkeypatch):
    """A batch with one sentence that needs log space and one that does not: only the first is
    recomputed there, and both get the plain inside's log Z (a low-rank grammar: its materialized
    rules)."""
    g = torch.Generator().manual_seed(3)
    NT, PT, R, T = 2, 3, 4, 5
    rules = torch.randn(NT, NT + PT, NT + PT, generator=g, dtype=torch.float64)
    head, children = torch.rand(NT, R, generator=g, dtype=torch.float64), torch.rand(NT, NT, R, generator=g,
                                                                                      dtype=torch.float64)
    grammar = LowRankGrammar(torch.zeros(NT, dtype=torch.float64), rules, head, children)
    terms = torch.randn(2, T, PT, generator=g, dtype=torch.float64)
    rules[:, NT] = rules[:, :, NT] = NEG_INF  # the first preterminal is no one's child
    terms[0, :, 1:] -= 900.0  # sentence 0: its trees run through leaves 900 nats below their best
    lengths = torch.tensor([5, 4])
    seen = []
    original = log_space.log_partition
    monkeypatch.setattr(log_space, "log_partition", lambda grammar, terms, *rest: seen.append(len(terms))
                        or original(grammar, terms, *rest))  # fmt: skip
    log_z = TreeDistribution(grammar, terms, lengths, backend=backend).log_partition
    expected = plain_inside(grammar.root[0], grammar.dense_rules()[0], terms, lengths)
    torch.testing.assert_close(log_z, expected)
    assert seen == [1]


def random_crf(g: torch.Generator, NT: int, PT: int = 4, T: int = 7):
    """Two sentences' dense grammars (one each), terms and node scores, random normal (float64)."""
    rules = torch.randn(2, NT, NT + PT, NT + PT, generator=g, dtype=torch.float64)
    grammar = DenseGrammar(torch.randn(2, NT, generator=g, dtype=torch.float64), rules)
    terms = torch.randn(2, T, PT, generator=g, dtype=torch.float64)
    return grammar, terms, torch.randn(2, T, T + 1, NT, generator=g, dtype=torch.float64)


def test_the_log_space_inside_is_the_scaled_one_where_nothing_underflows():
    grammar, terms, nodes = random_crf(torch.Generator().manual_seed(4), NT=3)
    lengths = torch.tensor([7, 3])
    scaled = TreeDistribution(grammar, terms, lengths, node_scores=nodes).log_partition
    torch.testing.assert_close(log_space.log_partition(grammar, terms, lengths, None, nodes), scaled)


@pytest.mark.parametrize("algorithm", [None, "state-space"])
@pytest.mark.parametrize("gap", [800.0, 1500.0])
def test_a_cpd_grammar_beyond_float64s_range(gap, algorithm):
    """A CPD grammar whose only usable children are preterminal P1, each word's P1 ``gap`` nats under P0
    (float64): the rank-space and state-space insides flushed them from 800 on; log Z is -2 gap."""
    ones = torch.ones(1, 1, dtype=torch.float64)
    usable = torch.tensor([[0.0], [0.0], [1.0]], dtype=torch.float64)  # symbols A, P0, P1
    grammar = RankSpaceGrammar(torch.zeros(1, dtype=torch.float64), ones, usable, usable.clone())
    terms = torch.tensor([[[0.0, -gap], [0.0, -gap]]], dtype=torch.float64)
    dist = TreeDistribution(grammar, terms, backend="rank-space", options=algorithm)
    torch.testing.assert_close(dist.log_partition, torch.tensor([-2 * gap], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gap", [400.0, 2000.0])
def test_entropy_and_samples_of_a_sentence_with_one_usable_tree(gap, dtype):
    """Beyond float64's range the entropy pass and the sampler's chart lost the sentence's one tree too (a
    false "no tree" error): its entropy is 0 and every sample is that tree."""
    grammar, terms = gap_grammar(gap, dtype)
    dist = TreeDistribution(grammar, terms)
    torch.testing.assert_close(dist.entropy, torch.zeros(1, dtype=dtype))
    samples = dist.sample(5, generator=torch.Generator().manual_seed(0))
    assert (samples[:, 0] == torch.tensor([[0, 2, 0], [0, 1, 1], [1, 2, 1]])).all()


def test_entropy_and_samples_of_a_constrained_tree_crf():
    """The dominant label never fits: at T = 4 the five bracketings (label A1) are equally likely,
    entropy log 5, and the samples spread evenly over them; at T = 12 the entropy is log Z - E[score]
    of the plain inside (its expected node scores by autograd), with finite gradients."""
    grammar, terms, nodes = constrained_crf(4, 1)
    nodes[..., 1] = 0.0
    dist = TreeDistribution(grammar, terms, node_scores=nodes)
    torch.testing.assert_close(dist.entropy, torch.tensor([5.0], dtype=torch.float64).log())
    trees = dist.sample(2000, generator=torch.Generator().manual_seed(0))[:, 0]  # 2000 x 7 x 3
    wide = (trees[..., 1] - trees[..., 0]) >= 2
    assert (trees[..., 2][wide] == 1).all()
    _, counts = torch.unique(trees[..., :2].flatten(1), dim=0, return_counts=True)
    assert len(counts) == 5 and ((counts - 400).abs() < 72).all(), counts  # 4 standard deviations
    grammar, terms, nodes = constrained_crf(12, 2, seed=1)
    lengths = torch.tensor([12, 7])
    nodes.requires_grad_()
    entropy = TreeDistribution(grammar, terms, lengths, node_scores=nodes).entropy
    reference_nodes = nodes.detach().clone().requires_grad_()
    log_z = plain_inside(grammar.root[0], grammar.rules[0], terms, lengths, reference_nodes)
    (counts,) = torch.autograd.grad(log_z.sum(), reference_nodes)
    expected_score = (counts * reference_nodes.detach()).flatten(1).sum(-1)
    torch.testing.assert_close(entropy, log_z.detach() - expected_score)
    (grad,) = torch.autograd.grad(entropy.sum(), nodes)
    assert torch.isfinite(grad).all()


def gap_grammars(gap, dtype):
    """``gap_grammar``'s one tree as a dense, an LPCFG and a CPD grammar (A -> P1 P1 only)."""
    dense, terms = gap_grammar(gap, dtype)
    ones = torch.ones(1, 1, dtype=dtype)
    lpcfg = LowRankGrammar(dense.root, dense.rules, ones, ones.view(1, 1, 1))
    usable = torch.tensor([[0.0], [0.0], [1.0]], dtype=dtype)  # symbols A, P0, P1
    cpd = RankSpaceGrammar(dense.root, ones, usable, usable.clone())
    return (dense, lpcfg, cpd), terms


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gap", [400.0, 2000.0])
@pytest.mark.parametrize("kind", range(3))
def test_the_randomized_estimate_of_a_sentence_beyond_float64s_range(kind, gap, dtype):
    """Every label kept (k1 = NT), the estimate is the exact log Z: it was -inf for the dense and LPCFG
    grammars from a gap of 400 nats and for the CPD one from 2000, float64 included."""
    grammars, terms = gap_grammars(gap, dtype)
    terms.requires_grad_()
    dist = TreeDistribution(grammars[kind], terms, backend="randomized", options=RDPOptions(k1=1, k2=0))
    torch.testing.assert_close(dist.log_partition, torch.tensor([-2 * gap], dtype=dtype))
    (grad,) = torch.autograd.grad(dist.log_partition.sum(), terms)
    torch.testing.assert_close(grad, torch.tensor([[[0.0, 1.0], [0.0, 1.0]]], dtype=dtype))


def test_the_log_space_randomized_inside_is_the_scaled_one_on_the_same_kept_labels():
    """Where nothing underflows, the log-space pass over the kept labels (k1 + k2 < NT, so draws and
    weights matter) gives the scaled pass's estimate, with node scores and ragged lengths."""
    g = torch.Generator().manual_seed(5)
    grammar, terms, nodes = random_crf(g, NT=5)
    lengths = torch.tensor([7, 4])
    kept = randomized.select_labels(grammar, terms, RDPOptions(k1=2, k2=1, generator=g))
    scaled = randomized.gathered_inside(grammar, terms, lengths, kept, None, nodes)
    in_logs = randomized.gathered_inside(grammar, terms, lengths, kept, None, nodes, in_log_space=True)
    assert torch.isfinite(scaled).all()
    torch.testing.assert_close(in_logs, scaled)


def bracketing_cpd(gap):
    """A CPD grammar (float64) whose every binary tree has the same score, once each word is its P1
    (``gap`` nats under P0): psi(A, b, c) = 1 for b, c in {A, P1}, 0 where a child is P0."""
    usable = torch.tensor([[1.0], [0.0], [1.0]], dtype=torch.float64)  # symbols A, P0, P1
    grammar = RankSpaceGrammar(torch.zeros(1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
                               usable, usable.clone())  # fmt: skip
    return grammar, torch.tensor([[0.0, -gap]], dtype=torch.float64).expand(1, 4, 2)


@pytest.mark.parametrize("gap", [800.0, 2000.0])
def test_rank_space_samples_of_a_sentence_beyond_float64s_range(gap):
    """The rank-space sampler's float64 charts lost every tree (a false "no tree" error): the five
    bracketings of four words are equally likely and each draws about a fifth of 2000 samples."""
    grammar, terms = bracketing_cpd(gap)
    dist = TreeDistribution(grammar, terms, backend="rank-space")
    torch.testing.assert_close(dist.log_partition, torch.tensor([5.0], dtype=torch.float64).log() - 4 * gap)
    trees = dist.sample(2000, generator=torch.Generator().manual_seed(0))[:, 0]  # 2000 x 7 x 3
    leaves = (trees[..., 1] - trees[..., 0]) == 1
    assert (trees[..., 2][leaves] == 1).all() and (trees[..., 2][~leaves] == 0).all()  # P1 leaves, A nodes
    _, counts = torch.unique(trees[..., :2].flatten(1), dim=0, return_counts=True)
    assert len(counts) == 5 and ((counts - 400).abs() < 72).all(), counts  # 4 standard deviations
