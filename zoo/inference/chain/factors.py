"""Containers for linear-chain potentials, one per parameterization.

A chain over positions 1..T with N states scores a state sequence z as

    score(z) = init(z_1) + sum_t unary_t(z_t) + sum_{t>=2} log Psi_t(z_{t-1}, z_t)

and defines p(z) = exp(score(z)) / Z. The containers differ only in how log Psi is given:

* ``DenseChain``: log Psi as one shared N x N matrix (HMM) or per position, B x (T-1) x N x N (CRF).
* ``EmbeddingChain``: log Psi(i, j) = e_i . e_j from state embeddings (Fu et al. 2022, Eq. 31).
* ``LowRankChain``: Psi_t = diag(c) L diag(w_t) R^T with non-negative features (Chiu et al. 2021).
* ``RankSpaceChain``: the CPD of the merged transition-emission factor (Yang et al. 2022, Sec. 4.3).

Every container checks its shapes and values at construction, can materialize itself densely
(``dense()``; used by exact fallbacks and cross-backend tests), and gathers transition entries,
columns and K x K blocks without building N x N where its parameterization allows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import torch
from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.checks import (
    as_dp_tensor,
    as_optional_dp_tensor,
    check_finite,
    check_nonnegative,
    check_same_dtype,
    check_shape,
)
from zoo.inference.column_scaled import column_scaled, out_of_range
from zoo.inference.logmatmul import Matrix, log_feature_matmul
from zoo.inference.numerics import added_at_first, log_inner, safe_log
from zoo.inference.precision import in_full_precision
from zoo.inference.row_normalized import log_normalizer, normalized_left, scaled_mass


def _per_sequence(name: str, value: Tensor, batch: int, states: int) -> Tensor:
    """An N or B x N tensor as B x N (a broadcast view), with its shape checked."""
    value = as_dp_tensor(name, value)
    if value.dim() == 1:
        check_shape(name, value, (states,), "N")
        return value.expand(batch, states)
    check_shape(name, value, (batch, states), "B x N")
    return value


def _batched_init(init: Tensor | None, batch: int, states: int, like: Tensor) -> Tensor:
    """Return a B x N initial log-potential (zeros when ``init`` is None)."""
    if init is None:
        return like.new_zeros(batch, states)
    init = _per_sequence("init", init, batch, states)
    check_finite("init", init)
    return init


def _column_mass(left: Tensor, right: Tensor, log_column_scale: Tensor | None) -> Tensor:
    """log sum_{i, r} left[i, r] right[j, r] e^{log_column_scale[r]}: (N,), the mass each state j takes
    (features scaled by ``column_scaled`` carry their columns' log-scales)."""
    if log_column_scale is None:
        return safe_log(right @ left.sum(0))
    return log_feature_matmul(left.sum(0).unsqueeze(0), log_column_scale, Matrix.from_prob(right.T))[0]


class ChainFactors:
    """Base class: the unary and initial log-potentials every chain parameterization carries.

    Attributes:
        unary: B x T x N log-potentials of each state at each position (emissions).
        init: B x N log-potentials of the first state.
    """

    unary: Tensor
    init: Tensor

    @property
    def batch(self) -> int:
        return self.unary.shape[0]

    @property
    def max_length(self) -> int:
        return self.unary.shape[1]

    @property
    def num_states(self) -> int:
        return self.unary.shape[2]

    def _check_unary(self, unary: Tensor) -> Tensor:
        unary = as_dp_tensor("unary", unary)
        if unary.dim() != 3:
            raise ValueError(f"unary must have shape B x T x N, got {tuple(unary.shape)}")
        if 0 in unary.shape:
            raise ValueError(f"unary must be non-empty in B, T and N, got {tuple(unary.shape)}")
        check_finite("unary", unary)
        return unary

    def folded_unary(self) -> Tensor:
        """B x T x N: the unary with the initial log-potentials added at position 1."""
        return added_at_first(self.unary, self.init)

    def with_unary(self, unary: Tensor) -> ChainFactors:
        """A copy with the unary log-potentials replaced (same shape)."""
        raise NotImplementedError

    def transition_entries(self, prev: Tensor, nxt: Tensor) -> Tensor:
        """log Psi_t(prev_t, nxt_t) for the transitions into positions 2..T.

        Args:
            prev, nxt: ... x B x (T-1) long state indices.
        Returns:
            ... x B x (T-1) log-potentials.
        """
        raise NotImplementedError

    def transition_columns(self) -> Callable[[int, Tensor], Tensor]:
        """``columns(step, nxt)``: log Psi_step(:, nxt) for the transition into position ``step``
        (1-based: 2..T), nxt S x B long indices of the state there -> S x B x N log-potentials of every
        previous state. What every step reads is made once here (a backward sampling pass calls it a
        step at a time), split by position where it has one: a step then has a gradient of its own
        size (indexing the whole B x (T-1) x ... tensor a step wrote a zero gradient of all of it, O(T^2)
        in all)."""
        raise NotImplementedError

    def transition_blocks(self, rows: Tensor, cols: Tensor) -> Tensor:
        """log Psi_t(rows_{t-1}, cols_t) as K x K blocks, never building N x N.

        Args:
            rows: B x (T-1) x K indices of the kept states at positions 1..T-1.
            cols: B x (T-1) x K indices of the kept states at positions 2..T.
        Returns:
            B x (T-1) x K x K log-potentials.
        """
        raise NotImplementedError

    def state_prior(self, lengths: Tensor | None = None) -> Tensor:
        """B x N log-weights of the transition mass each state receives (the "global" RDP proposal,
        Fu et al. 2022 Eq. 34's prior: states that take more mass score higher; the outgoing mass
        would be uniform for every locally normalized model, an HMM's rows summing to one).
        ``lengths`` (B,): per-position potentials past a length are padding and never read."""
        raise NotImplementedError

    def dense(self) -> DenseChain:
        """The same distribution with log Psi materialized (N x N shared, or B x (T-1) x N x N)."""
        raise NotImplementedError


class DenseChain(ChainFactors):
    """Dense log-potentials: the HMM case (one shared transition) or the CRF case (per position).

    Args:
        unary: B x T x N log-potentials (emissions log p(x_t | z_t), or CRF unary scores).
        transition: N x N shared log-potentials (log p(z_t = j | z_{t-1} = i) at [i, j]) or
            B x (T-1) x N x N per-position log-potentials (entry [b, t-1, i, j] scores i -> j into
            position t+1).
        init: N or B x N log-potentials of z_1 (log p(z_1)); None means zeros.
    Entries may be -inf (a forbidden state or transition); NaN and +inf are rejected.
    """

    native_backend = Backend.EXACT

    def __init__(self, unary: Tensor, transition: Tensor, init: Tensor | None = None):
        unary, transition = as_dp_tensor("unary", unary), as_dp_tensor("transition", transition)
        init = as_optional_dp_tensor("init", init)
        check_same_dtype(type(self).__name__, unary=unary, transition=transition, init=init)
        self.unary = self._check_unary(unary)
        B, T, N = self.unary.shape
        if transition.dim() == 2:
            check_shape("transition", transition, (N, N), "N x N")
        elif transition.dim() == 4:
            check_shape("transition", transition, (B, T - 1, N, N), "B x (T-1) x N x N")
        else:
            raise ValueError(
                "transition must have shape N x N (shared) or B x (T-1) x N x N (per position), "
                f"got {tuple(transition.shape)} for unary of shape {(B, T, N)}"
            )
        check_finite("transition", transition)
        self.transition = transition
        self.init = _batched_init(init, B, N, self.unary)

    @property
    def shared(self) -> bool:
        """True when one N x N transition serves every position (the HMM case)."""
        return self.transition.dim() == 2

    def with_unary(self, unary: Tensor) -> DenseChain:
        return DenseChain(unary, self.transition, self.init)

    def per_position(self) -> Tensor:
        """B x (T-1) x N x N log-potentials (a broadcast view when shared)."""
        if self.shared:
            B, T, N = self.unary.shape
            return self.transition.expand(B, T - 1, N, N)
        return self.transition

    def transition_entries(self, prev: Tensor, nxt: Tensor) -> Tensor:
        if self.shared:
            return self.transition[prev, nxt]
        B, Tm1 = prev.shape[-2:]
        b = torch.arange(B, device=prev.device).view(B, 1).expand(B, Tm1)
        t = torch.arange(Tm1, device=prev.device).view(1, Tm1).expand(B, Tm1)
        return self.transition[b, t, prev, nxt]

    def transition_columns(self) -> Callable[[int, Tensor], Tensor]:
        if self.shared:
            return lambda step, nxt: self.transition[:, nxt].permute(1, 2, 0)
        steps = self.transition.unbind(1)  # B x N x N each

        def columns(step: int, nxt: Tensor) -> Tensor:
            S, B = nxt.shape
            return steps[step - 2][torch.arange(B, device=nxt.device).expand(S, B), :, nxt]

        return columns

    def transition_blocks(self, rows: Tensor, cols: Tensor) -> Tensor:
        r, c = rows.unsqueeze(-1), cols.unsqueeze(-2)
        if self.shared:
            return self.transition[r, c]
        B, Tm1, K = rows.shape
        b = torch.arange(B, device=rows.device).view(B, 1, 1, 1)
        t = torch.arange(Tm1, device=rows.device).view(1, Tm1, 1, 1)
        return self.transition[b, t, r, c]

    def state_prior(self, lengths: Tensor | None = None) -> Tensor:
        """Incoming log-mass of each state; per position, its mean mass over the transitions inside
        each length (0, uniform, for a sequence without one): a state forbidden at some positions
        keeps the mass it takes at the others."""
        if self.shared:
            return self.transition.logsumexp(0).expand(self.batch, self.num_states)
        B, T, N = self.unary.shape
        steps = torch.full((B,), T - 1, device=self.unary.device) if lengths is None else lengths - 1
        inside = torch.arange(T - 1, device=steps.device) < steps.unsqueeze(-1)  # B x (T-1)
        incoming = self.transition.logsumexp(-2).masked_fill(~inside.unsqueeze(-1), float("-inf"))
        prior = incoming.logsumexp(1) - steps.clamp_min(1).to(incoming.dtype).log().unsqueeze(-1)
        return torch.where(steps.unsqueeze(-1) > 0, prior, 0.0)

    def dense(self) -> DenseChain:
        return self


class EmbeddingChain(ChainFactors):
    """A CRF whose transition log-potentials are dot products of state embeddings.

    log Psi(i, j) = e_i . e_j (Fu et al. 2022, Eq. 31); the randomized backend builds only the
    K x K blocks of kept states, so N x N is never formed.

    Args:
        unary: B x T x N log-potentials (e.g. e_i . r_t from a contextual encoder).
        states: N x D state embeddings.
        init: N or B x N log-potentials of z_1; None means zeros.
    """

    native_backend = Backend.EXACT

    def __init__(self, unary: Tensor, states: Tensor, init: Tensor | None = None):
        unary, states = as_dp_tensor("unary", unary), as_dp_tensor("states", states)
        init = as_optional_dp_tensor("init", init)
        check_same_dtype(type(self).__name__, unary=unary, states=states, init=init)
        self.unary = self._check_unary(unary)
        B, T, N = self.unary.shape
        check_shape("states", states, (N, None), "N x D")
        check_finite("states", states, allow_neg_inf=False)
        self.states = states
        self.init = _batched_init(init, B, N, self.unary)

    def with_unary(self, unary: Tensor) -> EmbeddingChain:
        return EmbeddingChain(unary, self.states, self.init)

    def transition_entries(self, prev: Tensor, nxt: Tensor) -> Tensor:
        return (self.states[prev] * self.states[nxt]).sum(-1)

    def transition_columns(self) -> Callable[[int, Tensor], Tensor]:
        return lambda step, nxt: self.states[nxt] @ self.states.T

    def transition_blocks(self, rows: Tensor, cols: Tensor) -> Tensor:
        return self.states[rows] @ self.states[cols].transpose(-1, -2)

    def state_prior(self, lengths: Tensor | None = None) -> Tensor:
        """Each state's embedding L1 norm (no N x N product), plus 1/N of their mean: every
        transition exp(e_i . e_j) is positive, so a state with a zero embedding has mass too and may
        not get weight 0 (Z_hat would miss it: an audit measured E[Z_hat] / Z = 0.07)."""
        l1 = self.states.detach().abs().sum(-1)
        floor = l1.mean() / self.num_states
        weights = l1 + torch.where(floor > 0, floor, 1.0)
        return (weights / weights.sum()).log().expand(self.batch, self.num_states)

    def dense(self) -> DenseChain:
        return DenseChain(self.unary, self.states @ self.states.T, self.init)


class LowRankChain(ChainFactors):
    """Low-rank transitions Psi_t = diag(c) L diag(w_t) R^T with non-negative features.

    With ``normalize=True`` (and no ``log_rank_weights``), c_i = 1 / (L_i . sum_j R_j) makes every
    row a distribution: p(z_t = j | z_{t-1} = i) = phi(u_i) . phi(v_j) / sum_k phi(u_i) . phi(v_k)
    (Chiu et al. 2021, Eq. 3-5). Each DP step is two skinny products, O(N R); N x N is never built.

    Args:
        unary: B x T x N log-potentials (emissions).
        left: N x R non-negative features phi(u_i) of the previous state.
        right: N x R non-negative features phi(v_j) of the next state.
        init: N or B x N log-potentials of z_1; None means zeros.
        normalize: divide each row of L R^T by its sum (a transition matrix).
        log_rank_weights: optional B x (T-1) x R log-weights w_t on the rank components of the
            transition into positions 2..T (the rank-space chain uses these to carry emissions).
        log_column_scale: R, log a_r b_r where the caller has divided column r of left and right by
            a_r and b_r (``column_scaled``) and added it to ``log_rank_weights``: a copy of a chain
            that scaled them (``with_unary``, a rank-space chain's view). None: this chain scales its
            features itself without ``normalize`` where their products would leave float32's range.
    """

    native_backend = Backend.LOW_RANK

    def __init__(
        self,
        unary: Tensor,
        left: Tensor,
        right: Tensor,
        init: Tensor | None = None,
        normalize: bool = True,
        log_rank_weights: Tensor | None = None,
        log_column_scale: Tensor | None = None,
    ):
        unary, left = as_dp_tensor("unary", unary), as_dp_tensor("left", left)
        right = as_dp_tensor("right", right)
        init = as_optional_dp_tensor("init", init)
        log_rank_weights = as_optional_dp_tensor("log_rank_weights", log_rank_weights)
        log_column_scale = as_optional_dp_tensor("log_column_scale", log_column_scale)
        check_same_dtype(
            type(self).__name__, unary=unary, left=left, right=right, init=init,
            log_rank_weights=log_rank_weights, log_column_scale=log_column_scale,
        )
        self.unary = self._check_unary(unary)
        B, T, N = self.unary.shape
        check_shape("left", left, (N, None), "N x R")
        check_shape("right", right, (N, left.shape[1]), "N x R")
        check_nonnegative("left", left)
        check_nonnegative("right", right)
        self.left, self.right = left, right
        self.init = _batched_init(init, B, N, self.unary)
        if log_rank_weights is not None:
            check_shape(
                "log_rank_weights", log_rank_weights, (B, T - 1, left.shape[1]), "B x (T-1) x R"
            )
            check_finite("log_rank_weights", log_rank_weights)
            if normalize:
                raise ValueError(
                    "normalize=True needs position-independent transitions; "
                    "pass normalize=False together with log_rank_weights"
                )
        # log a_r b_r of the features' columns where they are scaled (``column_scaled``), else None
        self.log_column_scale = log_column_scale
        if log_column_scale is not None:
            check_shape("log_column_scale", log_column_scale, (left.shape[1],), "R")
            if normalize or log_rank_weights is None:
                raise ValueError("log_column_scale needs normalize=False and the log_rank_weights it is in")
        elif not normalize and out_of_range(left, right):  # their products would leave float32's range
            (left, log_left), (right, log_right) = column_scaled(left), column_scaled(right)
            self.left, self.right, self.log_column_scale = left, right, log_left + log_right
            given = 0.0 if log_rank_weights is None else log_rank_weights
            log_rank_weights = self.log_column_scale.expand(B, T - 1, -1) + given
        self.log_rank_weights = log_rank_weights
        self.normalize = normalize
        if normalize:
            with torch.no_grad():
                mass = scaled_mass(left, right)
            if (mass <= 0).any():
                raise ValueError(
                    "normalize=True needs every row of left @ right.T to have positive mass; "
                    f"{int((mass <= 0).sum())} rows sum to 0"
                )

    @property
    def log_scale(self) -> Tensor:
        """log c: (N,), each row's -log mass with ``normalize`` (else 0; ``row_normalized``). Formed at
        every use, so that each operation has a graph of its own (a ``backward`` of one freed what the
        next would need)."""
        if not self.normalize:
            return self.left.new_zeros(self.num_states)
        return log_normalizer(self.left, self.right)

    @property
    def rank(self) -> int:
        return self.left.shape[1]

    def with_unary(self, unary: Tensor) -> LowRankChain:
        return LowRankChain(
            unary, self.left, self.right, self.init, self.normalize, self.log_rank_weights,
            log_column_scale=self.log_column_scale,
        )

    def scaled_left(self) -> Tensor:
        """diag(c) L: N x R (L itself without ``normalize``)."""
        return normalized_left(self.left, self.right) if self.normalize else self.left

    def _log_inner(self, rows: Tensor, cols: Tensor, log_weights: Tensor | None) -> Tensor:
        """log sum_r left[i, r] w[r] right[j, r] for left rows ... x K x R and right rows ... x M x R:
        ... x K x M, a guarded product where rank weights are given (their spread may be hundreds of nats)."""
        if log_weights is None:
            return safe_log(rows @ cols.transpose(-1, -2))
        return log_feature_matmul(rows, log_weights.unsqueeze(-2), Matrix.from_prob(cols.transpose(-1, -2)))

    def transition_entries(self, prev: Tensor, nxt: Tensor) -> Tensor:
        return self.log_scale[prev] + log_inner(self.left[prev], self.right[nxt], self.log_rank_weights)

    def transition_columns(self) -> Callable[[int, Tensor], Tensor]:
        left = Matrix.from_prob(self.scaled_left().T)  # R x N
        weights = None if self.log_rank_weights is None else self.log_rank_weights.unbind(1)  # B x R each

        def columns(step: int, nxt: Tensor) -> Tensor:
            rows = self.right[nxt]  # S x B x R
            if weights is None:
                return safe_log(rows @ left.scaled)
            return log_feature_matmul(rows, weights[step - 2], left)

        return columns

    def transition_blocks(self, rows: Tensor, cols: Tensor) -> Tensor:
        return self._log_inner(self.scaled_left()[rows], self.right[cols], self.log_rank_weights)

    def state_prior(self, lengths: Tensor | None = None) -> Tensor:
        return _column_mass(self.scaled_left(), self.right, self.log_column_scale).expand(
            self.batch, self.num_states
        )  # log sum_i c_i L_i . R_j

    def dense(self) -> DenseChain:
        inner = self._log_inner(self.scaled_left(), self.right, self.log_rank_weights)  # (B x (T-1) x) N x N
        return DenseChain(self.unary, inner, self.init)


class RankSpaceChain(ChainFactors):
    """The HMM with a CPD of its merged transition-emission factor (Yang et al. 2022, Sec. 4.3).

    p(z_t, x_t | z_{t-1}) = sum_r U[z_{t-1}, r] V[z_t, r] W[x_t, r]: U holds p(r | z_{t-1}) (rows
    sum to 1), V holds p(z_t | r) (columns sum to 1) and W holds p(x | r). The first state is drawn
    through the same factor from a start distribution s over a virtual z_0. Marginalizing the state
    nodes leaves a chain over rank nodes with the R x R transition V^T U, so the forward costs
    O(N R^2) once plus O(T R^2), independent of N per step.

    Args:
        start: N or B x N non-negative start weights s(z_0) (a distribution for an HMM).
        U: N x R non-negative, V: N x R non-negative (normalization is the caller's choice; the DP
            is exact for any non-negative values).
        emission: B x T x R log-weights log W[x_t, r] of each position's observation.
    """

    native_backend = Backend.RANK_SPACE

    def __init__(self, start: Tensor, U: Tensor, V: Tensor, emission: Tensor):
        start, U, V = as_dp_tensor("start", start), as_dp_tensor("U", U), as_dp_tensor("V", V)
        emission = as_dp_tensor("emission", emission)
        check_same_dtype(type(self).__name__, start=start, U=U, V=V, emission=emission)
        if emission.dim() != 3 or 0 in emission.shape:
            raise ValueError(f"emission must have shape B x T x R, got {tuple(emission.shape)}")
        check_finite("emission", emission)
        B, T, R = emission.shape
        check_shape("U", U, (None, R), "N x R (R: emission's last dimension; U or emission is off)")
        N = U.shape[0]
        check_shape("V", V, (N, R), "N x R")
        check_nonnegative("U", U)
        check_nonnegative("V", V)
        start = _per_sequence("start", start, B, N)
        check_nonnegative("start", start)
        self.log_column_scale = None  # as LowRankChain's: log a_r b_r where U, V are scaled
        if out_of_range(U, V):  # a rank node's factors U[:, r] V[:, r] beyond float32's range
            (U, log_u), (V, log_v) = column_scaled(U), column_scaled(V)
            self.log_column_scale = log_u + log_v
            emission = emission + self.log_column_scale
        self.start, self.U, self.V, self.emission = start, U, V, emission

    # the state-space view is built only when an operation needs it: log Z over ranks does not
    @property
    def batch(self) -> int:
        return self.emission.shape[0]

    @property
    def max_length(self) -> int:
        return self.emission.shape[1]

    @property
    def num_states(self) -> int:
        return self.U.shape[0]

    @cached_property
    def unary(self) -> Tensor:
        """B x T x N zeros: the emissions live on the rank components."""
        return self.emission.new_zeros(self.batch, self.max_length, self.num_states)

    @property
    @in_full_precision
    def init(self) -> Tensor:
        """B x N: log sum_{z0, r} s(z0) U[z0, r] W[x_1, r] V[z1, r] (recomputed on each use, so a
        use under no_grad never leaves a detached copy behind)."""
        # B x R by R x N, a guarded product: W may be tiny
        return log_feature_matmul(self.start @ self.U, self.emission[:, 0], Matrix.from_prob(self.V.T))

    @property
    def rank(self) -> int:
        return self.U.shape[1]

    def low_rank_view(self, unary: Tensor | None = None) -> LowRankChain:
        """The same chain over states: Psi_t = U diag(W[x_t]) V^T, first state from s U diag(W[x_1]) V^T."""
        return LowRankChain(
            self.unary if unary is None else unary,
            self.U,
            self.V,
            init=self.init,
            normalize=False,
            log_rank_weights=self.emission[:, 1:],
            log_column_scale=self.log_column_scale,
        )

    def with_unary(self, unary: Tensor) -> LowRankChain:
        return self.low_rank_view(unary)

    def transition_entries(self, prev: Tensor, nxt: Tensor) -> Tensor:
        return self.low_rank_view().transition_entries(prev, nxt)

    def transition_columns(self) -> Callable[[int, Tensor], Tensor]:
        return self.low_rank_view().transition_columns()  # one view (each checks its inputs)

    def transition_blocks(self, rows: Tensor, cols: Tensor) -> Tensor:
        return self.low_rank_view().transition_blocks(rows, cols)

    def state_prior(self, lengths: Tensor | None = None) -> Tensor:
        # log sum_i,r U[i,r] V[j,r]
        return _column_mass(self.U, self.V, self.log_column_scale).expand(self.batch, self.num_states)

    def dense(self) -> DenseChain:
        return self.low_rank_view().dense()
