"""The entropy of a dense chain: an expectation-semiring forward in scaled probability space.

Next to the scaled forward a_t = (a_{t-1} @ P) * e_t / s_t (``scaled``; P = exp(log Psi - c) with the
column shifts c folded into the unary, e_t = exp(v_t - m_t), s_t the sum that normalizes a_t), it
carries r_t(j) = E[1{z_t = j} (score of z_1..z_t - log K_t)] with K_t the prefix normalizer, so
that at a sequence's last position sum_j r(j) = E[score] - log Z = -H:

    r_t = (r_{t-1} @ P + a_{t-1} @ (P o log P)) * e_t / s_t + a_t * (w_t - m_t - log s_t),

w_t the scored unary (v_t with -inf entries as 0: forbidden states and transitions contribute
0 log 0 = 0). Every term is of the size of a log-probability, so H is never the difference of two
large numbers. A step is one B x 2 x N by N x N product and one B x N by N x N (per position: batched
products with that position's block); H's gradient is ordinary autograd of this forward, with
nothing B x N x N and nothing per sequence N x N.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain.factors import DenseChain
from zoo.inference.chain.scaled import check_mass


def finite(x: Tensor) -> Tensor:
    """x with -inf replaced by 0 (a forbidden entry contributes nothing to an expectation)."""
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


def _transition(log_psi: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(P, P o log P, c) for ... x N x N log-potentials: P = exp(log Psi - c), c (... x N) the
    detached column max (0 for an all -inf column)."""
    c = log_psi.detach().amax(-2, keepdim=True)
    c = torch.where(torch.isfinite(c), c, torch.zeros_like(c))
    log_p = log_psi - c
    p = log_p.exp()
    return p, p * finite(log_p), c.squeeze(-2)


def _step(a: Tensor, r: Tensor, v: Tensor, w: Tensor, live: Tensor) -> tuple[Tensor, Tensor]:
    """Multiply in exp(v) (B x N log-factors, scored as w), normalize; ``live``: inside a length."""
    m = v.detach().amax(-1, keepdim=True).clamp_min(-1e30)
    e = (v - m).exp()
    a = a * e
    s = a.sum(-1, keepdim=True)
    check_mass(s.squeeze(-1), live)
    s = s.clamp_min(torch.finfo(s.dtype).tiny)
    a = a / s
    return a, r * e / s + a * (w - m - s.log())


def dense_entropy(chain: DenseChain, lengths: Tensor, log_weights: Tensor | None = None) -> Tensor:
    """Entropy of a dense chain (B,), differentiable w.r.t. unary, transition and init.

    With ``log_weights`` (B x T x N, already folded into ``chain.unary``) it returns the randomized
    entropy of Fu et al. 2022 (Alg. 3): unrolled, Alg. 3's recursion H_t(j) = sum_i p(i|j) [H(i) -
    log p(i|j)] over the importance-weighted forward equals log Z_hat minus the expected score under
    the weighted chain, with the weights excluded from the score.
    """
    v = chain.folded_unary()
    w = finite(v if log_weights is None else v - log_weights)
    B, T, N = v.shape
    if chain.shared:
        shared = _transition(chain.transition)
    else:
        blocks = chain.transition.unbind(1)
    a, r = _step(v.new_ones(B, N), v.new_zeros(B, N), v[:, 0], w[:, 0], lengths > 0)
    entropy = -r.sum(-1)
    for t in range(1, T):
        p, p_log_p, c = shared if chain.shared else _transition(blocks[t - 1])
        pair = torch.stack([a, r], -2) @ p  # B x 2 x N: a @ P, r @ P
        cross = (a.unsqueeze(-2) @ p_log_p).squeeze(-2)
        a, r = _step(pair[:, 0], pair[:, 1] + cross, v[:, t] + c, w[:, t] + c, lengths > t)
        entropy = torch.where(lengths - 1 == t, -r.sum(-1), entropy)
    return entropy
