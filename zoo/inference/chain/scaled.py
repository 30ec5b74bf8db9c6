"""The scaled forward recursion in probability space, shared by the low-rank and rank-space DPs.

Each step produces an unnormalized non-negative vector; it is divided by its sum and the log of the
sum is accumulated, so nothing under- or overflows and each step stays a plain matrix product.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def scaled_forward(
    first: Tensor,
    step: Callable[[int, Tensor], Tensor],
    offsets: Tensor,
    lengths: Tensor,
    final: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """log Z of a chain given as "vector times operator" steps.

    Args:
        first: B x K non-negative forward vector at position 1 (before its offset).
        step: ``step(t, a)`` maps the normalized B x K vector at position t (0-based) to the
            unnormalized vector at position t + 1.
        offsets: B x T log-factors pulled out of each position (e.g. a per-step max).
        lengths: (B,) sequence lengths.
        final: optional K vector of non-negative end weights (the sum otherwise).
    Returns:
        log Z (B,) and the log forward variables (B x T x K; junk past each length).
    """
    B, T = offsets.shape
    tiny = torch.finfo(first.dtype).tiny
    log_z = first.new_zeros(B)
    running = first.new_zeros(B)
    alphas = []
    a = first
    for t in range(T):
        if t > 0:
            a = step(t - 1, a)
        s = a.sum(-1, keepdim=True)
        live = lengths > t
        if (s.squeeze(-1)[live] <= 0).any():
            raise ValueError("the chain has zero probability (no path survives a -inf mask)")
        a = a / s.clamp_min(tiny)
        running = running + s.squeeze(-1).clamp_min(tiny).log() + offsets[:, t]
        log_a = torch.where(a > 0, a.clamp_min(tiny).log(), float("-inf"))
        alphas.append(log_a + running.unsqueeze(-1))
        log_z = log_z + torch.where(live, s.squeeze(-1).clamp_min(tiny).log() + offsets[:, t], 0)
        if final is not None:
            at_end = lengths - 1 == t
            log_z = log_z + torch.where(at_end, (a @ final).clamp_min(tiny).log(), 0)
    return log_z, torch.stack(alphas, 1)


def pull_max(log_values: Tensor) -> tuple[Tensor, Tensor]:
    """exp(x - max) along the last dim and the (detached) max: x = log(result) + max."""
    m = log_values.detach().amax(-1, keepdim=True).clamp_min(-1e30)
    return (log_values - m).exp(), m.squeeze(-1)
