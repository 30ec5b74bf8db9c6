"""How much a latent-state posterior uses its states, as a DDP-safe torchmetrics ``Metric``: the
collapse diagnostics of a structured VAE's q(z | y) (docs/vae.md).

``update(marginals, best, lengths)`` takes q's marginals (B x T x N), its MAP state sequences (B x T)
and the lengths (B); ``compute()`` returns

* ``distinct_map_states``: the mean number of distinct states in a sequence's MAP labelling (1 when
  every token of a sentence gets one state);
* ``token_state_information``: the mean over tokens of KL(q(z_t | y) || q_bar), q_bar the mean of the
  tokens' marginals, = mean_t sum_i m_t(i) log m_t(i) - sum_i q_bar(i) log q_bar(i): the mutual
  information between a uniformly drawn token's state and its sentence (nats; 0 when q ignores y, at
  most log N);
* ``states_used``: the states with at least 1 / (10 N) of q_bar.

Sums of these (and of the marginals) are the states, so they add up across processes.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric

__all__ = ["PosteriorUsage"]


def _xlogx(p: Tensor) -> Tensor:
    return torch.where(p > 0, p * p.clamp_min(1e-300).log(), 0.0)


class PosteriorUsage(Metric):
    """The state-usage diagnostics of a posterior over state sequences (module docstring).

    Args:
        num_states: N.
    """

    full_state_update = False
    higher_is_better = None
    is_differentiable = False

    def __init__(self, num_states: int, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(num_states, int) or isinstance(num_states, bool) or num_states < 1:
            raise ValueError(f"num_states must be an int >= 1, got {num_states!r}")
        self.num_states = num_states
        self.add_state("marginal_sum", torch.zeros(num_states, dtype=torch.float64), dist_reduce_fx="sum")
        for name in ("negative_entropy", "tokens", "distinct", "sequences"):
            self.add_state(name, torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, marginals: Tensor, best: Tensor, lengths: Tensor) -> None:
        """Add a batch: marginals B x T x N, best B x T (the MAP states), lengths B."""
        B, T, N = marginals.shape
        if N != self.num_states or best.shape != (B, T) or lengths.shape != (B,):
            raise ValueError(
                f"expected marginals B x T x {self.num_states}, best B x T and lengths B, got "
                f"{tuple(marginals.shape)}, {tuple(best.shape)} and {tuple(lengths.shape)}"
            )
        lengths = lengths.to(marginals.device)
        within = torch.arange(T, device=marginals.device) < lengths.unsqueeze(-1)
        tokens = marginals[within].to(torch.float64)  # tokens x N
        self.marginal_sum += tokens.sum(0)
        self.negative_entropy += _xlogx(tokens).sum()
        self.tokens += len(tokens)
        for row, n in zip(best.cpu(), lengths.tolist()):
            self.distinct += len(set(row[:n].tolist()))
        self.sequences += B

    def compute(self) -> dict[str, Tensor]:
        if float(self.sequences) == 0:
            nan = torch.tensor(float("nan"))
            return {"distinct_map_states": nan, "token_state_information": nan, "states_used": nan}
        mean = self.marginal_sum / self.tokens
        return {
            "distinct_map_states": self.distinct / self.sequences,
            "token_state_information": self.negative_entropy / self.tokens - _xlogx(mean).sum(),
            "states_used": (mean >= 0.1 / self.num_states).sum().to(torch.float64),
        }
