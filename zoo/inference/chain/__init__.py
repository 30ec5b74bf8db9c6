"""Linear chains (HMMs, linear-chain CRFs) with the exact, low-rank, rank-space and randomized backends."""

from zoo.inference.chain.crf import CRF
from zoo.inference.chain.distribution import LinearChain
from zoo.inference.chain.factors import DenseChain, EmbeddingChain, LowRankChain, RankSpaceChain
from zoo.inference.chain.tag_schemes import transition_constraints
from zoo.inference.rdp import RDPOptions

__all__ = [
    "CRF",
    "DenseChain",
    "EmbeddingChain",
    "LinearChain",
    "LowRankChain",
    "RDPOptions",
    "RankSpaceChain",
    "transition_constraints",
]
