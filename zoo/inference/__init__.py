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

__all__ = [
    "Backend",
    "DenseChain",
    "EmbeddingChain",
    "LinearChain",
    "LowRankChain",
    "RDPOptions",
    "RankSpaceChain",
]
