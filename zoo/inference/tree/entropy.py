"""The inside pass in the entropy semiring (``zoo.inference.semiring.Entropy``) on a dense grammar: the
CKY loop (``cky``) with ``EntropyRules``.

Every chart entry is a pair: the log inside mass beta[i, k, A] (as ``exact.inside`` computes it) and
H[i, k, A], the entropy of the subtrees of span [i, k) rooted in A, given that root. A span's parts are
the inside's (two nonterminal or two preterminal children, summed over splits, then the rules; one
preterminal child, its rules summed over the preterminal per position), each also carrying

    N = sum over its (split, children) of weight x (H_left + H_right - log weight)

in the part's scaled units, from the same products: with P the scaled rules and X the children's summed
outer products, N = P . E - (P log P) . X, E the outer products weighted by the children's entropies
minus their log weights (Fu et al. 2022, Alg. 3, over trees, as ``logmatmul.entropy_step`` for chains).
Then H = N / Y + log Y, Y the part's total: never the difference of log Z and E[score], which loses
about eps |log Z|. The terms of N / Y are of the size of the part's -log weights, so the engine runs
this in float64 (``ExactEngine.entropy``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from zoo.inference.numerics import finite_or_zero, safe_log
from zoo.inference.semiring import Entropy
from zoo.inference.tree.chart import check_some_tree, matvec, split_weights, to_scaled
from zoo.inference.tree.cky import cky, leaf_block
from zoo.inference.tree.exact import grammar_matmul, leaf_bound, rule_sum, scaled_rules
from zoo.inference.tree.factors import DenseGrammar
from zoo.inference.tree.guard import UnderflowGuard

# a part of a span: (log-scale B x n, total Y B x n x NT, entropy numerator N B x n x NT)
Part = tuple[Tensor, Tensor, Tensor]


def rules_with_entropy(log_rules: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """G x NT x K1 x K2 log rules -> (log-scale G, P, P log P), P the inside's ``scaled_rules``."""
    scale, probs = scaled_rules(log_rules)
    return scale, probs, probs * finite_or_zero(log_rules - scale.view(-1, 1, 1, 1))


class Carried(NamedTuple):
    """A span's scaled mass (log-scale ..., values v ... x K) and v o (H - log v): the entropy it
    brings as a child."""

    scale: Tensor
    values: Tensor
    entropy: Tensor


def carried(log_v: Tensor, H: Tensor) -> Carried:
    """``Carried`` of log masses and entropies ... x K."""
    m, v = to_scaled(log_v)
    return Carried(m, v, v * (H - finite_or_zero(log_v - m.unsqueeze(-1))))


def split_part(left: Carried, right: Carried, rules: tuple) -> Part:
    """The part of two children of a block, summed over the splits (one row per split: scales
    B x n x s, values and entropies B x n x s x K), through the block's scaled rules
    (``rules_with_entropy``)."""
    mL, vL, aL = left
    mR, vR, aR = right
    m, w = split_weights(mL, mR)  # B x n, B x n x s x 1
    X = (vL * w).transpose(-1, -2) @ vR  # B x n x K1 x K2
    log_w = finite_or_zero((mL + mR - m.unsqueeze(-1)).unsqueeze(-1))
    E = (aL * w).transpose(-1, -2) @ vR + (vL * w).transpose(-1, -2) @ aR
    E = E - (vL * w * log_w).transpose(-1, -2) @ vR  # the splits' own weights
    scale, probs, p_log_p = rules
    flat = lambda t: t.flatten(2).transpose(1, 2)  # noqa: E731  G x (K1 K2) x NT
    Y = grammar_matmul(X.flatten(2), flat(probs))
    N = grammar_matmul(E.flatten(2), flat(probs)) - grammar_matmul(X.flatten(2), flat(p_log_p))
    return m + scale.view(-1, 1), Y, N


def leaf_part(q: tuple, other: Carried, at: int) -> Part:
    """The part with a preterminal child at each span's position ``at`` and a nonterminal child
    ``other`` (B x n x NT); q: the per-position leaf rules (``leaf_rules``)."""
    q_scale, Q, QL, _ = q
    mC, vC, aC = other
    n = vC.shape[-2]
    Q, QL = Q[:, at : at + n], QL[:, at : at + n]  # B x n x NT x NT
    Y = matvec(Q, vC)
    N = matvec(Q, aC) - matvec(QL, vC)
    return q_scale[:, at : at + n] + mC, Y, N


def leaf_rules(grammar: DenseGrammar, terms: Tensor) -> dict:
    """The rules with their preterminal child summed out at every position, and the same of w log w:
    {block: (log-scale B x T, Q B x T x NT x NT, QL B x T x NT x NT, the guard's bound G x 1)},
    Q[b, t, A, C] = sum_P P(A, P, C) tv[b, t, P] (leaf on the left; likewise on the right), QL the same
    sum of P tv log(P tv)."""
    t_scale, tv = to_scaled(terms)
    tv_log = tv * finite_or_zero(terms - t_scale.unsqueeze(-1))
    out = {}
    for block, pattern in (((False, True), "apc,btp->btac"), ((True, False), "acp,btp->btac")):
        r_scale, probs, p_log_p = rules_with_entropy(grammar.rules_block(*block))
        Q = rule_sum(pattern, probs, tv)
        QL = rule_sum(pattern, p_log_p, tv) + rule_sum(pattern, probs, tv_log)
        out[block] = (t_scale + r_scale.view(-1, 1), Q, QL, leaf_bound(probs, block))
    return out


def combined(parts: list[Part]) -> Tensor:
    """The span's value (2 x B x n x NT: log mass and entropy) from its parts."""
    top = torch.stack([s for s, _, _ in parts]).amax(0)
    Y = sum((s - top).exp().unsqueeze(-1) * y for s, y, _ in parts)
    N = sum((s - top).exp().unsqueeze(-1) * (nn - (s - top).unsqueeze(-1) * y) for s, y, nn in parts)
    alive = Y > 0
    safe = torch.where(alive, Y, torch.ones_like(Y))
    H = torch.where(alive, N / safe + safe.log(), torch.zeros_like(Y))
    return torch.stack((top.unsqueeze(-1) + safe_log(Y), H))


class EntropyRules:
    """The entropy semiring's rule application (``cky.SpanRules``) on a dense grammar, its children
    read as ``Carried`` (made once a width): parts (log-scale, total, entropy numerator) of the leaf
    blocks through ``leaf_rules``, of the others through ``split_part``; ``guard`` checks each part's
    total against the most its rules give children of at most 1, as the inside's."""

    semiring = Entropy

    def __init__(self, grammar: DenseGrammar, terms: Tensor, guard: UnderflowGuard | None = None):
        self.leaves = Entropy.lift(terms)  # a leaf's entropy is 0
        self.leaf_rules = leaf_rules(grammar, terms) if terms.shape[1] >= 3 else {}
        pairs = ((True, True), (False, False))
        self.pair_rules = {block: rules_with_entropy(grammar.rules_block(*block)) for block in pairs}
        self.guard = guard
        # the most each block's scaled rules give children of at most 1 (G x 1), for the guard
        self.bounds = {block: q[3] for block, q in self.leaf_rules.items()}
        for block, (_, probs, _) in self.pair_rules.items():
            self.bounds[block] = probs.detach().flatten(2).sum(-1).amax(-1, keepdim=True)

    @staticmethod
    def entry(value: Tensor) -> Carried:
        return carried(*value)

    def part(self, block, splits, left, right) -> Part:
        leaf = leaf_block(block, splits, left, right)
        if leaf is not None:
            at, other = leaf
            part = leaf_part(self.leaf_rules[block], other, at)
        else:
            part = split_part(left, right, self.pair_rules[block])
        if self.guard is not None:
            self.guard.check(part[1].detach().amax(-1), self.guard.floor_of(self.bounds[block]))
        return part

    def combine(self, parts: list[Part]) -> Tensor:
        return combined(parts)


def entropy(
    grammar: DenseGrammar,
    terms: Tensor,
    lengths: Tensor,
    label_scores: Tensor | None = None,
    guard: UnderflowGuard | None = None,
) -> Tensor:
    """The entropy (B,) of p(tree | sentence), differentiable. terms: B x T x PT (masked past each
    length); label_scores: optional B x T x (T+1) x NT node log-scores; ``guard``: marks the sentences
    whose values a part lost (the caller then checks that every sentence has a tree)."""
    top, _ = cky(EntropyRules(grammar, terms, guard), grammar.root, lengths, label_scores=label_scores)
    total = Entropy.sum(top, -1)  # log Z and the entropy
    if guard is None:
        check_some_tree(total[0], lengths)
    return Entropy.result(total)
