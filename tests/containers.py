"""The engine's chain and semi-Markov containers from a dict of their arguments, by kind: the one
builder of the test strategies (tests/strategies.py, tests/semimarkov, tests/numerics)."""

from __future__ import annotations


def chain_container(kind: str, a: dict):
    """A DenseChain, EmbeddingChain, LowRankChain or RankSpaceChain ("dense", "embedding", "lowrank",
    "rankspace") from its arguments ``a``."""
    from zoo.inference import DenseChain, EmbeddingChain, LowRankChain, RankSpaceChain

    if kind == "dense":
        return DenseChain(a["unary"], a["transition"], init=a["init"])
    if kind == "embedding":
        return EmbeddingChain(a["unary"], a["states"], init=a["init"])
    if kind == "lowrank":
        return LowRankChain(
            a["unary"],
            a["left"],
            a["right"],
            init=a["init"],
            normalize=a["normalize"],
            log_rank_weights=a["log_rank_weights"],
        )
    if kind == "rankspace":
        return RankSpaceChain(a["start"], a["U"], a["V"], a["emission"])
    raise ValueError(kind)


def semimarkov_container(kind: str, a: dict):
    """A DenseSemiMarkov, LowRankSemiMarkov, RankSpaceSemiMarkov or EdgeSemiMarkov ("dense",
    "lowrank", "rankspace", "edge") from its arguments ``a``."""
    from zoo.inference import DenseSemiMarkov, EdgeSemiMarkov, LowRankSemiMarkov, RankSpaceSemiMarkov

    if kind == "dense":
        return DenseSemiMarkov(a["unary"], a["transition"], a["duration"], init=a["init"])
    if kind == "lowrank":
        return LowRankSemiMarkov(
            a["unary"],
            a["left"],
            a["right"],
            a["duration"],
            init=a["init"],
            normalize=a["normalize"],
            self_transitions=a["self_transitions"],
        )
    if kind == "rankspace":
        return RankSpaceSemiMarkov(a["start"], a["U"], a["V"], a["duration"], a["emission"])
    if kind == "edge":
        return EdgeSemiMarkov(a["first"], a["edge"])
    raise ValueError(kind)
