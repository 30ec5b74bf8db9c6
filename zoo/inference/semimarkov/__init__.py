"""Semi-Markov chains (HSMMs): segmentations into labelled segments of length 1..D, four backends."""

from zoo.inference.semimarkov.distribution import SemiMarkovChain
from zoo.inference.semimarkov.engine import to_frame_states
from zoo.inference.semimarkov.factors import (
    DenseSemiMarkov,
    EdgeSemiMarkov,
    LowRankSemiMarkov,
    RankSpaceSemiMarkov,
)

__all__ = [
    "DenseSemiMarkov",
    "EdgeSemiMarkov",
    "LowRankSemiMarkov",
    "RankSpaceSemiMarkov",
    "SemiMarkovChain",
    "to_frame_states",
]
