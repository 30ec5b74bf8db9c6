"""The highest-scoring tree: the CKY loop (``cky``) in the max-plus semiring, then the walk down.

The loop keeps values only. Each block's part maximizes in two stages, as the inside sums in two
products: first over the splits, the best pair of children's values for every pair of labels
(B x n x K1 x K2), then over the label pairs with the rules (B x n x NT x K1 x K2, in chunks), with
``amax``: a reduction that also returns indices runs several times slower on a CPU, and back-pointers
are needed for the 2n - 1 spans of the best tree only. The walk down from the root recomputes each of
those from the chart: the best (split, left label, right label) of one span and label, a
(width - 1) x S x S maximum.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.semiring import Max
from zoo.inference.tree.chart import DenseSpanRules, backtrack, check_some_tree, over_rules
from zoo.inference.tree.cky import cky


class ViterbiRules(DenseSpanRules):
    """The max-plus rule application (``cky.SpanRules``) on dense rules: the best value of every span
    and label, over its splits and children's labels."""

    semiring = Max

    def part(self, block, splits, left, right) -> Tensor:
        pairs = left[:, :, 0, :, None] + right[:, :, 0, None, :]  # B x n x K1 x K2, the best split's
        for j in range(1, len(splits)):
            pairs = torch.maximum(pairs, left[:, :, j, :, None] + right[:, :, j, None, :])
        return over_rules(self.rules, block, pairs, lambda score, dim: score.amax(dim))

    @staticmethod
    def combine(parts: list[Tensor]) -> Tensor:
        best = parts[0]
        for value in parts[1:]:
            best = torch.maximum(best, value)
        return best


class Decompositions:
    """The walk down's choices (``chart.backtrack``): the best decomposition of one span and label,
    recomputed from the max-plus chart (``chart[w]``: B x (T-w+1) x K, K = PT at w = 1, else NT)."""

    def __init__(self, rules: Tensor, chart: list[Tensor]):
        self.rules, self.chart = rules, chart
        self.NT, self.PT = rules.shape[1], chart[1].shape[-1]
        self.sentence, self.spans = -1, None

    def _spans(self, b: int) -> Tensor:
        """Sentence b's values over all S labels: T x (T+1) x S, [i, k] for span [i, k) (-inf for
        the labels of the other kind and for what is not a span); one sentence kept at a time."""
        if self.sentence != b:
            T = self.chart[1].shape[1]
            spans = self.chart[1].new_full((T, T + 1, self.NT + self.PT), float("-inf"))
            for w in range(1, T + 1):
                i = torch.arange(T - w + 1, device=spans.device)
                labels = slice(self.NT, None) if w == 1 else slice(0, self.NT)
                spans[i, i + w, labels] = self.chart[w][b]
            self.sentence, self.spans = b, spans
        return self.spans

    def __call__(self, b: int, start: int, width: int, label: int) -> tuple[int, int, int]:
        """(split, left label, right label) of the best decomposition of [start, start + width) with
        ``label``; a width-1 child's label is a preterminal index, a wider one's a nonterminal index."""
        spans, end = self._spans(b), start + width
        left = spans[start, start + 1 : end]  # (width - 1) x S, split s = 1 .. width - 1
        right = spans[start + 1 : end, end]
        rules = self.rules[b if self.rules.shape[0] > 1 else 0, label]  # S x S
        S = rules.shape[-1]
        flat = int((rules + left[:, :, None] + right[:, None, :]).flatten().argmax())
        split, pair = divmod(flat, S * S)
        children = divmod(pair, S)
        left_label, right_label = (c - self.NT if c >= self.NT else c for c in children)
        return split + 1, left_label, right_label


def viterbi(
    rules: Tensor, root: Tensor, terms: Tensor, lengths: Tensor, nodes: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The highest-scoring tree by CKY in the max-plus semiring.

    Args:
        rules: G x NT x S x S dense log-potentials; root: G x NT; terms: B x T x PT (masked);
        lengths: (B,); nodes: optional B x T x (T+1) x NT node log-scores.
    Returns:
        best score (B,) and the tree, B x (2T-1) x 3 long (start, end, label), pre-order.
    """
    with torch.no_grad():
        top, chart = cky(ViterbiRules(rules, terms), root, lengths, label_scores=nodes)
        score, root_label = top.max(-1)
    check_some_tree(score, lengths)  # the best score is -inf only where no tree is possible
    tree = backtrack(Decompositions(rules.detach(), chart), lengths, root_label, terms.shape[1])
    return score, tree
