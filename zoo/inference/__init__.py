"""The inference engine: structures x backends x operations, in pure torch."""

from zoo.inference.backend import Backend
from zoo.inference.chain import (
    DenseChain,
    EmbeddingChain,
    LinearChain,
    LowRankChain,
    RankSpaceChain,
    RDPOptions,
)
from zoo.inference.semimarkov import (
    DenseSemiMarkov,
    EdgeSemiMarkov,
    LowRankSemiMarkov,
    RankSpaceSemiMarkov,
    SemiMarkovChain,
)
from zoo.inference.tree import (
    DenseGrammar,
    LowRankGrammar,
    RankSpaceGrammar,
    TreeDistribution,
    sample_sentences,
    terminal_scores,
)

__all__ = [
    "Backend",
    "DenseChain",
    "EmbeddingChain",
    "LinearChain",
    "LowRankChain",
    "RDPOptions",
    "RankSpaceChain",
    "DenseSemiMarkov",
    "EdgeSemiMarkov",
    "LowRankSemiMarkov",
    "RankSpaceSemiMarkov",
    "SemiMarkovChain",
    "DenseGrammar",
    "LowRankGrammar",
    "RankSpaceGrammar",
    "TreeDistribution",
    "sample_sentences",
    "terminal_scores",
]
