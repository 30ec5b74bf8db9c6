"""The inside algorithm over state space: the CKY loop (``cky``) in the log semiring.

Per width, the blocks of children (``cky.BLOCKS``) meet the rules in scaled probability space:

* two nonterminals (and two preterminals, width 2 only): the splits are summed first as outer
  products of the children's scaled inside vectors (``outer_sum``: one batched matmul), then the
  rules are applied once per span (``RuleOp``): O(T^3 NT^2 + T^2 NT^3) for dense rules; the low-rank
  grammar swaps this for two skinny products;
* one preterminal child (one split per span): the preterminal is summed out of the rules once per
  position (``leaf_rules``, B x T x NT x NT), so each span costs one NT x NT matrix-vector product,
  not NT^2 PT.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from zoo.inference.numerics import logsumexp
from zoo.inference.semiring import Log
from zoo.inference.tree import log_space
from zoo.inference.tree.chart import Scaled, combine, finite_max, matvec, outer_sum, to_scaled
from zoo.inference.tree.cky import cky, leaf_block, root_values
from zoo.inference.tree.factors import GrammarFactors
from zoo.inference.tree.guard import UnderflowGuard, guarded

#: rule_op(left_nt, right_nt, X) -> (log-scale broadcastable to B x n, Y B x n x NT):
#: Y[b, i, A] = sum_{b', c'} psi(A, b', c') X[b, i, b', c'] over the children of the
#: two-nonterminal (True, True) or the two-preterminal (False, False) block
RuleOp = Callable[[bool, bool, Tensor], tuple[Tensor, Tensor]]


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
    B x T x NT x NT, bound G x 1): [b, t, A, C] = sum_P psi(A, P, C) exp(terms[b, t, P]) for a leaf at
    t on the left (C the right nonterminal), and likewise with the leaf on the right; the bound is
    the largest value a scaled leaf could give (sum_P over the scaled rules), for the guard.
    """
    t_scale, t_values = to_scaled(terms)  # B x T, B x T x PT
    out = {}
    for block, pattern in (((False, True), "apc,btp->btac"), ((True, False), "acp,btp->btac")):
        r_scale, probs = scaled_rules(grammar.rules_block(*block))  # G, G x NT x (PT x NT | NT x PT)
        scale = t_scale + r_scale.view(-1, 1)
        out[block] = scale, rule_sum(pattern, probs, t_values), leaf_bound(probs, block)
    return out


def leaf_bound(probs: Tensor, block: tuple[bool, bool]) -> Tensor:
    """The most a leaf block's scaled rules (G x NT x PT x NT or G x NT x NT x PT) give scaled children
    (each at most 1): max over (A, C) of sum_P, G x 1 (``UnderflowGuard``'s bound)."""
    p_dim = 2 if block == (False, True) else 3
    return probs.detach().sum(p_dim).flatten(1).amax(1, keepdim=True)


def rule_sum(pattern: str, rule: Tensor, leaf: Tensor) -> Tensor:
    """einsum of G x NT x ... rules (one grammar, or one per sentence) with B x T x PT leaves."""
    if rule.shape[0] == 1:
        return torch.einsum(pattern, rule[0], leaf)
    return torch.einsum("b" + pattern, rule, leaf)


class InsideRules:
    """The log semiring's rule application (``cky.SpanRules``) on scaled children (``entry``): scaled
    parts (log-scale B x n, values B x n x NT) of the leaf blocks through ``leaf_rules``, of the
    others through ``rule_op``."""

    semiring = Log

    def __init__(
        self, grammar: GrammarFactors, rule_op: RuleOp, terms: Tensor, guard: UnderflowGuard | None = None
    ):
        self.rule_op, self.leaves = rule_op, terms
        self.leaf_rules = leaf_rules(grammar, terms) if terms.shape[1] >= 3 else {}
        self.guard = guard
        self.grammar_batch = grammar.grammar_batch
        self.bounds: dict = {}  # block -> the largest value its rules give scaled children (G x 1)

    def entry(self, value: Tensor) -> Scaled:
        return to_scaled(value)

    def part(self, block, splits, left, right) -> tuple[Tensor, Tensor]:
        leaf = leaf_block(block, splits, left, right)
        if leaf is not None:
            at, (c_scale, c_values) = leaf
            q_scale, Q, bound = self.leaf_rules[block]
            n = c_values.shape[1]
            Y = matvec(Q[:, at : at + n], c_values)
            if self.guard is not None:
                self.guard.check(Y.detach().amax(-1), self.guard.floor_of(bound))
            return q_scale[:, at : at + n] + c_scale, Y
        x_scale, X = outer_sum(left, right)
        r_scale, Y = self.rule_op(*block, X)
        if self.guard is not None:
            self.guard.check(Y.detach().amax(-1), self.guard.floor_of(self.bound(block, X)))
        return x_scale + r_scale, Y

    def bound(self, block: tuple[bool, bool], X: Tensor) -> Tensor:
        """The largest value the block's rules give children of at most 1 (all-ones children): G x 1."""
        if block not in self.bounds:
            ones = X.new_ones(self.grammar_batch, 1, *X.shape[-2:])
            self.bounds[block] = self.rule_op(*block, ones)[1].detach().flatten(1).amax(1, keepdim=True)
        return self.bounds[block]

    def combine(self, parts: list) -> Tensor:
        return combine(parts)


def inside(
    grammar: GrammarFactors,
    rule_op: RuleOp,
    terms: Tensor,
    lengths: Tensor,
    span_scores: Tensor | None = None,
    label_scores: Tensor | None = None,
    guard: UnderflowGuard | None = None,
) -> tuple[Tensor, list]:
    """log Z and the per-width log inside chart.

    Args:
        grammar: a dense or LPCFG grammar (its dense blocks serve the productions with a leaf).
        rule_op: applies the binary rules to summed children (``dense_rule_op`` or a low-rank one).
        terms: B x T x PT terminal log-scores, finite past each length (``mask_terms``).
        lengths: (B,) sentence lengths, each >= 2.
        span_scores: optional B x T x (T+1) log-scores added to every label of span [i, k) (width >= 2).
        label_scores: optional B x T x (T+1) x NT log-scores added per span and label.
        guard: checks every rule application (``guard.UnderflowGuard``).
    Returns:
        log Z (B,) and chart: ``chart[w]`` is B x (T-w+1) x NT for w >= 2, the terms at 1.
    """
    rules = InsideRules(grammar, rule_op, terms, guard)
    top, chart = cky(rules, grammar.root, lengths, span_scores, label_scores)
    log_z = logsumexp(top, -1)
    if guard is not None:
        guard.check_root_sum(log_z, root_values(chart, lengths), grammar.root)
    return log_z, chart


def guarded_log_partition(rule_op_of: Callable[[GrammarFactors], RuleOp]):
    """log Z (B,) = f(grammar, terms, lengths, span_scores=None, label_scores=None) by ``inside`` with
    the rules applied by ``rule_op_of(grammar)``, the sentences its guard marks in float64, and those a
    float64 pass marks in log space (``guard.guarded``, ``log_space``)."""

    def run(grammar, terms, lengths, span_scores, guard, label_scores=None):
        return inside(grammar, rule_op_of(grammar), terms, lengths, span_scores, label_scores, guard)[0]

    def log_partition(grammar, terms, lengths, span_scores=None, label_scores=None):
        return guarded(
            run, grammar, terms, lengths, span_scores, label_scores, log_space=log_space.log_partition
        )

    return log_partition
