"""The one CKY loop of the exact tree DPs: width-batched, its products those of a semiring.

For each width w, the children of all B x (T-w+1) spans fall into four blocks by the kinds of the two
children (a width-1 child is a preterminal, a wider one a nonterminal). The loop gathers, per block, the
children of every split as two stacks and hands them to the semiring's rule application
(``SpanRules.part``), which applies the binary rules and sums over the splits and the children's labels
its own way; ``SpanRules.combine`` sums the blocks. The rule applications:

* ``exact.InsideRules`` (``Log``): the inside pass, in scaled probability space (log Z);
* ``entropy.EntropyRules`` (``Entropy``): the inside pass carrying each span's subtree entropy;
* ``viterbi.ViterbiRules`` (``Max``): max-plus CKY with back-pointers.

The children are read from per-width chart slices (``chart[w]``: the values of the spans [i, i+w),
... x B x (T-w+1) x K; ``chart[1]``: the leaves), so no B x T x T x S^3 tensor and no in-place chart
write exists (Zhang et al. 2020). Values index every axis from the end: an ``Entropy`` value has a
leading axis of 2.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from zoo.inference.semiring import Semiring
from zoo.inference.tree.chart import span_diagonal

#: (left child is a nonterminal, right child is a nonterminal), in the order the loop visits them: the
#: blocks with one preterminal child (one split each) first
BLOCKS = ((False, True), (True, False), (True, True), (False, False))


class SpanRules(Protocol):
    """A semiring's application of the binary rules to the children of a width's spans."""

    semiring: Semiring
    leaves: Tensor  # the width-1 values: ... x B x T x PT

    def part(self, block: tuple[bool, bool], splits: list[int], left: Tensor, right: Tensor):
        """The block's contribution to every span of the width: left and right are the children's
        values, ... x B x n x s x K1 and ... x B x n x s x K2, one row per split in ``splits`` (the
        left child's width)."""

    def combine(self, parts: list) -> Tensor:
        """The spans' values (... x B x n x NT) from the blocks' parts."""


def block_splits(width: int, block: tuple[bool, bool]) -> list[int]:
    """The splits s (the left child's width) of a span of ``width`` whose children fall in ``block``."""
    left_nt, right_nt = block
    return [s for s in range(1, width) if (s >= 2) == left_nt and (width - s >= 2) == right_nt]


def leaf_block(block: tuple[bool, bool], splits: list[int], left: Tensor, right: Tensor):
    """For a block with one preterminal child (its one split s): the leaf's offset from each span's
    start (0 or s) and the other child's values (... x B x n x K); None for the other blocks."""
    if block == (False, True):
        return 0, right.squeeze(-2)
    if block == (True, False):
        return splits[0], left.squeeze(-2)
    return None


def children(chart: list, width: int, start: int, n: int) -> Tensor:
    """The values of the n spans [start + i, start + i + width), i < n: ... x B x n x K."""
    return chart[width][..., start : start + n, :]


def stacked(values: list[Tensor]) -> Tensor:
    """The splits' children stacked on a new axis -2 (a view for one split: no copy)."""
    return values[0].unsqueeze(-2) if len(values) == 1 else torch.stack(values, -2)


def root_values(chart: list, lengths: Tensor) -> Tensor:
    """The values of each sentence's whole span [0, n_b): ... x B x K."""
    tops = torch.stack([chart[w][..., 0, :] for w in range(2, len(chart))], -2)  # ... x B x (T-1) x K
    index = (lengths - 2).view(-1, 1, 1).expand(*tops.shape[:-2], 1, tops.shape[-1])
    return tops.gather(-2, index).squeeze(-2)


def cky(
    rules: SpanRules,
    root: Tensor,
    lengths: Tensor,
    span_scores: Tensor | None = None,
    label_scores: Tensor | None = None,
) -> tuple[Tensor, list]:
    """Every span's value, bottom-up, and the roots' values times the root scores.

    Args:
        rules: the semiring's rule application (module docstring), holding the leaves' values.
        root: G x NT root log-scores.
        lengths: (B,) sentence lengths, each >= 2.
        span_scores: optional B x T x (T+1) log-scores multiplied into every label of span [i, k)
            (width >= 2).
        label_scores: optional B x T x (T+1) x NT log-scores multiplied in per span and label.
    Returns:
        the root values ... x B x NT (sum them over the last axis in the semiring for the answer) and
        the chart: ``chart[w]`` is ... x B x (T-w+1) x K, the leaves at w = 1 (None at 0).
    """
    semiring = rules.semiring
    T = rules.leaves.shape[-2]
    chart: list[Tensor | None] = [None, rules.leaves]
    for w in range(2, T + 1):
        n = T - w + 1
        parts = []
        for block in BLOCKS:
            splits = block_splits(w, block)
            if not splits:
                continue
            left = stacked([children(chart, s, 0, n) for s in splits])
            right = stacked([children(chart, w - s, s, n) for s in splits])
            parts.append(rules.part(block, splits, left, right))
        value = rules.combine(parts)
        if span_scores is not None:
            value = semiring.mul(value, span_diagonal(span_scores, w).unsqueeze(-1))
        if label_scores is not None:
            value = semiring.mul(value, span_diagonal(label_scores, w))
        chart.append(value)
    return semiring.mul(root_values(chart, lengths), root), chart
