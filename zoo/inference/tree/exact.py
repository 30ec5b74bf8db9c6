"""The width-batched inside algorithm over state space, and Viterbi (CKY in the max-plus semiring).

For each width w, the children of all B x (T-w+1) spans fall into four blocks by the kinds of the two
children (a width-1 child is a preterminal, a wider one a nonterminal):

* two nonterminals (and two preterminals, width 2 only): the splits are summed first as outer
  products of the children's scaled inside vectors (``outer_sum``: one batched matmul), then the
  rules are applied once per span (``RuleOp``): O(T^3 NT^2 + T^2 NT^3) for dense rules; the low-rank
  grammar swaps this for two skinny products;
* one preterminal child (one split per span): the preterminal is summed out of the rules once per
  position (``leaf_rules``, B x T x NT x NT), so each span costs one NT x NT matrix-vector product,
  not NT^2 PT.

The children are read from per-width chart slices, so no B x T x T x S^3 tensor and no in-place
chart write exists.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from zoo.inference.numerics import logsumexp
from zoo.inference.tree.chart import (
    backtrack,
    combine,
    finite_max,
    outer_sum,
    root_chart,
    span_diagonal,
    to_scaled,
)
from zoo.inference.tree.factors import GrammarFactors

#: (left child is a nonterminal, right child is a nonterminal)
BLOCKS = ((True, True), (False, True), (True, False), (False, False))

#: rule_op(left_nt, right_nt, X) -> (log-scale broadcastable to B x n, Y B x n x NT):
#: Y[b, i, A] = sum_{b', c'} psi(A, b', c') X[b, i, b', c'] over the children of the
#: two-nonterminal (True, True) or the two-preterminal (False, False) block
RuleOp = Callable[[bool, bool, Tensor], tuple[Tensor, Tensor]]


def block_splits(width: int, block: tuple[bool, bool]) -> list[int]:
    """The splits s (the left child's width) of a span of ``width`` whose children fall in ``block``."""
    left_nt, right_nt = block
    return [s for s in range(1, width) if (s >= 2) == left_nt and (width - s >= 2) == right_nt]


def children(chart: list, terms: Tensor, width: int, start: int, n: int) -> Tensor:
    """Log inside of the n spans [start + i, start + i + width), i < n: B x n x K."""
    table = terms if width == 1 else chart[width]
    return table[:, start : start + n]


def grammar_matmul(X: Tensor, weights: Tensor) -> Tensor:
    """X B x n x K (flattened children) times G x K x M weights -> B x n x M (G = 1 or B)."""
    if weights.shape[0] == 1:
        return X @ weights[0]
    return torch.bmm(X, weights)


def scaled_rules(log_rules: Tensor) -> tuple[Tensor, Tensor]:
    """G x NT x K1 x K2 log rules -> (log-scale G, exp(log rules - scale)): exponentiated once with a
    per-grammar scale."""
    scale = finite_max(log_rules.flatten(1), -1)
    return scale, (log_rules - scale.view(-1, 1, 1, 1)).exp()


def dense_rule_op(grammar: GrammarFactors) -> RuleOp:
    """The RuleOp of dense rules for the two-nonterminal and two-preterminal blocks (``scaled_rules``)."""
    blocks = {}
    for block in ((True, True), (False, False)):
        scale, probs = scaled_rules(grammar.rules_block(*block))  # G, G x NT x K1 x K2
        blocks[block] = scale.view(-1, 1), probs.flatten(2).transpose(1, 2)  # G x (K1 K2) x NT

    def op(left_nt: bool, right_nt: bool, X: Tensor) -> tuple[Tensor, Tensor]:
        scale, probs = blocks[left_nt, right_nt]
        return scale, grammar_matmul(X.flatten(2), probs)

    return op


def leaf_rules(grammar: GrammarFactors, terms: Tensor) -> dict:
    """The rules with their preterminal child summed out at every position, scaled.

    Returns {(False, True): left leaf, (True, False): right leaf}, each (log-scale B x T,
    B x T x NT x NT): [b, t, A, C] = sum_P psi(A, P, C) exp(terms[b, t, P]) for a leaf at t on the
    left (C the right nonterminal), and likewise with the leaf on the right.
    """
    t_scale, t_values = to_scaled(terms)  # B x T, B x T x PT
    out = {}
    for block, pattern in (((False, True), "apc,btp->btac"), ((True, False), "acp,btp->btac")):
        r_scale, probs = scaled_rules(grammar.rules_block(*block))  # G, G x NT x (PT x NT | NT x PT)
        out[block] = t_scale + r_scale.view(-1, 1), rule_sum(pattern, probs, t_values)
    return out


def rule_sum(pattern: str, rule: Tensor, leaf: Tensor) -> Tensor:
    """einsum of G x NT x ... rules (one grammar, or one per sentence) with B x T x PT leaves."""
    if rule.shape[0] == 1:
        return torch.einsum(pattern, rule[0], leaf)
    return torch.einsum("b" + pattern, rule, leaf)


def inside(
    grammar: GrammarFactors,
    rule_op: RuleOp,
    terms: Tensor,
    lengths: Tensor,
    span_scores: Tensor | None = None,
    label_scores: Tensor | None = None,
) -> tuple[Tensor, list]:
    """log Z and the per-width log inside chart.

    Args:
        grammar: a dense or LPCFG grammar (its dense blocks serve the productions with a leaf).
        rule_op: applies the binary rules to summed children (``dense_rule_op`` or a low-rank one).
        terms: B x T x PT terminal log-scores, finite past each length (``mask_terms``).
        lengths: (B,) sentence lengths, each >= 2.
        span_scores: optional B x T x (T+1) log-scores added to every label of span [i, k) (width >= 2).
        label_scores: optional B x T x (T+1) x NT log-scores added per span and label.
    Returns:
        log Z (B,) and chart: ``chart[w]`` is B x (T-w+1) x NT for w >= 2 (None at 0 and 1).
    """
    T = terms.shape[1]
    leaves = leaf_rules(grammar, terms) if T >= 3 else {}
    chart: list[Tensor | None] = [None, None]
    for w in range(2, T + 1):
        n = T - w + 1
        parts = []
        if w >= 3:  # one leaf child: span [i, i+w) = leaf i + [i+1, i+w), or [i, i+w-1) + leaf i+w-1
            for block, leaf_at, other_at in (((False, True), 0, 1), ((True, False), w - 1, 0)):
                q_scale, Q = leaves[block]
                c_scale, c_values = to_scaled(chart[w - 1][:, other_at : other_at + n])
                Y = torch.einsum("bnac,bnc->bna", Q[:, leaf_at : leaf_at + n], c_values)
                parts.append((q_scale[:, leaf_at : leaf_at + n] + c_scale, Y))
        for block in ((True, True), (False, False)):
            splits = block_splits(w, block)
            if not splits:
                continue
            left = torch.stack([children(chart, terms, s, 0, n) for s in splits], 2)
            right = torch.stack([children(chart, terms, w - s, s, n) for s in splits], 2)
            x_scale, X = outer_sum(left, right)
            r_scale, Y = rule_op(*block, X)
            parts.append((x_scale + r_scale, Y))
        beta = combine(parts)
        if span_scores is not None:
            beta = beta + span_diagonal(span_scores, w).unsqueeze(-1)
        if label_scores is not None:
            beta = beta + span_diagonal(label_scores, w)
        chart.append(beta)
    return logsumexp(grammar.root + root_chart(chart, lengths), -1), chart


#: entries of the B x n x NT x K1 x K2 max-plus tensor built at once by ``viterbi``
VITERBI_CHUNK = 1 << 24


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
    B, T, _ = terms.shape
    G, NT = root.shape
    chart: list[Tensor | None] = [None, None]
    back: list[tuple[Tensor, Tensor, Tensor] | None] = [None, None]
    with torch.no_grad():
        for w in range(2, T + 1):
            n = T - w + 1
            best = terms.new_full((B, n, NT), float("-inf"))
            arg = [torch.zeros(B, n, NT, dtype=torch.long, device=terms.device) for _ in range(3)]
            for block in BLOCKS:
                rows = slice(0, NT) if block[0] else slice(NT, None)
                cols = slice(0, NT) if block[1] else slice(NT, None)
                sub = rules[:, :, rows, cols]  # G x NT x K1 x K2
                K1, K2 = sub.shape[-2:]
                step = max(1, VITERBI_CHUNK // max(1, n * NT * K1 * K2))
                for s in block_splits(w, block):
                    left = children(chart, terms, s, 0, n)
                    right = children(chart, terms, w - s, s, n)
                    for b0 in range(0, B, step):
                        b1 = min(B, b0 + step)
                        g = sub if G == 1 else sub[b0:b1]
                        score = (
                            g.unsqueeze(1)
                            + left[b0:b1, :, None, :, None]
                            + right[b0:b1, :, None, None, :]
                        )
                        value, flat = score.flatten(-2).max(-1)
                        better = value > best[b0:b1]
                        best[b0:b1] = torch.where(better, value, best[b0:b1])
                        for a, new in zip(arg, (torch.full_like(flat, s), flat // K2, flat % K2)):
                            a[b0:b1] = torch.where(better, new, a[b0:b1])
            if nodes is not None:
                best = best + span_diagonal(nodes, w)
            chart.append(best)
            back.append(tuple(arg))
        top = root + root_chart(chart, lengths)
        score, root_label = top.max(-1)
    tree = backtrack(lambda w: back[w], lengths, root_label, T)
    return score, tree
