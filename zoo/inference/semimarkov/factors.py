"""Containers for semi-Markov (HSMM) potentials, one per parameterization (docs/semimarkov-api.md).

A segmentation of T frames into segments (s, d, z) of length d in 1..D scores

    score = sum_k seg(s_k, d_k, z_{k-1}, z_k),   seg(s, d, i, j) = trans(i, j) + dur(j, d) + E(s, d, j)

with E(s, d, j) = C[s + d, j] - C[s, j] from the cumulative frame scores C (B x (T+1) x N).

* ``DenseSemiMarkov``: trans as an N x N matrix (-inf on the diagonal forbids self-transitions).
* ``LowRankSemiMarkov``: trans = log diag(c) phi(U) phi(V)^T, optionally without its diagonal (LHSMM).
* ``RankSpaceSemiMarkov``: the CPD of the merged transition-duration-emission factor; rank components
  carry the duration and the emission (docs/semimarkov-rank-space.md).
* ``EdgeSemiMarkov``: general per-segment potentials B x (T-1) x D x N x N (the materialized form of
  the rank-space model; tiny sizes only).

Every container checks its shapes and values at construction and materializes itself (``dense()``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.chain.factors import ChainFactors, DenseChain, LowRankChain, RankSpaceChain
from zoo.inference.checks import (
    as_dp_tensor,
    as_optional_dp_tensor,
    check_finite,
    check_nonnegative,
    check_same_dtype,
    check_shape,
)
from zoo.inference.column_scaled import balanced_columns, column_scaled, out_of_range
from zoo.inference.logmatmul import Matrix, log_feature_matmul
from zoo.inference.numerics import log_inner, logsumexp, safe_log
from zoo.inference.row_normalized import normalized_left, scaled_mass


def _per_sequence(name: str, value: Tensor | None, batch: int, states: int, like: Tensor) -> Tensor:
    """An N or B x N log-vector as B x N (zeros when None)."""
    if value is None:
        return like.new_zeros(batch, states)
    value = as_dp_tensor(name, value)
    if value.dim() == 1:
        check_shape(name, value, (states,), "N")
        value = value.expand(batch, states)
    else:
        check_shape(name, value, (batch, states), "B x N")
    return value


def _check_frames(name: str, value: Tensor, what: str) -> Tensor:
    value = as_dp_tensor(name, value)
    if value.dim() != 3 or 0 in value.shape:
        raise ValueError(
            f"{name} must have shape B x T x {what} with every size >= 1, got {tuple(value.shape)}"
        )
    check_finite(name, value)
    return value


def _check_duration(duration: Tensor, batch: int, states: int, label: str = "N") -> Tensor:
    """N x D or B x N x D log-probabilities of each duration, returned as B x N x D (a view)."""
    duration = as_dp_tensor("duration", duration)
    if duration.dim() not in (2, 3) or duration.shape[-1] < 1:
        raise ValueError(
            f"duration must have shape {label} x D or B x {label} x D with D >= 1 (the longest segment), "
            f"got {tuple(duration.shape)}"
        )
    if duration.dim() == 2:
        check_shape("duration", duration, (states, None), f"{label} x D")
        duration = duration.expand(batch, *duration.shape)
    else:
        check_shape("duration", duration, (batch, states, None), f"B x {label} x D")
    check_finite("duration", duration)
    return duration


class Cumulative(NamedTuple):
    """Cumulative frame log-potentials C, B x (T+1) x K: ``sums`` (float64) of the finite entries of
    frames 0..t-1 at [:, t], and ``dead`` (None where there is none) the count of -inf entries among
    them. A segment's emission is ``span(end, start, dtype)``.

    Over hundreds of frames of Gaussian log-likelihoods C reaches 1e5 to 1e6 nats, where float32's
    spacing alone is 0.01 to 0.1 nats, so the sums are kept in float64 and each difference is cast
    back to the working dtype. A -inf entry (a state forbidden at a frame) stays out of the sums: a
    difference of sums holding it was -inf - (-inf) = NaN for every segment after it.
    """

    sums: Tensor
    dead: Tensor | None

    @property
    def shape(self) -> torch.Size:
        return self.sums.shape

    @property
    def device(self) -> torch.device:
        return self.sums.device

    def span(self, end: tuple, start: tuple, dtype: torch.dtype) -> Tensor:
        """C[end] - C[start] in ``dtype`` for two indexings of C (the frames between them); -inf where
        a frame in between is -inf."""
        out = (self.sums[end] - self.sums[start]).to(dtype)
        if self.dead is None:
            return out
        return out.masked_fill(self.dead[end] > self.dead[start], float("-inf"))


def cumulative(unary: Tensor) -> Cumulative:
    """The ``Cumulative`` of a B x T x K unary (C[:, 0] = 0)."""
    dead = torch.isneginf(unary)
    if not bool(dead.any()):
        return Cumulative(_running_sums(unary.to(torch.float64)), None)
    finite = torch.where(dead, 0.0, unary).to(torch.float64)
    return Cumulative(_running_sums(finite), _running_sums(dead.int()))


def _running_sums(x: Tensor) -> Tensor:
    """B x (T+1) x K: the sums of x (B x T x K) over frames 0..t-1 at [:, t], 0 first."""
    return torch.nn.functional.pad(x.cumsum(1), (0, 0, 1, 0))


class SemiMarkovFactors:
    """Base class. ``batch``, ``max_length`` (T), ``num_states`` (N), ``max_duration`` (D)."""

    batch: int
    max_length: int
    num_states: int
    max_duration: int

    def dense(self) -> SemiMarkovFactors:
        """The same distribution with its transitions materialized."""
        raise NotImplementedError

    def one_frame_chain(self, probe: Tensor | None = None) -> ChainFactors | None:
        """With D = 1 every segment is one frame: the linear chain this HSMM then equals (the duration's
        log p(d = 1) joins each frame's potential; ``probe`` B x T x 1 x N, a segment probe, is then a
        unary one). None where D > 1 or no chain container holds the transition."""
        return None

    def segment_scores(self, b: Tensor, s: Tensor, d: Tensor, prev: Tensor, z: Tensor) -> Tensor:
        """seg(s, d, prev, z) for equally shaped long tensors (prev = -1: the first segment); d <= D."""
        raise NotImplementedError

    @property
    def device(self):
        raise NotImplementedError


class FactorizedSemiMarkov(SemiMarkovFactors):
    """Shared by the HSMM containers whose segment score factorizes as trans + dur + emission.

    Attributes:
        unary: B x T x N frame log-potentials (e.g. Gaussian log-likelihoods of each frame).
        duration: B x N x D log-potentials of each duration (index d-1), a view when shared.
        init: B x N log-potentials of the first segment's state.
    """

    unary: Tensor
    duration: Tensor
    init: Tensor

    def _one_frame_unary(self, probe: Tensor | None) -> Tensor:
        """B x T x N: each frame's potential plus log p(d = 1 | z) (plus the probe)."""
        unary = self.unary + self.duration[..., 0].unsqueeze(1)
        return unary if probe is None else unary + probe[:, :, 0]

    def _setup(self, unary, duration, init):
        self.unary = _check_frames("unary", unary, "N")
        B, T, N = self.unary.shape
        self.duration = _check_duration(duration, B, N)
        self.init = _per_sequence("init", init, B, N, self.unary)
        check_finite("init", self.init)

    @property
    def batch(self) -> int:
        return self.unary.shape[0]

    @property
    def max_length(self) -> int:
        return self.unary.shape[1]

    @property
    def num_states(self) -> int:
        return self.unary.shape[2]

    @property
    def max_duration(self) -> int:
        return self.duration.shape[-1]

    @property
    def device(self):
        return self.unary.device

    def cumulative(self) -> Cumulative:
        return cumulative(self.unary)

    def transition_entries(self, prev: Tensor, nxt: Tensor) -> Tensor:
        """log trans(prev, nxt) for equally shaped long tensors."""
        raise NotImplementedError

    def transition_columns(self, nxt: Tensor) -> Tensor:
        """log trans(:, nxt): ... x N for ... long indices."""
        raise NotImplementedError

    def transition_rows(self, prev: Tensor) -> Tensor:
        """log trans(prev, :): ... x N for ... long indices."""
        raise NotImplementedError

    def state_prior(self, lengths: Tensor | None = None) -> Tensor:
        """B x N log incoming transition mass of each state (the "global" RDP proposal; see the
        chain's ``ChainFactors.state_prior``); the transitions are shared, so ``lengths`` is unused."""
        raise NotImplementedError

    def segment_scores(self, b, s, d, prev, z):
        emit = self.cumulative().span((b, s + d, z), (b, s, z), self.unary.dtype)
        dur = self.duration[b, z, d - 1]
        first = self.init[b, z]
        trans = self.transition_entries(prev.clamp_min(0), z)
        return torch.where(prev < 0, first, trans) + dur + emit


class DenseSemiMarkov(FactorizedSemiMarkov):
    """An HSMM with dense log-potentials.

    Args:
        unary: B x T x N frame log-potentials; a segment's emission is their sum over its frames.
        transition: N x N log-potentials between consecutive segments ([i, j]: i then j); put -inf on
            the diagonal to forbid self-transitions (the classical explicit-duration HSMM).
        duration: N x D or B x N x D log-potentials of the duration d (index d-1) given the state.
        init: N or B x N log-potentials of the first segment's state; None means zeros.
    """

    native_backend = Backend.EXACT

    def __init__(self, unary: Tensor, transition: Tensor, duration: Tensor, init: Tensor | None = None):
        unary, transition = as_dp_tensor("unary", unary), as_dp_tensor("transition", transition)
        duration, init = as_dp_tensor("duration", duration), as_optional_dp_tensor("init", init)
        check_same_dtype(
            type(self).__name__, unary=unary, transition=transition, duration=duration, init=init
        )
        self._setup(unary, duration, init)
        N = self.num_states
        check_shape("transition", transition, (N, N), "N x N")
        check_finite("transition", transition)
        self.transition = transition

    def with_unary(self, unary: Tensor) -> DenseSemiMarkov:
        return DenseSemiMarkov(unary, self.transition, self.duration, self.init)

    def double(self) -> DenseSemiMarkov:
        """The same potentials in float64 (differentiable casts)."""
        f = self
        return DenseSemiMarkov(f.unary.double(), f.transition.double(), f.duration.double(), f.init.double())

    def transition_entries(self, prev, nxt):
        return self.transition[prev, nxt]

    def transition_columns(self, nxt):
        return self.transition.T[nxt]

    def transition_rows(self, prev):
        return self.transition[prev]

    def state_prior(self, lengths=None):
        return self.transition.logsumexp(0).expand(self.batch, self.num_states)

    def dense(self) -> DenseSemiMarkov:
        return self

    def one_frame_chain(self, probe: Tensor | None = None) -> DenseChain | None:
        if self.max_duration > 1:
            return None
        return DenseChain(self._one_frame_unary(probe), self.transition, self.init)

    def edge_form(self) -> EdgeSemiMarkov:
        """The per-segment form (B x (T-1) x D x N x N): tests and tiny sizes only."""
        N, D = self.num_states, self.max_duration
        seg = segment_emissions(self.cumulative(), D, self.unary.dtype)
        seg = seg + self.duration.transpose(1, 2).unsqueeze(1)
        first = seg[:, 0] + self.init.unsqueeze(1)  # B x D x N
        edge = seg[:, 1:].unsqueeze(-2) + self.transition.view(1, 1, 1, N, N)
        return EdgeSemiMarkov(first, edge)


def segment_emissions(C: Cumulative, D: int, dtype: torch.dtype) -> Tensor:
    """E: B x T x D x K in ``dtype``, E[b, s, d-1] = C[s + d] - C[s], -inf where s + d > T (small
    sizes only)."""
    B, T1, K = C.shape
    T = T1 - 1
    s = torch.arange(T, device=C.device).view(T, 1)
    e = s + torch.arange(1, D + 1, device=C.device).view(1, D)
    valid = e <= T
    out = C.span((slice(None), e.clamp_max(T)), (slice(None), s), dtype)  # B x T x D x K
    return torch.where(valid.view(1, T, D, 1), out, float("-inf"))


class LowRankSemiMarkov(FactorizedSemiMarkov):
    """LHSMM (Chiu et al. 2021, Eq. 6): trans = log diag(c) L R^T with non-negative features.

    Args:
        unary, duration, init: as ``DenseSemiMarkov``.
        left: N x R non-negative features phi(u_i) of the previous segment's state.
        right: N x R non-negative features phi(v_j) of the next segment's state.
        normalize: c_i = 1 / (sum over allowed j of left[i] . right[j]) (rows are distributions).
        self_transitions: False removes the diagonal (a segment is never followed by its own state);
            the step stays O(N R) (diag(L R^T) is subtracted).
    """

    native_backend = Backend.LOW_RANK

    def __init__(
        self,
        unary: Tensor,
        left: Tensor,
        right: Tensor,
        duration: Tensor,
        init: Tensor | None = None,
        normalize: bool = True,
        self_transitions: bool = True,
    ):
        unary, left = as_dp_tensor("unary", unary), as_dp_tensor("left", left)
        right, duration = as_dp_tensor("right", right), as_dp_tensor("duration", duration)
        init = as_optional_dp_tensor("init", init)
        check_same_dtype(
            type(self).__name__, unary=unary, left=left, right=right, duration=duration, init=init
        )
        self._setup(unary, duration, init)
        N = self.num_states
        check_shape("left", left, (N, None), "N x R")
        check_shape("right", right, (N, left.shape[1]), "N x R")
        check_nonnegative("left", left)
        check_nonnegative("right", right)
        if not normalize and out_of_range(left, right):  # their products would leave float32's range
            # left right^T / 2^k; 2^k goes on every segment's duration and off the first one's init
            left, right, log_shift = balanced_columns(left, right)
            self.duration, self.init = self.duration + log_shift, self.init - log_shift
        self.left, self.right = left, right
        self.normalize, self.self_transitions = bool(normalize), bool(self_transitions)
        if normalize:
            with torch.no_grad():
                mass = scaled_mass(left, right, self.self_transitions)
            if (mass <= 0).any():
                raise ValueError(
                    "normalize=True needs every state to have positive outgoing mass left[i] . right[j] "
                    f"over the allowed next states; {int((mass <= 0).sum())} states have none"
                )

    @property
    def rank(self) -> int:
        return self.left.shape[1]

    def scaled_left(self) -> Tensor:
        """diag(c) L: N x R (L itself without ``normalize``)."""
        return normalized_left(self.left, self.right, self.self_transitions) if self.normalize else self.left

    def scaled_diagonal(self) -> Tensor:
        """diag(diag(c) L R^T): N, each state's self-transition weight."""
        return (self.scaled_left() * self.right).sum(-1)

    def with_unary(self, unary: Tensor) -> LowRankSemiMarkov:
        return LowRankSemiMarkov(
            unary, self.left, self.right, self.duration, self.init, self.normalize, self.self_transitions
        )

    def _mask_self(self, scores: Tensor, prev: Tensor, nxt: Tensor) -> Tensor:
        if self.self_transitions:
            return scores
        return scores.masked_fill(prev == nxt, float("-inf"))

    def transition_entries(self, prev, nxt):
        inner = (self.scaled_left()[prev] * self.right[nxt]).sum(-1)
        return self._mask_self(safe_log(inner), prev, nxt)

    def transition_columns(self, nxt):
        cols = safe_log(self.right[nxt] @ self.scaled_left().T)  # ... x N
        if self.self_transitions:
            return cols
        return cols.scatter(-1, nxt.unsqueeze(-1), float("-inf"))

    def transition_rows(self, prev):
        rows = safe_log(self.scaled_left()[prev] @ self.right.T)
        if self.self_transitions:
            return rows
        return rows.scatter(-1, prev.unsqueeze(-1), float("-inf"))

    def state_prior(self, lengths=None):
        mass = self.right @ self.scaled_left().sum(0)  # sum_i c_i L_i . R_j
        if not self.self_transitions:
            mass = mass - self.scaled_diagonal()
        return safe_log(mass.clamp_min(0)).expand(self.batch, self.num_states)

    def one_frame_chain(self, probe: Tensor | None = None) -> LowRankChain | None:
        if self.max_duration > 1 or not self.self_transitions:  # the chain has no diagonal removed
            return None
        unary = self._one_frame_unary(probe)
        return LowRankChain(unary, self.left, self.right, self.init, normalize=self.normalize)

    def dense(self) -> DenseSemiMarkov:
        trans = safe_log(self.scaled_left() @ self.right.T)
        if not self.self_transitions:
            eye = torch.eye(self.num_states, dtype=torch.bool, device=trans.device)
            trans = trans.masked_fill(eye, float("-inf"))
        return DenseSemiMarkov(self.unary, trans, self.duration, self.init)


class RankSpaceSemiMarkov(SemiMarkovFactors):
    """The HSMM with a CPD of its merged transition-duration-emission factor (rank-space HSMM).

    p(z_k = j, d_k = d, x_seg | z_{k-1} = i) = sum_r U[i, r] V[j, r] exp(duration[r, d-1] + E_r(s, d)),
    E_r(s, d) = sum of emission[b, t, r] over the segment's frames; z_0 ~ start is summed out.
    Self-transitions are always allowed (docs/semimarkov-rank-space.md says why).

    Args:
        start: N or B x N non-negative weights of the virtual state before the first segment.
        U: N x R non-negative (previous state -> rank).
        V: N x R non-negative (rank -> next state).
        duration: R x D or B x R x D log-probabilities of the duration given the rank.
        emission: B x T x R log-likelihoods of each frame given the rank.
    """

    native_backend = Backend.RANK_SPACE

    def __init__(self, start: Tensor, U: Tensor, V: Tensor, duration: Tensor, emission: Tensor):
        start, U, V = as_dp_tensor("start", start), as_dp_tensor("U", U), as_dp_tensor("V", V)
        duration, emission = as_dp_tensor("duration", duration), as_dp_tensor("emission", emission)
        check_same_dtype(type(self).__name__, start=start, U=U, V=V, duration=duration, emission=emission)
        self.emission = _check_frames("emission", emission, "R")
        B, T, R = self.emission.shape
        check_shape("U", U, (None, R), "N x R (R: emission's last dimension; U or emission is off)")
        N = U.shape[0]
        check_shape("V", V, (N, R), "N x R")
        check_nonnegative("U", U)
        check_nonnegative("V", V)
        if start.dim() == 1:
            check_shape("start", start, (N,), "N")
            start = start.expand(B, N)
        else:
            check_shape("start", start, (B, N), "B x N")
        check_nonnegative("start", start)
        self.duration = _check_duration(duration, B, R, "R")
        if out_of_range(U, V):  # a rank node's factors U[:, r] V[:, r] beyond float32's range
            (U, log_u), (V, log_v) = column_scaled(U), column_scaled(V)
            self.duration = self.duration + (log_u + log_v).unsqueeze(-1)  # one rank node a segment
        self.start, self.U, self.V = start, U, V

    @property
    def batch(self) -> int:
        return self.emission.shape[0]

    @property
    def max_length(self) -> int:
        return self.emission.shape[1]

    @property
    def num_states(self) -> int:
        return self.U.shape[0]

    @property
    def rank(self) -> int:
        return self.U.shape[1]

    @property
    def max_duration(self) -> int:
        return self.duration.shape[-1]

    @property
    def device(self):
        return self.emission.device

    def cumulative(self) -> Cumulative:
        return cumulative(self.emission)

    def log_rank_weights(self) -> Tensor:
        """log w_r(s, d): B x T x D x R (-inf where the segment ends past T); small sizes only."""
        emissions = segment_emissions(self.cumulative(), self.max_duration, self.emission.dtype)
        return emissions + self.duration.transpose(1, 2).unsqueeze(1)

    def segment_scores(self, b, s, d, prev, z):
        dur = self.duration[b]  # ... x R x D
        index = (d - 1).view(*d.shape, 1, 1).expand(*d.shape, self.rank, 1)
        emit = self.cumulative().span((b, s + d), (b, s), self.emission.dtype)
        logw = emit + dur.gather(-1, index).squeeze(-1)  # ... x R
        first_rank = self.start[b] @ self.U  # ... x R
        prev_rank = torch.where((prev < 0).unsqueeze(-1), first_rank, self.U[prev.clamp_min(0)])
        return log_inner(prev_rank, self.V[z], logw)

    def one_frame_chain(self, probe: Tensor | None = None) -> RankSpaceChain | None:
        if self.max_duration > 1 or probe is not None:  # a probe is over states: the chain's DP is over ranks
            return None
        emission = self.emission + self.duration[..., 0].unsqueeze(1)  # B x T x R
        return RankSpaceChain(self.start, self.U, self.V, emission)

    def dense(self) -> EdgeSemiMarkov:
        """The per-segment form: B x (T-1) x D x N x N (tiny sizes only), in log space: the rank
        weights may spread over hundreds of nats."""
        w = self.log_rank_weights()  # B x T x D x R
        right = Matrix.from_prob(self.V.T)
        first = log_feature_matmul((self.start @ self.U).unsqueeze(1), w[:, 0], right)  # B x D x N
        edge = log_feature_matmul(self.U, w[:, 1:].unsqueeze(-2), right)  # B x (T-1) x D x N x N
        return EdgeSemiMarkov(first, edge)


class EdgeSemiMarkov(SemiMarkovFactors):
    """General per-segment log-potentials: the first segment apart, then one score per start,
    duration, previous and next state (``from_torch_struct`` converts torch-struct's SemiMarkovCRF
    edges, whose layout differs).

    Args:
        first: B x D x N, seg(0, d, -, j) at [b, d-1, j].
        edge: B x (T-1) x D x N x N, seg(s, d, i, j) at [b, s-1, d-1, i, j] for s = 1..T-1.
    Entries of segments that would end past T are ignored.
    """

    native_backend = Backend.EXACT

    def __init__(self, first: Tensor, edge: Tensor):
        first, edge = as_dp_tensor("first", first), as_dp_tensor("edge", edge)
        check_same_dtype(type(self).__name__, first=first, edge=edge)
        if first.dim() != 3 or 0 in first.shape:
            raise ValueError(f"first must have shape B x D x N with D, N >= 1, got {tuple(first.shape)}")
        B, D, N = first.shape
        if edge.dim() != 5:
            raise ValueError(f"edge must have shape B x (T-1) x D x N x N, got {tuple(edge.shape)}")
        check_shape("edge", edge, (B, None, D, N, N), "B x (T-1) x D x N x N (B, D, N from first)")
        check_finite("first", first)
        check_finite("edge", edge)
        self.first, self.edge = first, edge

    @classmethod
    def from_torch_struct(cls, edge: Tensor) -> EdgeSemiMarkov:
        """The distribution of torch-struct's ``SemiMarkovCRF(edge)``: edge B x T x (D+1) x N x N, the
        segment of duration d starting at frame s with state z after state z' at [b, s, d, z, z']
        (d = 0 unused; the first segment's z' a free start state, summed out here: log Z and the
        marginals are torch-struct's, while its ``max`` also maximizes over that state). Its lengths
        count boundaries: pass ``lengths - 1`` (frames) with the result."""
        edge = as_dp_tensor("edge", edge)
        if edge.dim() != 5 or edge.shape[2] < 2 or edge.shape[-1] != edge.shape[-2] or 0 in edge.shape:
            raise ValueError(
                f"torch-struct's edge must have shape B x T x (D+1) x N x N with T, D, N >= 1, got "
                f"{tuple(edge.shape)}"
            )
        first = logsumexp(edge[:, 0, 1:], -1)  # B x D x N: the free start state summed out (-inf safe)
        return cls(first, edge[:, 1:, 1:].transpose(-1, -2))

    @property
    def batch(self) -> int:
        return self.first.shape[0]

    @property
    def max_length(self) -> int:
        return self.edge.shape[1] + 1

    @property
    def num_states(self) -> int:
        return self.first.shape[2]

    @property
    def max_duration(self) -> int:
        return self.first.shape[1]

    @property
    def device(self):
        return self.first.device

    def dense(self) -> EdgeSemiMarkov:
        return self

    def segment_scores(self, b, s, d, prev, z):
        first = self.first[b, d - 1, z]
        if self.max_length == 1:
            return first
        edge = self.edge[b, (s - 1).clamp_min(0), d - 1, prev.clamp_min(0), z]
        return torch.where(prev < 0, first, edge)
