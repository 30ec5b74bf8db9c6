"""Viterbi in O(log T) rounds of tensor operations, for chains with few states.

The step-by-step Viterbi (``viterbi.best_paths``) runs a few tensor operations per position; with few
states and long sequences (a Gaussian HMM of 3 to 8 states over thousands of frames) their fixed cost,
not arithmetic, decides its time. Here the max-plus forward is a parallel prefix: the N x N step
matrices M_t[i, j] = log Psi_t(i, j) + unary_t(j) are multiplied in pairs (max-plus), the prefix of the
pairs is found the same way, and every other prefix is one more vector-matrix step: O(log T) rounds,
O(T N^3) work. The walk back is then parallel too: every position's best predecessor of every state is
one reduction, and the composition of those maps from each position to the end (pointer jumping, one
gather a round) gives each position's state from the last one.

Max-plus only adds and compares log-potentials, so the values are the step-by-step forward's up to the
order of the additions (round-off); ties go to the first best predecessor, as there. Past a sequence's
length every step is the max-plus identity, so its last values stay those at its length.

Shapes: B batch, T positions, N states; ``lengths`` (B,), 1 <= length <= T.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain.factors import DenseChain
from zoo.inference.chain.scaled import check_alive

SCAN_MIN_LENGTH = 128  # below, the O(log T) rounds' fixed cost is not repaid
SCAN_WORK = 4096  # most B x N^2 x max(N, 8) (the scan's work a position, in elements) where it pays
SCAN_ELEMENTS = 2**24  # most B x T x N^2: the step matrices (64 MiB in float32)


def pays(batch: int, length: int, states: int) -> bool:
    """Whether the scan beats the step-by-step Viterbi (measured on a CPU, one thread:
    ``scripts/bench_decoding.py``): long sequences, few states, a small batch."""
    work = batch * states**2 * max(states, 8)
    return length >= SCAN_MIN_LENGTH and work <= SCAN_WORK and batch * length * states**2 <= SCAN_ELEMENTS


def max_plus_product(left: Tensor, right: Tensor) -> Tensor:
    """max_k left[..., i, k] + right[..., k, j]: ... x I x K times ... x K x J -> ... x I x J, one
    sum and one maximum per k, in place (a broadcast sum reduced over its short axis is 4-14x slower)."""
    out = left[..., :, :1] + right[..., :1, :]
    term = torch.empty_like(out)
    for k in range(1, left.shape[-1]):
        torch.add(left[..., :, k : k + 1], right[..., k : k + 1, :], out=term)
        torch.maximum(out, term, out=out)
    return out


def first_argmax(scores: Tensor) -> Tensor:
    """The first index of the maximum over the second-to-last axis: ... x I x J -> ... x J (long),
    one comparison per i (``argmax`` over a short axis is slower than the whole rest of the scan)."""
    best, index = scores[..., 0, :], torch.zeros_like(scores[..., 0, :], dtype=torch.long)
    for i in range(1, scores.shape[-2]):
        better = scores[..., i, :] > best
        best = torch.where(better, scores[..., i, :], best)
        index.masked_fill_(better, i)
    return index


def prefix_maxima(first: Tensor, steps: Tensor) -> Tensor:
    """The max-plus forward values after each step: first B x N, steps B x L x N x N -> B x L x N,
    [:, l] = first (x) steps[:, 0] (x) ... (x) steps[:, l]."""
    L = steps.shape[1]
    if L == 1:
        return max_plus_product(first.unsqueeze(-2), steps[:, 0])
    pairs = max_plus_product(steps[:, 0 : L - 1 : 2], steps[:, 1::2])  # steps 2k and 2k+1 at once
    after_odd = prefix_maxima(first, pairs)  # the values after steps 1, 3, 5, ...
    before_even = torch.cat([first.unsqueeze(1), after_odd[:, : (L - 1) // 2]], 1)
    after_even = max_plus_product(before_even.unsqueeze(-2), steps[:, 0::2]).squeeze(-2)
    out = steps.new_empty(steps.shape[:-1])
    out[:, 0::2], out[:, 1::2] = after_even, after_odd
    return out


def scan_paths(chain: DenseChain, lengths: Tensor) -> Tensor:
    """The best state sequence of each chain, B x T long, -1 past each length (ties: the first best
    predecessor). A sequence with no finite path raises ``ZeroProbability``."""
    unary = chain.folded_unary()
    B, T, N = unary.shape
    positions = torch.arange(T, device=unary.device)
    if T == 1:
        check_alive(unary[:, 0].amax(-1))
        return unary[:, 0].argmax(-1, keepdim=True)
    transition = chain.transition  # N x N, or B x (T-1) x N x N
    live = (positions[1:] < lengths.unsqueeze(-1)).view(B, T - 1, 1, 1)  # the step into position t
    identity = torch.full((N, N), float("-inf"), dtype=unary.dtype, device=unary.device)
    identity.fill_diagonal_(0.0)
    steps = torch.where(live, transition + unary[:, 1:].unsqueeze(-2), identity)
    values = torch.cat([unary[:, :1], prefix_maxima(unary[:, 0], steps)], 1)  # B x T x N
    check_alive(values[:, -1].amax(-1))
    states = torch.arange(N, device=unary.device).expand(B, T - 1, N)
    # pointers[:, t, j]: the best state at t before state j at t + 1 (itself past the length)
    pointers = torch.where(live[..., 0], first_argmax(values[:, :-1].unsqueeze(-1) + transition), states)
    hop = 1
    while hop < T - 1:  # pointers[:, t]: the map from the state at min(t + hop, T - 1) to the one at t
        ahead = torch.cat([pointers[:, hop:], states[:, :hop]], 1)
        pointers = pointers.gather(-1, ahead)
        hop *= 2
    last = values[:, -1].argmax(-1)  # B
    path = torch.cat([pointers.gather(-1, last.view(B, 1, 1).expand(B, T - 1, 1))[..., 0], last[:, None]], 1)
    return torch.where(positions < lengths.unsqueeze(-1), path, -1)
