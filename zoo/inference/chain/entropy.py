"""The entropy of a dense chain: a forward that carries each state's conditional prefix entropy.

Next to the log forward variables alpha_t (kept shifted so each position's best state is 0, as in
``scaled``), it carries H_t(j), the entropy of z_1..z_{t-1} given z_t = j:

    w_t(i, j) = exp(alpha_{t-1}(i) + log Psi_t(i, j)) / sum_i' (same)      (p(z_{t-1} = i | z_t = j))
    H_t(j)    = sum_i w_t(i, j) (H_{t-1}(i) - log w_t(i, j)),   H_1 = 0
    H         = sum_j p(z_L = j) (H_L(j) - log p(z_L = j))

(Fu et al. 2022, Alg. 3). Every term is an entropy, non-negative and of the size of a
log-probability, so H is never the difference of two large numbers. With v = exp(alpha_{t-1}),
P = exp(log Psi - c) and h = v @ P, a step is

    H_t = ((v o (H_{t-1} - alpha_{t-1})) @ P - v @ (P o log P)) / h + log h,

one B x 2 x N by N x N product and one B x N by N x N (``logmatmul.entropy_step``); the columns that
float underflow could have touched are recomputed exactly from the softmax weights. The entropy's
gradient is ordinary autograd of this forward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain.factors import DenseChain
from zoo.inference.chain.scaled import check_alive, normalized
from zoo.inference.logmatmul import Matrix, entropy_step
from zoo.inference.numerics import finite_or_zero


def dense_entropy(chain: DenseChain, lengths: Tensor, log_weights: Tensor | None = None) -> Tensor:
    """Entropy of a dense chain (B,), differentiable w.r.t. unary, transition and init.

    With ``log_weights`` (B x T x N, already folded into ``chain.unary``) it returns the randomized
    entropy of Fu et al. 2022 (Alg. 3) with the importance weights kept out of the score: the
    weighted chain's entropy plus the expected sum of the log weights, i.e. log Z_hat minus the
    expected score (without the weights) under the weighted chain.
    """
    u = chain.folded_unary().unbind(1)
    B, T, N = chain.unary.shape
    extra = log_weights.unbind(1) if log_weights is not None else None
    shared = Matrix.from_log(chain.transition) if chain.shared else None
    blocks = None if chain.shared else chain.transition.unbind(1)
    x, n = normalized(u[0])
    check_alive(n, lengths > 0)
    H = u[0].new_zeros(B, N) if extra is None else extra[0].expand(B, N)
    entropy = _final(x, H)
    for t in range(1, T):
        live = lengths > t
        transition = shared if shared is not None else Matrix.from_log(blocks[t - 1])
        log_h, H = entropy_step(x, H, transition, live)
        x, n = normalized(log_h + u[t])
        check_alive(n, live)
        if extra is not None:
            H = H + extra[t]
        entropy = torch.where(lengths - 1 == t, _final(x, H), entropy)
    return entropy


def _final(x: Tensor, H: Tensor) -> Tensor:
    """sum_j p(j) (H(j) - log p(j)) with p = softmax(x): (B,)."""
    log_p = x - x.logsumexp(-1, keepdim=True)
    return (log_p.exp() * (H - finite_or_zero(log_p))).sum(-1)
