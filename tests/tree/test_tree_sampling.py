"""Exact sampling against the brute force, with fixed seeds and bounds derived from the number of
draws (chi-square and total variation at a false-alarm probability of 1e-6, ``tree_testlib``).

* ``TreeDistribution.sample``: every grammar kind x backend (the dense top-down sampler, the
  rank-space sampler through the rank nodes, the fallbacks) matches ``tb.tree_distribution``;
* ``sample_sentences``: words and trees distributed as ``tb.sentence_distribution``;
* trees from sample / argmax / mbr are valid at sizes past the enumeration's comfort, and
  ``log_prob`` takes samples as n x B x (2T-1) x 3.
"""

from __future__ import annotations

import math

import pytest
import torch
import tree_bruteforce as tb
from op_outputs import OutputSizes
from tree_testlib import (
    COMBOS,
    DTYPE,
    assert_distribution,
    build_dist,
    cached_bruteforce,
    close,
    combo_id,
    grammar_of,
    one_thread,
    random_tree_spec,
    supports_argmax,
)

from zoo.inference.tree import TreeDistribution, sample_sentences, terminal_scores

combos = pytest.mark.parametrize("combo", COMBOS, ids=combo_id)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_thread():
        yield


# --------------------------------------------------------------------------- trees | sentence
@combos
def test_tree_samples_match_bruteforce(combo):
    kind, backend, options = combo
    n = 4000
    spec = random_tree_spec(kind, B=2, T=4, NT=2, PT=2, rank=2, lengths=[4, 3], seed=51, forbid=0.2)
    dist = build_dist(spec, backend, options)
    samples = tb.from_tensor_trees(dist.sample(n, torch.Generator().manual_seed(52)))
    with cached_bruteforce():
        for b in range(spec.batch):
            probs = tb.tree_distribution(spec, b)
            draws = [samples[s][b] for s in range(n)]
            assert_distribution(draws, probs, f"labelled trees of element {b}")
            shapes: dict = {}
            for tree, p in probs.items():
                shapes[tb.unlabel(tree)] = shapes.get(tb.unlabel(tree), 0.0) + p
            assert_distribution([tb.unlabel(t) for t in draws], shapes, f"unlabelled trees of element {b}")


@combos
def test_samples_are_reproducible_and_independent_across_the_batch(combo):
    """The same generator seed gives the same samples; identical batch rows still draw apart."""
    kind, backend, options = combo
    spec = random_tree_spec(kind, B=1, T=5, NT=2, PT=2, rank=2, seed=53, shared_grammar=True)
    spec.args["terms"] = spec.args["terms"].expand(2, 5, 2).contiguous()
    dist = build_dist(spec, backend, options)
    one = dist.sample(64, torch.Generator().manual_seed(54))
    two = dist.sample(64, torch.Generator().manual_seed(54))
    assert torch.equal(one, two)
    assert not torch.equal(one[:, 0], one[:, 1]), "the two copies of the sentence drew the same 64 trees"
    assert len({tuple(t) for t in tb.from_tensor_trees(one[:, 0])}) > 1


# --------------------------------------------------------------------------- validity at size
@combos
def test_sample_argmax_and_mbr_trees_are_valid(combo):
    """T = 7 (429 tree shapes), ragged: every tree is a tree of its length in pre-order with labels
    in range and -1 padding; log_prob takes n x B samples and B trees; log_prob(argmax) is
    max_score - log Z."""
    kind, backend, options = combo
    T, NT, PT = 7, 3, 3
    spec = random_tree_spec(kind, B=3, T=T, NT=NT, PT=PT, rank=3, lengths=[7, 2, 5], seed=55)
    dist = build_dist(spec, backend, options)
    B, M = spec.batch, 2 * T - 1
    samples = dist.sample(40, torch.Generator().manual_seed(56))
    assert samples.shape == (40, B, M, 3) and samples.dtype == torch.long
    outputs = [("sample", samples), ("mbr", dist.mbr())]
    if supports_argmax(combo):
        outputs.append(("argmax", dist.argmax))
    for what, trees in outputs:
        for b in range(B):
            n = spec.length(b)
            assert (trees[..., b, 2 * n - 1 :, :] == -1).all(), f"{what}: padding of element {b}"
            for tree in tb.from_tensor_trees(trees[..., b, :, :].reshape(-1, M, trees.shape[-1])):
                if what == "mbr":
                    assert tree in set(tb.enumerate_trees(n)), f"mbr of element {b}: {tree}"
                else:
                    assert tb.is_valid_tree(tree, n, NT, PT), f"{what} of element {b}: {tree}"
    log_p = dist.log_prob(samples)
    assert log_p.shape == (40, B) and log_p.dtype == DTYPE
    assert torch.isfinite(log_p).all() and (log_p <= 0).all()
    close(dist.log_prob(samples[3]), log_p[3], "log_prob of one sample per sentence")
    if supports_argmax(combo):
        close(dist.log_prob(dist.argmax), dist.max_score - dist.log_partition, "log_prob(argmax)")
        assert (dist.max_score[None] >= log_p + dist.log_partition - 1e-9).all()


# --------------------------------------------------------------------------- sentences
@pytest.mark.parametrize("grammar_batch", ["shared", "batched"])
@pytest.mark.parametrize("emission_batch", ["shared", "batched"])
def test_sample_sentences_matches_sentence_distribution(grammar_batch, emission_batch):
    n, V = 6000, 2
    spec, emission = tb.random_pcfg(
        2, 2, 2, V, generator=torch.Generator().manual_seed(61), shared_grammar=grammar_batch == "shared"
    )
    if emission_batch == "batched" and emission.dim() == 2:
        emission = torch.stack([emission, emission.flip(-1)])
    if emission_batch == "shared" and emission.dim() == 3:
        emission = emission[1]
    lengths = torch.tensor([3, 2])
    words, trees = sample_sentences(grammar_of(spec), emission, lengths, n, torch.Generator().manual_seed(62))
    T = int(lengths.max())
    assert words.shape == (n, 2, T) and words.dtype == torch.long
    assert trees.shape == (n, 2, 2 * T - 1, 3) and trees.dtype == torch.long
    for b, length in enumerate(lengths.tolist()):
        assert (words[:, b, length:] == -1).all() and (words[:, b, :length] >= 0).all()
        assert (words[:, b, :length] < V).all()
        probs = tb.sentence_distribution(spec, emission, length, b)
        draws = [
            (tuple(w), t)
            for w, t in zip(words[:, b, :length].tolist(), tb.from_tensor_trees(trees[:, b]))
        ]
        assert_distribution(draws, probs, f"(words, tree) of element {b}")
        sentences: dict = {}
        for (w, _), p in probs.items():
            sentences[w] = sentences.get(w, 0.0) + p
        assert_distribution([w for w, _ in draws], sentences, f"words of element {b}")


@pytest.mark.parametrize("kind", ["lowrank", "rankspace"])
def test_sample_sentences_with_factored_grammars(kind):
    """T = 4 (productions with two nonterminal children occur); the LPCFG's ignored NT x NT block
    of rules is set far from its features, so using it shows."""
    n, V = 4000, 2
    spec = random_tree_spec(kind, B=1, T=4, NT=1, PT=1, rank=2, seed=63, shared_grammar=True)
    if kind == "lowrank":
        spec.args["rules"][:, :1, :1] = 4.0  # the (ignored) N -> N N entry
    emission = torch.randn(1, V, generator=torch.Generator().manual_seed(64), dtype=DTYPE).log_softmax(-1)
    words, trees = sample_sentences(grammar_of(spec), emission, torch.tensor([4]), n,
                                    torch.Generator().manual_seed(65))
    probs = tb.sentence_distribution(spec, emission, 4, 0)
    draws = [(tuple(w), t) for w, t in zip(words[:, 0].tolist(), tb.from_tensor_trees(trees[:, 0]))]
    assert_distribution(draws, probs, f"(words, tree) under a {kind} grammar")


def test_sampled_sentences_score_back_through_terminal_scores():
    """A sampled (words, tree), scored back with terminal_scores(emission, words): log p(tree | words)
    from the engine equals the brute force's on those words (positions past the length are -1)."""
    spec, emission = tb.random_pcfg(2, 2, 3, 4, generator=torch.Generator().manual_seed(66))
    lengths = torch.tensor([4, 3])
    words, trees = sample_sentences(grammar_of(spec), emission, lengths, 5, torch.Generator().manual_seed(67))
    for s in range(5):
        terms = terminal_scores(emission, words[s])
        log_p = TreeDistribution(grammar_of(spec), terms, lengths).log_prob(trees[s])
        for b, length in enumerate(lengths.tolist()):
            one = tb.element_spec(spec, b, terms[b, :length])
            want = tb.log_prob(one, 0, tb.from_tensor_tree(trees[s, b]))
            got = float(log_p[b])
            assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9), (s, b, got, want)


def test_sampling_many_sentences_draws_words_in_bounded_memory(monkeypatch):
    """Words were drawn for every tree row at once (n x B x (2T-1) x V logits: 1.6 MB a six-word sample
    at V = 10,000, and n = 20,000 was killed for memory); now for the leaves, a bounded number at a
    time (``WORDS_AT_ONCE``; small here, so several chunks run), from the same distribution."""
    import zoo.inference.tree.sentences as sentences

    monkeypatch.setattr(sentences, "WORDS_AT_ONCE", 400)
    V, n = 40, 500
    spec, emission = tb.random_pcfg(2, 2, 3, V, generator=torch.Generator().manual_seed(66))
    lengths = torch.tensor([4, 3])
    generator = torch.Generator().manual_seed(9)
    with OutputSizes() as sizes:
        words, trees = sample_sentences(grammar_of(spec), emission, lengths, n, generator)
    assert sizes.largest < n * 2 * 7 * V / 4  # not n B (2T - 1) V logits
    assert words.shape == (n, 2, 4) and (words[:, 1, 3] == -1).all() and (words[:, :, :3] >= 0).all()
    for s in range(0, n, 50):  # each leaf's word is one its preterminal can emit
        terms = terminal_scores(emission, words[s])
        assert torch.isfinite(TreeDistribution(grammar_of(spec), terms, lengths).log_prob(trees[s])).all()
