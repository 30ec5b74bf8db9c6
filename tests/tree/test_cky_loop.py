"""The one CKY loop (``zoo.inference.tree.cky``) enumerates every binary bracketing once, in each of
its three semirings: with one nonterminal, one preterminal and all-zero scores, every tree of a sentence
of n words scores 0, so log Z = log C(n-1) (the Catalan number of bracketings), the entropy is the
same (uniform), and the best score is 0."""

from __future__ import annotations

import math

import torch

from zoo.inference import DenseGrammar
from zoo.inference.tree import TreeDistribution
from zoo.inference.tree.chart import Scaled, to_scaled
from zoo.inference.tree.cky import BLOCKS, block_splits, children, inner_children


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



def _one_split_at_a_time(entries: list, w: int, n: int, left: bool):
    """The reference: the children of the splits s = 2 .. w-2, cut from the chart one by one."""
    parts = [children(entries, s, 0, n) if left else children(entries, w - s, s, n) for s in range(2, w - 1)]
    if isinstance(parts[0], Scaled):
        return Scaled(torch.cat([p.scale for p in parts], -1), torch.cat([p.values for p in parts], -2))
    return torch.cat(parts, -2)


def test_inner_children_grown_width_by_width_equal_the_chart_slices():
    """``inner_children`` grows the two-nonterminal block's stacks a width at a time; at every width
    they equal the splits' chart slices, for plain entries (with a leading axis, as the entropy
    semiring's) and scaled ones (the inside's)."""
    B, T, K = 2, 9, 3
    plain = [None] + [torch.randn(2, B, T - w + 1, K) for w in range(1, T + 1)]
    scaled = [None] + [to_scaled(x[0]) for x in plain[1:]]
    for entries in (plain, scaled):
        inner = None
        for w in range(4, T + 1):
            n = T - w + 1
            inner = inner_children(entries, w, n, inner)
            for got, left in zip(inner, (True, False)):
                want = _one_split_at_a_time(entries, w, n, left)
                pairs = zip(got, want) if isinstance(want, Scaled) else [(got, want)]
                assert all(torch.equal(a, b) for a, b in pairs), (w, left)
