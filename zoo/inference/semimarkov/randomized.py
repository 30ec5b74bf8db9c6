"""Randomized semi-Markov forward (Fu, Cunningham, Lapata 2022) over the states of each segment.

At every boundary t < L (a segment ending at frame t), the proposal q_t picks the top-K1 states
(summed exactly) and K2 states drawn i.i.d. from q_t's renormalized tail with weights 1 / (K2 q_tail)
(Eq. 4-8); only those pass mass on through the transition, so the step costs O(K N) (K rows of the
transition) instead of O(N^2). The duration window and the last segment are summed exactly. Each step
is an unbiased estimate of a linear map given the past, and the draws do not depend on the forward
values, so exp(log Z_hat) is unbiased and log Z_hat is below log Z on average (Jensen). K1 = N is
exact; K2 = 0 is the top-K baseline. The index sets come from ``zoo.inference.rdp`` (the proposals of
a sequence of positions, ``select_states``), drawn once per engine under ``no_grad``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.engines import register_engine
from zoo.inference.kinds import ESTIMATE, FALLBACK
from zoo.inference.logmatmul import Matrix, entropy_step, log_matmul
from zoo.inference.numerics import finite_or_zero
from zoo.inference.rdp import KeptStates, SequenceLifecycle, check_nonzero_estimate
from zoo.inference.semimarkov.engine import SemiMarkovEngine
from zoo.inference.semimarkov.exact import ExactEngine, dense_problem
from zoo.inference.semimarkov.factors import DenseSemiMarkov, LowRankSemiMarkov, cumulative
from zoo.inference.semimarkov.forward import Problem, forward
from zoo.inference.semiring import Entropy


class RandomizedStep:
    """alpha = log sum_{k kept} w_k exp(beta[i_k]) trans(i_k, :), from K gathered rows (a guarded
    product with one K x N matrix per sequence)."""

    def __init__(self, rows, kept: KeptStates, second_order: bool = False):
        self.rows, self.kept = rows, kept
        self.second_order = second_order  # twice differentiable without overflow (a double backward)

    def __call__(self, t: int, beta: Tensor, live: Tensor | None = None) -> Tensor:
        idx = self.kept.index[:, t - 1]
        vals = beta.gather(-1, idx) + self.kept.log_weights[:, t - 1]
        rows = Matrix.from_log(self.rows(idx))  # B x K x N: one matrix per sequence
        return log_matmul(vals, rows, live, self.second_order)

    def entropy(self, t: int, beta: Tensor, H: Tensor, live: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The step with conditional entropies; each kept state's log weight is added to its entropy
        (the weights stay out of the score: Alg. 3's estimate is log Z_hat - E_hat[score])."""
        idx = self.kept.index[:, t - 1]
        log_w = self.kept.log_weights[:, t - 1]
        vals = beta.gather(-1, idx) + log_w
        carried = H.gather(-1, idx) + finite_or_zero(log_w)  # -inf: a placeholder of weight 0
        return entropy_step(vals, carried, Matrix.from_log(self.rows(idx)), live)


def _rows_of(transition: Tensor):
    """rows(idx B x K) -> B x K x N log-rows of an N x N or B x N x N transition."""
    if transition.dim() == 2:
        return lambda idx: transition[idx]
    return lambda idx: transition.gather(1, idx.unsqueeze(-1).expand(*idx.shape, transition.shape[-1]))


@register_engine("semimarkov", "randomized")
class RandomizedEngine(SequenceLifecycle, SemiMarkovEngine):
    """RDP estimators over the states kept at each boundary; see the module docstring."""

    name = "randomized"
    factor_types = (DenseSemiMarkov, LowRankSemiMarkov)
    capabilities = {
        "log_partition": (ESTIMATE, "O(T (D N + K N)); exp is unbiased"),
        "segment_marginals": (ESTIMATE, "autograd of the estimate"),
        "marginals": (ESTIMATE, "from the estimated segment marginals"),
        "entropy": (ESTIMATE, "Alg. 3 over segments on the same draw (low-rank: materializes N x N)"),
        "log_prob": (FALLBACK, "exact log Z"),
        "argmax": (FALLBACK, "exact Viterbi on the dense form"),
        "sample": (FALLBACK, "exact FFBS on the dense form"),
        "rsample": (FALLBACK, "exact Gumbel-softmax FFBS on the dense form"),
    }

    def checked(self, log_z, factors, lengths):
        return log_z  # an estimate may be -inf (every kept state dead) without the model being wrong

    def differentiated(self, log_z, factors, lengths):
        return check_nonzero_estimate(log_z, "marginals are")

    def _rows(self, factors):
        if isinstance(factors, LowRankSemiMarkov):
            return factors.transition_rows
        return _rows_of(factors.transition)

    def log_partition(self, factors, lengths, probe=None, second_order=False):
        kept = self.kept_states(factors)
        step = RandomizedStep(self._rows(factors), kept, second_order)
        problem = Problem(cumulative(factors.unary), factors.duration, factors.init, step)
        return forward(problem, lengths, probe)[0]

    def entropy(self, factors, lengths):
        """In float64, as the exact engine's; a ValueError where the estimate is 0 (it came out 0)."""
        with torch.no_grad():
            check_nonzero_estimate(self.log_partition(factors, lengths), "entropy is")
        dense = factors.dense().double()
        problem = dense_problem(dense)
        problem.step = RandomizedStep(_rows_of(dense.transition), self.kept_states(factors))
        return forward(problem, lengths, semiring=Entropy)[0].to(factors.unary.dtype)

    def log_prob(self, factors, lengths, seg, log_z=None):  # exact: never the estimate's log Z
        return ExactEngine().log_prob(factors.dense(), lengths, seg)

    def argmax(self, factors, lengths):
        return ExactEngine().argmax(factors.dense(), lengths)

    def sample(self, factors, lengths, n, generator=None):
        return ExactEngine().sample(factors.dense(), lengths, n, generator)

    def rsample(self, factors, lengths, temperature, generator=None):
        return ExactEngine().rsample(factors.dense(), lengths, temperature, generator)
