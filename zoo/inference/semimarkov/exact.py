"""Exact semi-Markov DPs.

* ``DenseSemiMarkov``: the factorized forward of ``forward.py`` with a dense transition step,
  O(T (D N + N^2)) time, O(T D N) memory for the backward (never B x T x D x N x N); Viterbi with the
  max-product step (``viterbi.best_segmentations``); sampling by walking back over (duration, previous
  state). With D = 1 (every segment one frame: an HMM, e.g. a Gaussian HMM) log Z and Viterbi run on
  the linear chain it equals (``one_frame_chain``), 3-16x faster than the D-window forward; so does
  the low-rank HSMM's and the rank-space HSMM's log Z.
* ``EdgeSemiMarkov`` (general per-segment potentials, e.g. the materialized rank-space model): the
  log-space forward over (duration, previous state) pairs, O(T D N^2); tiny sizes only.
"""

from __future__ import annotations

import torch
from torch import Tensor

import zoo.inference.semimarkov.forward as forward_module
from zoo.inference.engines import register_engine
from zoo.inference.kinds import NATIVE
from zoo.inference.numerics import at_positions, needs_grad
from zoo.inference.semimarkov.engine import SemiMarkovEngine, on_one_frame_chain, one_frame_log_partition
from zoo.inference.semimarkov.factors import (
    DenseSemiMarkov,
    EdgeSemiMarkov,
    SemiMarkovFactors,
    cumulative,
)
from zoo.inference.semimarkov.forward import (
    Problem,
    backtrack,
    factorized_choice,
    forward,
    shift_window,
    unshifted,
)
from zoo.inference.semimarkov.viterbi import best_segmentations
from zoo.inference.semiring import Entropy, Log, MatrixStep, Max, Semiring


def dense_problem(f: DenseSemiMarkov, second_order: bool = False) -> Problem:
    """The forward's operands for a dense HSMM (``second_order``: for a double backward)."""
    step = MatrixStep(f.transition, second_order=second_order)
    return Problem(cumulative(f.unary), f.duration, f.init, step)


def dense_log_partition(
    f: DenseSemiMarkov, lengths: Tensor, probe: Tensor | None = None, second_order: bool = False
) -> Tensor:
    log_z = one_frame_log_partition(f, lengths, probe)
    return forward(dense_problem(f, second_order), lengths, probe)[0] if log_z is None else log_z


def dense_argmax(f: DenseSemiMarkov, lengths: Tensor) -> tuple[Tensor, Tensor]:
    # D = 1: a segment starts at every frame, so the segmentation is the best state path
    best = on_one_frame_chain(f, lengths, lambda chain: (chain.max_score, chain.argmax))
    return best_segmentations(dense_problem(f), lengths, f.transition_columns) if best is None else best


def factorized_sample(problem: Problem, columns, lengths, n, temperature, generator, max_duration):
    """Forward filtering, backward sampling (hard when temperature is None, else also relaxed)."""
    fw = forward(problem, lengths)
    choice = factorized_choice(problem, fw.ends, columns, fw.offsets)
    return backtrack(fw.ends, problem.final, choice, lengths, max_duration, n, True, temperature, generator)


# --- the general per-segment form ---------------------------------------------------------------------
def edge_forward(f: EdgeSemiMarkov, lengths: Tensor, semiring: Semiring = Log, first=None, edge=None):
    """The semiring's answer (B,): log Z, the best score or the entropy (``zoo.inference.semiring``),
    ends ... x B x (T+1) x N: ends[..., t, j] = the semiring's total over the prefixes whose last
    segment ends at frame t with state j, and, in ``Log`` and ``Max``, offsets B x (T+1) float64: the
    values are shifted as the forward goes (``forward.SHIFT_EVERY``, as the factorized forward's),
    ends[:, t] + offsets[:, t] is the total (None in ``Entropy``, whose pairs run in float64)."""
    first = f.first if first is None else first
    edge = f.edge if edge is None else edge
    B, D, N = first.shape
    T = f.max_length
    into = edges_by_end(edge, D, T)
    ends = [semiring.lift(first.new_full((B, N), float("-inf")))]
    offset = first.new_zeros(B, 1, dtype=torch.float64) if semiring is not Entropy else None
    offsets, pins = [offset], first.new_zeros(B, 1)
    for t in range(1, T + 1):
        parts = []
        if t <= D:  # a first segment: its score in the frame of the shifted values (the shifts' gradient too)
            start = first[:, t - 1] if offset is None else first[:, t - 1] - offset.to(first.dtype) - pins
            parts.append(semiring.lift(start))
        n = min(D, t - 1)
        if n >= 1:
            x = semiring.mul(torch.stack(ends[t - n : t], -2).unsqueeze(-1), into[t][:, D - n :])
            parts.append(semiring.sum(x.flatten(-3, -2), -2))  # over (duration, previous state)
        ends.append(semiring.sum(torch.stack(parts, -2), -2))
        offsets.append(offset)
        if offset is not None and t % forward_module.SHIFT_EVERY == 0 and t < T:  # what later frames read
            shift = shift_window(ends, D, lengths > t - D)  # (a log Z reads the ends at its length)
            offset, pins = offset + shift.value, pins + shift.pin
            for i in range(max(1, len(offsets) - D), len(offsets)):
                offsets[i] = offset  # those ends are in the new frame (frame 0, a first segment's, stays 0)
    answer = semiring.result(semiring.sum(at_positions(ends, lengths), -1))  # O(T) differentiated again
    if offset is None:
        return answer, torch.stack(ends, -2), None
    at_length = at_positions(offsets, lengths).squeeze(-1)
    return unshifted(answer, at_length, pins), torch.stack(ends, -2), torch.cat(offsets, -1)


def edges_by_end(edge: Tensor, D: int, T: int) -> list[Tensor]:
    """The edge scores by the frame their segment ends at: [t] B x D x N x N, row k the segment of
    duration D - k ending at frame t (from frame t - D + k; rows before frame 1 hold junk), made by one
    gather for all frames: a frame's own indexing of the whole B x (T-1) x D x N x N edge wrote, in
    the backward, a zero gradient of all of it (O(T^2 D N^2))."""
    if edge.shape[1] == 0:
        return []
    t = torch.arange(T + 1, device=edge.device).unsqueeze(-1)
    duration = torch.arange(D, 0, -1, device=edge.device)  # D .. 1
    start = (t - duration - 1).clamp_min(0)  # the previous segment's end, as edge's index 1
    return edge[:, start, duration - 1].unbind(1)


def edge_choice(f: EdgeSemiMarkov, ends: Tensor, offsets: Tensor):
    """``choice(t, j)`` for ``backtrack`` on the per-segment form (``offsets``: ``edge_forward``'s)."""
    B, D, N = f.first.shape
    dev = f.first.device
    dd = torch.arange(1, D + 1, device=dev)

    def choice(t: Tensor, j: Tensor) -> Tensor:
        S = t.shape[0]
        b = torch.arange(B, device=dev).view(1, B, 1).expand(S, B, D)
        s = t.unsqueeze(-1) - dd
        jj = j.unsqueeze(-1).expand(S, B, D)
        first = f.first[b, dd - 1, jj]
        slot0 = torch.arange(N, device=dev) == 0
        logits = torch.where(slot0, first.unsqueeze(-1), float("-inf"))
        if f.edge.shape[1] > 0:
            sc = s.clamp(1, f.edge.shape[1])
            prev = ends[b, sc] + f.edge[b, sc - 1, dd - 1, :, jj]  # S x B x D x N
            logits = torch.where((s > 0).unsqueeze(-1), prev, logits)
        # each frame's ends in the frame of t (a first segment's offset is 0)
        shift = offsets[b, s.clamp_min(0)] - offsets[b[..., 0], t].unsqueeze(-1)  # S x B x D
        logits = logits + shift.to(logits.dtype).unsqueeze(-1)
        return torch.where((s >= 0).unsqueeze(-1), logits, float("-inf"))

    return choice


def edge_log_partition(f: EdgeSemiMarkov, lengths: Tensor, probe: Tensor | None = None) -> Tensor:
    first, edge = f.first, f.edge
    if probe is not None:  # probe B x T x D x N: segment (s, d, j)
        first = first + probe[:, 0]
        edge = edge + probe[:, 1:].unsqueeze(-2)
    return edge_forward(f, lengths, first=first, edge=edge)[0]


@register_engine("semimarkov", "exact")
class ExactEngine(SemiMarkovEngine):
    """The exact semi-Markov forward; accepts every container by materializing it (``dense()``)."""

    name = "exact"
    factor_types = (SemiMarkovFactors,)
    capabilities = {
        "log_partition": (NATIVE, "O(T (D N + N^2)): log-sum-exp over the D-window, guarded "
                          "transition product; rank-space materialized per segment: O(T D N^2)"),
        "segment_marginals": (NATIVE, "autograd of log Z w.r.t. a segment probe; D = 1 without a "
                              "gradient: the chain's marginals"),
        "marginals": (NATIVE, "segment marginals spread over their frames (one cumsum)"),
        "entropy": (NATIVE, "the forward in the entropy semiring (Alg. 3 over segments), "
                    "differentiable"),
        "log_prob": (NATIVE, "score - log Z"),
        "argmax": (NATIVE, "semi-Markov Viterbi"),
        "sample": (NATIVE, "forward filtering, backward sampling of (duration, previous state)"),
        "rsample": (NATIVE, "Gumbel-softmax backward sampling"),
    }

    def prepare(self, factors, lengths=None):
        return super().prepare(factors, lengths).dense()

    def log_partition(self, factors, lengths, probe=None, second_order=False):
        if isinstance(factors, EdgeSemiMarkov):  # log-sum-exp throughout: twice differentiable as it is
            return edge_log_partition(factors, lengths, probe)
        return dense_log_partition(factors, lengths, probe, second_order)

    def segment_marginals(self, factors, lengths):
        """D = 1 without a gradient: the marginals of the chain it equals (long chains of few states in
        chunks: ``zoo.inference.chain.chunked_marginals``), B x T x 1 x N; else the gradient of log Z
        w.r.t. a segment probe."""
        if isinstance(factors, DenseSemiMarkov) and not needs_grad(*vars(factors).values()):
            found = on_one_frame_chain(factors, lengths, lambda chain: chain.marginals)
            if found is not None:
                return found.unsqueeze(2)
        return super().segment_marginals(factors, lengths)

    def entropy(self, factors, lengths):
        """In float64 and returned in the factors' dtype: the forward's log values are of the size of
        log Z (1e5 nats for long Gaussian HSMMs), so float32 differences inside the D-window lose
        about eps |log Z| each (docs/semimarkov-api.md, "Numerics")."""
        if isinstance(factors, EdgeSemiMarkov):
            wide = EdgeSemiMarkov(factors.first.double(), factors.edge.double())
            return edge_forward(wide, lengths, Entropy)[0].to(factors.first.dtype)
        return forward(dense_problem(factors.double()), lengths, semiring=Entropy)[0].to(factors.unary.dtype)

    def argmax(self, factors, lengths):
        if isinstance(factors, EdgeSemiMarkov):
            with torch.no_grad():
                score, ends, offsets = edge_forward(factors, lengths, Max)
                seg, _ = backtrack(
                    ends, None, edge_choice(factors, ends, offsets), lengths, factors.max_duration, 1,
                    noise=False,
                )
            return score, seg[0]
        return dense_argmax(factors, lengths)

    def _sample(self, factors, lengths, n, temperature, generator):
        if isinstance(factors, EdgeSemiMarkov):
            _, ends, offsets = edge_forward(factors, lengths)
            choice = edge_choice(factors, ends, offsets)
            D = factors.max_duration
            return backtrack(ends, None, choice, lengths, D, n, True, temperature, generator)
        return factorized_sample(
            dense_problem(factors), factors.transition_columns, lengths, n, temperature, generator,
            factors.max_duration,
        )

    def sample(self, factors, lengths, n, generator=None):
        with torch.no_grad():
            return self._sample(factors, lengths, n, None, generator)[0]

    def rsample(self, factors, lengths, temperature, generator=None):
        return self._sample(factors, lengths, 1, temperature, generator)[1][0]
