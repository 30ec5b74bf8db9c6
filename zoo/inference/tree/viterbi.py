"""The highest-scoring tree: the CKY loop (``cky``) in the max-plus semiring, with back-pointers."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.semiring import Max
from zoo.inference.tree.chart import backtrack, check_some_tree
from zoo.inference.tree.cky import cky

#: entries of the B x n x NT x K1 x K2 max-plus tensor built at once
VITERBI_CHUNK = 1 << 24

# a part of a span: (best B x n x NT, its (split, left label, right label), each B x n x NT long)
Part = tuple[Tensor, tuple[Tensor, Tensor, Tensor]]


class ViterbiRules:
    """The max-plus rule application (``cky.SpanRules``) on dense rules. Each part is the best over its
    splits and children's labels with its arguments; ``combine`` keeps the best part and records the
    back-pointers of every width in ``back``."""

    semiring = Max

    def __init__(self, rules: Tensor, terms: Tensor):
        self.rules, self.leaves = rules, terms  # G x NT x S x S, B x T x PT
        self.back: list[tuple[Tensor, Tensor, Tensor] | None] = [None, None]

    @staticmethod
    def entry(value: Tensor) -> Tensor:
        return value

    def part(self, block, splits, left, right) -> Part:
        NT = self.rules.shape[1]
        rows = slice(0, NT) if block[0] else slice(NT, None)
        cols = slice(0, NT) if block[1] else slice(NT, None)
        sub = self.rules[:, :, rows, cols]  # G x NT x K1 x K2
        B, n = left.shape[:2]
        K1, K2 = sub.shape[-2:]
        best = left.new_full((B, n, NT), float("-inf"))
        arg = [torch.zeros(B, n, NT, dtype=torch.long, device=left.device) for _ in range(3)]
        step = max(1, VITERBI_CHUNK // max(1, n * NT * K1 * K2))
        for j, s in enumerate(splits):
            for b0 in range(0, B, step):
                b1 = min(B, b0 + step)
                g = sub if sub.shape[0] == 1 else sub[b0:b1]
                score = g.unsqueeze(1) + left[b0:b1, :, j, None, :, None] + right[b0:b1, :, j, None, None, :]
                value, flat = score.flatten(-2).max(-1)
                new = (torch.full_like(flat, s), flat // K2, flat % K2)
                self._keep(best[b0:b1], [a[b0:b1] for a in arg], value, new)
        return best, tuple(arg)

    @staticmethod
    def _keep(best: Tensor, arg: list[Tensor], value: Tensor, new: tuple) -> None:
        """Where ``value`` beats ``best``, take it and its arguments ``new`` (in place, into views)."""
        better = value > best
        best.copy_(torch.where(better, value, best))
        for a, candidate in zip(arg, new):
            a.copy_(torch.where(better, candidate, a))

    def combine(self, parts: list[Part]) -> Tensor:
        (best, arg), *others = parts
        for value, candidate in others:
            self._keep(best, arg, value, candidate)
        self.back.append(arg)
        return best


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
    span_rules = ViterbiRules(rules, terms)
    with torch.no_grad():
        top, _ = cky(span_rules, root, lengths, label_scores=nodes)
        score, root_label = top.max(-1)
    check_some_tree(score, lengths)  # the best score is -inf only where no tree is possible
    tree = backtrack(lambda w: span_rules.back[w], lengths, root_label, terms.shape[1])
    return score, tree
