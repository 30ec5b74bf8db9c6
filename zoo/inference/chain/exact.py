"""Exact linear-chain dynamic programs on dense log-potentials.

* ``fast_log_partition``: the scaled forward (each step one guarded BLAS product; see ``scaled``)
  with the hand-written backward, for a shared N x N transition (HMM) or per-position ones (CRF);
  without a gradient, long chains with few states go in chunks (``chunked``).
* ``log_forward``: the same forward with plain autograd; handles per-position B x (T-1) x N x N
  potentials without allocating more than one position's block at a time, and is twice
  differentiable.
* ``forward``: the forward in a semiring (``zoo.inference.semiring``): ``Entropy`` for the entropy
  (Fu et al. 2022, Alg. 3: each state's conditional entropy of the prefix, never a difference of two
  large numbers), ``Log`` for log Z, ``Max`` for the best score (chains decode with
  ``viterbi``).

Shapes: B batch, T positions, N states. Every function takes ``lengths`` (B,), 1 <= length <= T.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain import chunked, scaled
from zoo.inference.chain.factors import DenseChain
from zoo.inference.chain.scaled import check_alive
from zoo.inference.numerics import needs_grad
from zoo.inference.semiring import Log, MatrixStep, Semiring


def log_space(chain: DenseChain) -> scaled.ScaledChain:
    """The dense chain as a scaled forward: left = log Psi (N x N, or B x (T-1) x N x N), the initial
    log-potentials kept apart (folded where a forward needs them in u)."""
    return scaled.ScaledChain(chain.unary, chain.transition, left_is_log=True, init=chain.init)


def fast_log_partition(chain: DenseChain, lengths: Tensor) -> Tensor:
    """log Z (B,) with the hand-written backward (shared or per position; twice differentiable)."""
    if (
        chain.shared
        and not needs_grad(chain.unary, chain.transition, chain.init)
        and chunked.pays(chain.batch, chain.max_length, chain.num_states)
    ):
        log_z = chunked.log_partition(chain, lengths)
        if log_z is not None:  # else a chunk has no path from some state: the plain forward
            return log_z
    return scaled.log_partition(log_space(chain), lengths)


def log_forward(chain: DenseChain, lengths: Tensor, second_order: bool = False) -> tuple[Tensor, Tensor]:
    """The forward with plain autograd (twice differentiable, without overflow with ``second_order``;
    per-position transitions too).

    Returns:
        log Z (B,) and the log forward variables alpha (B x T x N), alpha_t(j) = log of the total
        score of prefixes ending in state j at position t, up to a constant per position (each
        position is shifted so its best state is 0; junk past each length).
    """
    return scaled.forward(log_space(chain), lengths, second_order)


class ChainStep:
    """The transition into position t (from t - 1) of a dense chain, shared or per position, in each
    semiring (``MatrixStep``'s guarded products)."""

    def __init__(self, chain: DenseChain):
        self.shared = MatrixStep(chain.transition) if chain.shared else None
        self.blocks = None if chain.shared else chain.transition.unbind(1)

    def at(self, t: int) -> MatrixStep:
        return self.shared if self.shared is not None else MatrixStep(self.blocks[t - 1])

    def __call__(self, t: int, x: Tensor, live: Tensor | None = None) -> Tensor:
        return self.at(t)(t, x, live)

    def max(self, t: int, x: Tensor, live: Tensor | None = None) -> Tensor:
        return self.at(t).max(t, x, live)

    def entropy(self, t: int, x: Tensor, H: Tensor, live: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self.at(t).entropy(t, x, H, live)


def forward(
    chain: DenseChain, lengths: Tensor, semiring: Semiring = Log, log_weights: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The forward in a semiring, each position's values shifted so that its best state is at 0.

    Args:
        chain: the dense chain.
        lengths: (B,).
        semiring: ``Log``, ``Max`` or ``Entropy`` (``zoo.inference.semiring``).
        log_weights: ``Entropy`` only: B x T x N importance log-weights already folded into the unary
            (the randomized entropy of Fu et al. 2022, Alg. 3), added to the carried entropies too, so
            that they stay out of the score: the result is log Z_hat minus the expected score.
    Returns:
        the semiring's answer (B,): log Z, the best score or the entropy; and the shifted forward
        values ... x B x T x N (junk past each length). A sequence with no surviving path raises.
    """
    u = chain.folded_unary().unbind(1)
    B, T, _ = chain.unary.shape
    weights = log_weights.unbind(1) if log_weights is not None else None
    step = ChainStep(chain)
    x = semiring.lift(u[0])
    if weights is not None:
        x = semiring.carry(x, weights[0])
    x, shift = semiring.normalized(x)
    check_alive(shift, lengths > 0)
    values, shifts = [x], [shift]
    for t in range(1, T):
        live = lengths > t
        x = semiring.mul(semiring.step(step, t, x, live), u[t])
        if weights is not None:
            x = semiring.carry(x, weights[t])
        x, shift = semiring.normalized(x)
        check_alive(shift, live)
        values.append(x)
        shifts.append(shift)
    values = torch.stack(values, -2)
    valid = torch.arange(T, device=lengths.device) < lengths.unsqueeze(-1)
    inside = torch.where(valid, torch.stack(shifts, 1), 0).sum(-1)
    last = values[..., torch.arange(B, device=lengths.device), lengths - 1, :]
    return semiring.shifted(semiring.result(semiring.sum(last, -1)), inside), values
