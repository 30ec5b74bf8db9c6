"""Viterbi in O(log T) rounds of tensor operations, for chains with few states.

The step-by-step Viterbi (``viterbi.best_paths``) runs a few tensor operations per position; with few
states and long sequences (a Gaussian HMM of 3 to 8 states over thousands of frames) their fixed cost,
not arithmetic, decides its time. Here the max-plus forward is a parallel prefix: the N x N step
matrices M_t[i, j] = log Psi_t(i, j) + unary_t(j) are multiplied in pairs (max-plus), the prefix of the
pairs is found the same way, and every other prefix is one more vector-matrix step: O(log T) rounds,
O(T N^3) work. The walk back is then parallel too: every position's best predecessor of every state is
one reduction, and the composition of those maps from each position to the end (within blocks of 16
positions, then pointer jumping over the blocks, one gather a round: ``walk_back``) gives each
position's state from the last one.

Max-plus only adds and compares log-potentials; each product of steps and each position's values are
shifted to a max of 0 (the paths depend only on each position's values up to a constant), so that they
stay of the size of the potentials' differences however long the sequence. Ties go to the first best
predecessor, as step by step. Past a sequence's length every step is the max-plus identity, so its
last values stay those at its length.

Shapes: B batch, T positions, N states; ``lengths`` (B,), 1 <= length <= T.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.chain.factors import DenseChain
from zoo.inference.chain.scaled import check_alive
from zoo.inference.numerics import NEG

SCAN_MIN_LENGTH = 128  # below, the O(log T) rounds' fixed cost is not repaid
SCAN_WORK = 4096  # most B x N^2 x max(N, 8) (the scan's work a position, in elements) where it pays
SCAN_ELEMENTS = 2**24  # most B x T x N^2: the step matrices (64 MiB in float32)
WALK_BLOCK = 16  # positions a block of the walk back (``walk_back``; 8 and 32 measured slower)


def pays(batch: int, length: int, states: int) -> bool:
    """Whether the scan beats the step-by-step Viterbi (measured on a CPU, one thread:
    ``scripts/bench_decoding.py``): long sequences, few states, a small batch."""
    work = batch * states**2 * max(states, 8)
    return length >= SCAN_MIN_LENGTH and work <= SCAN_WORK and batch * length * states**2 <= SCAN_ELEMENTS


def max_plus_product(left: Tensor, right: Tensor) -> Tensor:
    """max_k left[i, k, ...] + right[k, j, ...]: I x K x ... times K x J x ... -> I x J x ..., one sum
    and one maximum per k, in place. The matrices' own axes come first, so each operation runs along
    the long batch of them (with the batch first, a short inner axis made it 4-9x slower)."""
    out = left[:, :1] + right[:1]
    term = torch.empty_like(out)
    for k in range(1, left.shape[1]):
        torch.add(left[:, k : k + 1], right[k : k + 1], out=term)
        torch.maximum(out, term, out=out)
    return out


def first_argmax(left: Tensor, right: Tensor) -> Tensor:
    """The first index of the maximum over the first axis of ``left + right`` (I x ... each, broadcast):
    ... (long), one sum and one comparison per i into reused buffers, so that the I x ... sum is never
    formed (``argmax`` over a short axis is slower than the whole rest of the scan; forming the sum
    first made this 1.5x slower)."""
    best = left[0] + right[0]
    index = torch.zeros(best.shape, dtype=torch.long, device=best.device)
    term, better = torch.empty_like(best), torch.empty(best.shape, dtype=torch.bool, device=best.device)
    for i in range(1, left.shape[0]):
        torch.add(left[i], right[i], out=term)
        torch.gt(term, best, out=better)
        torch.maximum(best, term, out=best)
        index.masked_fill_(better, i)
    return index


def prefix_maxima(first: Tensor, steps: Tensor) -> Tensor:
    """The max-plus forward values after each step: first N x B, steps N x N x L x B -> N x L x B,
    [:, l] = first (x) steps[:, :, 0] (x) ... (x) steps[:, :, l]."""
    L = steps.shape[2]
    if L == 1:
        return max_plus_product(first[None, :, None], steps)[0]
    even, odd = steps[:, :, 0::2].contiguous(), steps[:, :, 1::2].contiguous()  # one run of L/2 x B
    pairs = shifted(max_plus_product(even[:, :, : L // 2], odd), (0, 1))  # steps 2k and 2k+1 at once
    after_odd = prefix_maxima(first, pairs)  # the values after steps 1, 3, 5, ...
    before_even = torch.cat([first[:, None], after_odd[:, : (L - 1) // 2]], 1)
    after_even = max_plus_product(before_even[None], even)[0]
    out = steps.new_empty(steps.shape[1:])
    out[:, 0::2], out[:, 1::2] = after_even, after_odd
    return shifted(out, 0)


def shifted(values: Tensor, dims: int | tuple[int, ...]) -> Tensor:
    """``values`` less their max over ``dims`` (an all -inf slice stays -inf): each position's values,
    and each product of steps, are only needed up to a constant of their own, and without the shift
    they grow with the position, so that float32 rounds away the differences the paths are chosen by
    (at T = 100,000 the path scored 4.7 nats below the best)."""
    return values - values.amax(dims, keepdim=True).clamp_min(NEG)


def scan_paths(chain: DenseChain, lengths: Tensor) -> Tensor:
    """The best state sequence of each chain, B x T long, -1 past each length (ties: the first best
    predecessor). A sequence with no finite path raises ``ZeroProbability``."""
    unary = chain.folded_unary().permute(2, 1, 0)  # N x T x B: states first, the batch last
    N, T, B = unary.shape
    positions = torch.arange(T, device=unary.device)
    if T == 1:
        check_alive(unary[:, 0].amax(0))
        return unary[:, 0].argmax(0)[:, None]
    # [i, j, t - 1, b] = log Psi_t(i, j)
    transition = chain.transition[..., None, None] if chain.shared else chain.transition.permute(2, 3, 1, 0)
    live = positions[1:, None] < lengths  # (T-1) x B: the step into position t
    identity = torch.full((N, N, 1, 1), float("-inf"), dtype=unary.dtype, device=unary.device)
    identity.diagonal().fill_(0.0)
    steps = torch.where(live, transition + unary[None, :, 1:], identity)
    values = torch.cat([unary[:, :1], prefix_maxima(unary[:, 0], steps)], 1)  # N x T x B
    check_alive(values[:, -1].amax(0))
    states = torch.arange(N, device=unary.device)[:, None, None]
    # pointers[j, t, b]: the best state at t before state j at t + 1 (itself past the length)
    pointers = torch.where(live, first_argmax(values[:, None, :-1], transition), states)
    path = walk_back(pointers, values[:, -1].argmax(0))  # T x B
    return torch.where(positions[:, None] < lengths, path, -1).T.contiguous()


def jumped(pointers: Tensor) -> Tensor:
    """Pointer jumping: pointers N x M x B ([j, m, b]: the state at m before state j at m + 1) -> the map
    from the state at M to the state at each m, N x M x B, in log2(M) rounds of one gather each."""
    N, M, B = pointers.shape
    states = torch.arange(N, device=pointers.device)[:, None, None]
    hop = 1
    while hop < M:  # pointers[:, m]: the map from the state at min(m + hop, M) to the one at m
        ahead = torch.cat([pointers[:, hop:], states.expand(N, hop, B)], 1)
        pointers = pointers.gather(0, ahead)
        hop *= 2
    return pointers


def walk_back(pointers: Tensor, last: Tensor) -> Tensor:
    """The path T x B ending in ``last`` (B,) through pointers N x (T-1) x B (``jumped``'s), in two
    levels: within blocks of ``WALK_BLOCK`` positions, each position's map from the state after its
    block (WALK_BLOCK gathers for all blocks at once), then pointer jumping over the blocks' maps, then
    one gather. Pointer jumping over every position instead read the N x T x B pointers log2(T) times
    (3.5-10x slower at T = 1,000 to 100,000)."""
    N, M, B = pointers.shape
    blocks = -(-M // WALK_BLOCK)
    states = torch.arange(N, device=pointers.device)[:, None, None]
    padded = torch.cat([pointers, states.expand(N, blocks * WALK_BLOCK - M, B)], 1)
    padded = padded.view(N, blocks, WALK_BLOCK, B)  # the identity past position M - 1
    within = [padded[:, :, -1]]  # from the state after each block to the state at each of its positions
    for k in range(WALK_BLOCK - 2, -1, -1):
        within.append(padded[:, :, k].gather(0, within[-1]))
    within = torch.stack(within[::-1], 2)  # N x blocks x WALK_BLOCK x B
    to_block = jumped(within[:, :, 0])  # [j, c]: from the state at the end to the one at block c's start
    after = torch.cat([to_block[:, 1:].gather(0, last.expand(1, blocks - 1, B))[0], last[None]])
    path = within.gather(0, after[None, :, None].expand(1, blocks, WALK_BLOCK, B))[0]
    return torch.cat([path.reshape(blocks * WALK_BLOCK, B)[:M], last[None]])
