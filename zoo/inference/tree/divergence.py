"""Cross-entropy and KL divergence between two tree distributions over the same sentences (distilling one
parser or PCFG into another, a posterior against a prior).

H(p, q) = -E_p[log q(tree)] = log Z_q - E_p[score_q(tree)], the expectation an inner product of p's
expected counts (the gradient of p's exact log Z, on its dense grammar, with respect to zero probes shaped
as q's potentials) with q's log-potentials: the root's label, each rule A -> b c per sentence (B x NT x S
x S: the memory of a batched dense grammar), each leaf's preterminal and, where q has node scores, each
labelled node. Both grammars are materialized (``GrammarFactors.dense``, bounded by ``MAX_DENSE_RULES``);
a randomized distribution enters as its exact one. KL(p || q) = H(p, q) - H(p).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.divergence import divergences, expected_total
from zoo.inference.numerics import needs_grad
from zoo.inference.tree.factors import DenseGrammar


def expected_score(p, q) -> Tensor:
    """E_p[score_q(tree)]: (B,); -inf where p gives mass to a potential of -inf."""
    ours, theirs = p.grammar.dense(), q.grammar.dense()
    B = p.terms.shape[0]
    potentials = [theirs.root.expand(B, -1), theirs.rules.expand(B, -1, -1, -1), q.terms]
    if q.node_scores is not None:
        potentials.append(q.node_scores)
    with torch.enable_grad():
        probes = [torch.zeros(x.shape, dtype=x.dtype, device=x.device).requires_grad_() for x in potentials]
        nodes = p.node_scores
        if q.node_scores is not None:
            nodes = probes[3] if nodes is None else nodes + probes[3]
        grammar = DenseGrammar(ours.root + probes[0], ours.rules + probes[1])
        probed = type(p)(grammar, p.terms + probes[2], p.lengths, backend="exact", node_scores=nodes)
        counts = torch.autograd.grad(probed.log_partition.sum(), probes,
                                     create_graph=needs_grad(*p._potentials()))  # fmt: skip
    return expected_total(counts, potentials)


def _exactly(dist):
    """``dist``, or for the randomized backend the exact distribution of its dense grammar."""
    if dist.backend is not Backend.RANDOMIZED:
        return dist
    return type(dist)(dist.grammar.dense(), dist.terms, dist.lengths, backend="exact",
                      node_scores=dist.node_scores)  # fmt: skip


def _shape(tree) -> tuple[int, ...]:
    B, T, PT = tree.terms.shape
    return B, T, tree.grammar.num_nonterminals, PT


# H(p, q) and KL(p || q) of two TreeDistributions of the same B x T x NT x PT and lengths: (B,) each
cross_entropy, kl = divergences(expected_score, _shape, "B x T x NT x PT", _exactly)
