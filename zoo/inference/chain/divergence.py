"""Cross-entropy and KL divergence between two chains over the same sequences (torch-struct's and
supar's ``cross_entropy`` / ``kl``: knowledge distillation of a CRF, a posterior against a prior).

H(p, q) = -E_p[log q(z)] = log Z_q - E_p[score_q(z)], and the expectation is an inner product: the
expected counts of p's states and transitions (the gradient of p's log Z with respect to zero probes
shaped as q's unary, transition and init) with q's log-potentials. Both run on the dense forms with the
exact engine, whatever the chains' containers and backends (a randomized chain's exact distribution:
its ``log_prob`` divides by the exact log Z too). KL(p || q) = H(p, q) - H(p).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain.factors import DenseChain
from zoo.inference.divergence import divergences, expected_total
from zoo.inference.numerics import needs_grad


def expected_score(p, q) -> Tensor:
    """E_p[score_q(z)]: (B,), score_q the sum of q's log-potentials along z; -inf where p gives mass to
    a potential of -inf. p's expected counts are per sequence, so its transition probe is B x (T-1) x N
    x N even where q's transition is shared (the memory of ``pairwise_marginals``)."""
    ours, theirs = p.factors.dense(), q.factors.dense()
    potentials = (theirs.unary, theirs.per_position(), theirs.init)  # B x T x N, B x (T-1) x N x N, B x N
    with torch.enable_grad():
        probes = [torch.zeros(x.shape, dtype=x.dtype, device=x.device).requires_grad_() for x in potentials]
        probed = DenseChain(ours.unary + probes[0], ours.per_position() + probes[1], ours.init + probes[2])
        log_z = type(p)(probed, p.lengths, backend="exact").log_partition
        counts = torch.autograd.grad(log_z.sum(), probes, create_graph=needs_grad(*p._potentials()))
    return expected_total(counts, potentials)


def _shape(chain) -> tuple[int, ...]:
    f = chain.factors
    return f.batch, f.max_length, f.num_states


# H(p, q) and KL(p || q) of two LinearChains of the same B x T x N and lengths: (B,) each
cross_entropy, kl = divergences(expected_score, _shape, "B x T x N")
