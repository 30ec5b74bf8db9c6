"""Segment-duration distributions p(d | component) over d = 1..D for the semi-Markov families.

* ``categorical``: a free softmax over the D durations (D numbers a component);
* ``poisson``: d - 1 ~ Poisson(lambda), truncated to 1..D (one number: log lambda);
* ``negative-binomial``: d - 1 ~ NB(r, p), truncated to 1..D (two numbers: r = softplus(a), p =
  sigmoid(b)); its variance exceeds its mean, so one family covers peaked and spread-out durations.

The parametric ones tie every duration of a component to one or two numbers: a component whose mean
is long gives short segments almost no mass, which a free softmax learns only from enough data (the
over-segmentation of short training budgets), and D may grow without adding parameters.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

DURATIONS = {"categorical": None, "poisson": 1, "negative-binomial": 2}  # outputs per component (None: D)


def duration_outputs(kind: str, max_duration: int) -> int:
    """How many numbers a component's head produces for ``kind``; ValueError naming the kinds."""
    if kind not in DURATIONS:
        raise ValueError(f"duration must be one of {sorted(DURATIONS)}, got {kind!r}")
    return DURATIONS[kind] or max_duration


def duration_log_probs(kind: str, outputs: Tensor, max_duration: int) -> Tensor:
    """log p(d | component) for d = 1..D: C x D, from the head's outputs (C x ``duration_outputs``)."""
    if kind == "categorical":
        return torch.log_softmax(outputs, -1)
    k = torch.arange(max_duration, dtype=outputs.dtype, device=outputs.device)  # d - 1
    if kind == "poisson":
        logits = k * outputs[:, :1] - torch.lgamma(k + 1)
    else:
        r = F.softplus(outputs[:, :1]) + 1e-3
        logits = torch.lgamma(k + r) - torch.lgamma(k + 1) + k * F.logsigmoid(outputs[:, 1:2])
    return torch.log_softmax(logits, -1)  # truncated to 1..D and renormalized
