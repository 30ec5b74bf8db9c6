"""The randomized inside (Fu et al. 2022, Alg. 2): each span keeps K1 + K2 of its labels.

Before the DP (outside autograd) every span [i, k) of width >= 2 keeps the top K1 nonterminals of a
proposal plus K2 drawn from the renormalized tail, each drawn one weighted 1 / (K2 q) (Eq. 5-8,
``chain.randomized.select_states``); every leaf keeps preterminals the same way, the same fractions
of PT: ceil(K1 PT / NT) top and ceil(K2 PT / NT) drawn (all of them when that covers PT, so
K1 = NT keeps every label everywhere). The inside then runs over the kept labels only: a span's
kept values are summed over the splits and the kept labels of both children, each child weighted.
Alg. 2 as printed pairs top-K with top-K and sampled with sampled children; we sum the product of
the two weighted sums (all four combinations), the form its unbiasedness proof needs, so that
exp(log Z_hat) is unbiased and K1 = NT gives the exact inside. K2 = 0 is the top-K baseline
(Sun et al. 2019).

* Dense and LPCFG rules: psi gathered for the K x K x K kept triples of each span and split,
  recomputed in the backward (checkpoint): O(T^3 K^3) time, O(T^2 K) memory. An LPCFG's entries
  with two nonterminal children are formed from the gathered feature rows of the kept parents and
  child pairs in one batched product (O(T^3 K^3 R) multiply-adds, O(T^3 K^2 R) rows gathered).
* CPD rules (RankSpaceGrammar): the projected inside with the kept rows of U, V and W,
  O(T^3 r + T^2 K r); psi is never gathered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from zoo.inference.engines import register_engine
from zoo.inference.kinds import ESTIMATE, FALLBACK
from zoo.inference.numerics import logsumexp, safe_log
from zoo.inference.rdp import (
    KeptStates,
    RandomizedLifecycle,
    RDPOptions,
    check_nonzero_estimate,
    check_top_k_proposal,
    log_proposal_tensor,
    select_states,
    uniform_where_empty,
)
from zoo.inference.tree.chart import combine, finite_max, outer_sum, span_diagonal, to_scaled
from zoo.inference.tree.cky import BLOCKS, block_splits
from zoo.inference.tree.engine import ExactEngine, TreeEngine
from zoo.inference.tree.factors import GrammarFactors, LowRankGrammar, RankSpaceGrammar
from zoo.inference.tree.guard import UnderflowGuard, any_marked, guard_for
from zoo.inference.tree.low_rank import LowRankEngine
from zoo.inference.tree.rank_space import RankSpaceEngine, Scaled, projected_inside, rescale

TREE_PROPOSALS = ("uniform", "local")


@dataclass
class KeptLabels:
    """Kept nonterminals of every span (index B x T x (T+1) x K, at [b, i, k]) and kept
    preterminals of every leaf (index B x T x Kp), with their log importance weights."""

    spans: KeptStates
    leaves: KeptStates


def select_labels(grammar: GrammarFactors, terms: Tensor, options: RDPOptions) -> KeptLabels:
    """Draw the kept labels of every span and leaf (no autograd).

    ``options.proposal``: "uniform"; "local" (the default: leaves by softmax of their terms, spans
    uniform); or a B x T x (T+1) x NT tensor of non-negative span weights (leaves then as "local").
    """
    B, T, PT = terms.shape
    NT = grammar.num_nonterminals
    k1, k2 = options.k1, options.k2
    proposal = "local" if options.proposal is None else options.proposal
    if k1 + k2 > NT:
        raise ValueError(f"k1 + k2 must be at most NT = {NT} nonterminals, got k1={k1}, k2={k2}")
    check_top_k_proposal(options, NT, uniform=TREE_PROPOSALS)  # both uniform over span labels
    if isinstance(proposal, Tensor):
        log_q = log_proposal_tensor(proposal, (B, T, T + 1, NT), "B x T x (T+1) x NT", terms)
        log_q = log_q.reshape(B, T * (T + 1), NT)
    elif proposal in TREE_PROPOSALS:
        log_q = terms.new_zeros(B, T * (T + 1), NT)
    else:
        raise ValueError(
            f"tree proposals are {TREE_PROPOSALS} or a B x T x (T+1) x NT tensor, got {proposal!r}"
        )
    with torch.no_grad():
        spans = select_states(log_q, k1, k2, options.generator)
        spans = KeptStates(
            spans.index.view(B, T, T + 1, -1), spans.log_weights.view(B, T, T + 1, -1)
        )
        # leaves keep the same fraction of the PT preterminals as spans of the NT nonterminals
        leaf_k1 = min(PT, math.ceil(k1 * PT / NT))
        leaf_k2 = min(PT - leaf_k1, math.ceil(k2 * PT / NT))
        if leaf_k1 + leaf_k2 >= PT:  # every preterminal (exact leaves; always when k1 = NT)
            index = torch.arange(PT, device=terms.device).expand(B, T, PT)
            leaves = KeptStates(index, terms.new_zeros(B, T, PT))
        else:
            local = proposal != "uniform" if isinstance(proposal, str) else True
            log_q_leaf = uniform_where_empty(terms.clone()) if local else terms.new_zeros(B, T, PT)
            leaves = select_states(log_q_leaf, leaf_k1, leaf_k2, options.generator)
    return KeptLabels(spans, leaves)


def _kept_width(grammar, flat_rules, g, parent, kinds, *tensors):
    """The scaled sums of one width's blocks of splits: (scales B x n x nb, values B x n x nb x K).

    ``kinds`` names each block (left child a nonterminal, right child a nonterminal); ``tensors``
    holds four per block: left_sym, left (B x n x s x KL), right_sym, right (B x n x s x KR); a
    block's value is the sum over its splits of psi(parent, l, r) exp(left_l + right_r) over the kept
    children (psi from ``_kept_rules``).
    """
    blocks = [tensors[i : i + 4] for i in range(0, len(tensors), 4)]
    psis = _kept_rules(grammar, flat_rules, g, parent, kinds, [(block[0], block[2]) for block in blocks])
    scales, values = [], []
    for (_, left, _, right), psi in zip(blocks, psis):
        left, right = (to_scaled(x.unsqueeze(-2)) for x in (left, right))
        x_scale, X = outer_sum(left, right)  # B x n x s (x KL x KR)
        m = finite_max(x_scale, -1)
        X = X * (x_scale - m.unsqueeze(-1)).exp()[..., None, None]
        p_scale = finite_max(psi.flatten(2), -1)
        Y = torch.einsum("bnskxy,bnsxy->bnk", (psi - p_scale[..., None, None, None, None]).exp(), X)
        scales.append(m + p_scale)
        values.append(Y)
    return torch.stack(scales, -1), torch.stack(values, -2)


def _kept_rules(grammar, flat_rules, g, parent, kinds, symbols) -> list[Tensor]:
    """log psi(parent, l, r) over each block's kept triples: B x n x s x K x KL x KR a block
    (``symbols``: its left and right children's kept symbols, B x n x s x KL and B x n x s x KR).

    An LPCFG's two-nonterminal block goes through its features (``_feature_entries``). The other
    blocks' entries are read from the dense rules (an LPCFG's serve its blocks with a preterminal
    child), gathered for the whole width at once, so that their backward writes the rules' gradient
    once a width, not once a block.
    """
    out: list = [None] * len(kinds)
    index, shapes = [], []
    NT, S = grammar.rules.shape[-3], grammar.rules.shape[-1]
    for j, ((left_sym, right_sym), kind) in enumerate(zip(symbols, kinds)):
        if kind == (True, True) and isinstance(grammar, LowRankGrammar):
            out[j] = _feature_entries(grammar, g.view(-1), parent, left_sym, right_sym)
            continue
        # the entries' positions in ``flat_rules`` (the rules flattened once a DP), B x n x s x K x KL x
        # KR: one index tensor, built by broadcasting
        row = (g * NT + parent[:, :, None, :, None, None]) * S
        flat = (row + left_sym[..., None, :, None]) * S + right_sym[..., None, None, :]
        shapes.append((j, flat.shape))
        index.append(flat.reshape(-1))
    if index:
        entries = flat_rules[torch.cat(index) if len(index) > 1 else index[0]]
        for (j, shape), psi in zip(shapes, entries.split([shape.numel() for _, shape in shapes])):
            out[j] = psi.view(shape)
    return out


def _feature_entries(grammar: LowRankGrammar, g: Tensor, parent: Tensor, left_sym: Tensor,
                     right_sym: Tensor) -> Tensor:
    """log psi over an LPCFG's kept two-nonterminal triples, B x n x s x K x KL x KR: the parents'
    head rows (B x n x K x R) times the child pairs' feature rows (B x n x s x KL x KR x R), one
    batched product in float64 (as ``LowRankGrammar.rule_entries``): K times fewer rows gathered,
    and R times fewer products, than forming each entry's sum on its own. g: (B,) grammar index."""
    heads = grammar.head.double()[g.view(-1, 1, 1), parent]
    pairs = grammar.children.double()[g.view(-1, 1, 1, 1, 1), left_sym.unsqueeze(-1), right_sym.unsqueeze(-2)]
    return safe_log(torch.einsum("bnkr,bnsxyr->bnskxy", heads, pairs)).to(grammar.head.dtype)


def _kept_width_log(grammar, flat_rules, g, parent, kinds, *tensors) -> Tensor:
    """``_kept_width`` in log space: one width's log values (B x n x K), each block's sum over its
    splits and kept children a log-sum-exp, nothing scaled (no entry flushed)."""
    blocks = [tensors[i : i + 4] for i in range(0, len(tensors), 4)]
    psis = _kept_rules(grammar, flat_rules, g, parent, kinds, [(block[0], block[2]) for block in blocks])
    parts = []
    for (_, left, _, right), psi in zip(blocks, psis):
        x = psi + left[:, :, :, None, :, None] + right[:, :, :, None, None, :]  # B x n x s x K x KL x KR
        parts.append(logsumexp(x.transpose(2, 3).flatten(3), -1))
    return logsumexp(torch.stack(parts), 0)


def gathered_inside(grammar, terms, lengths, kept: KeptLabels, span_scores=None, label_scores=None,
                    guard: UnderflowGuard | None = None, in_log_space: bool = False):
    """Randomized log Z_hat (B,) for dense or LPCFG rules, psi gathered per kept triple; ``guard``
    checks each block's sum (its terms are at most 1). ``in_log_space``: every sum a log-sum-exp
    (``_kept_width_log``), for sentences beyond float64's range."""
    B, T, _ = terms.shape
    NT = grammar.num_nonterminals
    g = (torch.arange(B) if grammar.grammar_batch > 1 else torch.zeros(B, dtype=torch.long))
    g = g.to(terms.device).view(B, 1, 1, 1, 1, 1)
    leaf_value = terms.gather(-1, kept.leaves.index) + kept.leaves.log_weights  # as a child
    leaf_sym = kept.leaves.index + NT
    flat_rules = grammar.rules.reshape(-1)  # a view of contiguous rules (a copy of expanded ones, once)
    chart: list = [None, None]

    def child(width, start, n):
        """(symbols, weighted log values) of the n spans [start + i, start + i + width)."""
        if width == 1:
            return leaf_sym[:, start : start + n], leaf_value[:, start : start + n]
        index = span_diagonal(kept.spans.index, width)[:, start : start + n]
        weights = span_diagonal(kept.spans.log_weights, width)[:, start : start + n]
        return index, chart[width][:, start : start + n] + weights

    for w in range(2, T + 1):
        n = T - w + 1
        parent = span_diagonal(kept.spans.index, w)  # B x n x K
        kinds, blocks = [], []
        for block in BLOCKS:
            splits = block_splits(w, block)
            if splits:
                l_sym, left = (torch.stack(x, 2) for x in zip(*(child(s, 0, n) for s in splits)))
                r_sym, right = (torch.stack(x, 2) for x in zip(*(child(w - s, s, n) for s in splits)))
                kinds.append(block)
                blocks += [l_sym, left, r_sym, right]
        if in_log_space:
            beta = checkpoint(_kept_width_log, grammar, flat_rules, g, parent, kinds, *blocks,
                              use_reentrant=False)  # fmt: skip
        else:
            scales, values = checkpoint(
                _kept_width, grammar, flat_rules, g, parent, kinds, *blocks, use_reentrant=False
            )
            if guard is not None:
                guard.check(values.detach().amax(-1).flatten(1), guard.RISK)  # every block of every span
            beta = combine(list(zip(scales.unbind(-1), values.unbind(-2))))
        if span_scores is not None:
            beta = beta + span_diagonal(span_scores, w).unsqueeze(-1)
        if label_scores is not None:
            beta = beta + span_diagonal(label_scores, w).gather(-1, parent)
        chart.append(beta)
    return _root(grammar, kept, lengths, lambda w: chart[w][:, 0], guard)


def _root(grammar, kept: KeptLabels, lengths: Tensor, top_values, guard: UnderflowGuard | None = None):
    """log sum over the kept root labels of w_a exp(root_a + inside_a): (B,); ``guard`` checks the sum."""
    B = lengths.shape[0]
    widths = range(2, kept.spans.index.shape[1] + 1)
    values = torch.stack([top_values(w) for w in widths], 1)  # B x (T-1) x K
    index = torch.stack([kept.spans.index[:, 0, w] for w in widths], 1)
    weights = torch.stack([kept.spans.log_weights[:, 0, w] for w in widths], 1)
    pick = (lengths - 2).view(B, 1, 1).expand(B, 1, values.shape[-1])
    value, index, weights = (x.gather(1, pick).squeeze(1) for x in (values, index, weights))
    root = grammar.root.expand(B, -1).gather(-1, index) + weights
    log_z = logsumexp(root + value, -1)
    if guard is not None:
        guard.check_root_sum(log_z, value, root)
    return log_z


def projected_kept_inside(grammar: RankSpaceGrammar, terms, lengths, kept: KeptLabels,
                          span_scores=None, label_scores=None, guard: UnderflowGuard | None = None):
    """Randomized log Z_hat (B,) for CPD rules: the projected inside over the kept rows; ``guard``
    checks every product against its inputs' and weights' maxima."""
    B, T, _ = terms.shape
    NT = grammar.num_nonterminals
    g = (torch.arange(B) if grammar.grammar_batch > 1 else torch.zeros(B, dtype=torch.long))
    g = g.to(terms.device)

    def rows(matrix: Tensor, index: Tensor) -> Tensor:
        """matrix[g, index]: the kept rows, ... x K x r."""
        return matrix[g.view(B, *([1] * (index.dim() - 1))), index]

    checked = guard is not None
    largest = {name: getattr(grammar, name).detach().amax() for name in ("U", "V", "W")} if checked else {}

    def children(values: Scaled, index: Tensor, log_weights: Tensor) -> tuple[Scaled, Scaled]:
        """Left and right projections of kept, weighted values: sum_a V[a] w_a exp(values_a)."""
        scale, v = values
        v = v * log_weights.exp()
        out = []
        for name in ("V", "W"):
            product = torch.einsum("...k,...kr->...r", v, rows(getattr(grammar, name), index))
            m = product.detach().amax(-1)
            if checked:
                guard.check(m, guard.floor_of(v.detach().amax(-1) * largest[name]))
            out.append(rescale(scale, product, m))
        return out[0], out[1]

    leaf_values = terms.gather(-1, kept.leaves.index)
    leaf_scale = finite_max(leaf_values, -1)
    leaves = children(
        (leaf_scale, (leaf_values - leaf_scale.unsqueeze(-1)).exp()),
        kept.leaves.index + NT,
        kept.leaves.log_weights,
    )
    root = grammar.root.expand(B, -1)

    def lift(gamma: Scaled, width: int):
        index = span_diagonal(kept.spans.index, width)  # B x n x K
        weights = span_diagonal(kept.spans.log_weights, width)
        alpha = torch.einsum("bnr,bnkr->bnk", gamma[1], rows(grammar.U, index))
        m = alpha.detach().amax(-1)
        if checked:
            guard.check(m, guard.floor_of(largest["U"]))
        scale, alpha = rescale(gamma[0], alpha, m)
        if label_scores is not None:
            labels = span_diagonal(label_scores, width).gather(-1, index)
            scale, alpha = to_scaled(scale.unsqueeze(-1) + safe_log(alpha) + labels)
        left, right = children((scale, alpha), index, weights)
        top_root = root.gather(-1, index.flatten(1)).view(index.shape) + weights
        top = scale + logsumexp(safe_log(alpha) + top_root, -1)
        if checked:  # in logs: the root sum against its largest weight
            floor = math.log(guard.RISK) + top_root.detach().amax(-1)
            guard.roots.append(((top - scale).detach()[:, 0], floor[:, 0]))
        return left, right, top

    return projected_inside(lift, leaves, lengths, span_scores, guard)


def exact_engine(grammar: GrammarFactors) -> TreeEngine:
    """The exact engine native to a grammar container (the randomized backend's fallbacks)."""
    if isinstance(grammar, RankSpaceGrammar):
        return RankSpaceEngine()
    if isinstance(grammar, LowRankGrammar):
        return LowRankEngine()
    return ExactEngine()


@register_engine("tree", "randomized")
class RandomizedEngine(RandomizedLifecycle, TreeEngine):
    """RDP estimates over the labels each span keeps; see the module docstring."""

    name = "randomized"
    factor_types = (GrammarFactors,)
    capabilities = {
        "log_partition": (ESTIMATE, "Alg. 2 in log space: O(T^3 K^3), CPD rules O(T^3 r + T^2 K r)"),
        "span_marginals": (ESTIMATE, "autograd of the Alg. 2 estimate"),
        "marginals": (ESTIMATE, "autograd of the Alg. 2 estimate (non-zero on kept labels)"),
        "entropy": (FALLBACK, "exact, on the materialized rules"),
        "log_prob": (FALLBACK, "exact log Z of the grammar's own backend"),
        "argmax": (FALLBACK, "exact Viterbi on the materialized rules"),
        "mbr": (ESTIMATE, "CKY over the estimated span marginals"),
        "sample": (FALLBACK, "exact top-down sampling on the materialized rules"),
    }

    def checked(self, log_z, lengths):
        return log_z  # an estimate may be -inf (every kept label dead) without the grammar being wrong

    def _checked_log_partition(self, grammar, terms, lengths, **scores):
        """The estimate the marginals and the MBR tree differentiate: a ValueError where it is 0 (they
        came out 0, and the MBR tree right-branching)."""
        log_z = self.log_partition(grammar, terms, lengths, **scores)
        return check_nonzero_estimate(log_z, "marginals and MBR tree are")

    def draw(self, grammar, terms) -> KeptLabels:
        """The labels each span and each leaf keeps (``select_labels``)."""
        return select_labels(grammar, terms, self.options)

    def log_partition(self, grammar, terms, lengths, span_scores=None, label_scores=None):
        """Alg. 2's estimate; where a pass's guard marks a sentence (guard.py), the whole batch again
        with the same kept labels: in float64 after float32, in log space after float64 (a CPD
        grammar's materialized rules; a ValueError names the size where they are too big)."""
        kept = self.kept_states(grammar, terms)
        inside = projected_kept_inside if isinstance(grammar, RankSpaceGrammar) else gathered_inside
        guard = guard_for(lengths, terms.dtype, float64=True)
        log_z = inside(grammar, terms, lengths, kept, span_scores, label_scores, guard)
        if not any_marked(guard):
            return log_z
        wide = [None if x is None else x.double() for x in (span_scores, label_scores)]
        kept64 = KeptLabels(*(KeptStates(k.index, k.log_weights.double()) for k in (kept.spans, kept.leaves)))
        if terms.dtype != torch.float64:
            guard = guard_for(lengths, torch.float64, float64=True)
            log_z = inside(grammar.rows(None, torch.float64), terms.double(), lengths, kept64, *wide, guard)
            if not any_marked(guard):
                return log_z.to(terms.dtype)
        rules = grammar.dense() if isinstance(grammar, RankSpaceGrammar) else grammar
        log_z = gathered_inside(rules.rows(None, torch.float64), terms.double(), lengths, kept64, *wide,
                                in_log_space=True)  # fmt: skip
        return log_z.to(terms.dtype)

    def log_prob(self, grammar, terms, lengths, trees, nodes=None, log_z=None):  # exact, not the estimate's
        return exact_engine(grammar).log_prob(grammar, terms, lengths, trees, nodes)
