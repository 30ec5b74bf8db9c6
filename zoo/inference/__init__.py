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
]
