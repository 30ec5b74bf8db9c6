"""The one CKY loop (``zoo.inference.tree.cky``) enumerates every binary bracketing once, in each of
its three semirings: with one nonterminal, one preterminal and all-zero scores, every tree of a sentence
of n words scores 0, so log Z = log C(n-1) (the Catalan number of bracketings), the entropy is the
same (uniform), and the best score is 0."""

from __future__ import annotations

import math

import torch

from zoo.inference import DenseGrammar
from zoo.inference.tree import TreeDistribution
from zoo.inference.tree.cky import BLOCKS, block_splits


def _flat_tree_distribution(lengths: list[int], T: int) -> TreeDistribution:
    zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64)  # noqa: E731
    grammar = DenseGrammar(zeros(1, 1), zeros(1, 1, 2, 2))
    return TreeDistribution(grammar, zeros(len(lengths), T, 1), torch.tensor(lengths))


def test_every_bracketing_once_in_each_semiring():
    lengths = [2, 3, 5, 8, 9, 4]
    dist = _flat_tree_distribution(lengths, T=9)
    catalan = [math.comb(2 * (n - 1), n - 1) // n for n in lengths]
    log_catalan = torch.tensor(catalan, dtype=torch.float64).log()
    torch.testing.assert_close(dist.log_partition, log_catalan)
    torch.testing.assert_close(dist.entropy, log_catalan)
    torch.testing.assert_close(dist.max_score, torch.zeros(len(lengths), dtype=torch.float64))


def test_blocks_partition_the_splits():
    for width in range(2, 12):
        splits = sorted(s for block in BLOCKS for s in block_splits(width, block))
        assert splits == list(range(1, width))
