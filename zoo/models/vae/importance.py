"""Importance-sampled log-likelihood with a chain distribution as the proposal.

    log p(y) ~= log (1/S) sum_s p(z_s, y) / q(z_s | y),    z_s ~ q(z | y) exact samples

exp of the estimate is unbiased for p(y) (so the estimate is a lower bound on average, and tighter
than the ELBO); it equals log p(y) for every draw when q is the true posterior. The convention of the
VAE literature (Kim et al. 2019; Fu et al. 2020 use S = 100).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from zoo.inference import LinearChain


def importance_sampled_log_likelihood(
    proposal: LinearChain,
    log_joint: Callable[[Tensor], Tensor],
    num_samples: int,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The estimate of log p(y) for each sequence: (B,).

    Args:
        proposal: q(z | y) over B sequences, computed exactly (its ``sample`` and ``log_prob``).
        log_joint: S x B x T states (long, -1 past each length) -> S x B log p(z, y).
        num_samples: S.
        generator: seeds the proposal's samples.
    """
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    samples = proposal.sample(num_samples, generator)  # S x B x T
    log_weights = log_joint(samples) - proposal.log_prob(samples)  # S x B
    return torch.logsumexp(log_weights, 0) - math.log(num_samples)
