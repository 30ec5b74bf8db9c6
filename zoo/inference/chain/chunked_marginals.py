"""Posterior marginals of long chains with few states in O(L + log T) rounds (no gradient): the chunks
of ``chunked``, with a message into and out of each.

The plain marginals (the gradient of log Z) run a forward and a backward of several kernels a
position; with few states and long sequences (hmmlearn's ``predict_proba`` ground) their fixed cost
decides the time. Here, with each sequence cut as ``chunked`` cuts it (a first chunk, q chunks of L,
and each full chunk's log-matrix M_c from each state before it to each state at its end):

* the prefix products M_1 ... M_c and the suffix products M_c ... M_q of every sequence are formed by
  a Hillis-Steele scan, log2 q rounds of batched ``chunked.log_product``;
* they give each chunk's forward message (the log forward vector at the end of the chunk before it,
  times the transition) and backward message (the log total score of the continuations from each
  state at its end);
* the posterior of a chunk's positions is that of a short chain: its unaries, the forward message
  added at its first position and the backward message at its last. All chunks' short chains run
  as one batch through the plain marginals (L rounds).

Accuracy. The messages are exact in log space up to a constant a chunk (every product matrix is
shifted to max 0; a short chain's marginals do not depend on the constants), made in float64 from the
float64 matrices and given to the short chains in their dtype less their max, and the products are
``chunked.log_product``'s, guarded where float underflow could bite. Every chunk having a path from
every state before it (else ``chunked.chunks`` says None) and every first chunk a path, each short
chain has one.

Shapes: B batch, T positions, N states, Q the most full chunks of a sequence; matrices N x N x Q x B.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from zoo.inference.chain import chunked
from zoo.inference.chain.factors import DenseChain
from zoo.inference.numerics import NEG, logsumexp


def marginals(
    chain: DenseChain, lengths: Tensor, plain: Callable[[DenseChain, Tensor], Tensor]
) -> Tensor | None:
    """p(z_t = i): B x T x N, zero past each length, without a gradient; ``plain(chain, lengths)``: the
    plain marginals, which the chunks' short chains run through. None where ``chunked.chunks`` is."""
    with torch.no_grad():
        cut = chunked.chunks(chain, lengths)
        if cut is None:
            return None
        B, T, N = cut.u.shape
        L, P = chunked.CHUNK, chain.transition
        # forward[c]: the log forward vector at the end of chunk c (0: the first chunk), Q+1 x B x N;
        # backward[c]: the log score of what follows chunk c from each state at its end
        first = cut.first.double()  # the messages in float64, as the matrices (``chunked.Chunks``)
        forward, backward = first.unsqueeze(0), torch.zeros_like(first).unsqueeze(0)
        if cut.matrices is not None:
            prefix = _prefix_products(cut.matrices)  # M_1 ... M_c at c - 1
            suffix = _prefix_products(cut.matrices.transpose(0, 1).flip(2)).flip(2).transpose(0, 1)
            into = first.T[:, None, None] + prefix  # N x N x Q x B: summed over the first index
            forward = torch.cat([forward, logsumexp(into, 0).permute(1, 2, 0)])
            backward = torch.cat([logsumexp(suffix, 1).permute(1, 2, 0), backward])
        rows = torch.arange(B, device=lengths.device)
        firsts = cut.u.new_zeros(B, L, N)  # the first chunks (past first_length: not read)
        firsts[:, : min(L, T)] = cut.u[:, :L]
        firsts[rows, cut.first_length - 1] += _top_zero_vectors(backward[0], firsts.dtype)
        full = cut.u[cut.sequence.unsqueeze(-1), cut.positions]  # n x L x N
        s, c = cut.sequence, cut.index
        full[:, 0] += _top_zero_vectors(logsumexp(forward[c, s].unsqueeze(-1) + P.double(), -2), full.dtype)
        full[:, -1] += _top_zero_vectors(backward[c + 1, s], full.dtype)
        short = plain(
            DenseChain(torch.cat([firsts, full]), P),
            torch.cat([cut.first_length, cut.first_length.new_full((len(s),), L)]),
        )
        out = torch.zeros_like(cut.u)
        out[:, :L] = short[:B, : min(L, T)]  # zero past each first chunk
        out[s.unsqueeze(-1), cut.positions] = short[B:]
    return out


def _prefix_products(matrices: Tensor) -> Tensor:
    """The inclusive prefix products along Q of N x N x Q x B log-matrices (the product of 0..c at c),
    each shifted to max 0: Hillis-Steele, log2 Q rounds of ``chunked.log_product``."""
    N, _, Q, B = matrices.shape
    out, step = _top_zero(matrices), 1
    while step < Q:
        earlier = out[:, :, : Q - step].reshape(N, N, -1)
        later = out[:, :, step:].reshape(N, N, -1)
        joined = _top_zero(chunked.log_product(earlier, later).view(N, N, Q - step, B))
        out = torch.cat([out[:, :, :step], joined], 2)
        step *= 2
    return out


def _top_zero_vectors(messages: Tensor, dtype: torch.dtype) -> Tensor:
    """... x N log-messages less each one's largest entry, in the unaries' ``dtype`` (what a short chain
    adds to them; its marginals do not depend on the constant)."""
    return (messages - messages.amax(-1, keepdim=True).clamp_min(NEG)).to(dtype)


def _top_zero(matrices: Tensor) -> Tensor:
    """N x N x ... log-matrices less each one's largest entry (a constant a chunk: the marginals do not
    depend on it)."""
    return matrices - matrices.amax((0, 1)).clamp_min(NEG)
