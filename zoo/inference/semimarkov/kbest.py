"""The k best segmentations of a semi-Markov chain (k-best Viterbi, as the chains' ``topk``): n-best
segmentations for reranking, or the runners-up of a segmenter.

The max-plus forward keeps, for each state and frame, the k best scores of the segmentations of the
frames before it whose last segment has that state (B x N x k) and, for each, which (duration, previous
state, its rank) it extends. In float64: over thousands of frames the scores reach 1e5-1e6 nats, where
float32 rounds away the differences between runners-up.
- Factorized HSMMs (dense and low-rank containers: ``DenseSemiMarkov``): a transition stage (the k
  best of the N k ways into each state at a boundary) and a segment stage (the k best of the D k
  durations and ranks), O(T N k (N + D)).
- Per-segment forms (rank-space and edge containers: ``EdgeSemiMarkov``, small sizes): one stage over
  D N k candidates, O(T D N^2 k).
The walk back from each sequence's k best (state, rank) pairs at its last frame gives k distinct
segmentations, best first.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from zoo.inference.semimarkov.factors import DenseSemiMarkov, EdgeSemiMarkov, segment_emissions

NEG_INF = float("-inf")


class KBest(NamedTuple):
    """``SemiMarkovChain.topk``'s answer: ``scores`` k x B, each segmentation's score summed from the
    potentials (differentiable, as ``max_score``; -inf for a rank without one) and ``segmentations``
    k x B x T (the state at each segment's start, -1 elsewhere; -1 throughout for a rank without one)."""

    scores: Tensor
    segmentations: Tensor


def k_best(factors, lengths: Tensor, k: int) -> KBest:
    """The k best segmentations of any semi-Markov container (on its dense form) with their scores."""
    from zoo.inference.semimarkov.engine import segmentation_score  # it builds on the engines

    dense = factors.dense()
    search = _factorized if isinstance(dense, DenseSemiMarkov) else _per_segment
    best = search(dense, lengths, k)
    found = best[..., 0] >= 0  # k x B
    scores = segmentation_score(factors, torch.where(found.unsqueeze(-1), best, best[:1]), lengths)
    return KBest(torch.where(found, scores, NEG_INF), best)


def _factorized(f: DenseSemiMarkov, lengths: Tensor, k: int) -> Tensor:
    with torch.no_grad():
        B, T, N, D = f.batch, f.max_length, f.num_states, f.max_duration
        emit = segment_emissions(f.cumulative(), D, torch.float64)  # B x T x D x N, [b, s, d-1, j]
        duration = f.duration.double().transpose(1, 2)  # B x D x N
        transition = f.transition.double()
        enter = [_ranked(f.init.double(), k)]  # per boundary s: B x N x k, the best ways into a segment at s
        enter_from, ends, end_from = [None], [None], [None]  # pointers: (i, r) into s; (d, r) ending at t
        for t in range(1, T + 1):
            n = min(D, t)
            # candidates (d, r) of the segment [t - d, t): B x N x n x k
            cand = torch.stack([enter[t - d] + (duration[:, d - 1] + emit[:, t - d, d - 1]).unsqueeze(-1)
                                for d in range(1, n + 1)], 2)  # fmt: skip
            best, at = cand.reshape(B, N, n * k).topk(k, -1)  # n k >= k candidates
            ends.append(best), end_from.append(at)
            if t < T:
                into = ends[t].unsqueeze(2) + transition.view(1, N, N, 1)  # B x N(i) x N(j) x k
                best, at = into.transpose(1, 2).reshape(B, N, N * k).topk(k, -1)
                enter.append(best), enter_from.append(at)
        ending = torch.stack(end_from[1:], 1)  # B x T x N x k: (d, r) of the segment ending at t
        entering = torch.stack(enter_from[1:], 1) if T > 1 else None  # B x (T-1) x N x k: (i, r) into s
        walk = _Walk(_at_lengths(ends, lengths), lengths, k, T)
        for t, state, rank in walk:
            pointer = ending[walk.rows, t - 1, state, rank]
            start, rank = t - (pointer // k + 1), pointer % k
            walk.label(start, state)
            if entering is not None:
                pointer = entering[walk.rows, (start - 1).clamp_min(0), state, rank]
                state, rank = pointer // k, pointer % k  # used only where start > 0
            walk.step(start, state, rank)
        return walk.out


def _per_segment(f: EdgeSemiMarkov, lengths: Tensor, k: int) -> Tensor:
    with torch.no_grad():
        B, T, N, D = f.batch, f.max_length, f.num_states, f.max_duration
        first, edge = f.first.double(), f.edge.double()  # B x D x N, B x (T-1) x D x N x N
        start = torch.full((B, N, k), NEG_INF, dtype=torch.float64, device=first.device)
        start[:, 0, 0] = 0.0  # a virtual boundary at frame 0: one way out (its "state" 0, rank 0)
        ends, end_from = [start], [None]
        for t in range(1, T + 1):
            cand = []  # per duration d: B x N(i) x N(j) x k, (d, i, r) for the segment [t - d, t)
            for d in range(1, min(D, t) + 1):
                s = t - d
                if s == 0:
                    score = torch.full((B, N, N), NEG_INF, dtype=torch.float64, device=first.device)
                    score[:, 0] = first[:, d - 1]
                else:
                    score = edge[:, s - 1, d - 1]
                cand.append(ends[s].unsqueeze(2) + score.unsqueeze(-1))
            n = len(cand)
            cand = torch.stack(cand, 1).permute(0, 3, 1, 2, 4).reshape(B, N, n * N * k)  # (d, i, r) per j
            best, at = cand.topk(k, -1)
            ends.append(best), end_from.append(at)
        ending = torch.stack(end_from[1:], 1)  # B x T x N x k: (d, i, r) of the segment ending at t
        walk = _Walk(_at_lengths(ends, lengths), lengths, k, T)
        for t, state, rank in walk:
            pointer = ending[walk.rows, t - 1, state, rank]
            start, rest = t - (pointer // (N * k) + 1), pointer % (N * k)
            walk.label(start, state)
            walk.step(start, rest // k, rest % k)
        return walk.out


def _ranked(first: Tensor, k: int) -> Tensor:
    """B x N x k: ``first`` (B x N) at rank 0, -inf below it."""
    out = first.new_full((*first.shape, k), NEG_INF)
    out[..., 0] = first
    return out


def _at_lengths(ends: list[Tensor | None], lengths: Tensor) -> Tensor:
    """Each sequence's B x N x k entry at its own last frame."""
    stacked = torch.stack(ends[1:], 1)  # B x T x N x k
    return stacked[torch.arange(len(lengths), device=lengths.device), lengths - 1]


class _Walk:
    """The walk back from each sequence's k best ends (``last``: B x N x k scores at its last frame),
    all k x B paths at once: iterating yields (t, state, rank) of the segments still to read, k x B
    each (t >= 1; entries of finished paths are junk), until ``step`` has brought every path to frame 0.
    ``out`` (k x B x T): the segmentations, best first; -1 throughout for a rank without a finite score."""

    def __init__(self, last: Tensor, lengths: Tensor, k: int, T: int):
        B, N, _ = last.shape
        final, at = last.reshape(B, N * k).topk(k, -1)  # B x k
        self.rows = torch.arange(B, device=lengths.device).expand(k, B)
        self.state, self.rank = (at // k).T, (at % k).T
        self.t = lengths.expand(k, B).clone()
        self.found = torch.isfinite(final.T)  # k x B
        self.out = torch.full((k, B, T), -1, dtype=torch.long, device=lengths.device)
        self.live = self.found

    def __iter__(self):
        while True:
            self.live = self.found & (self.t > 0)
            if not bool(self.live.any()):
                return
            yield self.t.clamp_min(1), self.state, self.rank

    def label(self, start: Tensor, state: Tensor) -> None:
        """Each live path's segment starting at ``start`` has state ``state``."""
        self.out[self.live.nonzero(as_tuple=True) + (start[self.live],)] = state[self.live]

    def step(self, t: Tensor, state: Tensor, rank: Tensor) -> None:
        self.t = torch.where(self.live, t, self.t)
        self.state, self.rank = state, rank
