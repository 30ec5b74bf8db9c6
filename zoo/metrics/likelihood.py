"""Negative log-likelihood per event and perplexity as DDP-safe torchmetrics ``Metric``s.

Both sum -log p over sequences and the events they are normalized by (tokens with the end-of-sentence
token for text, frames for music), so under DDP the states add up across processes before the
division: the result equals the single-process value on the same data, whatever the split.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


class NegativeLogLikelihood(Metric):
    """sum(-log p) / sum(events): nats per event (per token for text, per frame for music)."""

    full_state_update = False
    higher_is_better = False
    is_differentiable = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("events", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, log_likelihood: Tensor, events: Tensor) -> None:
        """log_likelihood: (B,) log p of each sequence; events: (B,) its number of events."""
        if log_likelihood.shape != events.shape or log_likelihood.dim() != 1:
            raise ValueError(
                "log_likelihood and events must both have shape (B,), got "
                f"{tuple(log_likelihood.shape)} and {tuple(events.shape)}"
            )
        if (events <= 0).any():
            raise ValueError(f"every sequence needs at least one event, got {events.tolist()}")
        self.total += -log_likelihood.detach().double().sum()
        self.events += events.double().sum()

    def compute(self) -> Tensor:
        return self.total / self.events


class Perplexity(NegativeLogLikelihood):
    """exp(sum(-log p) / sum(tokens)): the language-modelling perplexity (the papers' conventions:
    the end-of-sentence token counted as a token; for PCFGs one end token per sentence)."""

    def compute(self) -> Tensor:
        return super().compute().exp()
