"""The tree engine: CNF grammars (inside / outside over spans) with every backend."""

from zoo.inference.tree.distribution import TreeDistribution
from zoo.inference.tree.factors import DenseGrammar, LowRankGrammar, RankSpaceGrammar, terminal_scores
from zoo.inference.tree.sentences import sample_sentences

__all__ = [
    "DenseGrammar",
    "LowRankGrammar",
    "RankSpaceGrammar",
    "TreeDistribution",
    "sample_sentences",
    "terminal_scores",
]
