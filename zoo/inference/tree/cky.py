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
write exists (Zhang et al. 2020). The loop slices what ``SpanRules.entry`` keeps of each width: the
values themselves, or (the inside) their scaled form, made once a width rather than once for every
span that reads them as a child. Values index every axis from the end: an ``Entropy`` value has a
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

    def entry(self, value: Tensor) -> Tensor | tuple:
        """What the loop keeps of a width's values (... x B x n x K) to read the children from: the
        values, or their scaled form (``chart.Scaled``, ``entropy.Carried``)."""

    def part(self, block: tuple[bool, bool], splits: list[int], left, right):
        """The block's contribution to every span of the width: left and right are the children's
        entries (``entry``), ... x B x n x s x K1 and ... x B x n x s x K2 (scaled: the scales
        B x n x s), one row per split in ``splits`` (the left child's width)."""

    def combine(self, parts: list) -> Tensor:
        """The spans' values (... x B x n x NT) from the blocks' parts."""


def block_splits(width: int, block: tuple[bool, bool]) -> list[int]:
    """The splits s (the left child's width) of a span of ``width`` whose children fall in ``block``."""
    left_nt, right_nt = block
    return [s for s in range(1, width) if (s >= 2) == left_nt and (width - s >= 2) == right_nt]


def leaf_block(block: tuple[bool, bool], splits: list[int], left, right):
    """For a block with one preterminal child (its one split s): the leaf's offset from each span's
    start (0 or s) and the other child's entry (... x B x n x K, the split axis dropped); None for the
    other blocks."""
    if block == (False, True):
        return 0, _each(lambda t, k: t.squeeze(-1 - k), right)
    if block == (True, False):
        return splits[0], _each(lambda t, k: t.squeeze(-1 - k), left)
    return None


def _each(fn, *entries):
    """``fn(tensors..., k)`` on the entries' values (k = 1: one axis K after the span and split axes)
    and, for scaled entries (a ``Scaled``, or any named tuple whose first field is the log-scale), on
    their scales (k = 0): an entry of the same kind."""
    if isinstance(entries[0], tuple):
        scales, *fields = zip(*entries)
        return type(entries[0])(fn(*scales, 0), *(fn(*field, 1) for field in fields))
    return fn(*entries, 1)


def children(entries: list, width: int, start: int, n: int):
    """The n spans [start + i, start + i + width), i < n, as one split: ... x B x n x 1 x K (scaled: the
    scales B x n x 1); views."""
    return _each(lambda t, k: t.narrow(-1 - k, start, n).unsqueeze(-1 - k), entries[width])


def inner_children(entries: list, width: int, n: int, previous):
    """The two-nonterminal block's children (left, right) of the n spans of ``width``, every split
    s = 2 .. width - 2 on the split axis: ... x B x n x (width - 3) x K. Grown from the previous
    width's (``previous``; None at width 4), whose split s holds the same left child in its first n
    rows and the right child of split s + 1 from its row 1 on: the new split, width - 2 on the left
    and s = 2 on the right, is cut from the chart. A width costs a few ops, not a slice a split."""
    new_left, new_right = children(entries, width - 2, 0, n), children(entries, width - 2, 2, n)
    if previous is None:
        return new_left, new_right
    left = _each(lambda t, k: t.narrow(-2 - k, 0, n), previous[0])
    right = _each(lambda t, k: t.narrow(-2 - k, 1, n), previous[1])
    cat = lambda a, b, k: torch.cat([a, b], -1 - k)  # noqa: E731
    return _each(cat, left, new_left), _each(cat, new_right, right)


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
    entries = [None, rules.entry(rules.leaves)]
    inner = None  # the two-nonterminal block's children (inner_children)
    for w in range(2, T + 1):
        n = T - w + 1
        parts = []
        for block in BLOCKS:
            splits = block_splits(w, block)
            if not splits:
                continue
            if block == (True, True):
                inner = left, right = inner_children(entries, w, n, inner)
            else:  # one split s
                (s,) = splits
                left, right = children(entries, s, 0, n), children(entries, w - s, s, n)
            parts.append(rules.part(block, splits, left, right))
        value = rules.combine(parts)
        if span_scores is not None:
            value = semiring.mul(value, span_diagonal(span_scores, w).unsqueeze(-1))
        if label_scores is not None:
            value = semiring.mul(value, span_diagonal(label_scores, w))
        chart.append(value)
        entries.append(rules.entry(value) if w < T else None)  # the whole span is no one's child
    return semiring.mul(root_values(chart, lengths), root), chart
