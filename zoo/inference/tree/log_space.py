"""The inside pass in log space: where a float64 scaled inside loses its values.

The scaled insides (``exact``, ``low_rank``) keep every span's vector in probability space under one
log-scale, so even float64 flushes an entry about 708 nats below its span's best label, and a rule that
far below its parent's best: a sentence whose every tree runs through such entries gets a log Z that is
off by nats or -inf (a false "no tree" error). ``guard.guarded`` marks those sentences and recomputes
them here: the same CKY loop (``cky``) in the log semiring on log-values, each block's splits summed by
a log-sum-exp (B x n x K1 x K2), then its label pairs with the dense rules (``chart.over_rules``). No
entry is ever scaled, so none is lost, at the cost of elementwise log-sum-exps where the scaled pass
runs matrix products. The entropy of those sentences is log Z - E[score], the expected score from the
gradient of log Z (the expected counts of every potential), in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.numerics import finite_or_zero, logsumexp
from zoo.inference.semiring import Log
from zoo.inference.tree.chart import DenseSpanRules, over_rules
from zoo.inference.tree.cky import cky
from zoo.inference.tree.factors import DenseGrammar, GrammarFactors


class LogSpaceRules(DenseSpanRules):
    """The log semiring's rule application (``cky.SpanRules``) on log-values and dense rules."""

    semiring = Log

    def part(self, block, splits, left, right) -> Tensor:
        pairs = logsumexp(left[..., :, None] + right[..., None, :], 2)  # B x n x K1 x K2, over the splits
        return over_rules(self.rules, block, pairs, logsumexp)

    @staticmethod
    def combine(parts: list[Tensor]) -> Tensor:
        return logsumexp(torch.stack(parts), 0)


def log_partition(
    grammar: GrammarFactors,
    terms: Tensor,
    lengths: Tensor,
    span_scores: Tensor | None = None,
    label_scores: Tensor | None = None,
) -> Tensor:
    """log Z (B,) in log space, on the grammar's dense rules (a low-rank grammar's materialized; a
    ValueError names the size where that is too large); the arguments as ``exact.inside``'s."""
    top, _ = cky(LogSpaceRules(grammar.dense().dense_rules(), terms), grammar.root, lengths, span_scores,
                 label_scores)  # fmt: skip
    return logsumexp(top, -1)


def entropy(
    grammar: GrammarFactors,
    terms: Tensor,
    lengths: Tensor,
    span_scores: Tensor | None = None,
    label_scores: Tensor | None = None,
) -> Tensor:
    """H = log Z - E[score] (B,), differentiable: E[score] sums every potential times its expected count,
    the gradient of the log-space log Z with respect to it (the grammar's per sentence). Meant for float64,
    where the difference loses about eps |log Z| (1e-12 nats at |log Z| = 1e4). A sentence without a tree
    gets -inf (its log Z; the caller raises). ``span_scores`` unused (``guard.guarded``'s signature)."""
    dense = grammar.dense()
    B = terms.shape[0]
    potentials = [dense.root.expand(B, -1), dense.rules.expand(B, -1, -1, -1), terms]
    if label_scores is not None:
        potentials.append(label_scores)
    with torch.enable_grad():
        potentials = [p if p.requires_grad else p.detach().requires_grad_() for p in potentials]
        root, rules, leaves, *nodes = potentials
        log_z = log_partition(DenseGrammar(root, rules), leaves, lengths, None, *nodes)
        counts = torch.autograd.grad(log_z.sum(), potentials, create_graph=True)
    expected = sum((c * finite_or_zero(p)).flatten(1).sum(-1) for c, p in zip(counts, potentials))
    return log_z - expected
