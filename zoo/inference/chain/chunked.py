"""log Z of long chains with few states in O(L + log T) rounds of tensor operations (no gradient).

The scaled forward (``block_scaled``) runs two kernels a position, whatever the batch; with few states
and long sequences (a Gaussian HMM of 3 to 8 states over thousands of frames, hmmlearn's ground) their
fixed cost, not arithmetic, decides its time: 37 ms at B = 1, T = 10,000, N = 4. Here each sequence is
cut into a first chunk of 1 to L positions and q chunks of L, and log Z = log(a M_1 ... M_q 1), with a
the forward vector at the end of the first chunk and M_c[i, j] the log of the total score of chunk c's
paths from state i before it to state j at its end:

* the first chunks are one batched forward, and every later chunk's rows another: a forward from each
  state before the chunk, B q N chains of L positions, all of one length (``block_scaled``: its
  products by the shared matrix, its checks, and its exact guarded steps where a check fails). L
  rounds, O(T N^3) work in N-column products;
* the q matrices of each sequence are multiplied as a tree, in pairs (``log_product``), a level at
  once: log2 q rounds.

Accuracy. The chunks' forwards give ``block_scaled``'s exact log forward vectors at their ends. Each
matrix of the tree is kept in log space in float64 (a row may lie thousands of nats below another),
shifted so that its largest entry is 0, the shifts summed per sequence in float64 (each position's
largest unary is taken out first, and summed there too), so every entry stays of the size of the
potentials' differences. A product runs in probability space on
exp(a - each row's max) and exp(b - each column's max), entries at most 1, so float underflow flushes
at most K tiny from an entry; the entries below K tiny / eps (``zoo.inference.logmatmul.threshold``)
are recomputed by a log-sum-exp over their K terms, -inf included. A chunk with no path at all from
some state before it (forbidden states) makes ``block_scaled`` raise for that row: such chains take the
plain forward.

Shapes: B batch, T positions, N states; the tree's matrices are stored states first, N x N x M, the M
matrices last, so that each operation runs along all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.inference.chain import block_scaled, scaled
from zoo.inference.chain.factors import DenseChain
from zoo.inference.logmatmul import threshold
from zoo.inference.numerics import NEG, detached_max, logsumexp

CHUNK = 32  # L, the positions of a chunk (16 to 128 measured within noise of each other)
MIN_LENGTH = 512  # below, the chunks' fixed cost (about 1.5 ms on a CPU) is not repaid
MAX_WORK = 128  # most B N^2: the chunks' forwards cost about 12 ns a B N^2 a position, the plain
# forward's two kernels about 3.7 us a position (a CPU, one thread: scripts/bench_chain.py, table 10)
MAX_ELEMENTS = 2**24  # most B T N^2: the chunks' forward vectors (64 MiB in float32)


def pays(batch: int, length: int, states: int) -> bool:
    """Whether the chunks beat the plain scaled forward: long sequences, few states, a small batch."""
    work = batch * states**2
    return length >= MIN_LENGTH and work <= MAX_WORK and work * length <= MAX_ELEMENTS


def log_product(a: Tensor, b: Tensor) -> Tensor:
    """log(exp(a) @ exp(b)) of each of M pairs of matrices: a N x K x M, b K x J x M -> N x J x M,
    guarded (module docstring): one multiply-add of N x J x M a k, a log-sum-exp where an entry is
    below the threshold (a forbidden or far-behind entry: its exact log, -inf included)."""
    K = a.shape[1]
    row, column = detached_max(a, 1), detached_max(b, 0)  # N x 1 x M, 1 x J x M
    pa, pb = (a - row).exp(), (b - column).exp()
    h = pa[:, :1] * pb[:1]
    for k in range(1, K):
        h.addcmul_(pa[:, k : k + 1], pb[k : k + 1])
    out = h.clamp_min(torch.finfo(h.dtype).tiny).log_().add_(row).add_(column)
    bad = h < threshold(K, h.dtype)
    if bool(bad.any()):
        i, j, m = bad.nonzero(as_tuple=True)
        out[i, j, m] = logsumexp(a[i, :, m] + b[:, j, m].T)
    return out


def shifted(matrices: Tensor) -> tuple[Tensor, Tensor]:
    """N x N x L x B log-matrices shifted so that each one's largest entry is 0 (NEG for a matrix with
    no finite entry, which stays -inf), and the shifts summed over L in float64: (B,)."""
    top = matrices.amax((0, 1)).clamp_min(NEG)
    return matrices - top, top.double().sum(0)


def tree_product(matrices: Tensor) -> tuple[Tensor, Tensor]:
    """The product of each column's L log-matrices in order (N x N x L x B -> N x N x B) as a tree,
    shifted to max 0, and its log scale in float64 (B,)."""
    N, _, _, B = matrices.shape
    matrices, scale = shifted(matrices)
    while matrices.shape[2] > 1:
        L = matrices.shape[2]
        even = matrices[:, :, 0 : L - 1 : 2].reshape(N, N, -1)
        odd = matrices[:, :, 1::2].reshape(N, N, -1)
        pairs, shift = shifted(log_product(even, odd).view(N, N, L // 2, B))
        scale += shift
        matrices = torch.cat([pairs, matrices[:, :, -1:]], 2) if L % 2 else pairs
    return matrices[:, :, 0], scale


@dataclass
class Chunks:
    """A batch cut into chunks: each sequence's first chunk of 1..L positions and q full chunks of L.

    u: B x T x N, the folded unary less each position's largest entry (``top``, in ``log_scale``);
    first_length, q: (B,); first: B x N, the exact log forward at the first chunk's end, less its scale
    (in ``log_scale``); sequence, index: (n,) each, the full chunks (a sequence, its chunk 0..q-1);
    positions: n x L, their positions; matrices: N x N x Q x B float64 log-matrices, chunk c of
    sequence b at [:, :, c, b] (from each state before it to each state at its end), each less its
    largest entry (in ``log_scale``), the identity past q (None where no sequence has a full chunk):
    float64, since a row may lie thousands of nats below another, where float32 keeps 1e-3 nats;
    log_scale: (B,) float64, what was taken out of each sequence's log Z."""

    u: Tensor
    first_length: Tensor
    q: Tensor
    first: Tensor
    sequence: Tensor
    index: Tensor
    positions: Tensor
    matrices: Tensor | None
    log_scale: Tensor


def chunks(chain: DenseChain, lengths: Tensor) -> Chunks | None:
    """The chunks of a chain with a shared transition (module docstring), without a gradient; a
    sequence whose first chunk has no path raises ``ZeroProbability``. None where a full chunk has no
    path from some state before it."""
    unary = chain.folded_unary()  # B x T x N
    B, T, N = unary.shape
    device = unary.device
    top = detached_max(unary).squeeze(-1)  # B x T: each position's largest unary, taken out
    inside = torch.arange(T, device=device) < lengths.unsqueeze(-1)
    log_scale = torch.where(inside, top, 0).double().sum(-1)
    u = unary - top.unsqueeze(-1)
    # each sequence: a first chunk of 1..CHUNK positions, then q full chunks (all of one length: the
    # batched forward's fast path)
    q = (lengths - 1) // CHUNK  # B
    first_length = lengths - CHUNK * q
    first, scales = block_scaled.log_forward_ends(
        scaled.ScaledChain(u[:, : int(first_length.max())], chain.transition, left_is_log=True),
        first_length,
    )
    log_scale += scales.double()
    Q = int(q.max())
    sequence, index = (torch.arange(Q, device=device) < q.unsqueeze(-1)).nonzero(as_tuple=True)
    positions = (first_length[sequence] + CHUNK * index).unsqueeze(-1) + torch.arange(CHUNK, device=device)
    matrices = None
    if Q > 0:
        rows_u = u[sequence.unsqueeze(-1), positions]  # n x CHUNK x N
        n = rows_u.shape[0]
        rows = scaled.ScaledChain(  # from each state before the chunk: n N rows
            rows_u.unsqueeze(1).expand(n, N, CHUNK, N).reshape(n * N, CHUNK, N),
            chain.transition,
            left_is_log=True,
            init=chain.transition.expand(n, N, N).reshape(n * N, N),
        )
        try:
            ends, scales = block_scaled.log_forward_ends(rows, lengths.new_full((n * N,), CHUNK))
        except scaled.ZeroProbability:  # a chunk with no path from some state
            return None
        ends, scales = ends.view(n, N, N), scales.view(n, N)
        peak = scales.amax(-1)  # n: each chunk's shift
        log_scale.index_add_(0, sequence, peak.double())
        identity = torch.full((N, N), float("-inf"), dtype=torch.float64, device=device).fill_diagonal_(0.0)
        stacked = identity.expand(B, Q, N, N).clone()  # float64: a row may lie thousands of nats below
        stacked[sequence, index] = ends.double() + (scales - peak.unsqueeze(-1)).unsqueeze(-1)
        matrices = stacked.permute(2, 3, 1, 0)
    return Chunks(u, first_length, q, first, sequence, index, positions, matrices, log_scale)


def log_partition(chain: DenseChain, lengths: Tensor) -> Tensor | None:
    """log Z (B,) of a chain with a shared transition, without a gradient; a sequence with no finite
    path raises ``ZeroProbability``. None where a chunk has no path from some state before it (the
    plain forward is the way)."""
    with torch.no_grad():
        cut = chunks(chain, lengths)
        if cut is None:
            return None
        log_z = cut.log_scale
        if cut.matrices is not None:
            total, scale = tree_product(cut.matrices)  # N x N x B
            log_z += scale
            last = logsumexp((cut.first.T.unsqueeze(1) + total).flatten(0, 1), 0)  # B
        else:
            last = logsumexp(cut.first, -1)
        log_z = (log_z + last.double()).to(cut.u.dtype)
        scaled.check_alive(log_z)
    return log_z
