"""The inference engine: structures x backends x operations, in pure torch."""

from zoo.inference.backend import Backend
from zoo.inference.chain import (
    CRF,
    DenseChain,
    EmbeddingChain,
    LinearChain,
    LowRankChain,
    RankSpaceChain,
    RDPOptions,
    transition_constraints,
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
    "CRF",
    "DenseChain",
    "EmbeddingChain",
    "LinearChain",
    "LowRankChain",
    "RDPOptions",
    "RankSpaceChain",
    "transition_constraints",
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
