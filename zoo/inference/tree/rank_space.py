"""Inside algorithms for the CPD grammar psi(A, b, c) = sum_r U[A, r] V[b, r] W[c, r].

Both algorithms project every span onto the rank axis twice, once as a left child (l = V^T beta)
and once as a right child (r = W^T beta), and sum the splits of a span elementwise,
gamma_ik = sum_j l_ij * r_jk (an r-vector); they differ in how a span's projections are formed from
its gamma (``lift``):

* state space (Cohen et al. 2013; Yang et al. 2021b): beta = U gamma over the NT nonterminals,
  then l = V_NT^T beta and r = W_NT^T beta: O(T^3 r + T^2 NT r).
* rank space (Yang et al. 2022, Sec. 4.2): the state nodes are marginalized first,
  H = V_NT^T U and I = W_NT^T U (r x r, once per grammar), then l = H gamma and r = I gamma:
  O(T^3 r + T^2 r^2 + NT r^2).

Width-1 spans are preterminals: l = V_PT^T exp(terms), r = W_PT^T exp(terms) (J and K in the paper),
and Z = sum_A exp(root_A) beta_0n(A) = (U^T exp(root)) . gamma_0n (L in the paper). Every vector is
scaled (``chart.to_scaled``): values with maximum 1 and a log-scale per span.

Float32: every product is checked by a ``guard.UnderflowGuard`` (the span's sum over splits, the
projections through U, V, W, H and I, the root sums); the sentences it marks are computed again
in float64 (``guard.guarded``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from zoo.inference.engines import register_engine
from zoo.inference.kinds import FALLBACK, NATIVE, UNSUPPORTED
from zoo.inference.numerics import safe_log
from zoo.inference.tree import log_space
from zoo.inference.tree.chart import Scaled, check_some_tree, finite_max, span_diagonal, to_scaled
from zoo.inference.tree.engine import TreeEngine
from zoo.inference.tree.exact import grammar_matmul
from zoo.inference.tree.factors import RankSpaceGrammar
from zoo.inference.tree.guard import UnderflowGuard, any_marked, guard_for, guarded
from zoo.inference.tree.sampling import gumbel_argmax, sample_trees, top_down

#: lift(gamma, width) -> (left projection, right projection, root log-value B x n) of the spans
Lift = Callable[[Scaled, int], tuple[Scaled, Scaled, Tensor]]


def rescale(scale: Tensor, values: Tensor, m: Tensor | None = None) -> Scaled:
    """Move the maximum of ``values`` (``m``, when known) into the log-scale (keeps float32 vectors
    away from 0)."""
    m = values.detach().amax(-1) if m is None else m
    ok = m > 0
    m = torch.where(ok, m, torch.ones_like(m))
    return scale + torch.where(ok, m.log(), torch.zeros_like(m)), values / m.unsqueeze(-1)


def project(
    x: Scaled, weights: Tensor, guard: UnderflowGuard | None = None, floor: Tensor | None = None
) -> Scaled:
    """Scaled vectors B x n x K times grammar weights G x K x M -> scaled B x n x M; ``guard`` checks
    the maxima against ``floor`` (``guard.floor(weights)``)."""
    scale, values = x
    product = grammar_matmul(values, weights)
    m = product.detach().amax(-1)
    if guard is not None:
        guard.check(m, floor)
    return rescale(scale, product, m)


def root_value(x: Scaled, root_weights: Tensor, guard: UnderflowGuard | None = None) -> Tensor:
    """log sum_k root_weights[k] x[k]: x scaled B x n x K, root_weights (log-scale G, G x K)."""
    (scale, values), (r_scale, r_values) = x, root_weights
    total = (values * r_values.unsqueeze(1)).sum(-1)
    if guard is not None:
        guard.roots.append((total.detach()[:, 0], guard.floor(r_values.unsqueeze(-1))))
    return scale + r_scale.unsqueeze(-1) + safe_log(total)


def scaled_root(grammar: RankSpaceGrammar) -> tuple[Tensor, Tensor]:
    """exp(root) as (log-scale G, values G x NT)."""
    m = finite_max(grammar.root, -1)
    return m, (grammar.root - m.unsqueeze(-1)).exp()


def leaf_projections(
    grammar: RankSpaceGrammar, terms: Tensor, guard: UnderflowGuard | None = None
) -> tuple[Scaled, Scaled]:
    """The width-1 spans as children: V_PT^T exp(terms) and W_PT^T exp(terms), scaled B x T x r."""
    NT = grammar.num_nonterminals
    leaves = to_scaled(terms)
    V, W = grammar.V[:, NT:], grammar.W[:, NT:]
    floors = (None, None) if guard is None else (guard.floor(V), guard.floor(W))
    return project(leaves, V, guard, floors[0]), project(leaves, W, guard, floors[1])


def projected_inside(
    lift: Lift,
    leaves: tuple[Scaled, Scaled],
    lengths: Tensor,
    span_scores: Tensor | None = None,
    guard: UnderflowGuard | None = None,
) -> Tensor:
    """log Z (B,) by the projected inside; see the module docstring.

    Args:
        lift: the rank-space or state-space lift (``rank_space_lift`` / ``state_space_lift``).
        leaves: the left and right projections of the width-1 spans, scaled B x T x r.
        lengths: (B,).
        span_scores: optional B x T x (T+1) log-scores added to the spans [i, k) of width >= 2.
        guard: checks each span's sum over splits (the lift checks its own steps).
    """
    T = leaves[0][1].shape[1]
    left: list[Scaled | None] = [None, leaves[0]]
    right: list[Scaled | None] = [None, leaves[1]]
    tops = []
    for w in range(2, T + 1):
        n = T - w + 1
        l_scale = torch.stack([left[s][0][:, :n] for s in range(1, w)], 2)  # B x n x (w-1)
        r_scale = torch.stack([right[w - s][0][:, s : s + n] for s in range(1, w)], 2)
        l_val = torch.stack([left[s][1][:, :n] for s in range(1, w)], 2)  # B x n x (w-1) x r
        r_val = torch.stack([right[w - s][1][:, s : s + n] for s in range(1, w)], 2)
        pair = l_scale + r_scale
        m = finite_max(pair, -1)
        gamma = torch.einsum("bns,bnsr,bnsr->bnr", (pair - m.unsqueeze(-1)).exp(), l_val, r_val)
        g_max = gamma.detach().amax(-1)
        if guard is not None:  # each split's terms are at most 1
            guard.check(g_max, guard.RISK)
        if span_scores is not None:
            m = m + span_diagonal(span_scores, w)
        l_new, r_new, top = lift(rescale(m, gamma, g_max), w)
        left.append(l_new)
        right.append(r_new)
        tops.append(top[:, 0])
    tops = torch.stack(tops, 1)  # B x (T-1): the root value of [0, w)
    if guard is not None:
        guard.check_roots()
    return tops.gather(1, (lengths - 2).unsqueeze(-1)).squeeze(-1)


def rank_space_lift(grammar: RankSpaceGrammar, guard: UnderflowGuard | None = None) -> Lift:
    """Yang et al. 2022: l = H gamma, r = I gamma, root . gamma with L = U^T exp(root)."""
    NT = grammar.num_nonterminals
    U = grammar.U
    H = grammar.V[:, :NT].transpose(1, 2) @ U  # G x r x r: [r', r] = sum_A V[A, r'] U[A, r]
    I = grammar.W[:, :NT].transpose(1, 2) @ U
    r_scale, r_values = scaled_root(grammar)
    L = (r_values.unsqueeze(1) @ U).squeeze(1)  # G x r
    Ht, It = H.transpose(1, 2), I.transpose(1, 2)
    floors = (guard.floor(Ht), guard.floor(It)) if guard is not None else (None, None)

    def lift(gamma: Scaled, width: int) -> tuple[Scaled, Scaled, Tensor]:
        return (
            project(gamma, Ht, guard, floors[0]),
            project(gamma, It, guard, floors[1]),
            root_value(gamma, (r_scale, L), guard),
        )

    return lift


def state_space_lift(
    grammar: RankSpaceGrammar, label_scores: Tensor | None = None, guard: UnderflowGuard | None = None
) -> Lift:
    """Cohen et al. 2013 / Yang et al. 2021b: beta = U gamma, then l = V_NT^T beta, r = W_NT^T beta.

    ``label_scores`` (B x T x (T+1) x NT, optional) are added to log beta: the probe that gives
    labelled span marginals.
    """
    NT = grammar.num_nonterminals
    Ut = grammar.U.transpose(1, 2)  # G x r x NT
    V, W = grammar.V[:, :NT], grammar.W[:, :NT]
    root = scaled_root(grammar)
    floors = [guard.floor(x) if guard is not None else None for x in (Ut, V, W)]

    def lift(gamma: Scaled, width: int) -> tuple[Scaled, Scaled, Tensor]:
        beta = project(gamma, Ut, guard, floors[0])
        if label_scores is not None:
            scale, values = beta
            log_beta = scale.unsqueeze(-1) + safe_log(values) + span_diagonal(label_scores, width)
            beta = to_scaled(log_beta)
        left, right = project(beta, V, guard, floors[1]), project(beta, W, guard, floors[2])
        return left, right, root_value(beta, root, guard)

    return lift


def rank_space_log_partition(grammar, terms, lengths, span_scores=None):
    """log Z by the rank-space inside (Yang et al. 2022, Sec. 4.2): (B,)."""

    def inside(grammar, terms, lengths, span_scores, guard):
        leaves = leaf_projections(grammar, terms, guard)
        return projected_inside(rank_space_lift(grammar, guard), leaves, lengths, span_scores, guard)

    return guarded(inside, grammar, terms, lengths, span_scores, log_space=log_space.log_partition)


def state_space_log_partition(grammar, terms, lengths, span_scores=None, label_scores=None):
    """log Z by the state-space CPD inside (Yang et al. 2021b): (B,)."""

    def inside(grammar, terms, lengths, span_scores, guard, label_scores):
        lift = state_space_lift(grammar, label_scores, guard)
        return projected_inside(lift, leaf_projections(grammar, terms, guard), lengths, span_scores, guard)

    return guarded(
        inside, grammar, terms, lengths, span_scores, label_scores, log_space=log_space.log_partition
    )


def _log_values(x: Scaled) -> Tensor:
    return x[0].unsqueeze(-1) + safe_log(x[1])


def sample_rank_space(grammar: RankSpaceGrammar, terms, lengths, n: int, generator=None) -> Tensor:
    """n exact samples of p(tree | sentence) for a CPD grammar without materializing psi.

    A node [i, k) labelled A draws its split s and rank r together, with probability
    proportional to U[A, r] l_{i,i+s}[r] r_{i+s,k}[r] (the rank-space inside's projections), then
    its children independently: the left one with probability proportional to V[b, r] beta(b) and
    the right one to W[c, r] beta(c), where beta = U gamma (a nonterminal) or exp(terms) (a leaf).
    O(T r) per split draw and O((NT + PT) r) per child: n x B x (2T-1) x 3 long. Where the guard marks
    a sentence, from float64 charts; where a float64 pass marks one too, from the materialized rules'
    log-space chart (``sampling.sample_trees``; a ValueError names the size where they are too big).
    """
    B, T, PT = terms.shape
    NT = grammar.num_nonterminals
    grammar_of = (lambda b: b) if grammar.grammar_batch > 1 else torch.zeros_like
    with torch.no_grad():
        guard = guard_for(lengths, terms.dtype, float64=True)
        leaves = leaf_projections(grammar, terms, guard)
        lift = rank_space_lift(grammar, guard)
        charts: dict[int, tuple] = {1: (None, *leaves)}

        def capture(gamma: Scaled, width: int):
            left, right, top = lift(gamma, width)
            charts[width] = (gamma, left, right)
            return left, right, top

        projected_inside(capture, leaves, lengths, None, guard)
        if any_marked(guard) and terms.dtype != torch.float64:  # lost mass decides the draws: float64 charts
            in_float64 = grammar.rows(None, torch.float64)
            return sample_rank_space(in_float64, terms.double(), lengths, n, generator)
        if any_marked(guard):  # beyond float64's range: the materialized rules' log-space chart
            return sample_trees(grammar.dense(), terms, lengths, n, generator)
        r = grammar.rank
        # log projections and inside, B x start x width x r (width 0 unused)
        left = terms.new_full((B, T, T + 1, r), float("-inf"))
        right, gamma = left.clone(), left.clone()
        for w, (g, lp, rp) in charts.items():
            left[:, : T - w + 1, w] = _log_values(lp)
            right[:, : T - w + 1, w] = _log_values(rp)
            if g is not None:
                gamma[:, : T - w + 1, w] = _log_values(g)
        logU, logV, logW = safe_log(grammar.U), safe_log(grammar.V), safe_log(grammar.W)
        s = torch.arange(1, T, device=terms.device)

        def inside(b, start, width):
            """log beta over the NT nonterminals of spans of width >= 2: M x NT."""
            g = gamma[b, start, width.clamp_min(2)]
            m = finite_max(g, -1)
            values = (g - m.unsqueeze(-1)).exp().unsqueeze(1) @ grammar.U[grammar_of(b)].transpose(1, 2)
            return safe_log(values.squeeze(1)) + m.unsqueeze(-1)

        def root_logits(b, length):
            return grammar.root[grammar_of(b)] + inside(b, torch.zeros_like(b), length)

        def root(b, length):
            return gumbel_argmax(root_logits(b, length), generator)

        check_some_tree(root_logits(torch.arange(B, device=terms.device), lengths).logsumexp(-1), lengths)

        def child(b, start, width, rank, log_factor):
            """The label of a child span given its parent's rank: M."""
            g = grammar_of(b)
            factor = log_factor[g, :, rank]  # M x S
            leaf = gumbel_argmax(factor[:, NT:] + terms[b, start.clamp_max(T - 1)], generator)
            node = gumbel_argmax(factor[:, :NT] + inside(b, start, width), generator)
            return torch.where(width == 1, leaf, node)

        def expand(b, i, k, label):
            w = k - i
            mid = i.unsqueeze(-1) + s  # M x (T-1)
            ok = mid < k.unsqueeze(-1)
            lw, rw = s.expand_as(mid), (k.unsqueeze(-1) - mid).clamp_min(1)
            logits = (
                logU[grammar_of(b), label].unsqueeze(1)
                + left[b.unsqueeze(-1), i.unsqueeze(-1), lw.clamp_max(T)]
                + right[b.unsqueeze(-1), mid.clamp_max(T - 1), rw.clamp_max(T)]
            )  # M x (T-1) x r
            logits = torch.where(ok.unsqueeze(-1), logits, float("-inf"))
            pick = gumbel_argmax(logits.flatten(1), generator)
            split, rank = pick // r + 1, pick % r
            j = i + split
            return split, child(b, i, split, rank, logV), child(b, j, w - split, rank, logW)

        return top_down(lengths, n, T, root, expand)


@register_engine("tree", "rank-space")
class RankSpaceEngine(TreeEngine):
    """TD-PCFG inference in rank space; labelled marginals by the state-space CPD inside.

    ``algorithm="state-space"`` runs log Z by the state-space CPD inside instead (the same model and
    value, O(T^2 NT r) instead of O(NT r^2 + T^2 r^2)).
    """

    name = "rank-space"
    factor_types = (RankSpaceGrammar,)
    capabilities = {
        "log_partition": (NATIVE, "rank-space inside (Yang et al. 2022): O(T^3 r + T^2 r^2 + NT r^2)"),
        "span_marginals": (NATIVE, "autograd of the rank-space log Z"),
        "marginals": (NATIVE, "autograd of the state-space CPD inside: O(T^3 r + T^2 NT r)"),
        "entropy": (FALLBACK, "materializes NT x S x S (small grammars only)"),
        "log_prob": (NATIVE, "rule entries sum_r U V W"),
        "argmax": (UNSUPPORTED, "Viterbi over rank nodes is not Viterbi over states: use mbr()"),
        "mbr": (NATIVE, "CKY over span marginals"),
        "sample": (NATIVE, "top-down: (split, rank) then each child, O(T r + S r) a node"),
    }

    takes_options = True  # TreeDistribution(..., backend="rank-space", options="state-space")

    def __init__(self, algorithm: str = "rank-space"):
        if algorithm not in ("rank-space", "state-space"):
            raise ValueError(f"algorithm must be 'rank-space' or 'state-space', got {algorithm!r}")
        self.algorithm = algorithm

    def log_partition(self, grammar, terms, lengths, span_scores=None, label_scores=None):
        if label_scores is not None or self.algorithm == "state-space":
            return state_space_log_partition(grammar, terms, lengths, span_scores, label_scores)
        return rank_space_log_partition(grammar, terms, lengths, span_scores)

    def sample(self, grammar, terms, lengths, n, generator=None, nodes=None):
        if nodes is not None:  # node scores do not pass through the rank nodes: materialize
            return super().sample(grammar, terms, lengths, n, generator, nodes)
        return sample_rank_space(grammar, terms, lengths, n, generator)

    def argmax(self, grammar, terms, lengths, nodes=None):
        raise ValueError(
            "the 'rank-space' backend has no Viterbi: a max over rank nodes is not a max over "
            "trees. Use mbr() (CKY over span marginals), or backend='exact' on a grammar small "
            "enough to materialize."
        )
