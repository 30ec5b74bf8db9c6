"""Trees as tensors (docs/tree-api.md): validation and scoring.

A tree of a length-n sentence is 2n-1 rows (start, end, label) in pre-order, padded with -1 rows to
2T-1; width-1 spans carry preterminal labels, wider spans nonterminal labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.inference.tree.factors import GrammarFactors


@dataclass
class TreeTable:
    """A batch of validated trees, ... x B x M rows (M = 2T-1), with each node's children.

    Attributes:
        start, end, label: ... x B x M long (0 on padding rows); valid: ... x B x M bool.
        split: ... x B x M long, the end of the left child of each node of width >= 2 (else 0).
        left_label, right_label: ... x B x M long labels of the two children (0 where none).
    """

    start: Tensor
    end: Tensor
    label: Tensor
    valid: Tensor
    split: Tensor
    left_label: Tensor
    right_label: Tensor


def check_trees(trees: Tensor, lengths: Tensor, num_nt: int, num_pt: int, T: int) -> TreeTable:
    """Validate ``trees`` (... x B x (2T-1) x 3 long) against the lengths and symbol counts."""
    B = lengths.shape[0]
    M = 2 * T - 1
    if not isinstance(trees, Tensor) or trees.is_floating_point() or trees.dtype == torch.bool:
        raise TypeError("trees must be an integer tensor of shape (S x) B x (2T-1) x 3")
    if trees.dim() < 3 or tuple(trees.shape[-3:]) != (B, M, 3):
        raise ValueError(
            f"trees must have shape (S x) B x (2T-1) x 3 = ({B}, {M}, 3), got {tuple(trees.shape)}"
        )
    trees = trees.long().to(lengths.device)
    rows = torch.arange(M, device=trees.device)
    valid = rows < (2 * lengths - 1).unsqueeze(-1)  # B x M
    valid = valid.expand(trees.shape[:-1])
    padding_ok = torch.where(valid.unsqueeze(-1), trees >= 0, trees == -1).all()
    if not padding_ok:
        raise ValueError(
            "each tree must have 2n-1 rows of non-negative (start, end, label) for a length-n "
            "sentence, followed by rows of -1"
        )
    t = torch.where(valid.unsqueeze(-1), trees, 0)
    start, end, label = t.unbind(-1)
    n = lengths.view(*([1] * (trees.dim() - 3)), B, 1).expand_as(start)
    width = end - start
    if (valid & ((width < 1) | (end > n))).any():
        raise ValueError("every span (start, end) must satisfy 0 <= start < end <= length")
    limit = torch.where(width == 1, num_pt, num_nt)
    if (valid & (label >= limit)).any():
        raise ValueError(
            f"labels must be nonterminals 0..{num_nt - 1} on spans of width >= 2 and preterminals "
            f"0..{num_pt - 1} on width-1 spans"
        )
    # presence table ... x B x T x (T+1): how often each span occurs
    flat = (start * (T + 1) + end).masked_fill(~valid, T * (T + 1))
    count = torch.zeros(*start.shape[:-1], T * (T + 1) + 1, dtype=torch.long, device=t.device)
    count.scatter_add_(-1, flat, torch.ones_like(flat))
    count = count[..., :-1].view(*start.shape[:-1], T, T + 1)
    present = count > 0
    first = (start[..., 0] == 0) & (end[..., 0] == n[..., 0])
    if (count > 1).any() or not first.all():
        raise ValueError("a tree lists each span once, the whole sentence [0, n) first")
    # the children of each node: the split j with [i, j) and [j, k) both present
    lead = start.shape[:-1]
    X = present.reshape(-1, T, T + 1)
    x = torch.arange(X.shape[0], device=t.device).unsqueeze(-1)
    s_, e_ = start.reshape(X.shape[0], M), end.reshape(X.shape[0], M)
    j = torch.arange(T + 1, device=t.device)
    right_present = torch.cat([X[x, :, e_], X.new_zeros(*s_.shape, 1)], -1)  # [j, k) present
    cand = X[x, s_] & right_present & (j > s_.unsqueeze(-1)) & (j < e_.unsqueeze(-1))
    internal = (valid & (width >= 2)).reshape(s_.shape)
    if (internal & (cand.sum(-1) != 1)).any():
        raise ValueError(
            "the spans do not form a binary tree: every span of width >= 2 needs exactly one split "
            "into two listed spans"
        )
    split = torch.where(internal, cand.long().argmax(-1), 0)
    labels = torch.zeros(X.shape[0], T * (T + 1) + 1, dtype=torch.long, device=t.device)
    labels.scatter_(-1, flat.reshape(X.shape[0], M), label.reshape(X.shape[0], M))
    labels = labels[:, :-1].view(-1, T, T + 1)
    left_label = torch.where(internal, labels[x, s_, split], 0)
    right_label = torch.where(internal, labels[x, split.clamp_max(T - 1), e_], 0)
    return TreeTable(
        start,
        end,
        label,
        valid,
        split.view(*lead, M),
        left_label.view(*lead, M),
        right_label.view(*lead, M),
    )


def tree_score(
    grammar: GrammarFactors, terms: Tensor, lengths: Tensor, trees: Tensor, nodes: Tensor | None = None
) -> Tensor:
    """score(tree) = root + rule log-potentials + terminal scores (+ node scores): ... x B.

    Args:
        grammar: any grammar container; terms: B x T x PT; lengths: (B,);
        trees: ... x B x (2T-1) x 3 long (validated here);
        nodes: optional B x T x (T+1) x NT log-scores of each labelled span of width >= 2.
    """
    B, T, PT = terms.shape
    NT = grammar.num_nonterminals
    table = check_trees(trees, lengths, NT, PT, T)
    b = torch.arange(B, device=terms.device).view(B, 1)
    g = b if grammar.grammar_batch > 1 else torch.zeros_like(b)
    root = grammar.root[g[:, 0], table.label[..., 0]]
    leaf = table.valid & (table.end - table.start == 1)
    internal = table.valid & (table.end - table.start >= 2)
    term = terms[b, table.start.clamp_max(T - 1), table.label.clamp_max(PT - 1)]
    # a child of width 1 is a preterminal: its symbol index is NT + label
    left_sym = table.left_label + torch.where(table.split - table.start == 1, NT, 0)
    right_sym = table.right_label + torch.where(table.end - table.split == 1, NT, 0)
    rule = grammar.rule_entries(g, table.label.clamp_max(NT - 1), left_sym, right_sym)
    zero = terms.new_zeros(())
    score = root + torch.where(leaf, term, zero).sum(-1) + torch.where(internal, rule, zero).sum(-1)
    if nodes is not None:
        node = nodes[b, table.start.clamp_max(T - 1), table.end, table.label.clamp_max(NT - 1)]
        score = score + torch.where(internal, node, zero).sum(-1)
    return score
