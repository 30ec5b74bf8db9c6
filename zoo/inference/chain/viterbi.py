"""Viterbi on a chain: the max-plus forward, then the walk back through its values.

Max-plus only adds log-potentials (no exp), so the forward runs on them directly in the input's dtype,
shifted to a max of 0 every ``SHIFT_EVERY`` positions (a sequence's values up to a constant are all the
walk back needs): unshifted, they grow with the position until float32 rounds away the differences the
paths are chosen by (at T = 100,000 the path scored 10 nats below the best). Each step is one broadcast
sum and one ``amax``, in chunks of columns reduced along their contiguous last axis
(``semiring.max_plus``). The walk back recomputes each best predecessor from the kept values and one
column of the transition (B x N a position): a reduction that also returns its indices (``max``,
``argmax``) runs 5-15x slower than ``amax`` on a CPU, so the B x N x N one does not. A step takes three
to four tensor operations and no host synchronization, what decides the time at tagging sizes
(N <= 64). Past a sequence's length the forward goes on through the padding unmasked (nothing reads
those values); the walk back starts each sequence at its own last position.

With few states and long sequences (``viterbi_scan.pays``) the dense form goes instead to
``viterbi_scan``: the same forward and walk back in O(log T) rounds of tensor operations.

A dense chain's transition is read as it is. A low-rank chain whose transition changes with the position
(rank weights w_t: the rank-space HMM's emissions) is streamed: each step forms its B x N x N log Psi_t
a block of columns at a time by a guarded product (``logmatmul``), and the walk back one column of it,
so memory stays O(B N R + T B N) where the dense form would take B x (T-1) x N x N (16 GB at N = 4096,
B = 8, T = 32). Every other container runs on its dense form (an N x N transition shared by all steps).

Shapes: B batch, T positions, N states, R rank; ``lengths`` (B,), 1 <= length <= T.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from zoo.inference.chain import viterbi_scan
from zoo.inference.chain.factors import ChainFactors, DenseChain, LowRankChain, RankSpaceChain
from zoo.inference.chain.scaled import check_alive
from zoo.inference.logmatmul import Matrix, log_matmul
from zoo.inference.numerics import safe_log
from zoo.inference.semiring import max_plus

SHIFT_EVERY = 32  # positions between the forward's shifts (two kernels each)
STREAM_CHUNK = 2**22  # elements of one streamed block of columns (B x columns x max(N, R); 16 MiB in float32)

# best(t, values) -> B x N: max_i values[:, i] + log Psi_t(i, j), the step into position t (0-based);
# into(t, state) -> B x N: log Psi_t(:, state), the column into position t of each sequence's state.
Step = Callable[[int, Tensor], Tensor]


def dense_steps(chain: DenseChain) -> tuple[Step, Step]:
    """The steps of a dense chain, on its transition as given (shared N x N, or B x (T-1) x N x N)."""
    columns = chain.transition.T.contiguous() if chain.shared else chain.transition.transpose(-1, -2)
    batch = torch.arange(chain.batch, device=chain.unary.device)

    def best(t: int, values: Tensor) -> Tensor:
        return max_plus(values, columns if chain.shared else columns[:, t - 1])  # [..., j, i] = log Psi

    def into(t: int, state: Tensor) -> Tensor:
        return columns[state] if chain.shared else chain.transition[batch, t - 1, :, state]

    return best, into


def streamed_steps(chain: LowRankChain) -> tuple[Step, Step]:
    """The steps of a low-rank chain with per-position rank weights, log Psi_t formed a block of columns
    at a time: [b, j, i] = log c_i + log sum_r R[j, r] w_t[b, r] L[i, r], O(B N^2 R) a step."""
    B, N, R = chain.batch, chain.num_states, chain.rank
    log_right, left = safe_log(chain.right), Matrix.from_prob(chain.left.T)  # N x R, R x N
    log_scale = chain.log_scale
    chunk = max(1, STREAM_CHUNK // (B * max(N, R)))

    def best(t: int, values: Tensor) -> Tensor:
        weights = chain.log_rank_weights[:, t - 1].unsqueeze(-2)  # B x 1 x R
        scaled = (values + log_scale).unsqueeze(-2)  # B x 1 x N
        out = [
            (scaled + log_matmul(log_right[j : j + chunk] + weights, left)).amax(-1)
            for j in range(0, N, chunk)
        ]
        return torch.cat(out, -1) if len(out) > 1 else out[0]

    columns = chain.transition_columns()

    def into(t: int, state: Tensor) -> Tensor:
        return columns(t + 1, state.unsqueeze(0))[0]

    return best, into


def best_paths(chain: ChainFactors, lengths: Tensor) -> Tensor:
    """The best state sequence of each chain: B x T long, -1 past each length (on ties, the walk back
    takes the first best predecessor). A sequence with no finite path raises."""
    with torch.no_grad():
        if isinstance(chain, RankSpaceChain):
            chain = chain.low_rank_view()
        if isinstance(chain, LowRankChain) and chain.log_rank_weights is not None:
            best, into = streamed_steps(chain)
        else:
            chain = chain.dense()
            if viterbi_scan.pays(chain.batch, chain.max_length, chain.num_states):
                return viterbi_scan.scan_paths(chain, lengths)
            best, into = dense_steps(chain)
        unary = chain.folded_unary().unbind(1)
        T = chain.max_length
        values = [unary[0]]
        for t in range(1, T):  # past a length the values go on through the padding: nothing reads them
            values.append(best(t, values[-1]) + unary[t])
            if t % SHIFT_EVERY == 0:  # the paths depend on each position's values up to a constant
                values[-1] = viterbi_scan.shifted(values[-1], -1)
        ragged = bool((lengths < T).any())
        if ragged:
            last = torch.stack(values, 1)[torch.arange(chain.batch, device=lengths.device), lengths - 1]
            keep = (torch.arange(T, device=lengths.device) < lengths.unsqueeze(-1)).unsqueeze(-1).unbind(1)
        check_alive((last if ragged else values[-1]).amax(-1))
        state = values[-1].argmax(-1)
        states = [state]
        for t in range(T - 2, -1, -1):
            logits = values[t] + into(t + 1, state)
            if ragged:  # at a sequence's last position its best state; past it, any
                logits = torch.where(keep[t + 1], logits, values[t])
            state = logits.argmax(-1)
            states.append(state)
        states = torch.stack(states[::-1], 1)
        valid = torch.arange(T, device=lengths.device) < lengths.unsqueeze(-1)
        return torch.where(valid, states, -1)
