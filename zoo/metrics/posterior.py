"""How much a latent-state posterior uses its states, as a DDP-safe torchmetrics ``Metric``: the
collapse diagnostics of a structured VAE's q(z | y) (docs/vae.md).

``update(marginals, best, lengths)`` takes q's marginals (B x T x N), its MAP state sequences (B x T)
and the lengths (B); ``compute()`` returns

* ``distinct_map_states``: the mean number of distinct states in a sequence's MAP labelling (1 when
  every token of a sentence gets one state);
* ``token_state_information``: the mean over tokens of KL(q(z_t | y) || q_bar), q_bar the mean of the
  tokens' marginals, = mean_t sum_i m_t(i) log m_t(i) - sum_i q_bar(i) log q_bar(i): the mutual
  information between a uniformly drawn token's state and the token (its sentence and its position;
  nats, 0 when q is the same at every token, at most log N). A posterior that reads only the
  position (the first token in state 1, the second in state 2, ...) scores high here;
* ``sentence_state_information``: the same with q_bar the mean marginal at the token's position,
  I(z_t; y | t): what a token's state tells about its sentence beyond its position (nats, 0 when q
  ignores y, at most ``token_state_information``), the per-token estimate of the mutual information
  between z and y. Positions from ``max_positions - 1`` on share one mean. A plug-in estimate: where
  few sentences reach a position it is biased low (one sentence there contributes 0);
* ``states_used``: the states with at least 1 / (10 N) of q_bar.

Sums of these (and of the marginals) are the states, so they add up across processes.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric

__all__ = ["PosteriorUsage"]

USAGE_METRICS = (
    "distinct_map_states",
    "token_state_information",
    "sentence_state_information",
    "states_used",
)


def _xlogx(p: Tensor) -> Tensor:
    return torch.where(p > 0, p * p.clamp_min(1e-300).log(), 0.0)


class PosteriorUsage(Metric):
    """The state-usage diagnostics of a posterior over state sequences (module docstring).

    Args:
        num_states: N.
        max_positions: the positions with their own mean marginal (``sentence_state_information``).
    """

    full_state_update = False
    higher_is_better = None
    is_differentiable = False

    def __init__(self, num_states: int, max_positions: int = 256, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("num_states", num_states), ("max_positions", max_positions)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.num_states, self.max_positions = num_states, max_positions
        self.add_state(
            "marginal_sum", torch.zeros(max_positions, num_states, dtype=torch.float64), dist_reduce_fx="sum"
        )
        self.add_state(
            "position_tokens", torch.zeros(max_positions, dtype=torch.float64), dist_reduce_fx="sum"
        )
        for name in ("negative_entropy", "distinct", "sequences"):
            self.add_state(name, torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, marginals: Tensor, best: Tensor, lengths: Tensor) -> None:
        """Add a batch: marginals B x T x N, best B x T (the MAP states), lengths B."""
        B, T, N = marginals.shape if marginals.dim() == 3 else (-1, -1, -1)
        if N != self.num_states or best.shape != (B, T) or lengths.shape != (B,):
            raise ValueError(
                f"expected marginals B x T x {self.num_states}, best B x T and lengths B, got "
                f"{tuple(marginals.shape)}, {tuple(best.shape)} and {tuple(lengths.shape)}"
            )
        lengths = lengths.to(marginals.device)
        within = torch.arange(T, device=marginals.device) < lengths.unsqueeze(-1)
        rows = marginals[within].to(torch.float64)  # tokens x N
        positions = torch.arange(T, device=marginals.device).clamp_max(self.max_positions - 1)
        positions = positions.expand(B, T)[within]
        self.marginal_sum.index_add_(0, positions, rows)
        self.position_tokens.index_add_(0, positions, torch.ones_like(positions, dtype=torch.float64))
        self.negative_entropy += _xlogx(rows).sum()
        for row, n in zip(best.cpu(), lengths.tolist()):
            self.distinct += len(set(row[:n].tolist()))
        self.sequences += B

    def compute(self) -> dict[str, Tensor]:
        if float(self.sequences) == 0:
            return dict.fromkeys(USAGE_METRICS, torch.tensor(float("nan")))
        tokens = self.position_tokens.sum()
        mean = self.marginal_sum.sum(0) / tokens
        at_position = self.marginal_sum / self.position_tokens.clamp_min(1).unsqueeze(-1)  # P x N
        negative_entropy = self.negative_entropy / tokens
        values = (
            self.distinct / self.sequences,
            negative_entropy - _xlogx(mean).sum(),
            negative_entropy - (self.position_tokens * _xlogx(at_position).sum(-1)).sum() / tokens,
            (mean >= 0.1 / self.num_states).sum().to(torch.float64),
        )
        return dict(zip(USAGE_METRICS, values))
