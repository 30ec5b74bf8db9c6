"""A guard for the scaled inside passes in float32, and the float64 recompute of what it marks.

Every inside pass keeps a span's vector scaled: probability-space values with maximum 1 and one
log-scale. float32 keeps such a vector's entries only down to 2^-126 of its maximum, and rules,
factors or terms far below their maxima (a trained model's softmax can put entries hundreds of
nats down, or underflow them to exact zeros) can make a span's value come from those lost entries
alone. Its maximum is then far below what its inputs' maxima and the largest weight allow. The
sentence's log Z is wrong (0.1 nats on a rank-space PCFG met in training, 9 nats or a false "no
tree" error on built examples) and its gradient NaN. ``UnderflowGuard`` marks the sentences where
a product's maximum falls below 2^-60 of that bound, or below 2^-100 (weights whose largest entry is
itself tiny, or flushed: a factor far below float32's range built from its logs); ``guarded``
computes them again in float64. The root sum is such a product too: the root scores can weigh a
label whose value its span lost (a parent whose every rule lies far below another's).

Users: the exact and low-rank insides (``exact.InsideRules``: every rule application; the root
sum), the rank-space and state-space insides (``rank_space``: split sums, projections, root sums),
the randomized ones (the whole batch again in float64 with the same kept labels, then in log space)
and the samplers (float64 charts, then log-space ones).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from zoo.inference.numerics import finite_or_zero
from zoo.inference.tree.factors import GrammarFactors


class UnderflowGuard:
    """Which sequences (B,) a float32 scaled inside may have got wrong; see the module docstring.

    A step whose maxima m (B x n, before rescaling) fall below ``floor`` (``RISK`` times the largest
    value its inputs and weights allow, at least ``SMALLEST``) marks the sequence. Root sums are kept
    in ``roots`` (one B vector per width, the span [0, width)) and checked at the sentence's length.
    ``guard_for`` gives none in float64.
    """

    RISK = 2.0**-60
    RISK_FLOAT64 = 2.0**-900  # float64 flushes below 2^-1022: at most K 2^-122 of a kept maximum
    # a product's terms flushed below the smallest normal number (2^-126, 2^-1022) are at most
    # K 2^-26 (K 2^-32) of a product this large
    SMALLEST = 2.0**-100
    SMALLEST_FLOAT64 = 2.0**-990

    def __init__(self, lengths: Tensor, dtype: torch.dtype = torch.float32):
        if dtype == torch.float64:
            self.RISK, self.SMALLEST = self.RISK_FLOAT64, self.SMALLEST_FLOAT64
        self.lengths = lengths
        self.unsafe = torch.zeros_like(lengths, dtype=torch.bool)
        self.roots: list[tuple[Tensor, Tensor]] = []  # (root sums B, their floor G) per width 2, 3, ...

    def floor_of(self, largest: Tensor) -> Tensor:
        """The floor of a product whose largest possible value is ``largest``: ``RISK`` times it, at
        least ``SMALLEST``."""
        return (self.RISK * largest).clamp_min(self.SMALLEST)

    def floor(self, weights: Tensor) -> Tensor:
        """The floor of a product of vectors of at most 1 with G x K x M weights: G x 1."""
        return self.floor_of(weights.detach().amax(dim=(-2, -1)).unsqueeze(-1))

    def check(self, m: Tensor, floor: Tensor | float) -> None:
        self.unsafe |= (m < floor).any(-1)

    def check_root_sum(self, log_z: Tensor, values: Tensor, root: Tensor) -> None:
        """log Z (B,) = log sum_a exp(values_a + root_a) against ``RISK`` times its largest term's bound:
        values B x K (each sentence's whole span, in logs), root (B or 1) x K log-scores."""
        bound = finite_or_zero(values.detach().amax(-1)) + finite_or_zero(root.detach().amax(-1))
        self.unsafe |= log_z.detach() < bound + math.log(self.RISK)

    def check_roots(self) -> None:
        """The root sums of each sentence's whole span against their floors."""
        if self.roots:
            totals = torch.stack([t for t, _ in self.roots], 1)  # B x (T-1)
            floors = torch.stack([f.view(-1).expand_as(t) for t, f in self.roots], 1)
            pick = (self.lengths - 2).unsqueeze(-1)
            self.unsafe |= (totals.gather(1, pick) < floors.gather(1, pick)).squeeze(1)


def guard_for(lengths: Tensor, dtype: torch.dtype, float64: bool = False) -> UnderflowGuard | None:
    """A guard for a pass in ``dtype``; in float64 only with ``float64`` (a pass with a log-space
    fallback: ``guarded``), None otherwise."""
    if dtype == torch.float64:
        return UnderflowGuard(lengths, dtype) if float64 else None
    return UnderflowGuard(lengths)


def any_marked(guard: UnderflowGuard | None) -> bool:
    """Whether ``guard`` (None: a float64 pass) marked a sequence."""
    return guard is not None and bool(guard.unsafe.any())


def guarded(inside, grammar: GrammarFactors, terms, lengths, span_scores=None, *per_sentence, log_space=None):
    """``inside(grammar, terms, lengths, span_scores, guard, *per_sentence)`` -> log Z (B,) (or the
    entropy), with the sequences its ``UnderflowGuard`` marks computed again in float64 (returned in the
    terms' dtype), and with ``log_space(grammar, terms, lengths, span_scores, *per_sentence)`` (a pass
    that scales nothing) those that a float64 pass marks too. Then the others are computed again too, in
    their dtype, so that no gradient passes through the marked rows' graph (its NaNs would reach the
    shared grammar)."""
    guard = guard_for(lengths, terms.dtype, float64=log_space is not None)
    log_z = inside(grammar, terms, lengths, span_scores, guard, *per_sentence)
    if not any_marked(guard):
        return log_z
    if terms.dtype == torch.float64:
        again = log_space
    else:
        def again(*args):
            return guarded(inside, *args, log_space=log_space)
    parts = []
    for marked, dtype in ((guard.unsafe, torch.float64), (~guard.unsafe, terms.dtype)):
        rows = marked.nonzero()[:, 0]
        if len(rows):
            scores, *extra = (None if x is None else x[rows].to(dtype) for x in (span_scores, *per_sentence))
            args = grammar.rows(rows, dtype), terms[rows].to(dtype), lengths[rows], scores
            part = again(*args, *extra) if marked is guard.unsafe else inside(*args, None, *extra)
            parts.append((rows, part.to(terms.dtype)))
    order = torch.cat([rows for rows, _ in parts])
    return torch.cat([part for _, part in parts])[torch.argsort(order)]
