"""The k best state sequences of a chain (k-best Viterbi; supar's and torch-struct's ``topk``): n-best
lists for reranking, or the runners-up of a tagger.

The max-plus forward keeps, for each state at each position, the k best scores of the prefixes ending
there (B x N x k) and, for each, which (previous state, its rank) it extends: at each step the k best of
the N k candidates a state has, O(T N^2 k) on the dense form. The walk back from the k best (state,
rank) pairs at each sequence's last position gives k distinct paths, best first.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from zoo.inference.chain.factors import ChainFactors, DenseChain


class KBest(NamedTuple):
    """``LinearChain.topk``'s answer: ``scores`` k x B, each path's score summed from the potentials
    (differentiable, as ``max_score``; -inf for a rank without a path), and ``states`` k x B x T."""

    scores: Tensor
    states: Tensor


def k_best(factors: ChainFactors, lengths: Tensor, k: int) -> KBest:
    """The k best paths of any chain container (on its dense form) with their scores."""
    from zoo.inference.chain.engine import sequence_score  # it builds on the engines

    states = k_best_paths(factors.dense(), lengths, k)
    found = states[..., 0] >= 0  # k x B
    scores = sequence_score(factors, torch.where(found.unsqueeze(-1), states, 0), lengths)
    return KBest(torch.where(found, scores, float("-inf")), states)


def k_best_paths(chain: DenseChain, lengths: Tensor, k: int) -> Tensor:
    """k x B x T long, best first, -1 past each length; a rank that has no path of finite score (a
    chain of fewer than k) is -1 throughout."""
    with torch.no_grad():
        unary = chain.folded_unary()
        B, T, N = unary.shape
        steps = chain.per_position().unbind(1)  # B x N x N each (a view where shared)
        scores = unary.new_full((B, N, k), float("-inf"))
        scores[:, :, 0] = unary[:, 0]
        pointers = []  # per step: B x N x k, (previous state) k + (its rank)
        for t in range(1, T):
            candidates = scores.unsqueeze(2) + steps[t - 1].unsqueeze(-1)  # B x N(prev) x N x k
            best, pointer = candidates.transpose(1, 2).reshape(B, N, N * k).topk(k, -1)
            live = (lengths > t).view(B, 1, 1)  # a finished sequence keeps its scores
            scores = torch.where(live, best + unary[:, t].unsqueeze(-1), scores)
            pointers.append(pointer)
        final, at = scores.reshape(B, N * k).topk(k, -1)  # B x k
        state, rank = (at // k).T, (at % k).T  # k x B
        rows = torch.arange(B, device=unary.device).expand(k, B)
        paths = torch.full((k, B, T), -1, dtype=torch.long, device=unary.device)
        for t in range(T - 1, 0, -1):
            inside = lengths > t  # the walk starts at each sequence's last position
            paths[:, :, t] = torch.where(inside, state, -1)
            pointer = pointers[t - 1][rows, state, rank]
            state = torch.where(inside, pointer // k, state)
            rank = torch.where(inside, pointer % k, rank)
        paths[:, :, 0] = state
        return torch.where(torch.isfinite(final.T).unsqueeze(-1), paths, -1)
