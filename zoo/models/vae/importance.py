"""Importance-sampled log-likelihood and ELBO with a chain distribution as the proposal.

    log p(y) ~= log (1/S) sum_s w_s,    ELBO ~= (1/S) sum_s log w_s,    w_s = p(z_s, y) / q(z_s | y)

for exact samples z_s ~ q(z | y). exp of the first is unbiased for p(y) (so it is a lower bound on
average, and tighter than the ELBO); it equals log p(y) for every draw when q is the true posterior.
The second is unbiased for the ELBO, E_q[log p(z, y)] + H(q), and never above the first (Jensen, for
every draw). The convention of the VAE literature (Kim et al. 2019; Fu et al. 2020 use S = 100).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from zoo.inference import LinearChain


class ImportanceEstimates(NamedTuple):
    """Both estimates from the same S samples, (B,) each."""

    log_likelihood: Tensor
    elbo: Tensor


def importance_sampled_estimates(
    proposal: LinearChain,
    log_joint: Callable[[Tensor], Tensor],
    num_samples: int,
    generator: torch.Generator | None = None,
) -> ImportanceEstimates:
    """The estimates of log p(y) and of the ELBO for each sequence (module docstring).

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
    return ImportanceEstimates(torch.logsumexp(log_weights, 0) - math.log(num_samples), log_weights.mean(0))


def importance_sampled_log_likelihood(
    proposal: LinearChain,
    log_joint: Callable[[Tensor], Tensor],
    num_samples: int,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The estimate of log p(y) alone: (B,) (arguments as ``importance_sampled_estimates``)."""
    return importance_sampled_estimates(proposal, log_joint, num_samples, generator).log_likelihood
