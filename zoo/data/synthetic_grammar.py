"""A known PCFG to test grammar induction without treebanks: sample sentences with gold trees, train
on the sentences alone, and score the induced trees against the gold ones (``zoo.tasks.grammar_induction``).

The grammar (``toy_grammar``) is a small English-like CNF grammar with agreement inside noun
phrases (three NP types k, each a determiner class and a noun class of its own: the dependency that
makes the NP a constituent), verbs that select their object's type (the dependency that makes the
VP one) and PP attachment to NPs and VPs (left-recursive, so the trees are far from
right-branching)::

    S   -> NPk VP 1/3 each
    VP  -> Vk NPk 0.25 each | VP PP 0.25
    PP  -> P NPk 1/3 each
    NPk -> Detk Nk 0.8 | NPk PP 0.2          (k = 1, 2, 3)

with disjoint word classes of ``words_per_class`` words each (Det1..3, N1..3, V1..3, P), uniform
within a class. Sentences are drawn exactly from p(words, tree | length) (``zoo.inference.sample_sentences``).

Without the verbs' selection (one verb class for every object) the VP is not identifiable:
``S -> X NP``, ``X -> NP V``, ``S -> S PP`` gives every sentence the same probability with as many
nonterminals but brackets ``(NP V) NP``, so likelihood cannot choose between the two, and induced
grammars parsed at sentence F1 88 or 57 by chance (docs/pcfg.md). With the selection that grammar
needs one X per verb type: 8 nonterminals, not 6.
Word ids start at ``offset`` (2: after ``<eos>`` = 0 and ``<unk>`` = 1, as ``zoo.data.Vocabulary``).

Baselines for the F1 table: ``right_branching(n)`` and ``random_tree(n, generator)`` (a split drawn
uniformly at every span, top-down).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.inference import DenseGrammar, TreeDistribution, sample_sentences

NONTERMINALS = ("S", "VP", "PP", "NP1", "NP2", "NP3")
PRETERMINALS = ("Det1", "Det2", "Det3", "N1", "N2", "N3", "V1", "V2", "V3", "P")
_NPS = ("NP1", "NP2", "NP3")
RULES = {
    "S": [(np, "VP", 1 / 3) for np in _NPS],
    "VP": [(f"V{k}", f"NP{k}", 0.75 / 3) for k in (1, 2, 3)] + [("VP", "PP", 0.25)],
    "PP": [("P", np, 1 / 3) for np in _NPS],
    **{f"NP{k}": [(f"Det{k}", f"N{k}", 0.8), (f"NP{k}", "PP", 0.2)] for k in (1, 2, 3)},
}

__all__ = [
    "NONTERMINALS",
    "PRETERMINALS",
    "RULES",
    "WORDS_PER_CLASS",
    "possible_lengths",
    "random_tree",
    "right_branching",
    "sample_corpus",
    "toy_grammar",
]


WORDS_PER_CLASS = 4  # the default size of every word class


def toy_grammar(words_per_class: int = WORDS_PER_CLASS) -> tuple[DenseGrammar, Tensor]:
    """The grammar above: a ``DenseGrammar`` (root always S) and the PT x V emission log-probabilities
    (V = len(PRETERMINALS) * words_per_class words, class c owning ids c * words_per_class ...)."""
    symbols = {name: i for i, name in enumerate(NONTERMINALS + PRETERMINALS)}
    NT, S = len(NONTERMINALS), len(symbols)
    rules = torch.full((NT, S, S), float("-inf"), dtype=torch.float64)
    for parent, productions in RULES.items():
        for left, right, p in productions:
            rules[symbols[parent], symbols[left], symbols[right]] = math.log(p)
    root = torch.full((NT,), float("-inf"), dtype=torch.float64)
    root[symbols["S"]] = 0.0
    V = len(PRETERMINALS) * words_per_class
    emission = torch.full((len(PRETERMINALS), V), float("-inf"), dtype=torch.float64)
    for c in range(len(PRETERMINALS)):
        emission[c, c * words_per_class : (c + 1) * words_per_class] = -math.log(words_per_class)
    return DenseGrammar(root, rules), emission


def sample_corpus(
    num_sentences: int,
    min_length: int,
    max_length: int,
    seed: int = 0,
    words_per_class: int = WORDS_PER_CLASS,
    offset: int = 2,
) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
    """``num_sentences`` sentences (word ids + ``offset``), lengths uniform over the lengths in
    min..max_length that the grammar can generate (``possible_lengths``; 5, 8, 11, ... here), with
    their gold constituents (spans ``(start, end)`` of width >= 2, root included, pre-order)."""
    if not 2 <= min_length <= max_length:
        raise ValueError(f"need 2 <= min_length <= max_length, got {min_length}, {max_length}")
    generator = torch.Generator().manual_seed(seed)
    grammar, emission = toy_grammar(words_per_class)
    feasible = possible_lengths(grammar, emission, min_length, max_length)
    if not feasible:
        raise ValueError(f"the grammar generates no sentence of {min_length}..{max_length} words")
    pick = torch.randint(len(feasible), (num_sentences,), generator=generator)
    lengths = torch.tensor(feasible)[pick]
    words, trees = sample_sentences(grammar, emission, lengths, 1, generator)
    sentences, spans = [], []
    for b in range(num_sentences):
        n = int(lengths[b])
        sentences.append([int(w) + offset for w in words[0, b, :n]])
        rows = trees[0, b].tolist()
        spans.append([(i, k) for i, k, _ in rows if i >= 0 and k - i >= 2])
    return sentences, spans


def possible_lengths(grammar: DenseGrammar, emission: Tensor, min_length: int, max_length: int) -> list[int]:
    """The sentence lengths in min..max_length with non-zero probability under the grammar."""
    terms = torch.logsumexp(emission, -1).expand(1, max_length, -1)
    out = []
    for n in range(min_length, max_length + 1):
        try:
            log_z = TreeDistribution(grammar, terms[:, :n], torch.tensor([n])).log_partition
        except ValueError:  # no tree of n words has a non-zero probability
            continue
        if torch.isfinite(log_z).all():
            out.append(n)
    return out


def right_branching(n: int) -> list[tuple[int, int]]:
    """Spans of the right-branching binary tree of n words (width >= 2): (0, n), (1, n), ..."""
    return [(i, n) for i in range(n - 1)]


def random_tree(n: int, generator: torch.Generator | None = None) -> list[tuple[int, int]]:
    """Spans (width >= 2) of a random binary tree of n words: at each span a split point is drawn
    uniformly, top-down."""
    out: list[tuple[int, int]] = []

    def build(i: int, k: int) -> None:
        if k - i < 2:
            return
        out.append((i, k))
        j = i + 1 + int(torch.randint(k - i - 1, (1,), generator=generator))
        build(i, j)
        build(j, k)

    build(0, n)
    return out
