"""What every inside algorithm shares: scaled vectors, width-batched child slices, CYK, the no-tree check.

Inside scores are kept per width: ``chart[w]`` is B x (T-w+1) x K for the spans [i, i+w). The
children of all spans of width w for split s are then two slices, ``chart[s][:, :n]`` (left, the
spans [i, i+s)) and ``chart[w-s][:, s:s+n]`` (right, [i+s, i+w)), with n = T-w+1: the width-batched
CKY of Zhang et al. (2020) without writing into a shared chart in place (autograd-safe).

Scaled vectors: a non-negative vector v with a log-scale m stands for exp(m) * v, m the detached
maximum of its log-values (0 when that is -inf), so products are plain matmuls in probability
space (log-einsum-exp) and a row that is all -inf stays an exact zero without NaN gradients.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from zoo.inference.numerics import finite_or_zero, safe_log


class Scaled(NamedTuple):
    """exp(scale) * values: a log-scale ... and non-negative values ... x K."""

    scale: Tensor
    values: Tensor


def finite_max(x: Tensor, dim, keepdim: bool = False) -> Tensor:
    """The detached maximum over ``dim``, with -inf (an all-zero row) replaced by 0."""
    return finite_or_zero(x.detach().amax(dim, keepdim=keepdim))


def to_scaled(log_v: Tensor) -> Scaled:
    """log-values ... x K -> (log-scale ..., non-negative values ... x K with maximum 1)."""
    m = finite_max(log_v, -1)
    return Scaled(m, (log_v - m.unsqueeze(-1)).exp())


def combine(parts: list[tuple[Tensor, Tensor]]) -> Tensor:
    """log(sum_k exp(scale_k) * values_k) of scaled parts (scale ..., values ... x K): log ... x K."""
    top = torch.stack([s for s, _ in parts]).amax(0)
    total = sum((s - top).exp().unsqueeze(-1) * v for s, v in parts)
    return top.unsqueeze(-1) + safe_log(total)


def outer_sum(left: Scaled, right: Scaled) -> tuple[Tensor, Tensor]:
    """sum over splits of outer products of child inside vectors, scaled.

    Args:
        left: the scaled inside of the left children, one row per split (B x n x s, B x n x s x K1).
        right: the same of the matching right children (B x n x s, B x n x s x K2).
    Returns:
        (log-scale B x n, X B x n x K1 x K2) with exp(scale) X = sum_s exp(left_s) exp(right_s)^T.
    """
    m, weights = split_weights(left.scale, right.scale)
    return m, (left.values * weights).transpose(-1, -2) @ right.values


def matvec(matrices: Tensor, vectors: Tensor) -> Tensor:
    """... x M x K matrices times ... x K vectors -> ... x M, as a product and a sum: for the small
    per-span matrices of the leaf blocks, forward and backward take half the time of a batched
    matmul (einsum)."""
    return (matrices * vectors.unsqueeze(-2)).sum(-1)


def split_weights(left_scale: Tensor, right_scale: Tensor) -> tuple[Tensor, Tensor]:
    """The log-scales of the children's scaled vectors (B x n x s, one per split) -> the span's log-scale
    (B x n) and each split's weight relative to it (B x n x s x 1, at most 1)."""
    pair = left_scale + right_scale
    m = finite_max(pair, -1)
    return m, (pair - m.unsqueeze(-1)).exp().unsqueeze(-1)


class DenseSpanRules:
    """What the rule applications on dense rules and plain log-values share (``cky.SpanRules``; the
    Viterbi's max-plus and the log-space inside's log-sum-exp): the rules, the leaves, the values kept
    as they are."""

    def __init__(self, rules: Tensor, terms: Tensor):
        self.rules, self.leaves = rules, terms  # G x NT x S x S, B x T x PT

    @staticmethod
    def entry(value: Tensor) -> Tensor:
        return value


#: entries of the B x n x NT x K1 x K2 tensor that ``over_rules`` builds at once
RULES_CHUNK = 1 << 22


def over_rules(rules: Tensor, block: tuple[bool, bool], pairs: Tensor, reduce) -> Tensor:
    """``reduce(score, -1)`` (a max or a log-sum-exp) over the label pairs of score[b, i, A, (K1 K2)] =
    rules[g, A, K1, K2] + pairs[b, i, K1, K2], the block's rules (G x NT x S x S dense log-potentials,
    the children's kinds in ``block``) and the spans' summed children (B x n x K1 x K2): B x n x NT,
    in chunks of sentences (at most ``RULES_CHUNK`` entries)."""
    NT = rules.shape[1]
    rows = slice(0, NT) if block[0] else slice(NT, None)
    cols = slice(0, NT) if block[1] else slice(NT, None)
    sub = rules[:, :, rows, cols]  # G x NT x K1 x K2
    pairs = pairs.contiguous()  # the children's views may order it otherwise: the sums below follow it
    B, n, K1, K2 = pairs.shape
    step = max(1, RULES_CHUNK // max(1, n * NT * K1 * K2))
    out = []
    for b0 in range(0, B, step):
        g = sub if sub.shape[0] == 1 else sub[b0 : b0 + step]
        score = g.unsqueeze(1) + pairs[b0 : b0 + step, :, None]  # b x n x NT x K1 x K2
        out.append(reduce(score.flatten(-2), -1))
    return torch.cat(out) if len(out) > 1 else out[0]


def span_diagonal(x: Tensor, width: int) -> Tensor:
    """The entries [b, i, i+width] of a B x T x (T+1) (x ...) span tensor: B x (T-width+1) (x ...)."""
    T = x.shape[1]
    n = T - width + 1
    i = torch.arange(n, device=x.device)
    return x[:, i, i + width]


def check_some_tree(log_z: Tensor, lengths: Tensor) -> Tensor:
    """``log_z`` (B,), or a ValueError where a sentence has no tree of non-zero score (log Z = -inf):
    every exact operation on such a sentence (marginals, entropy, argmax, samples, log_prob) would
    otherwise return made-up values."""
    dead = torch.isneginf(log_z.detach())
    if bool(dead.any()):
        idx = dead.nonzero().flatten().tolist()
        raise ValueError(
            f"no tree of batch elements {idx} (lengths {lengths[dead.to(lengths.device)].tolist()}) has a "
            "non-zero score under this grammar: log Z = -inf; check the rules, roots and terminal scores "
            "(e.g. a preterminal that can emit no word of the sentence)"
        )
    return log_z


def mask_terms(terms: Tensor, lengths: Tensor) -> Tensor:
    """terms with the positions past each length zeroed (finite), so padding never makes NaN."""
    T = terms.shape[1]
    valid = torch.arange(T, device=terms.device) < lengths.unsqueeze(-1)
    return torch.where(valid.unsqueeze(-1), terms, torch.zeros_like(terms))


def backtrack(choose, lengths: Tensor, root_labels: Tensor, T: int, labelled: bool = True) -> Tensor:
    """Rebuild trees top-down from CKY's choices.

    Args:
        choose: ``choose(b, start, width, label)`` -> (split, left label, right label), ints: the best
            decomposition of sentence b's span [start, start + width) with that label; the split is the
            width of the left child; a child's label is a preterminal index if its width is 1, else a
            nonterminal index.
        lengths: (B,).
        root_labels: (B,) the root's label.
        T: the padded sentence length (the trees get 2T-1 rows whatever the lengths).
        labelled: rows (start, end, label) if True, else (start, end).
    Returns:
        B x (2T-1) x 3 (or x 2) long, pre-order, -1 past 2n-1.
    """
    B = lengths.shape[0]
    cols = 3 if labelled else 2
    out = torch.full((B, 2 * T - 1, cols), -1, dtype=torch.long)
    for b in range(B):
        stack = [(0, int(lengths[b]), int(root_labels[b]))]
        row = 0
        while stack:
            i, k, label = stack.pop()
            out[b, row, :2] = torch.tensor([i, k])
            if labelled:
                out[b, row, 2] = label
            row += 1
            w = k - i
            if w == 1:
                continue
            split, left, right = choose(b, i, w, label)
            stack.append((i + split, k, right))
            stack.append((i, i + split, left))
    return out.to(lengths.device)


def mbr_tree(span_marginals: Tensor, lengths: Tensor) -> Tensor:
    """CYK on span marginals (Goodman 1996): the unlabelled tree with the largest expected number of
    correct spans. span_marginals: B x T x (T+1). Returns B x (2T-1) x 2 long (start, end)."""
    B, T = span_marginals.shape[:2]
    gain = span_marginals.detach().double()
    best: list[Tensor | None] = [None, gain.new_zeros(B, T)]
    splits: list[Tensor | None] = [None, None]
    for w in range(2, T + 1):
        n = T - w + 1
        cand = torch.stack([best[s][:, :n] + best[w - s][:, s : s + n] for s in range(1, w)], -1)
        value, arg = cand.max(-1)
        best.append(value + span_diagonal(gain, w))
        splits.append(arg + 1)

    splits = [None, None] + [s.cpu() for s in splits[2:]]
    return backtrack(
        lambda b, i, w, label: (int(splits[w][b, i]), 0, 0), lengths, torch.zeros_like(lengths), T, False
    )
