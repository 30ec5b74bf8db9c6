"""The semirings the exact dynamic programs run in: one DP per structure, three questions.

* ``Log`` (sum-product): log Z.
* ``Max`` (max-product): the best structure's score (Viterbi).
* ``Entropy``: the entropy of the distribution over structures. Its values are pairs (a, H): a the log
  of a mass of partial structures, H the entropy of those partial structures given that mass, with

      (a1, H1) x (a2, H2) = (a1 + a2, H1 + H2)
      sum_i (a_i, H_i)    = (lse_i a_i, sum_i w_i (H_i - log w_i)),   w_i = exp(a_i - lse_i a_i)

  (the conditional-entropy forward of Fu et al. 2022, Alg. 3, written as a semiring). Every term is an
  entropy, non-negative and of the size of a log-probability, so H is never the difference of two
  large numbers, as log Z - E[score] is.

A value is a tensor: for ``Log`` and ``Max`` the log-scores themselves; for ``Entropy`` a tensor with a
leading axis of 2 (a, H). The DPs index every other axis from the end (``dim`` < 0), so one DP serves
all three. The transition of a chain or semi-Markov step is an object with ``__call__`` (log), ``max``
and ``entropy``, which ``step`` dispatches to: ``MatrixStep``, the guarded products of
``zoo.inference.logmatmul``.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from zoo.inference.logmatmul import Matrix, entropy_step, log_matmul
from zoo.inference.numerics import NEG, finite_or_zero, logsumexp

MAX_CHUNK = 2**18  # elements of one block in the max-product transition (1 MiB in float32: in cache)


class MatrixStep:
    """The transition by a matrix M (K x K or B x K x K) in each semiring: lse_i x[i] + log M[i, j] as a
    guarded product (``zoo.inference.logmatmul``), its max-product, and the product that carries
    conditional entropies. ``t`` (the position) is unused: one matrix serves every step.

    Args:
        log_matrix: log M (the transition log-potentials), or None with ``prob``.
        prob: M itself, non-negative (the rank-space DP's V^T U), or None with ``log_matrix``.
        second_order: twice differentiable without overflow (``logmatmul.threshold``), for a double
            backward (marginals that keep their graph).
    """

    def __init__(
        self, log_matrix: Tensor | None = None, prob: Tensor | None = None, second_order: bool = False
    ):
        self.matrix = Matrix.from_log(log_matrix) if prob is None else Matrix.from_prob(prob)
        self.second_order = second_order

    def __call__(self, t: int, x: Tensor, live: Tensor | None = None) -> Tensor:
        return log_matmul(x, self.matrix, live, self.second_order)

    def entropy(self, t: int, x: Tensor, H: Tensor, live: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The step and the conditional entropies it carries (``logmatmul.entropy_step``)."""
        return entropy_step(x, H, self.matrix, live)

    @functools.cached_property
    def _log_columns(self) -> Tensor:
        """log M^T (... x K x K): row j holds column j. A shared matrix is transposed once for every
        step (contiguous); a per-position one is a transposed view (a copy a step would cost more)."""
        M = self.matrix.log
        return M.T.contiguous() if M.dim() == 2 else M.transpose(-1, -2)

    def max(self, t: int, x: Tensor, live: Tensor | None = None) -> Tensor:
        """max_i x[i] + log M[i, j] (``max_plus``)."""
        return max_plus(x, self._log_columns)


def max_plus(x: Tensor, log_columns: Tensor) -> Tensor:
    """max_i x[..., i] + log M[..., i, j] for x B x K and log M^T (``log_columns``, ... x K x K, row j
    holding column j): B x K, in chunks of columns, each reduced along its contiguous last axis (the
    reduction across rows was 4-8x slower at K = 1024-2048)."""
    B, K = x.shape
    chunk = max(1, MAX_CHUNK // max(1, B * K))
    if chunk >= K:  # one block: no slice (a tensor operation a step at tagging sizes)
        return (x.unsqueeze(-2) + log_columns).amax(-1)
    out = [(x.unsqueeze(-2) + log_columns[..., j : j + chunk, :]).amax(-1) for j in range(0, K, chunk)]
    return torch.cat(out, -1) if len(out) > 1 else out[0]


class Log:
    """Sum-product over log-scores."""

    @staticmethod
    def lift(log_potential: Tensor) -> Tensor:
        """The value of a log-potential."""
        return log_potential

    @staticmethod
    def mul(value: Tensor, log_potential: Tensor) -> Tensor:
        """value x potential."""
        return value + log_potential

    @staticmethod
    def sum(value: Tensor, dim: int) -> Tensor:
        return logsumexp(value, dim)

    @staticmethod
    def step(step, t: int, value: Tensor, live: Tensor | None) -> Tensor:
        """The transition product at position ``t`` (``live``: the sequences longer than t)."""
        return step(t, value, live)

    @staticmethod
    def result(value: Tensor) -> Tensor:
        """What the DP answers: log Z."""
        return value

    @staticmethod
    def normalized(value: Tensor) -> tuple[Tensor, Tensor]:
        """(value shifted so its best entry over the last axis is 0, the shift): the shift is the
        detached max, NEG for a dead row (which stays -inf, not NaN)."""
        shift = value.detach().amax(-1).clamp_min(NEG)
        return value - shift.unsqueeze(-1), shift

    @staticmethod
    def shifted(answer: Tensor, shift: Tensor) -> Tensor:
        """The answer of values that were shifted by ``shift`` in all."""
        return answer + shift


class Max(Log):
    """Max-product over log-scores: the best score (Viterbi)."""

    @staticmethod
    def sum(value: Tensor, dim: int) -> Tensor:
        return value.amax(dim)

    @staticmethod
    def step(step, t: int, value: Tensor, live: Tensor | None) -> Tensor:
        return step.max(t, value, live)


class Entropy:
    """Pairs (log mass, conditional entropy), stacked on a leading axis of 2 (module docstring)."""

    @staticmethod
    def lift(log_potential: Tensor) -> Tensor:
        return torch.stack((log_potential, torch.zeros_like(log_potential)))

    @staticmethod
    def mul(value: Tensor, log_potential: Tensor) -> Tensor:
        mass = value[0] + log_potential
        return torch.stack((mass, value[1].expand_as(mass)))

    @staticmethod
    def sum(value: Tensor, dim: int) -> Tensor:
        mass = logsumexp(value[0], dim)
        log_w = value[0] - finite_or_zero(mass).unsqueeze(dim)  # where all is -inf, w = 0
        entropy = (log_w.exp() * (value[1] - finite_or_zero(log_w))).sum(dim)
        return torch.stack((mass, entropy))

    @staticmethod
    def step(step, t: int, value: Tensor, live: Tensor | None) -> Tensor:
        return torch.stack(step.entropy(t, value[0], value[1], live))

    @staticmethod
    def result(value: Tensor) -> Tensor:
        """What the DP answers: the entropy."""
        return value[1]

    @staticmethod
    def normalized(value: Tensor) -> tuple[Tensor, Tensor]:
        mass, shift = Log.normalized(value[0])
        return torch.stack((mass, value[1])), shift

    @staticmethod
    def shifted(answer: Tensor, shift: Tensor) -> Tensor:
        return answer  # a shift of the masses leaves every weight, hence the entropy, as it is

    @staticmethod
    def carry(value: Tensor, entropy: Tensor) -> Tensor:
        """value with ``entropy`` added to its entropies (the randomized estimators' log weights)."""
        return torch.stack((value[0], value[1] + finite_or_zero(entropy)))  # -inf: a weight-0 state


Semiring = type[Log] | type[Max] | type[Entropy]
