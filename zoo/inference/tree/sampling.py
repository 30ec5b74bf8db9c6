"""Exact sampling of trees given a sentence, top-down from the inside chart.

Top-down sampling draws, for a node [i, k) labelled A, first the split s with probability
proportional to sum_{b, c} psi(A, b, c) beta_{i,i+s}(b) beta_{i+s,k}(c), then the children's symbols
(b, c) given s, both with the Gumbel-max trick. All n x B lanes advance together: each keeps a stack
of open nodes and pops one per step, so the rows come out in pre-order (``top_down``). The CPD
grammar's sampler (``rank_space.sample_rank_space``) plugs its own expansion into the same loop;
``sentences.sample_sentences`` draws words with their trees.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.numerics import gumbel_noise, logsumexp
from zoo.inference.tree import exact, log_space
from zoo.inference.tree.chart import check_some_tree, finite_max, mask_terms
from zoo.inference.tree.cky import cky
from zoo.inference.tree.factors import DenseGrammar
from zoo.inference.tree.guard import any_marked, guard_for


def full_chart(chart: list, terms: Tensor) -> Tensor:
    """B x T x (T+1) x S log inside over all symbols: nonterminals on spans of width >= 2,
    preterminals (the terms) on width-1 spans, -inf elsewhere."""
    B, T, PT = terms.shape
    NT = chart[2].shape[-1] if T >= 2 else 0
    full = terms.new_full((B, T, T + 1, NT + PT), float("-inf"))
    i = torch.arange(T, device=terms.device)
    full[:, i, i + 1, NT:] = terms
    for w in range(2, T + 1):
        j = i[: T - w + 1]
        full[:, j, j + w, :NT] = chart[w]
    return full


def gumbel_argmax(logits: Tensor, generator) -> Tensor:
    return (logits + gumbel_noise(logits.shape, logits, generator)).argmax(-1)


def top_down(lengths: Tensor, n: int, T: int, root, expand) -> Tensor:
    """Grow n x B trees top-down, all lanes at once, each keeping a stack of open nodes.

    Args:
        lengths: (B,); n: samples per sentence; T: the padded length (2T-1 rows per tree).
        root: ``root(b, length)`` -> the root labels of the lanes (b: lane -> sentence).
        expand: ``expand(b, i, k, label)`` -> (split width s, left label, right label) for nodes
            [i, k) of width >= 2 (each argument and result a 1-D tensor over the expanded lanes).
    Returns:
        n x B x (2T-1) x 3 long trees in pre-order (-1 padding).
    """
    B = lengths.shape[0]
    lanes, device = n * B, lengths.device
    lane = torch.arange(lanes, device=device)
    b = lane % B
    length = lengths[b]
    out = torch.full((lanes, 2 * T - 1, 3), -1, dtype=torch.long, device=device)
    stack = torch.zeros(lanes, T + 1, 3, dtype=torch.long, device=device)
    stack[:, 0] = torch.stack([torch.zeros_like(b), length, root(b, length)], -1)
    depth, row = torch.ones_like(b), torch.zeros_like(b)
    while bool((depth > 0).any()):
        active = depth > 0
        node = stack[lane, (depth - 1).clamp_min(0)]
        depth = depth - active.long()
        out[lane[active], row[active]] = node[active]
        row = row + active.long()
        i, k, label = node.unbind(-1)
        grow = active & (k - i >= 2)
        if not bool(grow.any()):
            continue
        m = lane[grow]
        i, k = i[grow], k[grow]
        split, left, right = expand(b[grow], i, k, label[grow])
        j = i + split
        d = depth[m]
        stack[m, d] = torch.stack([j, k, right], -1)
        stack[m, d + 1] = torch.stack([i, j, left], -1)
        depth[m] = d + 2
    return out.view(n, B, 2 * T - 1, 3)


def sampling_chart(grammar: DenseGrammar, terms: Tensor, lengths: Tensor, nodes: Tensor | None):
    """The log inside chart to draw from: (grammar, terms, nodes, chart, in log space). Scaled in the
    terms' dtype; in float64 where the float32 guard marks a sentence (lost mass decides the draws); in
    log space (``log_space``) where a float64 pass marks one too, and then the splits are weighed in log
    space as well."""
    dtypes = (terms.dtype,) if terms.dtype == torch.float64 else (terms.dtype, torch.float64)
    for dtype in dtypes:
        if dtype != terms.dtype:
            grammar = grammar.rows(None, dtype)
            terms, nodes = terms.to(dtype), None if nodes is None else nodes.to(dtype)
        guard = guard_for(lengths, dtype, float64=True)
        _, chart = exact.inside(grammar, exact.dense_rule_op(grammar), terms, lengths, None, nodes, guard)
        if not any_marked(guard):
            return grammar, terms, nodes, chart, False
    _, chart = cky(log_space.LogSpaceRules(grammar.rules, terms), grammar.root, lengths, None, nodes)
    return grammar, terms, nodes, chart, True


def sample_trees(
    grammar: DenseGrammar, terms: Tensor, lengths: Tensor, n: int, generator=None, nodes=None
) -> Tensor:
    """n exact samples of p(tree | sentence) under dense rules: n x B x (2T-1) x 3 long.

    ``nodes``: optional B x T x (T+1) x NT node log-scores (they enter through the inside chart)."""
    B, T, PT = terms.shape
    NT, S = grammar.num_nonterminals, grammar.num_symbols
    grammar_of = (lambda b: b) if grammar.grammar_batch > 1 else torch.zeros_like
    s = torch.arange(1, T, device=terms.device)  # candidate splits (left widths)
    with torch.no_grad():
        terms = mask_terms(terms, lengths)
        grammar, terms, nodes, chart, in_log_space = sampling_chart(grammar, terms, lengths, nodes)
        full = full_chart(chart, terms)

        def root_logits(b, length):
            return grammar.root[grammar_of(b)] + full[b, 0, length, :NT]

        def root(b, length):
            return gumbel_argmax(root_logits(b, length), generator)

        check_some_tree(root_logits(torch.arange(B, device=terms.device), lengths).logsumexp(-1), lengths)

        def expand(b, i, k, label):
            mid = (i.unsqueeze(-1) + s).clamp_max(T)  # M x (T-1)
            left = full[b.unsqueeze(-1), i.unsqueeze(-1), mid]  # M x (T-1) x S
            right = full[b.unsqueeze(-1), mid.clamp_max(T - 1), k.unsqueeze(-1)]
            rules = grammar.rules[grammar_of(b), label]  # M x S x S
            if in_log_space:  # p(split) by a log-sum-exp over the children's labels
                pair_sums = left.unsqueeze(-1) + rules.unsqueeze(1) + right.unsqueeze(-2)  # M x (T-1) x S x S
                log_mass = logsumexp(pair_sums.flatten(-2), -1)
            else:  # by log-einsum-exp: exp(left) @ exp(rules) . exp(right)
                ml, mr, mg = finite_max(left, -1), finite_max(right, -1), finite_max(rules.flatten(1), -1)
                inner = (left - ml.unsqueeze(-1)).exp() @ (rules - mg.view(-1, 1, 1)).exp()
                log_mass = (inner * (right - mr.unsqueeze(-1)).exp()).sum(-1).log() + ml + mr
            split_logits = torch.where(mid < k.unsqueeze(-1), log_mass, float("-inf"))
            pick = gumbel_argmax(split_logits, generator)  # index into s
            one = torch.arange(len(b), device=b.device)
            pair = left[one, pick].unsqueeze(-1) + rules + right[one, pick].unsqueeze(-2)
            flat = gumbel_argmax(pair.flatten(1), generator)
            lsym, rsym = flat // S, flat % S
            return pick + 1, _local(lsym, NT), _local(rsym, NT)

        return top_down(lengths, n, T, root, expand)


def _local(symbol: Tensor, num_nt: int) -> Tensor:
    """A symbol index (nonterminals first) as the label of its kind."""
    return torch.where(symbol >= num_nt, symbol - num_nt, symbol)
