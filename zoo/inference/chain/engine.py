"""What every chain backend shares: operations derived from log Z and forward variables.

A backend (``ChainEngine`` subclass) supplies two primitives on its own factors:

* ``log_partition(factors, lengths, twice_differentiable)``: log Z, (B,);
* ``log_alphas(factors, lengths)``: state-space log forward variables, B x T x N.

From these the base class derives every operation, once, for all backends: marginals (gradient of
log Z w.r.t. a zero unary probe), pairwise marginals (the same on a per-position probe of the dense
form), entropy (the forward in the entropy semiring on the dense form, ``exact.forward``), log_prob,
Viterbi (the max-plus forward and the walk back, ``viterbi``: on the dense form, or streamed a
step at a time for low-rank transitions that change with the position), exact forward-filtering
backward-sampling with the Gumbel-max trick, and the Gumbel-softmax relaxed sample.
A backend overrides an operation only where it has a better algorithm, and declares in
``capabilities`` how each operation is computed (the README's capability table is generated from it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain import chunked, chunked_marginals, exact
from zoo.inference.chain.factors import ChainFactors, DenseChain
from zoo.inference.chain.viterbi import best_paths
from zoo.inference.engines import Engine, register_engine
from zoo.inference.kinds import NATIVE
from zoo.inference.numerics import gumbel_noise, needs_grad
from zoo.inference.semiring import Entropy


def gumbel_backward(
    log_alphas: Tensor,
    column,
    lengths: Tensor,
    num_samples: int,
    temperature: float | None,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor | None]:
    """Backward sampling from forward variables with Gumbel noise (exact FFBS via Gumbel-max).

    Args:
        log_alphas: B x T x K log forward variables.
        column: ``column(step, nxt)`` -> S x B x K log-potentials log Psi_step(:, nxt) of the
            transition into position ``step`` (1-based) given S x B next states
            (``ChainFactors.transition_columns()``).
        lengths: (B,).
        num_samples: S.
        temperature: None for hard samples only; else also return the relaxed one-hots
            softmax((logits + g) / temperature) (Fu et al. 2020, Gumbel-CRF).
    Returns:
        hard S x B x T (long, -1 past each length) and relaxed S x B x T x K (or None).
    """
    B, T, K = log_alphas.shape
    S = num_samples
    hard = torch.full((S, B, T), -1, dtype=torch.long, device=log_alphas.device)
    # a view a position and a stack of the relaxed steps at the end: a slice or a write into a buffer a
    # step makes the backward write a gradient of the whole B x T x K a step (O(T^2))
    alphas, soft = log_alphas.unbind(1), [None] * T
    nxt = torch.zeros(S, B, dtype=torch.long, device=log_alphas.device)
    for t in range(T - 1, -1, -1):
        logits = alphas[t].expand(S, B, K)
        inner = lengths - 1 > t  # B
        if t < T - 1 and bool(inner.any()):
            logits = torch.where(inner.view(1, B, 1), logits + column(t + 2, nxt), logits)
        noisy = logits + gumbel_noise((S, B, K), log_alphas, generator)
        pick = noisy.argmax(-1)
        active = (lengths - 1 >= t).view(1, B)
        hard[:, :, t] = torch.where(active, pick, -1)
        nxt = torch.where(active, pick, nxt)
        if temperature is not None:
            relaxed = torch.softmax(noisy / temperature, -1)
            soft[t] = torch.where(active.unsqueeze(-1), relaxed, 0.0)
    return hard, None if temperature is None else torch.stack(soft, 2)


def sequence_score(factors: ChainFactors, states: Tensor, lengths: Tensor) -> Tensor:
    """score(z) = init + unary + transitions of ... x B x T states, masked by lengths -> ... x B."""
    B, T, N = factors.unary.shape
    valid = torch.arange(T, device=states.device) < lengths.unsqueeze(-1)  # B x T
    z = torch.where(valid, states, 0)
    if ((z < 0) | (z >= N)).any():
        raise ValueError(f"states must lie in 0..N-1 = 0..{N - 1} within each length")
    unary = factors.unary.expand(*z.shape, N).gather(-1, z.unsqueeze(-1)).squeeze(-1)
    init = factors.init.expand(*z.shape[:-1], N).gather(-1, z[..., :1]).squeeze(-1)
    score = init + torch.where(valid, unary, 0).sum(-1)  # not unary * valid: -inf past a length
    if T > 1:
        trans = factors.transition_entries(z[..., :-1], z[..., 1:])
        score = score + torch.where(valid[:, 1:], trans, 0).sum(-1)
    return score


class ChainEngine(Engine):
    """Base class of the chain backends; see the module docstring."""

    # --- primitives -------------------------------------------------------------------------
    def log_partition(
        self, factors: ChainFactors, lengths: Tensor, twice_differentiable: bool = False
    ) -> Tensor:
        raise NotImplementedError

    def log_alphas(self, factors: ChainFactors, lengths: Tensor) -> Tensor:
        raise NotImplementedError

    # --- derived operations -----------------------------------------------------------------
    def marginals(self, factors: ChainFactors, lengths: Tensor) -> Tensor:
        """p(z_t = i): B x T x N, the gradient of log Z w.r.t. a zero unary probe."""
        differentiable = needs_grad(*vars(factors).values())
        with torch.enable_grad():
            probe = torch.zeros_like(factors.unary, requires_grad=True)
            log_z = self.log_partition(factors.with_unary(factors.unary + probe), lengths, differentiable)
            log_z = self.differentiated(log_z)
            (grad,) = torch.autograd.grad(log_z.sum(), probe, create_graph=differentiable)
        return grad

    def differentiated(self, log_z: Tensor) -> Tensor:
        """The log Z that marginals are the gradient of, checked (an exact forward raises where a chain
        has no path; the randomized engine refuses an estimate of 0, whose marginals are undefined)."""
        return log_z

    def pairwise_marginals(self, factors: ChainFactors, lengths: Tensor) -> Tensor:
        """p(z_{t-1} = i, z_t = j): B x (T-1) x N x N, by a probe on the dense per-position form."""
        dense = factors.dense()
        if dense.max_length == 1:
            return dense.unary.new_zeros(dense.batch, 0, dense.num_states, dense.num_states)
        differentiable = needs_grad(*vars(factors).values())
        with torch.enable_grad():
            probe = torch.zeros_like(dense.per_position(), requires_grad=True)
            per_pos = DenseChain(dense.unary, dense.per_position() + probe, dense.init)
            log_z, _ = exact.log_forward(per_pos, lengths, second_order=differentiable)
            (grad,) = torch.autograd.grad(log_z.sum(), probe, create_graph=differentiable)
        return grad

    def entropy(self, factors: ChainFactors, lengths: Tensor) -> Tensor:
        """H by the forward in the entropy semiring on the dense form; differentiable."""
        return exact.forward(factors.dense(), lengths, Entropy)[0]

    def log_prob(
        self, factors: ChainFactors, lengths: Tensor, states: Tensor, log_z: Tensor | None = None
    ) -> Tensor:
        """log p(states) = score - log Z, clamped at 0 so round-off never gives log p > 0; ``log_z``:
        this engine's log Z where it is known (computed here otherwise)."""
        log_z = self.log_partition(factors, lengths) if log_z is None else log_z
        return (sequence_score(factors, states, lengths) - log_z).clamp_max(0.0)

    def argmax(self, factors: ChainFactors, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Viterbi (``viterbi.best_paths``): (best score (B,), states B x T). The score is the best
        path's, summed from the factors: its gradient is the path's indicator."""
        states = best_paths(factors, lengths)
        return sequence_score(factors, states, lengths), states

    def sample(
        self, factors: ChainFactors, lengths: Tensor, n: int, generator=None
    ) -> Tensor:
        """Exact forward-filtering backward-sampling: n x B x T."""
        with torch.no_grad():
            alphas = self.log_alphas(factors, lengths)
            hard, _ = gumbel_backward(
                alphas, factors.transition_columns(), lengths, n, None, generator
            )
        return hard

    def rsample(
        self, factors: ChainFactors, lengths: Tensor, temperature: float, generator=None
    ) -> Tensor:
        """Gumbel-softmax relaxed FFBS sample: B x T x N, differentiable."""
        alphas = self.log_alphas(factors, lengths)
        _, soft = gumbel_backward(
            alphas, factors.transition_columns(), lengths, 1, temperature, generator
        )
        return soft[0]


@register_engine("chain", "exact")
class ExactEngine(ChainEngine):
    """The classical forward on dense potentials; accepts every container by materializing it."""

    name = "exact"
    factor_types = (ChainFactors,)
    capabilities = {
        "log_partition": (NATIVE, "one guarded matmul a step (log space, exact repair where float "
                          "underflow could bite), hand-written backward; without one, long chains of "
                          "few states in chunks multiplied as a tree"),
        "marginals": (NATIVE, "autograd of log Z; without a gradient, long chains of few states in chunks "
                      "with messages between them"),
        "pairwise_marginals": (NATIVE, "autograd of log Z, B x (T-1) x N x N"),
        "entropy": (NATIVE, "the forward in the entropy semiring (Alg. 3 recursion), differentiable"),
        "log_prob": (NATIVE, "score - log Z"),
        "argmax": (NATIVE, "Viterbi"),
        "sample": (NATIVE, "forward filtering, backward sampling"),
        "rsample": (NATIVE, "Gumbel-softmax backward sampling"),
    }

    def prepare(self, factors: ChainFactors, lengths: Tensor | None = None) -> DenseChain:
        return super().prepare(factors, lengths).dense()

    def log_partition(self, factors, lengths, twice_differentiable=False):
        if twice_differentiable:
            return exact.log_forward(factors, lengths, second_order=True)[0]
        return exact.fast_log_partition(factors, lengths)

    def log_alphas(self, factors, lengths):
        return exact.log_forward(factors, lengths)[1]

    def marginals(self, factors: DenseChain, lengths: Tensor) -> Tensor:
        """Without a gradient, long chains of few states in chunks (``chunked_marginals``), else the
        gradient of log Z."""
        if (
            factors.shared
            and not needs_grad(*vars(factors).values())
            and chunked.pays(factors.batch, factors.max_length, factors.num_states)
        ):
            found = chunked_marginals.marginals(factors, lengths, super().marginals)
            if found is not None:  # else a chunk has no path from some state: the gradient of log Z
                return found
        return super().marginals(factors, lengths)
